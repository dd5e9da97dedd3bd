//! `insert`, `insert_many`, `insert_stream`: the insert-once write of events
//! (`#[derive(RandomId)]` types), through the batch runner into the event writer.

use std::borrow::Borrow;
use std::future::IntoFuture;

use futures_util::Stream;
use mongodb::ClientSession;
use tracing::Instrument;

use super::{batch_options, common_options, single, BoxFuture};
use crate::collection::Collection;
use crate::error::Error;
use crate::outcome::{BatchError, BatchReport, InsertOutcome};
use crate::retry::RetryPolicy;
use crate::stored::PreparedEvent;
use crate::traits::RandomId;
use crate::write::batch::{self, Options};
use crate::write::events::EventWriter;

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
    /// match clicks.insert(&click).await? {
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
            retry: self.retry,
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
            opts: Options::new(self.retry),
            session: None,
        }
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
            id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let coll = self.coll;
        Box::pin(
            async move {
                let mut writer = EventWriter {
                    target: &coll.target,
                    session: self.session,
                };
                let prepared = PreparedEvent::of(self.event, &coll.target);
                let ns = &coll.target.namespace;
                single(&mut writer, prepared, (), &self.retry, "insert", ns).await
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
