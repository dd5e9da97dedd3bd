//! `upsert`, `upsert_many`, `upsert_stream`: the guarded upsert, of a typed document or of a
//! document described at run time ([`SpecCollection`]). Each runs through the write engine's
//! batch runner (a single write is a batch of one) into its guarded writer.

use std::borrow::Borrow;
use std::future::IntoFuture;

use bson::RawDocumentBuf;
use futures_util::Stream;
use mongodb::ClientSession;
use tracing::Instrument;

use super::{batch_options, common_options, single, BoxFuture};
use crate::collection::{Collection, SpecCollection};
use crate::error::Error;
use crate::outcome::{BatchError, BatchReport, UpsertOutcome};
use crate::retry::RetryPolicy;
use crate::stored::Prepared;
use crate::traits::NaturalKey;
use crate::write::batch::{self, Options};
use crate::write::guard::GuardedWriter;
use crate::write::keyed::{Keyed, On};
use crate::write::mode::WriteMode;

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
    /// match posts.upsert(&post).await? {
    ///     UpsertOutcome::Inserted(id) => println!("new post {id}"),
    ///     UpsertOutcome::Updated(id) => println!("edited {id}"),
    ///     UpsertOutcome::Unchanged(_) => {} // no write was sent
    ///     other => println!("{other}"),     // stale, existed, missing: versions and modes
    /// }
    /// # Ok(()) }
    /// ```
    pub fn upsert<'a>(&'a self, doc: &'a T) -> Upsert<'a, T> {
        Upsert {
            coll: self,
            doc,
            mode: WriteMode::Merge,
            retry: self.retry,
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
        UpsertStream::new(self.on(), docs)
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
        let coll = self.coll;
        Box::pin(
            async move {
                let mut writer = GuardedWriter::new(coll.on(), self.mode, self.session);
                let prepared = Prepared::of(self.doc, &coll.target);
                let ns = &coll.target.namespace;
                single(&mut writer, prepared, self.doc, &self.retry, "upsert", ns).await
            }
            .instrument(span),
        )
    }
}

/// Builder returned by [`Collection::upsert_stream`] and
/// [`SpecCollection::upsert_stream`]; `.await` it.
#[must_use = "a batch write does nothing until awaited"]
pub struct UpsertStream<'a, T: Keyed, S> {
    on: On<'a, T>,
    docs: S,
    opts: Options<'a>,
    mode: WriteMode,
    session: Option<&'a mut ClientSession>,
}

/// Builder returned by [`Collection::upsert_many`]: the streaming builder over the iterator.
pub type UpsertMany<'a, T, I> = UpsertStream<'a, T, futures_util::stream::Iter<I>>;

/// Builder returned by [`SpecCollection::upsert_many`] and [`SpecCollection::upsert_stream`]:
/// the same builder, over BSON documents.
pub type SpecUpsert<'a, S> = UpsertStream<'a, RawDocumentBuf, S>;

impl<'a, T: Keyed, S> UpsertStream<'a, T, S> {
    fn new(on: On<'a, T>, docs: S) -> Self {
        UpsertStream {
            on,
            docs,
            opts: Options::new(on.retry),
            mode: WriteMode::Merge,
            session: None,
        }
    }

    batch_options!();

    /// [`WriteMode::Merge`] (default: the document's fields are set, other stored fields
    /// stay) or [`WriteMode::Replace`] (the stored document becomes this one).
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }

    /// Where the documents go: for a pruning ingest, which reads the collection once the
    /// input is written.
    pub(crate) fn on(&self) -> On<'a, T> {
        self.on
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
            on: self.on,
            docs: self.docs.inspect(f),
            opts: self.opts,
            mode: self.mode,
            session: self.session,
        }
    }
}

impl<'a, T, S> IntoFuture for UpsertStream<'a, T, S>
where
    T: Keyed + 'a,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    type Output = Result<BatchReport, BatchError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let on = self.on;
        let ns = &on.target.namespace;
        let span = tracing::info_span!("natural_key.upsert_many", collection = %ns);
        Box::pin(
            async move {
                let mut writer = GuardedWriter::new(on, self.mode, self.session);
                let prepare = |d: &S::Item| d.borrow().prepare(on.spec, on.target);
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

impl SpecCollection {
    /// Guarded upserts of `docs`, a batch at a time, as
    /// [`Collection::upsert_many`](crate::Collection::upsert_many). Each document is stored as
    /// given, but an `_id` equal to its derived id (which is dropped, and written as the id);
    /// a document that gives no id, holds a name natural-key refuses or is too large is a
    /// failure at its input index, and the others are written.
    pub fn upsert_many<I>(&self, docs: I) -> SpecUpsert<'_, futures_util::stream::Iter<I::IntoIter>>
    where
        I: IntoIterator<Item = RawDocumentBuf>,
    {
        self.upsert_stream(futures_util::stream::iter(docs))
    }

    /// [`upsert_many`](SpecCollection::upsert_many) over a `Stream`, in constant memory.
    pub fn upsert_stream<S>(&self, docs: S) -> SpecUpsert<'_, S>
    where
        S: Stream<Item = RawDocumentBuf>,
    {
        UpsertStream::new(self.on(), docs)
    }
}
