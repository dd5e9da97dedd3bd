//! The one difference between the typed and the untyped API: how a document becomes what the
//! write engine sends. A `#[derive(NaturalKey)]` type answers through its derive; a BSON
//! document described at run time answers through its [`KeySpec`]. Every verb, builder, batch
//! and round above and below this is shared.

// The trait is sealed: its methods name the engine's own types, which no user can reach.
#![allow(private_interfaces)]

use bson::{RawDocument, RawDocumentBuf};

use crate::content::ContentHash;
use crate::error::Error;
use crate::keyspec::KeySpec;
use crate::op::Target;
use crate::retry::RetryPolicy;
use crate::stored::{Prepared, PreparedDelete};
use crate::traits::{derive_key, NaturalKey};

/// A document natural-key upserts and deletes by key: a `#[derive(NaturalKey)]` type in a
/// [`Collection`](crate::Collection), or a [`bson::RawDocumentBuf`] in a
/// [`SpecCollection`](crate::spec::SpecCollection), keyed by its
/// [`KeySpec`](crate::spec::KeySpec). Sealed: the builders of both are the same types
/// ([`UpsertStream`](crate::UpsertStream), [`DeleteStream`](crate::DeleteStream)), and this is
/// what they ask of a document.
///
/// ```
/// fn writable<T: natural_key::Keyed>() {}
/// writable::<natural_key::bson::RawDocumentBuf>();
/// ```
pub trait Keyed: sealed::Prepare + Send + Sync {}

impl<T: sealed::Prepare + Send + Sync> Keyed for T {}

pub(crate) mod sealed {
    use super::*;

    pub trait Prepare {
        /// What the handle holds to key these documents: nothing for a type (its derive
        /// knows), the [`KeySpec`] for a document described at run time.
        type Spec: Send + Sync;
        /// What a guarded upsert sends.
        fn prepare(&self, spec: &Self::Spec, target: &Target) -> Result<Prepared, Error>;
        /// What a delete by key sends: the id and identity, from the key fields alone, and the
        /// version of a versioned document.
        fn prepare_delete(
            &self,
            spec: &Self::Spec,
            target: &Target,
        ) -> Result<PreparedDelete, Error>;
        /// Its key values as text, for a fork's error (built only when one is reported).
        fn describe(&self, spec: &Self::Spec) -> String;
        /// Another content hash that counts as this content (docs/id-scheme.md): a v2 type's
        /// v1 hash ("Upgrading from v1"); a document without a Rust type, its encoding under
        /// the v2 prefix ("A document without a Rust type"). Computed only on a mismatch.
        fn other_hash(&self, spec: &Self::Spec) -> Option<String>;
        /// The field the engine stamps with its clock when a write changes the content
        /// (`#[natural_key(changed_at = "...")]`, [`KeySpec::changed_at`]).
        fn changed_at(spec: &Self::Spec) -> Option<&'static str>;
    }
}

impl<T: NaturalKey + Send + Sync> sealed::Prepare for T {
    type Spec = ();

    fn prepare(&self, _: &(), target: &Target) -> Result<Prepared, Error> {
        Prepared::of(self, target)
    }

    fn prepare_delete(&self, _: &(), target: &Target) -> Result<PreparedDelete, Error> {
        let (id, digest) = derive_key(self)?;
        let shard = target.key_field_condition(|| {
            bson::to_raw_document_buf(self).map_err(Error::serialize::<T>)
        })?;
        PreparedDelete::new(id, ContentHash(digest), self.__version()?, shard)
    }

    fn describe(&self, _: &()) -> String {
        self.key_description()
    }

    fn other_hash(&self, _: &()) -> Option<String> {
        self.__content_hash_v1().map(|h| h.to_string())
    }

    fn changed_at(_: &()) -> Option<&'static str> {
        T::__changed_at_field()
    }
}

impl sealed::Prepare for RawDocumentBuf {
    type Spec = KeySpec;

    fn prepare(&self, spec: &KeySpec, target: &Target) -> Result<Prepared, Error> {
        prepare_raw(self, spec, target)
    }

    fn prepare_delete(&self, spec: &KeySpec, target: &Target) -> Result<PreparedDelete, Error> {
        let (id, identity) = spec.derive(self)?;
        let shard = target.key_field_condition(|| Ok(self.clone()))?;
        PreparedDelete::new(id, identity, spec.version_of(self)?, shard)
    }

    fn describe(&self, spec: &KeySpec) -> String {
        let parts: Vec<String> = spec
            .keys()
            .iter()
            .map(|k| match self.get(k.name()) {
                Ok(Some(v)) => match bson::Bson::try_from(v.to_raw_bson()) {
                    Ok(v) => format!("{}={v}", k.name()),
                    Err(_) => format!("{}=?", k.name()),
                },
                _ => format!("{}=None", k.name()),
            })
            .collect();
        parts.join(", ")
    }

    fn other_hash(&self, spec: &KeySpec) -> Option<String> {
        spec.hash(self, true).ok().map(|h| h.to_string())
    }

    fn changed_at(spec: &KeySpec) -> Option<&'static str> {
        spec.changed_at_field()
    }
}

/// What a guarded upsert of `doc` sends, keyed by `spec` (a dry run checks a document with it
/// without owning it).
pub(crate) fn prepare_raw(
    doc: &RawDocument,
    spec: &KeySpec,
    target: &Target,
) -> Result<Prepared, Error> {
    let (id, identity) = spec.derive(doc)?;
    let hash = spec.content_hash(doc)?;
    let version = spec.version_of(doc)?;
    let engine_owned = spec.changed_at_field();
    Prepared::of_untyped(id, identity, hash, version, doc, engine_owned, target)
}

/// What a handle gives every write of its documents: where they go, how they are keyed, and a
/// type's stored field names (see `stored::struct_fields`; none for a run-time document).
pub(crate) struct On<'a, T: Keyed> {
    pub(crate) target: &'a Target,
    pub(crate) spec: &'a T::Spec,
    pub(crate) fields: Option<&'static [&'static str]>,
    /// The handle's retry policy: every call's unless it sets its own.
    pub(crate) retry: RetryPolicy,
}

impl<T: Keyed> Clone for On<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Keyed> Copy for On<'_, T> {}
