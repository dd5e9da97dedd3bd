//! The guarded upsert of a batch — one document or ten thousand — in bounded rounds: read what
//! is stored under the pending identities, [`decide`] each, send one `insert` for the new and
//! one `update` for the changed (cut to the engine's limits), and decide again for whatever
//! the engine refused.
//!
//! Only the `insert` creates documents; `update` statements never upsert. So a document this
//! call finds under its own token was created by it exactly when what it sent was an insert,
//! and an `Inserted` is never claimed for a document another writer made.
//!
//! Engines differ in what a multi-statement `update` reply says: MongoDB reports each failed
//! statement by index and carries on; FerretDB 1.x stops at the first failure with a command
//! error; and a statement that matched nothing is only seen in the command's total `n`. So
//! every document and statement also stamps the document with the batch's write token
//! (`_nk_write`): after a failed command, a short `n` — or a lost reply the retry policy
//! retries — the next read tells "we applied it" from "another writer did" exactly. The token
//! and what was sent outlive the attempt ([`Ledger`]), which is what makes a retried batch's
//! outcomes exact.

use std::collections::HashMap;
use std::time::Instant;

use bson::{Bson, RawBson, RawDocumentBuf};
use ulid::Ulid;

use std::borrow::Borrow;

use mongodb::ClientSession;

use super::batch::{Item, Outcomes, Writer};
use super::decide::{decide, Action, Effect, Incoming, Sent, Stored};
use super::keyed::{Keyed, On};
use super::mode::WriteMode;
use super::rounds::{or_contention, unnamed_violation, MAX_ROUNDS};
use super::send::{send, Verdict};
use crate::error::Error;
use crate::names::{DELETED_FIELD, HASH_FIELD, IDENTITY_FIELD, VERSION_FIELD, WRITE_FIELD};
use crate::op::answer::classify;
use crate::op::{self, Command, Refusal, Session, StoredIdentity, Target};
use crate::outcome::UpsertOutcome;
use crate::raw::{self, Embedded, ToEmbedded, Value};
use crate::retry::Attempts;
use crate::sizing::Shape;
use crate::stored::{name_problem, Prepared};

/// A call's first batch of at least this many documents asks first whether the collection is
/// empty, and if so starts with its insert instead of reading its identities. The question is
/// one round trip; the read it saves grows with the batch: for 10,000 identities in an empty,
/// indexed collection, warm, 3.4 ms against 0.2 ms on mongo-java-server and 17 ms against
/// 0.7 ms on FerretDB. Below this, a batch's own round trips dwarf either.
const EMPTY_PROBE_MIN: usize = 100;

/// Whether a batch starts with its insert. `known`: what the call's previous batch showed
/// (`Some(true)`: all of it was new), `None` for its first batch. A retried attempt always reads:
/// the lost attempt may have written.
async fn starts_with_insert(
    target: &Target,
    known: Option<bool>,
    items: usize,
    first_attempt: bool,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<bool, Error> {
    Ok(match known {
        _ if !first_attempt => false,
        Some(all_new) => all_new,
        None if items >= EMPTY_PROBE_MIN => op::is_empty(target, tries, session).await?,
        None => false,
    })
}

/// The batch runner's writer for upserts: the guard, with the call's mode and session, and
/// what it learns from one batch for the next.
pub(crate) struct GuardedWriter<'a, T: Keyed> {
    on: On<'a, T>,
    mode: WriteMode,
    session: Option<&'a mut ClientSession>,
    /// Whether the previous batch was all new (`None`: this is the first).
    all_new: Option<bool>,
    /// The current batch's token and what its attempts sent.
    ledger: Option<Ledger>,
}

impl<'a, T: Keyed> GuardedWriter<'a, T> {
    pub(crate) fn new(
        on: On<'a, T>,
        mode: WriteMode,
        session: Option<&'a mut ClientSession>,
    ) -> Self {
        GuardedWriter {
            on,
            mode,
            session,
            all_new: None,
            ledger: None,
        }
    }
}

impl<T, D> Writer<D> for GuardedWriter<'_, T>
where
    T: Keyed,
    D: Borrow<T> + Send + Sync,
{
    type Prepared = Prepared;
    type Outcome = UpsertOutcome;

    fn fork(&self) -> Option<Self> {
        self.session.is_none().then_some(GuardedWriter {
            on: self.on,
            mode: self.mode,
            session: None,
            all_new: self.all_new,
            ledger: None,
        })
    }

    async fn write(
        &mut self,
        batch: &[Item<Prepared, D>],
        tries: &mut Attempts,
    ) -> Result<Outcomes<UpsertOutcome>, Error> {
        let first_attempt = !tries.is_retry();
        let spec = self.on.spec;
        let describe = |i: usize| batch[i].doc.borrow().describe(spec);
        let other_hash = |i: usize| batch[i].doc.borrow().other_hash(spec);
        let call = UpsertCall {
            target: self.on.target,
            mode: self.mode,
            fields: self.on.fields,
            describe: &describe,
            other_hash: &other_hash,
            changed_at: T::changed_at(spec),
        };
        let items: Vec<&Prepared> = batch.iter().map(|i| &i.prepared).collect();
        let session = self.session.as_deref_mut();
        let insert_first = starts_with_insert(
            self.on.target,
            self.all_new,
            items.len(),
            first_attempt,
            tries,
            session,
        )
        .await?;
        let ledger = match &mut self.ledger {
            Some(l) if !first_attempt => l,
            slot => slot.insert(Ledger::new(items.len())),
        };
        let session = self.session.as_deref_mut();
        let results = upsert_batch(&call, &items, insert_first, ledger, tries, session).await?;
        self.all_new = Some(
            results
                .iter()
                .all(|r| matches!(r, Ok(UpsertOutcome::Inserted(_)))),
        );
        Ok(results)
    }
}

/// What every batch of one upsert call shares.
pub(crate) struct UpsertCall<'a> {
    pub(crate) target: &'a Target,
    pub(crate) mode: WriteMode,
    /// The type's stored field names, unset in Merge mode when a document lacks them.
    pub(crate) fields: Option<&'static [&'static str]>,
    /// Describes document `i`'s key, for a fork error (built only when needed).
    pub(crate) describe: &'a (dyn Fn(usize) -> String + Sync),
    /// Document `i`'s other accepted content hash (`Prepare::other_hash`, computed only when
    /// needed).
    pub(crate) other_hash: &'a (dyn Fn(usize) -> Option<String> + Sync),
    /// The field the engine stamps with its clock when a write changes the content.
    pub(crate) changed_at: Option<&'static str>,
}

/// What a batch's attempts have sent, kept across the retry policy's attempts: a lost reply
/// fails the attempt, and the retry must still know that the lost command was ours.
pub(crate) struct Ledger {
    /// Stamped by every document and statement of the batch, whatever the round or attempt:
    /// a stored token equal to it means this call wrote the stored content.
    token: String,
    /// Per item, what was sent whose fate no reply settled (`None`: nothing).
    sent: Vec<Option<Sent>>,
    /// Per item, an insert or a replacement was sent: neither can carry `$currentDate`, so a
    /// type with a changed-at field stamps the document once the batch is settled.
    unstamped: Vec<bool>,
}

impl Ledger {
    pub(crate) fn new(items: usize) -> Ledger {
        Ledger {
            token: Ulid::new().to_string(),
            sent: vec![None; items],
            unstamped: vec![false; items],
        }
    }
}

/// Per-document state across rounds.
struct BatchState<'p, 'm> {
    items: &'p [&'p Prepared],
    results: Vec<Option<Result<UpsertOutcome, Error>>>,
    sent: &'m mut [Option<Sent>],
    pending: Vec<usize>,
    /// An engine refused a statement of a multi-statement command without saying which:
    /// from now on each statement travels alone.
    one_by_one: bool,
    /// What the read showed when each item's `update` statement was planned.
    planned: Vec<Option<View>>,
    /// Per item, what tells a duplicate on an index the engine did not name (FerretDB 1.x names
    /// none) from one on ours, across rounds.
    unnamed: Vec<Option<Unnamed>>,
}

/// The steps that find a duplicate of an unnamed index to be one of the user's unique indexes
/// (each with the engine's message), or let the next round's read show it was ours.
#[derive(Debug)]
enum Unnamed {
    /// The item's statement, planned from this view, was refused. If the next read shows the
    /// same view, nothing of ours was in the way.
    StatementRefused(Box<View>, String),
    /// The item's insert was refused: if nothing is stored under its identity, its update by
    /// `_id` adopts the document at its `_id`, if there is one.
    InsertRefused(String),
    /// That update may have matched nothing: no document at its `_id`. If the insert is then
    /// refused again, nothing of ours was in the way.
    AdoptionMissed(String),
}

/// What a read found, by identity: the stored `_nk_identity` texts (SHA-256 in hex for all
/// that natural-key wrote), hashed by foldhash, randomly seeded, instead of SipHash, which
/// took a tenth of the client's time in an unchanged re-ingest.
type Found = HashMap<String, StoredIdentity, foldhash::fast::RandomState>;

/// The stored `_id` and hash under an identity (`None`: nothing stored).
type View = Option<(Bson, Option<Bson>)>;

/// One statement or document to send for item `item`.
struct Outgoing<D> {
    item: usize,
    /// The item's id, for an error about its command.
    id: Ulid,
    /// What the write makes of the document once applied.
    effect: Effect,
    doc: D,
}

impl<D: ToEmbedded> ToEmbedded for Outgoing<D> {
    fn embedded(&self) -> Embedded<'_> {
        self.doc.embedded()
    }
}

/// An insert's document, written into its command in place ([`insert_document`]).
type InsertDoc<'a> = [(&'a str, Value<'a>); 3];

/// A round's inserts and update statements.
type RoundWrites<'p> = (Vec<Outgoing<InsertDoc<'p>>>, Vec<Outgoing<RawDocumentBuf>>);

/// Decides and writes one batch; one result per item. `Err` only for a failure of the whole
/// batch (network, ...), which the caller may retry with the same `ledger`: the batch is
/// idempotent, and its outcomes stay exact.
pub(crate) async fn upsert_batch(
    call: &UpsertCall<'_>,
    items: &[&Prepared],
    insert_first: bool,
    ledger: &mut Ledger,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Outcomes<UpsertOutcome>, Error> {
    debug_assert_eq!(ledger.sent.len(), items.len());
    let token = ledger.token.as_str();
    let unstamped = &mut ledger.unstamped;
    let mut state = BatchState::new(items, &mut ledger.sent);
    for round in 0..MAX_ROUNDS {
        if state.pending.is_empty() {
            break;
        }
        // Skipped when the batch starts with the insert: every document is taken as new and
        // the unique indexes refuse what is not, for the next round to decide.
        let stored = if round == 0 && insert_first {
            Found::default()
        } else {
            read(
                call.target,
                &state,
                round == 0,
                tries,
                session.as_deref_mut(),
            )
            .await?
        };
        let (mut inserts, updates) = plan(call, &mut state, &stored, token)?;
        state.pending.clear();
        if call.changed_at.is_some() {
            let replaced = updates.iter().filter(|u| replaces(call, u.effect));
            for o in replaced
                .map(|u| u.item)
                .chain(inserts.iter().map(|o| o.item))
            {
                unstamped[o] = !items[o].tombstone;
            }
        }
        if call.target.shard_key.is_some() && !inserts.is_empty() {
            let now = session.as_deref_mut();
            take_foreign_ids(call.target, &mut state, &mut inserts, tries, now).await?;
        }
        let now = session.as_deref_mut();
        send_inserts(call.target, &mut state, inserts, token, tries, now).await?;
        let now = session.as_deref_mut();
        send_updates(call.target, &mut state, updates, token, tries, now).await?;
    }
    if let Some(field) = call.changed_at {
        let done = |r: &Option<Result<UpsertOutcome, Error>>| {
            matches!(
                r,
                Some(Ok(UpsertOutcome::Inserted(_) | UpsertOutcome::Updated(_)))
            )
        };
        let due: Vec<usize> = (0..items.len())
            .filter(|&i| unstamped[i] && done(&state.results[i]))
            .collect();
        stamp(call.target, items, &due, field, token, tries, session).await?;
    }
    Ok(or_contention(state.results, call.target, |i| items[i].id))
}

/// Whether an update of `effect` is a replacement, which cannot carry `$currentDate`.
fn replaces(call: &UpsertCall<'_>, effect: Effect) -> bool {
    call.mode == WriteMode::Replace && effect != Effect::Unchanged
}

/// Sets `field` to the engine's clock on the documents `due` that this batch inserted or
/// replaced, while they still carry its token (a document another writer changed since is
/// theirs to stamp). One statement each, in as few commands as the engine takes; a statement
/// that matches nothing is that other writer's. Safe to repeat: a retried batch stamps again,
/// a few milliseconds later.
async fn stamp(
    target: &Target,
    items: &[&Prepared],
    due: &[usize],
    field: &str,
    token: &str,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<(), Error> {
    let mut statements = Vec::with_capacity(due.len());
    for &i in due {
        let p = items[i];
        let mut q = RawDocumentBuf::new();
        q.append("_id", p.id_text.as_str());
        if let Some((key, value)) = target.shard_condition(Some(&p.identity), &p.body) {
            q.append(key, value);
        }
        q.append(WRITE_FIELD, token);
        let mut now = RawDocumentBuf::new();
        now.append(field, true);
        let mut u = RawDocumentBuf::new();
        u.append("$currentDate", now);
        let mut s = RawDocumentBuf::new();
        s.append("q", q);
        s.append("u", u);
        statements.push(s);
    }
    let id = |k: usize| items[due[k]].id;
    let kind = Command::Update;
    send(
        target,
        kind,
        &statements,
        false,
        id,
        tries,
        session,
        |_, _| {},
    )
    .await
}

/// On a sharded collection the engine enforces `_id` only among documents of one shard-key
/// value, so an insert is not refused by a document of the same `_id` that other code wrote
/// without `_nk_identity` (it lives where the missing shard key routes it): it would be
/// stored beside it. Those documents share one shard — a missing shard key is null — and are
/// read there, by `_id`, in one targeted read; each insert that meets one is settled as the
/// engine would have refused it, and the next round adopts the document by its `_id`.
async fn take_foreign_ids(
    target: &Target,
    state: &mut BatchState<'_, '_>,
    inserts: &mut Vec<Outgoing<InsertDoc<'_>>>,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<(), Error> {
    let mut ids = bson::RawArrayBuf::new();
    for o in inserts.iter() {
        ids.push(state.items[o.item].id_text.as_str());
    }
    let mut any = RawDocumentBuf::new();
    any.append("$in", ids);
    let mut filter = RawDocumentBuf::new();
    filter.append(IDENTITY_FIELD, RawBson::Null);
    filter.append("_id", any);
    let found = op::find_identities(target, filter, None, tries, session).await?;
    if found.is_empty() {
        return Ok(());
    }
    let taken: std::collections::HashSet<&str> =
        found.iter().filter_map(|d| d.id.as_str()).collect();
    let mut refused = Vec::new();
    inserts.retain(|o| {
        let foreign = taken.contains(state.items[o.item].id_text.as_str());
        if foreign {
            refused.push(o.item);
        }
        !foreign
    });
    for i in refused {
        state.refused(target, i, Refusal::Ours, Sent::Refused);
    }
    Ok(())
}

/// The client's share of a first-ingest batch, sent nowhere: the plan `upsert_batch` makes
/// for `items` when nothing is stored, up to its `insert` commands. Returns their bytes.
/// `benches/client_cpu.rs` measures it against its floors.
pub(crate) fn first_ingest_commands(
    target: &Target,
    fields: Option<&'static [&'static str]>,
    items: &[&Prepared],
) -> Result<usize, Error> {
    let describe = |_: usize| String::new();
    let call = UpsertCall {
        target,
        mode: WriteMode::default(),
        fields,
        describe: &describe,
        other_hash: &|_| None,
        changed_at: None,
    };
    let mut ledger = Ledger::new(items.len());
    let mut state = BatchState::new(items, &mut ledger.sent);
    let (inserts, _) = plan(&call, &mut state, &Found::default(), &ledger.token)?;
    let limits = target.deployment.limits();
    let sizes = inserts.iter().map(|s| s.embedded().len());
    let mut bytes = 0;
    for range in Command::Insert.cut(limits, false, sizes) {
        let cmd =
            op::command::command(target, Command::Insert, &inserts[range]).map_err(classify)?;
        bytes += cmd.as_bytes().len();
    }
    Ok(bytes)
}

/// The stored `_id`, hash and write token of every pending identity, keyed by identity, read
/// in the shape the handle measures cheapest (`sizing`). `first`: the batch's first read.
async fn read(
    target: &Target,
    state: &BatchState<'_, '_>,
    first: bool,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Found, Error> {
    let mut started = Instant::now();
    let pending = &state.pending[..];
    let shape = target.reads.shape(pending.len(), first);
    let mut stored = Found::with_capacity_and_hasher(pending.len(), Default::default());
    let mut rest = pending;
    if matches!(shape, Shape::Sampled { .. }) {
        rest = read_next(
            target,
            state,
            rest,
            &mut stored,
            tries,
            session.as_deref_mut(),
        )
        .await?;
        let asked = pending.len() - rest.len();
        target.reads.record_sample(asked, started.elapsed());
        started = Instant::now();
    }
    let unseen: Vec<usize>;
    let span = match shape {
        Shape::Span { limit } | Shape::Sampled { limit } if !rest.is_empty() => Some(limit),
        _ => None,
    };
    if let Some(limit) = span {
        let found = read_span(target, state, rest, limit, tries, session.as_deref_mut()).await?;
        let complete = found.len() < limit;
        stored.extend(keyed(found));
        unseen = match complete {
            true => Vec::new(),
            false => rest
                .iter()
                .copied()
                .filter(|&i| !stored.contains_key(&state.items[i].identity))
                .collect(),
        };
        rest = &unseen;
    }
    while !rest.is_empty() {
        rest = read_next(
            target,
            state,
            rest,
            &mut stored,
            tries,
            session.as_deref_mut(),
        )
        .await?;
    }
    let whole = match (shape, span) {
        (Shape::Identities(_), _) => Some(shape),
        (_, Some(limit)) => Some(Shape::Span { limit }),
        _ => None,
    };
    if let Some(whole) = whole.filter(|_| first) {
        target
            .reads
            .record_whole(whole, pending.len(), started.elapsed());
    }
    Ok(stored)
}

/// One `$in` read of the first of `rest`, as many as the read size in use, into `stored`,
/// measured for the read sizes; returns the rest after them.
async fn read_next<'r>(
    target: &Target,
    state: &BatchState<'_, '_>,
    rest: &'r [usize],
    stored: &mut Found,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<&'r [usize], Error> {
    let (part, after) = rest.split_at(target.reads.size().min(rest.len()));
    let mut wanted = bson::RawArrayBuf::new();
    for &i in part {
        wanted.push(state.items[i].identity.as_str());
    }
    let mut condition = RawDocumentBuf::new();
    condition.append("$in", wanted);
    let mut filter = RawDocumentBuf::new();
    filter.append(IDENTITY_FIELD, condition);
    let at = Instant::now();
    let found = op::find_identities(target, filter, None, tries, session).await?;
    target.reads.record(part.len(), at.elapsed());
    stored.extend(keyed(found));
    Ok(after)
}

/// What is stored in the `_id` range from the least to the greatest id of `of` (pending
/// items), at most `limit` documents.
async fn read_span(
    target: &Target,
    state: &BatchState<'_, '_>,
    of: &[usize],
    limit: usize,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Vec<StoredIdentity>, Error> {
    let ids = of.iter().map(|&i| state.items[i].id_text.as_str());
    let (Some(least), Some(greatest)) = (ids.clone().min(), ids.max()) else {
        return Ok(Vec::new());
    };
    let mut range = RawDocumentBuf::new();
    range.append("$gte", least);
    range.append("$lte", greatest);
    let mut filter = RawDocumentBuf::new();
    filter.append("_id", range);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    op::find_identities(target, filter, Some(limit), tries, session).await
}

/// Found documents by their identity, moved out of them as the key; one without (not ours)
/// is left out.
fn keyed(found: Vec<StoredIdentity>) -> impl Iterator<Item = (String, StoredIdentity)> {
    found
        .into_iter()
        .filter_map(|mut d| match d.identity.take() {
            Some(Bson::String(identity)) => Some((identity, d)),
            _ => None,
        })
}

/// Decides every pending item: settles what needs no write, and returns the `insert`
/// documents and `update` statements for the rest.
fn plan<'p>(
    call: &UpsertCall<'_>,
    state: &mut BatchState<'p, '_>,
    stored: &Found,
    token: &'p str,
) -> Result<RoundWrites<'p>, Error> {
    let (mut inserts, mut updates) = (Vec::new(), Vec::new());
    for &i in &state.pending {
        let p = state.items[i];
        let found = stored.get(&p.identity);
        let seen: View = found.map(|d| (d.id.clone(), d.hash.clone()));
        // Each step holds for this round's decision only.
        let unnamed = state.unnamed[i].take();
        if let Some(Unnamed::StatementRefused(view, message)) = &unnamed {
            if **view == seen {
                state.results[i] = Some(Err(unnamed_violation(call.target, p.id, message.clone())));
                continue;
            }
        }
        let action = decision(call, p, i, found, state.sent[i].as_ref());
        let (stored_hash, version_guard, effect) = match action {
            Action::Done(o) => {
                state.results[i] = Some(Ok(o));
                continue;
            }
            Action::Fork | Action::Conflict(_) => {
                state.results[i] = Some(Err(refusal(call, p, i, found, &action)));
                continue;
            }
            Action::Insert => {
                state.unnamed[i] = unnamed.filter(|u| matches!(u, Unnamed::AdoptionMissed(_)));
                // Until a reply says otherwise, it may be applied: if this attempt fails, the
                // retry's read decides by the token.
                state.sent[i] = Some(uncertain(token, Effect::Inserted));
                inserts.push(Outgoing {
                    item: i,
                    id: p.id,
                    effect: Effect::Inserted,
                    doc: insert_document(p, token),
                });
                continue;
            }
            Action::AdoptById => {
                state.unnamed[i] = unnamed.filter(|u| matches!(u, Unnamed::InsertRefused(_)));
                (None, None, Effect::Updated)
            }
            Action::Update {
                stored_hash,
                stored_version,
                effect,
            } => {
                let versioned = p.version.is_some();
                let version = versioned.then(|| stored_version.cloned().unwrap_or(Bson::Null));
                let hash = stored_hash.cloned().unwrap_or(Bson::Null);
                (Some(hash), version, effect)
            }
        };
        let doc = statement(call, p, stored_hash, version_guard, effect, token)?;
        state.sent[i] = Some(uncertain(token, effect));
        state.planned[i] = Some(seen);
        updates.push(Outgoing {
            item: i,
            id: p.id,
            effect,
            doc,
        });
    }
    Ok((inserts, updates))
}

/// Item `i`'s decision against what the read `found` under its identity.
fn decision<'f>(
    call: &UpsertCall<'_>,
    p: &Prepared,
    i: usize,
    found: Option<&'f StoredIdentity>,
    sent: Option<&Sent>,
) -> Action<'f> {
    let view = found.map(|d| Stored {
        id: &d.id,
        hash: d.hash.as_ref(),
        token: d.token.as_ref().and_then(Bson::as_str),
        version: d.version.as_ref(),
        deleted: d.deleted,
    });
    let new = Incoming {
        id: p.id,
        id_text: &p.id_text,
        hash: &p.hash,
        version: p.version,
        tombstone: p.tombstone,
        mode: call.mode,
    };
    decide(new, || (call.other_hash)(i), view, sent)
}

/// The error of a decision that refuses item `i` (`p`): a fork or a version conflict.
fn refusal(
    call: &UpsertCall<'_>,
    p: &Prepared,
    i: usize,
    found: Option<&StoredIdentity>,
    action: &Action<'_>,
) -> Error {
    let collection = call.target.namespace.clone();
    let key = (call.describe)(i);
    match action {
        Action::Conflict(version) => Error::VersionConflict {
            collection,
            id: p.id,
            version: *version,
            key,
        },
        _ => Error::ImmutableKeyChanged {
            collection,
            stored_id: found.map_or_else(String::new, |f| crate::stored::id_text(&f.id)),
            derived_id: p.id,
            key,
        },
    }
}

fn uncertain(token: &str, effect: Effect) -> Sent {
    Sent::Uncertain {
        token: token.to_string(),
        effect,
    }
}

/// The document an `insert` carries: `_id`, the stored fields, and the write token.
fn insert_document<'a>(p: &'a Prepared, token: &'a str) -> InsertDoc<'a> {
    [
        ("_id", Value::Str(&p.id_text)),
        ("", Value::Fields(raw::fields(&p.body))),
        (WRITE_FIELD, Value::Str(token)),
    ]
}

/// One `update` statement: by `_id` (and `_nk_identity` on a sharded collection: its shard
/// key, which routes the statement to one shard), only while the stored hash is still
/// `stored_hash` (none: by `_id` alone — on a sharded collection with a `null` shard key —
/// which adopts a same-`_id` document written without identity). Never upserting: a changed
/// hash or a deleted document matches nothing, and the next round decides again. Where the
/// engine would not compare the hash atomically anyway, the filter leaves the hash out: a
/// change since the read is overwritten with this content, which deciding again would also do.
///
/// `version_guard`, for a versioned write: the stored `_nk_version` it was decided against
/// (`null`: none). With the hash it makes a write that raced another version miss and decide
/// again (perhaps stale); it is the only guard where the version is `skip_hash`. A tombstone replaces the document; a write that brings one back
/// (`effect` [`Effect::Inserted`]) writes the whole document, as an insert does.
fn statement(
    call: &UpsertCall<'_>,
    p: &Prepared,
    stored_hash: Option<Bson>,
    version_guard: Option<Bson>,
    effect: Effect,
    token: &str,
) -> Result<RawDocumentBuf, Error> {
    let filter = update_filter(call, p, stored_hash, version_guard)?;
    let revive = effect == Effect::Inserted;
    let fields = match revive {
        true => &p.body,
        false => p.update_body(),
    };
    let body = raw::doc(&[
        ("", Value::Fields(raw::fields(fields))),
        (WRITE_FIELD, Value::Str(token)),
    ])
    .map_err(serialize)?;
    // A newer version of the same content only records itself: `$set`, even in Replace
    // mode, which would drop what the engine stamped (the changed-at field).
    let mode = match (call.mode, effect) {
        (WriteMode::Replace, Effect::Unchanged) => WriteMode::Merge,
        (mode, _) => mode,
    };
    let update = match mode {
        _ if p.tombstone => body,
        WriteMode::Merge | WriteMode::InsertOnly | WriteMode::UpdateOnly => {
            merge(call, p, body, effect)
        }
        // A replacement would reset what relative updates changed, and drop their record.
        WriteMode::Replace if !p.relative.is_empty() && !revive => {
            return Err(Error::InvalidChange {
                collection: call.target.namespace.clone(),
                message: format!(
                    "document {} has `#[natural_key(relative)]` fields ({:?}): WriteMode::Replace \
                     would reset them and drop the record of applied operations; use Merge",
                    p.id, p.relative
                ),
            })
        }
        WriteMode::Replace => body,
    };
    let mut s = RawDocumentBuf::new();
    s.append("q", filter);
    s.append("u", update);
    s.append("upsert", false);
    s.append("multi", false);
    Ok(s)
}

/// An update statement's filter: see [`statement`].
fn update_filter(
    call: &UpsertCall<'_>,
    p: &Prepared,
    stored_hash: Option<Bson>,
    version_guard: Option<Bson>,
) -> Result<RawDocumentBuf, Error> {
    let mut filter = RawDocumentBuf::new();
    filter.append("_id", p.id_text.as_str());
    // Adopting a document without identity (no stored hash): where a null identity routes.
    let identity = stored_hash.as_ref().map(|_| p.identity.as_str());
    if let Some((key, value)) = call.target.shard_condition(identity, &p.body) {
        filter.append(key, value);
    }
    let atomic = call.target.deployment.atomic_update_filters();
    if let Some(hash) =
        stored_hash.filter(|_| call.target.deployment.compares_hash_in_update_filter())
    {
        filter.append(HASH_FIELD, RawBson::try_from(hash).map_err(serialize)?);
    }
    // As the hash: where the engine checks a filter outside its write, the condition orders
    // nothing and costs a scan per statement (the read's decision orders writes there).
    if let Some(version) = version_guard.filter(|_| atomic) {
        let version = RawBson::try_from(version).map_err(serialize)?;
        filter.append(VERSION_FIELD, version);
    }
    Ok(filter)
}

/// A Merge-mode update (and insert-only's and update-only's): `$set` of `body`, `$unset` of the
/// type's fields the value leaves out, and the engine's clock in the changed-at field when the
/// content changes.
fn merge(
    call: &UpsertCall<'_>,
    p: &Prepared,
    body: RawDocumentBuf,
    effect: Effect,
) -> RawDocumentBuf {
    let revive = effect == Effect::Inserted;
    let mut u = RawDocumentBuf::new();
    u.append("$set", body);
    // Fields of the type that this value does not serialize (a skipped `None`) must not keep
    // an old value: reading the document back must give what was written.
    let mut unset = RawDocumentBuf::new();
    // A name the body could not carry is no field of ours to unset (`a.b` would be a path
    // into another field). The changed-at field is the engine's: a type reads it, never
    // writes it.
    for f in call.fields.unwrap_or_default() {
        let ours = name_problem(f, true).is_none()
            && (revive || !p.relative.contains(f))
            && call.changed_at != Some(*f);
        if ours && !matches!(p.body.get(f), Ok(Some(_))) {
            unset.append(*f, "");
        }
    }
    if revive {
        unset.append(DELETED_FIELD, "");
    }
    if !unset.is_empty() {
        u.append("$unset", unset);
    }
    // The content changes (a version alone does not): the engine's clock says when.
    if let Some(field) = call.changed_at.filter(|_| effect != Effect::Unchanged) {
        let mut now = RawDocumentBuf::new();
        now.append(field, true);
        u.append("$currentDate", now);
    }
    u
}

fn serialize(e: impl std::fmt::Display) -> Error {
    Error::serialize::<RawDocumentBuf>(e)
}

impl<'p, 'm> BatchState<'p, 'm> {
    fn new(items: &'p [&'p Prepared], sent: &'m mut [Option<Sent>]) -> Self {
        BatchState {
            items,
            results: (0..items.len()).map(|_| None).collect(),
            sent,
            pending: (0..items.len()).collect(),
            one_by_one: false,
            planned: vec![None; items.len()],
            unnamed: (0..items.len()).map(|_| None).collect(),
        }
    }

    /// Settles item `i` after the server refused its document or statement.
    fn refused(&mut self, target: &Target, i: usize, refusal: Refusal, sent: Sent) {
        if let Some(e) = refusal.permanent(target, self.items[i].id) {
            self.results[i] = Some(Err(e));
            return;
        }
        match (refusal, &sent) {
            // An insert refused by an unnamed index may have met a same-`_id` document without
            // identity: the next round's update by `_id` adopts it — unless that already found
            // no document there.
            (Refusal::Unnamed { message }, Sent::Refused) => {
                if let Some(Unnamed::AdoptionMissed(message)) = self.unnamed[i].take() {
                    self.results[i] =
                        Some(Err(unnamed_violation(target, self.items[i].id, message)));
                    return;
                }
                self.unnamed[i] = Some(Unnamed::InsertRefused(message));
            }
            // A refused statement is suspect.
            (Refusal::Unnamed { message }, Sent::Uncertain { .. }) => {
                if let Some(view) = self.planned[i].take() {
                    self.unnamed[i] = Some(Unnamed::StatementRefused(Box::new(view), message));
                }
            }
            _ => {}
        }
        self.sent[i] = Some(sent);
        self.pending.push(i);
    }

    /// Items of a command whose outcome the reply did not settle: the next round decides.
    fn uncertain<'o, D: 'o>(
        &mut self,
        sent: impl IntoIterator<Item = &'o Outgoing<D>>,
        token: &str,
    ) {
        for s in sent {
            self.sent[s.item] = Some(uncertain(token, s.effect));
            self.pending.push(s.item);
        }
    }
}

async fn send_inserts(
    target: &Target,
    state: &mut BatchState<'_, '_>,
    inserts: Vec<Outgoing<InsertDoc<'_>>>,
    token: &str,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<(), Error> {
    let one_by_one = state.one_by_one;
    let id = |k: usize| inserts[k].id;
    let settle = |carried: &[usize], verdict| {
        let sent: Vec<&Outgoing<InsertDoc<'_>>> = carried.iter().map(|&k| &inserts[k]).collect();
        match verdict {
            Verdict::Refused(refusal) => match sent[..] {
                [one] => state.refused(target, one.item, refusal, Sent::Refused),
                _ => {
                    state.one_by_one |= refusal != Refusal::Ours;
                    // Documents before the refused one may be stored.
                    state.uncertain(sent, token);
                }
            },
            // Refusals that cannot be placed, or an outcome the engine cannot tell: the next
            // read decides every document.
            Verdict::Unplaced(_) | Verdict::Unknown => state.uncertain(sent, token),
            Verdict::Replied { refusals, .. } => {
                for (s, refusal) in sent.into_iter().zip(refusals) {
                    match refusal {
                        None => state.results[s.item] = Some(Ok(s.effect.outcome(s.id))),
                        Some(Refusal::Unknown { .. }) => state.uncertain([s], token),
                        Some(refusal) => state.refused(target, s.item, refusal, Sent::Refused),
                    }
                }
            }
        }
    };
    let kind = Command::Insert;
    send(
        target, kind, &inserts, one_by_one, id, tries, session, settle,
    )
    .await
}

async fn send_updates(
    target: &Target,
    state: &mut BatchState<'_, '_>,
    updates: Vec<Outgoing<RawDocumentBuf>>,
    token: &str,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<(), Error> {
    let one_by_one = state.one_by_one;
    let id = |k: usize| updates[k].id;
    let settle = |carried: &[usize], verdict| {
        let sent: Vec<&Outgoing<RawDocumentBuf>> = carried.iter().map(|&k| &updates[k]).collect();
        settle_updates(target, state, &sent, verdict, token)
    };
    let kind = Command::Update;
    send(
        target, kind, &updates, one_by_one, id, tries, session, settle,
    )
    .await
}

/// What an `update` command's verdict settles of its statements.
fn settle_updates(
    target: &Target,
    state: &mut BatchState<'_, '_>,
    sent: &[&Outgoing<RawDocumentBuf>],
    verdict: Verdict,
    token: &str,
) {
    match verdict {
        Verdict::Unknown => state.uncertain(sent.iter().copied(), token),
        // Stopped without saying where: every statement is uncertain until the next read
        // shows whose token is stored.
        Verdict::Refused(refusal) => match sent {
            [one] => state.refused(target, one.item, refusal, uncertain(token, one.effect)),
            _ => {
                state.one_by_one |= refusal != Refusal::Ours;
                state.uncertain(sent.iter().copied(), token);
            }
        },
        Verdict::Replied { refusals, n } if refusals.iter().all(Option::is_none) => {
            if usize::try_from(n).ok() == Some(sent.len()) {
                for s in sent {
                    state.results[s.item] = Some(Ok(s.effect.outcome(s.id)));
                }
                return;
            }
            // A statement matched nothing (its stored hash changed since the read, or the
            // document is gone); `n` is the command's total, so which one is the next read's
            // to tell: ours that applied carry our token.
            for s in sent {
                if let Some(Unnamed::InsertRefused(m)) = state.unnamed[s.item].take() {
                    state.unnamed[s.item] = Some(Unnamed::AdoptionMissed(m));
                }
            }
            state.uncertain(sent.iter().copied(), token)
        }
        Verdict::Replied { mut refusals, .. } if sent.len() == 1 => {
            let refusal = refusals.pop().flatten().expect("a refusal, checked above");
            state.refused(
                target,
                sent[0].item,
                refusal,
                uncertain(token, sent[0].effect),
            )
        }
        // Which statements applied is not reliably reported (FerretDB 1.x stops at the first
        // failure and reports it at index 0): the next read decides, and a refusal other than
        // ours is pinned down one statement at a time.
        Verdict::Replied { refusals, .. } => {
            state.one_by_one |= refusals.iter().flatten().any(|r| *r != Refusal::Ours);
            state.uncertain(sent.iter().copied(), token);
        }
        Verdict::Unplaced(refusals) => {
            state.one_by_one |= refusals.iter().any(|r| *r != Refusal::Ours);
            state.uncertain(sent.iter().copied(), token);
        }
    }
}

#[cfg(test)]
mod tests {
    //! No command natural-key builds carries a duplicate field name, whatever names a
    //! document's data holds: the builders over arbitrary documents.
    use std::collections::BTreeMap;

    use bson::RawBsonRef;
    use proptest::prelude::*;

    use super::*;
    use crate::content::ContentHasher;
    use crate::error::FieldNameProblem;
    use crate::key::{KeySink, Normalize, Scheme, WriteKey};
    use crate::op::command::command;
    use crate::stored::PreparedEvent;
    use crate::traits::{identity_index, IndexSpec, Indexes, NaturalKey, RandomId};

    /// A document whose top-level names are data: a key, a timestamp, and a flattened map.
    #[derive(Debug, serde::Serialize)]
    struct Doc {
        key: String,
        at: i64,
        #[serde(flatten)]
        extra: BTreeMap<String, Bson>,
    }

    impl WriteKey for Doc {
        const SCHEME: Scheme = Scheme::Default { namespace: "" };
        fn write_key(&self, sink: &mut KeySink) -> Result<(), crate::KeyError> {
            sink.part("key", &self.key, Normalize::NONE)
        }
    }
    impl Indexes for Doc {
        fn index_models() -> Vec<IndexSpec> {
            vec![identity_index()]
        }
    }
    impl NaturalKey for Doc {
        fn __timestamp_ms(&self) -> Result<u64, crate::KeyError> {
            crate::key::check_timestamp("at", self.at.into())
        }
        fn __write_content(&self, hasher: &mut ContentHasher) -> Result<(), Error> {
            hasher.field::<Self, _, 12>(&crate::content::name_head("key"), &self.key)?;
            hasher.field::<Self, _, 14>(&crate::content::name_head("extra"), &self.extra)
        }
    }

    #[derive(Debug, serde::Serialize)]
    struct Event {
        #[serde(rename = "_id")]
        id: Ulid,
        #[serde(flatten)]
        extra: BTreeMap<String, Bson>,
    }
    impl Indexes for Event {
        fn index_models() -> Vec<IndexSpec> {
            Vec::new()
        }
    }
    impl RandomId for Event {
        fn id(&self) -> Ulid {
            self.id
        }
    }

    /// Names drawn to collide: the library's own, the type's, paths, operators, the empty name.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("_id".to_string()),
            Just("key".to_string()),
            Just("at".to_string()),
            Just("$set".to_string()),
            Just("$unset".to_string()),
            Just("q".to_string()),
            Just("u".to_string()),
            Just("upsert".to_string()),
            Just(crate::names::IDENTITY_FIELD.to_string()),
            Just(crate::names::HASH_FIELD.to_string()),
            Just(WRITE_FIELD.to_string()),
            Just(crate::names::IDEMPOTENCY_FIELD.to_string()),
            "[a-z_.$]{1,6}",
            "\\PC{0,4}".prop_filter("BSON names have no NUL", |s| !s.contains('\0')),
        ]
    }

    fn value() -> impl Strategy<Value = Bson> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(Bson::Int64),
            "[a-z]{0,3}".prop_map(Bson::String),
            Just(Bson::Null),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                proptest::collection::vec((name(), inner), 0..4).prop_map(|fields| {
                    // A `Document` keeps one value per name; nested names are data anyway.
                    Bson::Document(fields.into_iter().collect())
                }),
            ]
        })
    }

    fn extra() -> impl Strategy<Value = BTreeMap<String, Bson>> {
        proptest::collection::btree_map(name(), value(), 0..6)
    }

    /// Every document level of `doc` (nested ones included) holds each name once.
    fn assert_unique_names(doc: &bson::RawDocument, path: &str) {
        let mut seen = std::collections::HashSet::new();
        for element in doc {
            let (name, value) = element.unwrap();
            assert!(seen.insert(name), "`{name}` twice in {path}");
            visit(value, &format!("{path}.{name}"));
        }
    }

    fn visit(value: RawBsonRef<'_>, path: &str) {
        match value {
            RawBsonRef::Document(d) => assert_unique_names(d, path),
            RawBsonRef::Array(a) => {
                for (k, v) in a.into_iter().enumerate() {
                    visit(v.unwrap(), &format!("{path}[{k}]"));
                }
            }
            _ => {}
        }
    }

    /// The rule of docs/crate.md, written out independently of `check_names`.
    fn acceptable(extra: &BTreeMap<String, Bson>, own: &[&str], id: Option<&str>) -> bool {
        extra.iter().all(|(n, v)| {
            let own_id = n == "_id" && id.is_some_and(|id| v.as_str() == Some(id));
            !n.is_empty()
                && !n.starts_with('$')
                && !n.contains('.')
                && !n.starts_with("_nk_")
                && (n != "_id" || own_id)
                && !own.contains(&n.as_str())
        })
    }

    fn target() -> (tokio::runtime::Runtime, Target) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = {
            let _in_runtime = rt.enter();
            let opts = mongodb::options::ClientOptions::builder()
                .hosts(vec![mongodb::options::ServerAddress::default()])
                .build();
            mongodb::Client::with_options(opts).unwrap()
        };
        let hello = op::Hello {
            msg: None,
            max_bson_object_size: Some(16 * 1024 * 1024),
            max_write_batch_size: Some(100_000),
        };
        let t = Target::new(
            client.database("db"),
            "c".into(),
            Some(bson::rawdoc! {"w": "majority"}),
            crate::Deployment::from_replies(&hello, None),
            None,
        );
        (rt, t)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn no_command_carries_a_name_twice(extra in extra(), sharded: bool, hash: bool) {
            let (_rt, mut t) = target();
            t.shard_key = sharded.then_some(crate::op::ShardKey::Identity);
            let doc = Doc { key: "k".into(), at: 1_700_000_000_000, extra };
            let ok = acceptable(&doc.extra, &["key", "at"], None);
            let p = match Prepared::of(&doc, &t) {
                Ok(p) => p,
                Err(Error::InvalidFieldName { field, problem, .. }) => {
                    prop_assert!(!ok, "refused an acceptable name {field:?} ({problem:?})");
                    prop_assert!(
                        doc.extra.contains_key(&field) || problem == FieldNameProblem::Repeated
                    );
                    return Ok(());
                }
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            };
            prop_assert!(ok, "accepted {:?}", doc.extra.keys().collect::<Vec<_>>());
            let describe = |_: usize| String::new();
            let fields: &'static [&'static str] = &["key", "at", "absent_field", "a.b", "_id"];
            let insert = insert_document(&p, "token");
            assert_unique_names(&command(&t, Command::Insert, &[&insert]).unwrap(), "insert");
            for mode in [WriteMode::Merge, WriteMode::Replace] {
                let call = UpsertCall {
                    target: &t, mode, fields: Some(fields), describe: &describe, other_hash: &|_| None,
                    changed_at: None,
                };
                let stored_hash = hash.then(|| Bson::String(p.hash.clone()));
                let s = statement(&call, &p, stored_hash, None, Effect::Updated, "token").unwrap();
                assert_unique_names(&command(&t, Command::Update, &[&s]).unwrap(), "update");
                if mode == WriteMode::Merge {
                    // Only the type's own storable names are unset: never a path.
                    let unset = s.get_document("u").unwrap().get_document("$unset");
                    let unset: Vec<&str> = unset.into_iter().flatten().map(|e| e.unwrap().0).collect();
                    prop_assert_eq!(unset, vec!["absent_field"]);
                }
            }
        }

        #[test]
        fn no_event_insert_carries_a_name_twice(extra in extra()) {
            let (_rt, t) = target();
            let event = Event { id: Ulid::new(), extra };
            let id = event.id.to_string();
            let ok = acceptable(&event.extra, &[], Some(&id));
            match PreparedEvent::of(&event, &t) {
                Ok(p) => {
                    prop_assert!(ok, "accepted {:?}", event.extra.keys().collect::<Vec<_>>());
                    assert_unique_names(&command(&t, Command::Insert, &[&p.body]).unwrap(), "insert");
                    prop_assert_eq!(p.body.get_str("_id").unwrap(), id.as_str());
                }
                Err(Error::InvalidFieldName { field, .. }) => {
                    prop_assert!(!ok, "refused an acceptable name {field:?}");
                }
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
        }
    }
}
