//! `delete`, `delete_many`, `delete_stream`: deletes by key, of typed documents or of
//! documents described at run time ([`SpecCollection`]); the deletes themselves are
//! `write::by_key`'s.

use std::borrow::Borrow;
use std::future::IntoFuture;

use bson::RawDocumentBuf;
use futures_util::Stream;
use mongodb::ClientSession;
use tracing::Instrument;

use super::{batch_options, common_options, single, BoxFuture};
use crate::collection::{Collection, SpecCollection};
use crate::error::Error;
use crate::outcome::{BatchError, BatchReport, DeleteOutcome};
use crate::retry::RetryPolicy;
use crate::traits::NaturalKey;
use crate::write::batch::{self, Options};
use crate::write::by_key::DeleteWriter;
use crate::write::keyed::sealed::Prepare as _;
use crate::write::keyed::{Keyed, On};

impl<T: NaturalKey + Send + Sync> Collection<T> {
    /// Deletes the stored document `doc` derives: the one whose `_id` is `doc`'s id and whose
    /// identity is `doc`'s, and only that one (the timestamp key is part of the id, the other
    /// fields do not matter). [`DeleteOutcome::Deleted`] or [`DeleteOutcome::NotFound`], exact;
    /// [`DeleteOutcome::Gone`] when a retried attempt finds the document gone after a lost
    /// reply, which cannot tell this call's delete from another writer's. The identity stored
    /// under another id (an edited timestamp key) is [`Error::ImmutableKeyChanged`], nothing
    /// deleted.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, body: String }
    /// # async fn f(posts: natural_key::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
    /// use natural_key::DeleteOutcome;
    /// match posts.delete(&post).await? {
    ///     DeleteOutcome::Deleted(id) => println!("deleted {id}"),
    ///     DeleteOutcome::NotFound(id) => println!("{id} was not stored"),
    ///     DeleteOutcome::Gone(id) => println!("{id} is gone (this call or another deleted it)"),
    ///     other => println!("{other}"), // stale: a versioned document stored newer
    /// }
    /// # Ok(()) }
    /// ```
    pub fn delete<'a>(&'a self, doc: &'a T) -> Delete<'a, T> {
        Delete {
            coll: self,
            doc,
            retry: self.retry,
            session: None,
        }
    }

    /// Deletes by key many documents, a batch at a time: per batch one read of the stored
    /// identities and one unordered `delete`; outcomes counted in [`BatchReport::deleted`],
    /// [`BatchReport::not_found`] and [`BatchReport::gone`], refusals in
    /// [`BatchReport::failures`] at the document's index.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>, old: Vec<Post>) -> Result<(), natural_key::BatchError> {
    /// let report = posts.delete_many(&old).await?;
    /// assert_eq!(report.deleted + report.not_found + report.gone, old.len() as u64);
    /// # Ok(()) }
    /// ```
    pub fn delete_many<'a, I>(&'a self, docs: I) -> DeleteMany<'a, T, I::IntoIter>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.delete_stream(futures_util::stream::iter(docs))
    }

    /// [`delete_many`](Collection::delete_many) over a `Stream`, in constant memory.
    pub fn delete_stream<'a, S>(&'a self, docs: S) -> DeleteStream<'a, T, S>
    where
        S: Stream,
        S::Item: Borrow<T>,
    {
        DeleteStream::new(self.on(), docs)
    }
}

/// The delete by key of one document, from [`Collection::delete`]; configure, then `.await`.
#[must_use = "a delete does nothing until awaited"]
pub struct Delete<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    doc: &'a T,
    retry: RetryPolicy,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T: NaturalKey + Send + Sync> Delete<'a, T> {
    common_options!(retry);
}

impl<'a, T: NaturalKey + Send + Sync> IntoFuture for Delete<'a, T> {
    type Output = Result<DeleteOutcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::info_span!(
            "natural_key.delete",
            collection = %self.coll.target.namespace,
            id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let coll = self.coll;
        Box::pin(
            async move {
                let mut writer = DeleteWriter::new(coll.on(), self.session);
                let prepared = self.doc.prepare_delete(&(), &coll.target);
                let ns = &coll.target.namespace;
                single(&mut writer, prepared, self.doc, &self.retry, "delete", ns).await
            }
            .instrument(span),
        )
    }
}

/// Builder returned by [`Collection::delete_stream`] and [`SpecCollection::delete_stream`];
/// `.await` it.
#[must_use = "a batch delete does nothing until awaited"]
pub struct DeleteStream<'a, T: Keyed, S> {
    on: On<'a, T>,
    docs: S,
    opts: Options<'a>,
    session: Option<&'a mut ClientSession>,
}

/// Builder returned by [`Collection::delete_many`]: the streaming builder over the iterator.
pub type DeleteMany<'a, T, I> = DeleteStream<'a, T, futures_util::stream::Iter<I>>;

/// Builder returned by [`SpecCollection::delete_many`] and [`SpecCollection::delete_stream`]:
/// the same builder, over BSON documents.
pub type SpecDelete<'a, S> = DeleteStream<'a, RawDocumentBuf, S>;

impl<'a, T: Keyed, S> DeleteStream<'a, T, S> {
    fn new(on: On<'a, T>, docs: S) -> Self {
        DeleteStream {
            on,
            docs,
            opts: Options::new(on.retry),
            session: None,
        }
    }

    batch_options!();
}

impl<'a, T, S> IntoFuture for DeleteStream<'a, T, S>
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
        let span = tracing::info_span!("natural_key.delete_many", collection = %ns);
        Box::pin(
            async move {
                let mut writer = DeleteWriter::new(on, self.session);
                let prepare = |d: &S::Item| d.borrow().prepare_delete(on.spec, on.target);
                batch::run(
                    self.docs,
                    self.opts,
                    "delete_many",
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
    /// Deletes by key, as [`Collection::delete_many`](crate::Collection::delete_many): each
    /// document's derived `_id` and identity, from its key fields alone (the others do not
    /// matter).
    pub fn delete_many<I>(&self, docs: I) -> SpecDelete<'_, futures_util::stream::Iter<I::IntoIter>>
    where
        I: IntoIterator<Item = RawDocumentBuf>,
    {
        self.delete_stream(futures_util::stream::iter(docs))
    }

    /// [`delete_many`](SpecCollection::delete_many) over a `Stream`, in constant memory.
    pub fn delete_stream<S>(&self, docs: S) -> SpecDelete<'_, S>
    where
        S: Stream<Item = RawDocumentBuf>,
    {
        DeleteStream::new(self.on(), docs)
    }
}
