//! Runtime of [natural-key](https://docs.rs/natural-key): the id scheme, the canonical content
//! hash and the guarded MongoDB writes. Depend on the `natural-key` crate, which re-exports this
//! crate together with the derives; this crate exists so the proc-macro crate stays a thin
//! parser and everything that defines behaviour lives here, once.
#![warn(missing_docs)]

mod batch;
mod content;
mod error;
mod key;
mod retry;
mod traits;
mod write;

pub use batch::{
    insert_many, insert_stream, upsert_many, upsert_stream, BatchReport, InsertMany, InsertStream,
    UpsertMany, UpsertStream, DEFAULT_BATCH_SIZE, MAX_BATCH_BYTES,
};
pub use content::{canonical_hash, ContentHash, ParseContentHashError};
pub use error::{classify, Error, KeyError};
pub use key::{
    compute_id, compute_identity, KeyPart, KeyTimestamp, KeyValue, Scheme, MAX_TIMESTAMP_MS,
};
pub use retry::RetryPolicy;
pub use traits::{NaturalKey, RandomId};
pub use write::{
    ensure_indexes, Insert, Outcome, Upsert, WriteMode, HASH_FIELD, IDEMPOTENCY_FIELD,
    IDENTITY_FIELD, WRITE_FIELD,
};

pub use bson;
pub use mongodb;
pub use serde;
pub use ulid::Ulid;

/// Items generated code refers to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::content::ContentHasher;
    pub use crate::key::{check_timestamp, KeySink, Normalize, WriteKey};
    pub use crate::traits::Indexes;
    pub use crate::write::{idempotency_index, identity_index};
    pub use mongodb::IndexModel;
    pub use std::option::Option;
    pub use std::result::Result;
    pub use std::string::String;
    pub use std::vec::Vec;

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
