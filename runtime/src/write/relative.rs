//! A relative update applied at most once per operation: the change and the operation's
//! record in one single-document `update`, whose filter admits it only while the document
//! does not record the operation and the operation is newer than everything pruned from the
//! record. A statement that matches nothing is explained by one read: applied already, reused
//! with another change, too old, a record due for pruning, or no document.

use bson::{doc, Bson, Document, RawDocumentBuf};
use serde::Deserialize;
use std::time::Instant;

use ulid::Ulid;

use super::rounds::MAX_ROUNDS;
use super::send::{send, Verdict};
use crate::change::{operators, Change, OpId};
use crate::error::{Error, FieldNameProblem};
use crate::names::{
    DELETED_FIELD, IDENTITY_FIELD, OPS_FIELD, OPS_PRUNED_TO_FIELD, OP_HASH, OP_KEY, OP_TIME,
};
use crate::op::answer::classify;
use crate::op::{self, Command, Session, ShardKey, Target};
use crate::outcome::ApplyOutcome;
use crate::retry::{within, Attempts};
use crate::stored::name_problem;

/// The longest operation key: a record entry stays small.
const MAX_KEY_BYTES: usize = 512;

/// One validated relative update, ready to send.
#[derive(Debug)]
pub(crate) struct Update {
    key: String,
    at: i64,
    /// Content hash (v2 rules) of the change's operators: the payload an operation id names.
    hash: String,
    /// The change's operators and the record's `$push`.
    operators: Document,
    retain: usize,
}

impl Update {
    pub(crate) fn of(
        target: &Target,
        relative: &[&str],
        (op, change, retain): (&OpId, &Change, usize),
    ) -> Result<Self, Error> {
        let invalid = |message: String| Error::InvalidChange {
            collection: target.namespace.clone(),
            message,
        };
        check_key(op.key()).map_err(&invalid)?;
        let at = i64::try_from(op.at_millis())
            .ok()
            .filter(|ms| (0..=crate::key::MAX_TIMESTAMP_MS as i64).contains(ms))
            .ok_or_else(|| {
                invalid(format!(
                    "operation {:?} has time {} ms, outside 1970..=MAX_TIMESTAMP_MS",
                    op.key(),
                    op.at_millis()
                ))
            })?;
        let mut seen: Vec<String> = Vec::new();
        for (_, path, _) in &change.parts {
            check_path(path.segments(), relative).map_err(&invalid)?;
            let joined = path.segments().join(".");
            if seen.contains(&joined) {
                return Err(invalid(format!(
                    "the change names `{joined}` twice; one update changes a field once"
                )));
            }
            seen.push(joined);
        }
        let mut operators = operators(change);
        let hash = crate::content::content_hash_v2(&operators, &[])?.to_string();
        let entry = doc! {OP_KEY: op.key(), OP_TIME: at, OP_HASH: &hash};
        // Beside the change's own `$push`, if it has one (an insert would replace it).
        match operators.get_mut("$push") {
            Some(bson::Bson::Document(push)) => {
                push.insert(OPS_FIELD, entry);
            }
            _ => {
                operators.insert("$push", doc! {OPS_FIELD: entry});
            }
        }
        Ok(Update {
            key: op.key().to_string(),
            at,
            hash,
            operators,
            retain,
        })
    }
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        Err("the operation key is empty".into())
    } else if key.len() > MAX_KEY_BYTES {
        Err(format!(
            "the operation key is {} bytes; at most {MAX_KEY_BYTES}",
            key.len()
        ))
    } else if let Some(at) = key.find('\0') {
        Err(format!(
            "the operation key {key:?} holds a NUL at byte {at}"
        ))
    } else {
        Ok(())
    }
}

/// Each segment is data: a name or an index, never a path or an operator; the first is a
/// relative field of the type.
fn check_path(segments: &[String], relative: &[&str]) -> Result<(), String> {
    let Some(first) = segments.first() else {
        return Err("a change has an empty field path".into());
    };
    for (i, s) in segments.iter().enumerate() {
        let problem = match name_problem(s, true) {
            // Below the top level, `_id` and `_nk_` names are the user's own.
            Some(FieldNameProblem::Reserved) if i > 0 => None,
            Some(problem) => Some(problem.to_string()),
            None if s.contains('\0') => Some("holds a NUL".to_string()),
            None => None,
        };
        if let Some(problem) = problem {
            return Err(format!("the path segment {s:?} of {segments:?} {problem}"));
        }
    }
    if !relative.contains(&first.as_str()) {
        return Err(format!(
            "`{first}` is not a `#[natural_key(relative)]` field of the type (those are \
             {relative:?}): an upsert writes every other field and would undo or repeat the \
             change; mark the field"
        ));
    }
    Ok(())
}

/// The record as the miss's read sees it.
#[derive(Debug, Deserialize)]
struct Record {
    /// The shard key, read where every write filter must carry it.
    #[serde(rename = "_nk_identity", default)]
    identity: Option<Bson>,
    #[serde(rename = "_nk_ops", default)]
    ops: Vec<Entry>,
    #[serde(rename = "_nk_ops_pruned_to")]
    pruned_to: Option<i64>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
struct Entry {
    o: String,
    t: i64,
    h: String,
}

/// What one attempt's statement did.
enum Sent {
    Matched,
    Missed,
    /// A reply that does not say (the engine's outcome unknown, or a refusal without place).
    Unclear,
}

/// After our statement matched on an engine that checks the filter outside its write: a
/// concurrent statement that read the document before ours wrote it writes its stale copy
/// within about as long as a statement takes. Wait that long (since `started`), so that a copy
/// that dropped our change is seen and the change sent again; at most half of what the
/// deadline leaves, so the read still has time. (`started` also covers waits for throttles:
/// longer, never shorter, than the statement.)
async fn stale_copies(tries: &mut Attempts, started: Instant) {
    let left = tries.attempt_timeout();
    tokio::time::sleep(started.elapsed().min(left / 2)).await;
}

pub(crate) async fn apply(
    target: &Target,
    id: Ulid,
    update: &Update,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<ApplyOutcome, Error> {
    // Rounds that settled nothing: a failed attempt (a lost reply, say) is the policy's to
    // bound, not a round.
    let mut rounds = 0;
    // Whether an attempt of this call may have been applied without its reply saying so.
    let mut landed = false;
    let key = shard_key(target, id, tries, session.as_deref_mut()).await?;
    let key = key.as_ref();
    // This call's statement matched, and no read since showed its change dropped.
    let mut matched = false;
    loop {
        let started = Instant::now();
        let limit = tries.attempt_timeout();
        let sending = send_statement(target, id, key, update, tries, session.as_deref_mut());
        let sent = match within(limit, sending).await {
            Ok(sent) => sent,
            Err(e) => {
                // A lost reply or a timeout: the statement may have been applied.
                landed = true;
                tries.failed_or_timed_out(e).await?;
                continue;
            }
        };
        landed |= matches!(sent, Sent::Unclear);
        matched |= matches!(sent, Sent::Matched);
        if matches!(sent, Sent::Matched) {
            if target.deployment.atomic_update_filters() {
                return Ok(ApplyOutcome::Applied);
            }
            stale_copies(tries, started).await;
        }
        let limit = tries.attempt_timeout();
        let record = match within(limit, read(target, id, tries, session.as_deref_mut())).await {
            Ok(record) => record,
            Err(e) => {
                tries.failed_or_timed_out(e).await?;
                continue;
            }
        };
        let Some(record) = record else {
            return Err(not_found(target, id));
        };
        // Where the engine checks a filter outside its write (FerretDB 1.x), a matched
        // statement may still have been overwritten by a concurrent writer that read the
        // document before it: the record says whether it stayed. Record and change are written
        // together, so a missing record means a missing change.
        match explain(target, id, update, &record, landed) {
            Explained::Recorded if matched => return Ok(ApplyOutcome::Applied),
            Explained::Recorded => return Ok(ApplyOutcome::AlreadyApplied),
            Explained::Refused(e) => return Err(e),
            Explained::Prune(cut) => {
                // Its reply can be lost like the statement's: retried under the policy. Sent
                // again, a prune that did apply misses (the record is no longer as read), and
                // the next round reads again either way.
                let limit = tries.attempt_timeout();
                let pruned = prune(target, id, key, &record, cut, session.as_deref_mut());
                if let Err(e) = within(limit, pruned).await {
                    tries.failed_or_timed_out(e).await?;
                    continue;
                }
            }
            Explained::Again => matched = false,
        }
        rounds += 1;
        if rounds >= MAX_ROUNDS {
            return Err(Error::Contention {
                collection: target.namespace.clone(),
                id,
                attempts: MAX_ROUNDS,
            });
        }
    }
}

fn not_found(target: &Target, id: Ulid) -> Error {
    Error::DocumentNotFound {
        collection: target.namespace.clone(),
        id,
    }
}

/// On a collection sharded (or partitioned) on `_nk_identity` every write filter carries it,
/// as upserts' do, so that the engine can route it; an apply, given only the `_id`, reads it
/// once first. `None` elsewhere: the filter is by `_id`. Sharded on a key field (a tenant id),
/// an apply's statements go by `_id` to every shard, which a derived `_id` matches on one: the
/// identity it comes from holds the tenant.
async fn shard_key(
    target: &Target,
    id: Ulid,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Option<Bson>, Error> {
    if target.shard_key != Some(ShardKey::Identity) {
        return Ok(None);
    }
    loop {
        let limit = tries.attempt_timeout();
        match within(limit, read(target, id, tries, session.as_deref_mut())).await {
            // A document written by other code may lack it: stored so, its shard key is null.
            Ok(Some(record)) => return Ok(Some(record.identity.unwrap_or(Bson::Null))),
            Ok(None) => return Err(not_found(target, id)),
            Err(e) => tries.failed_or_timed_out(e).await?,
        }
    }
}

/// The filter of a statement on the document: its `_id`, not a tombstone (a deleted document
/// takes no operation), and its shard key where one is due.
fn on_document(id: Ulid, key: Option<&Bson>) -> Document {
    let mut q = doc! {"_id": id.to_string(), DELETED_FIELD: Bson::Null};
    if let Some(key) = key {
        q.insert(IDENTITY_FIELD, key.clone());
    }
    q
}

enum Explained {
    Recorded,
    Refused(Error),
    /// The record is full: keep these entries, prune up to this time.
    Prune((Vec<Entry>, i64)),
    /// Changed since the statement (another writer's operation or prune): send again.
    Again,
}

/// What the record read after a statement says. `landed`: an earlier attempt of this call
/// may have applied the operation, so a record pruned past it cannot say it was not.
fn explain(target: &Target, id: Ulid, update: &Update, record: &Record, landed: bool) -> Explained {
    if let Some(e) = record.ops.iter().find(|e| e.o == update.key) {
        if e.t == update.at && e.h == update.hash {
            return Explained::Recorded;
        }
        return Explained::Refused(Error::OperationReused {
            collection: target.namespace.clone(),
            id,
            op: update.key.clone(),
        });
    }
    if let Some(pruned_to) = record.pruned_to.filter(|&p| update.at <= p) {
        let (collection, op, at_ms) = (target.namespace.clone(), update.key.clone(), update.at);
        return Explained::Refused(if landed {
            Error::OperationOutcomeUnknown {
                collection,
                id,
                op,
                at_ms,
                pruned_to_ms: pruned_to,
            }
        } else {
            Error::OperationExpired {
                collection,
                id,
                op,
                at_ms,
                pruned_to_ms: pruned_to,
            }
        });
    }
    if record.ops.len() >= 2 * update.retain {
        let mut times: Vec<i64> = record.ops.iter().map(|e| e.t).collect();
        times.sort_unstable();
        // Everything at or before the newest of the oldest `len - retain` goes, ties included:
        // the pruned-to time must cover every entry removed.
        let cut = times[record.ops.len() - update.retain - 1];
        let kept = record.ops.iter().filter(|e| e.t > cut).cloned().collect();
        let pruned_to = record.pruned_to.map_or(cut, |p| p.max(cut));
        return Explained::Prune((kept, pruned_to));
    }
    Explained::Again
}

/// The one statement: the change and the record's entry, while the document does not record
/// the operation, is newer than the pruned-to time, and has room in its record.
fn statement(id: Ulid, key: Option<&Bson>, update: &Update) -> Result<RawDocumentBuf, Error> {
    let full = format!("{OPS_FIELD}.{}", 2 * update.retain - 1);
    // `$nor` rather than `$ne` on the array path: FerretDB 1.x matches `{"a.o": {$ne: x}}`
    // when any element differs from x, MongoDB only when none equals it.
    let mut q = on_document(id, key);
    q.extend(doc! {
        "$nor": [{format!("{OPS_FIELD}.{OP_KEY}"): &update.key}],
        &full: {"$exists": false},
        "$or": [
            {OPS_PRUNED_TO_FIELD: {"$exists": false}},
            {OPS_PRUNED_TO_FIELD: {"$lt": update.at}},
        ],
    });
    // No upsert: a relative update never creates the document.
    op::command::statement(q, update.operators.clone())
}

async fn send_statement(
    target: &Target,
    id: Ulid,
    key: Option<&Bson>,
    update: &Update,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Sent, Error> {
    let statements = [statement(id, key, update)?];
    let mut sent = Sent::Unclear;
    let mut refused = None;
    let settle = |_: &[usize], verdict: Verdict| match verdict {
        Verdict::Replied { refusals, n } => match refusals.into_iter().next().flatten() {
            None if n > 0 => sent = Sent::Matched,
            None => sent = Sent::Missed,
            Some(r) => refused = r.permanent(target, id),
        },
        Verdict::Refused(r) => refused = r.permanent(target, id),
        Verdict::Unplaced(_) | Verdict::Unknown => {}
    };
    send(
        target,
        Command::Update,
        &statements,
        true,
        |_| id,
        tries,
        session,
        settle,
    )
    .await?;
    match refused {
        Some(e) => Err(e),
        None => Ok(sent),
    }
}

async fn read(
    target: &Target,
    id: Ulid,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Option<Record>, Error> {
    // A tombstone is no document: an operation on it is `DocumentNotFound`.
    let live = doc! {"_id": id.to_string(), DELETED_FIELD: Bson::Null};
    let filter = crate::op::encode(&live).map_err(classify)?;
    let found: Vec<Record> = op::find(
        target,
        filter,
        Some(&[IDENTITY_FIELD, OPS_FIELD, OPS_PRUNED_TO_FIELD]),
        tries,
        session,
    )
    .await?;
    Ok(found.into_iter().next())
}

/// Cuts the record back to `kept` and raises the pruned-to time in one update, only while the
/// record is as read (its length and last entry: entries are only appended, and an operation
/// is recorded once), so an entry appended meanwhile is never dropped without its time being
/// covered. A miss is fine: the next round reads again.
async fn prune(
    target: &Target,
    id: Ulid,
    key: Option<&Bson>,
    record: &Record,
    (kept, pruned_to): (Vec<Entry>, i64),
    session: Session<'_>,
) -> Result<(), Error> {
    let n = record.ops.len();
    let Some(last) = record.ops.last() else {
        return Ok(());
    };
    let mut q = on_document(id, key);
    q.extend(doc! {
        format!("{OPS_FIELD}.{}.{OP_KEY}", n - 1): &last.o,
        format!("{OPS_FIELD}.{n}"): {"$exists": false},
    });
    let kept = bson::to_bson(&kept).map_err(Error::serialize::<Entry>)?;
    let u = doc! {"$set": {OPS_FIELD: kept, OPS_PRUNED_TO_FIELD: pruned_to}};
    let statement = op::command::statement(q, u)?;
    op::command::run(target, Command::Update, &[statement], session)
        .await
        .map_err(classify)?;
    Ok(())
}
