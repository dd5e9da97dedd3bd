package naturalkey

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// Normalization is the text normalization of a Rust #[key(lowercase)] and/or #[key(nfc)]
// field; combine the flags with |. Only text keys are normalized.
type Normalization uint8

const (
	// Lowercase is #[key(lowercase)]: Unicode full lowercase mapping without a locale,
	// Final_Sigma included (docs/id-scheme.md, "Normalization").
	Lowercase Normalization = 1 << iota
	// NFC is #[key(nfc)]: Unicode Normalization Form C, applied after Lowercase.
	NFC
)

// Normalize applies n to s as docs/id-scheme.md specifies: lowercase first (it can
// denormalize), then NFC. Build the key from the result:
//
//	naturalkey.Str(naturalkey.Normalize(title, naturalkey.Lowercase|naturalkey.NFC))
//
// The tables are golang.org/x/text's (cases.UnicodeVersion, norm.Version) and the unicode
// package's, both chosen by the Go toolchain: Unicode 15.0.0 with Go 1.26 (x/text v0.44.0
// switches to 17.0.0 tables with Go 1.27). The spec is Unicode 17.0.0, so built with Go 1.26
// Normalize differs from it, and from Rust, for characters assigned after 15.0 (U+A7CB
// lowercases to U+0264 only under 17.0) and in the Final_Sigma context of U+0295 and U+1171E,
// whose properties changed (docs/id-scheme.md, "Unicode version"). Compared code point by code
// point with Rust 1.95, it agrees on every other character. s must be valid UTF-8, like every
// Rust string.
func Normalize(s string, n Normalization) string {
	if n&Lowercase != 0 {
		s = lowercase(s)
	}
	if n&NFC != 0 {
		s = norm.NFC.String(s)
	}
	return s
}

const capitalSigma = "Σ" // U+03A3, the only context-dependent lowercase mapping applied

// lowercase is Rust's str::to_lowercase. x/text does the per-character mappings; Final_Sigma is
// decided here because x/text's own rule differs from Rust's (and ICU's) for characters that
// are both Cased and Case_Ignorable before the sigma (U+02B0 "ʰΣ": x/text gives ς, Rust σ)
// and gives up after 30 case-ignorables following it.
func lowercase(s string) string {
	if asciiWithoutUpper(s) {
		return s
	}
	// Without final-sigma handling x/text lowercases rune by rune, so the pieces between
	// capital sigmas can be mapped independently. A Caser is stateful: one per call.
	lower := cases.Lower(language.Und, cases.HandleFinalSigma(false))
	var b strings.Builder
	b.Grow(len(s))
	rest := 0
	for rest < len(s) {
		i := strings.Index(s[rest:], capitalSigma)
		if i < 0 {
			break
		}
		i += rest
		b.WriteString(lower.String(s[rest:i]))
		if finalSigma(s[:i], s[i+len(capitalSigma):]) {
			b.WriteString("ς")
		} else {
			b.WriteString("σ")
		}
		rest = i + len(capitalSigma)
	}
	b.WriteString(lower.String(s[rest:]))
	return b.String()
}

func asciiWithoutUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// finalSigma is Rust's test (alloc::str::to_lowercase, like ICU's): skipping Case_Ignorable
// characters, the nearest other character before the sigma is Cased and the nearest one after
// it is not (or there is none). A character that is both is skipped, not counted as cased.
func finalSigma(before, after string) bool {
	for len(before) > 0 {
		r, n := utf8.DecodeLastRuneInString(before)
		if !caseIgnorable(r) {
			if !cased(r) {
				return false
			}
			break
		}
		before = before[:len(before)-n]
	}
	if len(before) == 0 {
		return false
	}
	for _, r := range after {
		if !caseIgnorable(r) {
			return !cased(r)
		}
	}
	return true
}

// cased is the derived property Cased: Lowercase + Uppercase + Lt (DerivedCoreProperties.txt).
func cased(r rune) bool {
	return unicode.In(r, unicode.Ll, unicode.Lu, unicode.Lt, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// caseIgnorable is the derived property Case_Ignorable: Mn + Me + Cf + Lm + Sk +
// Word_Break=MidLetter, MidNumLet or Single_Quote. Go has no Word_Break table, so those
// characters are listed (WordBreakProperty.txt). With Go 1.26's categories this matched
// Rust 1.95's Case_Ignorable on every character assigned in 15.0 except U+1171E.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', // Single_Quote
		'.', '\u2018', '\u2019', '\u2024', '\uFE52', '\uFF07', '\uFF0E', // MidNumLet
		':', '\u00B7', '\u0387', '\u055F', '\u05F4', '\u2027', '\uFE13', '\uFE55', '\uFF1A': // MidLetter
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}
