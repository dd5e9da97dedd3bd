package naturalkey_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"

	naturalkey "github.com/natural-key/natural-key/interop/go"
	"github.com/natural-key/natural-key/interop/go/internal/vectors"
)

// normVectorFile is the normalization vector file shared with tests/normalization.rs;
// NATURAL_KEY_NORMALIZATION_VECTORS overrides it.
var normVectorFile = func() string {
	if p := os.Getenv("NATURAL_KEY_NORMALIZATION_VECTORS"); p != "" {
		return p
	}
	return "../../tests/vectors/normalization.json"
}()

// TestNormalizationVectors checks every vector's normalized text, id and identity.
func TestNormalizationVectors(t *testing.T) {
	vs, err := vectors.LoadNormalization(normVectorFile)
	if err != nil {
		t.Fatalf("loading normalization vectors: %v", err)
	}
	perFlags := map[naturalkey.Normalization]int{}
	for _, v := range vs {
		perFlags[v.Normalization]++
		for _, err := range v.Check() {
			t.Error(err)
		}
	}
	for _, n := range []naturalkey.Normalization{naturalkey.Lowercase, naturalkey.NFC, naturalkey.Lowercase | naturalkey.NFC} {
		if perFlags[n] == 0 {
			t.Errorf("no vectors with normalization %d", n)
		}
	}
	if !t.Failed() {
		t.Logf("ok %d normalization vectors", len(vs))
	}
}

// TestFinalSigmaUnlikeXText pins the two inputs where x/text's own final-sigma handling differs
// from the spec (and Rust), which is why Normalize decides Final_Sigma itself. If x/text ever
// agrees, the workaround can go.
func TestFinalSigmaUnlikeXText(t *testing.T) {
	for _, c := range []struct{ in, spec string }{
		// U+02B0 is Cased and Case_Ignorable: the spec skips it, so no cased letter precedes.
		{"\u02b0\u03a3", "\u02b0\u03c3"},
		// x/text stops looking after 30 case-ignorables; the spec does not.
		{"\u0391\u03a3" + strings.Repeat("'", 31) + "\u0391", "\u03b1\u03c3" + strings.Repeat("'", 31) + "\u03b1"},
	} {
		if got := naturalkey.Normalize(c.in, naturalkey.Lowercase); got != c.spec {
			t.Errorf("Normalize(%+q, Lowercase) = %+q, want %+q", c.in, got, c.spec)
		}
		if x := cases.Lower(language.Und).String(c.in); x == c.spec {
			t.Logf("x/text now agrees on %+q", c.in)
		}
	}
}

func TestNormalizeNothing(t *testing.T) {
	for _, s := range []string{"", "ABC", "E\u0301", "\u03a3"} {
		if got := naturalkey.Normalize(s, 0); got != s {
			t.Errorf("Normalize(%+q, 0) = %+q", s, got)
		}
	}
}

// TestNormalizeKeepsSmallSigmas: only a capital sigma depends on its context.
func TestNormalizeKeepsSmallSigmas(t *testing.T) {
	for _, s := range []string{"\u03c3", "\u03b1\u03c3", "\u03c2\u03b1", "\u03a3\u03c2"} {
		want := strings.ReplaceAll(s, "\u03a3", "\u03c3")
		if got := naturalkey.Normalize(s, naturalkey.Lowercase); got != want {
			t.Errorf("Normalize(%+q, Lowercase) = %+q, want %+q", s, got, want)
		}
	}
}
