//! The two identity kinds: [`NaturalKey`] (derived id, guarded upsert) and [`RandomId`]
//! (event id created once, insert-once).

use serde::Serialize;
use ulid::Ulid;

use crate::content::{ContentHash, ContentHasher};
use crate::error::{Error, KeyError};
use crate::key::{self, WriteKey};

/// A document whose id is derived from its natural key. Use `#[derive(NaturalKey)]`.
///
/// ```
/// use natural_key::prelude::*;
///
/// #[derive(NaturalKey, Serialize, Deserialize)]
/// struct Post {
///     #[key] slug: String,
///     #[key] lang: String,
///     #[key(timestamp)] published_at: i64, // Unix milliseconds
///     body: String,
/// }
///
/// let post = Post { slug: "hello".into(), lang: "en".into(), published_at: 1_700_000_000_000, body: "hi".into() };
/// let id = post.id()?;
/// assert_eq!(id.timestamp_ms(), 1_700_000_000_000);
/// // Same key, same id: the body is not part of it.
/// let edited = Post { body: "edited".into(), ..post };
/// assert_eq!(edited.id()?, id);
/// # Ok::<(), natural_key::Error>(())
/// ```
pub trait NaturalKey: WriteKey + Indexes + Serialize {
    /// The stored names of the `#[natural_key(relative)]` fields: written by
    /// [`Collection::apply`](crate::Collection::apply), by an upsert only when it creates the
    /// document, and left out of the content hash.
    #[doc(hidden)]
    fn __relative_fields() -> &'static [&'static str]
    where
        Self: Sized,
    {
        &[]
    }

    /// The `#[natural_key(version)]` field as the int64 `_nk_version` stores, range-checked;
    /// `None` for a type without one.
    #[doc(hidden)]
    fn __version(&self) -> Result<Option<i64>, KeyError> {
        Ok(None)
    }

    /// The `#[natural_key(changed_at = "...")]` name: a field the engine sets to its clock
    /// when a write changes the stored content.
    #[doc(hidden)]
    fn __changed_at_field() -> Option<&'static str>
    where
        Self: Sized,
    {
        None
    }

    /// The `#[key(timestamp)]` field in Unix ms, range-checked.
    #[doc(hidden)]
    fn __timestamp_ms(&self) -> Result<u64, KeyError>;

    /// The v1 walk: feeds the hashed (non-`skip_hash`) fields to the content hasher, by their
    /// Rust names. The content hash of a v1 type; for a v2 type, the walk behind
    /// [`__content_hash_v1`](NaturalKey::__content_hash_v1).
    #[doc(hidden)]
    fn __write_content(&self, hasher: &mut ContentHasher) -> Result<(), Error>;

    /// For a type hashed v2, the v1 hash of this value: what a writer before the upgrade stored
    /// for it, accepted as unchanged content so that upgrading rewrites nothing. `None` for a
    /// v1 type, and for a value v1 could not hash (no document can hold its v1 hash).
    #[doc(hidden)]
    fn __content_hash_v1(&self) -> Option<ContentHash> {
        None
    }

    /// The deterministic id: the timestamp key as the 48-bit ULID time, the first 10 bytes of
    /// SHA-256 over the identity fields as the 80 low bits.
    ///
    /// Errors when the timestamp is outside the ULID range or a key holds a NUL byte.
    fn id(&self) -> Result<Ulid, KeyError> {
        derive_key(self).map(|(id, _)| id)
    }

    /// SHA-256 over the identity fields alone (what `_nk_identity` stores and the unique index
    /// covers). Unlike [`id`](NaturalKey::id) it does not depend on the timestamp key, so it
    /// finds the stored document even after the timestamp was (wrongly) edited.
    fn identity(&self) -> Result<ContentHash, KeyError> {
        key::identity_digest(self).map(ContentHash)
    }

    /// Canonical SHA-256 of what the document stores: independent of map iteration order,
    /// without `#[natural_key(skip_hash)]` fields (docs/id-scheme.md, "Content hash").
    fn content_hash(&self) -> Result<ContentHash, Error> {
        let mut h = ContentHasher::new();
        self.__write_content(&mut h)?;
        Ok(h.finish())
    }

    /// The identity key values as text (`slug="hello", lang="en"`), for messages.
    fn key_description(&self) -> String {
        key::describe(self)
    }
}

/// An event-like document with a random id created once, when the value is created. Use
/// `#[derive(RandomId)]` with an `#[id]` field of type [`Ulid`].
///
/// ```
/// use natural_key::prelude::*;
///
/// #[derive(RandomId, Serialize, Deserialize)]
/// struct Click {
///     #[id] #[serde(rename = "_id")] id: natural_key::Ulid,
///     page: String,
/// }
///
/// let click = Click { id: natural_key::Ulid::new(), page: "/".into() };
/// assert_eq!(RandomId::id(&click), click.id); // a retry of this value reuses the id
/// ```
pub trait RandomId: Indexes + Serialize {
    /// The id carried by the value (its `#[id]` field).
    fn id(&self) -> Ulid;

    /// The `#[idempotency_key]` field as text, if the type has one.
    #[doc(hidden)]
    fn __idempotency_key(&self) -> Result<Option<String>, KeyError> {
        Ok(None)
    }

    /// The stored names of the fields that are not part of the event's payload — the `#[id]`
    /// and `#[idempotency_key]` fields and the `#[natural_key(skip_hash)]` ones — beside `_id`
    /// and natural-key's own fields, which never are: a retry that sets them anew is the same
    /// event.
    #[doc(hidden)]
    fn __payload_skip() -> &'static [&'static str] {
        &[]
    }
}

/// The indexes a type needs; both derives implement it.
#[doc(hidden)]
pub trait Indexes {
    fn index_models() -> Vec<IndexSpec>;

    /// The stored names of the identity key fields a collection may be sharded on: those whose
    /// stored value the identity determines (no normalization, stored as they are, under the
    /// default scheme), so every document of one identity lands on one shard.
    fn __shard_key_fields() -> &'static [&'static str] {
        &[]
    }
}

/// A unique index natural-key relies on: one field, ascending, over every document that
/// carries the field. How "carries" is expressed (partial or sparse) is the engine's choice,
/// made when the collection is opened.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSpec {
    pub(crate) field: &'static str,
    pub(crate) name: &'static str,
}

#[doc(hidden)]
pub fn identity_index() -> IndexSpec {
    IndexSpec {
        field: crate::names::IDENTITY_FIELD,
        name: crate::names::IDENTITY_INDEX,
    }
}

#[doc(hidden)]
pub fn idempotency_index() -> IndexSpec {
    IndexSpec {
        field: crate::names::IDEMPOTENCY_FIELD,
        name: crate::names::IDEMPOTENCY_INDEX,
    }
}

/// A document's [`id`](NaturalKey::id) and its identity digest (what `_nk_identity` stores),
/// in one pass over its key fields: the one place a typed document's key is derived.
pub(crate) fn derive_key<T: NaturalKey + ?Sized>(doc: &T) -> Result<(Ulid, [u8; 32]), KeyError> {
    let digest = key::identity_digest(doc)?;
    Ok((key::ulid_from(doc.__timestamp_ms()?, &digest), digest))
}
