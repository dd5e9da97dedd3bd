//! `open`: a handle, its indexes ensured and its deployment learned, for a type
//! ([`OpenCollection`]) or for documents a [`KeySpec`] describes ([`OpenSpecCollection`]).

use std::future::IntoFuture;
use std::marker::PhantomData;

use mongodb::Database;
use serde::de::DeserializeOwned;

use super::BoxFuture;
use crate::collection::{Collection, SpecCollection};
use crate::deployment::Deployment;
use crate::error::Error;
use crate::keyspec::KeySpec;
use crate::retry::RetryPolicy;
use crate::traits::Indexes;

impl<T: Send + Sync> Collection<T> {
    /// Opens `db.name`; configure with [`OpenCollection`]'s methods, then `.await`.
    pub fn open(db: &Database, name: &str) -> OpenCollection<T> {
        Self::new(db.collection(name))
    }

    /// Opens a driver collection, keeping its settings (write concern; its read preference
    /// applies to your own reads through [`inner`](Collection::inner), never to the guard's).
    // Named after what it takes; the builder it returns awaits into `Self`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(coll: mongodb::Collection<T>) -> OpenCollection<T> {
        OpenCollection {
            coll,
            deployment: None,
            sharded: None,
            retry: RetryPolicy::default(),
            _t: PhantomData,
        }
    }
}

/// Builder returned by [`Collection::open`] and [`Collection::new`]; `.await` it.
#[must_use = "opening does nothing until awaited"]
pub struct OpenCollection<T: Send + Sync> {
    coll: mongodb::Collection<T>,
    deployment: Option<Deployment>,
    sharded: Option<bool>,
    retry: RetryPolicy,
    _t: PhantomData<fn() -> T>,
}

impl<T: Send + Sync> OpenCollection<T> {
    /// The retry policy of every write on the handle that sets none of its own (default
    /// [`RetryPolicy::default`]: up to 10 attempts within 60 s). A handle retries out of the
    /// box because every natural-key write is safe to repeat: a retry after a lost reply finds
    /// its own write, so a transient error (a failover, a dropped connection, a throttled
    /// command) costs a wait, not a failed call. [`RetryPolicy::none`] makes every call one
    /// attempt, for a caller that retries itself.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(db: natural_key::mongodb::Database, post: Post) -> Result<(), natural_key::Error> {
    /// use std::time::Duration;
    /// use natural_key::RetryPolicy;
    /// let posts = natural_key::Collection::<Post>::open(&db, "posts")
    ///     .retry(RetryPolicy::default().deadline(Duration::from_secs(300)))
    ///     .await?;
    /// posts.upsert(&post).await?; // retried for up to 5 minutes
    /// posts.upsert(&post).retry(RetryPolicy::none()).await?; // this call: one attempt
    /// # Ok(()) }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Uses a deployment already detected (say, by another handle on the same client:
    /// `other.deployment().clone()`) instead of asking the server again.
    pub fn deployment(mut self, deployment: Deployment) -> Self {
        self.deployment = Some(deployment);
        self
    }

    /// Declares the collection sharded or partitioned on `_nk_identity`: every write filter
    /// then carries it besides `_id`, so that each write goes to the one shard that holds the
    /// document. By default the handle finds out by itself: connected to a mongos (`hello`
    /// says `isdbgrid`), or where the engine's query plans show the collection distributed on
    /// `_nk_identity` (DocumentDB on Citus, which FerretDB presents as one server). Set it for
    /// Azure Cosmos DB partitioned collections, which a connection cannot detect.
    ///
    /// Whatever is declared, `open` refuses a collection that the engine's plans show sharded
    /// on another key ([`Error::ShardKeyUnsupported`]): the engine would enforce natural-key's
    /// unique indexes only within one shard-key value.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(db: natural_key::mongodb::Database) -> Result<(), natural_key::Error> {
    /// // An Azure Cosmos DB collection partitioned on `/_nk_identity`.
    /// let posts = natural_key::Collection::<Post>::open(&db, "posts").sharded(true).await?;
    /// assert!(posts.is_sharded());
    /// # Ok(()) }
    /// ```
    pub fn sharded(mut self, sharded: bool) -> Self {
        self.sharded = Some(sharded);
        self
    }
}

impl<T> IntoFuture for OpenCollection<T>
where
    T: Indexes + DeserializeOwned + Send + Sync + 'static,
{
    type Output = Result<Collection<T>, Error>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(Collection::opened(
            self.coll,
            self.deployment,
            self.sharded,
            self.retry,
        ))
    }
}

impl KeySpec {
    /// Opens `db.name` for guarded upserts of documents this spec describes, as
    /// [`Collection::open`] opens one for a type: it ensures the identity index, learns the
    /// deployment and checks the shard key. `.await` it.
    ///
    /// ```no_run
    /// # use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec};
    /// # use natural_key_runtime::Scheme;
    /// # async fn f(db: mongodb::Database) -> Result<(), Box<dyn std::error::Error>> {
    /// let spec = KeySpec::new(Scheme::Default { namespace: "blog.post" }, "published_at")
    ///     .key(KeyField::new("slug", KeyKind::Str));
    /// let posts = spec.open(&db, "posts").await?;
    /// let doc = bson::rawdoc! { "slug": "hello", "published_at": 1_700_000_000_000i64, "body": "Hi" };
    /// let report = posts.upsert_many([doc]).await?;
    /// assert_eq!(report.inserted + report.updated + report.unchanged, 1);
    /// # Ok(()) }
    /// ```
    pub fn open(&self, db: &Database, name: &str) -> OpenSpecCollection {
        OpenSpecCollection {
            spec: self.clone(),
            coll: db.collection(name),
            sharded: None,
            retry: RetryPolicy::default(),
        }
    }
}

/// Builder returned by [`KeySpec::open`]; `.await` it.
#[must_use = "opening does nothing until awaited"]
pub struct OpenSpecCollection {
    spec: KeySpec,
    coll: mongodb::Collection<bson::Document>,
    sharded: Option<bool>,
    retry: RetryPolicy,
}

impl OpenSpecCollection {
    /// Declares the collection sharded or partitioned on `_nk_identity`, as
    /// [`OpenCollection::sharded`] does.
    pub fn sharded(mut self, sharded: bool) -> Self {
        self.sharded = Some(sharded);
        self
    }

    /// The retry policy of every write on the handle that sets none of its own, as
    /// [`OpenCollection::retry`] (default [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }
}

impl IntoFuture for OpenSpecCollection {
    type Output = Result<SpecCollection, Error>;
    type IntoFuture = BoxFuture<'static, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(SpecCollection::opened(
            self.spec,
            self.coll,
            self.sharded,
            self.retry,
        ))
    }
}
