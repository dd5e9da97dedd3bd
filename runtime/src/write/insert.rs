//! Insert-once of events — one or a batch: one unordered `insert`, then, only if some were
//! refused as duplicates, one read to tell retries (already applied) from real conflicts.

use std::collections::HashMap;

use bson::{Bson, RawArrayBuf, RawDocumentBuf};
use ulid::Ulid;

use mongodb::ClientSession;

use super::batch::{Item, Outcomes, Writer};
use super::rounds::{or_contention, unnamed_violation, MAX_ROUNDS};
use super::send::{send, Verdict};
use crate::error::{classify, Error};
use crate::names::IDEMPOTENCY_FIELD;
use crate::op::{self, Command, Refusal, Session, StoredEvent, Target};
use crate::outcome::InsertOutcome;
use crate::retry::Attempts;
use crate::stored::PreparedEvent;

/// The batch runner's writer for events, in the call's session.
pub(crate) struct EventWriter<'a> {
    pub(crate) target: &'a Target,
    pub(crate) session: Option<&'a mut ClientSession>,
}

impl<D: Send + Sync> Writer<D> for EventWriter<'_> {
    type Prepared = PreparedEvent;
    type Outcome = InsertOutcome;

    async fn write(
        &mut self,
        batch: &[Item<PreparedEvent, D>],
        tries: &mut Attempts,
    ) -> Result<Outcomes<InsertOutcome>, Error> {
        let events: Vec<&PreparedEvent> = batch.iter().map(|i| &i.prepared).collect();
        insert_batch(self.target, &events, tries, self.session.as_deref_mut()).await
    }
}

/// Inserts one batch; one result per event. `Err` only for a failure of the whole batch.
async fn insert_batch(
    target: &Target,
    events: &[&PreparedEvent],
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Outcomes<InsertOutcome>, Error> {
    let mut results: Vec<Option<Result<InsertOutcome, Error>>> =
        (0..events.len()).map(|_| None).collect();
    let mut pending: Vec<usize> = (0..events.len()).collect();
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        let session_now = session.as_deref_mut();
        let duplicates =
            send_events(target, events, &pending, &mut results, tries, session_now).await?;
        if duplicates.is_empty() {
            break;
        }
        let (by_id, by_key) = read(target, events, &duplicates, session.as_deref_mut()).await?;
        pending.clear();
        for (k, unnamed) in duplicates {
            let p = events[k];
            let stored = if let Some(token) = by_id.get(&p.id.to_string()) {
                // Our token: the document is the one this call sent, in an attempt whose reply
                // was lost. Another's: the same event, stored by another write.
                if token.as_deref() == Some(p.token.as_str()) {
                    results[k] = Some(Ok(InsertOutcome::Inserted(p.id)));
                    continue;
                }
                Some(p.id)
            } else {
                p.idempotency_key
                    .as_ref()
                    .and_then(|key| by_key.get(key))
                    .copied()
            };
            match stored {
                Some(id) => results[k] = Some(Ok(InsertOutcome::AlreadyApplied(id))),
                // Refused by an unnamed index, and neither its id nor its key is stored: the
                // index is the user's.
                None if unnamed.is_some() => {
                    let message = unnamed.unwrap_or_default();
                    results[k] = Some(Err(unnamed_violation(target, p.id, message)))
                }
                // Refused as a duplicate yet not found: deleted in between. Insert again.
                None => pending.push(k),
            }
        }
    }
    Ok(or_contention(results, target, |k| events[k].id))
}

/// Sends the pending events; settles the inserted and the refused-for-good, and returns the
/// ones refused as duplicates — of `_id` or of the idempotency key, or of an index the engine
/// did not name (with its message).
async fn send_events(
    target: &Target,
    events: &[&PreparedEvent],
    pending: &[usize],
    results: &mut [Option<Result<InsertOutcome, Error>>],
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Vec<(usize, Option<String>)>, Error> {
    let mut duplicates = Vec::new();
    let bodies: Vec<_> = pending.iter().map(|&k| &events[k].body).collect();
    let id = |i: usize| events[pending[i]].id;
    let settle = |carried: &[usize], verdict| {
        let sent = carried.iter().map(|&i| pending[i]);
        match verdict {
            // Refused without saying which, or where, or maybe applied: the read decides each.
            Verdict::Refused(_) | Verdict::Unplaced(_) | Verdict::Unknown => {
                duplicates.extend(sent.map(|k| (k, None)))
            }
            Verdict::Replied { refusals, .. } => {
                for (k, refusal) in sent.zip(refusals) {
                    let Some(refusal) = refusal else {
                        results[k] = Some(Ok(InsertOutcome::Inserted(events[k].id)));
                        continue;
                    };
                    match refusal.permanent(target, events[k].id) {
                        Some(e) => results[k] = Some(Err(e)),
                        None => {
                            let unnamed = match refusal {
                                Refusal::Unnamed { message } => Some(message),
                                _ => None,
                            };
                            duplicates.push((k, unnamed));
                        }
                    }
                }
            }
        }
    };
    send(
        target,
        Command::Insert,
        &bodies,
        false,
        id,
        tries,
        session,
        settle,
    )
    .await?;
    Ok(duplicates)
}

/// One read: which of the refused events are stored, by id (with the stored token) or by
/// idempotency key.
async fn read(
    target: &Target,
    events: &[&PreparedEvent],
    duplicates: &[(usize, Option<String>)],
    session: Session<'_>,
) -> Result<(HashMap<String, Option<String>>, HashMap<String, Ulid>), Error> {
    let mut ids = RawArrayBuf::new();
    let mut keys = RawArrayBuf::new();
    for &(k, _) in duplicates {
        ids.push(events[k].id.to_string());
        if let Some(key) = &events[k].idempotency_key {
            keys.push(key.as_str());
        }
    }
    let either = |field: &str, values: RawArrayBuf| {
        let mut cond = RawDocumentBuf::new();
        cond.append("$in", values);
        let mut d = RawDocumentBuf::new();
        d.append(field, cond);
        d
    };
    let mut or = RawArrayBuf::new();
    or.push(either("_id", ids));
    or.push(either(IDEMPOTENCY_FIELD, keys));
    let mut filter = RawDocumentBuf::new();
    filter.append("$or", or);
    let found: Vec<StoredEvent> = op::find(target, filter, Some(StoredEvent::PROJECTION), session)
        .await
        .map_err(classify)?;
    let mut by_id = HashMap::new();
    let mut by_key = HashMap::new();
    for d in found {
        let Bson::String(id) = d.id else { continue };
        if let Some(Bson::String(key)) = d.idempotency_key {
            let parsed = id.parse::<Ulid>().map_err(|_| Error::UnexpectedDocument {
                collection: target.namespace.clone(),
                message: format!(
                    "_id {id} of the event with idempotency key {key:?} is not a ULID"
                ),
            })?;
            by_key.insert(key, parsed);
        }
        let token = match d.token {
            Some(Bson::String(target)) => Some(target),
            _ => None,
        };
        by_id.insert(id, token);
    }
    Ok((by_id, by_key))
}
