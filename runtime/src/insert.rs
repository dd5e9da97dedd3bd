//! Insert-once of events — one or a batch: one unordered `insert`, then, only if some were
//! refused as duplicates, one read to tell retries (already applied) from real conflicts.

use std::collections::HashMap;

use bson::{Bson, RawArrayBuf, RawDocumentBuf};
use ulid::Ulid;

use crate::error::{classify, server_code, Error};
use crate::names::IDEMPOTENCY_FIELD;
use crate::op::{self, Refusal, Session, StoredEvent, Target};
use crate::outcome::InsertOutcome;
use crate::stored::PreparedEvent;
use crate::upsert::{or_contention, MAX_ROUNDS};

type Outcomes = Vec<Result<InsertOutcome, Error>>;

/// Inserts one batch; one result per event. `Err` only for a failure of the whole batch.
pub(crate) async fn insert_batch(
    t: &Target,
    events: &[&PreparedEvent],
    mut session: Session<'_>,
) -> Result<Outcomes, Error> {
    let mut results: Vec<Option<Result<InsertOutcome, Error>>> =
        (0..events.len()).map(|_| None).collect();
    let mut pending: Vec<usize> = (0..events.len()).collect();
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        let duplicates = send(t, events, &pending, &mut results, session.as_deref_mut()).await?;
        if duplicates.is_empty() {
            break;
        }
        let (by_id, by_key) = read(t, events, &duplicates, session.as_deref_mut()).await?;
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
                    results[k] = Some(Err(Error::UniqueIndexViolation {
                        collection: t.namespace.clone(),
                        id: p.id,
                        index: "(an index the engine did not name)".into(),
                        key: unnamed.unwrap_or_default(),
                    }))
                }
                // Refused as a duplicate yet not found: deleted in between. Insert again.
                None => pending.push(k),
            }
        }
    }
    Ok(or_contention(results, t, |k| events[k].id))
}

/// Sends the pending events; settles the inserted and the refused-for-good, and returns the
/// ones refused as duplicates — of `_id` or of the idempotency key, or of an index the engine
/// did not name (with its message).
async fn send(
    t: &Target,
    events: &[&PreparedEvent],
    pending: &[usize],
    results: &mut [Option<Result<InsertOutcome, Error>>],
    mut session: Session<'_>,
) -> Result<Vec<(usize, Option<String>)>, Error> {
    let limits = t.deployment.limits();
    let mut duplicates = Vec::new();
    let sizes = pending.iter().map(|&k| events[k].body.as_bytes().len());
    for chunk in op::chunks(sizes, limits.max_command_bytes, limits.max_documents) {
        let sent = &pending[chunk];
        let docs: Vec<&RawDocumentBuf> = sent.iter().map(|&k| &events[k].body).collect();
        let reply = match op::insert(t, &docs, session.as_deref_mut()).await {
            Ok(reply) => reply,
            Err(e) if server_code(&e) == Some(op::write::DUPLICATE_KEY_CODE) => {
                // Refused without saying which: the read decides each.
                duplicates.extend(sent.iter().map(|&k| (k, None)));
                continue;
            }
            Err(e) => return Err(classify(e)),
        };
        reply.write_concern(t, events[sent[0]].id)?;
        let mut refusals: HashMap<usize, Refusal> = reply
            .write_errors
            .iter()
            .map(|e| (e.index, e.refusal()))
            .collect();
        for (i, &k) in sent.iter().enumerate() {
            let id = events[k].id;
            results[k] = match refusals.remove(&i) {
                None => Some(Ok(InsertOutcome::Inserted(id))),
                Some(refusal) => match refusal.permanent(t, id) {
                    Some(e) => Some(Err(e)),
                    None => {
                        let unnamed = match refusal {
                            Refusal::Unnamed { message } => Some(message),
                            _ => None,
                        };
                        duplicates.push((k, unnamed));
                        None
                    }
                },
            };
        }
    }
    Ok(duplicates)
}

/// One read: which of the refused events are stored, by id (with the stored token) or by
/// idempotency key.
async fn read(
    t: &Target,
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
    let found: Vec<StoredEvent> = op::find(t, filter, Some(StoredEvent::PROJECTION), session)
        .await
        .map_err(classify)?;
    let mut by_id = HashMap::new();
    let mut by_key = HashMap::new();
    for d in found {
        let Bson::String(id) = d.id else { continue };
        if let Some(Bson::String(key)) = d.idempotency_key {
            let parsed = id.parse::<Ulid>().map_err(|_| Error::UnexpectedDocument {
                collection: t.namespace.clone(),
                message: format!(
                    "_id {id} of the event with idempotency key {key:?} is not a ULID"
                ),
            })?;
            by_key.insert(key, parsed);
        }
        let token = match d.token {
            Some(Bson::String(t)) => Some(t),
            _ => None,
        };
        by_id.insert(id, token);
    }
    Ok((by_id, by_key))
}
