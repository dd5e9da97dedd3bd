// Package vectors decodes the shared golden-vector file tests/vectors/ids.json (written by
// scripts/gen_vectors.py) and checks one vector against package naturalkey.
package vectors

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"

	"github.com/oklog/ulid/v2"

	naturalkey "github.com/natural-key/natural-key/interop/go"
)

// Format is the expected value of the file's "format" field.
const Format = "natural-key id vectors v1"

// Vector is one golden vector.
type Vector struct {
	Index       int // position in the file, 0-based
	Name        string
	Scheme      string // "default" or "joined"
	Keys        []naturalkey.Key
	TimestampMs uint64
	Namespace   string // default scheme
	Separator   string // joined scheme
	Identity    string // 64 lowercase hex digits
	ID          string // 26-character ULID
}

// Label names the vector in messages; names repeat across schemes, so it includes both.
func (v Vector) Label() string {
	return fmt.Sprintf("vector #%d %q (scheme %s)", v.Index, v.Name, v.Scheme)
}

type fileJSON struct {
	Format  string       `json:"format"`
	Vectors []vectorJSON `json:"vectors"`
}

type vectorJSON struct {
	Name        string    `json:"name"`
	Scheme      string    `json:"scheme"`
	Keys        []keyJSON `json:"keys"`
	TimestampMs *uint64   `json:"timestamp_ms"`
	Namespace   *string   `json:"namespace"`
	Separator   *string   `json:"separator"`
	Identity    string    `json:"identity"`
	ID          string    `json:"id"`
}

type keyJSON struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// Load reads and decodes the vector file. Unknown schemes or key types are errors, never
// skipped.
func Load(path string) ([]Vector, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Format != Format {
		return nil, fmt.Errorf("%s: format %q, want %q", path, f.Format, Format)
	}
	if len(f.Vectors) == 0 {
		return nil, fmt.Errorf("%s: no vectors", path)
	}
	out := make([]Vector, 0, len(f.Vectors))
	for i, vj := range f.Vectors {
		v, err := decode(i, vj)
		if err != nil {
			return nil, fmt.Errorf("%s: vector #%d %q: %w", path, i, vj.Name, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func decode(i int, vj vectorJSON) (Vector, error) {
	v := Vector{Index: i, Name: vj.Name, Scheme: vj.Scheme, Identity: vj.Identity, ID: vj.ID}
	if vj.TimestampMs == nil {
		return v, errors.New("missing timestamp_ms")
	}
	v.TimestampMs = *vj.TimestampMs
	switch vj.Scheme {
	case "default":
		if vj.Namespace == nil {
			return v, errors.New("default-scheme vector without namespace")
		}
		v.Namespace = *vj.Namespace
	case "joined":
		if vj.Separator == nil {
			return v, errors.New("joined-scheme vector without separator")
		}
		v.Separator = *vj.Separator
	default:
		return v, fmt.Errorf("unknown scheme %q", vj.Scheme)
	}
	if len(vj.Identity) != 64 || len(vj.ID) != 26 {
		return v, fmt.Errorf("malformed expected identity %q or id %q", vj.Identity, vj.ID)
	}
	for j, kj := range vj.Keys {
		k, err := decodeKey(kj)
		if err != nil {
			return v, fmt.Errorf("key %d: %w", j, err)
		}
		v.Keys = append(v.Keys, k)
	}
	return v, nil
}

func decodeKey(kj keyJSON) (naturalkey.Key, error) {
	str := func() (string, error) {
		var s string
		err := json.Unmarshal(kj.Value, &s)
		return s, err
	}
	switch kj.Type {
	case "none":
		return naturalkey.None(), nil
	case "str":
		s, err := str()
		return naturalkey.Str(s), err
	case "int":
		n, ok := new(big.Int).SetString(string(bytes.TrimSpace(kj.Value)), 10)
		if !ok {
			return naturalkey.Key{}, fmt.Errorf("int value %s is not a JSON integer", kj.Value)
		}
		return naturalkey.BigInt(n), nil
	case "bool":
		var b bool
		err := json.Unmarshal(kj.Value, &b)
		return naturalkey.Bool(b), err
	case "bytes":
		s, err := str()
		if err != nil {
			return naturalkey.Key{}, err
		}
		b, err := hex.DecodeString(s)
		return naturalkey.Bytes(b), err
	case "uuid":
		s, err := str()
		if err != nil {
			return naturalkey.Key{}, err
		}
		var u [16]byte
		if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return naturalkey.Key{}, fmt.Errorf("uuid %q is not in hyphenated form", s)
		}
		b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
		if err != nil || len(b) != 16 {
			return naturalkey.Key{}, fmt.Errorf("uuid %q: %v", s, err)
		}
		copy(u[:], b)
		return naturalkey.UUID(u), nil
	case "objectid":
		s, err := str()
		if err != nil {
			return naturalkey.Key{}, err
		}
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != 12 {
			return naturalkey.Key{}, fmt.Errorf("objectid %q: want 24 hex digits (%v)", s, err)
		}
		var o [12]byte
		copy(o[:], b)
		return naturalkey.ObjectID(o), nil
	}
	return naturalkey.Key{}, fmt.Errorf("unknown key type %q", kj.Type)
}

// Compute derives the vector's identity and id with package naturalkey.
func (v Vector) Compute() (identity [32]byte, id ulid.ULID, err error) {
	switch v.Scheme {
	case "default":
		if identity, err = naturalkey.Identity(v.Namespace, v.Keys); err != nil {
			return
		}
		id, err = naturalkey.DefaultID(v.Namespace, v.Keys, v.TimestampMs)
	case "joined":
		if identity, err = naturalkey.JoinedIdentity(v.Separator, v.Keys); err != nil {
			return
		}
		id, err = naturalkey.JoinedKeysID(v.Separator, v.Keys, v.TimestampMs)
	default:
		err = fmt.Errorf("unknown scheme %q", v.Scheme)
	}
	return
}

// StoredFields derives the vector's _id and _nk_identity with package naturalkey's
// StoredFields functions, the ones a writer uses.
func (v Vector) StoredFields() (naturalkey.StoredFields, error) {
	switch v.Scheme {
	case "default":
		return naturalkey.DefaultStoredFields(v.Namespace, v.Keys, v.TimestampMs)
	case "joined":
		return naturalkey.JoinedStoredFields(v.Separator, v.Keys, v.TimestampMs)
	}
	return naturalkey.StoredFields{}, fmt.Errorf("unknown scheme %q", v.Scheme)
}

// Check computes the vector and returns one error per mismatch (nil when it matches): the
// identity and id, then the stored fields a writer gets for them.
func (v Vector) Check() []error {
	identity, id, err := v.Compute()
	if err != nil {
		return []error{fmt.Errorf("%s: %w", v.Label(), err)}
	}
	var errs []error
	if got := hex.EncodeToString(identity[:]); got != v.Identity {
		errs = append(errs, fmt.Errorf("%s: identity = %s, want %s", v.Label(), got, v.Identity))
	}
	if got := id.String(); got != v.ID {
		errs = append(errs, fmt.Errorf("%s: id = %s, want %s", v.Label(), got, v.ID))
	}
	if id.Time() != v.TimestampMs {
		errs = append(errs, fmt.Errorf("%s: id timestamp = %d, want %d", v.Label(), id.Time(), v.TimestampMs))
	}
	// The id's low 80 bits are the identity's first 10 bytes: a reader holding only an _id
	// can check it against the stored identity.
	if !bytes.Equal(id[6:], identity[:10]) {
		errs = append(errs, fmt.Errorf("%s: id %s does not end in identity[0:10] %x", v.Label(), id, identity[:10]))
	}
	stored, err := v.StoredFields()
	if err != nil {
		return append(errs, fmt.Errorf("%s: stored fields: %w", v.Label(), err))
	}
	if stored.ID != v.ID || stored.Identity != v.Identity {
		errs = append(errs, fmt.Errorf("%s: stored fields = {_id: %s, _nk_identity: %s}, want {_id: %s, _nk_identity: %s}",
			v.Label(), stored.ID, stored.Identity, v.ID, v.Identity))
	}
	return errs
}

// NormalizationFormat is the expected "format" of tests/vectors/normalization.json (written by
// scripts/gen_normalization_vectors.py).
const NormalizationFormat = "natural-key normalization vectors v1"

// NormVector is one normalization vector: Input normalized with the flags gives Normalized,
// whose id as the only key of the embedded vector's scheme is ID.
type NormVector struct {
	Vector
	Input         string
	Normalization naturalkey.Normalization
	Normalized    string
}

// Label names the vector in messages; names repeat across flag sets, so it includes them.
func (v NormVector) Label() string {
	return fmt.Sprintf("normalization vector #%d %q (lowercase=%t, nfc=%t)", v.Index, v.Name,
		v.Normalization&naturalkey.Lowercase != 0, v.Normalization&naturalkey.NFC != 0)
}

type normFileJSON struct {
	Format  string           `json:"format"`
	Vectors []normVectorJSON `json:"vectors"`
}

type normVectorJSON struct {
	vectorJSON
	Input      *string `json:"input"`
	Lowercase  *bool   `json:"lowercase"`
	NFC        *bool   `json:"nfc"`
	Normalized *string `json:"normalized"`
}

// LoadNormalization reads and decodes the normalization vector file. Missing fields are errors.
func LoadNormalization(path string) ([]NormVector, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f normFileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Format != NormalizationFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", path, f.Format, NormalizationFormat)
	}
	if len(f.Vectors) == 0 {
		return nil, fmt.Errorf("%s: no vectors", path)
	}
	out := make([]NormVector, 0, len(f.Vectors))
	for i, vj := range f.Vectors {
		if vj.Input == nil || vj.Lowercase == nil || vj.NFC == nil || vj.Normalized == nil {
			return nil, fmt.Errorf("%s: vector #%d %q: missing input, lowercase, nfc or normalized", path, i, vj.Name)
		}
		// The key is the normalized text, so the id part decodes like an ids.json vector.
		raw, err := json.Marshal(*vj.Normalized)
		if err != nil {
			return nil, err
		}
		vj.Keys = []keyJSON{{Type: "str", Value: raw}}
		v, err := decode(i, vj.vectorJSON)
		if err != nil {
			return nil, fmt.Errorf("%s: vector #%d %q: %w", path, i, vj.Name, err)
		}
		nv := NormVector{Vector: v, Input: *vj.Input, Normalized: *vj.Normalized}
		if *vj.Lowercase {
			nv.Normalization |= naturalkey.Lowercase
		}
		if *vj.NFC {
			nv.Normalization |= naturalkey.NFC
		}
		out = append(out, nv)
	}
	return out, nil
}

// Check normalizes the input and returns one error per mismatch (nil when it matches): the
// normalized text, then the id and identity of that text.
func (v NormVector) Check() []error {
	got := naturalkey.Normalize(v.Input, v.Normalization)
	if got != v.Normalized {
		return []error{fmt.Errorf("%s: Normalize(%+q) = %+q, want %+q", v.Label(), v.Input, got, v.Normalized)}
	}
	errs := v.Vector.Check()
	for i, err := range errs {
		errs[i] = fmt.Errorf("%s: %w", v.Label(), err)
	}
	return errs
}
