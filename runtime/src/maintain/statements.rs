//! The apply half of maintenance: its writes, sent through the write engine's one send loop
//! ([`apply`], one result per document) or as set-based statements over many `_id`s
//! ([`apply_set`]).

use bson::{Bson, RawDocumentBuf};
use ulid::Ulid;

use crate::error::Error;
use crate::names::IDENTITY_FIELD;
use crate::op::{Command, Refusal, Target};
use crate::retry::{Attempts, RetryPolicy};
use crate::write::send::{send, Verdict};

/// Sends `items` (documents to insert, or `update`/`delete` statements, each for the document
/// with the given id) in commands within the engine's limits. One result per item: `Ok` when
/// it applied to exactly one document. A statement that matched nothing met a document
/// changed since it was read ([`Error::ConcurrentChange`]). Commands whose reply cannot be
/// placed per statement are sent again one statement each. `Err` only for a failure of the
/// whole step (network, ...): every step is safe to repeat.
///
/// A throttled command waits as the engine asks under [`RetryPolicy::default`]: maintenance
/// has no policy of its own, and an engine that throttles (Cosmos DB) would otherwise stop a
/// run at its first busy answer.
pub(crate) async fn apply(
    target: &Target,
    kind: Command,
    items: Vec<(Ulid, RawDocumentBuf)>,
) -> Result<Vec<Result<(), Error>>, Error> {
    let docs: Vec<&RawDocumentBuf> = items.iter().map(|(_, d)| d).collect();
    let mut out: Vec<Option<Result<(), Error>>> = (0..items.len()).map(|_| None).collect();
    let mut unclear = Vec::new();
    let mut tries = RetryPolicy::default().begin("maintain", &target.namespace);
    let id = |k: usize| items[k].0;
    let all = |carried: &[usize], verdict| match settle(target, kind, carried, &items, verdict) {
        Some(results) => carried
            .iter()
            .zip(results)
            .for_each(|(&k, r)| out[k] = Some(r)),
        None => unclear.extend_from_slice(carried),
    };
    send(target, kind, &docs, false, id, &mut tries, None, all).await?;
    let again: Vec<&RawDocumentBuf> = unclear.iter().map(|&k| &items[k].1).collect();
    let id = |i: usize| items[unclear[i]].0;
    let one = |carried: &[usize], verdict| {
        let k = unclear[carried[0]];
        out[k] = settle(target, kind, &[k], &items, verdict).and_then(|mut r| r.pop());
    };
    send(target, kind, &again, true, id, &mut tries, None, one).await?;
    Ok(out
        .into_iter()
        .zip(&items)
        .map(|(result, (id, _))| result.unwrap_or_else(|| Err(changed(target, *id))))
        .collect())
}

/// What one command did to each of its items; `None` when its reply does not say.
fn settle(
    target: &Target,
    kind: Command,
    carried: &[usize],
    items: &[(Ulid, RawDocumentBuf)],
    verdict: Verdict,
) -> Option<Vec<Result<(), Error>>> {
    let part: Vec<Ulid> = carried.iter().map(|&k| items[k].0).collect();
    let error = |k: usize, refusal: Option<Refusal>| {
        let id = part[k];
        Err(match refusal {
            Some(r) => r
                .permanent(target, id)
                .unwrap_or_else(|| changed(target, id)),
            None => changed(target, id),
        })
    };
    match verdict {
        Verdict::Refused(refusal) if part.len() == 1 => Some(vec![error(0, Some(refusal))]),
        // Maybe applied: a maintenance step met a document it cannot vouch for; the next run
        // finds what is stored.
        Verdict::Unknown if part.len() == 1 => Some(vec![error(0, None)]),
        Verdict::Refused(_) | Verdict::Unplaced(_) | Verdict::Unknown => None,
        Verdict::Replied { refusals, n } => {
            let expected = i64::try_from(part.len()).unwrap_or(i64::MAX);
            let clean = refusals.iter().all(Option::is_none);
            if clean && (kind == Command::Insert || n == expected) {
                return Some(part.iter().map(|_| Ok(())).collect());
            }
            if part.len() == 1 {
                return Some(vec![error(0, refusals.into_iter().next().flatten())]);
            }
            // Only an insert's reply places what each document did.
            (kind == Command::Insert).then(|| {
                let placed = refusals.into_iter().enumerate();
                placed
                    .map(|(k, r)| r.map_or(Ok(()), |r| error(k, Some(r))))
                    .collect()
            })
        }
    }
}

fn changed(target: &Target, id: Ulid) -> Error {
    Error::ConcurrentChange {
        collection: target.namespace.clone(),
        id: id.to_string(),
    }
}

pub(crate) use crate::op::command::{delete_one, fragment, statement};

/// A set-based write over many `_id`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetOp {
    /// Delete them.
    Delete,
    /// Unset `_nk_identity` on them.
    Release,
}

/// Ids per set-based statement (fewer where the engine's command size says so).
const SET_CHUNK: usize = 10_000;

/// One statement per chunk of ids (`{_id: {$in: ids}}`) — FerretDB 1.x scans the collection
/// once per statement whatever its filter, so per-document statements cost a scan each (43 ms
/// apiece at 4,000 documents, measured). There, `$in` is also a linear search per document, so
/// each chunk is one BSON type, sorted, with the range it spans in front (`$gte`/`$lte`,
/// which every id of the chunk satisfies): documents outside the range are rejected before the
/// search. Returns how many documents matched (release) or were deleted.
///
/// A statement the engine refuses as busy (the command whole, or the statement alone, as
/// Cosmos DB does) applied nothing and is sent again after the wait the engine names, under
/// [`RetryPolicy::default`] as [`apply`]'s are. One whose outcome the engine leaves unknown
/// ends the step with [`Error::ConcurrentChange`]: the next run finds what is stored.
pub(crate) async fn apply_set(target: &Target, op: SetOp, ids: &[Bson]) -> Result<u64, Error> {
    let mut n = 0;
    let mut tries = RetryPolicy::default().begin("maintain", &target.namespace);
    for chunk in set_chunks(target, ids) {
        let q = match (target.deployment.scans_every_filter(), &chunk[..]) {
            (true, [lo, .., hi]) if ranged(lo) => {
                bson::doc! {"_id": {"$gte": lo.clone(), "$lte": hi.clone(), "$in": chunk.clone()}}
            }
            _ => bson::doc! {"_id": {"$in": chunk.clone()}},
        };
        let mut s = RawDocumentBuf::new();
        s.append("q", fragment(&q)?);
        let kind = match op {
            SetOp::Delete => {
                s.append("limit", 0);
                Command::Delete
            }
            SetOp::Release => {
                let u = bson::doc! {"$unset": {IDENTITY_FIELD: ""}};
                s.append("u", fragment(&u)?);
                s.append("multi", true);
                Command::Update
            }
        };
        n += send_set(target, kind, &s, &chunk, &mut tries).await?;
    }
    Ok(n)
}

/// One set-based statement on `chunk` through the write engine's send loop, which sends it
/// again while the engine refuses it as busy: how many documents it matched or deleted.
async fn send_set(
    target: &Target,
    kind: Command,
    statement: &RawDocumentBuf,
    chunk: &[Bson],
    tries: &mut Attempts,
) -> Result<u64, Error> {
    // These documents have no derived id to name: the message names the first of them.
    let first = crate::stored::id_text(&chunk[0]);
    let failed = |e: Error| match e {
        Error::WriteFailed { code, message, .. } => Error::WriteFailed {
            collection: target.namespace.clone(),
            id: Ulid::nil(),
            code,
            message: format!(
                "{message} (a {kind:?} of {} documents from _id {first})",
                chunk.len()
            ),
        },
        e => e,
    };
    // As `settle` does for a statement of one document: what a refusal means, and an outcome
    // the engine leaves unknown is a change the next run finds.
    let refused = |r: Option<Refusal>| {
        let permanent = r.and_then(|r| r.permanent(target, Ulid::nil()));
        failed(permanent.unwrap_or_else(|| Error::ConcurrentChange {
            collection: target.namespace.clone(),
            id: first.clone(),
        }))
    };
    let mut verdict = None;
    let id = |_| Ulid::nil();
    let settle = |_: &[usize], v| verdict = Some(v);
    let sent = send(target, kind, &[statement], false, id, tries, None, settle).await;
    sent.map_err(&failed)?;
    match verdict {
        Some(Verdict::Replied { refusals, n }) => match refusals.into_iter().next().flatten() {
            None => Ok(u64::try_from(n).unwrap_or(0)),
            Some(r) => Err(refused(Some(r))),
        },
        Some(Verdict::Refused(r)) => Err(refused(Some(r))),
        Some(Verdict::Unplaced(rs)) => Err(refused(rs.into_iter().next())),
        Some(Verdict::Unknown) | None => Err(refused(None)),
    }
}

/// Ids whose type orders by bytes the same way on every engine (ObjectId, string) and so can
/// be bracketed by a range.
fn ranged(id: &Bson) -> bool {
    matches!(id, Bson::ObjectId(_) | Bson::String(_))
}

/// `ids` cut into chunks of at most [`SET_CHUNK`] ids and the engine's command bytes; where
/// ranges are used, each chunk holds one sorted type.
fn set_chunks(target: &Target, ids: &[Bson]) -> Vec<Vec<Bson>> {
    let mut groups: [Vec<Bson>; 3] = Default::default();
    for id in ids {
        let g = match id {
            Bson::ObjectId(_) => 0,
            Bson::String(_) => 1,
            _ => 2,
        };
        groups[g].push(id.clone());
    }
    groups[0].sort_by_key(|b| b.as_object_id().map(|o| o.bytes()));
    groups[1].sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    let limit = target.deployment.limits().max_command_bytes / 2;
    let mut out = Vec::new();
    for group in groups {
        let sizes = group.iter().map(|id| 8 + id_bytes(id));
        for r in crate::op::chunks(sizes, limit, SET_CHUNK) {
            out.push(group[r].to_vec());
        }
    }
    out
}

/// The BSON size of an `_id` value (near enough for cutting commands).
fn id_bytes(id: &Bson) -> usize {
    match id {
        Bson::ObjectId(_) => 12,
        Bson::String(s) => s.len() + 5,
        other => bson::to_vec(&bson::doc! {"v": other.clone()}).map_or(64, |v| v.len()),
    }
}
