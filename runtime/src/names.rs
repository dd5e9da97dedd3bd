//! Every name natural-key stores in a document or gives an index: frozen, because stored
//! documents and existing indexes carry them. A leaf: it depends on nothing, and everything
//! that writes, reads or indexes a stored name takes it from here.

/// Every name natural-key stores or will store begins with this; documents may not use it.
pub const RESERVED_PREFIX: &str = "_nk_";

/// Field holding the identity digest (hex SHA-256 of the non-timestamp key fields).
pub const IDENTITY_FIELD: &str = "_nk_identity";
/// Field holding the content hash (hex).
pub const HASH_FIELD: &str = "_nk_hash";
/// Field holding the token of the write that last stored the document; lets a write tell its
/// own commands from a concurrent writer's after an engine error or a lost reply.
pub const WRITE_FIELD: &str = "_nk_write";
/// Field holding a RandomId type's idempotency key.
pub const IDEMPOTENCY_FIELD: &str = "_nk_idempotency";
/// Field holding the `_id`s a document had before natural-key adopted or rekeyed it (an array:
/// duplicates collapse into one document), so references to them can be repaired.
pub const LEGACY_IDS_FIELD: &str = "_nk_legacy_ids";
/// Field marking a document whose identity was released for a move to this id; the move
/// completes (or, by adopt, is undone) on the next run.
pub const MOVED_TO_FIELD: &str = "_nk_moved_to";

/// Field holding a document's record of applied relative-update operations: an array of
/// `{o: key, t: time in ms (int64), h: hex content hash of the change}`, in the order applied.
pub const OPS_FIELD: &str = "_nk_ops";
/// Field holding the newest operation time (ms, int64) pruned from [`OPS_FIELD`]: an operation
/// at or before it is refused, since whether it was applied cannot be told.
pub const OPS_PRUNED_TO_FIELD: &str = "_nk_ops_pruned_to";
/// The fields of ours that move with a document wherever natural-key moves it (rekey,
/// adopt): without its record, a replay of an applied operation at the new id would be
/// applied again.
pub(crate) const RECORD_FIELDS: &[&str] = &[OPS_FIELD, OPS_PRUNED_TO_FIELD];
/// The keys of one [`OPS_FIELD`] entry: operation key, time, change hash.
pub(crate) const OP_KEY: &str = "o";
pub(crate) const OP_TIME: &str = "t";
pub(crate) const OP_HASH: &str = "h";

/// Field holding a versioned document's version as an int64 (`#[natural_key(version)]`, a
/// [`KeySpec`](crate::spec::KeySpec)'s version field): an integer version as it is, a timestamp
/// version in Unix milliseconds. Write filters compare it, so it has one type whatever the
/// version field's own stored form.
pub const VERSION_FIELD: &str = "_nk_version";
/// Field marking a tombstone: what a versioned delete leaves of a document (its `_id`,
/// [`IDENTITY_FIELD`], [`VERSION_FIELD`] and this), so that a later write of a version at or
/// below the deleted one is stale instead of bringing the document back. Holds the time of the
/// deletion (a BSON date), by which tombstones are pruned.
pub const DELETED_FIELD: &str = "_nk_deleted";

/// The unique index on [`IDENTITY_FIELD`].
pub(crate) const IDENTITY_INDEX: &str = "nk_identity";
/// The unique index on [`IDEMPOTENCY_FIELD`].
pub(crate) const IDEMPOTENCY_INDEX: &str = "nk_idempotency";
/// The engine's own index on `_id`.
pub(crate) const ID_INDEX: &str = "_id_";

/// The indexes whose duplicates mean "another write stored this first; decide again".
pub(crate) const OUR_INDEXES: &[&str] = &[ID_INDEX, IDENTITY_INDEX, IDEMPOTENCY_INDEX];
/// Their fields, for engines that report a duplicate's key pattern instead of its index.
pub(crate) const OUR_FIELDS: &[&str] = &["_id", IDENTITY_FIELD, IDEMPOTENCY_FIELD];

#[cfg(test)]
mod tests {
    use super::*;

    /// The frozen values, written out: a change here is a new format, not a refactoring.
    #[test]
    fn stored_names_are_frozen() {
        assert_eq!(
            [
                RESERVED_PREFIX,
                IDENTITY_FIELD,
                HASH_FIELD,
                WRITE_FIELD,
                IDEMPOTENCY_FIELD
            ],
            [
                "_nk_",
                "_nk_identity",
                "_nk_hash",
                "_nk_write",
                "_nk_idempotency"
            ]
        );
        assert_eq!(
            [OPS_FIELD, OPS_PRUNED_TO_FIELD, OP_KEY, OP_TIME, OP_HASH],
            ["_nk_ops", "_nk_ops_pruned_to", "o", "t", "h"]
        );
        assert_eq!(
            [LEGACY_IDS_FIELD, MOVED_TO_FIELD],
            ["_nk_legacy_ids", "_nk_moved_to"]
        );
        assert_eq!(
            [VERSION_FIELD, DELETED_FIELD],
            ["_nk_version", "_nk_deleted"]
        );
        assert_eq!(OUR_INDEXES, ["_id_", "nk_identity", "nk_idempotency"]);
        for name in [IDENTITY_FIELD, HASH_FIELD, WRITE_FIELD, IDEMPOTENCY_FIELD] {
            assert!(name.starts_with(RESERVED_PREFIX));
        }
    }
}
