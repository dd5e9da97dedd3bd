//! The error types: [`KeyError`] for bad key input, [`Error`] for everything a write can hit.

use std::fmt;

use ulid::Ulid;

/// Why an id or identity could not be derived from a document's key fields.
///
/// Returned by [`NaturalKey::id`](crate::NaturalKey::id) before anything reaches the database:
/// when you see one, nothing was written.
///
/// ```
/// use natural_key_runtime::KeyError;
/// let e = KeyError::TimestampOutOfRange { field: "published_at", millis: -1 };
/// assert!(e.to_string().contains("published_at"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The `#[key(timestamp)]` value is outside what a ULID can hold (0 ..= 2^48-1 ms since the
    /// Unix epoch, i.e. 1970-01-01 to 10889-08-02). It is never wrapped or clamped.
    #[error(
        "timestamp key `{field}` is {millis} ms since the Unix epoch, outside the ULID range \
         0..=281474976710655 (1970-01-01T00:00:00Z to 10889-08-02T05:31:50.655Z); \
         fix the value, ids cannot represent it"
    )]
    TimestampOutOfRange {
        /// The Rust field name.
        field: &'static str,
        /// The offending value in Unix milliseconds.
        millis: i128,
    },
    /// A string key contains a NUL byte, which MongoDB-compatible engines (FerretDB, DocumentDB)
    /// refuse to store and which would make the key's text ambiguous.
    #[error("key `{field}` contains a NUL byte at byte {position}; remove it before writing")]
    NulByte {
        /// The Rust field name.
        field: &'static str,
        /// Byte offset of the first NUL in the value as given (before `lowercase`/`nfc`).
        position: usize,
    },
    /// A key value is longer than the id scheme's 32-bit length prefix allows.
    #[error("key `{field}` is {len} bytes long; the id scheme allows at most 4294967295")]
    TooLong {
        /// The Rust field name.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A required key (an idempotency key, say) is `None`.
    #[error("key `{field}` is None; this key must be present")]
    Missing {
        /// The Rust field name.
        field: &'static str,
    },
}

/// What went wrong in a natural-key operation.
///
/// Every variant says whether anything may have been written: errors raised before the write
/// command ([`Key`](Error::Key), [`Serialize`](Error::Serialize),
/// [`ImmutableKeyChanged`](Error::ImmutableKeyChanged)) guarantee that nothing was.
/// [`is_transient`](Error::is_transient) tells whether the same call is worth retrying.
///
/// ```
/// use natural_key_runtime::{Error, KeyError};
/// let e: Error = KeyError::Missing { field: "request_id" }.into();
/// assert!(!e.is_transient());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key fields could not produce an id; nothing was written.
    #[error(transparent)]
    Key(#[from] KeyError),

    /// A document without a Rust type does not hold its key as its
    /// [`KeySpec`](crate::spec::KeySpec) describes it (a key field missing or of another type,
    /// a timestamp that is not one); nothing was written.
    #[error("{0}")]
    KeyFields(SpecError),

    /// The document could not be serialized (for hashing or to BSON); nothing was written.
    #[error("cannot serialize `{type_name}`: {message}")]
    Serialize {
        /// The Rust type being serialized.
        type_name: &'static str,
        /// What the serializer said.
        message: String,
    },

    /// The stored document with this identity has a different `_id` than the one derived now:
    /// its timestamp key was edited. Writing would fork the document, so nothing was written.
    #[error(
        "the timestamp key of the document with key {key} in collection `{collection}` changed: \
         stored _id {stored_id} != derived _id {derived_id}. The timestamp key is frozen for the \
         document's life (the id is derived from it); restore its original value, or, if the stored \
         one is wrong, move the document with `Collection::rekey(&corrected)`. Nothing was \
         written."
    )]
    ImmutableKeyChanged {
        /// `database.collection`.
        collection: String,
        /// The `_id` found in the database (as stored).
        stored_id: String,
        /// The id derived from the document now.
        derived_id: Ulid,
        /// The identity key values, e.g. `slug="hello", lang="en"`.
        key: String,
    },

    /// The stored document kept changing under us (other writers) for every attempt the
    /// optimistic check allows; retrying later is safe.
    #[error(
        "document {id} in `{collection}` changed concurrently {attempts} times in a row; \
         nothing was lost, retry later"
    )]
    Contention {
        /// `database.collection`.
        collection: String,
        /// The document's id.
        id: Ulid,
        /// How many read-decide-write rounds were tried.
        attempts: u32,
    },

    /// The server refused one document of a batch write for a reason other than a duplicate
    /// key (e.g. a value the engine cannot store).
    #[error("the server refused document {id} in `{collection}` (code {code}): {message}")]
    WriteFailed {
        /// `database.collection`.
        collection: String,
        /// The document's id.
        id: Ulid,
        /// The server's error code.
        code: i32,
        /// The server's message.
        message: String,
    },

    /// The document violates a unique index of the collection that is not natural-key's own
    /// (say `{email: 1}`): another document already holds this value. Retrying cannot help;
    /// nothing was written for this document.
    #[error(
        "document {id} in `{collection}` violates the unique index `{index}`: {key} is already \
         taken by another document; change the value or the index. Nothing was written for it."
    )]
    UniqueIndexViolation {
        /// `database.collection`.
        collection: String,
        /// The document's id.
        id: Ulid,
        /// The index name (or its key pattern, where the engine names no index).
        index: String,
        /// The duplicated key value as the server reported it, e.g. `{ email: "a@example.com" }`;
        /// [`UNNAMED_KEY`](Error::UNNAMED_KEY) where the engine names the index but not the value
        /// (FerretDB 2 / DocumentDB).
        key: String,
    },

    /// An event's `_id` or `#[idempotency_key]` is already stored for an event with another
    /// payload: the id or key of one request was reused for a different one (say the same
    /// request id for another amount). Not transient — the same call is refused again; nothing
    /// was written for this event. The same payload again is
    /// [`InsertOutcome::AlreadyApplied`](crate::InsertOutcome::AlreadyApplied).
    ///
    /// The payload is every stored field of the event but `_id`, the `#[id]` and
    /// `#[idempotency_key]` fields, natural-key's own `_nk_*` fields and the
    /// `#[natural_key(skip_hash)]` fields, compared under the content hash's rules (an `int32`
    /// equals an `int64` of the same value, field order does not matter); under the same `_id`
    /// the idempotency keys, where both events have one, must match too (docs/crate.md, "The
    /// same id, another payload").
    ///
    /// ```
    /// use natural_key_runtime::{Error, Ulid};
    /// let e = Error::IdempotencyKeyReused {
    ///     collection: "shop.payments".into(),
    ///     id: Ulid::nil(),
    ///     key: Some("req-1".into()),
    ///     attempted: Ulid::nil(),
    ///     fields: vec!["amount_cents".into()],
    /// };
    /// assert!(!e.is_transient());
    /// assert!(e.to_string().contains("amount_cents"));
    /// assert_eq!(e.kind(), "idempotency_key_reused");
    /// ```
    #[error(
        "event {attempted} for `{collection}` reuses the id or idempotency key of the stored \
         event {id}{key}, whose payload differs in {fields}. An id and an idempotency key name \
         one request: retry it with the payload first sent, and give a different request a new \
         id and key. Nothing was written for this event.",
        key = key_text(key.as_deref()),
        fields = fields.join(", ")
    )]
    IdempotencyKeyReused {
        /// `database.collection`.
        collection: String,
        /// The stored event's id.
        id: Ulid,
        /// The stored event's idempotency key, if it has one.
        key: Option<String>,
        /// The id of the event refused: the stored one when its `_id` was reused, another
        /// when only its key was.
        attempted: Ulid,
        /// What differs: the stored names of the payload fields whose values differ or that
        /// only one of the two events holds, in name order; `_nk_idempotency` when the same
        /// `_id` carries another idempotency key.
        fields: Vec<String>,
    },

    /// The document's BSON is larger than the engine stores (16 MiB on MongoDB); it was not sent.
    #[error(
        "document {id} in `{collection}` is {bytes} bytes of BSON, over the engine's limit of \
         {limit} bytes; split it or store the large part elsewhere (GridFS). Nothing was sent."
    )]
    DocumentTooLarge {
        /// `database.collection`.
        collection: String,
        /// The document's id.
        id: Ulid,
        /// Its size as stored (with natural-key's fields).
        bytes: usize,
        /// The engine's `maxBsonObjectSize`.
        limit: usize,
    },

    /// A top-level field name of the serialized document cannot be written as a field of its
    /// own (see [`FieldNameProblem`]). Names that come from data — the keys of a
    /// `#[serde(flatten)]` map, say — are data, never a path, an operator or one of
    /// natural-key's own fields. Not transient; nothing was sent for this document.
    #[error(
        "document {id} for `{collection}` has a top-level field named {field:?}, which \
         {problem}; rename it or nest such keys under a field of their own (field names inside \
         a value are stored as they are). Nothing was sent for this document."
    )]
    InvalidFieldName {
        /// `database.collection`.
        collection: String,
        /// The document's id.
        id: Ulid,
        /// The offending name, as serialized.
        field: String,
        /// What is wrong with it.
        problem: FieldNameProblem,
    },

    /// An index natural-key needs exists under its name with other options; it was not
    /// changed. Drop it (or rename yours) and open the collection again.
    #[error(
        "index `{name}` on `{collection}` exists with {found}, but natural-key needs {wanted}; \
         drop that index (or rename yours) and open the collection again"
    )]
    IndexConflict {
        /// `database.collection`.
        collection: String,
        /// The index name.
        name: String,
        /// The existing index's specification.
        found: String,
        /// What natural-key would create.
        wanted: String,
    },

    /// The engine would not build a unique index natural-key needs, in any form it knows
    /// (sparse, partial, plain); nothing was written. Azure Cosmos DB builds unique indexes only
    /// on an empty collection, and on a sharded (partitioned) one only with the shard key in
    /// front; an engine may also refuse because stored documents already share a value.
    #[error(
        "cannot create the unique index `{name}` on `{field}` in `{collection}`: the engine said \
         (code {code}) {message}. natural-key needs it to refuse forks and duplicates. Open the \
         collection with natural-key before its first document is written (Azure Cosmos DB \
         builds unique indexes only on empty collections), or copy the documents into a new \
         collection opened so; if documents share a value, merge them first (`adopt`, on an \
         engine that builds the index, or by hand)"
    )]
    IndexUnavailable {
        /// `database.collection`.
        collection: String,
        /// The index natural-key creates.
        name: String,
        /// Its field.
        field: String,
        /// The engine's code for the last refusal.
        code: i32,
        /// What the engine said.
        message: String,
    },

    /// The collection is sharded on a key under which the engine cannot enforce a unique index
    /// natural-key relies on, so two racing writers could store one document twice (a fork
    /// of a [`NaturalKey`](crate::NaturalKey) document, an event sent twice). A sharded
    /// engine enforces a unique index only among the documents of one shard-key value:
    /// `_nk_identity` must be the shard key of a `NaturalKey` type's collection, and an
    /// event type's must be `_id` (or `_nk_idempotency` when it has an idempotency key).
    /// Refused by [`Collection::open`](crate::Collection::open) before anything is written.
    ///
    /// ```
    /// let e = natural_key_runtime::Error::ShardKeyUnsupported {
    ///     collection: "blog.posts".into(),
    ///     shard_key: "not _nk_identity (a read by it goes to 8 shards)".into(),
    ///     needed: "_nk_identity".into(),
    /// };
    /// assert!(!e.is_transient());
    /// assert!(e.to_string().contains("Shard it on `_nk_identity`"));
    /// ```
    #[error(
        "`{collection}` is sharded on {shard_key}: the engine enforces a unique index only \
         among documents of one shard-key value, so natural-key's unique index on `{needed}` \
         would not refuse a document stored twice by racing writers. Shard it on `{needed}` \
         (hashed), or use an unsharded collection. Nothing was written."
    )]
    ShardKeyUnsupported {
        /// `database.collection`.
        collection: String,
        /// What the engine's plans showed of the shard key.
        shard_key: String,
        /// The field the collection must be sharded on.
        needed: String,
    },

    /// The engine refused a single-document write because its filter lacks the collection's
    /// shard key: DocumentDB on Citus answers 50856066 ("must target a single shard", a
    /// PostgreSQL SQLSTATE packed as a code) or 61 `ShardKeyNotFound`; Cosmos DB likewise wants
    /// the partition key. natural-key was not told the collection is sharded. Nothing was
    /// written by the refused command. Not transient: open the collection with
    /// [`OpenCollection::sharded(true)`](crate::OpenCollection::sharded) (write filters then
    /// carry `_nk_identity`, which must be the shard key).
    #[error(
        "the engine refused a write without the shard key (code {code}): {message}. The \
         collection is sharded or partitioned and natural-key was not told: shard it on \
         `_nk_identity` and open it with `.sharded(true)`. Nothing was written by that command."
    )]
    ShardKeyMissing {
        /// The engine's code (50856066 on DocumentDB/Citus, 61 `ShardKeyNotFound`).
        code: i32,
        /// What the engine said.
        message: String,
    },

    /// An attempt did not finish within the retry policy's attempt timeout (a stalled engine, a
    /// half-open connection). The write may or may not have been applied; retrying converges.
    #[error("`{operation}` on `{collection}` did not finish within {after:?}; safe to retry")]
    Timeout {
        /// `database.collection`.
        collection: String,
        /// What was running (`upsert`, `upsert_many`, `insert`, ...).
        operation: &'static str,
        /// The attempt timeout that elapsed.
        after: std::time::Duration,
    },

    /// [`Collection::rekey`](crate::Collection::rekey) would move a document to an id that
    /// holds a document of another identity; nothing was written.
    #[error(
        "cannot rekey into {id} in `{collection}`: that id holds a document of another identity \
         ({identity}); nothing was written"
    )]
    RekeyTargetTaken {
        /// `database.collection`.
        collection: String,
        /// The derived id that is taken.
        id: Ulid,
        /// The `_nk_identity` stored there (`none` when it has none).
        identity: String,
    },

    /// A pruning ingest wrote its input, but some documents failed: nothing was pruned, as
    /// the input did not fully succeed. Fix those documents and run it again.
    #[error(
        "nothing was pruned from `{collection}`: {failed} input document(s) failed to write \
         (see the report's failures); a prune runs only after the whole input succeeded"
    )]
    PruneSkipped {
        /// `database.collection`.
        collection: String,
        /// How many input documents failed.
        failed: usize,
    },

    /// A pruning ingest would delete more of the stored natural-key documents than allowed;
    /// nothing was deleted. Check the input is the whole source, then raise
    /// `max_fraction` or `force()`.
    #[error(
        "refusing to prune {would_delete} of {stored} natural-key documents from \
         `{collection}` (more than {max_fraction} of them); is the input the whole source? \
         Raise `max_fraction` or use `force()`. Nothing was deleted."
    )]
    PruneRefused {
        /// `database.collection`.
        collection: String,
        /// How many it would delete.
        would_delete: u64,
        /// How many natural-key documents are stored.
        stored: u64,
        /// The allowed fraction.
        max_fraction: f64,
    },

    /// A maintenance step (adopt, rekey, prune) found a document changed or gone since it read
    /// it, and left it as it is. Run the operation again: it reads afresh.
    #[error(
        "document {id} in `{collection}` changed or vanished since it was read; it was left as \
         it is: run the operation again"
    )]
    ConcurrentChange {
        /// `database.collection`.
        collection: String,
        /// The document's id (the derived id it was being moved to, for a move).
        id: String,
    },

    /// [`Collection::apply`](crate::Collection::apply) found no document with the id: a
    /// relative update changes a stored document and never creates one. Upsert the document
    /// first. Not transient; nothing was written.
    ///
    /// ```
    /// let e = natural_key_runtime::Error::DocumentNotFound {
    ///     collection: "shop.items".into(),
    ///     id: natural_key_runtime::Ulid::nil(),
    /// };
    /// assert!(!e.is_transient());
    /// ```
    #[error(
        "no document {id} in `{collection}`: a relative update changes a stored document and \
         never creates one; upsert it first. Nothing was written."
    )]
    DocumentNotFound {
        /// `database.collection`.
        collection: String,
        /// The id asked for.
        id: Ulid,
    },

    /// Document `id` records the operation with another change or time: one operation id names
    /// one change (the relative-update twin of [`IdempotencyKeyReused`](Error::IdempotencyKeyReused)).
    /// The recorded one stays; nothing was written. Give a different change its own operation
    /// id. Not transient.
    ///
    /// ```
    /// let e = natural_key_runtime::Error::OperationReused {
    ///     collection: "shop.items".into(),
    ///     id: natural_key_runtime::Ulid::nil(),
    ///     op: "order-1042".into(),
    /// };
    /// assert!(e.to_string().contains("order-1042"));
    /// ```
    #[error(
        "operation {op:?} is recorded on document {id} in `{collection}` with another change \
         or time: one operation id names one change; give a different change its own id. \
         Nothing was written."
    )]
    OperationReused {
        /// `database.collection`.
        collection: String,
        /// The document.
        id: Ulid,
        /// The operation key.
        op: String,
    },

    /// The operation's time is at or before the newest one pruned from document `id`'s record
    /// of applied operations, so whether it was applied can no longer be told, and it is refused rather than risk applying it
    /// twice. Nothing was written by this call (where an attempt of it may have been,
    /// [`OperationOutcomeUnknown`](Error::OperationOutcomeUnknown) says so instead). Keep more with [`Apply::retain`](crate::Apply::retain), or
    /// retry sooner. Not transient.
    #[error(
        "operation {op:?} at {at_ms} ms is not newer than the operations pruned from document \
         {id}'s record in `{collection}` (up to {pruned_to_ms} ms): whether it was applied \
         cannot be told, so it is refused. Nothing was written; retain more operations \
         (Apply::retain) or retry sooner."
    )]
    OperationExpired {
        /// `database.collection`.
        collection: String,
        /// The document.
        id: Ulid,
        /// The operation key.
        op: String,
        /// The operation's time.
        at_ms: i64,
        /// The newest time pruned from the record.
        pruned_to_ms: i64,
    },

    /// Like [`OperationExpired`](Error::OperationExpired), the operation is not newer than
    /// what was pruned from document `id`'s record — but an earlier attempt of this same call
    /// may have applied it (its reply was lost, or it timed out), and the record was pruned
    /// past it since. Whether its change is stored can no longer be told: look at the
    /// document before applying the change another way. Not transient: the same call cannot
    /// tell either. Keep more with [`Apply::retain`](crate::Apply::retain).
    #[error(
        "operation {op:?} at {at_ms} ms on document {id} in `{collection}`: an earlier attempt \
         of this call may have applied it (its reply was lost), and the record was pruned past \
         it since (up to {pruned_to_ms} ms), so whether its change is stored cannot be told. \
         Check the document before sending the change again; retain more operations \
         (Apply::retain)."
    )]
    OperationOutcomeUnknown {
        /// `database.collection`.
        collection: String,
        /// The document.
        id: Ulid,
        /// The operation key.
        op: String,
        /// The operation's time.
        at_ms: i64,
        /// The newest time pruned from the record.
        pruned_to_ms: i64,
    },

    /// A relative update or its operation id that cannot be applied as given: a path into a
    /// field not marked `#[natural_key(relative)]` or one of natural-key's own, a segment that
    /// would read as a path or an operator, the same path twice, an operation key that is
    /// empty, too long or holds a NUL, a time out of range, or `WriteMode::Replace` on a type
    /// with relative fields. Not transient; nothing was sent.
    #[error("invalid relative update for `{collection}`: {message}. Nothing was sent.")]
    InvalidChange {
        /// `database.collection`.
        collection: String,
        /// What is wrong, and what to do.
        message: String,
    },

    /// A stored document has a shape natural-key does not expect (e.g. a non-string `_id`).
    #[error("unexpected stored document in `{collection}`: {message}")]
    UnexpectedDocument {
        /// `database.collection`.
        collection: String,
        /// What is wrong with it.
        message: String,
    },

    /// A failure worth retrying: network error, timeout, server selection, pool cleared,
    /// primary stepped down. The write may or may not have been applied; with natural-key a
    /// retry of the same call converges either way.
    #[error("transient database error (safe to retry)")]
    Transient(#[source] mongodb::error::Error),

    /// The engine is busy or could not tell whether it applied a write — Azure Cosmos DB's
    /// request-rate throttle (16500) or the end of its server-side retries (50) — for a whole
    /// command or for some statements of one, and the call's [`RetryPolicy`](crate::RetryPolicy)
    /// allowed no further wait. Safe to retry: what was applied is found by the next call.
    #[error(
        "`{collection}` is throttled by the engine (code {code}): {message}; retry later, or \
         give the call a RetryPolicy (it waits as long as the engine asks)"
    )]
    Throttled {
        /// `database.collection`.
        collection: String,
        /// The engine's code (16500 or 50).
        code: i32,
        /// What the engine said (Cosmos DB's carries `RetryAfterMs=N`).
        message: String,
    },

    /// A database error that retrying will not fix (authentication, bad command, ...).
    #[error("database error")]
    Database(#[source] mongodb::error::Error),
}

impl Error {
    /// `true` when retrying the same call may succeed (network trouble, an election,
    /// contention). Key, serialization and [`ImmutableKeyChanged`](Error::ImmutableKeyChanged)
    /// errors are never transient.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Transient(_)
                | Error::Contention { .. }
                | Error::Timeout { .. }
                | Error::ConcurrentChange { .. }
                | Error::Throttled { .. }
        )
    }

    /// How long the engine asked to wait before the next attempt (`RetryAfterMs=N` in Azure
    /// Cosmos DB's throttling message), if it did. A [`RetryPolicy`](crate::RetryPolicy) waits
    /// at least this long before retrying.
    ///
    /// ```
    /// use natural_key_runtime::Error;
    /// let e = Error::Throttled {
    ///     collection: "db.posts".into(),
    ///     code: 16500,
    ///     message: "Request rate is large. RetryAfterMs=120, Details='...'".into(),
    /// };
    /// assert_eq!(e.retry_after(), Some(std::time::Duration::from_millis(120)));
    /// assert!(e.is_transient());
    /// ```
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Throttled { message, .. } => retry_after_in(message),
            Error::Transient(e) => retry_after_in(&e.to_string()),
            _ => None,
        }
    }

    /// The `key` of an [`Error::UniqueIndexViolation`] whose engine named the index but not
    /// the duplicated value (FerretDB 2 on DocumentDB says only "Duplicate key violation on the
    /// requested collection: Index 'email_1'"): the document's own value of that index.
    ///
    /// ```
    /// assert_eq!(natural_key::Error::UNNAMED_KEY, "its value");
    /// ```
    pub const UNNAMED_KEY: &'static str = "its value";

    /// A short name of the variant, stable across releases: the `kind` label of the
    /// counters of the `metrics` module, and handy in logs. `key`, `key_fields`, `serialize`,
    /// `immutable_key_changed`, `contention`, `write_failed`, `unique_index_violation`,
    /// `idempotency_key_reused`, `document_too_large`, `invalid_field_name`, `index_conflict`,
    /// `index_unavailable`, `shard_key_unsupported`, `shard_key_missing`, `timeout`,
    /// `rekey_target_taken`, `prune_skipped`, `prune_refused`, `concurrent_change`,
    /// `unexpected_document`, `document_not_found`, `operation_reused`, `operation_expired`,
    /// `operation_outcome_unknown`,
    /// `invalid_change`, `transient`, `throttled`, `database`.
    ///
    /// ```
    /// use natural_key_runtime::{Error, KeyError};
    /// let e: Error = KeyError::Missing { field: "request_id" }.into();
    /// assert_eq!(e.kind(), "key");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Key(_) => "key",
            Error::KeyFields(_) => "key_fields",
            Error::Serialize { .. } => "serialize",
            Error::ImmutableKeyChanged { .. } => "immutable_key_changed",
            Error::Contention { .. } => "contention",
            Error::WriteFailed { .. } => "write_failed",
            Error::UniqueIndexViolation { .. } => "unique_index_violation",
            Error::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Error::DocumentTooLarge { .. } => "document_too_large",
            Error::InvalidFieldName { .. } => "invalid_field_name",
            Error::IndexConflict { .. } => "index_conflict",
            Error::IndexUnavailable { .. } => "index_unavailable",
            Error::ShardKeyUnsupported { .. } => "shard_key_unsupported",
            Error::ShardKeyMissing { .. } => "shard_key_missing",
            Error::Timeout { .. } => "timeout",
            Error::RekeyTargetTaken { .. } => "rekey_target_taken",
            Error::PruneSkipped { .. } => "prune_skipped",
            Error::PruneRefused { .. } => "prune_refused",
            Error::ConcurrentChange { .. } => "concurrent_change",
            Error::UnexpectedDocument { .. } => "unexpected_document",
            Error::DocumentNotFound { .. } => "document_not_found",
            Error::OperationReused { .. } => "operation_reused",
            Error::OperationExpired { .. } => "operation_expired",
            Error::OperationOutcomeUnknown { .. } => "operation_outcome_unknown",
            Error::InvalidChange { .. } => "invalid_change",
            Error::Transient(_) => "transient",
            Error::Throttled { .. } => "throttled",
            Error::Database(_) => "database",
        }
    }

    /// The engine refused work on `namespace` as busy: a whole command ([`throttle`]) or
    /// statements inside a batch's reply.
    pub(crate) fn throttled(namespace: &str, code: i32, message: String) -> Self {
        Error::Throttled {
            collection: namespace.to_string(),
            code,
            message,
        }
    }

    pub(crate) fn serialize<T: ?Sized>(message: impl fmt::Display) -> Self {
        Error::Serialize {
            type_name: std::any::type_name::<T>(),
            message: message.to_string(),
        }
    }
}

impl From<SpecError> for Error {
    /// [`Error::Key`] for a key whose values give no id, [`Error::KeyFields`] otherwise.
    fn from(e: SpecError) -> Self {
        match e {
            SpecError::Key(k) => Error::Key(k),
            other => Error::KeyFields(other),
        }
    }
}

/// ` (idempotency key "k")` for a message, or nothing for an event without one.
fn key_text(key: Option<&str>) -> String {
    key.map(|k| format!(" (idempotency key {k:?})"))
        .unwrap_or_default()
}

/// Why a stored document gives no id under a [`KeySpec`](crate::spec::KeySpec). An audit counts such a document as
/// unreadable and reports the first message.
///
/// ```
/// use natural_key_runtime::spec::SpecError;
/// let e = SpecError::WrongType { field: "lang", expected: "a string", found: "int32" };
/// assert_eq!(e.to_string(), "field `lang` is int32, expected a string");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A key or timestamp field is absent (or `null` for a key not marked optional).
    #[error("field `{field}` is missing")]
    Missing {
        /// The stored field name.
        field: &'static str,
    },
    /// A field holds another BSON type than its spec says.
    #[error("field `{field}` is {found}, expected {expected}")]
    WrongType {
        /// The stored field name.
        field: &'static str,
        /// What the spec reads there.
        expected: &'static str,
        /// The BSON type found (or what is wrong with the value).
        found: &'static str,
    },
    /// The timestamp's text or parts are not an instant.
    #[error("timestamp field `{field}`: {message}")]
    BadTimestamp {
        /// The stored field name.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The spec has no identity key field: every document would share one identity
    /// (docs/id-scheme.md, "Key fields").
    #[error(
        "the key spec names no identity key field: name the fields that say which document this is"
    )]
    NoIdentityKey,
    /// The values give no id (a NUL in a text key, a timestamp outside the ULID range).
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Why a top-level field name cannot be written (see [`Error::InvalidFieldName`]).
///
/// ```
/// use natural_key_runtime::FieldNameProblem;
/// assert!(FieldNameProblem::Dotted.to_string().contains("path"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldNameProblem {
    /// Contains `.`: an update's `$set` would read it as a path and write into a nested field.
    #[error("contains `.`, which an update reads as a path into another field")]
    Dotted,
    /// Starts with `$`: engines read it as an operator, or refuse it.
    #[error("starts with `$`, which engines read as an operator")]
    DollarPrefixed,
    /// The empty name, which updates cannot address.
    #[error("is empty, which an update cannot address")]
    Empty,
    /// One of natural-key's own names: `_id` where the id is derived, or any `_nk_` name.
    #[error("is natural-key's own (`_id` of a derived id, or a name starting with `_nk_`)")]
    Reserved,
    /// The same name twice, as a flattened map key equal to a field's name produces.
    #[error("appears twice in the document (a flattened map key equal to a field's name?)")]
    Repeated,
}

/// Displays an error followed by each of its sources, `outer: inner: innermost`.
///
/// [`Error`]'s `Display` names what failed and leaves why to its
/// [`source`](std::error::Error::source) (a [`BatchError`](crate::BatchError) says where a batch stopped; the
/// driver's error under it says why), as the standard library's convention asks. Logs, a CLI's
/// message and a failing test want the whole story on one line: this is that line, for any
/// error.
///
/// ```
/// use natural_key::ErrorChain;
///
/// let e = natural_key::bson::oid::ObjectId::parse_str("not hex").unwrap_err();
/// assert_eq!(ErrorChain(&e).to_string(), e.to_string());
///
/// #[derive(Debug)]
/// struct Stopped(std::io::Error);
/// impl std::fmt::Display for Stopped {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("batch write stopped")
///     }
/// }
/// impl std::error::Error for Stopped {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
/// let e = Stopped(std::io::Error::other("connection reset"));
/// assert_eq!(ErrorChain(&e).to_string(), "batch write stopped: connection reset");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ErrorChain<'a>(pub &'a dyn std::error::Error);

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

/// Server error codes after which the same command may succeed (the retryable-reads/writes
/// specifications' lists: not primary, node recovering or shutting down, host unreachable,
/// network timeout, socket exception, exceeded time limit), and the engines' [`THROTTLE_CODES`].
const TRANSIENT_CODES: &[i32] = &[
    11600,
    11602,
    10107,
    13435,
    13436,
    10058,
    189,
    91,
    7,
    6,
    89,
    9001,
    134,
    262,
    147,
    16500,
    112,
    148,
    PG_DEADLOCK_DETECTED,
    PG_SERIALIZATION_FAILURE,
    PG_QUERY_CANCELED,
    PG_CONNECTION_FAILURE,
    PG_SERVER_GOING_DOWN[0],
    PG_SERVER_GOING_DOWN[1],
    PG_SERVER_GOING_DOWN[2],
    50,
    11601,
    CURSOR_NOT_FOUND,
];

/// A PostgreSQL SQLSTATE as DocumentDB passes it through as an error code: PostgreSQL's own
/// encoding of the five characters, six bits each (`MAKE_SQLSTATE` in its `elog.h`).
const fn sqlstate(s: &[u8; 5]) -> i32 {
    let mut code = 0;
    let mut i = 0;
    while i < 5 {
        code |= ((s[i].wrapping_sub(b'0') & 0x3f) as i32) << (6 * i);
        i += 1;
    }
    code
}

/// `40P01` deadlock_detected: PostgreSQL aborted one of two transactions waiting on each
/// other (concurrent inserts into one unique index can), rolling its statement back.
const PG_DEADLOCK_DETECTED: i32 = sqlstate(b"40P01");
/// `40001` serialization_failure: the statement's transaction was rolled back.
const PG_SERIALIZATION_FAILURE: i32 = sqlstate(b"40001");
/// `57014` query_canceled: on Citus, one side of a distributed lock wait cancelled ("canceling
/// statement due to user request", `while checking exclusion constraint`), as racing writers
/// on one unique index meet across shards; the statement was rolled back.
const PG_QUERY_CANCELED: i32 = sqlstate(b"57014");
/// `08006` connection_failure: Citus lost the connection to a worker under a statement (the
/// worker killed or gone); whether a commit reached it is not known.
const PG_CONNECTION_FAILURE: i32 = sqlstate(b"08006");
/// `57P01` admin_shutdown, `57P02` crash_shutdown, `57P03` cannot_connect_now: the server
/// under the statement is stopping, crashed or not up yet. Seen per document of a relative
/// update as 16908741 (`57P01`) "terminating connection due to unexpected postmaster exit", a
/// Citus node killed mid-call (tests/engine_faults.rs); never a refusal of the data.
const PG_SERVER_GOING_DOWN: [i32; 3] = [sqlstate(b"57P01"), sqlstate(b"57P02"), sqlstate(b"57P03")];

/// DocumentDB on Citus refuses an `{upsert: true}` or `{multi: false}` update (and a delete)
/// whose filter lacks the shard key with `22023` invalid_parameter_value, a code it uses for
/// many other refusals too: its message tells.
const PG_INVALID_PARAMETER: i32 = sqlstate(b"22023");
/// MongoDB's 61 `ShardKeyNotFound` (a `findAndModify` on DocumentDB/Citus without the shard
/// key, and MongoDB's own for such writes).
const SHARD_KEY_NOT_FOUND: i32 = 61;

/// Whether the engine refused a write because its filter lacks the shard key
/// ([`Error::ShardKeyMissing`]).
pub(crate) fn shard_key_missing(code: i32, message: &str) -> bool {
    code == SHARD_KEY_NOT_FOUND
        || code == PG_INVALID_PARAMETER && message.contains("target a single shard")
}

/// Codes with which a managed engine refuses a command, or some statements of one, because it
/// is busy, having applied none of them: the send loop waits as asked and sends them again.
/// - 16500 `TooManyRequests` (`RequestRateTooLarge`): Azure Cosmos DB for MongoDB (RU), request
///   units exhausted; the message carries `RetryAfterMs=N` and says no changes were made. Its
///   bulk writes may apply some statements and refuse the rest with 16500 (Microsoft Learn,
///   "Troubleshoot common errors in Azure Cosmos DB for MongoDB", "Prevent rate-limiting
///   errors").
/// - 112 `WriteConflict` and 148 "Insufficient resources to run query": Amazon DocumentDB 8.0
///   (developer guide, "Error codes").
/// - PostgreSQL's transaction rollbacks under FerretDB 2 / DocumentDB (and so Azure
///   DocumentDB), which passes their SQLSTATE through as the code of a write error:
///   16908292 "deadlock detected" (`40P01`; seen with 4 event writers through one unique index)
///   and 16777220 (`40001`); on Citus also 67371461 (`57014`, a distributed lock wait
///   cancelled: seen with 16 writers racing one identity). Nothing of the statement stayed; no
///   wait is named.
pub(crate) const THROTTLE_CODES: &[i32] = &[
    16500,
    112,
    148,
    PG_DEADLOCK_DETECTED,
    PG_SERIALIZATION_FAILURE,
    PG_QUERY_CANCELED,
];

/// Citus' distributed deadlock detection cancelling one of two transactions that wait on each
/// other across nodes, as a whole command's code 1: "canceling the transaction since it was
/// involved in a distributed deadlock" (the cluster pass of tests/convergence.rs, events from
/// 4 writers). The transaction was rolled back, like PostgreSQL's own `40P01`.
const DISTRIBUTED_DEADLOCK: &str = "involved in a distributed deadlock";

/// Whether the engine refused a command or statement as busy, having applied none of it: a
/// [`THROTTLE_CODES`] code, or Citus' distributed deadlock ([`DISTRIBUTED_DEADLOCK`]).
pub(crate) fn refused_as_busy(code: i32, message: &str) -> bool {
    THROTTLE_CODES.contains(&code)
        || code == INTERNAL_ERROR && message.contains(DISTRIBUTED_DEADLOCK)
}

/// The label with which MongoDB 8.2+ (its ingress request rate limiter) and Atlas (load
/// shedding) reject a command under overload, e.g. 463 `IngressOperationRateLimitExceeded`
/// (MongoDB's client-backpressure specification; Atlas, "Handle Overload Errors from Load
/// Shedding"). Alone it does not say whether the command ran.
const OVERLOADED: &str = "SystemOverloadedError";
/// Whether the engine answered `e` under overload ([`OVERLOADED`]), run or not.
pub(crate) fn overloaded(e: &mongodb::error::Error) -> bool {
    server_code(e).is_some() && e.contains_label(OVERLOADED)
}

/// Labels beside [`OVERLOADED`] that say the command was not run: `RetryableError` ("the
/// operation was not executed") and `NoWritesPerformed` ("rejected before performing any
/// writes").
const NOT_RUN: [&str; 2] = ["RetryableError", "NoWritesPerformed"];

/// The engine refused a command on `namespace` as busy, having run none of it: a throttle
/// code ([`THROTTLE_CODES`]) or an overload error labelled not run; for a `rerunnable`
/// command (a `find`, which changes nothing if it ran), any overload error. The
/// [`Error::Throttled`] to wait on and, if the policy gives up, to report. Only the engine's
/// answer counts: the driver puts the same labels on a connection it could not open (one to a
/// silent engine, say), which is a network error, transient, not the engine asking to wait.
pub(crate) fn throttle(
    namespace: &str,
    e: &mongodb::error::Error,
    rerunnable: bool,
) -> Option<Error> {
    let code = server_code(e)?;
    let busy = refused_as_busy(code, &e.to_string())
        || e.contains_label(OVERLOADED)
            && (rerunnable || NOT_RUN.iter().any(|l| e.contains_label(l)));
    busy.then(|| Error::throttled(namespace, code, e.to_string()))
}

/// Codes after which a write may or may not have been applied: its writer decides from the
/// next read, as after a lost reply (every natural-key write stamps its token).
/// - 50 `ExceededTimeLimit`: Cosmos DB's server-side retry of a throttled request gave up after
///   60 s; "retrying may result in a duplicate write" (same pages) — not with natural-key.
/// - 11601 "The operation was interrupted": Amazon DocumentDB 8.0 (developer guide, "Error
///   codes"), after a failover or a killed operation.
/// - 100663808 (`08006`, connection failure): DocumentDB on Citus, per document of a write,
///   when a worker is killed under it; a multi-shard write is a two-phase commit, and what
///   the coordinator had prepared on the worker may yet commit (Citus recovers prepared
///   transactions after the worker is back).
/// - 16908741 and its neighbours (`57P01`..`57P03`, [`PG_SERVER_GOING_DOWN`]): the server
///   stopped under the statement; whether its transaction committed is not known.
pub(crate) const UNKNOWN_OUTCOME_CODES: &[i32] = &[
    50,
    11601,
    PG_CONNECTION_FAILURE,
    PG_SERVER_GOING_DOWN[0],
    PG_SERVER_GOING_DOWN[1],
    PG_SERVER_GOING_DOWN[2],
];

/// What FerretDB says, as code 1 `InternalError`, when the storage under it fails, restarts
/// or is not up yet: it passes PostgreSQL's (or its connection pool's) failure through and
/// does not retry. Observed on FerretDB 2.5 / DocumentDB with PostgreSQL SIGKILLed and
/// restarted (../shared/engines/documentdb, "How it answered", and a probe of 4,600 inserts
/// across a kill: "terminating connection ...", then "failed to connect to ..." until it was
/// back); the others are PostgreSQL's
/// own messages for a server starting, stopping or recovering. Code 1 alone decides nothing:
/// the same engines answer it for a unique index built over duplicates, which is permanent.
const ENGINE_FAILURES: &[&str] = &[
    "terminating connection due to unexpected postmaster exit",
    "unexpected EOF",
    "the database system is not yet accepting connections",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "terminating connection due to administrator command",
    // FerretDB's pool, while PostgreSQL is down: "failed to connect to `user=postgres
    // database=postgres`: ... dial tcp 127.0.0.1:PORT: connect: connection refused".
    "failed to connect to",
    // Citus, on the coordinator, when a worker is killed, restarting or gone ("connection to
    // the remote node postgres@127.0.0.1:PORT failed with the following error: Connection
    // refused"; "failure on connection marked as essential: 127.0.0.1:PORT"; "server closed
    // the connection unexpectedly"): ../shared/engines/documentdb-cluster, "Seen under faults".
    "connection to the remote node",
    "failure on connection marked as essential",
    "server closed the connection unexpectedly",
    // A backend whose postmaster died under it (Citus' coordinator SIGKILLed mid-batch), per
    // document as `XX000` (tests/engine_faults.rs on the cluster).
    "postmaster was shut down",
    // PostgreSQL's PANIC when reporting an error fails again and again (elog.c): seen from the
    // coordinator's backends as it was SIGKILLed mid-call; a PANIC restarts the server. The
    // same PANIC follows an error message that cannot be converted to the client's encoding,
    // which would come back on every attempt: a RetryPolicy's deadline still ends the call.
    "ERRORDATA_STACK_SIZE exceeded",
    // FerretDB's pool on a connection the coordinator's death closed: "failed to deallocate
    // cached statement(s): read tcp ...: use of closed network connection" (tests/engine_faults.rs,
    // 1,000 `apply` across a coordinator kill); Go's other words for a connection gone under a
    // read or write.
    "use of closed network connection",
    // Citus' two-phase commit when a worker dies between PREPARE and COMMIT PREPARED ("could
    // not commit transaction for shard 102044 on at least one active node"; tests/
    // engine_faults.rs, events across a worker kill): the prepared transaction commits when
    // Citus recovers it, so the write's outcome is unknown, not refused.
    "could not commit transaction",
    // A backend of Citus' coordinator SIGKILLed between its local commit and the end of the
    // commit (its postmaster gone, "postmaster was shut down" while in COMMIT state) PANICs
    // with "cannot abort transaction N, it was already committed" (xact.c), and the client
    // gets that line: the transaction committed, and the prepared transactions on the workers
    // commit when Citus recovers them (tests/engine_faults.rs, events across a coordinator
    // kill, 1 run in 6). Applied, then; the next read, by the write's token, says so.
    "it was already committed",
    "connection reset by peer",
    "broken pipe",
];

/// `XX000` internal_error: how DocumentDB passes a per-document failure of its storage through
/// (code 2600); like FerretDB's code 1, its message tells a failure from a refusal.
const PG_INTERNAL_ERROR: i32 = sqlstate(b"XX000");

/// Whether `message`, answered with code 1 or `XX000`, says the storage failed under the
/// command rather than refused it (see [`ENGINE_FAILURES`]).
pub(crate) fn storage_failed(code: i32, message: &str) -> bool {
    (code == INTERNAL_ERROR || code == PG_INTERNAL_ERROR)
        && ENGINE_FAILURES.iter().any(|m| message.contains(m))
}

/// Whether the engine answered that its storage failed under the command (see
/// [`ENGINE_FAILURES`]): transient, and a write's outcome unknown — it may have committed.
fn engine_failed(e: &mongodb::error::Error) -> bool {
    server_code(e).is_some_and(|code| storage_failed(code, &e.to_string()))
}

/// CursorNotFound: the engine dropped a cursor (restarted, timed it out). The read is done
/// again: from its start for a guard read, from the last `_id` handed out for a scan.
pub(crate) const CURSOR_NOT_FOUND: i32 = 43;

/// A duplicate key, in a write error or as a command's refusal.
pub(crate) const DUPLICATE_KEY_CODE: i32 = 11000;

/// FerretDB's code for what its storage reports: a failure of the storage, or a refusal of
/// the data (an index over duplicates); the message tells them apart.
pub(crate) const INTERNAL_ERROR: i32 = 1;

/// Whether a unique index was refused because stored documents already share a value:
/// MongoDB answers 11000; FerretDB answers [`INTERNAL_ERROR`] with its storage's words,
/// "could not create exclusion constraint" (2.x, DocumentDB) or "UNIQUE constraint failed"
/// (1.x, SQLite).
pub(crate) fn index_over_duplicates(e: &mongodb::error::Error) -> bool {
    const DUPLICATES: [&str; 2] = [
        "could not create exclusion constraint",
        "UNIQUE constraint failed",
    ];
    match server_code(e) {
        Some(DUPLICATE_KEY_CODE) => true,
        Some(INTERNAL_ERROR) => {
            let message = e.to_string();
            DUPLICATES.iter().any(|d| message.contains(d))
        }
        _ => false,
    }
}

/// Whether a write command that failed with `e` may or may not have been applied: the codes
/// of [`UNKNOWN_OUTCOME_CODES`], an engine whose storage failed under it, and an overload
/// error that does not say the command was not run ([`throttle`] takes those).
pub(crate) fn outcome_unknown(e: &mongodb::error::Error) -> bool {
    server_code(e).is_some_and(|c| UNKNOWN_OUTCOME_CODES.contains(&c))
        || engine_failed(e)
        || e.contains_label(OVERLOADED)
}

/// The wait named in a throttling message: `RetryAfterMs=N` (Cosmos DB).
pub(crate) fn retry_after_in(message: &str) -> Option<std::time::Duration> {
    let (_, rest) = message.split_once("RetryAfterMs=")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok().map(std::time::Duration::from_millis)
}

/// The server error code carried by a driver error, if any.
pub(crate) fn server_code(e: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .and_then(|w| w.first().map(|w| w.code))
            .or_else(|| m.write_concern_error.as_ref().map(|w| w.code)),
        _ => None,
    }
}

/// Sorts a driver error into [`Error::Transient`] or [`Error::Database`], or
/// [`Error::ShardKeyMissing`] for a write refused for lack of the shard key.
pub fn classify(e: mongodb::error::Error) -> Error {
    use mongodb::error::ErrorKind;
    if let ErrorKind::Command(c) = e.kind.as_ref() {
        if shard_key_missing(c.code, &c.message) {
            return Error::ShardKeyMissing {
                code: c.code,
                message: c.message.clone(),
            };
        }
    }
    let transient = match e.kind.as_ref() {
        ErrorKind::Io(_)
        | ErrorKind::ConnectionPoolCleared { .. }
        | ErrorKind::ServerSelection { .. } => true,
        _ => {
            e.contains_label("RetryableWriteError")
                || e.contains_label("TransientTransactionError")
                || e.contains_label(OVERLOADED)
                || e.contains_label(NOT_RUN[0])
                || server_code(&e).is_some_and(|c| TRANSIENT_CODES.contains(&c))
                || server_code(&e).is_some_and(|c| refused_as_busy(c, &e.to_string()))
                || engine_failed(&e)
        }
    };
    if transient {
        Error::Transient(e)
    } else {
        Error::Database(e)
    }
}

impl From<mongodb::error::Error> for Error {
    fn from(e: mongodb::error::Error) -> Self {
        classify(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::error::ErrorKind;

    #[test]
    fn network_failures_are_transient() {
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e: mongodb::error::Error = ErrorKind::from(std::io::Error::from(kind)).into();
            let classified = classify(e);
            assert!(classified.is_transient(), "{kind:?} -> {classified:?}");
        }
    }

    #[test]
    fn other_driver_errors_are_permanent() {
        let e: mongodb::error::Error = ErrorKind::from(std::io::Error::other("x")).into();
        assert!(
            classify(e).is_transient(),
            "any I/O error is a network error"
        );
        let e = mongodb::error::Error::custom("not a network problem");
        assert!(!classify(e).is_transient());
    }

    fn command_error(code: i32, message: &str) -> mongodb::error::Error {
        let reply = bson::doc! { "ok": 0, "code": code, "codeName": "X", "errmsg": message };
        let failure: mongodb::error::CommandError = bson::from_document(reply).unwrap();
        ErrorKind::Command(failure).into()
    }

    /// Azure Cosmos DB for MongoDB (RU): 16500 when request units run out, with the wait in the
    /// message; 50 when its server-side retries of a throttled request run out (Microsoft
    /// Learn, "Troubleshoot common errors in Azure Cosmos DB for MongoDB" and "Prevent
    /// rate-limiting errors"). Both are transient; the wait is read.
    #[test]
    fn cosmos_throttling_and_unknown_outcomes_are_transient() {
        let msg = "Error=16500, RetryAfterMs=42, Details='Response status code does not indicate \
                   success: TooManyRequests (429); Substatus: 3200'";
        let throttled = classify(command_error(16500, msg));
        assert!(throttled.is_transient(), "{throttled:?}");
        assert_eq!(
            throttled.retry_after(),
            Some(std::time::Duration::from_millis(42))
        );
        let timed_out = classify(command_error(
            50,
            "Request timed out. Retries due to rate limiting: True.",
        ));
        assert!(timed_out.is_transient());
        assert_eq!(timed_out.retry_after(), None);
        assert!(THROTTLE_CODES.contains(&16500) && UNKNOWN_OUTCOME_CODES.contains(&50));
        assert_eq!(
            retry_after_in("RetryAfterMs=7"),
            Some(std::time::Duration::from_millis(7))
        );
        assert_eq!(retry_after_in("RetryAfterMs=x"), None);
        // A bad value is not transient.
        assert!(!classify(command_error(2, "BadValue")).is_transient());
    }

    /// An engine restarting, stepping down or shutting down under a command (the retryable
    /// writes specification's codes): transient, and a write cut short so is sent again only
    /// after the next attempt's read has decided it.
    #[test]
    fn failover_and_shutdown_codes_are_transient() {
        for (code, name) in [
            (10107, "NotWritablePrimary"),
            (13435, "NotPrimaryNoSecondaryOk"),
            (11602, "InterruptedDueToReplStateChange"),
            (189, "PrimarySteppedDown"),
            (91, "ShutdownInProgress"),
            (11600, "InterruptedAtShutdown"),
            (CURSOR_NOT_FOUND, "CursorNotFound"),
        ] {
            assert!(classify(command_error(code, name)).is_transient(), "{name}");
        }
    }

    /// Amazon DocumentDB 8.0 (developer guide, "Error codes"): 112 "Write Conflict" and 148
    /// "Insufficient resources to run query" (busy, nothing applied), 147 "not master"
    /// (failover), 11601 "The operation was interrupted" (outcome unknown) are transient.
    #[test]
    fn documentdb_busy_failover_and_interrupted_are_transient() {
        for code in [112, 148, 147, 11601] {
            assert!(classify(command_error(code, "x")).is_transient(), "{code}");
        }
        assert!(THROTTLE_CODES.contains(&112) && THROTTLE_CODES.contains(&148));
        assert!(UNKNOWN_OUTCOME_CODES.contains(&11601));
        // FerretDB 2 / DocumentDB pass PostgreSQL's rollbacks through as SQLSTATE codes.
        assert_eq!(
            (PG_DEADLOCK_DETECTED, PG_SERIALIZATION_FAILURE),
            (16908292, 16777220)
        );
        assert!(THROTTLE_CODES.contains(&16908292) && THROTTLE_CODES.contains(&16777220));
        assert!(classify(command_error(16908292, "deadlock detected")).is_transient());
        // FerretDB passes its storage's failures through as code 1: transient, a write's
        // outcome unknown; the same code for an index over duplicates stays permanent.
        for m in [
            "terminating connection due to unexpected postmaster exit",
            "unexpected EOF",
            "FATAL: the database system is not yet accepting connections (SQLSTATE 57P03)",
            "the database system is starting up",
            "the database system is shutting down",
            "the database system is in recovery mode",
            "[pool.go:86 documentdb.(*Pool).Acquire] failed to connect to `user=postgres \
             database=postgres`: dial tcp 127.0.0.1:51957: connect: connection refused",
        ] {
            let e = command_error(1, m);
            assert!(outcome_unknown(&e), "{m}");
            assert!(classify(command_error(1, m)).is_transient(), "{m}");
        }
        let duplicates = command_error(1, "could not create exclusion constraint \"x\"");
        assert!(!outcome_unknown(&duplicates));
        assert!(!classify(duplicates).is_transient());
        assert!(!classify(command_error(2, "unexpected EOF")).is_transient());
        // DocumentDB's 225 TransactionTooOld is a stale retry, not a transient failure.
        assert!(!classify(command_error(225, "x")).is_transient());
    }

    /// DocumentDB on Citus (../shared/engines/documentdb-cluster): a worker gone under a write
    /// is a transient failure whose outcome the next read decides; racing writers cancelled by
    /// its distributed deadlock detection are sent again; a write without the shard key is a
    /// typed error naming the remedy, not the engine's bare code.
    #[test]
    fn citus_faults_and_refusals_are_classified() {
        assert_eq!(
            (
                PG_QUERY_CANCELED,
                PG_CONNECTION_FAILURE,
                PG_INVALID_PARAMETER
            ),
            (67371461, 100663808, 50856066)
        );
        for m in [
            "connection to the remote node postgres@127.0.0.1:40111 failed with the following \
             error: Connection refused",
            "failure on connection marked as essential: 127.0.0.1:40111",
            "server closed the connection unexpectedly\n\tThis probably means the server \
             terminated abnormally",
            "ERRORDATA_STACK_SIZE exceeded",
            "failed to deallocate cached statement(s): read tcp 127.0.0.1:54522->127.0.0.1:56579: \
             use of closed network connection",
            "could not commit transaction for shard 102044 on at least one active node",
            "cannot abort transaction 780, it was already committed",
        ] {
            assert!(outcome_unknown(&command_error(1, m)), "{m}");
            assert!(classify(command_error(1, m)).is_transient(), "{m}");
        }
        assert!(THROTTLE_CODES.contains(&67371461));
        assert!(UNKNOWN_OUTCOME_CODES.contains(&100663808));
        assert_eq!(PG_SERVER_GOING_DOWN[0], 16908741);
        let gone = command_error(
            16908741,
            "terminating connection due to unexpected postmaster exit",
        );
        assert!(outcome_unknown(&gone));
        assert!(classify(gone).is_transient());
        let canceled = command_error(67371461, "canceling statement due to user request");
        assert!(classify(canceled).is_transient());
        let deadlock = command_error(
            1,
            "canceling the transaction since it was involved in a distributed deadlock",
        );
        assert!(throttle("db.c", &deadlock, false).is_some());
        assert!(classify(deadlock).is_transient());
        assert!(refused_as_busy(
            1,
            "canceling the transaction since it was involved in a distributed deadlock"
        ));
        assert!(!refused_as_busy(1, "could not create exclusion constraint"));
        for (code, m) in [
            (
                50856066,
                "An {upsert:true} update on a sharded collection must target a single shard",
            ),
            (
                50856066,
                "A {multi:false} update on a sharded collection must contain an exact match \
                 on _id or target a single shard",
            ),
            (
                61,
                "Query for sharded findAndModify must contain the shard key",
            ),
        ] {
            let e = classify(command_error(code, m));
            assert_eq!(e.kind(), "shard_key_missing", "{m}");
            assert!(!e.is_transient());
            assert!(e.to_string().contains(".sharded(true)"), "{e}");
        }
        // 22023 is DocumentDB's code for many refusals: only this one is about the shard key.
        let other = classify(command_error(50856066, "$size needs a number"));
        assert_eq!(other.kind(), "database");
    }

    #[test]
    fn never_transient_variants() {
        let e = Error::ImmutableKeyChanged {
            collection: "db.c".into(),
            stored_id: "a".into(),
            derived_id: Ulid::nil(),
            key: "k".into(),
        };
        assert!(!e.is_transient());
        assert!(!Error::serialize::<u8>("bad").is_transient());
        assert!(!Error::from(KeyError::Missing { field: "f" }).is_transient());
    }
}
