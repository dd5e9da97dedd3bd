//! The delete builders: [`Collection::delete`], [`Collection::delete_many`] and
//! [`Collection::delete_stream`], each configured, then `.await`ed. The deletes themselves are
//! `write::delete`'s.

use std::borrow::Borrow;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use futures_util::Stream;
use mongodb::ClientSession;
use tracing::Instrument;

use crate::action::{batch_options, common_options, record};
use crate::collection::Collection;
use crate::error::Error;
use crate::outcome::{BatchError, BatchReport, DeleteOutcome};
use crate::retry::RetryPolicy;
use crate::traits::NaturalKey;
use crate::write::batch::{self, Item, Options};
use crate::write::delete::{DeleteWriter, PreparedDelete};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
    /// match posts.delete(&post).retry(natural_key::RetryPolicy::default()).await? {
    ///     DeleteOutcome::Deleted(id) => println!("deleted {id}"),
    ///     DeleteOutcome::NotFound(id) => println!("{id} was not stored"),
    ///     DeleteOutcome::Gone(id) => println!("{id} is gone (this call or another deleted it)"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn delete<'a>(&'a self, doc: &'a T) -> Delete<'a, T> {
        Delete {
            coll: self,
            doc,
            retry: RetryPolicy::none(),
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
        DeleteStream {
            coll: self,
            docs,
            opts: Options::default(),
            session: None,
        }
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

/// What a delete by key sends for `doc`, derived once.
pub(crate) fn prepare<T: NaturalKey>(doc: &T) -> Result<PreparedDelete, Error> {
    let (id, digest) = crate::traits::derive_key(doc)?;
    PreparedDelete::new(id, crate::content::ContentHash(digest))
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
        Box::pin(
            async move {
                let coll = self.coll;
                let ns = &coll.target.namespace;
                let result = async {
                    let prepared = prepare(self.doc)?;
                    tracing::Span::current().record("id", tracing::field::display(prepared.id));
                    let mut writer = DeleteWriter::<T>::new(&coll.target, self.session);
                    let item = Item {
                        index: 0,
                        prepared,
                        doc: self.doc,
                    };
                    batch::one(&mut writer, item, &self.retry, "delete", ns).await
                }
                .await;
                record(ns, "delete", &result);
                result
            }
            .instrument(span),
        )
    }
}

/// Builder returned by [`Collection::delete_stream`]; `.await` it.
#[must_use = "a batch delete does nothing until awaited"]
pub struct DeleteStream<'a, T: Send + Sync, S> {
    coll: &'a Collection<T>,
    docs: S,
    opts: Options<'a>,
    session: Option<&'a mut ClientSession>,
}

/// Builder returned by [`Collection::delete_many`]: the streaming builder over the iterator.
pub type DeleteMany<'a, T, I> = DeleteStream<'a, T, futures_util::stream::Iter<I>>;

impl<'a, T: NaturalKey + Send + Sync, S> DeleteStream<'a, T, S> {
    batch_options!();
}

impl<'a, T, S> IntoFuture for DeleteStream<'a, T, S>
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
            tracing::info_span!("natural_key.delete_many", collection = %coll.target.namespace);
        Box::pin(
            async move {
                let mut writer = DeleteWriter::<T>::new(&coll.target, self.session);
                let prepare = |d: &S::Item| prepare(d.borrow());
                let ns = &coll.target.namespace;
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
