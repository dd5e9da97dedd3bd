//! Batching: any iterator or stream of documents cut into batches, each prepared while the
//! previous one is on the wire, written through a [`Writer`] under the retry policy, and
//! counted into a [`BatchReport`]. Single writes are batches of one through the same path.

use std::future::Future;
use std::pin::Pin;

use std::collections::{HashSet, VecDeque};

use foldhash::fast::RandomState;
use futures_util::future::{self, Either};
use futures_util::stream::FuturesOrdered;
use futures_util::{Stream, StreamExt};

use crate::error::Error;
use crate::metrics;
use crate::outcome::{BatchError, BatchReport, Counted};
use crate::retry::{Attempts, RetryPolicy};
use crate::stored::{Prepared, PreparedDelete, PreparedEvent};

/// Default number of documents per batch. Large, because every batch costs a read and on
/// engines without secondary-index reads (FerretDB 1.x) each read scans the collection; memory
/// stays bounded by [`MAX_BATCH_BYTES`].
pub const DEFAULT_BATCH_SIZE: usize = 10_000;

/// A batch is also cut when its documents reach this many BSON bytes, which bounds memory
/// (a batch is written while the next one is prepared). Commands are sized separately, to the
/// engine's limits.
pub const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// Progress callback: called with the running report after each batch (of writes, or of a
/// maintenance scan).
pub(crate) type Progress<'a, R = BatchReport> = Box<dyn FnMut(&R) + Send + 'a>;

/// Options of the batch builders.
pub(crate) struct Options<'a> {
    pub(crate) batch_size: usize,
    /// Batches written at once (at least 1).
    pub(crate) in_flight: usize,
    pub(crate) retry: RetryPolicy,
    pub(crate) progress: Option<Progress<'a>>,
}

impl Options<'_> {
    /// The defaults of a batch call on a handle whose policy is `retry`.
    pub(crate) fn new(retry: RetryPolicy) -> Self {
        Options {
            batch_size: DEFAULT_BATCH_SIZE,
            in_flight: 1,
            retry,
            progress: None,
        }
    }
}

/// One document of a batch: its input index, what to write, and the document itself (kept
/// for the key description of an error, which is only built when needed).
pub(crate) struct Item<P, D> {
    pub(crate) index: usize,
    pub(crate) prepared: P,
    pub(crate) doc: D,
}

/// What batching needs to know of a prepared document.
pub(crate) trait Unit {
    /// The document's id, for a single write's span.
    fn id(&self) -> ulid::Ulid;
    fn bytes(&self) -> usize;
    /// Two documents with one identity never share a batch, so a batch means the same as
    /// writing its documents one after another.
    fn identity(&self) -> Option<&str>;
}

impl Unit for Prepared {
    fn id(&self) -> ulid::Ulid {
        self.id
    }
    fn bytes(&self) -> usize {
        self.body.as_bytes().len()
    }
    fn identity(&self) -> Option<&str> {
        Some(&self.identity)
    }
}

impl Unit for PreparedEvent {
    fn id(&self) -> ulid::Ulid {
        self.id
    }
    fn bytes(&self) -> usize {
        self.body.as_bytes().len()
    }
    fn identity(&self) -> Option<&str> {
        None
    }
}

impl Unit for PreparedDelete {
    fn id(&self) -> ulid::Ulid {
        self.id
    }
    fn bytes(&self) -> usize {
        self.statement.as_bytes().len()
    }
    fn identity(&self) -> Option<&str> {
        Some(&self.identity)
    }
}

pub(crate) type Outcomes<O> = Vec<Result<O, Error>>;

/// Writes one batch: one result per item, or `Err` for a failure of the whole batch.
pub(crate) trait Writer<D>: Send {
    type Prepared: Unit + Send + Sync;
    type Outcome: Counted + Send;
    /// `tries` are the call's attempts under its retry policy: from the second on
    /// ([`Attempts::is_retry`]) the lost attempt may have been applied; a throttled command
    /// waits in them ([`Attempts::failed`]) before it is sent again.
    fn write<'s>(
        &'s mut self,
        batch: &'s [Item<Self::Prepared, D>],
        tries: &'s mut Attempts,
    ) -> impl Future<Output = Result<Outcomes<Self::Outcome>, Error>> + Send + 's;

    /// A writer for another batch written at the same time as this one's, or `None` where
    /// batches must go one at a time (a session runs one command at a time).
    fn fork(&self) -> Option<Self>
    where
        Self: Sized;
}

/// One batch under the retry policy.
pub(crate) async fn attempt<D, W: Writer<D>>(
    writer: &mut W,
    batch: &[Item<W::Prepared, D>],
    retry: &RetryPolicy,
    operation: &'static str,
    collection: &str,
) -> Result<Outcomes<W::Outcome>, Error> {
    let mut tries = retry.begin(operation, collection);
    loop {
        let limit = tries.attempt_timeout();
        let result = match tokio::time::timeout(limit, writer.write(batch, &mut tries)).await {
            Ok(result) => result,
            Err(_) => Err(tries.timed_out()),
        };
        match result {
            Ok(results) => return Ok(results),
            Err(e) => tries.failed(e).await?,
        }
    }
}

/// Runs one document through `writer` as a batch of one.
pub(crate) async fn one<D, W: Writer<D>>(
    writer: &mut W,
    item: Item<W::Prepared, D>,
    retry: &RetryPolicy,
    operation: &'static str,
    collection: &str,
) -> Result<W::Outcome, Error> {
    let batch = [item];
    let results = attempt(writer, &batch, retry, operation, collection).await?;
    results
        .into_iter()
        .next()
        .expect("a batch write returns one result per document")
}

/// The next batch read from the input: its documents and the ones that failed to prepare.
struct Collected<P, D> {
    items: Vec<Item<P, D>>,
    failures: Vec<(usize, Error)>,
    /// Hashes of the batch's identities (under the run's seed), so that a batch sharing one
    /// with a batch in flight waits for it.
    identities: HashSet<u64, RandomState>,
    /// The input is exhausted.
    done: bool,
}

impl<P, D> Collected<P, D> {
    fn first_index(&self) -> Option<usize> {
        let a = self.items.first().map(|i| i.index);
        let b = self.failures.first().map(|f| f.0);
        a.into_iter().chain(b).min()
    }
}

/// Reads and prepares the next batch: up to `batch_size` documents, cut early at
/// [`MAX_BATCH_BYTES`] or at an identity the batch already holds. The document that caused a
/// cut is kept in `carry` and starts the next batch. Identities are hashed under `seed`, not
/// copied: a collision (2^-64 per pair) only starts the next batch early or holds it back, it
/// never lets two documents of one identity share a batch or be written at once. The seed is
/// random, so no input (keys are the user's data) can be made to collide.
async fn collect<P: Unit, D, S: Stream<Item = D>>(
    docs: &mut Pin<&mut futures_util::stream::Enumerate<S>>,
    carry: &mut Option<Item<P, D>>,
    batch_size: usize,
    seed: &RandomState,
    prepare: &(dyn Fn(&D) -> Result<P, Error> + Sync),
) -> Collected<P, D> {
    let mut batch = Collected {
        items: Vec::with_capacity(batch_size.min(DEFAULT_BATCH_SIZE)),
        failures: Vec::new(),
        identities: HashSet::with_capacity_and_hasher(
            batch_size.min(DEFAULT_BATCH_SIZE),
            RandomState::default(),
        ),
        done: false,
    };
    let hash = |id: &str| std::hash::BuildHasher::hash_one(seed, id);
    let mut bytes = 0;
    if let Some(item) = carry.take() {
        if let Some(id) = item.prepared.identity() {
            batch.identities.insert(hash(id));
        }
        bytes += item.prepared.bytes();
        batch.items.push(item);
    }
    while batch.items.len() < batch_size {
        let Some((index, doc)) = docs.next().await else {
            batch.done = true;
            break;
        };
        let prepared = match prepare(&doc) {
            Ok(p) => p,
            Err(e) => {
                batch.failures.push((index, e));
                continue;
            }
        };
        let size = prepared.bytes();
        let full = !batch.items.is_empty() && bytes + size > MAX_BATCH_BYTES;
        let identity = prepared.identity().map(hash);
        let repeated = identity.is_some_and(|h| batch.identities.contains(&h));
        let item = Item {
            index,
            prepared,
            doc,
        };
        if full || repeated {
            *carry = Some(item);
            break;
        }
        if let Some(h) = identity {
            batch.identities.insert(h);
        }
        bytes += size;
        batch.items.push(item);
    }
    batch
}

/// Counts one written batch — its outcomes, its failures, the ones that failed to prepare —
/// into the report and the metrics together.
fn count<P, D, O: Counted>(
    report: &mut BatchReport,
    batch: Collected<P, D>,
    results: Outcomes<O>,
    operation: &'static str,
    collection: &str,
) {
    if !batch.items.is_empty() {
        report.batches += 1;
    }
    let mut tally = metrics::Tally::default();
    for (_, e) in &batch.failures {
        metrics::error(collection, operation, e);
    }
    report.failures.extend(batch.failures);
    for (item, result) in batch.items.iter().zip(results) {
        match result {
            Ok(o) => {
                tally.add(o.as_str());
                o.count(report)
            }
            Err(e) => {
                metrics::error(collection, operation, &e);
                report.failures.push((item.index, e))
            }
        }
    }
    tally.record(collection, operation);
    report.failures.sort_by_key(|(index, _)| *index);
}

/// A writer a batch in flight holds: the call's own, or a fork of it for a batch written at
/// the same time.
enum Lane<'w, W> {
    Main(&'w mut W),
    Fork(W),
}

impl<W> Lane<'_, W> {
    fn writer(&mut self) -> &mut W {
        match self {
            Lane::Main(w) => w,
            Lane::Fork(w) => w,
        }
    }
}

/// A batch through its lane's writer under `retry`: the lane and the batch come back with
/// the outcomes.
#[allow(clippy::type_complexity)]
async fn write_batch<'w, D, W: Writer<D>>(
    mut lane: Lane<'w, W>,
    batch: Collected<W::Prepared, D>,
    retry: RetryPolicy,
    operation: &'static str,
    collection: &str,
) -> (
    Lane<'w, W>,
    Collected<W::Prepared, D>,
    Result<Outcomes<W::Outcome>, Error>,
) {
    let written = if batch.items.is_empty() {
        Ok(Vec::new())
    } else {
        attempt(lane.writer(), &batch.items, &retry, operation, collection).await
    };
    (lane, batch, written)
}

/// Runs a whole input through `writer`: the next batch is read and prepared (hashing,
/// serializing) while earlier ones' commands are on the wire, and up to `opts.in_flight`
/// batches are written at once, each by a writer of its own ([`Writer::fork`]). A batch that
/// holds an identity of a batch in flight waits for it, so writes of one identity keep the
/// input's order. Batches are counted in the input's order, each batch's outcomes and errors
/// into the report and the metrics together, and so is the error that stops the run (the
/// batches in flight after the failed one are dropped: their writes, like a lost reply's, are
/// safe to send again).
pub(crate) async fn run<D, S, W>(
    docs: S,
    mut opts: Options<'_>,
    operation: &'static str,
    collection: &str,
    prepare: &(dyn Fn(&D) -> Result<W::Prepared, Error> + Sync),
    writer: &mut W,
) -> Result<BatchReport, BatchError>
where
    D: Send,
    S: Stream<Item = D> + Send,
    W: Writer<D>,
{
    let mut lanes: Vec<Lane<'_, W>> = (1..opts.in_flight.max(1))
        .map_while(|_| writer.fork().map(Lane::Fork))
        .collect();
    lanes.push(Lane::Main(writer));
    let mut report = BatchReport::default();
    let mut docs = std::pin::pin!(docs.enumerate());
    let mut carry = None;
    let size = opts.batch_size.max(1);
    let seed = RandomState::default();
    let retry = opts.retry;
    let write = |lane, batch| write_batch(lane, batch, retry, operation, collection);
    let mut flying = FuturesOrdered::new();
    let mut held: VecDeque<HashSet<u64, RandomState>> = VecDeque::new();
    let mut next = Some(collect(&mut docs, &mut carry, size, &seed, prepare).await);
    let mut done = false;
    loop {
        // Launch the next batch where a lane is free and no batch in flight holds one of its
        // identities; its hashes move to `held` (the write needs the documents, not them).
        if let Some(mut batch) =
            next.take_if(|b| !lanes.is_empty() && held.iter().all(|h| h.is_disjoint(&b.identities)))
        {
            done = batch.done && carry.is_none();
            held.push_back(std::mem::take(&mut batch.identities));
            flying.push_back(write(lanes.pop().expect("a free lane"), batch));
        }
        // Read the next batch while the ones in flight are written; count those that end
        // meanwhile, in order.
        let mut ended = VecDeque::new();
        if next.is_none() && !done {
            let mut reading = std::pin::pin!(collect(&mut docs, &mut carry, size, &seed, prepare));
            let read = loop {
                match future::select(reading.as_mut(), flying.next()).await {
                    Either::Left((read, _)) => break read,
                    Either::Right((Some(end), _)) => ended.push_back(end),
                    Either::Right((None, _)) => break reading.await,
                }
            };
            next = Some(read);
        } else if let Some(end) = flying.next().await {
            ended.push_back(end);
        } else {
            return Ok(report);
        }
        for (lane, batch, written) in ended {
            lanes.push(lane);
            held.pop_front();
            let anything = !batch.items.is_empty() || !batch.failures.is_empty();
            match written {
                Ok(results) => count(&mut report, batch, results, operation, collection),
                Err(error) => {
                    metrics::error(collection, operation, &error);
                    let settled = batch.first_index().unwrap_or(0);
                    return Err(BatchError {
                        report,
                        error,
                        settled,
                    });
                }
            }
            if anything {
                if let Some(progress) = opts.progress.as_mut() {
                    progress(&report);
                }
            }
        }
    }
}
