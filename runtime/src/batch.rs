//! Batch writes in a constant number of round trips per batch, and their streaming variants.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use bson::{doc, Bson, Document, RawArrayBuf, RawBson, RawDocumentBuf};
use futures_util::{Stream, StreamExt, TryStreamExt};
use mongodb::{Collection, Database};
use tracing::Instrument;
use ulid::Ulid;

use crate::error::{classify, is_duplicate_key, Error, DUPLICATE_KEY};
use crate::retry::RetryPolicy;
use crate::traits::{NaturalKey, RandomId};
use crate::write::{
    Outcome, Prepared, PreparedEvent, WriteMode, HASH_FIELD, IDEMPOTENCY_FIELD, IDENTITY_FIELD,
    WRITE_FIELD,
};

/// Default number of documents per batch.
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// A batch is also cut when its documents reach this many BSON bytes: one command document
/// may not exceed 16 MiB, and an `update` statement wraps each document in a filter.
pub const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// How many read-decide-write rounds a batch tries for documents that lost a race.
const MAX_ROUNDS: u32 = 8;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a batch write did, counted per document. `failures` holds each document that could
/// not be written, by its index in the input, with the reason; the others were written (or
/// left alone) as counted.
///
/// ```
/// let report = natural_key::BatchReport::default();
/// assert_eq!(report.processed(), 0);
/// assert!(report.failures.is_empty());
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BatchReport {
    /// New documents stored.
    pub inserted: u64,
    /// Stored documents whose content changed.
    pub updated: u64,
    /// Documents whose stored content hash already matched: no write sent for them.
    pub unchanged: u64,
    /// (RandomId) events already stored — retries whose first attempt landed.
    pub already_applied: u64,
    /// Documents not written: index in the input, and why.
    pub failures: Vec<(usize, Error)>,
    /// Batches processed so far.
    pub batches: u64,
}

impl BatchReport {
    /// Documents processed so far (successes and failures).
    pub fn processed(&self) -> u64 {
        self.inserted
            + self.updated
            + self.unchanged
            + self.already_applied
            + self.failures.len() as u64
    }

    fn count(&mut self, o: Outcome) {
        match o {
            Outcome::Inserted(_) => self.inserted += 1,
            Outcome::Updated(_) => self.updated += 1,
            Outcome::Unchanged(_) => self.unchanged += 1,
            Outcome::AlreadyApplied(_) => self.already_applied += 1,
        }
    }
}

/// Progress callback: called with the running report after each batch.
type Progress<'a> = Box<dyn FnMut(&BatchReport) + Send + 'a>;

/// Options shared by the batch builders.
struct Options<'a> {
    batch_size: usize,
    mode: WriteMode,
    retry: RetryPolicy,
    progress: Option<Progress<'a>>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            batch_size: DEFAULT_BATCH_SIZE,
            mode: WriteMode::Merge,
            retry: RetryPolicy::none(),
            progress: None,
        }
    }
}

macro_rules! builder_options {
    () => {
        /// Documents per batch (default 1000, at least 1; a batch is also cut at
        /// [`MAX_BATCH_BYTES`]). Each batch costs one read and at most two write commands;
        /// memory holds one batch at a time.
        pub fn batch_size(mut self, n: usize) -> Self {
            self.opts.batch_size = n.max(1);
            self
        }

        /// Retries a batch that hit a transient error under `policy`. Safe: the retried
        /// batch re-reads what is stored and writes only what is still missing.
        pub fn retry(mut self, policy: RetryPolicy) -> Self {
            self.opts.retry = policy;
            self
        }

        /// Called with the running report after each batch (e.g. to drive a progress bar).
        pub fn on_progress(mut self, f: impl FnMut(&BatchReport) + Send + 'a) -> Self {
            self.opts.progress = Some(Box::new(f));
            self
        }
    };
}

/// The guarded upsert of many [`NaturalKey`] documents, a batch at a time: per batch one read
/// of the batch's identities, then one `insert` command carrying only the new documents and
/// one `update` command carrying only the changed ones (none when nothing changed), with
/// every guarantee of the single upsert (identity guard, skip unchanged, unique identity,
/// optimistic concurrency). A bad document is reported at its index and does not stop the rest.
///
/// While the input keeps being new documents, a batch skips its read and starts with the
/// `insert`: the engine's unique indexes refuse any document already stored (same `_id`, or
/// same identity under a changed timestamp key), and only those are read back and decided.
/// This needs the unique identity index from [`ensure_indexes`](crate::ensure_indexes); the
/// call looks for it once, and without it every batch reads first. A batch in which anything
/// was not new sends the next one back to reading first, so re-ingesting unchanged data never
/// sends a write command.
///
/// `docs` is any `IntoIterator` of documents or references to them.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(NaturalKey, Serialize, Deserialize)]
/// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
/// # async fn f(coll: natural_key::mongodb::Collection<Post>, posts: Vec<Post>) -> Result<(), natural_key::Error> {
/// let report = natural_key::upsert_many(&coll, &posts).batch_size(1000).await?;
/// println!("{} new, {} edited, {} unchanged", report.inserted, report.updated, report.unchanged);
/// for (index, error) in &report.failures {
///     eprintln!("post #{index}: {error}");
/// }
/// # Ok(()) }
/// ```
pub fn upsert_many<'a, T, I>(coll: &'a Collection<T>, docs: I) -> UpsertMany<'a, T, I::IntoIter>
where
    T: NaturalKey + Send + Sync,
    I: IntoIterator,
    I::Item: Borrow<T>,
{
    UpsertStream {
        coll,
        docs: futures_util::stream::iter(docs),
        opts: Options::default(),
    }
}

/// Builder returned by [`upsert_many`]: the streaming builder over the iterator; `.await` it.
pub type UpsertMany<'a, T, I> = UpsertStream<'a, T, futures_util::stream::Iter<I>>;

/// [`upsert_many`] over a `Stream`: memory holds at most one batch, so a million-document
/// ingest runs in constant memory. Progress is reported through `.on_progress`.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(NaturalKey, Serialize, Deserialize)]
/// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
/// # async fn f(coll: natural_key::mongodb::Collection<Post>) -> Result<(), natural_key::Error> {
/// let posts = futures::stream::iter((0..1_000_000).map(|i| Post {
///     slug: format!("post-{i}"),
///     published_at: 1_700_000_000_000 + i,
/// }));
/// let report = natural_key::upsert_stream(&coll, posts)
///     .batch_size(1000)
///     .on_progress(|r| eprintln!("{} done", r.processed()))
///     .await?;
/// # Ok(()) }
/// ```
pub fn upsert_stream<'a, T, S>(coll: &'a Collection<T>, docs: S) -> UpsertStream<'a, T, S>
where
    T: NaturalKey + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    UpsertStream {
        coll,
        docs,
        opts: Options::default(),
    }
}

/// Builder returned by [`upsert_stream`]; `.await` it.
#[must_use = "a batch write does nothing until awaited"]
pub struct UpsertStream<'a, T: Send + Sync, S> {
    coll: &'a Collection<T>,
    docs: S,
    opts: Options<'a>,
}

impl<'a, T: NaturalKey + Send + Sync, S> UpsertStream<'a, T, S> {
    builder_options!();

    /// [`WriteMode::Merge`] (default) or [`WriteMode::Replace`].
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.opts.mode = mode;
        self
    }
}

impl<'a, T, S> IntoFuture for UpsertStream<'a, T, S>
where
    T: NaturalKey + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    type Output = Result<BatchReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run_upserts(self.coll, self.docs, self.opts))
    }
}

/// One document of a batch: its input index, what to write, and the document itself (kept
/// for the key description of an error, which is only built when needed).
struct Item<D> {
    index: usize,
    prepared: Prepared,
    doc: D,
}

async fn run_upserts<'a, T, S>(
    coll: &'a Collection<T>,
    docs: S,
    mut opts: Options<'a>,
) -> Result<BatchReport, Error>
where
    T: NaturalKey + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    let raw = coll.clone_with_type::<Document>();
    let db = raw_database(coll);
    let span = tracing::info_span!("natural_key.upsert_many", collection = %raw.namespace());
    async move {
        let mut report = BatchReport::default();
        let mut strategy = Strategy::default();
        let mut batch: Vec<Item<S::Item>> = Vec::with_capacity(opts.batch_size);
        let mut identities: HashSet<String> = HashSet::with_capacity(opts.batch_size);
        let mut bytes = 0;
        let mut docs = std::pin::pin!(docs.enumerate());
        while let Some((index, doc)) = docs.next().await {
            match Prepared::of::<T>(doc.borrow()) {
                Err(e) => report.failures.push((index, e)),
                Ok(prepared) => {
                    // A batch holds each identity once, so the batch means the same as writing
                    // its documents one after another.
                    let size = prepared.body.as_bytes().len();
                    if identities.contains(&prepared.identity) || bytes + size > MAX_BATCH_BYTES {
                        bytes = 0;
                        flush(
                            &raw,
                            &db,
                            &mut batch,
                            &mut identities,
                            &mut report,
                            &mut opts,
                            &mut strategy,
                        )
                        .await?;
                    }
                    identities.insert(prepared.identity.clone());
                    bytes += size;
                    batch.push(Item {
                        index,
                        prepared,
                        doc,
                    });
                    if batch.len() >= opts.batch_size {
                        bytes = 0;
                        flush(
                            &raw,
                            &db,
                            &mut batch,
                            &mut identities,
                            &mut report,
                            &mut opts,
                            &mut strategy,
                        )
                        .await?;
                    }
                }
            }
        }
        flush(
            &raw,
            &db,
            &mut batch,
            &mut identities,
            &mut report,
            &mut opts,
            &mut strategy,
        )
        .await?;
        Ok(report)
    }
    .instrument(span)
    .await
}

/// Serialized size of a document (what it costs in a command).
fn bson_size(doc: &Document) -> usize {
    bson::to_vec(doc).map(|v| v.len()).unwrap_or(0)
}

fn raw_database<T: Send + Sync>(coll: &Collection<T>) -> Database {
    coll.client().database(&coll.namespace().db)
}

async fn flush<T: NaturalKey, D: Borrow<T>>(
    raw: &Collection<Document>,
    db: &Database,
    batch: &mut Vec<Item<D>>,
    identities: &mut HashSet<String>,
    report: &mut BatchReport,
    opts: &mut Options<'_>,
    strategy: &mut Strategy,
) -> Result<(), Error> {
    if batch.is_empty() {
        return Ok(());
    }
    let items = std::mem::take(batch);
    identities.clear();
    let mut insert_first = strategy.insert_first;
    let results = opts
        .retry
        .run("upsert_many", || {
            // A retried batch may have been applied by the lost attempt: it reads first.
            let this_attempt = std::mem::replace(&mut insert_first, false);
            upsert_batch(raw, db, &items, opts.mode, this_attempt)
        })
        .await?;
    let all_new = results
        .iter()
        .all(|r| matches!(r, Ok(Outcome::Inserted(_))));
    strategy.after_batch(raw, all_new).await;
    for (item, result) in items.iter().zip(results) {
        match result {
            Ok(o) => report.count(o),
            Err(e) => report.failures.push((item.index, e)),
        }
    }
    report.batches += 1;
    if let Some(progress) = opts.progress.as_mut() {
        progress(report);
    }
    Ok(())
}

/// How the next batch of an `upsert_many` starts: with the read of its identities, or, while
/// the input keeps being new documents, with the `insert` itself.
///
/// A batch of new documents needs no read: the `insert` is the check, because the engine
/// refuses a document whose `_id` or identity is already stored (the unique identity index
/// catches a changed timestamp key). Only the refused documents are then read and decided.
/// That saves the read on every batch of a first ingest — on FerretDB 1.x, whose every filter
/// but `_id` equality scans the whole collection, it is the difference between linear and
/// quadratic. Skipping the read is only safe with the unique identity index in place, so it is
/// looked up (once per call) before the first such batch; without it every batch reads first.
/// A batch in which anything was not a fresh insert sends the next one back to reading first,
/// so a re-ingest of unchanged data sends no write command at all.
#[derive(Debug, Default)]
struct Strategy {
    insert_first: bool,
    /// Whether the collection has the unique identity index; `None` until looked up.
    identity_index: Option<bool>,
}

impl Strategy {
    async fn after_batch(&mut self, raw: &Collection<Document>, all_new: bool) {
        if !all_new {
            self.insert_first = false;
            return;
        }
        if self.identity_index.is_none() {
            let present = has_identity_index(raw).await;
            if !present {
                tracing::debug!(
                    "no unique `{IDENTITY_FIELD}` index (see `ensure_indexes`): every batch reads first"
                );
            }
            self.identity_index = Some(present);
        }
        self.insert_first = self.identity_index == Some(true);
    }
}

/// Whether `raw` has a unique index on exactly the identity field. A failed lookup counts as
/// no index (the safe answer: the batch reads first).
async fn has_identity_index(raw: &Collection<Document>) -> bool {
    let Ok(cursor) = raw.list_indexes().await else {
        return false;
    };
    let Ok(models) = cursor.try_collect::<Vec<_>>().await else {
        return false;
    };
    models.iter().any(|m| {
        m.keys.len() == 1
            && m.keys.contains_key(IDENTITY_FIELD)
            && m.options.as_ref().and_then(|o| o.unique) == Some(true)
    })
}

/// One document to send: the item it belongs to, whether it creates the document, and the
/// `insert` document or `update` statement.
struct Statement {
    item: usize,
    insert: bool,
    doc: RawDocumentBuf,
}

/// Decides and writes one batch; returns one result per item. `Err` only for failures of the
/// whole batch (network, ...), which the caller may retry: the batch is idempotent.
///
/// Engines differ in what a multi-statement `update` reply says: MongoDB reports each failed
/// statement by index and carries on; FerretDB 1.x stops at the first failure with a command
/// error, and numbers `upserted` entries by their order rather than their statement. So every
/// statement also stamps the document with the command's write token (`_nk_write`): after a
/// failed command, the next read tells "we applied it" from "another writer did" exactly.
async fn upsert_batch<T: NaturalKey, D: Borrow<T>>(
    raw: &Collection<Document>,
    db: &Database,
    items: &[Item<D>],
    mode: WriteMode,
    insert_first: bool,
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    let namespace = || raw.namespace().to_string();
    let mut results: Vec<Option<Result<Outcome, Error>>> = (0..items.len()).map(|_| None).collect();
    // For an item whose statement's fate is unknown: the token it was written with, and
    // whether it was an insert.
    let mut uncertain: Vec<Option<(String, bool)>> = vec![None; items.len()];
    let mut pending: Vec<usize> = (0..items.len()).collect();
    let mut one_by_one = false;
    for round in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        // Round trip 1: the stored `_id`, hash and write token of every pending identity —
        // skipped when the batch starts with the insert (see `Strategy`), which treats every
        // document as new and leaves what the engine refuses for the next round.
        let wanted: Vec<&str> = pending
            .iter()
            .map(|&i| items[i].prepared.identity.as_str())
            .collect();
        let stored: HashMap<String, Document> = if round == 0 && insert_first {
            HashMap::new()
        } else {
            read_identities(raw, &wanted).await?
        };

        // Decide, and collect what to send: new documents go in one `insert` command (engines
        // apply it as one batch), changed ones in one `update` command.
        let token = Ulid::new().to_string();
        let mut inserts: Vec<Statement> = Vec::new();
        let mut updates: Vec<Statement> = Vec::new();
        for &i in &pending {
            let p = &items[i].prepared;
            let found = stored.get(&p.identity);
            let hash = found
                .and_then(|d| d.get(HASH_FIELD))
                .cloned()
                .unwrap_or(Bson::Null);
            if let Some(d) = found {
                let id = d.get("_id").cloned().unwrap_or(Bson::Null);
                if id != Bson::String(p.id_text.clone()) {
                    results[i] = Some(Err(Error::ImmutableKeyChanged {
                        collection: namespace(),
                        stored_id: match id {
                            Bson::String(s) => s,
                            other => other.to_string(),
                        },
                        derived_id: p.id,
                        key: items[i].doc.borrow().key_description(),
                    }));
                    continue;
                }
                if hash == Bson::String(p.hash.clone()) {
                    let ours = match (&uncertain[i], d.get_str(WRITE_FIELD)) {
                        (Some((t, inserted)), Ok(stored_token)) if t == stored_token => {
                            Some(*inserted)
                        }
                        _ => None,
                    };
                    results[i] = Some(Ok(match ours {
                        Some(true) => Outcome::Inserted(p.id),
                        Some(false) => Outcome::Updated(p.id),
                        None => Outcome::Unchanged(p.id),
                    }));
                    continue;
                }
            }
            let insert = found.is_none();
            if insert && uncertain[i].is_none() {
                let mut doc = RawDocumentBuf::new();
                doc.append("_id", p.id_text.as_str());
                p.append_body_to(&mut doc)?;
                doc.append(WRITE_FIELD, token.as_str());
                inserts.push(Statement {
                    item: i,
                    insert,
                    doc,
                });
                continue;
            }
            // Update: applies only if the stored hash is still the one just read; otherwise the
            // upsert's insert collides on `_id` (duplicate key): the signal to decide again.
            // A retried insert: by `_id` alone, which also adopts a same-`_id` document written
            // by other code without identity (see `write::upsert_prepared`).
            let mut filter = RawDocumentBuf::new();
            filter.append("_id", p.id_text.as_str());
            if !insert {
                filter.append(HASH_FIELD, raw_value(&hash)?);
            }
            let mut body = RawDocumentBuf::new();
            p.append_body_to(&mut body)?;
            body.append(WRITE_FIELD, token.as_str());
            let update = match mode {
                WriteMode::Merge => {
                    let mut set = RawDocumentBuf::new();
                    set.append("$set", body);
                    set
                }
                WriteMode::Replace => body,
            };
            let mut statement = RawDocumentBuf::new();
            statement.append("q", filter);
            statement.append("u", update);
            statement.append("upsert", true);
            statement.append("multi", false);
            updates.push(Statement {
                item: i,
                insert,
                doc: statement,
            });
        }
        if inserts.is_empty() && updates.is_empty() {
            break;
        }

        // Round trip 2 (and 3): the write commands, or one per statement once an engine
        // refused a statement without telling which (see `one_by_one`).
        let mut next = Vec::new();
        for (command, field, group) in [
            ("insert", "documents", inserts),
            ("update", "updates", updates),
        ] {
            let chunks: Vec<std::ops::Range<usize>> = if one_by_one {
                (0..group.len()).map(|k| k..k + 1).collect()
            } else if group.is_empty() {
                Vec::new()
            } else {
                vec![0..group.len()]
            };
            for chunk in chunks {
                let sent = &group[chunk];
                let mut payload = RawArrayBuf::new();
                for s in sent {
                    payload.push(s.doc.clone());
                }
                let mut cmd = RawDocumentBuf::new();
                cmd.append(command, raw.name());
                cmd.append(field, payload);
                cmd.append("ordered", false);
                let reply = db.run_raw_command(cmd).await;
                let reply = match reply {
                    Ok(reply) => reply,
                    Err(e) if is_duplicate_key(&e) => {
                        // Stopped at a duplicate key without saying where: every statement is
                        // uncertain until the next read shows whose token is stored.
                        for s in sent {
                            uncertain[s.item] = Some((token.clone(), s.insert));
                            next.push(s.item);
                        }
                        continue;
                    }
                    Err(e) => return Err(classify(e)),
                };
                if let Ok(wce) = reply.get_document("writeConcernError") {
                    return Err(Error::WriteFailed {
                        collection: namespace(),
                        id: items[sent[0].item].prepared.id,
                        code: wce.get("code").and_then(as_index).unwrap_or(0) as i32,
                        message: wce.get_str("errmsg").unwrap_or_default().to_string(),
                    });
                }
                let errors: Vec<(i32, String)> = reply
                    .get_array("writeErrors")
                    .into_iter()
                    .flatten()
                    .filter_map(Bson::as_document)
                    .map(|e| {
                        let code = e
                            .get("code")
                            .and_then(as_index)
                            .map(|c| c as i32)
                            .unwrap_or(0);
                        (code, e.get_str("errmsg").unwrap_or_default().to_string())
                    })
                    .collect();
                if errors.is_empty() {
                    let inserts = sent.iter().filter(|s| s.insert).count();
                    let upserted: HashSet<usize> = reply
                        .get_array("upserted")
                        .map(|a| {
                            a.iter()
                                .filter_map(|u| u.as_document()?.get("index").and_then(as_index))
                                .collect()
                        })
                        .unwrap_or_default();
                    for (k, s) in sent.iter().enumerate() {
                        let id = items[s.item].prepared.id;
                        // An upserting insert that matched adopted a document written by other
                        // code (or by a concurrent writer since our read).
                        let inserted = s.insert
                            && (command == "insert"
                                || upserted.len() == inserts
                                || upserted.contains(&k));
                        results[s.item] = Some(Ok(if inserted {
                            Outcome::Inserted(id)
                        } else {
                            Outcome::Updated(id)
                        }));
                    }
                } else if let [s] = sent {
                    match errors.into_iter().next() {
                        Some((DUPLICATE_KEY, _)) => {
                            uncertain[s.item] = Some((token.clone(), s.insert));
                            next.push(s.item);
                        }
                        Some((code, message)) => {
                            results[s.item] = Some(Err(Error::WriteFailed {
                                collection: namespace(),
                                id: items[s.item].prepared.id,
                                code,
                                message,
                            }))
                        }
                        None => unreachable!("errors is not empty"),
                    }
                } else {
                    // Which statements applied is not reliably reported (FerretDB 1.x stops at
                    // the first failure and reports it at index 0): the next read decides, and
                    // a refusal other than a duplicate key is pinned down one at a time.
                    if errors.iter().any(|(code, _)| *code != DUPLICATE_KEY) {
                        one_by_one = true;
                    }
                    for s in sent {
                        uncertain[s.item] = Some((token.clone(), s.insert));
                        next.push(s.item);
                    }
                }
            }
        }
        pending = next;
    }
    Ok(results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or_else(|| {
                Err(Error::Contention {
                    collection: namespace(),
                    id: items[i].prepared.id,
                    attempts: MAX_ROUNDS,
                })
            })
        })
        .collect())
}

/// The stored `_id`, hash, identity and write token of each of `identities` that is stored,
/// keyed by identity: one `find`.
async fn read_identities(
    raw: &Collection<Document>,
    identities: &[&str],
) -> Result<HashMap<String, Document>, Error> {
    raw.find(doc! { IDENTITY_FIELD: { "$in": identities } })
        .projection(doc! { "_id": 1, HASH_FIELD: 1, IDENTITY_FIELD: 1, WRITE_FIELD: 1 })
        .batch_size(identities.len() as u32 + 1)
        .await
        .map_err(classify)?
        .map_ok(|d| (d.get_str(IDENTITY_FIELD).unwrap_or_default().to_string(), d))
        .try_collect()
        .await
        .map_err(classify)
}

/// A stored value (read back as `Bson`) for a raw filter.
fn raw_value(b: &Bson) -> Result<RawBson, Error> {
    RawBson::try_from(b.clone()).map_err(|e| Error::Serialize {
        type_name: "bson::Bson",
        message: e.to_string(),
    })
}

fn as_index(b: &Bson) -> Option<usize> {
    match b {
        Bson::Int32(i) => usize::try_from(*i).ok(),
        Bson::Int64(i) => usize::try_from(*i).ok(),
        Bson::Double(d) if d.fract() == 0.0 && *d >= 0.0 => Some(*d as usize),
        _ => None,
    }
}

/// Insert-once of many [`RandomId`] events, a batch at a time: one `insert` command per batch
/// (unordered), then — only if some were already stored — one read to tell retries
/// ([`BatchReport::already_applied`]) from real failures.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(RandomId, Serialize, Deserialize)]
/// # struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
/// # async fn f(coll: natural_key::mongodb::Collection<Click>, clicks: Vec<Click>) -> Result<(), natural_key::Error> {
/// let report = natural_key::insert_many(&coll, &clicks).await?;
/// assert_eq!(report.inserted + report.already_applied, clicks.len() as u64);
/// # Ok(()) }
/// ```
pub fn insert_many<'a, T, I>(coll: &'a Collection<T>, events: I) -> InsertMany<'a, T, I::IntoIter>
where
    T: RandomId + Send + Sync,
    I: IntoIterator,
    I::Item: Borrow<T>,
{
    InsertStream {
        coll,
        docs: futures_util::stream::iter(events),
        opts: Options::default(),
    }
}

/// Builder returned by [`insert_many`]: the streaming builder over the iterator; `.await` it.
pub type InsertMany<'a, T, I> = InsertStream<'a, T, futures_util::stream::Iter<I>>;

/// [`insert_many`] over a `Stream`, in constant memory.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(RandomId, Serialize, Deserialize)]
/// # struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
/// # async fn f(coll: natural_key::mongodb::Collection<Click>) -> Result<(), natural_key::Error> {
/// let clicks = futures::stream::iter((0..10_000).map(|_| Click { id: Ulid::new(), page: "/".into() }));
/// let report = natural_key::insert_stream(&coll, clicks).await?;
/// assert_eq!(report.inserted + report.already_applied, 10_000);
/// # Ok(()) }
/// ```
pub fn insert_stream<'a, T, S>(coll: &'a Collection<T>, events: S) -> InsertStream<'a, T, S>
where
    T: RandomId + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send,
{
    InsertStream {
        coll,
        docs: events,
        opts: Options::default(),
    }
}

/// Builder returned by [`insert_stream`]; `.await` it.
#[must_use = "a batch write does nothing until awaited"]
pub struct InsertStream<'a, T: Send + Sync, S> {
    coll: &'a Collection<T>,
    docs: S,
    opts: Options<'a>,
}

impl<'a, T: RandomId + Send + Sync, S> InsertStream<'a, T, S> {
    builder_options!();
}

impl<'a, T, S> IntoFuture for InsertStream<'a, T, S>
where
    T: RandomId + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send,
{
    type Output = Result<BatchReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run_inserts(self.coll, self.docs, self.opts))
    }
}

struct Event {
    index: usize,
    prepared: PreparedEvent,
}

async fn run_inserts<'a, T, S>(
    coll: &'a Collection<T>,
    docs: S,
    mut opts: Options<'a>,
) -> Result<BatchReport, Error>
where
    T: RandomId + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send,
{
    let raw = coll.clone_with_type::<Document>();
    let db = raw_database(coll);
    let span = tracing::info_span!("natural_key.insert_many", collection = %raw.namespace());
    async move {
        let mut report = BatchReport::default();
        let mut batch: Vec<Event> = Vec::with_capacity(opts.batch_size);
        let mut bytes = 0;
        let mut docs = std::pin::pin!(docs.enumerate());
        loop {
            let next = docs.next().await;
            let end = next.is_none();
            // An event that would push the batch past MAX_BATCH_BYTES starts the next batch.
            let mut carry = None;
            if let Some((index, doc)) = next {
                match PreparedEvent::of(doc.borrow()) {
                    Ok(prepared) => {
                        let size = bson_size(&prepared.body);
                        if !batch.is_empty() && bytes + size > MAX_BATCH_BYTES {
                            carry = Some((Event { index, prepared }, size));
                        } else {
                            bytes += size;
                            batch.push(Event { index, prepared });
                        }
                    }
                    Err(e) => report.failures.push((index, e)),
                }
            }
            let full = carry.is_some() || batch.len() >= opts.batch_size;
            if !batch.is_empty() && (end || full) {
                bytes = 0;
                let events = std::mem::take(&mut batch);
                let results = opts
                    .retry
                    .run("insert_many", || insert_batch(&raw, &db, &events))
                    .await?;
                for (e, r) in events.iter().zip(results) {
                    match r {
                        Ok(o) => report.count(o),
                        Err(err) => report.failures.push((e.index, err)),
                    }
                }
                report.batches += 1;
                if let Some(progress) = opts.progress.as_mut() {
                    progress(&report);
                }
            }
            if let Some((event, size)) = carry {
                bytes = size;
                batch.push(event);
            }
            if end {
                break;
            }
        }
        Ok(report)
    }
    .instrument(span)
    .await
}

async fn insert_batch(
    raw: &Collection<Document>,
    db: &Database,
    events: &[Event],
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    let documents: Vec<&Document> = events.iter().map(|e| &e.prepared.body).collect();
    let reply = db
        .run_command(doc! { "insert": raw.name(), "documents": documents, "ordered": false })
        .await
        .map_err(classify)?;
    let mut results: Vec<Result<Outcome, Error>> = events
        .iter()
        .map(|e| Ok(Outcome::Inserted(e.prepared.id)))
        .collect();
    let mut duplicates = Vec::new();
    if let Ok(errors) = reply.get_array("writeErrors") {
        for e in errors.iter().filter_map(Bson::as_document) {
            let Some(k) = e
                .get("index")
                .and_then(as_index)
                .filter(|&k| k < events.len())
            else {
                continue;
            };
            let code = e.get("code").and_then(as_index).map(|c| c as i32);
            if code == Some(DUPLICATE_KEY) {
                duplicates.push(k);
            } else {
                results[k] = Err(Error::WriteFailed {
                    collection: raw.namespace().to_string(),
                    id: events[k].prepared.id,
                    code: code.unwrap_or(0),
                    message: e.get_str("errmsg").unwrap_or_default().to_string(),
                });
            }
        }
    }
    if duplicates.is_empty() {
        return Ok(results);
    }
    // One read: which of the refused events are already stored (by id or idempotency key)?
    let ids: Vec<String> = duplicates
        .iter()
        .map(|&k| events[k].prepared.id.to_string())
        .collect();
    let keys: Vec<&str> = duplicates
        .iter()
        .filter_map(|&k| events[k].prepared.idempotency_key.as_deref())
        .collect();
    let mut by_id: HashSet<String> = HashSet::new();
    let mut by_key: HashMap<String, String> = HashMap::new();
    let mut cursor = raw
        .find(
            doc! { "$or": [ { "_id": { "$in": &ids } }, { IDEMPOTENCY_FIELD: { "$in": &keys } } ] },
        )
        .projection(doc! { "_id": 1, IDEMPOTENCY_FIELD: 1 })
        .batch_size(duplicates.len() as u32 * 2 + 1)
        .await
        .map_err(classify)?;
    while let Some(d) = cursor.try_next().await.map_err(classify)? {
        let id = match d.get("_id") {
            Some(Bson::String(s)) => s.clone(),
            _ => continue,
        };
        if let Ok(k) = d.get_str(IDEMPOTENCY_FIELD) {
            by_key.insert(k.to_string(), id.clone());
        }
        by_id.insert(id);
    }
    for k in duplicates {
        let p = &events[k].prepared;
        let stored = if by_id.contains(&p.id.to_string()) {
            Some(p.id)
        } else {
            p.idempotency_key
                .as_ref()
                .and_then(|key| by_key.get(key))
                .and_then(|s| s.parse::<Ulid>().ok())
        };
        results[k] = match stored {
            Some(id) => Ok(Outcome::AlreadyApplied(id)),
            // Refused as a duplicate yet not found: deleted in between. Transient: retry.
            None => Err(Error::Contention {
                collection: raw.namespace().to_string(),
                id: p.id,
                attempts: 1,
            }),
        };
    }
    Ok(results)
}
