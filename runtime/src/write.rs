//! The writes: the guarded [`Upsert`], the insert-once [`Insert`], and [`ensure_indexes`].

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::options::IndexOptions;
use mongodb::{Collection, IndexModel};
use tracing::Instrument;
use ulid::Ulid;

use crate::error::{classify, is_duplicate_key, Error};
use crate::retry::RetryPolicy;
use crate::traits::{Indexes, NaturalKey, RandomId};

/// Field holding the identity digest (hex SHA-256 of the non-timestamp key fields).
pub const IDENTITY_FIELD: &str = "_nk_identity";
/// Field holding the content hash (hex).
pub const HASH_FIELD: &str = "_nk_hash";
/// Field holding the token of the batch write command that last wrote the document; lets a
/// batch tell its own writes from a concurrent writer's after an engine error.
pub const WRITE_FIELD: &str = "_nk_write";
/// Field holding a RandomId type's idempotency key.
pub const IDEMPOTENCY_FIELD: &str = "_nk_idempotency";

/// How many read-decide-write rounds an upsert tries before reporting [`Error::Contention`].
const MAX_ROUNDS: u32 = 8;

/// What a write did. Every variant carries the document's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// A new document was stored.
    Inserted(Ulid),
    /// The stored document's content changed.
    Updated(Ulid),
    /// The stored content hash equals the new one: no write command was sent.
    Unchanged(Ulid),
    /// (RandomId) this event is already stored — typically a retry whose first attempt landed.
    /// Carries the stored id (which differs from the value's own id only when the match was
    /// on the idempotency key).
    AlreadyApplied(Ulid),
}

impl Outcome {
    /// The document's id.
    ///
    /// ```
    /// # use natural_key_runtime::Outcome;
    /// let id = ulid::Ulid::nil();
    /// assert_eq!(Outcome::Unchanged(id).id(), id);
    /// ```
    pub fn id(&self) -> Ulid {
        match *self {
            Outcome::Inserted(id)
            | Outcome::Updated(id)
            | Outcome::Unchanged(id)
            | Outcome::AlreadyApplied(id) => id,
        }
    }

    /// `"inserted"`, `"updated"`, `"unchanged"` or `"already_applied"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Inserted(_) => "inserted",
            Outcome::Updated(_) => "updated",
            Outcome::Unchanged(_) => "unchanged",
            Outcome::AlreadyApplied(_) => "already_applied",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.as_str(), self.id())
    }
}

/// How an upsert writes a changed document.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(NaturalKey, Serialize, Deserialize)]
/// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
/// # async fn f(coll: natural_key::mongodb::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
/// // Fields removed from the struct disappear from the stored document too.
/// post.upsert(&coll).mode(WriteMode::Replace).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteMode {
    /// `$set` of the document's fields (the recipe's choice): fields that other code wrote to the
    /// stored document survive.
    #[default]
    Merge,
    /// Replace the stored document: fields removed from the struct are removed from the database.
    Replace,
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Creates the indexes a type relies on: for a [`NaturalKey`] type a unique index on the
/// identity (`_nk_identity`), so the database itself refuses a forked document even when two
/// writers race; for a [`RandomId`] type with an `#[idempotency_key]`, a unique index on it.
/// Idempotent: call it at start-up.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(NaturalKey, Serialize, Deserialize)]
/// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
/// # async fn f(coll: natural_key::mongodb::Collection<Post>) -> Result<(), natural_key::Error> {
/// natural_key::ensure_indexes(&coll).await?;
/// # Ok(()) }
/// ```
pub async fn ensure_indexes<T: Indexes + Send + Sync>(coll: &Collection<T>) -> Result<(), Error> {
    let models = T::index_models();
    if !models.is_empty() {
        coll.create_indexes(models).await.map_err(classify)?;
    }
    Ok(())
}

#[doc(hidden)]
pub fn identity_index() -> IndexModel {
    unique_index(IDENTITY_FIELD, "nk_identity")
}

#[doc(hidden)]
pub fn idempotency_index() -> IndexModel {
    unique_index(IDEMPOTENCY_FIELD, "nk_idempotency")
}

fn unique_index(field: &str, name: &str) -> IndexModel {
    IndexModel::builder()
        .keys(doc! { field: 1 })
        .options(
            IndexOptions::builder()
                .unique(true)
                .name(name.to_string())
                .build(),
        )
        .build()
}

fn namespace<T: Send + Sync>(coll: &Collection<T>) -> String {
    coll.namespace().to_string()
}

/// The document's BSON, serialized once, without `_id`: the filter carries `_id`, and engines
/// differ on `_id` inside `$set`/replacements.
fn to_body<T: serde::Serialize>(doc: &T) -> Result<RawDocumentBuf, Error> {
    let raw = bson::to_raw_document_buf(doc).map_err(Error::serialize::<T>)?;
    if raw.get("_id").map_err(Error::serialize::<T>)?.is_none() {
        return Ok(raw);
    }
    let mut body = RawDocumentBuf::new();
    append_fields(&mut body, &raw, Some("_id")).map_err(Error::serialize::<T>)?;
    Ok(body)
}

/// Appends the fields of `src` to `dst`, but `skip`: a byte copy per field, no `Document`.
fn append_fields(
    dst: &mut RawDocumentBuf,
    src: &RawDocumentBuf,
    skip: Option<&str>,
) -> Result<(), bson::raw::Error> {
    for element in src {
        let (key, value) = element?;
        if Some(key) != skip {
            dst.append_ref(key, value);
        }
    }
    Ok(())
}

/// The stored `_id` as text (ids are stored as 26-character ULID strings).
fn stored_id_text(stored: &Document) -> String {
    match stored.get("_id") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "<missing>".to_string(),
    }
}

/// The guarded upsert of one [`NaturalKey`] document. Created by
/// [`NaturalKey::upsert`]; configure, then `.await`.
///
/// 1. Derive the id, identity and content hash (a key error here means nothing was written).
/// 2. Read the stored `_id` and hash by identity.
/// 3. Stored `_id` ≠ derived id → [`Error::ImmutableKeyChanged`], nothing written.
/// 4. Same hash → [`Outcome::Unchanged`], no write sent.
/// 5. Otherwise write by `_id`, only if the stored hash is still the one read (optimistic
///    concurrency); a lost race re-reads and decides again.
#[must_use = "an upsert does nothing until awaited"]
pub struct Upsert<'a, T: Send + Sync> {
    doc: &'a T,
    coll: &'a Collection<T>,
    mode: WriteMode,
    retry: RetryPolicy,
}

impl<'a, T: NaturalKey + Send + Sync> Upsert<'a, T> {
    pub(crate) fn new(doc: &'a T, coll: &'a Collection<T>) -> Self {
        Upsert {
            doc,
            coll,
            mode: WriteMode::Merge,
            retry: RetryPolicy::none(),
        }
    }

    /// Retries transient failures (network, timeouts, elections) under `policy`. Safe: a retry
    /// after a lost acknowledgement finds its own write and reports
    /// [`Outcome::Unchanged`]. Without this call, a transient error is returned at once.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(coll: natural_key::mongodb::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
    /// post.upsert(&coll).retry(natural_key::RetryPolicy::default()).await?;
    /// # Ok(()) }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Chooses [`WriteMode::Merge`] (default) or [`WriteMode::Replace`].
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }

    /// Shorthand for `.mode(WriteMode::Replace)`.
    pub fn replace(self) -> Self {
        self.mode(WriteMode::Replace)
    }
}

/// Everything derived from the document before touching the database.
pub(crate) struct Prepared {
    pub(crate) id: Ulid,
    pub(crate) id_text: String,
    pub(crate) identity: String,
    pub(crate) hash: String,
    /// The stored fields but `_id`: the document, its identity and its hash, as BSON — built
    /// once; batches copy it into their commands without a `Document` tree in between.
    pub(crate) body: RawDocumentBuf,
    type_name: &'static str,
}

impl Prepared {
    pub(crate) fn of<T: NaturalKey>(doc: &T) -> Result<Self, Error> {
        // `id()` and `identity()` in one pass over the key fields.
        let digest = crate::key::identity_digest(doc)?;
        let id = crate::key::ulid_from(doc.__timestamp_ms()?, &digest);
        let identity = crate::content::ContentHash(digest).to_string();
        let hash = doc.content_hash()?.to_string();
        let mut body = to_body(doc)?;
        body.append(IDENTITY_FIELD, identity.as_str());
        body.append(HASH_FIELD, hash.as_str());
        Ok(Prepared {
            id,
            id_text: id.to_string(),
            identity,
            hash,
            body,
            type_name: std::any::type_name::<T>(),
        })
    }

    /// Appends the fields of `body` to `dst`.
    pub(crate) fn append_body_to(&self, dst: &mut RawDocumentBuf) -> Result<(), Error> {
        append_fields(dst, &self.body, None).map_err(|e| self.serialize_error(e))
    }

    fn serialize_error(&self, e: impl fmt::Display) -> Error {
        Error::Serialize {
            type_name: self.type_name,
            message: e.to_string(),
        }
    }

    /// `body` as a `Document`, for the driver's single-document update helpers.
    fn body_document(&self) -> Result<Document, Error> {
        self.body.to_document().map_err(|e| self.serialize_error(e))
    }
}

/// One guarded upsert against a raw collection; shared by single and batch writes.
pub(crate) async fn upsert_prepared(
    raw: &Collection<Document>,
    p: &Prepared,
    mode: WriteMode,
    describe_key: &(dyn Fn() -> String + Send + Sync),
) -> Result<Outcome, Error> {
    let body = p.body_document()?;
    for _ in 0..MAX_ROUNDS {
        let stored = raw
            .find_one(doc! { IDENTITY_FIELD: &p.identity })
            .projection(doc! { "_id": 1, HASH_FIELD: 1 })
            .await
            .map_err(classify)?;
        match stored {
            Some(stored) => {
                if stored.get("_id") != Some(&Bson::String(p.id_text.clone())) {
                    return Err(Error::ImmutableKeyChanged {
                        collection: raw.namespace().to_string(),
                        stored_id: stored_id_text(&stored),
                        derived_id: p.id,
                        key: describe_key(),
                    });
                }
                let stored_hash = stored.get(HASH_FIELD).cloned().unwrap_or(Bson::Null);
                if stored_hash == Bson::String(p.hash.clone()) {
                    return Ok(Outcome::Unchanged(p.id));
                }
                let filter = doc! { "_id": &p.id_text, HASH_FIELD: stored_hash };
                let matched = match mode {
                    WriteMode::Merge => raw.update_one(filter, doc! { "$set": &body }).await,
                    WriteMode::Replace => raw.replace_one(filter, &body).await,
                }
                .map_err(classify)?
                .matched_count;
                if matched == 1 {
                    return Ok(Outcome::Updated(p.id));
                }
                // Someone changed it between our read and write: read again and decide again.
            }
            None => {
                // Filter by `_id` alone: the one filter every engine answers from its primary
                // index (FerretDB 1.x scans the collection for any other). If a document with
                // our `_id` appeared since the read, overwriting it is what a read after it
                // would have decided too (Updated); one written by other code without identity
                // is adopted. A fork — same identity, other `_id` — is refused by the unique
                // identity index; the next read then reports it.
                let filter = doc! { "_id": &p.id_text };
                let result = match mode {
                    WriteMode::Merge => {
                        raw.update_one(filter, doc! { "$set": &body })
                            .upsert(true)
                            .await
                    }
                    WriteMode::Replace => raw.replace_one(filter, &body).upsert(true).await,
                };
                match result {
                    Ok(r) if r.upserted_id.is_some() => return Ok(Outcome::Inserted(p.id)),
                    Ok(r) if r.matched_count == 1 => return Ok(Outcome::Updated(p.id)),
                    Ok(_) => {}
                    Err(e) if is_duplicate_key(&e) => {}
                    Err(e) => return Err(classify(e)),
                }
            }
        }
    }
    Err(Error::Contention {
        collection: raw.namespace().to_string(),
        id: p.id,
        attempts: MAX_ROUNDS,
    })
}

impl<'a, T: NaturalKey + Send + Sync> IntoFuture for Upsert<'a, T> {
    type Output = Result<Outcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let Upsert {
                doc,
                coll,
                mode,
                retry,
            } = self;
            let span = tracing::info_span!(
                "natural_key.upsert",
                collection = %namespace(coll),
                id = tracing::field::Empty,
                outcome = tracing::field::Empty,
            );
            async move {
                let p = Prepared::of(doc)?;
                tracing::Span::current().record("id", tracing::field::display(p.id));
                let raw = coll.clone_with_type::<Document>();
                let describe = || doc.key_description();
                let result = retry
                    .run("upsert", || upsert_prepared(&raw, &p, mode, &describe))
                    .await;
                record_outcome(&result);
                result
            }
            .instrument(span)
            .await
        })
    }
}

fn record_outcome(result: &Result<Outcome, Error>) {
    let span = tracing::Span::current();
    match result {
        Ok(o) => {
            span.record("outcome", o.as_str());
        }
        Err(e) => {
            span.record("outcome", "error");
            tracing::debug!(error = %e, "write failed");
        }
    }
}

/// The insert-once write of a [`RandomId`] event. Created by [`RandomId::insert`]; `.await` it.
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(RandomId, Serialize, Deserialize)]
/// # struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
/// # async fn f(coll: natural_key::mongodb::Collection<Click>, click: Click) -> Result<(), natural_key::Error> {
/// match click.insert(&coll).retry(natural_key::RetryPolicy::default()).await? {
///     Outcome::Inserted(_) => {}
///     Outcome::AlreadyApplied(_) => {} // a retry whose first attempt landed
///     other => unreachable!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[must_use = "an insert does nothing until awaited"]
pub struct Insert<'a, T: Send + Sync> {
    doc: &'a T,
    coll: &'a Collection<T>,
    retry: RetryPolicy,
}

impl<'a, T: RandomId + Send + Sync> Insert<'a, T> {
    pub(crate) fn new(doc: &'a T, coll: &'a Collection<T>) -> Self {
        Insert {
            doc,
            coll,
            retry: RetryPolicy::none(),
        }
    }

    /// Retries transient failures under `policy`. Safe: a retry whose first attempt landed
    /// reports [`Outcome::AlreadyApplied`] instead of storing the event twice.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }
}

pub(crate) struct PreparedEvent {
    pub(crate) id: Ulid,
    pub(crate) idempotency_key: Option<String>,
    /// The document to insert, as BSON built once: `_id` (the event's ULID as text), the
    /// event's fields, and its idempotency key.
    pub(crate) body: RawDocumentBuf,
}

impl PreparedEvent {
    pub(crate) fn of<T: RandomId>(doc: &T) -> Result<Self, Error> {
        let id = doc.id();
        let idempotency_key = doc.__idempotency_key()?;
        // `_id` first, then the event's fields but its own `_id` (the `#[id]` field): one copy
        // of the serialized event.
        let raw = bson::to_raw_document_buf(doc).map_err(Error::serialize::<T>)?;
        let mut body = RawDocumentBuf::new();
        body.append("_id", id.to_string());
        append_fields(&mut body, &raw, Some("_id")).map_err(Error::serialize::<T>)?;
        if let Some(k) = &idempotency_key {
            body.append(IDEMPOTENCY_FIELD, k.as_str());
        }
        Ok(PreparedEvent {
            id,
            idempotency_key,
            body,
        })
    }
}

/// After a duplicate-key error: which stored event is this one? `None` if neither the id nor
/// the idempotency key is stored (it was deleted in between).
pub(crate) async fn already_applied(
    raw: &Collection<Document>,
    p: &PreparedEvent,
) -> Result<Option<Ulid>, Error> {
    let id_text = p.id.to_string();
    if raw
        .find_one(doc! { "_id": &id_text })
        .projection(doc! { "_id": 1 })
        .await
        .map_err(classify)?
        .is_some()
    {
        return Ok(Some(p.id));
    }
    if let Some(k) = &p.idempotency_key {
        if let Some(stored) = raw
            .find_one(doc! { IDEMPOTENCY_FIELD: k })
            .projection(doc! { "_id": 1 })
            .await
            .map_err(classify)?
        {
            let text = stored_id_text(&stored);
            return text
                .parse()
                .map(Some)
                .map_err(|_| Error::UnexpectedDocument {
                    collection: raw.namespace().to_string(),
                    message: format!(
                        "_id {text} of the event with idempotency key {k:?} is not a ULID"
                    ),
                });
        }
    }
    Ok(None)
}

pub(crate) async fn insert_prepared(
    raw: &Collection<Document>,
    p: &PreparedEvent,
) -> Result<Outcome, Error> {
    let docs = raw.clone_with_type::<RawDocumentBuf>();
    for _ in 0..MAX_ROUNDS {
        match docs.insert_one(&p.body).await {
            Ok(_) => return Ok(Outcome::Inserted(p.id)),
            Err(e) if is_duplicate_key(&e) => {
                if let Some(id) = already_applied(raw, p).await? {
                    return Ok(Outcome::AlreadyApplied(id));
                }
            }
            Err(e) => return Err(classify(e)),
        }
    }
    Err(Error::Contention {
        collection: raw.namespace().to_string(),
        id: p.id,
        attempts: MAX_ROUNDS,
    })
}

impl<'a, T: RandomId + Send + Sync> IntoFuture for Insert<'a, T> {
    type Output = Result<Outcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let Insert { doc, coll, retry } = self;
            let span = tracing::info_span!(
                "natural_key.insert",
                collection = %namespace(coll),
                id = %doc.id(),
                outcome = tracing::field::Empty,
            );
            async move {
                let p = PreparedEvent::of(doc)?;
                let raw = coll.clone_with_type::<Document>();
                let result = retry.run("insert", || insert_prepared(&raw, &p)).await;
                record_outcome(&result);
                result
            }
            .instrument(span)
            .await
        })
    }
}
