package naturalkey

import "time"

// Stored field names of versioned documents (docs/id-scheme.md, "Versions and tombstones").
const (
	// FieldVersion holds a versioned document's version as an int64: an integer version as it
	// is, an instant in Unix milliseconds, floored (InstantVersion). The Rust library compares
	// it, never the document's own version field, so every writer must store it in one unit.
	FieldVersion = "_nk_version"
	// FieldDeleted marks a tombstone, what a versioned delete leaves of a document: it holds
	// the time of the deletion (a BSON date), by which tombstones are pruned. A live document
	// has no FieldDeleted; read live documents with the filter {_nk_deleted: null}.
	FieldDeleted = "_nk_deleted"
)

// InstantVersion is the FieldVersion of an instant version: Unix milliseconds, floored (an
// instant 1.5 ms before the epoch is -2), as the Rust library computes it for a bson date, an
// RFC 3339 text or any other instant. Two instants within one millisecond are one version.
func InstantVersion(t time.Time) int64 {
	// UnixMilli floors: it adds the non-negative sub-second part to whole seconds.
	return t.UnixMilli()
}

// VersionedFilter is the q of a versioned upsert of version: the document by _id, only while
// its stored version is lower than version or absent (or not a number):
// {_id: ID, _nk_version: {$not: {$gte: version}}}. A stored version >= version does not match,
// so the upsert tries to insert a second document with this _id and fails with a duplicate
// key error (11000): for this statement that means "stale or equal: nothing written". On a
// sharded collection add FieldIdentity: Identity, as for Filter.
func (f StoredFields) VersionedFilter(version int64) map[string]any {
	return map[string]any{
		FieldID:      f.ID,
		FieldVersion: map[string]any{"$not": map[string]any{"$gte": version}},
	}
}

// VersionedUpdate is the u of a versioned upsert ({q: VersionedFilter(version), u:
// VersionedUpdate(fields, version), upsert: true}): Update's $set with FieldVersion: version
// (an int64) added, and $unset of _nk_hash and of _nk_deleted, so that a write newer than a
// tombstone brings the document back. fields hold the document's own version field in its own
// form; version is that field's FieldVersion (the integer, or InstantVersion of the instant).
func (f StoredFields) VersionedUpdate(fields map[string]any, version int64) (map[string]any, error) {
	u, err := f.Update(fields)
	if err != nil {
		return nil, err
	}
	u["$set"].(map[string]any)[FieldVersion] = version
	u["$unset"] = map[string]any{FieldHash: "", FieldDeleted: ""}
	return u, nil
}

// TombstoneFilter is the q of a versioned delete of version: the document by _id, only while
// its stored version is at most version or absent: {_id: ID, _nk_version: {$not: {$gt:
// version}}}. A stored version > version makes the delete's upsert fail with a duplicate key
// error (11000): the delete is stale, nothing written. On a sharded collection add
// FieldIdentity: Identity.
func (f StoredFields) TombstoneFilter(version int64) map[string]any {
	return map[string]any{
		FieldID:      f.ID,
		FieldVersion: map[string]any{"$not": map[string]any{"$gt": version}},
	}
}

// Tombstone is the replacement of a versioned delete ({q: TombstoneFilter(version), u:
// Tombstone(version, time.Now()), upsert: true}, a replaceOne): what is left of the document,
// its _nk_identity, FieldVersion: version and FieldDeleted: deleted (a BSON date: the driver
// encodes a time.Time as one, in milliseconds). The _id comes from the filter. Where nothing
// is stored it inserts the tombstone, so that a late write of an older version is stale.
func (f StoredFields) Tombstone(version int64, deleted time.Time) map[string]any {
	return map[string]any{
		FieldIdentity: f.Identity,
		FieldVersion:  version,
		FieldDeleted:  deleted,
	}
}
