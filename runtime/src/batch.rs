//! Batch writes in a constant number of round trips per batch, and their streaming variants.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use bson::{doc, Bson, Document, RawArrayBuf, RawBson, RawDocumentBuf};
use futures_util::{Stream, StreamExt, TryStreamExt};
use mongodb::error::ErrorKind;
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

/// Default number of documents per batch. Large, because every batch costs a read and on
/// engines without secondary-index reads (FerretDB 1.x) each read scans the collection; memory
/// stays bounded by [`MAX_BATCH_BYTES`].
pub const DEFAULT_BATCH_SIZE: usize = 10_000;

/// A batch is also cut when its documents reach this many BSON bytes, which bounds memory
/// (a batch is written while the next one is prepared). Commands are sized separately, to the
/// engine's limits.
pub const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

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
        /// Documents per batch (default [`DEFAULT_BATCH_SIZE`], at least 1; a batch is also
        /// cut at [`MAX_BATCH_BYTES`]). Each batch costs at most one read and one `insert`
        /// and one `update` command (more only when a command would exceed the engine's
        /// size limits); memory holds two batches: the one being written and the next.
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

/// [`upsert_many`] over a `Stream`: memory holds at most two batches, so a million-document
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

/// The next batch read from the input: its documents and the ones that failed to prepare.
struct Collected<D> {
    items: Vec<Item<D>>,
    failures: Vec<(usize, Error)>,
    /// The input is exhausted.
    done: bool,
}

/// Reads and prepares the next batch: up to `batch_size` documents, cut early at
/// [`MAX_BATCH_BYTES`] or at an identity the batch already holds (so a batch means the same as
/// writing its documents one after another). The document that caused a cut is kept in
/// `carry` and starts the next batch.
async fn collect<T, S>(
    docs: &mut Pin<&mut futures_util::stream::Enumerate<S>>,
    carry: &mut Option<Item<S::Item>>,
    batch_size: usize,
) -> Collected<S::Item>
where
    T: NaturalKey,
    S: Stream,
    S::Item: Borrow<T>,
{
    let mut batch = Collected {
        items: Vec::with_capacity(batch_size),
        failures: Vec::new(),
        done: false,
    };
    let mut identities: HashSet<String> = HashSet::with_capacity(batch_size);
    let mut bytes = 0;
    if let Some(item) = carry.take() {
        identities.insert(item.prepared.identity.clone());
        bytes += item.prepared.body.as_bytes().len();
        batch.items.push(item);
    }
    while batch.items.len() < batch_size {
        let Some((index, doc)) = docs.next().await else {
            batch.done = true;
            break;
        };
        match Prepared::of::<T>(doc.borrow()) {
            Err(e) => batch.failures.push((index, e)),
            Ok(prepared) => {
                let size = prepared.body.as_bytes().len();
                let item = Item {
                    index,
                    prepared,
                    doc,
                };
                let full = !batch.items.is_empty() && bytes + size > MAX_BATCH_BYTES;
                if full || identities.contains(&item.prepared.identity) {
                    *carry = Some(item);
                    break;
                }
                identities.insert(item.prepared.identity.clone());
                bytes += size;
                batch.items.push(item);
            }
        }
    }
    batch
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
        let mut docs = std::pin::pin!(docs.enumerate());
        let mut carry = None;
        let batch_size = opts.batch_size;
        let mut current = collect::<T, S>(&mut docs, &mut carry, batch_size).await;
        loop {
            let last = current.done && carry.is_none();
            // The next batch is read and prepared (hashing, serializing) while this one's
            // commands are on the wire: client and engine work at the same time.
            let (written, next) = futures_util::future::join(
                flush(&raw, &db, current, &mut report, &mut opts, &mut strategy),
                async {
                    if last {
                        None
                    } else {
                        Some(collect::<T, S>(&mut docs, &mut carry, batch_size).await)
                    }
                },
            )
            .await;
            written?;
            match next {
                Some(next) => current = next,
                None => break,
            }
        }
        Ok(report)
    }
    .instrument(span)
    .await
}

fn raw_database<T: Send + Sync>(coll: &Collection<T>) -> Database {
    coll.client().database(&coll.namespace().db)
}

async fn flush<T: NaturalKey, D: Borrow<T>>(
    raw: &Collection<Document>,
    db: &Database,
    batch: Collected<D>,
    report: &mut BatchReport,
    opts: &mut Options<'_>,
    strategy: &mut Strategy,
) -> Result<(), Error> {
    let Collected {
        items, failures, ..
    } = batch;
    let anything = !items.is_empty() || !failures.is_empty();
    report.failures.extend(failures);
    if !items.is_empty() {
        let mut insert_first = strategy.insert_first;
        let mode = opts.mode;
        let results = opts
            .retry
            .run("upsert_many", || {
                // A retried batch may have been applied by the lost attempt: it reads first.
                let this_attempt = std::mem::replace(&mut insert_first, false);
                upsert_batch(raw, db, &items, mode, this_attempt, &strategy.limit)
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
    }
    if !anything {
        return Ok(());
    }
    report.failures.sort_by_key(|(index, _)| *index);
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
/// That saves the read on every batch of a first ingest — on FerretDB 1.x (SQLite), where every
/// read scans the whole collection, it is the difference between linear and quadratic.
/// Skipping the read is only safe with the unique identity index in place, so it is looked up
/// (once per call) before the first such batch; without it every batch reads first.
/// A batch in which anything was not a fresh insert sends the next one back to reading first,
/// so a re-ingest of unchanged data sends no write command at all.
#[derive(Debug, Default)]
struct Strategy {
    insert_first: bool,
    limit: StatementLimit,
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
    limit: &StatementLimit,
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
                // No write token: an unordered `insert` reports each refused document at its
                // index on every engine, so an insert is never uncertain (and the engine
                // stores one field less per document).
                let mut doc = RawDocumentBuf::new();
                doc.append("_id", p.id_text.as_str());
                p.append_body_to(&mut doc)?;
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

        // Round trip 2 (and 3): the write commands.
        let mut next = Vec::new();
        if !inserts.is_empty() {
            let docs = raw.clone_with_type::<RawDocumentBuf>();
            let refused = send_inserts(&docs, inserts.iter().map(|s| &s.doc).collect()).await;
            let all_refused = || -> Vec<(usize, i32, String)> {
                (0..inserts.len())
                    .map(|k| (k, DUPLICATE_KEY, String::new()))
                    .collect()
            };
            let refused = match refused {
                Ok(refused) if refused.iter().all(|(k, _, _)| *k < inserts.len()) => refused,
                // Refusals that cannot be placed: the next read decides every document.
                Ok(_) => all_refused(),
                Err(e) if is_duplicate_key(&e) => all_refused(),
                Err(e) => {
                    let id = items[inserts[0].item].prepared.id;
                    return Err(write_error(e, namespace(), id));
                }
            };
            let mut refused: HashMap<usize, (i32, String)> = refused
                .into_iter()
                .map(|(k, code, message)| (inserts[k].item, (code, message)))
                .collect();
            for s in &inserts {
                let p = &items[s.item].prepared;
                match refused.remove(&s.item) {
                    None => results[s.item] = Some(Ok(Outcome::Inserted(p.id))),
                    Some((DUPLICATE_KEY, _)) => {
                        uncertain[s.item] = Some((token.clone(), true));
                        next.push(s.item);
                    }
                    Some((code, message)) => {
                        results[s.item] = Some(Err(Error::WriteFailed {
                            collection: namespace(),
                            id: p.id,
                            code,
                            message,
                        }))
                    }
                }
            }
        }
        // Updates: `update` commands cut to fit the command size limit, or one per statement
        // once an engine refused a statement without telling which (see `one_by_one`).
        let max_statements = if updates.is_empty() {
            MAX_STATEMENTS
        } else {
            limit.get(db).await
        };
        for chunk in command_chunks(&updates, one_by_one, max_statements) {
            let sent = &updates[chunk];
            let mut payload = RawArrayBuf::new();
            for s in sent {
                payload.push(s.doc.clone());
            }
            let mut cmd = RawDocumentBuf::new();
            cmd.append("update", raw.name());
            cmd.append("updates", payload);
            cmd.append("ordered", false);
            let reply = match db.run_raw_command(cmd).await {
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
                    let inserted = s.insert && (upserted.len() == inserts || upserted.contains(&k));
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

/// Sends new documents with the driver's unordered `insert_many` (OP_MSG document sequences,
/// split at the server's message and batch limits). Returns the refused documents as
/// (position in `inserts`, code, message): every engine reports each refused document of an
/// unordered insert at its index and applies the others (FerretDB 1.x retries a refused
/// insert one document at a time to do so).
async fn send_inserts<D: serde::Serialize + Send + Sync>(
    coll: &Collection<D>,
    docs: Vec<&D>,
) -> Result<Vec<(usize, i32, String)>, mongodb::error::Error> {
    match coll.insert_many(docs).ordered(false).await {
        Ok(_) => Ok(Vec::new()),
        Err(e) => match e.kind.as_ref() {
            ErrorKind::InsertMany(m) if m.write_concern_error.is_none() => Ok(m
                .write_errors
                .iter()
                .flatten()
                .map(|w| (w.index, w.code, w.message.clone()))
                .collect()),
            _ => Err(e),
        },
    }
}

/// A failed `insert`: a write concern error after the documents were applied is reported as
/// [`Error::WriteFailed`]; anything else is classified as usual.
fn write_error(e: mongodb::error::Error, collection: String, id: Ulid) -> Error {
    if let ErrorKind::InsertMany(m) = e.kind.as_ref() {
        if let Some(wce) = &m.write_concern_error {
            return Error::WriteFailed {
                collection,
                id,
                code: wce.code,
                message: wce.message.clone(),
            };
        }
    }
    classify(e)
}

/// Most bytes of statements in one `update` command: half the 16 MiB limit on a command
/// document, leaving room for the command's own fields.
const MAX_COMMAND_BYTES: usize = 8 * 1024 * 1024;

/// Most statements in one `update` command (MongoDB accepts up to 100,000).
const MAX_STATEMENTS: usize = 10_000;

/// Most statements in one `update` command on FerretDB 1.x. Its `update` keeps every
/// statement's query open until the command ends, each holding one of the 100 connections of
/// its SQLite pool; a command of ~100 statements (or commands from several writers adding up
/// to that) waits forever for a connection for its next write. 16 leaves room for six
/// concurrent writers.
const FERRETDB_MAX_STATEMENTS: usize = 16;

/// The statement limit for `update` commands on this engine, looked up once per call with
/// `buildInfo` (FerretDB answers with a `ferretdbVersion`); 0 until then.
#[derive(Debug, Default)]
struct StatementLimit(std::sync::atomic::AtomicUsize);

impl StatementLimit {
    async fn get(&self, db: &Database) -> usize {
        use std::sync::atomic::Ordering;
        let known = self.0.load(Ordering::Relaxed);
        if known != 0 {
            return known;
        }
        let limit = match db.run_command(doc! { "buildInfo": 1 }).await {
            Ok(info) if info.contains_key("ferretdbVersion") => FERRETDB_MAX_STATEMENTS,
            _ => MAX_STATEMENTS,
        };
        self.0.store(limit, Ordering::Relaxed);
        limit
    }
}

/// Splits statements into commands that fit the engine's limits (or one per statement).
fn command_chunks(
    group: &[Statement],
    one_by_one: bool,
    max_statements: usize,
) -> Vec<std::ops::Range<usize>> {
    if one_by_one || group.is_empty() {
        return (0..group.len()).map(|k| k..k + 1).collect();
    }
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (k, s) in group.iter().enumerate() {
        let size = s.doc.as_bytes().len();
        if k > start && (bytes + size > MAX_COMMAND_BYTES || k - start >= max_statements) {
            chunks.push(start..k);
            (start, bytes) = (k, 0);
        }
        bytes += size;
    }
    if start < group.len() {
        chunks.push(start..group.len());
    }
    chunks
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
                        let size = prepared.body.as_bytes().len();
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
                    .run("insert_many", || insert_batch(&raw, &events))
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
    events: &[Event],
) -> Result<Vec<Result<Outcome, Error>>, Error> {
    let docs = raw.clone_with_type::<RawDocumentBuf>();
    let refused = send_inserts(&docs, events.iter().map(|e| &e.prepared.body).collect())
        .await
        .map_err(|e| write_error(e, raw.namespace().to_string(), events[0].prepared.id))?;
    let mut results: Vec<Result<Outcome, Error>> = events
        .iter()
        .map(|e| Ok(Outcome::Inserted(e.prepared.id)))
        .collect();
    let mut duplicates = Vec::new();
    for (k, code, message) in refused {
        if k >= events.len() {
            continue;
        }
        if code == DUPLICATE_KEY {
            duplicates.push(k);
        } else {
            results[k] = Err(Error::WriteFailed {
                collection: raw.namespace().to_string(),
                id: events[k].prepared.id,
                code,
                message,
            });
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
