//! The user-facing writes of a [`Collection`]: builders that implement `IntoFuture`, after the
//! mongodb driver's `action` module. Each configures, then runs through the write engine's
//! batch runner (a single write is a batch of one) into its upsert or insert writer; a relative
//! update ([`Apply`]) through `write::apply`, one statement.

use std::borrow::Borrow;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use futures_util::Stream;
use mongodb::ClientSession;
use tracing::Instrument;
use ulid::Ulid;

use crate::change::{Change, OpId, DEFAULT_RETAINED_OPERATIONS};
use crate::collection::Collection;
use crate::error::Error;
use crate::metrics;
use crate::outcome::{ApplyOutcome, BatchError, BatchReport, InsertOutcome, Label, UpsertOutcome};
use crate::retry::RetryPolicy;
use crate::stored::{Prepared, PreparedEvent};
use crate::traits::{NaturalKey, RandomId};
use crate::write::batch::{self, Item, Options};
use crate::write::insert::EventWriter;
use crate::write::mode::WriteMode;
use crate::write::upsert::GuardedWriter;

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

impl<T: NaturalKey + Send + Sync> Collection<T> {
    /// The guarded upsert of one document: insert, update or leave alone, never fork.
    ///
    /// 1. Derive the id, identity and content hash (a key error here means nothing was written).
    /// 2. Read the stored `_id` and hash by identity, from the primary.
    /// 3. Stored `_id` ≠ derived id → [`Error::ImmutableKeyChanged`], nothing written.
    /// 4. Same hash → [`UpsertOutcome::Unchanged`], no write sent.
    /// 5. Otherwise write by `_id`, only if the stored hash is still the one read (optimistic
    ///    concurrency); a lost race reads again and decides again.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, body: String }
    /// # async fn f(posts: natural_key::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
    /// match posts.upsert(&post).retry(natural_key::RetryPolicy::default()).await? {
    ///     UpsertOutcome::Inserted(id) => println!("new post {id}"),
    ///     UpsertOutcome::Updated(id) => println!("edited {id}"),
    ///     UpsertOutcome::Unchanged(_) => {} // no write was sent
    /// }
    /// # Ok(()) }
    /// ```
    pub fn upsert<'a>(&'a self, doc: &'a T) -> Upsert<'a, T> {
        Upsert {
            coll: self,
            doc,
            mode: WriteMode::Merge,
            retry: RetryPolicy::none(),
            session: None,
        }
    }

    /// The guarded upsert of many documents, a batch at a time: per batch one read of the
    /// batch's identities, then one `insert` of the new documents and one `update` of the
    /// changed ones (more only when a command would exceed the engine's limits), with every
    /// guarantee of [`upsert`](Collection::upsert). A bad document is reported at its index
    /// and does not stop the rest.
    ///
    /// While the input keeps being new documents, a batch skips its read and starts with the
    /// `insert`: the unique indexes refuse any document already stored, and only those are
    /// read back and decided. A batch in which anything was not new sends the next one back
    /// to reading first, so re-ingesting unchanged data never sends a write command.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>, all: Vec<Post>) -> Result<(), natural_key::BatchError> {
    /// let report = posts.upsert_many(&all).batch_size(1000).await?;
    /// println!("{} new, {} edited, {} unchanged", report.inserted, report.updated, report.unchanged);
    /// for (index, error) in &report.failures {
    ///     eprintln!("post #{index}: {error}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn upsert_many<'a, I>(&'a self, docs: I) -> UpsertMany<'a, T, I::IntoIter>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.upsert_stream(futures_util::stream::iter(docs))
    }

    /// [`upsert_many`](Collection::upsert_many) over a `Stream`: memory holds at most two
    /// batches, so a million-document ingest runs in constant memory.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>) -> Result<(), natural_key::BatchError> {
    /// let input = futures::stream::iter((0..1_000_000).map(|i| Post {
    ///     slug: format!("post-{i}"),
    ///     published_at: 1_700_000_000_000 + i,
    /// }));
    /// let report = posts
    ///     .upsert_stream(input)
    ///     .on_progress(|r| eprintln!("{} done", r.processed()))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn upsert_stream<'a, S>(&'a self, docs: S) -> UpsertStream<'a, T, S>
    where
        S: Stream,
        S::Item: Borrow<T>,
    {
        UpsertStream {
            coll: self,
            docs,
            opts: Options::default(),
            mode: WriteMode::Merge,
            session: None,
        }
    }
}

impl<T: RandomId + Send + Sync> Collection<T> {
    /// Insert once: [`InsertOutcome::Inserted`], or [`InsertOutcome::AlreadyApplied`] when this
    /// id (or idempotency key) is already stored with the same payload. Never a second
    /// document. Stored with another payload, the id or key was reused for another request:
    /// [`Error::IdempotencyKeyReused`], nothing written.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(RandomId, Serialize, Deserialize)]
    /// # struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
    /// # async fn f(clicks: natural_key::Collection<Click>, click: Click) -> Result<(), natural_key::Error> {
    /// match clicks.insert(&click).retry(natural_key::RetryPolicy::default()).await? {
    ///     InsertOutcome::Inserted(_) => {}
    ///     InsertOutcome::AlreadyApplied(_) => {} // a retry whose first attempt landed
    /// }
    /// // `Err(Error::IdempotencyKeyReused { .. })`: the id or key names another stored click.
    /// # Ok(()) }
    /// ```
    pub fn insert<'a>(&'a self, event: &'a T) -> Insert<'a, T> {
        Insert {
            coll: self,
            event,
            retry: RetryPolicy::none(),
            session: None,
        }
    }

    /// Insert-once of many events, a batch at a time: one unordered `insert` per batch, then
    /// — only if some were already stored — one read of the stored events to tell retries
    /// ([`BatchReport::already_applied`]) from ids or keys reused for another payload
    /// ([`Error::IdempotencyKeyReused`] in [`BatchReport::failures`], at the event's index; the
    /// others are written).
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(RandomId, Serialize, Deserialize)]
    /// # struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
    /// # async fn f(clicks: natural_key::Collection<Click>, all: Vec<Click>) -> Result<(), natural_key::BatchError> {
    /// let report = clicks.insert_many(&all).await?;
    /// assert_eq!(report.inserted + report.already_applied, all.len() as u64);
    /// # Ok(()) }
    /// ```
    pub fn insert_many<'a, I>(&'a self, events: I) -> InsertMany<'a, T, I::IntoIter>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.insert_stream(futures_util::stream::iter(events))
    }

    /// [`insert_many`](Collection::insert_many) over a `Stream`, in constant memory.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(RandomId, Serialize, Deserialize)]
    /// # struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
    /// # async fn f(clicks: natural_key::Collection<Click>) -> Result<(), natural_key::BatchError> {
    /// let input = futures::stream::iter((0..10_000).map(|_| Click { id: Ulid::new(), page: "/".into() }));
    /// let report = clicks.insert_stream(input).await?;
    /// assert_eq!(report.inserted + report.already_applied, 10_000);
    /// # Ok(()) }
    /// ```
    pub fn insert_stream<'a, S>(&'a self, events: S) -> InsertStream<'a, T, S>
    where
        S: Stream,
        S::Item: Borrow<T>,
    {
        InsertStream {
            coll: self,
            docs: events,
            opts: Options::default(),
            session: None,
        }
    }
}

/// What a single write returns, into its span and the metrics.
pub(crate) fn record<O: Label + std::fmt::Display>(
    collection: &str,
    operation: &'static str,
    result: &Result<O, Error>,
) {
    let span = tracing::Span::current();
    match result {
        Ok(o) => {
            span.record("outcome", tracing::field::display(o));
            metrics::outcomes(collection, operation, o.as_str(), 1);
        }
        Err(e) => {
            span.record("outcome", "error");
            tracing::debug!(error = %crate::error::ErrorChain(e), "write failed");
            metrics::error(collection, operation, e);
        }
    }
}

/// The guarded upsert of one document, from [`Collection::upsert`]; configure, then `.await`.
#[must_use = "an upsert does nothing until awaited"]
pub struct Upsert<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    doc: &'a T,
    mode: WriteMode,
    retry: RetryPolicy,
    session: Option<&'a mut ClientSession>,
}

macro_rules! common_options {
    ($($retry:ident).+) => {
        /// Retries transient failures (network, timeouts, elections) under `policy`. Safe:
        /// a retry after a lost acknowledgement finds its own write. Without this call, a
        /// transient error is returned at once (each attempt is still bounded by the
        /// policy's [`attempt_timeout`](RetryPolicy::attempt_timeout)).
        pub fn retry(mut self, policy: RetryPolicy) -> Self {
            self.$($retry).+ = policy;
            self
        }

        /// Runs every command of this call in `session` (reads and writes alike).
        pub fn session(mut self, session: &'a mut ClientSession) -> Self {
            self.session = Some(session);
            self
        }
    };
}

impl<'a, T: NaturalKey + Send + Sync> Upsert<'a, T> {
    common_options!(retry);

    /// [`WriteMode::Merge`] (default) or [`WriteMode::Replace`].
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }

    /// Shorthand for `.mode(WriteMode::Replace)`.
    pub fn replace(self) -> Self {
        self.mode(WriteMode::Replace)
    }
}

impl<'a, T: NaturalKey + Send + Sync> IntoFuture for Upsert<'a, T> {
    type Output = Result<UpsertOutcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::info_span!(
            "natural_key.upsert",
            collection = %self.coll.target.namespace,
            id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        Box::pin(
            async move {
                let coll = self.coll;
                let ns = &coll.target.namespace;
                let result = async {
                    let prepared = Prepared::of(self.doc, &coll.target)?;
                    tracing::Span::current().record("id", tracing::field::display(prepared.id));
                    let mut writer =
                        GuardedWriter::<T>::new(&coll.target, self.mode, coll.fields, self.session);
                    let item = Item {
                        index: 0,
                        prepared,
                        doc: self.doc,
                    };
                    batch::one(&mut writer, item, &self.retry, "upsert", ns).await
                }
                .await;
                record(ns, "upsert", &result);
                result
            }
            .instrument(span),
        )
    }
}

/// The insert-once write of one event, from [`Collection::insert`]; `.await` it.
#[must_use = "an insert does nothing until awaited"]
pub struct Insert<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    event: &'a T,
    retry: RetryPolicy,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T: RandomId + Send + Sync> Insert<'a, T> {
    common_options!(retry);
}

impl<'a, T: RandomId + Send + Sync> IntoFuture for Insert<'a, T> {
    type Output = Result<InsertOutcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::info_span!(
            "natural_key.insert",
            collection = %self.coll.target.namespace,
            id = %self.event.id(),
            outcome = tracing::field::Empty,
        );
        Box::pin(
            async move {
                let coll = self.coll;
                let ns = &coll.target.namespace;
                let result = async {
                    let prepared = PreparedEvent::of(self.event, &coll.target)?;
                    let mut writer = EventWriter {
                        target: &coll.target,
                        session: self.session,
                    };
                    let item = Item {
                        index: 0,
                        prepared,
                        doc: (),
                    };
                    batch::one(&mut writer, item, &self.retry, "insert", ns).await
                }
                .await;
                record(ns, "insert", &result);
                result
            }
            .instrument(span),
        )
    }
}

macro_rules! batch_options {
    () => {
        common_options!(opts.retry);

        /// Documents per batch (default [`DEFAULT_BATCH_SIZE`](crate::DEFAULT_BATCH_SIZE), at
        /// least 1; a batch is also cut at [`MAX_BATCH_BYTES`](crate::MAX_BATCH_BYTES)). Memory
        /// holds two batches: the one being written and the next.
        pub fn batch_size(mut self, n: usize) -> Self {
            self.opts.batch_size = n.max(1);
            self
        }

        /// Called with the running report after each batch (e.g. to drive a progress bar).
        pub fn on_progress(mut self, f: impl FnMut(&BatchReport) + Send + 'a) -> Self {
            self.opts.progress = Some(Box::new(f));
            self
        }
    };
}
pub(crate) use {batch_options, common_options};

/// Builder returned by [`Collection::upsert_stream`]; `.await` it.
#[must_use = "a batch write does nothing until awaited"]
pub struct UpsertStream<'a, T: Send + Sync, S> {
    coll: &'a Collection<T>,
    docs: S,
    opts: Options<'a>,
    mode: WriteMode,
    session: Option<&'a mut ClientSession>,
}

/// Builder returned by [`Collection::upsert_many`]: the streaming builder over the iterator.
pub type UpsertMany<'a, T, I> = UpsertStream<'a, T, futures_util::stream::Iter<I>>;

impl<'a, T: NaturalKey + Send + Sync, S> UpsertStream<'a, T, S> {
    batch_options!();

    /// [`WriteMode::Merge`] (default) or [`WriteMode::Replace`].
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }
}

impl<'a, T: Send + Sync, S> UpsertStream<'a, T, S> {
    pub(crate) fn coll(&self) -> &'a Collection<T> {
        self.coll
    }

    /// The same ingest, with `f` called on each input document as it is read.
    pub(crate) fn inspecting<F>(
        self,
        f: F,
    ) -> UpsertStream<'a, T, futures_util::stream::Inspect<S, F>>
    where
        S: Stream,
        F: FnMut(&S::Item),
    {
        use futures_util::StreamExt;
        UpsertStream {
            coll: self.coll,
            docs: self.docs.inspect(f),
            opts: self.opts,
            mode: self.mode,
            session: self.session,
        }
    }
}

impl<'a, T, S> IntoFuture for UpsertStream<'a, T, S>
where
    T: NaturalKey + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    type Output = Result<BatchReport, BatchError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let coll = self.coll;
        let span =
            tracing::info_span!("natural_key.upsert_many", collection = %coll.target.namespace);
        Box::pin(
            async move {
                let mut writer =
                    GuardedWriter::<T>::new(&coll.target, self.mode, coll.fields, self.session);
                let prepare = |d: &S::Item| Prepared::of(d.borrow(), &coll.target);
                let ns = &coll.target.namespace;
                batch::run(
                    self.docs,
                    self.opts,
                    "upsert_many",
                    ns,
                    &prepare,
                    &mut writer,
                )
                .await
            }
            .instrument(span),
        )
    }
}

/// Builder returned by [`Collection::insert_stream`]; `.await` it.
#[must_use = "a batch write does nothing until awaited"]
pub struct InsertStream<'a, T: Send + Sync, S> {
    coll: &'a Collection<T>,
    docs: S,
    opts: Options<'a>,
    session: Option<&'a mut ClientSession>,
}

/// Builder returned by [`Collection::insert_many`]: the streaming builder over the iterator.
pub type InsertMany<'a, T, I> = InsertStream<'a, T, futures_util::stream::Iter<I>>;

impl<'a, T: RandomId + Send + Sync, S> InsertStream<'a, T, S> {
    batch_options!();
}

impl<'a, T, S> IntoFuture for InsertStream<'a, T, S>
where
    T: RandomId + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    type Output = Result<BatchReport, BatchError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let coll = self.coll;
        let span =
            tracing::info_span!("natural_key.insert_many", collection = %coll.target.namespace);
        Box::pin(
            async move {
                let mut writer = EventWriter {
                    target: &coll.target,
                    session: self.session,
                };
                let prepare = |d: &S::Item| PreparedEvent::of(d.borrow(), &coll.target);
                let ns = &coll.target.namespace;
                batch::run(
                    self.docs,
                    self.opts,
                    "insert_many",
                    ns,
                    &prepare,
                    &mut writer,
                )
                .await
            }
            .instrument(span),
        )
    }
}

/// A relative update of one document, applied at most once per [`OpId`]; from
/// [`Collection::apply`], `.await` it.
#[must_use = "an apply does nothing until awaited"]
pub struct Apply<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    id: Ulid,
    op: OpId,
    change: Change,
    retain: usize,
    retry: RetryPolicy,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T: NaturalKey + Send + Sync> Apply<'a, T> {
    common_options!(retry);

    /// Keep at least `n` operations in the document's record (default
    /// [`DEFAULT_RETAINED_OPERATIONS`]; at least 1). The record holds up to twice as many
    /// before it is cut back to the `n` latest by operation time.
    pub fn retain(mut self, n: usize) -> Self {
        self.retain = n.max(1);
        self
    }
}

impl<T: NaturalKey + Send + Sync> Collection<T> {
    /// Applies `change` to the stored document `id` unless the document records `op` as
    /// applied: the change and the operation's record are written in one single-document
    /// update, so a retry after a lost reply, another writer with the same operation, or a
    /// rerun after a crash finds it applied. See docs/crate.md, "Relative updates".
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// use natural_key::{Change, OpId, RetryPolicy};
    /// #[derive(NaturalKey, Serialize, Deserialize)]
    /// struct Item {
    ///     #[key] sku: String,
    ///     #[key(timestamp)] listed_at: i64,
    ///     #[natural_key(relative)] stock: i64,
    /// }
    /// # async fn f(items: natural_key::Collection<Item>, item: Item) -> Result<(), natural_key::Error> {
    /// let outcome = items
    ///     .apply(item.id()?, OpId::new("order-1042", 1_764_000_000_000_i64), Change::new().inc("stock", -1))
    ///     .retry(RetryPolicy::default())
    ///     .await?;
    /// println!("{outcome}"); // applied, or already_applied on a retry
    /// # Ok(()) }
    /// ```
    pub fn apply(&self, id: Ulid, op: impl Into<OpId>, change: Change) -> Apply<'_, T> {
        Apply {
            coll: self,
            id,
            op: op.into(),
            change,
            retain: DEFAULT_RETAINED_OPERATIONS,
            retry: RetryPolicy::none(),
            session: None,
        }
    }
}

impl<'a, T: NaturalKey + Send + Sync> IntoFuture for Apply<'a, T> {
    type Output = Result<ApplyOutcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::info_span!(
            "natural_key.apply",
            collection = %self.coll.target.namespace,
            id = %self.id,
            op = %self.op.key(),
            outcome = tracing::field::Empty,
        );
        Box::pin(
            async move {
                let target = &self.coll.target;
                let result = async {
                    let update = crate::write::apply::Update::of(
                        target,
                        T::__relative_fields(),
                        (&self.op, &self.change, self.retain),
                    )?;
                    let mut tries = self.retry.begin("apply", &target.namespace);
                    crate::write::apply::apply(target, self.id, &update, &mut tries, self.session)
                        .await
                }
                .await;
                record(&target.namespace, "apply", &result);
                result
            }
            .instrument(span),
        )
    }
}
