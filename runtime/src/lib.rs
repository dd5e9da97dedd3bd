//! Runtime of [natural-key](https://docs.rs/natural-key): the id scheme, the canonical content
//! hash and the guarded MongoDB writes. Depend on the `natural-key` crate, which re-exports this
//! crate together with the derives; this crate exists so the proc-macro crate stays a thin
//! parser and everything that defines behaviour lives here, once.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod action;
mod change;
mod collection;
mod content;
mod deployment;
mod error;
mod key;
mod keyspec;
mod maintain;
pub mod metrics;
mod names;
mod op;
mod outcome;
mod raw;
mod retry;
mod rfc3339;
mod sha;
mod sizing;
mod stored;
mod traits;
mod upsertable;
mod write;

pub use action::{
    Adopt, Apply, Audit, Delete, DeleteMany, DeleteStream, Insert, InsertMany, InsertStream,
    OpenCollection, Prune, PruneTombstones, Rekey, Upsert, UpsertMany, UpsertStream,
};
pub use change::{Change, FieldPath, OpId, DEFAULT_RETAINED_OPERATIONS};
pub use collection::Collection;
pub use content::{canonical_hash, ContentHash, ParseContentHashError};
pub use deployment::{Deployment, Engine, Limits};
pub use error::{Error, ErrorChain, FieldNameProblem, KeyError};
pub use key::{
    compute_id, compute_identity, KeyPart, KeyTimestamp, KeyValue, KeyVersion, Scheme,
    MAX_TIMESTAMP_MS,
};
pub use maintain::adoption::{AdoptReport, Candidate};
pub use maintain::findings::{AuditReport, Finding};
pub use maintain::pruning::{PruneReport, SyncReport, DEFAULT_MAX_PRUNE_FRACTION};
pub use maintain::rekeying::RekeyOutcome;
pub use maintain::tombstones::TombstoneReport;
pub use maintain::DEFAULT_SAMPLE;
pub use names::{
    DELETED_FIELD, HASH_FIELD, IDEMPOTENCY_FIELD, IDENTITY_FIELD, LEGACY_IDS_FIELD, MOVED_TO_FIELD,
    OPS_FIELD, OPS_PRUNED_TO_FIELD, RESERVED_PREFIX, VERSION_FIELD, WRITE_FIELD,
};
pub use op::answer::classify;
pub use outcome::{
    ApplyOutcome, BatchError, BatchReport, DeleteOutcome, InsertOutcome, UpsertOutcome,
};
pub use retry::{RetryPolicy, DEFAULT_ATTEMPT_TIMEOUT};
pub use traits::{NaturalKey, RandomId};
pub use upsertable::{UpsertBuilder, Upsertable, WriteOutcome};
pub use write::batch::{DEFAULT_BATCH_SIZE, MAX_BATCH_BYTES};
pub use write::keyed::Keyed;
pub use write::mode::WriteMode;

/// Natural keys described at run time, for documents without a Rust type at hand (the
/// `natural-key` command line): a [`KeySpec`](spec::KeySpec) says which stored BSON fields
/// are the identity keys and which is the timestamp, derives what `#[derive(NaturalKey)]`
/// derives from the same fields, and opens a [`SpecCollection`](spec::SpecCollection), whose
/// writes are a typed collection's builders over BSON documents.
///
/// Its items live here, not at the crate root, as most programs never need them:
///
/// ```
/// use natural_key::spec::{KeyField, KeyKind, KeySpec};
/// use natural_key::Scheme;
/// let spec = KeySpec::new(Scheme::Default { namespace: "" }, "published_at")
///     .key(KeyField::new("slug", KeyKind::Str));
/// # let _ = spec;
/// ```
pub mod spec {
    pub use crate::action::{
        prune_tombstones, OpenSpecCollection, SpecAudit, SpecDelete, SpecPrune, SpecUpsert,
    };
    pub use crate::collection::SpecCollection;
    pub use crate::error::SpecError;
    pub use crate::keyspec::{KeyField, KeyKind, KeySpec, TimestampForm, UnknownName};
    pub use crate::rfc3339::{rfc3339_millis, Rfc3339Error};
}

pub use bson;
pub use mongodb;
pub use serde;
pub use ulid::Ulid;

/// Items generated code refers to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::content::{
        content_hash_v2, name_head, ContentHasher, V1Field, V1Hashable, V1Unhashable,
    };
    pub use crate::key::{check_timestamp, check_version, KeySink, Normalize, WriteKey};
    /// What `Indexes::index_models` returns (the name generated code uses).
    pub use crate::traits::IndexSpec as IndexModel;
    pub use crate::traits::{idempotency_index, identity_index, Indexes};
    pub use std::option::Option;
    pub use std::result::Result;
    pub use std::string::String;
    pub use std::vec::Vec;

    /// The v1 hash of a v2 type's value, from its v1 walk (`__write_content`); `None` when
    /// the walk cannot hash it.
    pub fn content_hash_v1<T: crate::NaturalKey + ?Sized>(doc: &T) -> Option<crate::ContentHash> {
        let mut h = crate::content::ContentHasher::new();
        doc.__write_content(&mut h).ok()?;
        Some(h.finish())
    }

    /// The `#[id]` field's value; only a `Ulid` is accepted.
    pub fn ulid_of(id: &ulid::Ulid) -> ulid::Ulid {
        *id
    }

    /// The text stored for an idempotency key (the joined scheme's text form).
    pub fn idempotency_text<T: crate::KeyPart + ?Sized>(
        field: &'static str,
        value: &T,
    ) -> Result<Option<String>, crate::KeyError> {
        crate::key::idempotency_text(field, value)
    }
}
