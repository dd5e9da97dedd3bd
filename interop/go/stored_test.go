package naturalkey_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	naturalkey "github.com/natural-key/natural-key/interop/go"
)

// TestStoredFieldsGolden: for every golden vector, the hex identity and the stored fields a
// writer gets are the vector's identity and id, in their stored text forms.
func TestStoredFieldsGolden(t *testing.T) {
	for _, v := range load(t) {
		var hex string
		var err error
		switch v.Scheme {
		case "default":
			hex, err = naturalkey.IdentityHex(v.Namespace, v.Keys)
		case "joined":
			hex, err = naturalkey.JoinedIdentityHex(v.Separator, v.Keys)
		}
		if err != nil || hex != v.Identity {
			t.Errorf("%s: identity hex = %q, %v; want %s", v.Label(), hex, err, v.Identity)
		}
		f, err := v.StoredFields()
		if err != nil {
			t.Errorf("%s: %v", v.Label(), err)
			continue
		}
		if f.ID != v.ID || f.Identity != v.Identity {
			t.Errorf("%s: stored fields %+v, want {%s %s}", v.Label(), f, v.ID, v.Identity)
		}
		if f.ID != strings.ToUpper(f.ID) || f.Identity != strings.ToLower(f.Identity) {
			t.Errorf("%s: stored text forms must be an uppercase id and a lowercase identity: %+v", v.Label(), f)
		}
	}
}

// Worked example of docs/id-scheme.md, "Writing from another language": the same literals are
// asserted against the Rust library in tests/other_writers.rs.
const (
	exampleMs       = 1709285400123 // 2024-03-01T09:30:00.123Z
	exampleID       = "01HQWNJQHVYFS02189P4P8M0NY"
	exampleIdentity = "f3f2010509b12c8a02be714ab620abadcc626eb34d55dc44fc43b1ac2ec5d7bf"
)

func TestWorkedExample(t *testing.T) {
	keys := []naturalkey.Key{naturalkey.Str("retries"), naturalkey.Str("en")}
	f, err := naturalkey.DefaultStoredFields("blog.post", keys, exampleMs)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != exampleID || f.Identity != exampleIdentity {
		t.Fatalf("stored fields %+v, want {%s %s}", f, exampleID, exampleIdentity)
	}
	if got := f.Filter(); !reflect.DeepEqual(got, map[string]any{"_id": exampleID}) {
		t.Errorf("Filter() = %v", got)
	}
	fields := map[string]any{"slug": "retries", "lang": "en", "title": "Retries", "body": "Again."}
	u, err := f.Update(fields)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"$set": map[string]any{
			"slug": "retries", "lang": "en", "title": "Retries", "body": "Again.",
			"_nk_identity": exampleIdentity,
		},
		"$unset": map[string]any{"_nk_hash": ""},
	}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("Update() = %v\nwant %v", u, want)
	}
	if _, ok := fields["_nk_identity"]; ok {
		t.Error("Update changed the caller's map")
	}
}

func TestUpdateRefusesNamesTheLibraryRefuses(t *testing.T) {
	f := naturalkey.StoredFields{ID: exampleID, Identity: exampleIdentity}
	for _, name := range []string{"_id", "_nk_identity", "_nk_hash", "_nk_anything", "", "$set", "a.b"} {
		if _, err := f.Update(map[string]any{"slug": "x", name: 1}); err == nil {
			t.Errorf("Update accepted the field name %q", name)
		}
	}
	for _, name := range []string{"_idx", "nk_identity", "_n", "a$", "id"} {
		if _, err := f.Update(map[string]any{name: 1}); err != nil {
			t.Errorf("Update refused %q: %v", name, err)
		}
	}
}

func TestStoredFieldsErrors(t *testing.T) {
	keys := []naturalkey.Key{naturalkey.Str("x")}
	if _, err := naturalkey.DefaultStoredFields("", keys, 1<<48); !errors.Is(err, naturalkey.ErrTimestampOutOfRange) {
		t.Errorf("DefaultStoredFields(ms=2^48): %v", err)
	}
	if _, err := naturalkey.JoinedStoredFields(":", keys, 1<<48); !errors.Is(err, naturalkey.ErrTimestampOutOfRange) {
		t.Errorf("JoinedStoredFields(ms=2^48): %v", err)
	}
	nul := []naturalkey.Key{naturalkey.Str("a\x00")}
	if _, err := naturalkey.DefaultStoredFields("", nul, 0); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("DefaultStoredFields(NUL): %v", err)
	}
	if _, err := naturalkey.IdentityHex("", nul); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("IdentityHex(NUL): %v", err)
	}
	if _, err := naturalkey.JoinedIdentityHex(":", nul); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("JoinedIdentityHex(NUL): %v", err)
	}
}

// TestNoIdentityKeys: the id the spec gives for a key list with no identity key (the Rust
// derive refuses such a type): the identity of the bare prefix, or of the empty string.
func TestNoIdentityKeys(t *testing.T) {
	d, err := naturalkey.IdentityHex("", nil)
	if err != nil || d != "d30c784bc6eba7fc9754445afdafb2214df055dae3cbda5ca851a0ef711dcdda" {
		t.Errorf("IdentityHex(\"\", no keys) = %s, %v", d, err)
	}
	j, err := naturalkey.JoinedIdentityHex(":", nil)
	if err != nil || j != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("JoinedIdentityHex(\":\", no keys) = %s, %v", j, err)
	}
}
