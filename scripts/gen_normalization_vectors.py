#!/usr/bin/env python3
"""Independent implementation of the text normalization in docs/id-scheme.md (#[key(lowercase)],
#[key(nfc)]), used to compute the normalization golden vectors.

Writes tests/vectors/normalization.json. Like ids.json it is frozen: tests/normalization.rs
(Rust std and unicode-normalization, the spec's reference) and interop/go (golang.org/x/text)
must reproduce every vector; an entry is never edited, only appended.

    python3 scripts/gen_normalization_vectors.py > tests/vectors/normalization.json

CPython's str.lower is the spec's lowercase: full mappings (UnicodeData + unconditional
SpecialCasing), Final_Sigma decided like Rust's and ICU's, no locale. Its tables are older than
the spec's Unicode version (CPython 3.11: 14.0), so every input uses only characters whose
mappings and properties are the same in every version from 14.0 to the spec's; the script checks
that it runs with at least 14.0. Each vector hashes the normalized text as the only key of the
default scheme, without namespace (the key shape of ids.json's simplest vectors).
"""
import hashlib
import json
import struct
import unicodedata

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
PREFIX = b"natural-key/v1\x00"
T = 1700000000000

assert tuple(map(int, unicodedata.unidata_version.split("."))) >= (14, 0, 0), unicodedata.unidata_version


def ulid(ts_ms: int, digest: bytes) -> str:
    assert 0 <= ts_ms < 2**48
    n = (ts_ms << 80) | int.from_bytes(digest[:10], "big")
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def identity(text: str) -> bytes:
    b = text.encode("utf-8")
    m = PREFIX + struct.pack(">I", 0) + bytes([0x01]) + struct.pack(">I", len(b)) + b
    return hashlib.sha256(m).digest()


def normalize(s: str, lowercase: bool, nfc: bool) -> str:
    if lowercase:
        s = s.lower()
    if nfc:
        s = unicodedata.normalize("NFC", s)
    return s


L, N, LN = (True, False), (False, True), (True, True)
CASES = [
    # (name, input, flag sets)
    ("ascii", "Hello-World", [L, N, LN]),
    ("ascii already normalized", "hello-world", [L, N, LN]),
    ("empty", "", [LN]),
    # Titlecase letters are not Uppercase but have lowercase mappings.
    ("titlecase dz U+01C5", "\u01c5emal", [L, N, LN]),
    ("titlecase digraphs", "\u01c5 \u01c8 \u01cb \u01f2", [L]),
    ("greek titlecase with prosgegrammeni", "\u1f88 \u1fbc", [L, N, LN]),
    # Final_Sigma.
    ("final sigma", "\u03a3\u0391\u03a3", [L, N, LN]),
    ("final sigma two words", "\u03a3\u0391\u03a3 \u03a3\u0391\u03a3", [L]),
    ("sigma alone", "\u03a3", [L]),
    ("sigma between letters", "\u0391\u03a3\u0391", [L]),
    ("sigma before a hyphen", "\u0391\u03a3-\u0391", [L]),
    ("sigma before a full stop and a letter", "\u0391\u03a3.\u0391", [L]),
    ("sigma before a combining mark", "\u0391\u03a3\u0301", [L]),
    ("sigma after a cased case-ignorable", "\u02b0\u03a3", [L]),
    ("sigma before 31 case-ignorables and a letter", "\u0391\u03a3" + "'" * 31 + "\u0391", [L]),
    ("small sigma unchanged", "\u03c3\u03c3", [L]),
    # Unconditional SpecialCasing; no Turkish or Lithuanian tailoring.
    ("dotted capital I U+0130", "\u0130stanbul", [L, N, LN]),
    ("capital I and combining dot", "I\u0307", [L, N, LN]),
    ("I grave (no Lithuanian dot)", "\u00cc", [L]),
    ("capital sharp s U+1E9E", "STRA\u1e9eE", [L, N, LN]),
    # Singleton canonical decompositions: NFC replaces them.
    ("kelvin sign U+212A", "\u212a", [L, N, LN]),
    ("ohm sign U+2126", "\u2126", [L, N, LN]),
    # Composition.
    ("E and combining acute", "E\u0301", [L, N, LN]),
    ("J and combining caron (lowercasing denormalizes)", "J\u030c", [L, N, LN]),
    ("hangul conjoining jamo", "\u1100\u1161\u11a8", [L, N, LN]),
    ("composed accents", "Caf\u00e9", [L, N, LN]),
    # NFC is not NFKC: full-width letters stay full-width.
    ("full-width latin", "\uff21\uff22\uff23", [L, N, LN]),
]

out = []
for name, text, flags in CASES:
    for lowercase, nfc in flags:
        normalized = normalize(text, lowercase, nfc)
        digest = identity(normalized)
        out.append({
            "name": name,
            "input": text,
            "lowercase": lowercase,
            "nfc": nfc,
            "normalized": normalized,
            "scheme": "default",
            "namespace": "",
            "timestamp_ms": T,
            "identity": digest.hex(),
            "id": ulid(T, digest),
        })

# ensure_ascii: every non-ASCII character appears as a \\u escape, so the file shows exactly which
# code points a vector holds (combining marks and look-alikes are otherwise invisible).
print(json.dumps({"format": "natural-key normalization vectors v1", "vectors": out}, ensure_ascii=True, indent=1))
