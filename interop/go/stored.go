package naturalkey

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Stored field names (docs/id-scheme.md, "Writing from another language"). They are a format
// shared with the Rust library, which finds a document by FieldIdentity.
const (
	// FieldID holds the id as its 26-character uppercase ULID text.
	FieldID = "_id"
	// FieldIdentity holds the identity digest as 64 lowercase hex digits. It is uniquely
	// indexed (index "nk_identity", sparse), which is what refuses a second document of one
	// identity.
	FieldIdentity = "_nk_identity"
	// FieldHash holds natural-key's content hash. Another writer cannot compute it (it hashes
	// the Rust type's serde serialization), so it removes it when it writes content: a stale
	// hash would tell the Rust writer that the stored content is its own.
	FieldHash = "_nk_hash"
	// ReservedPrefix begins every name natural-key stores or will store; a document's own
	// fields must not use it.
	ReservedPrefix = "_nk_"
)

// IdentityHex is Identity as stored in _nk_identity: 64 lowercase hex digits.
func IdentityHex(namespace string, keys []Key) (string, error) {
	sum, err := Identity(namespace, keys)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum[:]), nil
}

// JoinedIdentityHex is JoinedIdentity as stored in _nk_identity: 64 lowercase hex digits.
func JoinedIdentityHex(separator string, keys []Key) (string, error) {
	sum, err := JoinedIdentity(separator, keys)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum[:]), nil
}

// StoredFields are the natural-key fields a writer other than the Rust library must store
// with a document for the library's guard to protect it: its _id and its _nk_identity, in
// the exact text forms the library compares (an _id in lowercase is another id to it, an
// identity in uppercase another identity).
type StoredFields struct {
	ID       string // _id: the ULID, 26 characters of uppercase Crockford base32
	Identity string // _nk_identity: the identity digest, 64 lowercase hex digits
}

// DefaultStoredFields computes the stored fields of a document of the default scheme: keys in
// the Rust type's declaration order (normalized where the type says #[key(lowercase)] or
// #[key(nfc)]), ms its #[key(timestamp)] in Unix milliseconds.
func DefaultStoredFields(namespace string, keys []Key, ms uint64) (StoredFields, error) {
	if err := checkTimestamp(ms); err != nil {
		return StoredFields{}, err
	}
	sum, err := Identity(namespace, keys)
	if err != nil {
		return StoredFields{}, err
	}
	return storedFields(ms, sum)
}

// JoinedStoredFields computes the stored fields of a document of the joined scheme.
func JoinedStoredFields(separator string, keys []Key, ms uint64) (StoredFields, error) {
	if err := checkTimestamp(ms); err != nil {
		return StoredFields{}, err
	}
	sum, err := JoinedIdentity(separator, keys)
	if err != nil {
		return StoredFields{}, err
	}
	return storedFields(ms, sum)
}

func storedFields(ms uint64, identity [32]byte) (StoredFields, error) {
	id, err := FromIdentity(ms, identity)
	if err != nil {
		return StoredFields{}, err
	}
	return StoredFields{ID: id.String(), Identity: hex.EncodeToString(identity[:])}, nil
}

// Filter is the q of the upsert statement: the document by _id, as the Rust library writes
// it, so that a document another writer stored under this _id without _nk_identity is
// adopted rather than duplicated. On a sharded collection (shard key {_nk_identity: 1} or
// {_id: "hashed"}) add FieldIdentity: Identity, as the library does there.
func (f StoredFields) Filter() map[string]any {
	return map[string]any{FieldID: f.ID}
}

// Update is the u of the upsert statement ({q: Filter(), u: Update(fields), upsert: true}):
// $set of the document's own fields and _nk_identity, $unset of _nk_hash. fields are the
// top-level fields as the Rust type stores them (its serde names and BSON types), without _id.
// A name the library would refuse — _id, a _nk_ name, an empty name, one starting with $ or
// containing . — is an error, so that what one writer stores the other can read.
//
// The maps are plain Go maps, which the MongoDB Go driver encodes like bson.M; their field
// order is Go's map order, which neither the id nor the content hash depends on.
func (f StoredFields) Update(fields map[string]any) (map[string]any, error) {
	set := make(map[string]any, len(fields)+1)
	for name, v := range fields {
		if problem := nameProblem(name); problem != "" {
			return nil, fmt.Errorf("naturalkey: field %q %s", name, problem)
		}
		set[name] = v
	}
	set[FieldIdentity] = f.Identity
	return map[string]any{
		"$set":   set,
		"$unset": map[string]any{FieldHash: ""},
	}, nil
}

// nameProblem is the Rust library's rule for a top-level name (runtime/src/stored.rs,
// name_problem), for a document whose _id the library derives.
func nameProblem(name string) string {
	switch {
	case name == "":
		return "is empty; updates cannot address it"
	case strings.HasPrefix(name, "$"):
		return "starts with $, which engines read as an operator"
	case strings.Contains(name, "."):
		return "contains ., which an update reads as a path into another field"
	case strings.HasPrefix(name, ReservedPrefix):
		return "is reserved: natural-key stores its own fields under _nk_ names"
	case name == FieldID:
		return "is the id derived from the key fields; it is the statement's filter, not a field to set"
	}
	return ""
}
