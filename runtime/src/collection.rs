//! The handle: a collection opened once — indexes ensured, deployment known, settings fixed —
//! through which every write and guard read goes.

use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use serde::de::DeserializeOwned;
use ulid::Ulid;

use crate::deployment::Deployment;
use crate::error::Error;
use crate::keyspec::KeySpec;
use crate::names::{DELETED_FIELD, IDEMPOTENCY_FIELD, IDENTITY_FIELD};
use crate::op::answer::{classify, index_over_duplicates, DUPLICATE_KEY_CODE, INTERNAL_ERROR};
use crate::op::{self, IndexInfo, Placement, ShardKey, Target};
use crate::retry::RetryPolicy;
use crate::stored::struct_fields;
use crate::traits::{IndexSpec, Indexes, NaturalKey};
use crate::write::keyed::{prepare_raw, On};

/// A collection of `T` documents, opened for natural-key writes.
///
/// Opening ensures the unique indexes the type relies on (once, not per call), learns the
/// deployment (engine, limits, sharding) and fixes the settings every call uses: guard reads go
/// to the primary, writes carry the collection's write concern. Every write goes through the
/// handle; clone it freely (it is a few `Arc`s).
///
/// ```no_run
/// use natural_key::prelude::*;
///
/// #[derive(NaturalKey, Serialize, Deserialize)]
/// struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, body: String }
///
/// # async fn f(db: natural_key::mongodb::Database) -> Result<(), natural_key::Error> {
/// let posts = natural_key::Collection::<Post>::open(&db, "posts").await?;
/// let post = Post { slug: "hello".into(), published_at: 1_700_000_000_000, body: "Hi".into() };
/// let outcome = posts.upsert(&post).await?;
/// assert_eq!(posts.get(outcome.id()).await?.map(|p| p.body), Some("Hi".to_string()));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Collection<T: Send + Sync> {
    pub(crate) inner: mongodb::Collection<T>,
    pub(crate) target: Target,
    /// The type's stored field names (see `stored::struct_fields`).
    pub(crate) fields: Option<&'static [&'static str]>,
    /// Every call's retry policy, unless the call sets its own.
    pub(crate) retry: RetryPolicy,
}

impl<T: Send + Sync> Clone for Collection<T> {
    fn clone(&self) -> Self {
        Collection {
            inner: self.inner.clone(),
            target: self.target.clone(),
            fields: self.fields,
            retry: self.retry,
        }
    }
}

impl<T: Send + Sync> Collection<T> {
    /// The driver collection, for everything natural-key does not do.
    pub fn inner(&self) -> &mongodb::Collection<T> {
        &self.inner
    }

    /// The deployment this handle was opened on.
    pub fn deployment(&self) -> &Deployment {
        &self.target.deployment
    }

    /// Whether write filters carry a shard key (the collection is sharded or partitioned):
    /// see [`shard_key`](Self::shard_key).
    pub fn is_sharded(&self) -> bool {
        self.target.shard_key.is_some()
    }

    /// The field the collection is sharded on, which write filters carry: `_nk_identity`, or
    /// one of the type's identity key fields whose stored value the identity determines (a
    /// tenant id: a `#[key]` without `lowercase` or `nfc`, stored as it is). Found by
    /// [`open`](Self::open) from the engine's plans, or declared with
    /// [`OpenCollection::sharded`](crate::OpenCollection::sharded) (`_nk_identity`). `None` on
    /// an unsharded collection.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Order { #[key] tenant: String, #[key] number: u64, #[key(timestamp)] placed_at: i64 }
    /// # async fn f(db: natural_key::mongodb::Database) -> Result<(), natural_key::Error> {
    /// // Sharded on `tenant` (one of the keys): accepted, and every write filter carries it.
    /// let orders = natural_key::Collection::<Order>::open(&db, "orders").await?;
    /// assert_eq!(orders.shard_key(), Some("tenant"));
    /// # Ok(()) }
    /// ```
    pub fn shard_key(&self) -> Option<&'static str> {
        self.target.shard_key.as_ref().map(ShardKey::field)
    }

    /// The retry policy of every write on this handle that sets none of its own
    /// ([`OpenCollection::retry`](crate::OpenCollection::retry); by default
    /// [`RetryPolicy::default`]).
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// This handle with another default retry policy (a clone: handles are cheap). A call's
    /// own `.retry(...)` still wins.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
    /// use natural_key::RetryPolicy;
    /// // A request handler that must answer within 2 s, whatever the engine does.
    /// let fast = posts.with_retry(RetryPolicy::default().deadline(std::time::Duration::from_secs(2)));
    /// fast.upsert(&post).await?;
    /// # Ok(()) }
    /// ```
    pub fn with_retry(&self, policy: RetryPolicy) -> Self {
        Collection {
            retry: policy,
            ..self.clone()
        }
    }
}

impl<T: DeserializeOwned + Send + Sync> Collection<T> {
    /// The stored document with this id, read from the primary. A tombstone (what a versioned
    /// delete leaves) is no document: `None`.
    pub async fn get(&self, id: Ulid) -> Result<Option<T>, Error> {
        self.read_one(doc! { "_id": id.to_string() }).await
    }

    /// The one stored document `filter` finds, but a tombstone.
    async fn read_one(&self, mut filter: Document) -> Result<Option<T>, Error> {
        filter.insert(DELETED_FIELD, Bson::Null);
        let filter = RawDocumentBuf::from_document(&filter).map_err(Error::serialize::<T>)?;
        let mut once = self.target.once("get");
        let found: Vec<Document> = op::find(&self.target, filter, None, &mut once, None).await?;
        match found.into_iter().next() {
            None => Ok(None),
            Some(d) => bson::from_document(d)
                .map(Some)
                .map_err(|e| Error::UnexpectedDocument {
                    collection: self.target.namespace.clone(),
                    message: format!("cannot read it as `{}`: {e}", std::any::type_name::<T>()),
                }),
        }
    }
}

impl<T: NaturalKey + DeserializeOwned + Send + Sync> Collection<T> {
    /// The stored document with `doc`'s identity (its key fields but the timestamp), read from
    /// the primary: finds it even when `doc`'s timestamp key differs from the stored one. A
    /// tombstone is no document: `None`.
    pub async fn find_by_key(&self, doc: &T) -> Result<Option<T>, Error> {
        let identity = doc.identity()?.to_string();
        self.read_one(doc! { IDENTITY_FIELD: identity }).await
    }

    /// What `upsert_many` computes on the client for a first ingest of `docs` (ids,
    /// identities, hashes, the stored BSON, the `insert` commands), sending nothing; the
    /// commands' total bytes. For `benches/client_cpu.rs`: not an API.
    #[doc(hidden)]
    pub fn __first_ingest_client_work(&self, docs: &[T]) -> Result<usize, Error> {
        let prepared = docs
            .iter()
            .map(|d| crate::stored::Prepared::of(d, &self.target))
            .collect::<Result<Vec<_>, _>>()?;
        let items: Vec<_> = prepared.iter().collect();
        crate::write::guard::first_ingest_commands(&self.target, self.fields, &items)
    }
}

impl<T: Indexes + DeserializeOwned + Send + Sync> Collection<T> {
    /// Opens `coll` (see [`OpenCollection`](crate::OpenCollection)): its target, and the type's
    /// stored field names.
    pub(crate) async fn opened(
        coll: mongodb::Collection<T>,
        deployment: Option<Deployment>,
        sharded: Option<bool>,
        retry: RetryPolicy,
    ) -> Result<Self, Error> {
        let target = open_target(
            &coll,
            deployment,
            sharded,
            &T::index_models(),
            T::__shard_key_fields(),
        )
        .await?;
        let fields = struct_fields::<T>();
        if fields.is_none() {
            tracing::warn!(
                collection = %target.namespace,
                "`{}` does not deserialize as a plain struct (serde flatten?): upserts in \
                 Merge mode cannot unset its fields that a value leaves out",
                std::any::type_name::<T>()
            );
        }
        Ok(Collection {
            inner: coll,
            target,
            fields,
            retry,
        })
    }
}

impl<T: NaturalKey + Send + Sync> Collection<T> {
    /// Where a builder's writes go and how they are keyed: a builder holds this, not the
    /// handle, so one builder serves typed and run-time documents.
    pub(crate) fn on(&self) -> On<'_, T> {
        On {
            target: &self.target,
            spec: &(),
            fields: self.fields,
            retry: self.retry,
        }
    }
}

/// A collection opened for guarded upserts of documents without a Rust type, each described by
/// a [`KeySpec`]: the same ids, identities, content hashes, fork guard and outcomes as a
/// [`Collection`] of a type with those keys (docs/id-scheme.md, "A document without a Rust
/// type"), through the same builders. The `natural-key ingest` command writes through it.
#[derive(Debug, Clone)]
pub struct SpecCollection {
    spec: Arc<KeySpec>,
    pub(crate) target: Target,
    retry: RetryPolicy,
}

impl SpecCollection {
    /// Opens `coll` for documents `spec` describes (see
    /// [`OpenSpecCollection`](crate::spec::OpenSpecCollection)).
    pub(crate) async fn opened(
        spec: KeySpec,
        coll: mongodb::Collection<bson::Document>,
        sharded: Option<bool>,
        retry: RetryPolicy,
    ) -> Result<Self, Error> {
        let indexes = [crate::traits::identity_index()];
        let target = open_target(&coll, None, sharded, &indexes, &spec.shard_key_fields()).await?;
        Ok(SpecCollection {
            spec: Arc::new(spec),
            target,
            retry,
        })
    }

    /// The deployment this handle was opened on.
    pub fn deployment(&self) -> &Deployment {
        &self.target.deployment
    }

    /// The spec the documents are written under.
    pub fn spec(&self) -> &KeySpec {
        &self.spec
    }

    /// Whether write filters carry a shard key (the collection is sharded or partitioned):
    /// see [`shard_key`](Self::shard_key).
    pub fn is_sharded(&self) -> bool {
        self.target.shard_key.is_some()
    }

    /// The field the collection is sharded on, which write filters carry: `_nk_identity`, or
    /// a key field whose stored value the identity determines (a tenant id: a
    /// text key without normalization, a boolean or an ObjectId; not optional). Found by
    /// [`KeySpec::open`] from the engine's plans, or declared with
    /// [`OpenSpecCollection::sharded`](crate::spec::OpenSpecCollection::sharded)
    /// (`_nk_identity`). `None` on an unsharded collection.
    ///
    pub fn shard_key(&self) -> Option<&'static str> {
        self.target.shard_key.as_ref().map(ShardKey::field)
    }

    /// The retry policy of every write on this handle that sets none of its own
    /// ([`OpenSpecCollection::retry`](crate::spec::OpenSpecCollection::retry); by default
    /// [`RetryPolicy::default`]).
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// This handle with another default retry policy (a clone). A call's own `.retry(...)`
    /// still wins.
    pub fn with_retry(&self, policy: RetryPolicy) -> Self {
        SpecCollection {
            retry: policy,
            ..self.clone()
        }
    }

    /// Everything an upsert of `doc` checks before sending anything — its key fields, its
    /// field names, its size against the engine's limit — without sending anything: the id it
    /// would be stored under, or the error its write would fail with.
    pub fn check(&self, doc: &RawDocument) -> Result<Ulid, Error> {
        prepare_raw(doc, &self.spec, &self.target).map(|p| p.id)
    }

    /// As [`Collection::on`], for documents this handle's spec keys.
    pub(crate) fn on(&self) -> On<'_, RawDocumentBuf> {
        On {
            target: &self.target,
            spec: &self.spec,
            fields: None,
            retry: self.retry,
        }
    }
}

/// What opening a collection for natural-key writes does, typed or not: learn the deployment
/// (unless given), check the shard key, decide whether write filters carry `_nk_identity`
/// (`sharded` as declared, else as found), and ensure `indexes`.
async fn open_target<C: Send + Sync>(
    coll: &mongodb::Collection<C>,
    deployment: Option<Deployment>,
    sharded: Option<bool>,
    indexes: &[IndexSpec],
    shard_fields: &[&'static str],
) -> Result<Target, Error> {
    let deployment = match deployment {
        Some(d) => d,
        None => Deployment::detect(coll.client()).await?,
    };
    let write_concern = match coll.write_concern() {
        Some(wc) => Some(
            bson::to_raw_document_buf(wc)
                .map_err(Error::serialize::<mongodb::options::WriteConcern>)?,
        )
        .filter(|d| !d.is_empty()),
        None => None,
    };
    let ns = coll.namespace();
    let db = coll.client().database(&ns.db);
    let mut target = Target::new(db, ns.coll, write_concern, deployment, None);
    let found = check_shard_key(&target, indexes, shard_fields).await?;
    target.shard_key = match sharded {
        Some(false) => None,
        Some(true) => Some(found.unwrap_or(ShardKey::Identity)),
        None => found.or(target.deployment.is_sharded().then_some(ShardKey::Identity)),
    };
    for spec in indexes {
        ensure_index(&target, spec).await?;
    }
    Ok(target)
}

/// Whether the engine can enforce the unique `indexes` a type relies on, as far as its plans
/// tell (`op::placement`): refused with [`Error::ShardKeyUnsupported`] before anything is
/// written when the collection is sharded on a key under which it cannot. The shard key
/// write filters carry where the plans name one a `NaturalKey` type can live with.
///
/// A `NaturalKey` type needs documents of one identity (a fork has two `_id`s) on one shard,
/// since the engine enforces a unique index only among documents of one shard-key value:
/// sharded on `_nk_identity`, or on one of `shard_fields`, the identity key fields whose stored
/// value the identity determines (a tenant id). An event type needs `_nk_idempotency` when it
/// has an idempotency key (a resent request has a new `_id` and the same key), `_id`
/// otherwise; `_nk_identity`, which events do not store, keeps them all on one shard, which is
/// safe too.
async fn check_shard_key(
    target: &Target,
    indexes: &[IndexSpec],
    shard_fields: &[&'static str],
) -> Result<Option<ShardKey>, Error> {
    let needed = [IDENTITY_FIELD, IDEMPOTENCY_FIELD]
        .into_iter()
        .find(|f| indexes.iter().any(|ix| ix.field == *f))
        .unwrap_or("_id");
    let mut probes = vec![needed];
    if needed != IDENTITY_FIELD {
        probes.push(IDENTITY_FIELD);
    } else {
        probes.extend(shard_fields);
    }
    match op::placement(target, &probes).await? {
        Placement::Sharded { by: Some(_), .. } if needed != IDENTITY_FIELD => Ok(None),
        Placement::Sharded {
            by: Some(IDENTITY_FIELD),
            ..
        } => Ok(Some(ShardKey::Identity)),
        Placement::Sharded { by: Some(f), .. } => Ok(Some(ShardKey::KeyField(f))),
        Placement::Sharded { shards, by: None } => Err(Error::ShardKeyUnsupported {
            collection: target.namespace.clone(),
            shard_key: format!(
                "a key other than {} (a read by {} goes to {shards} shards)",
                probes
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if probes.len() > 1 { "each" } else { "it" },
            ),
            needed: needed.to_string(),
        }),
        Placement::Single | Placement::Unknown => Ok(None),
    }
}

/// How a unique index covers only documents that carry the field, so a collection holding
/// documents written by other code (without it) can be adopted: MongoDB counts a missing
/// field as null, and a plain unique index admits only one such document.
///
/// Sparse first: for a one-field index it means the same as a partial `{$exists: true}` on
/// MongoDB, and more engines honour it (DocumentDB before 5.0 and Cosmos DB have no partial
/// indexes; mongo-java-server 1.47 accepts a partial filter but does not apply it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coverage {
    Sparse,
    Partial,
    /// For engines that let any number of documents lack a uniquely indexed field (FerretDB
    /// 1.x) and accept neither option.
    Plain,
}

fn index_spec(spec: &IndexSpec, coverage: Coverage) -> Document {
    let mut d = doc! { "key": { spec.field: 1 }, "name": spec.name, "unique": true };
    match coverage {
        Coverage::Partial => {
            d.insert(
                "partialFilterExpression",
                doc! { spec.field: { "$exists": true } },
            );
        }
        Coverage::Sparse => {
            d.insert("sparse", true);
        }
        Coverage::Plain => {}
    }
    d
}

fn truthy(b: Option<&Bson>) -> bool {
    match b {
        Some(Bson::Boolean(v)) => *v,
        Some(Bson::Int32(v)) => *v != 0,
        Some(Bson::Int64(v)) => *v != 0,
        Some(Bson::Double(v)) => *v != 0.0,
        _ => false,
    }
}

/// Whether an existing index gives what natural-key relies on: unique on exactly the field,
/// over every document that carries it (a plain unique index from earlier versions qualifies).
fn serves(ix: &IndexInfo, spec: &IndexSpec) -> bool {
    let key_ok = ix.key.len() == 1
        && ix.key.get(spec.field).is_some_and(|v| {
            matches!(v, Bson::Int32(1) | Bson::Int64(1)) || v.as_f64() == Some(1.0)
        });
    let partial_ok = match &ix.partial {
        None => true,
        Some(p) => *p == doc! { spec.field: { "$exists": true } },
    };
    key_ok && truthy(ix.unique.as_ref()) && partial_ok
}

async fn ensure_index(target: &Target, spec: &IndexSpec) -> Result<(), Error> {
    let existing = op::list_indexes(target).await?;
    if let Some(ix) = existing.iter().find(|ix| ix.name == spec.name) {
        if serves(ix, spec) {
            return Ok(());
        }
        return Err(Error::IndexConflict {
            collection: target.namespace.clone(),
            name: spec.name.to_string(),
            found: describe(ix),
            wanted: index_spec(spec, Coverage::Sparse).to_string(),
        });
    }
    if existing.iter().any(|ix| serves(ix, spec)) {
        return Ok(());
    }
    // Sparse first; then the ways the engine may take instead.
    let mut refusal = match create_with(target, spec, Coverage::Sparse).await? {
        None => return Ok(()),
        Some(e) => e,
    };
    let mut others = vec![Coverage::Partial];
    if target
        .deployment
        .missing_field_is_absent_in_unique_indexes()
    {
        others.push(Coverage::Plain);
    }
    for coverage in others {
        match create_with(target, spec, coverage).await? {
            None => return Ok(()),
            Some(e) => refusal = e,
        }
    }
    Err(unavailable(target, spec, refusal))
}

/// Creates the index with `coverage`: `None` when created, the engine's refusal when it does
/// not take this option (try the next way).
async fn create_with(
    target: &Target,
    spec: &IndexSpec,
    coverage: Coverage,
) -> Result<Option<mongodb::error::Error>, Error> {
    match op::create_index(target, index_spec(spec, coverage)).await {
        Ok(()) => Ok(None),
        Err(e) if option_refused(&e) => Ok(Some(e)),
        Err(e) if index_over_duplicates(&e) => Err(unavailable(target, spec, e)),
        Err(e) => Err(classify(e)),
    }
}

/// Every coverage refused: a typed error naming the remedy, not the engine's bare refusal.
fn unavailable(target: &Target, spec: &IndexSpec, refusal: mongodb::error::Error) -> Error {
    use mongodb::error::ErrorKind;
    match refusal.kind.as_ref() {
        ErrorKind::Command(c) => Error::IndexUnavailable {
            collection: target.namespace.clone(),
            name: spec.name.to_string(),
            field: spec.field.to_string(),
            code: c.code,
            message: c.message.clone(),
        },
        _ => classify(refusal),
    }
}

/// A command error about the index's options, not about the data (duplicates) or the engine
/// failing (code 1, `InternalError`, is never an option the engine does not take).
fn option_refused(e: &mongodb::error::Error) -> bool {
    use mongodb::error::ErrorKind;
    matches!(e.kind.as_ref(), ErrorKind::Command(c)
        if c.code != DUPLICATE_KEY_CODE && c.code != INTERNAL_ERROR)
}

fn describe(ix: &IndexInfo) -> String {
    let mut d = doc! { "key": ix.key.clone() };
    if let Some(u) = &ix.unique {
        d.insert("unique", u.clone());
    }
    if let Some(s) = &ix.sparse {
        d.insert("sparse", s.clone());
    }
    if let Some(p) = &ix.partial {
        d.insert("partialFilterExpression", p.clone());
    }
    d.to_string()
}
