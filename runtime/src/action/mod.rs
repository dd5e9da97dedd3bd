//! Every user-facing builder, one file per verb, after the mongodb driver's `action` module: a
//! method of a handle returns a builder, its setters configure the call, and `.await`
//! (`IntoFuture`) runs it. A builder holds options and nothing else: what a verb does lives in
//! the write engine (`write/`) or in maintenance (`maintain/`).
//!
//! The batch writes of a typed [`Collection`](crate::Collection) and of a
//! [`SpecCollection`](crate::spec::SpecCollection) are the same builders ([`UpsertStream`],
//! [`DeleteStream`]), generic over the document ([`Keyed`](crate::Keyed)); the verbs only a
//! type has (a single write, events, `apply`, adopt, rekey) are typed, and audit and prune have a
//! spec form each, sharing their setters.

mod adopt;
mod apply;
mod audit;
mod delete;
mod insert;
mod open;
mod prune;
mod rekey;
mod upsert;

pub use adopt::Adopt;
pub use apply::Apply;
pub use audit::{Audit, SpecAudit};
pub use delete::{Delete, DeleteMany, DeleteStream, SpecDelete};
pub use insert::{Insert, InsertMany, InsertStream};
pub use open::{OpenCollection, OpenSpecCollection};
pub use prune::{prune_tombstones, Prune, PruneTombstones, SpecPrune};
pub use rekey::Rekey;
pub use upsert::{SpecUpsert, Upsert, UpsertMany, UpsertStream};

use std::future::Future;
use std::pin::Pin;

use crate::error::Error;
use crate::metrics;
use crate::outcome::Label;
use crate::retry::RetryPolicy;
use crate::write::batch::{self, Item, Unit, Writer};

/// What every builder's `.await` returns.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

/// A single write: `prepared` (or the error that kept it from being sent) through `writer` as
/// a batch of one under `retry`; its id and outcome into the current span and the metrics.
pub(crate) async fn single<D, W>(
    writer: &mut W,
    prepared: Result<W::Prepared, Error>,
    doc: D,
    retry: &RetryPolicy,
    operation: &'static str,
    collection: &str,
) -> Result<W::Outcome, Error>
where
    W: Writer<D>,
    W::Outcome: Label + std::fmt::Display,
{
    let result = match prepared {
        Ok(prepared) => {
            tracing::Span::current().record("id", tracing::field::display(prepared.id()));
            let item = Item {
                index: 0,
                prepared,
                doc,
            };
            batch::one(writer, item, retry, operation, collection).await
        }
        Err(e) => Err(e),
    };
    record(collection, operation, &result);
    result
}

/// `retry` and `session`, the options of every write (`$($retry).+`: where the builder keeps
/// its policy).
macro_rules! common_options {
    ($($retry:ident).+) => {
        /// Retries transient failures (network, timeouts, elections) under `policy` instead of
        /// the handle's (set when it was opened, by default
        /// [`RetryPolicy::default`](crate::RetryPolicy::default)). Safe: a retry after a lost
        /// acknowledgement finds its own write. [`RetryPolicy::none`](crate::RetryPolicy::none)
        /// returns a transient error at once (each attempt is still bounded by the policy's
        /// [`attempt_timeout`](crate::RetryPolicy::attempt_timeout)).
        pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
            self.$($retry).+ = policy;
            self
        }

        /// Runs every command of this call in `session` (reads and writes alike).
        pub fn session(mut self, session: &'a mut mongodb::ClientSession) -> Self {
            self.session = Some(session);
            self
        }
    };
}

/// The options of every batch write: [`common_options`], the batch size and progress.
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
        pub fn on_progress(mut self, f: impl FnMut(&crate::BatchReport) + Send + 'a) -> Self {
            self.opts.progress = Some(Box::new(f));
            self
        }

        /// Batches written at once (default 1, at least 1): the engine works on one while the
        /// client waits for another's reply. With 2, a first ingest in batches of 1,000 was
        /// 1.5× faster on one node and 1.8× on a 2-worker cluster, an unchanged re-ingest
        /// 1.3× (docs/performance.md, "Batches in flight"). Each batch in flight holds a
        /// connection of the client's pool, and memory holds one batch more than are in
        /// flight. A batch holding an identity of a batch in flight waits for it: writes of
        /// one document keep the input's order, and outcomes, progress and the report come in
        /// the input's order. In a [`session`](Self::session), one batch at a time (a session
        /// runs one command at a time).
        ///
        /// ```no_run
        /// # use natural_key::prelude::*;
        /// # #[derive(NaturalKey, Serialize, Deserialize)]
        /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
        /// # async fn f(posts: natural_key::Collection<Post>, all: Vec<Post>) -> Result<(), natural_key::BatchError> {
        /// let report = posts.upsert_many(&all).batch_size(1_000).in_flight(2).await?;
        /// # Ok(()) }
        /// ```
        pub fn in_flight(mut self, n: usize) -> Self {
            self.opts.in_flight = n.max(1);
            self
        }
    };
}

/// The options of a maintenance scan that reports `$report`: the sample size and progress
/// (`$opts`: the field that holds them, if not the builder itself).
macro_rules! scan_options {
    ($report:ty $(, $opts:ident)?) => {
        /// How many ids the report keeps per finding (default
        /// [`DEFAULT_SAMPLE`](crate::DEFAULT_SAMPLE)).
        pub fn sample(mut self, n: usize) -> Self {
            self$(.$opts)?.sample = n;
            self
        }

        /// Called with the running report after each batch read.
        pub fn on_progress(mut self, f: impl FnMut(&$report) + Send + 'a) -> Self {
            self$(.$opts)?.progress = Some(Box::new(f));
            self
        }
    };
}

/// `dry_run`, for a verb that can say what it would write instead (`$what`: its doc).
macro_rules! dry_run_option {
    ($what:literal $(, $opts:ident)?) => {
        #[doc = $what]
        pub fn dry_run(mut self) -> Self {
            self$(.$opts)?.dry_run = true;
            self
        }
    };
}

pub(crate) use {batch_options, common_options, dry_run_option, scan_options};
