package naturalkey_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	naturalkey "github.com/natural-key/natural-key/interop/go"
	"github.com/natural-key/natural-key/interop/go/internal/vectors"
)

// vectorFile is the golden-vector file shared with the Rust tests (tests/id_scheme.rs).
// NATURAL_KEY_VECTORS overrides it (e.g. to check that a tampered copy fails).
var vectorFile = func() string {
	if p := os.Getenv("NATURAL_KEY_VECTORS"); p != "" {
		return p
	}
	return "../../tests/vectors/ids.json"
}()

func load(t *testing.T) []vectors.Vector {
	t.Helper()
	vs, err := vectors.Load(vectorFile)
	if err != nil {
		t.Fatalf("loading golden vectors: %v", err)
	}
	return vs
}

// find returns the vector with this name and scheme; it fails the test if there is none.
func find(t *testing.T, vs []vectors.Vector, name, scheme string) vectors.Vector {
	t.Helper()
	for _, v := range vs {
		if v.Name == name && v.Scheme == scheme {
			return v
		}
	}
	t.Fatalf("golden vector %q (scheme %s) not found in %s", name, scheme, vectorFile)
	return vectors.Vector{}
}

// TestGoldenVectors checks every vector's id and identity, in both schemes.
func TestGoldenVectors(t *testing.T) {
	vs := load(t)
	perScheme := map[string]int{}
	for _, v := range vs {
		perScheme[v.Scheme]++
		for _, err := range v.Check() {
			t.Error(err)
		}
	}
	if perScheme["default"] == 0 || perScheme["joined"] == 0 {
		t.Errorf("expected vectors of both schemes, got %v", perScheme)
	}
	if !t.Failed() {
		t.Logf("ok %d vectors (%d default, %d joined)", len(vs), perScheme["default"], perScheme["joined"])
	}
}

// TestSeedRecipeLiteral writes the seed blog post's recipe out literally and checks it against
// the "seed post" vector and against JoinedID.
func TestSeedRecipeLiteral(t *testing.T) {
	v := find(t, load(t), "seed post", "joined")
	if len(v.Keys) != 2 || v.Separator != ":" {
		t.Fatalf("%s: expected two keys joined by \":\", got %d keys, separator %q", v.Label(), len(v.Keys), v.Separator)
	}
	slug, lang, publishedAt := v.Keys[0].Text(), v.Keys[1].Text(), v.TimestampMs
	if slug != "hello-world" || lang != "en" {
		t.Fatalf("%s: keys %q, %q, want \"hello-world\", \"en\"", v.Label(), slug, lang)
	}

	sum := sha256.Sum256([]byte(slug + ":" + lang))
	id := ulid.MustNew(publishedAt, bytes.NewReader(sum[:10]))

	if id.String() != v.ID {
		t.Errorf("%s: literal seed recipe id = %s, want %s", v.Label(), id, v.ID)
	}
	if hex.EncodeToString(sum[:]) != v.Identity {
		t.Errorf("%s: literal seed recipe identity = %x, want %s", v.Label(), sum, v.Identity)
	}
	got, err := naturalkey.JoinedID(":", []string{slug, lang}, publishedAt)
	if err != nil {
		t.Fatalf("JoinedID: %v", err)
	}
	if got != id {
		t.Errorf("JoinedID = %s, literal seed recipe = %s", got, id)
	}
}

// TestAmbiguousJoin: ("a:b","c") and ("a","b:c") collide in the joined scheme only.
func TestAmbiguousJoin(t *testing.T) {
	vs := load(t)
	j1 := find(t, vs, "ambiguous join a:b|c", "joined")
	j2 := find(t, vs, "ambiguous join a|b:c", "joined")
	d1 := find(t, vs, "unambiguous a:b|c", "default")
	d2 := find(t, vs, "unambiguous a|b:c", "default")
	if j1.ID != j2.ID || j1.Identity != j2.Identity {
		t.Errorf("joined scheme: %s and %s should collide, got %s and %s", j1.Label(), j2.Label(), j1.ID, j2.ID)
	}
	if d1.ID == d2.ID || d1.Identity == d2.Identity {
		t.Errorf("default scheme: %s and %s must not collide, both %s", d1.Label(), d2.Label(), d1.ID)
	}

	const ms = 1700000000000
	a, _ := naturalkey.JoinedID(":", []string{"a:b", "c"}, ms)
	b, _ := naturalkey.JoinedID(":", []string{"a", "b:c"}, ms)
	if a != b || a.String() != j1.ID {
		t.Errorf("JoinedID: %s and %s, want both %s", a, b, j1.ID)
	}
	c, _ := naturalkey.DefaultID("", []naturalkey.Key{naturalkey.Str("a:b"), naturalkey.Str("c")}, ms)
	d, _ := naturalkey.DefaultID("", []naturalkey.Key{naturalkey.Str("a"), naturalkey.Str("b:c")}, ms)
	if c == d || c.String() != d1.ID || d.String() != d2.ID {
		t.Errorf("DefaultID: %s and %s, want %s and %s", c, d, d1.ID, d2.ID)
	}
}

// TestSpecExample hashes the byte dump printed in docs/id-scheme.md.
func TestSpecExample(t *testing.T) {
	msg, err := hex.DecodeString(strings.Join([]string{
		"6e61747572616c2d6b65792f763100",
		"00000000",
		"01", "0000000b", "68656c6c6f2d776f726c64",
		"01", "00000002", "656e",
	}, ""))
	if err != nil {
		t.Fatal(err)
	}
	const wantIdentity = "743d06fc585ce400a5ca0866fb38437dc9686081cbf0db2c12010d3fd62caf82"
	if got := sha256.Sum256(msg); hex.EncodeToString(got[:]) != wantIdentity {
		t.Errorf("spec dump hashes to %x, spec says %s", got, wantIdentity)
	}
	sum, err := naturalkey.Identity("", []naturalkey.Key{naturalkey.Str("hello-world"), naturalkey.Str("en")})
	if err != nil || hex.EncodeToString(sum[:]) != wantIdentity {
		t.Errorf("Identity = %x, %v; want %s", sum, err, wantIdentity)
	}
}

func TestTimestampRange(t *testing.T) {
	keys := []naturalkey.Key{naturalkey.Str("x")}
	for _, ms := range []uint64{1 << 48, 1<<48 + 1, 1<<64 - 1} {
		if _, err := naturalkey.DefaultID("", keys, ms); !errors.Is(err, naturalkey.ErrTimestampOutOfRange) {
			t.Errorf("DefaultID(ms=%d): err = %v, want ErrTimestampOutOfRange", ms, err)
		}
		if _, err := naturalkey.JoinedKeysID(":", keys, ms); !errors.Is(err, naturalkey.ErrTimestampOutOfRange) {
			t.Errorf("JoinedKeysID(ms=%d): err = %v, want ErrTimestampOutOfRange", ms, err)
		}
		if _, err := naturalkey.JoinedID(":", []string{"x"}, ms); !errors.Is(err, naturalkey.ErrTimestampOutOfRange) {
			t.Errorf("JoinedID(ms=%d): err = %v, want ErrTimestampOutOfRange", ms, err)
		}
	}
	id, err := naturalkey.DefaultID("", keys, naturalkey.MaxTimestampMs)
	if err != nil || id.Time() != naturalkey.MaxTimestampMs {
		t.Errorf("DefaultID(ms=2^48-1) = %s, %v", id, err)
	}
}

func TestNulRejected(t *testing.T) {
	keys := []naturalkey.Key{naturalkey.Str("ok"), naturalkey.Str("a\x00b")}
	if _, err := naturalkey.DefaultID("", keys, 0); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("DefaultID: err = %v, want ErrNulByte", err)
	}
	if _, err := naturalkey.Identity("", keys); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("Identity: err = %v, want ErrNulByte", err)
	}
	if _, err := naturalkey.JoinedKeysID(":", keys, 0); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("JoinedKeysID: err = %v, want ErrNulByte", err)
	}
	if _, err := naturalkey.JoinedID(":", []string{"ok", "a\x00b"}, 0); !errors.Is(err, naturalkey.ErrNulByte) {
		t.Errorf("JoinedID: err = %v, want ErrNulByte", err)
	}
	// NUL is fine inside byte strings: they are not text.
	if _, err := naturalkey.DefaultID("", []naturalkey.Key{naturalkey.Bytes([]byte{0})}, 0); err != nil {
		t.Errorf("DefaultID(bytes 00): %v", err)
	}
}

func TestIntegers(t *testing.T) {
	id := func(k naturalkey.Key) string {
		t.Helper()
		u, err := naturalkey.DefaultID("", []naturalkey.Key{k}, 0)
		if err != nil {
			t.Fatalf("DefaultID(%v): %v", k.Text(), err)
		}
		return u.String()
	}
	// i32 5, i64 5, u64 5 and i128 5 agree.
	if a, b, c := id(naturalkey.Int(5)), id(naturalkey.Uint(5)), id(naturalkey.BigInt(big.NewInt(5))); a != b || b != c {
		t.Errorf("5 as int64/uint64/big.Int: %s %s %s", a, b, c)
	}
	if id(naturalkey.Int(-1)) == id(naturalkey.Uint(1<<64-1)) {
		t.Error("-1 and 2^64-1 must differ (16-byte two's complement, not 8)")
	}
	minI128 := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127))
	maxI128 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	id(naturalkey.BigInt(minI128))
	id(naturalkey.BigInt(maxI128))
	for _, n := range []*big.Int{new(big.Int).Add(maxI128, big.NewInt(1)), new(big.Int).Sub(minI128, big.NewInt(1))} {
		if _, err := naturalkey.DefaultID("", []naturalkey.Key{naturalkey.BigInt(n)}, 0); !errors.Is(err, naturalkey.ErrIntOutOfRange) {
			t.Errorf("DefaultID(%s): err = %v, want ErrIntOutOfRange", n, err)
		}
	}
}

// TestJoinedIDTyped: JoinedID over strings equals JoinedKeysID over text keys.
func TestJoinedIDTyped(t *testing.T) {
	for _, sep := range []string{":", "/", "", "::"} {
		a, err1 := naturalkey.JoinedID(sep, []string{"台北", "", "zh-TW"}, 42)
		b, err2 := naturalkey.JoinedKeysID(sep, []naturalkey.Key{naturalkey.Str("台北"), naturalkey.None(), naturalkey.Str("zh-TW")}, 42)
		if err1 != nil || err2 != nil || a != b {
			t.Errorf("separator %q: JoinedID %s (%v), JoinedKeysID %s (%v)", sep, a, err1, b, err2)
		}
	}
}
