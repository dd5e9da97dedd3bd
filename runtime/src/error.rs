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
    /// The `#[natural_key(version)]` value does not fit the int64 that versions are stored and
    /// compared as. It is never wrapped or clamped.
    #[error(
        "version `{field}` is {value}, outside the int64 range versions are compared in; \
         fix the value"
    )]
    VersionOutOfRange {
        /// The Rust field name.
        field: &'static str,
        /// The offending value (an instant in Unix milliseconds).
        value: i128,
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

    /// The stored document holds this document's version with other content: two contents
    /// claim one version (like an idempotency key reused for another request). Which is right
    /// cannot be told, so nothing was written; give the new content a higher version.
    #[error(
        "document {id} in `{collection}` (key {key}) is stored at version {version} with other \
         content than this one of the same version; two contents cannot share a version. \
         Nothing was written: give the new content a higher version, or write the stored one"
    )]
    VersionConflict {
        /// `database.collection`.
        collection: String,
        /// The document's id.
        id: Ulid,
        /// The version both claim (`_nk_version`).
        version: i64,
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
    /// `immutable_key_changed`, `version_conflict`, `contention`, `write_failed`, `unique_index_violation`,
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
            Error::VersionConflict { .. } => "version_conflict",
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

#[cfg(test)]
mod tests {
    use super::*;

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
