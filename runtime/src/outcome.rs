//! What writes report: one outcome type per kind of write, and the report of a batch.

use std::fmt;

use ulid::Ulid;

use crate::error::Error;

/// What a guarded upsert did. Every variant carries the document's id.
///
/// The outcomes are exact across lost replies and the retry policy's attempts: every write
/// carries the call's token (`_nk_write`), so a retry tells its own lost write from another
/// writer's; and only natural-key's inserts create documents (its updates never upsert), so
/// finding its own token tells a retry whether it created the document. Summed over all
/// writers, `Inserted` counts the documents created (docs/reliability.md, "Outcomes that are
/// exactly true").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UpsertOutcome {
    /// This call stored a new document (perhaps in an attempt whose reply was lost).
    Inserted(Ulid),
    /// This call's write changed the stored document's content.
    Updated(Ulid),
    /// The stored content hash equals the new one, and this call did not store it: nothing was
    /// sent for it, or what was sent found it already stored. For a versioned document, also
    /// a newer version of the same content: only its version was written.
    Unchanged(Ulid),
    /// A versioned document whose stored version is newer than this one (or a tombstone at
    /// or above it: deleted at a newer version). Nothing was written — or, if a lost reply hid
    /// that this call's write landed, it has been overwritten by the newer one since. Never
    /// an error: an older version arriving late is what order-safe writes are for.
    Stale(Ulid),
    /// [`WriteMode::InsertOnly`](crate::WriteMode::InsertOnly): a document of this identity is
    /// stored; it was left alone.
    Existed(Ulid),
    /// [`WriteMode::UpdateOnly`](crate::WriteMode::UpdateOnly): no document of this identity
    /// is stored; none was created.
    Missing(Ulid),
}

/// What an insert-once write of an event did.
///
/// Exact across lost replies and retries, as [`UpsertOutcome`]: each prepared event carries a
/// token of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InsertOutcome {
    /// This call stored the event (perhaps in an attempt whose reply was lost).
    Inserted(Ulid),
    /// The event was already stored by another call — an earlier call with the same value, or
    /// another writer — with the same payload. Carries the stored id (which differs from the
    /// value's own id only when the match was on the idempotency key). Another payload under
    /// the id or key is [`Error::IdempotencyKeyReused`](crate::Error::IdempotencyKeyReused).
    AlreadyApplied(Ulid),
}

/// What a delete by key did. Every variant carries the derived id.
///
/// `Deleted` and `NotFound` are exact. A delete whose reply was lost cannot always be told
/// from another writer's delete of the same document: the document is gone either way and
/// leaves no trace of who deleted it. Then the outcome says so, [`DeleteOutcome::Gone`], and
/// is never a false `NotFound` for the call that deleted it.
///
/// A versioned delete (a type with `#[natural_key(version)]`) leaves a tombstone and is exact
/// across lost replies: its tombstone carries the call's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeleteOutcome {
    /// This call deleted the stored document.
    Deleted(Ulid),
    /// No document with this id and identity was stored, and this call deleted nothing.
    NotFound(Ulid),
    /// The document is not stored any more, and this call sent a delete for it whose reply was
    /// lost (or did not say which of a command's documents it deleted): this call or another
    /// writer deleted it.
    Gone(Ulid),
    /// A versioned delete older than the stored version: the stored document is newer than
    /// the deletion, and nothing was written.
    Stale(Ulid),
}

impl DeleteOutcome {
    /// The document's id.
    ///
    /// ```
    /// # use natural_key::DeleteOutcome;
    /// let id = natural_key::Ulid::nil();
    /// assert_eq!(DeleteOutcome::NotFound(id).id(), id);
    /// ```
    pub fn id(&self) -> Ulid {
        match *self {
            DeleteOutcome::Deleted(id)
            | DeleteOutcome::NotFound(id)
            | DeleteOutcome::Gone(id)
            | DeleteOutcome::Stale(id) => id,
        }
    }

    /// `"deleted"`, `"not_found"`, `"gone"` or `"stale"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeleteOutcome::Deleted(_) => "deleted",
            DeleteOutcome::NotFound(_) => "not_found",
            DeleteOutcome::Gone(_) => "gone",
            DeleteOutcome::Stale(_) => "stale",
        }
    }
}

impl fmt::Display for DeleteOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.as_str(), self.id())
    }
}

impl Label for DeleteOutcome {
    fn as_str(&self) -> &'static str {
        DeleteOutcome::as_str(self)
    }
}

impl Counted for DeleteOutcome {
    fn count(self, r: &mut BatchReport) {
        match self {
            DeleteOutcome::Deleted(_) => r.deleted += 1,
            DeleteOutcome::NotFound(_) => r.not_found += 1,
            DeleteOutcome::Gone(_) => r.gone += 1,
            DeleteOutcome::Stale(_) => r.stale += 1,
        }
    }
}

impl UpsertOutcome {
    /// The document's id.
    ///
    /// ```
    /// # use natural_key::UpsertOutcome;
    /// let id = natural_key::Ulid::nil();
    /// assert_eq!(UpsertOutcome::Unchanged(id).id(), id);
    /// ```
    pub fn id(&self) -> Ulid {
        match *self {
            UpsertOutcome::Inserted(id)
            | UpsertOutcome::Updated(id)
            | UpsertOutcome::Unchanged(id)
            | UpsertOutcome::Stale(id)
            | UpsertOutcome::Existed(id)
            | UpsertOutcome::Missing(id) => id,
        }
    }

    /// `"inserted"`, `"updated"`, `"unchanged"`, `"stale"`, `"existed"` or `"missing"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            UpsertOutcome::Inserted(_) => "inserted",
            UpsertOutcome::Updated(_) => "updated",
            UpsertOutcome::Unchanged(_) => "unchanged",
            UpsertOutcome::Stale(_) => "stale",
            UpsertOutcome::Existed(_) => "existed",
            UpsertOutcome::Missing(_) => "missing",
        }
    }
}

impl InsertOutcome {
    /// The stored event's id.
    ///
    /// ```
    /// # use natural_key::InsertOutcome;
    /// let id = natural_key::Ulid::nil();
    /// assert_eq!(InsertOutcome::AlreadyApplied(id).id(), id);
    /// ```
    pub fn id(&self) -> Ulid {
        match *self {
            InsertOutcome::Inserted(id) | InsertOutcome::AlreadyApplied(id) => id,
        }
    }

    /// `"inserted"` or `"already_applied"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            InsertOutcome::Inserted(_) => "inserted",
            InsertOutcome::AlreadyApplied(_) => "already_applied",
        }
    }
}

impl fmt::Display for UpsertOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.as_str(), self.id())
    }
}

impl fmt::Display for InsertOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.as_str(), self.id())
    }
}

/// What a batch write did, counted per document. `failures` holds each document that could
/// not be written, by its index in the input, with the reason; the others were written (or
/// left alone) as counted.
///
/// ```
/// let report = natural_key::BatchReport::default();
/// assert_eq!(report.processed(), 0);
/// assert!(report.failures.is_empty());
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BatchReport {
    /// New documents stored.
    pub inserted: u64,
    /// Stored documents whose content changed.
    pub updated: u64,
    /// Documents whose stored content hash already matched: no write sent for them (or, for a
    /// versioned document, only its newer version).
    pub unchanged: u64,
    /// (versioned documents and deletes) older than the stored version: nothing written
    /// ([`UpsertOutcome::Stale`], [`DeleteOutcome::Stale`]).
    pub stale: u64,
    /// ([`WriteMode::InsertOnly`](crate::WriteMode::InsertOnly)) stored already: left alone.
    pub existed: u64,
    /// ([`WriteMode::UpdateOnly`](crate::WriteMode::UpdateOnly)) not stored: not created.
    pub missing: u64,
    /// (events) already stored — retries whose first attempt landed.
    pub already_applied: u64,
    /// (deletes) documents this call deleted ([`DeleteOutcome::Deleted`]).
    pub deleted: u64,
    /// (deletes) documents not stored, which this call did not delete
    /// ([`DeleteOutcome::NotFound`]).
    pub not_found: u64,
    /// (deletes) documents gone, deleted by this call or another writer
    /// ([`DeleteOutcome::Gone`]).
    pub gone: u64,
    /// Documents not written: index in the input, and why.
    pub failures: Vec<(usize, Error)>,
    /// Batches processed so far.
    pub batches: u64,
}

impl BatchReport {
    /// Documents processed so far (successes and failures).
    pub fn processed(&self) -> u64 {
        self.inserted
            + self.updated
            + self.unchanged
            + self.stale
            + self.existed
            + self.missing
            + self.already_applied
            + self.deleted
            + self.not_found
            + self.gone
            + self.failures.len() as u64
    }
}

/// An outcome's name, as its `Display` and the metrics' `outcome` label spell it.
pub(crate) trait Label {
    fn as_str(&self) -> &'static str;
}

/// One outcome, counted into a [`BatchReport`].
pub(crate) trait Counted: Label {
    fn count(self, report: &mut BatchReport);
}

impl Label for ApplyOutcome {
    fn as_str(&self) -> &'static str {
        ApplyOutcome::as_str(self)
    }
}

impl Label for UpsertOutcome {
    fn as_str(&self) -> &'static str {
        UpsertOutcome::as_str(self)
    }
}

impl Counted for UpsertOutcome {
    fn count(self, r: &mut BatchReport) {
        match self {
            UpsertOutcome::Inserted(_) => r.inserted += 1,
            UpsertOutcome::Updated(_) => r.updated += 1,
            UpsertOutcome::Unchanged(_) => r.unchanged += 1,
            UpsertOutcome::Stale(_) => r.stale += 1,
            UpsertOutcome::Existed(_) => r.existed += 1,
            UpsertOutcome::Missing(_) => r.missing += 1,
        }
    }
}

impl Label for InsertOutcome {
    fn as_str(&self) -> &'static str {
        InsertOutcome::as_str(self)
    }
}

impl Counted for InsertOutcome {
    fn count(self, r: &mut BatchReport) {
        match self {
            InsertOutcome::Inserted(_) => r.inserted += 1,
            InsertOutcome::AlreadyApplied(_) => r.already_applied += 1,
        }
    }
}

/// A batch write that stopped: the error that stopped it, what was done before it, and where
/// to resume. Every input document before index `settled` is settled (written, unchanged or in
/// `report.failures`); resuming the input from `settled` with the same call converges.
///
/// ```
/// # use natural_key::{BatchError, BatchReport, Error, KeyError};
/// # fn handle(e: BatchError) {
/// eprintln!("stopped after {} documents: {}", e.settled, e.error);
/// if e.is_transient() { /* resume from e.settled */ }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("batch write stopped; every document before input index {settled} is settled")]
#[non_exhaustive]
pub struct BatchError {
    /// What the write did before it stopped.
    pub report: BatchReport,
    /// Why it stopped.
    #[source]
    pub error: Error,
    /// Input index up to which (exclusive) every document is settled.
    pub settled: usize,
}

impl BatchError {
    /// Whether the error that stopped the batch is worth retrying ([`Error::is_transient`]).
    pub fn is_transient(&self) -> bool {
        self.error.is_transient()
    }
}

impl From<BatchError> for Error {
    /// The error that stopped the batch (the report is dropped).
    fn from(e: BatchError) -> Self {
        e.error
    }
}

/// What [`Collection::apply`](crate::Collection::apply) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyOutcome {
    /// The change and its operation's record were written, in one update.
    Applied,
    /// The document records this operation with the same change: an earlier call, another
    /// writer, or an attempt of this call whose reply was lost applied it. Nothing was written.
    AlreadyApplied,
}

impl ApplyOutcome {
    /// `"applied"` or `"already_applied"`, for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            ApplyOutcome::Applied => "applied",
            ApplyOutcome::AlreadyApplied => "already_applied",
        }
    }
}

impl std::fmt::Display for ApplyOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
