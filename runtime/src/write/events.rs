//! Insert-once of events — one or a batch: one unordered `insert`, then, only if some were
//! refused as duplicates, one read of the stored events holding their ids or keys, to tell
//! retries (the same payload: already applied) from an id or key reused for another request.

use std::collections::HashMap;

use bson::{Bson, RawArrayBuf, RawDocumentBuf};
use ulid::Ulid;

use mongodb::ClientSession;

use super::batch::{Item, Outcomes, Writer};
use super::rounds::{or_contention, unnamed_violation, MAX_ROUNDS};
use super::send::{send, Verdict};
use crate::error::Error;
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

    fn fork(&self) -> Option<Self> {
        self.session.is_none().then_some(EventWriter {
            target: self.target,
            session: None,
        })
    }

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
        let found = read(target, events, &duplicates, tries, session.as_deref_mut()).await?;
        pending.clear();
        for (k, unnamed) in duplicates {
            match found.settle(target, events[k], unnamed) {
                Some(result) => results[k] = Some(result),
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

/// What the read after a round's duplicates found: the stored events holding a refused
/// event's `_id` or idempotency key, whole, since telling a retry from a reused key compares
/// their payloads.
struct Found {
    events: Vec<Stored>,
    /// Index into `events` by stored `_id` (as text).
    by_id: HashMap<String, usize>,
    /// Index into `events`, and the stored `_id`, by idempotency key.
    by_key: HashMap<String, (Ulid, usize)>,
}

/// One stored event the read found.
struct Stored {
    key: Option<String>,
    /// The token of the write that stored it (`None` for an event written before 0.3).
    token: Option<String>,
    doc: RawDocumentBuf,
}

impl Found {
    /// The outcome of `p`, refused as a duplicate (`unnamed`: by an index the engine did not
    /// name, with its message); `None` when neither its id nor its key is stored.
    fn settle(
        &self,
        target: &Target,
        p: &PreparedEvent,
        unnamed: Option<String>,
    ) -> Option<Result<InsertOutcome, Error>> {
        let (id, stored) = if let Some(&i) = self.by_id.get(&p.id.to_string()) {
            let stored = &self.events[i];
            // Our token: the document is the one this call sent, in an attempt whose reply
            // was lost. Another's: stored by another write — of this event, or of another
            // request under the same id, which its payload tells.
            if stored.token.as_deref() == Some(p.token.as_str()) {
                return Some(Ok(InsertOutcome::Inserted(p.id)));
            }
            (p.id, stored)
        } else if let Some(&(id, i)) = p.idempotency_key.as_ref().and_then(|k| self.by_key.get(k)) {
            (id, &self.events[i])
        } else {
            // Refused by an unnamed index, and neither its id nor its key is stored: the
            // index is the user's.
            return unnamed.map(|message| Err(unnamed_violation(target, p.id, message)));
        };
        Some(match p.differences(&stored.doc, stored.key.as_deref()) {
            Ok(fields) if fields.is_empty() => Ok(InsertOutcome::AlreadyApplied(id)),
            Ok(fields) => Err(Error::IdempotencyKeyReused {
                collection: target.namespace.clone(),
                id,
                key: stored.key.clone(),
                attempted: p.id,
                fields,
            }),
            Err(message) => Err(Error::UnexpectedDocument {
                collection: target.namespace.clone(),
                message: format!("the stored event {id} cannot be compared: {message}"),
            }),
        })
    }
}

/// One read: the stored events holding the `_id` or the idempotency key of a refused event,
/// whole documents.
async fn read(
    target: &Target,
    events: &[&PreparedEvent],
    duplicates: &[(usize, Option<String>)],
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Found, Error> {
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
    let docs: Vec<RawDocumentBuf> = op::find(target, filter, None, tries, session).await?;
    index(target, docs)
}

/// The read's documents, indexed by `_id` and by idempotency key.
fn index(target: &Target, docs: Vec<RawDocumentBuf>) -> Result<Found, Error> {
    let unexpected = |message: String| Error::UnexpectedDocument {
        collection: target.namespace.clone(),
        message,
    };
    let mut found = Found {
        events: Vec::with_capacity(docs.len()),
        by_id: HashMap::new(),
        by_key: HashMap::new(),
    };
    for doc in docs {
        let head: StoredEvent = bson::from_slice(doc.as_bytes())
            .map_err(|e| unexpected(format!("a stored event cannot be read: {e}")))?;
        let Bson::String(id) = head.id else { continue };
        let text = |b: Option<Bson>| match b {
            Some(Bson::String(s)) => Some(s),
            _ => None,
        };
        let key = text(head.idempotency_key);
        if let Some(key) = &key {
            let parsed = id.parse::<Ulid>().map_err(|_| {
                unexpected(format!(
                    "_id {id} of the event with idempotency key {key:?} is not a ULID"
                ))
            })?;
            found
                .by_key
                .insert(key.clone(), (parsed, found.events.len()));
        }
        found.by_id.insert(id, found.events.len());
        found.events.push(Stored {
            key,
            token: text(head.token),
            doc,
        });
    }
    Ok(found)
}
