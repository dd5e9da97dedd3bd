package naturalkey_test

import (
	"reflect"
	"testing"
	"time"

	naturalkey "github.com/natural-key/natural-key/interop/go"
)

// TestVersionedStatements: the versioned upsert and delete of docs/id-scheme.md ("Writing from
// another language", "A versioned writer"), built for the worked example; tests/other_writers.rs
// sends the same documents to the engine against the Rust library.
func TestVersionedStatements(t *testing.T) {
	if naturalkey.FieldVersion != "_nk_version" || naturalkey.FieldDeleted != "_nk_deleted" {
		t.Fatalf("stored names changed: %q %q", naturalkey.FieldVersion, naturalkey.FieldDeleted)
	}
	f := naturalkey.StoredFields{ID: exampleID, Identity: exampleIdentity}

	q := f.VersionedFilter(3)
	wantQ := map[string]any{
		"_id":         exampleID,
		"_nk_version": map[string]any{"$not": map[string]any{"$gte": int64(3)}},
	}
	if !reflect.DeepEqual(q, wantQ) {
		t.Errorf("VersionedFilter(3) = %v\nwant %v", q, wantQ)
	}

	fields := map[string]any{"slug": "retries", "lang": "en", "rev": int64(3), "body": "Again."}
	u, err := f.VersionedUpdate(fields, 3)
	if err != nil {
		t.Fatal(err)
	}
	wantU := map[string]any{
		"$set": map[string]any{
			"slug": "retries", "lang": "en", "rev": int64(3), "body": "Again.",
			"_nk_identity": exampleIdentity,
			"_nk_version":  int64(3),
		},
		"$unset": map[string]any{"_nk_hash": "", "_nk_deleted": ""},
	}
	if !reflect.DeepEqual(u, wantU) {
		t.Errorf("VersionedUpdate() = %v\nwant %v", u, wantU)
	}
	// The version is an int64 whatever the caller's literal: the Rust library reads int64.
	if _, ok := u["$set"].(map[string]any)["_nk_version"].(int64); !ok {
		t.Error("_nk_version is not an int64")
	}
	if _, ok := fields["_nk_version"]; ok {
		t.Error("VersionedUpdate changed the caller's map")
	}
	if _, err := f.VersionedUpdate(map[string]any{"_nk_version": int64(3)}, 3); err == nil {
		t.Error("VersionedUpdate accepted a _nk_ field of the caller's")
	}

	dq := f.TombstoneFilter(5)
	wantDQ := map[string]any{
		"_id":         exampleID,
		"_nk_version": map[string]any{"$not": map[string]any{"$gt": int64(5)}},
	}
	if !reflect.DeepEqual(dq, wantDQ) {
		t.Errorf("TombstoneFilter(5) = %v\nwant %v", dq, wantDQ)
	}
	at := time.UnixMilli(1709337600456).UTC()
	tomb := f.Tombstone(5, at)
	wantT := map[string]any{"_nk_identity": exampleIdentity, "_nk_version": int64(5), "_nk_deleted": at}
	if !reflect.DeepEqual(tomb, wantT) {
		t.Errorf("Tombstone() = %v\nwant %v", tomb, wantT)
	}
	// A replacement: no operator, no _id (the filter's), nothing but the three fields.
	for name := range tomb {
		if name == "_id" || name[0] == '$' {
			t.Errorf("Tombstone holds %q", name)
		}
	}
}

// TestInstantVersion: Unix milliseconds, floored, as the spec gives them (the Rust library's
// rfc3339_millis examples).
func TestInstantVersion(t *testing.T) {
	for _, c := range []struct {
		text string
		want int64
	}{
		{"2023-11-14T22:13:20Z", 1700000000000},
		{"2023-11-14T23:13:20.1239+01:00", 1700000000123},
		{"1969-12-31T23:59:59.9995Z", -1},
		{"1969-12-31T23:59:59.9985Z", -2},
		{"1970-01-01T00:00:00.000999999Z", 0},
	} {
		tm, err := time.Parse(time.RFC3339Nano, c.text)
		if err != nil {
			t.Fatal(err)
		}
		if got := naturalkey.InstantVersion(tm); got != c.want {
			t.Errorf("InstantVersion(%s) = %d, want %d", c.text, got, c.want)
		}
	}
}
