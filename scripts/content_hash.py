#!/usr/bin/env python3
"""Independent implementation of the content hash of docs/id-scheme.md ("Content hash", v1 and v2).

Written from that document alone, never from the Rust code, so that the golden vectors it
computes check the Rust implementation rather than restate it. Python standard library only.

    python3 scripts/content_hash.py --write tests/vectors/content.json   # (re)generate
    python3 scripts/content_hash.py --check tests/vectors/content.json   # CI: recompute, diff
    python3 scripts/content_hash.py value.json                            # hash one document

(value.json: a v1 list of fields, or a v2 object {"document": ..., "skip_hash": [...]}.)

The content hash is defined over serde's data model, so the vectors describe values in that
model, language-neutrally, as JSON. A value is an object with exactly one key:

    {"unit": null}  {"none": null}  {"unit_struct": "Name"}
    {"bool": true}
    {"i8": "-5"} ... {"i128": "..."}, {"u8": "5"} ... {"u128": "..."}, {"isize": ..}, {"usize": ..}
                                   decimal strings, so no JSON reader rounds them
    {"f64": "1.5"} {"f64": "-0.0"} {"f64": "NaN"} {"f64": "inf"} {"f64": "-inf"}
    {"f32": "0.1"}                 the decimal is rounded to the nearest f32
    {"f64_bits": "7ff0000000000001"} {"f32_bits": "7fc00001"}   exact bit patterns (NaN payloads)
    {"char": "x"} {"str": "..."}
    {"bytes": "00ff"}              serde's bytes (serialize_bytes), hex
    {"some": v}
    {"newtype_struct": ["Name", v]}
    {"seq": [v, ...]} {"tuple": [v, ...]} {"tuple_struct": ["Name", [v, ...]]}
    {"map": [[k, v], ...]}         entries in the order the Rust value iterates them
    {"struct": ["Name", [["field", v], ...]]}    serialized fields, in serde's order
    {"unit_variant": ["Enum", "Variant"]}
    {"newtype_variant": ["Enum", "Variant", v]}
    {"tuple_variant": ["Enum", "Variant", [v, ...]]}
    {"struct_variant": ["Enum", "Variant", [["field", v], ...]]}

Type and enum names are carried for the reader; the format does not hash them.

A document (the #[derive(NaturalKey)] struct) is a list of fields, each
["name", v] or ["name", v, "skip_hash"], in declaration order. The name is the Rust
identifier as the derive reads it (`r#type` stays "r#type") and the value is the field type's
own serde value: serde attributes on the document's fields do not apply at this level (they do
inside the values). Skipped fields keep their value in the file so the Rust side can build the
same document and prove the value does not matter. Such a vector is v1.

An untyped vector ("version": "untyped") describes a document without a Rust type (what
`natural-key ingest` and `KeySpec::content_hash` hash) by its "ejson": the stored document in
canonical Extended JSON, as text (its fields' order is part of it), and "skip_hash": the
names left out at its top level beside `_id` and natural-key's own `_nk_*` fields.

A v2 vector ("version": 2) describes a type hashed v2 by its "document": the value its
Serialize writes (a struct, or a map when a field is flattened; its names as serde stores
them), and "skip_hash": the stored names of its #[natural_key(skip_hash)] fields, whose values
stay in the document. Which Rust types are v2 is the derive's decision (the spec lists the
serde attributes); this file only encodes what each vector says.

Where docs/id-scheme.md was silent, this file's first version had to guess;
tests/content_vectors.rs then showed what Rust does, and the spec now says it: top-level names
and serde attributes, map entries sorted by their whole encoded bytes (key then value: that
orders duplicate keys), a human-readable serializer, f32 widened exactly to f64, dates and
other library types hashed as whatever their Serialize produces.
"""
import argparse
import base64
import hashlib
import json
import math
import struct
import sys

PREFIX = b"natural-key/content/v1\x00"
PREFIX_V2 = b"natural-key/content/v2\x00"

UNIT = 0x00
BOOL = 0x01
INT = 0x02
U128_HIGH = 0x03
FLOAT = 0x04
STR = 0x05
BYTES = 0x06
SEQ_START, SEQ_END = 0x07, 0x08
MAP_START, MAP_END = 0x09, 0x0A
STRUCT_START, STRUCT_END = 0x0B, 0x0C
VARIANT = 0x0D

INT_RANGES = {}
for _bits in (8, 16, 32, 64, 128):
    INT_RANGES[f"i{_bits}"] = (-(2 ** (_bits - 1)), 2 ** (_bits - 1) - 1)
    INT_RANGES[f"u{_bits}"] = (0, 2**_bits - 1)
# The vectors are for 64-bit targets.
INT_RANGES["isize"] = INT_RANGES["i64"]
INT_RANGES["usize"] = INT_RANGES["u64"]

I128_MAX = 2**127 - 1
CANONICAL_NAN = bytes.fromhex("7ff8000000000000")


def enc_str(s: str) -> bytes:
    b = s.encode("utf-8")
    return bytes([STR]) + struct.pack(">Q", len(b)) + b


def enc_int(n: int) -> bytes:
    if n > I128_MAX:
        return bytes([U128_HIGH]) + n.to_bytes(16, "big", signed=False)
    return bytes([INT]) + n.to_bytes(16, "big", signed=True)


def enc_float(x: float) -> bytes:
    if math.isnan(x):
        return bytes([FLOAT]) + CANONICAL_NAN
    if x == 0.0:
        x = 0.0  # -0.0 == 0.0 in Python; this drops the sign
    return bytes([FLOAT]) + struct.pack(">d", x)


def parse_float(s: str) -> float:
    return float(s)  # accepts "NaN", "inf", "-inf", "-0.0"


def to_f32(x: float) -> float:
    # Round to the nearest f32, then widen: the f64 that Rust's `f32 as f64` produces.
    return struct.unpack(">f", struct.pack(">f", x))[0]


def enc_fields(fields) -> bytes:
    out = bytearray([STRUCT_START])
    for name, v in fields:
        out += enc_str(name) + encode(v)
    out.append(STRUCT_END)
    return bytes(out)


def enc_seq(items) -> bytes:
    return bytes([SEQ_START]) + b"".join(encode(v) for v in items) + bytes([SEQ_END])


def encode(value) -> bytes:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"a value is an object with one key: {value!r}")
    (kind, v), = value.items()
    if kind in ("unit", "none", "unit_struct"):
        return bytes([UNIT])
    if kind == "bool":
        if not isinstance(v, bool):
            raise ValueError(f"bool: {v!r}")
        return bytes([BOOL, 1 if v else 0])
    if kind in INT_RANGES:
        n = int(v)
        lo, hi = INT_RANGES[kind]
        if not lo <= n <= hi:
            raise ValueError(f"{n} is not a {kind}")
        return enc_int(n)
    if kind == "f64":
        return enc_float(parse_float(v))
    if kind == "f32":
        return enc_float(to_f32(parse_float(v)))
    if kind == "f64_bits":
        return enc_float(struct.unpack(">d", bytes.fromhex(v))[0])
    if kind == "f32_bits":
        return enc_float(struct.unpack(">f", bytes.fromhex(v))[0])
    if kind == "char":
        if len(v) != 1:
            raise ValueError(f"char: {v!r}")
        return enc_str(v)
    if kind == "str":
        return enc_str(v)
    if kind == "bytes":
        b = bytes.fromhex(v)
        return bytes([BYTES]) + struct.pack(">Q", len(b)) + b
    if kind == "some":
        return encode(v)
    if kind == "newtype_struct":
        _name, inner = v
        return encode(inner)
    if kind in ("seq", "tuple"):
        return enc_seq(v)
    if kind == "tuple_struct":
        _name, items = v
        return enc_seq(items)
    if kind == "map":
        entries = sorted(encode(k) + encode(x) for k, x in v)
        return bytes([MAP_START]) + b"".join(entries) + bytes([MAP_END])
    if kind == "struct":
        _name, fields = v
        return enc_fields(fields)
    if kind in ("unit_variant", "newtype_variant", "tuple_variant", "struct_variant"):
        head = bytes([VARIANT]) + enc_str(v[1])
        if kind == "unit_variant":
            return head + bytes([UNIT])
        if kind == "newtype_variant":
            return head + encode(v[2])
        if kind == "tuple_variant":
            return head + enc_seq(v[2])
        return head + enc_fields(v[2])
    raise ValueError(f"unknown kind {kind!r}")


def message(fields) -> bytes:
    hashed = []
    for f in fields:
        if len(f) == 3:
            if f[2] != "skip_hash":
                raise ValueError(f"field flag: {f[2]!r}")
            continue
        hashed.append(f)
    return PREFIX + enc_fields(hashed)


def content_hash(fields) -> str:
    return hashlib.sha256(message(fields)).hexdigest()


def top_v2(value, skip_hash) -> bytes:
    """The v2 document's encoding: at its top level a struct drops the fields named in
    skip_hash, a map the entries whose key encodes as one of those names as a string; `some`
    and newtypes have no encoding of their own, so the top level is below them."""
    (kind, v), = value.items()
    if kind == "some":
        return top_v2(v, skip_hash)
    if kind == "newtype_struct":
        return top_v2(v[1], skip_hash)
    if kind == "struct":
        return enc_fields([f for f in v[1] if f[0] not in skip_hash])
    if kind == "map":
        dropped = {enc_str(name) for name in skip_hash}
        entries = sorted(encode(k) + encode(x) for k, x in v if encode(k) not in dropped)
        return bytes([MAP_START]) + b"".join(entries) + bytes([MAP_END])
    if skip_hash:
        raise ValueError(f"skip_hash {skip_hash!r} on a top level that is a {kind}")
    return encode(value)


def message_v2(document, skip_hash) -> bytes:
    return PREFIX_V2 + top_v2(document, skip_hash)


class Obj(list):
    """A JSON object as its (name, value) pairs, in the text's order."""


# Extended JSON wrappers that are a number or bytes in serde's data model; every other wrapper
# ($oid, $date, $binary of another subtype, $timestamp, $numberDecimal, ...) is hashed as the
# struct its canonical form is, which is what the bson crate's Serialize writes.
def ejson_value(v) -> bytes:
    """One value of a canonical Extended JSON document (parsed with its objects as lists of
    pairs, in order), encoded as docs/id-scheme.md says for a document without a Rust type."""
    if isinstance(v, Obj):
        if len(v) == 1:
            (key, inner), = v
            if key in ("$numberInt", "$numberLong"):
                return enc_int(int(inner))
            if key == "$numberDouble":
                return enc_float(float(inner))  # "Infinity", "-Infinity", "NaN", "-0.0"
            if key == "$binary":
                body = dict(inner)
                if body["subType"] == "00":
                    b = base64.b64decode(body["base64"])
                    return bytes([BYTES]) + struct.pack(">Q", len(b)) + b
        if v and v[0][0].startswith("$"):
            # Another wrapper: its canonical form as it stands, wrappers inside it included
            # ({"$date": {"$numberLong": "..."}} is a struct holding a struct).
            return ejson_canonical(v)
        return ejson_struct(v)
    if isinstance(v, list):
        return bytes([SEQ_START]) + b"".join(ejson_value(x) for x in v) + bytes([SEQ_END])
    if v is None:
        return bytes([UNIT])
    if isinstance(v, bool):
        return bytes([BOOL, 1 if v else 0])
    if isinstance(v, int):
        return enc_int(v)
    if isinstance(v, float):
        return enc_float(v)
    if isinstance(v, str):
        return enc_str(v)
    raise ValueError(f"not an Extended JSON value: {v!r}")


def ejson_canonical(v) -> bytes:
    if isinstance(v, Obj):
        inner = b"".join(enc_str(name) + ejson_canonical(x) for name, x in v)
        return bytes([STRUCT_START]) + inner + bytes([STRUCT_END])
    if isinstance(v, list):
        return bytes([SEQ_START]) + b"".join(ejson_canonical(x) for x in v) + bytes([SEQ_END])
    return ejson_value(v)


def ejson_struct(pairs, skip=lambda name: False) -> bytes:
    out = bytearray([STRUCT_START])
    for name, v in pairs:
        if not skip(name):
            out += enc_str(name) + ejson_value(v)
    out.append(STRUCT_END)
    return bytes(out)


def message_untyped(ejson, skip_hash) -> bytes:
    """The document's fields in stored order, as a v1 type's struct of fields, but `_id`,
    natural-key's own fields and skip_hash."""
    pairs = json.loads(ejson, object_pairs_hook=Obj)
    skip = lambda name: name == "_id" or name.startswith("_nk_") or name in skip_hash
    return PREFIX + ejson_struct(pairs, skip)


def vector_message(v) -> bytes:
    if v.get("version") == "untyped":
        return message_untyped(v["ejson"], v["skip_hash"])
    if v.get("version", 1) == 2:
        return message_v2(v["document"], v["skip_hash"])
    return message(v["fields"])


def ascii_upper(s):
    return "".join(c.upper() if c.isascii() else c for c in s)


def ascii_lower(s):
    return "".join(c.lower() if c.isascii() else c for c in s)


def rename_field(rule, field):
    """serde's rename_all rule for a struct field, as docs/id-scheme.md states it."""
    if rule in ("lowercase", "snake_case"):
        return field
    if rule in ("UPPERCASE", "SCREAMING_SNAKE_CASE"):
        return ascii_upper(field)
    if rule == "PascalCase":
        out, capitalize = [], True
        for c in field:
            if c == "_":
                capitalize = True
            elif capitalize:
                out.append(ascii_upper(c))
                capitalize = False
            else:
                out.append(c)
        return "".join(out)
    if rule == "camelCase":
        pascal = rename_field("PascalCase", field)
        return ascii_lower(pascal[:1]) + pascal[1:]
    if rule == "kebab-case":
        return field.replace("_", "-")
    if rule == "SCREAMING-KEBAB-CASE":
        return ascii_upper(field).replace("_", "-")
    raise ValueError(f"unknown rename rule {rule!r}")


# ---------------------------------------------------------------------------------------------
# The vectors. Each: name, the Rust type and value it stands for, the document's fields, and
# optionally the name of an earlier vector whose hash it must equal (an invariance the format
# promises). Append only: a published vector never changes.

def S(s):
    return {"str": s}


def N(kind, n):
    return {kind: str(n)}


def F64(s):
    return {"f64": s}


def F32(s):
    return {"f32": s}


def B(b):
    return {"bool": b}


def C(c):
    return {"char": c}


def SEQ(*items):
    return {"seq": list(items)}


def TUP(*items):
    return {"tuple": list(items)}


def MAP(*entries):
    return {"map": [list(e) for e in entries]}


def ST(name, *fields):
    return {"struct": [name, [list(f) for f in fields]]}


def SOME(v):
    return {"some": v}


NONE = {"none": None}
UNIT_V = {"unit": None}


def UV(enum, variant):
    return {"unit_variant": [enum, variant]}


def NV(enum, variant, v):
    return {"newtype_variant": [enum, variant, v]}


def TV(enum, variant, *items):
    return {"tuple_variant": [enum, variant, list(items)]}


def SV(enum, variant, *fields):
    return {"struct_variant": [enum, variant, [list(f) for f in fields]]}


T = 1700000000000  # 2023-11-14T22:13:20Z


def keyed(*fields):
    """Every NaturalKey type needs an identity key and a timestamp key; both are hashed too."""
    return [["k", S("a")], ["ts", N("i64", T)], *[list(f) for f in fields]]


def keyed_doc(name, *fields, rule=None):
    """A v2 document: the struct serde writes for a keyed type, its names after `rule`."""
    fields = [["k", S("a")], ["ts", N("i64", T)], *[list(f) for f in fields]]
    if rule:
        fields = [[rename_field(rule, f[0]), f[1]] for f in fields]
    return {"struct": [name, fields]}


RENAME_RULES = [  # each rename_all rule, and the Rust type of its vector
    ("lowercase", "RenamedLower"),
    ("UPPERCASE", "RenamedUpper"),
    ("PascalCase", "RenamedPascal"),
    ("camelCase", "RenamedCamel"),
    ("snake_case", "RenamedSnake"),
    ("SCREAMING_SNAKE_CASE", "RenamedScreaming"),
    ("kebab-case", "RenamedKebab"),
    ("SCREAMING-KEBAB-CASE", "RenamedScreamingKebab"),
]

STR_MAP_RUST_ORDER = [  # BTreeMap<String, i64> iteration order (Rust's string order)
    [S(""), N("i64", 0)],
    [S("aa"), N("i64", 2)],
    [S("ab"), N("i64", 3)],
    [S("b"), N("i64", 1)],
    [S("é"), N("i64", 4)],
]

VECTORS = [
    dict(
        name="minimal",
        rust="struct Minimal { #[key] k: String, #[key(timestamp)] ts: i64 } = { k: \"a\", ts: 1700000000000 }",
        fields=keyed(),
    ),
    dict(
        name="post",
        rust="struct Post { #[key] slug: String, #[key] lang: String, #[key(timestamp)] published_at: i64, "
        "title: String, body: String, #[natural_key(skip_hash)] fetched_at: i64 }",
        fields=[
            ["slug", S("hello-world")],
            ["lang", S("en")],
            ["published_at", N("i64", T)],
            ["title", S("Hello, world")],
            ["body", S("First post.")],
            ["fetched_at", N("i64", 1700000123456), "skip_hash"],
        ],
    ),
    dict(
        name="post, other skip_hash value",
        rust="Post as in \"post\", fetched_at: 0",
        fields=[
            ["slug", S("hello-world")],
            ["lang", S("en")],
            ["published_at", N("i64", T)],
            ["title", S("Hello, world")],
            ["body", S("First post.")],
            ["fetched_at", N("i64", 0), "skip_hash"],
        ],
        same_as="post",
    ),
    dict(
        name="post without the skipped field",
        rust="struct PostNoFetch: Post without fetched_at",
        fields=[
            ["slug", S("hello-world")],
            ["lang", S("en")],
            ["published_at", N("i64", T)],
            ["title", S("Hello, world")],
            ["body", S("First post.")],
        ],
        same_as="post",
    ),
    dict(
        name="integers",
        rust="struct Ints { k, ts, a: i8 = i8::MIN, b: i16 = -300, c: i32 = -1, d: i64 = i64::MAX, e: u8 = u8::MAX, "
        "f: u16 = 65535, g: u32 = u32::MAX, h: u64 = u64::MAX, i: isize = isize::MIN, j: usize = usize::MAX, "
        "l: i128 = i128::MIN, m: i128 = i128::MAX, n: u128 = 0, o: u128 = i128::MAX as u128, "
        "p: u128 = i128::MAX as u128 + 1, q: u128 = u128::MAX }",
        fields=keyed(
            ["a", N("i8", -128)],
            ["b", N("i16", -300)],
            ["c", N("i32", -1)],
            ["d", N("i64", 2**63 - 1)],
            ["e", N("u8", 255)],
            ["f", N("u16", 65535)],
            ["g", N("u32", 2**32 - 1)],
            ["h", N("u64", 2**64 - 1)],
            ["i", N("isize", -(2**63))],
            ["j", N("usize", 2**64 - 1)],
            ["l", N("i128", -(2**127))],
            ["m", N("i128", 2**127 - 1)],
            ["n", N("u128", 0)],
            ["o", N("u128", 2**127 - 1)],
            ["p", N("u128", 2**127)],
            ["q", N("u128", 2**128 - 1)],
        ),
    ),
    dict(
        name="i32 five",
        rust="struct IntI32 { k, ts, n: i32 = 5 }",
        fields=keyed(["n", N("i32", 5)]),
    ),
    dict(
        name="u8 five",
        rust="struct IntU8 { k, ts, n: u8 = 5 }",
        fields=keyed(["n", N("u8", 5)]),
        same_as="i32 five",
    ),
    dict(
        name="u128 five",
        rust="struct IntU128 { k, ts, n: u128 = 5 }",
        fields=keyed(["n", N("u128", 5)]),
        same_as="i32 five",
    ),
    dict(
        name="floats",
        rust="struct Floats { k, ts, a: f64 = 0.0, b: f64 = 1.5, c: f64 = -2.25, d: f64 = 0.1, e: f64 = f64::MAX, "
        "f: f64 = f64::MIN_POSITIVE, g: f64 = 5e-324, h: f64 = f64::INFINITY, i: f64 = f64::NEG_INFINITY, "
        "j: f64 = f64::NAN, l: f32 = 0.1, m: f32 = f32::MAX, n: f32 = f32::NEG_INFINITY, o: f32 = f32::NAN }",
        fields=keyed(
            ["a", F64("0.0")],
            ["b", F64("1.5")],
            ["c", F64("-2.25")],
            ["d", F64("0.1")],
            ["e", F64("1.7976931348623157e308")],
            ["f", F64("2.2250738585072014e-308")],
            ["g", F64("5e-324")],
            ["h", F64("inf")],
            ["i", F64("-inf")],
            ["j", F64("NaN")],
            ["l", F32("0.1")],
            ["m", F32("3.4028234663852886e38")],
            ["n", F32("-inf")],
            ["o", F32("NaN")],
        ),
    ),
    dict(
        name="f64 zero",
        rust="struct OneF64 { k, ts, x: f64 = 0.0 }",
        fields=keyed(["x", F64("0.0")]),
    ),
    dict(
        name="f64 negative zero",
        rust="OneF64 { x: -0.0 }",
        fields=keyed(["x", F64("-0.0")]),
        same_as="f64 zero",
    ),
    dict(
        name="f32 negative zero",
        rust="struct OneF32 { k, ts, x: f32 = -0.0 }",
        fields=keyed(["x", F32("-0.0")]),
        same_as="f64 zero",
    ),
    dict(
        name="f64 NaN",
        rust="OneF64 { x: f64::NAN }",
        fields=keyed(["x", F64("NaN")]),
    ),
    dict(
        name="f64 negative NaN with payload",
        rust="OneF64 { x: f64::from_bits(0xfff8_0000_0000_0001) }",
        fields=keyed(["x", {"f64_bits": "fff8000000000001"}]),
        same_as="f64 NaN",
    ),
    dict(
        name="f64 signaling NaN",
        rust="OneF64 { x: f64::from_bits(0x7ff0_0000_0000_0001) }",
        fields=keyed(["x", {"f64_bits": "7ff0000000000001"}]),
        same_as="f64 NaN",
    ),
    dict(
        name="f32 NaN with payload",
        rust="OneF32 { x: f32::from_bits(0xffc0_0001) }",
        fields=keyed(["x", {"f32_bits": "ffc00001"}]),
        same_as="f64 NaN",
    ),
    dict(
        name="f32 one and a half",
        rust="OneF32 { x: 1.5 }",
        fields=keyed(["x", F32("1.5")]),
    ),
    dict(
        name="f64 one and a half",
        rust="OneF64 { x: 1.5 }",
        fields=keyed(["x", F64("1.5")]),
        same_as="f32 one and a half",
    ),
    dict(
        name="strings",
        rust="struct Strings { k, ts, empty: String = \"\", ascii: String = \"hello\", cjk: String = \"台北美食指南\", "
        "emoji: String = \"😀\", composed: String = \"Café\", decomposed: String = \"Cafe\\u{301}\", "
        "nul: String = \"a\\0b\", long: String = \"x\" × 300, borrowed: &'static str = \"static\" }",
        fields=keyed(
            ["empty", S("")],
            ["ascii", S("hello")],
            ["cjk", S("台北美食指南")],
            ["emoji", S("😀")],
            ["composed", S("Caf\u00e9")],
            ["decomposed", S("Cafe\u0301")],
            ["nul", S("a\u0000b")],
            ["long", S("x" * 300)],
            ["borrowed", S("static")],
        ),
    ),
    dict(
        name="chars",
        rust="struct Chars { k, ts, a: char = 'a', b: char = 'é', c: char = '中', d: char = '😀' }",
        fields=keyed(["a", C("a")], ["b", C("é")], ["c", C("中")], ["d", C("😀")]),
    ),
    dict(
        name="one-char string",
        rust="struct OneString { k, ts, c: String = \"x\" }",
        fields=keyed(["c", S("x")]),
    ),
    dict(
        name="char",
        rust="struct OneChar { k, ts, c: char = 'x' }",
        fields=keyed(["c", C("x")]),
        same_as="one-char string",
    ),
    dict(
        name="bools",
        rust="struct Bools { k, ts, t: bool = true, f: bool = false }",
        fields=keyed(["t", B(True)], ["f", B(False)]),
    ),
    dict(
        name="options",
        rust="struct Options { k, ts, a: Option<i32> = Some(5), b: Option<i32> = None, "
        "c: Option<Option<String>> = Some(Some(\"x\")), d: Option<Option<String>> = Some(None), "
        "e: Option<Vec<u8>> = Some(vec![]) }",
        fields=keyed(
            ["a", SOME(N("i32", 5))],
            ["b", NONE],
            ["c", SOME(SOME(S("x")))],
            ["d", SOME(NONE)],
            ["e", SOME(SEQ())],
        ),
    ),
    dict(
        name="some string",
        rust="struct OptString { k, ts, c: Option<String> = Some(\"x\") }",
        fields=keyed(["c", SOME(S("x"))]),
        same_as="one-char string",
    ),
    dict(
        name="units",
        rust="struct Marker; struct Units { k, ts, u: () = (), m: Marker = Marker, p: PhantomData<i32>, n: Option<u8> = None }",
        fields=keyed(
            ["u", UNIT_V],
            ["m", {"unit_struct": "Marker"}],
            ["p", {"unit_struct": "PhantomData"}],
            ["n", NONE],
        ),
    ),
    dict(
        name="newtype structs",
        rust="struct Meters(f64); struct Tag(String); struct Newtypes { k, ts, m: Meters = Meters(1.5), "
        "t: Tag = Tag(\"x\"), b: Box<i32> = Box::new(7) }",
        fields=keyed(
            ["m", {"newtype_struct": ["Meters", F64("1.5")]}],
            ["t", {"newtype_struct": ["Tag", S("x")]}],
            ["b", N("i32", 7)],
        ),
    ),
    dict(
        name="newtype is transparent",
        rust="struct Bare { k, ts, m: f64 = 1.5, t: String = \"x\", b: i32 = 7 }",
        fields=keyed(["m", F64("1.5")], ["t", S("x")], ["b", N("i32", 7)]),
        same_as="newtype structs",
    ),
    dict(
        name="tuples and tuple structs",
        rust="struct Point(i32, i32); struct Nothing(); struct Tuples { k, ts, pair: (i32, String) = (1, \"one\"), "
        "single: (u8,) = (9,), nested: ((), (bool, char)) = ((), (true, 'z')), point: Point = Point(-1, 2), "
        "nothing: Nothing = Nothing(), arr: [u16; 3] = [1, 2, 3], empty_arr: [u8; 0] = [] }",
        fields=keyed(
            ["pair", TUP(N("i32", 1), S("one"))],
            ["single", TUP(N("u8", 9))],
            ["nested", TUP(UNIT_V, TUP(B(True), C("z")))],
            ["point", {"tuple_struct": ["Point", [N("i32", -1), N("i32", 2)]]}],
            ["nothing", {"tuple_struct": ["Nothing", []]}],
            ["arr", TUP(N("u16", 1), N("u16", 2), N("u16", 3))],
            ["empty_arr", TUP()],
        ),
    ),
    dict(
        name="sequences",
        rust="struct Seqs { k, ts, empty: Vec<String> = [], words: Vec<String> = [\"b\", \"a\"], "
        "nested: Vec<Vec<i64>> = [[1], [], [-2, 3]], set: BTreeSet<i32> = {3, -1, 2}, "
        "raw: Vec<u8> = [0, 255, 16] }",
        fields=keyed(
            ["empty", SEQ()],
            ["words", SEQ(S("b"), S("a"))],
            ["nested", SEQ(SEQ(N("i64", 1)), SEQ(), SEQ(N("i64", -2), N("i64", 3)))],
            ["set", SEQ(N("i32", -1), N("i32", 2), N("i32", 3))],
            ["raw", SEQ(N("u8", 0), N("u8", 255), N("u8", 16))],
        ),
    ),
    dict(
        name="array is a sequence",
        rust="struct ArrAsSeq { k, ts, v: [u8; 3] = [0, 255, 16] }",
        fields=keyed(["v", TUP(N("u8", 0), N("u8", 255), N("u8", 16))]),
    ),
    dict(
        name="vec is the same sequence",
        rust="struct VecAsSeq { k, ts, v: Vec<u8> = vec![0, 255, 16] }",
        fields=keyed(["v", SEQ(N("u8", 0), N("u8", 255), N("u8", 16))]),
        same_as="array is a sequence",
    ),
    dict(
        name="bytes",
        rust="struct Blob(Vec<u8>) serialized with serialize_bytes; struct Bytes { k, ts, v: Blob = [0, 255, 16], "
        "empty: Blob = [] }",
        fields=keyed(["v", {"bytes": "00ff10"}], ["empty", {"bytes": ""}]),
    ),
    dict(
        name="map with unsorted keys",
        rust="struct StrMap { k, ts, m: BTreeMap<String, i64> = {\"\": 0, \"aa\": 2, \"ab\": 3, \"b\": 1, \"é\": 4} }",
        fields=keyed(["m", {"map": STR_MAP_RUST_ORDER}]),
    ),
    dict(
        name="same map, another insertion order",
        rust="struct StrMapOrdered { k, ts, m: Ordered<String, i64> } (a Vec of pairs serialized as a map, in its "
        "order) = [(\"é\", 4), (\"b\", 1), (\"ab\", 3), (\"\", 0), (\"aa\", 2)]",
        fields=keyed(["m", {"map": [STR_MAP_RUST_ORDER[i] for i in (4, 3, 2, 0, 1)]}]),
        same_as="map with unsorted keys",
    ),
    dict(
        name="same map as a HashMap",
        rust="struct StrHashMap { k, ts, m: HashMap<String, i64> } with the same entries (iteration order random)",
        fields=keyed(["m", {"map": [STR_MAP_RUST_ORDER[i] for i in (3, 0, 4, 1, 2)]}]),
        same_as="map with unsorted keys",
    ),
    dict(
        name="maps of other keys",
        rust="struct OtherMaps { k, ts, ints: BTreeMap<i64, bool> = {i64::MIN: true, -1: false, 0: true, 1: false}, "
        "tuples: BTreeMap<(u8, String), ()> = {(1, \"b\"): (), (2, \"a\"): ()}, empty: BTreeMap<String, String> = {}, "
        "nested: BTreeMap<String, BTreeMap<String, u8>> = {\"x\": {\"b\": 2, \"a\": 1}, \"w\": {}} }",
        fields=keyed(
            ["ints", MAP([N("i64", -(2**63)), B(True)], [N("i64", -1), B(False)], [N("i64", 0), B(True)],
                         [N("i64", 1), B(False)])],
            ["tuples", MAP([TUP(N("u8", 1), S("b")), UNIT_V], [TUP(N("u8", 2), S("a")), UNIT_V])],
            ["empty", MAP()],
            ["nested", MAP([S("w"), MAP()], [S("x"), MAP([S("a"), N("u8", 1)], [S("b"), N("u8", 2)])])],
        ),
    ),
    dict(
        name="map with a duplicate key",
        rust="struct DupMap { k, ts, m: Ordered<String, u8> = [(\"a\", 2), (\"a\", 1)] }",
        fields=keyed(["m", MAP([S("a"), N("u8", 2)], [S("a"), N("u8", 1)])]),
    ),
    dict(
        name="map with a duplicate key, other order",
        rust="DupMap { m: [(\"a\", 1), (\"a\", 2)] }",
        fields=keyed(["m", MAP([S("a"), N("u8", 1)], [S("a"), N("u8", 2)])]),
        same_as="map with a duplicate key",
    ),
    dict(
        name="nested structs",
        rust="struct Deep { c: String }; struct Inner { a: u8, b: Deep }; struct Empty {}; "
        "struct Nested { k, ts, inner: Inner = { a: 1, b: { c: \"deep\" } }, list: Vec<Inner> = [{ a: 2, b: { c: \"\" } }], "
        "empty: Empty = {} }",
        fields=keyed(
            ["inner", ST("Inner", ["a", N("u8", 1)], ["b", ST("Deep", ["c", S("deep")])])],
            ["list", SEQ(ST("Inner", ["a", N("u8", 2)], ["b", ST("Deep", ["c", S("")])]))],
            ["empty", ST("Empty")],
        ),
    ),
    dict(
        name="nested struct with serde attributes",
        rust="#[serde(rename_all = \"camelCase\")] struct Attrs { first_name: String = \"Ada\", "
        "#[serde(rename = \"LAST\")] last_name: String = \"Lovelace\", "
        "#[serde(skip_serializing_if = \"Option::is_none\")] middle: Option<String> = None, "
        "#[serde(skip)] cache: u32 = 7, r#type: u8 = 1 }; struct NestedAttrs { k, ts, person: Attrs }",
        fields=keyed(
            ["person", ST("Attrs", ["firstName", S("Ada")], ["LAST", S("Lovelace")], ["type", N("u8", 1)])],
        ),
    ),
    dict(
        name="nested struct with flatten",
        rust="struct Flat { a: u8 = 1, #[serde(flatten)] extra: BTreeMap<String, u8> = {\"z\": 3, \"b\": 2} }; "
        "struct Flattened { k, ts, f: Flat } (serde serializes Flat as a map)",
        fields=keyed(["f", MAP([S("a"), N("u8", 1)], [S("b"), N("u8", 2)], [S("z"), N("u8", 3)])]),
    ),
    dict(
        name="top-level serde rename",
        rust="#[serde(rename_all = \"camelCase\")] struct Renamed { #[key] k, #[key(timestamp)] ts, "
        "#[serde(rename = \"Title\")] the_title: String = \"t\", page_count: u32 = 3 }",
        fields=keyed(["the_title", S("t")], ["page_count", N("u32", 3)]),
    ),
    dict(
        name="top-level raw and non-ASCII field names",
        rust="struct Idents { k, ts, r#type: String = \"post\", größe: u8 = 2 }",
        # The identifier as the derive reads it: `r#` included, unlike serde's "type".
        fields=keyed(["r#type", S("post")], ["größe", N("u8", 2)]),
    ),
    dict(
        name="top-level skip_serializing_if",
        rust="struct SkipIf { k, ts, #[serde(skip_serializing_if = \"Option::is_none\")] note: Option<String> = None }",
        fields=keyed(["note", NONE]),
    ),
    dict(
        name="top-level serialize_with",
        rust="struct With { k, ts, #[serde(serialize_with = \"as_bytes\")] data: Vec<u8> = [0, 255, 16] } "
        "(as_bytes calls serialize_bytes)",
        fields=keyed(["data", SEQ(N("u8", 0), N("u8", 255), N("u8", 16))]),
    ),
    dict(
        name="top-level serde skip",
        rust="struct SkipSerde { k, ts, #[serde(skip)] cache: u32 = 7 } (never stored, still hashed)",
        fields=keyed(["cache", N("u32", 7)]),
    ),
    dict(
        name="top-level serde flatten",
        rust="struct FlattenTop { k, ts, #[serde(flatten)] extra: BTreeMap<String, u8> = {\"b\": 2, \"a\": 1} } "
        "(stored as top-level fields, hashed as one map field named extra)",
        fields=keyed(["extra", MAP([S("a"), N("u8", 1)], [S("b"), N("u8", 2)])]),
    ),
    dict(
        name="enum variants",
        rust="enum Shape { Dot, Circle(u32), Line(i32, i32), Rect { w: u8, h: u8 }, Hollow(), Void {}, "
        "#[serde(rename = \"sq\")] Square(Option<u8>) }; struct Shapes { k, ts, unit: Shape = Dot, "
        "newtype: Shape = Circle(7), tuple: Shape = Line(-1, 1), strukt: Shape = Rect { w: 2, h: 3 }, "
        "empty_tuple: Shape = Hollow(), empty_struct: Shape = Void {}, renamed: Shape = Square(None), "
        "all: Vec<Shape> = [Dot, Circle(0)] }",
        fields=keyed(
            ["unit", UV("Shape", "Dot")],
            ["newtype", NV("Shape", "Circle", N("u32", 7))],
            ["tuple", TV("Shape", "Line", N("i32", -1), N("i32", 1))],
            ["strukt", SV("Shape", "Rect", ["w", N("u8", 2)], ["h", N("u8", 3)])],
            ["empty_tuple", TV("Shape", "Hollow")],
            ["empty_struct", SV("Shape", "Void")],
            ["renamed", NV("Shape", "sq", NONE)],
            ["all", SEQ(UV("Shape", "Dot"), NV("Shape", "Circle", N("u32", 0)))],
        ),
    ),
    dict(
        name="tagged enums",
        rust="#[serde(tag = \"type\")] enum Internal { On, Set { level: u8 } }; "
        "#[serde(tag = \"t\", content = \"c\")] enum Adjacent { Off, Pair(u8, u8) }; "
        "#[serde(untagged)] enum Untagged { Num(i64), Text(String) }; "
        "struct Tagged { k, ts, a: Internal = On, b: Internal = Set { level: 4 }, c: Adjacent = Off, "
        "d: Adjacent = Pair(1, 2), e: Untagged = Num(5), f: Untagged = Text(\"x\") }",
        fields=keyed(
            ["a", ST("Internal", ["type", S("On")])],
            ["b", ST("Internal", ["type", S("Set")], ["level", N("u8", 4)])],
            # serde serializes the adjacent tag as a unit variant, not as a string.
            ["c", ST("Adjacent", ["t", UV("Adjacent", "Off")])],
            ["d", ST("Adjacent", ["t", UV("Adjacent", "Pair")], ["c", TUP(N("u8", 1), N("u8", 2))])],
            ["e", N("i64", 5)],
            ["f", S("x")],
        ),
    ),
    dict(
        name="std time types",
        rust="struct StdTimes { k, ts, at: SystemTime = UNIX_EPOCH + 1700000000.123456789 s, "
        "took: Duration = 1.5 s }",
        fields=keyed(
            ["at", ST("SystemTime", ["secs_since_epoch", N("u64", 1700000000)],
                      ["nanos_since_epoch", N("u32", 123456789)])],
            ["took", ST("Duration", ["secs", N("u64", 1)], ["nanos", N("u32", 500000000)])],
        ),
    ),
    dict(
        name="chrono dates",
        rust="struct ChronoDates { k, ts, at: DateTime<Utc> = 2023-11-14T22:13:20Z, "
        "ms: DateTime<Utc> = 2023-11-14T22:13:20.123Z, ns: DateTime<Utc> = …20.123456789Z, "
        "day: NaiveDate = 2023-11-14 } (chrono serializes as RFC 3339 text)",
        fields=keyed(
            ["at", S("2023-11-14T22:13:20Z")],
            ["ms", S("2023-11-14T22:13:20.123Z")],
            ["ns", S("2023-11-14T22:13:20.123456789Z")],
            ["day", S("2023-11-14")],
        ),
    ),
    dict(
        name="bson values",
        rust="struct BsonValues { k, ts, at: bson::DateTime = from_millis(1700000000123), "
        "oid: bson::oid::ObjectId = 507f1f77bcf86cd799439011 } (bson serializes them as extended-JSON structs)",
        fields=keyed(
            ["at", ST("$date", ["$date", ST("Int64", ["$numberLong", S("1700000000123")])])],
            ["oid", ST("$oid", ["$oid", S("507f1f77bcf86cd799439011")])],
        ),
    ),
    dict(
        name="uuid",
        rust="struct Uuids { k, ts, u: uuid::Uuid = 67e55044-10b1-426f-9247-bb680e5fe0c8 } "
        "(human-readable: serialized as hyphenated text)",
        fields=keyed(["u", S("67e55044-10b1-426f-9247-bb680e5fe0c8")]),
    ),
    # Content hash v2: types whose serde attributes make the stored document differ from their
    # Rust fields. The first six are the types of the "top-level ..." vectors above, whose v1
    # hashes those vectors keep (a v2 type still accepts its v1 hash as stored before).
    dict(
        name="top-level serde rename, v2",
        rust="Renamed as in \"top-level serde rename\": hashed under its stored names",
        # camelCase leaves k and ts as they are; an explicit rename wins over the rule.
        document=keyed_doc("Renamed", ["Title", S("t")], [rename_field("camelCase", "page_count"), N("u32", 3)]),
    ),
    dict(
        name="top-level raw and non-ASCII field names, v2",
        rust="Idents as in \"top-level raw and non-ASCII field names\": r#type is stored as type",
        document=keyed_doc("Idents", ["type", S("post")], ["größe", N("u8", 2)]),
    ),
    dict(
        name="top-level skip_serializing_if, v2",
        rust="SkipIf as in \"top-level skip_serializing_if\": the None note is not stored",
        document=keyed_doc("SkipIf"),
    ),
    dict(
        name="top-level skip_serializing_if, present, v2",
        rust="SkipIf { note: Some(\"x\") }",
        document=keyed_doc("SkipIf", ["note", SOME(S("x"))]),
    ),
    dict(
        name="top-level serialize_with, v2",
        rust="With as in \"top-level serialize_with\": stored, so hashed, as bytes",
        document=keyed_doc("With", ["data", {"bytes": "00ff10"}]),
    ),
    dict(
        name="top-level serde skip, v2",
        rust="SkipSerde as in \"top-level serde skip\": cache is never stored, so never hashed",
        document=keyed_doc("SkipSerde"),
        same_as="top-level skip_serializing_if, v2",
    ),
    dict(
        name="top-level serde flatten, v2",
        rust="FlattenTop as in \"top-level serde flatten\": serde stores a map, k and ts first",
        document=MAP([S("k"), S("a")], [S("ts"), N("i64", T)], [S("a"), N("u8", 1)], [S("b"), N("u8", 2)]),
    ),
    dict(
        name="top-level serde flatten, another order, v2",
        rust="struct FlattenOrdered { k, ts, #[serde(flatten)] extra: Ordered<String, u8> = "
        "[(\"b\", 2), (\"a\", 1)] }",
        document=MAP([S("k"), S("a")], [S("ts"), N("i64", T)], [S("b"), N("u8", 2)], [S("a"), N("u8", 1)]),
        same_as="top-level serde flatten, v2",
    ),
    *[
        dict(
            name=f"skip_hash by its stored name, {rule}, v2",
            rust=f"#[serde(rename_all = \"{rule}\")] struct {name} {{ #[key] k, #[key(timestamp)] ts, "
            "page_count: u32 = 3, #[natural_key(skip_hash)] last_seen_at: i64 = 1700000000000 }",
            document=keyed_doc(name, ["page_count", N("u32", 3)], ["last_seen_at", N("i64", T)], rule=rule),
            skip_hash=[rename_field(rule, "last_seen_at")],
        )
        for rule, name in RENAME_RULES
    ],
    dict(
        name="skip_hash by its stored name, other value, v2",
        rust="RenamedCamel as in \"skip_hash by its stored name, camelCase, v2\", last_seen_at: 0",
        document=keyed_doc("RenamedCamel", ["page_count", N("u32", 3)], ["last_seen_at", N("i64", 0)],
                           rule="camelCase"),
        skip_hash=["lastSeenAt"],
        same_as="skip_hash by its stored name, camelCase, v2",
    ),
    dict(
        name="skip_hash in a flattened document, v2",
        rust="struct FlatSkip { k, ts, #[natural_key(skip_hash)] fetched_at: i64 = 9, "
        "#[serde(flatten)] extra: BTreeMap<String, u8> = {\"z\": 1} } (stored as a map)",
        document=MAP([S("k"), S("a")], [S("ts"), N("i64", T)], [S("fetched_at"), N("i64", 9)],
                     [S("z"), N("u8", 1)]),
        skip_hash=["fetched_at"],
    ),
    dict(
        name="skip_hash in a flattened document, other value, v2",
        rust="FlatSkip { fetched_at: 0, extra: {\"z\": 1} }",
        document=MAP([S("k"), S("a")], [S("ts"), N("i64", T)], [S("fetched_at"), N("i64", 0)],
                     [S("z"), N("u8", 1)]),
        skip_hash=["fetched_at"],
        same_as="skip_hash in a flattened document, v2",
    ),
    dict(
        name="container tag, v2",
        rust="#[serde(tag = \"kind\")] struct TaggedDoc { k, ts, n: u8 = 5 } (serde stores the tag first)",
        document={"struct": ["TaggedDoc", [["kind", S("TaggedDoc")], ["k", S("a")], ["ts", N("i64", T)],
                                           ["n", N("u8", 5)]]]},
    ),
    dict(
        name="with module, v2",
        rust="struct WithModule { k, ts, #[serde(with = \"hex_text\")] data: Vec<u8> = [0, 255, 16] } "
        "(hex_text::serialize writes lowercase hex)",
        document=keyed_doc("WithModule", ["data", S("00ff10")]),
    ),
    dict(
        name="rename for serialization only, v2",
        rust="struct RenameSer { k, ts, #[serde(rename(serialize = \"out\", deserialize = \"in\"))] n: u8 = 5 }",
        document=keyed_doc("RenameSer", ["out", N("u8", 5)]),
    ),
    dict(
        name="deserialization-only serde attributes keep v1",
        rust="#[serde(rename = \"Wire\", deny_unknown_fields, rename_all(deserialize = \"camelCase\"))] "
        "struct DeOnly { k, ts, #[serde(rename(deserialize = \"in\"), alias = \"old\", default)] n: u8 = 5 }",
        fields=keyed(["n", N("u8", 5)]),
        same_as="u8 five",
    ),
    dict(
        name="into, v2",
        rust="#[serde(into = \"IntoWire\")] struct IntoDoc { k, ts, n: u8 = 5 }; "
        "struct IntoWire { id: String, n: u8 } = { id: k, n } (the stored document is IntoWire)",
        document={"struct": ["IntoWire", [["id", S("a")], ["n", N("u8", 5)]]]},
    ),
    dict(
        name="transparent, v2",
        rust="#[serde(transparent)] struct Transparent { #[key] #[serde(skip)] k, "
        "#[key(timestamp)] #[serde(skip)] ts, inner: Inner = { a: 1, b: { c: \"deep\" } } } "
        "(stored as Inner: the keys are not stored, so not hashed)",
        document=ST("Inner", ["a", N("u8", 1)], ["b", ST("Deep", ["c", S("deep")])]),
    ),
]


# Documents without a Rust type: the stored document in canonical Extended JSON.
UNTYPED_VECTORS = [
    dict(
        name="untyped post",
        rust="the document `post` stores, with natural-key's own fields, as `natural-key ingest` "
        "or KeySpec::content_hash reads it (skip_hash fetched_at)",
        ejson='{"_id": "01HF7YAT00EGYGDZ2RBKJ019EA", "slug": "hello-world", "lang": "en", '
        '"published_at": {"$numberLong": "1700000000000"}, "title": "Hello, world", '
        '"body": "First post.", "fetched_at": {"$numberLong": "1700000123456"}, '
        '"_nk_identity": "743d06fc585ce400a5ca0866fb38437dc9686081cbf0db2c12010d3fd62caf82", '
        '"_nk_hash": "0000"}',
        skip_hash=["fetched_at"],
        same_as="post",
    ),
    dict(
        name="untyped post, fields in another order",
        rust="the same fields as `untyped post`, title after body: another stored document",
        ejson='{"slug": "hello-world", "lang": "en", "published_at": {"$numberLong": '
        '"1700000000000"}, "body": "First post.", "title": "Hello, world"}',
        skip_hash=[],
    ),
    dict(
        name="untyped values",
        rust="every BSON type a document commonly holds: int32 and int64 (the width is not "
        "hashed), doubles (-0.0 as 0.0, NaN canonical), null, bool, arrays, embedded "
        "documents (structs, in stored order), and the wrappers",
        ejson='{"i32": {"$numberInt": "-5"}, "i64": {"$numberLong": "9007199254740993"}, '
        '"d": {"$numberDouble": "1.5"}, "negzero": {"$numberDouble": "-0.0"}, '
        '"nan": {"$numberDouble": "NaN"}, "inf": {"$numberDouble": "-Infinity"}, '
        '"n": null, "t": true, "s": "ünï\\u0000code", '
        '"arr": [{"$numberInt": "1"}, "two", [], {}], '
        '"doc": {"z": {"$numberInt": "1"}, "a": {"b": "deep"}}, '
        '"oid": {"$oid": "655403a0bd2d1ef3bc3a7f30"}, '
        '"date": {"$date": {"$numberLong": "1700000000000"}}, '
        '"bytes": {"$binary": {"base64": "AAH/", "subType": "00"}}, '
        '"uuid": {"$binary": {"base64": "EjRWeBI0VniavBI0VniavA==", "subType": "04"}}, '
        '"ts": {"$timestamp": {"t": 1700000000, "i": 7}}, '
        '"dec": {"$numberDecimal": "1.5"}}',
        skip_hash=[],
    ),
]

def build():
    out, by_name = [], {}
    for v in VECTORS + UNTYPED_VECTORS:
        if v["name"] in by_name:
            raise ValueError(f"duplicate vector name {v['name']!r}")
        entry = {"name": v["name"], "rust": v["rust"]}
        if "ejson" in v:
            entry.update(version="untyped", ejson=v["ejson"], skip_hash=v["skip_hash"])
        elif "document" in v:
            entry.update(version=2, document=v["document"], skip_hash=v.get("skip_hash", []))
        else:
            entry["fields"] = v["fields"]
        msg = vector_message(entry)
        h = hashlib.sha256(msg).hexdigest()
        if "same_as" in v and by_name[v["same_as"]] != h:
            raise AssertionError(f"{v['name']!r} should hash like {v['same_as']!r}")
        by_name[v["name"]] = h
        if "same_as" in v:
            entry["same_as"] = v["same_as"]
        entry["message"] = msg.hex()
        entry["hash"] = h
        out.append(entry)
    return out


def dumps(vectors) -> str:
    # One field per line keeps the diff of an appended vector readable.
    def j(x):
        return json.dumps(x, ensure_ascii=False)

    def items(lines, items):
        for i, x in enumerate(items):
            lines.append(f"    {j(x)}{',' if i + 1 < len(items) else ''}")

    lines = ['{', ' "format": "natural-key content hash vectors v1, v2",', ' "vectors": [']
    for i, v in enumerate(vectors):
        lines.append("  {")
        lines.append(f'   "name": {j(v["name"])},')
        lines.append(f'   "rust": {j(v["rust"])},')
        if v.get("version") == "untyped":
            lines.append('   "version": "untyped",')
            lines.append(f'   "ejson": {j(v["ejson"])},')
            lines.append(f'   "skip_hash": {j(v["skip_hash"])},')
        elif v.get("version") == 2:
            lines.append('   "version": 2,')
            (kind, body), = v["document"].items()
            if kind == "struct":
                lines.append(f'   "document": {{"struct": [{j(body[0])}, [')
                items(lines, body[1])
                lines.append("   ]]},")
            elif kind == "map":
                lines.append('   "document": {"map": [')
                items(lines, body)
                lines.append("   ]},")
            else:
                lines.append(f'   "document": {j(v["document"])},')
            lines.append(f'   "skip_hash": {j(v["skip_hash"])},')
        else:
            lines.append('   "fields": [')
            items(lines, v["fields"])
            lines.append("   ],")
        if "same_as" in v:
            lines.append(f'   "same_as": {j(v["same_as"])},')
        lines.append(f'   "message": {j(v["message"])},')
        lines.append(f'   "hash": {j(v["hash"])}')
        lines.append("  }" + ("," if i + 1 < len(vectors) else ""))
    lines += [" ]", "}", ""]
    return "\n".join(lines)


def check(path) -> int:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    failures = 0
    # First from the file alone: what another implementation would do with it.
    hashes = {}
    for v in json.loads(text)["vectors"]:
        msg = vector_message(v)
        h = hashlib.sha256(msg).hexdigest()
        hashes[v["name"]] = h
        if msg.hex() != v["message"] or h != v["hash"]:
            print(f"{path}: {v['name']!r}: recomputed {h}, file says {v['hash']}", file=sys.stderr)
            failures += 1
        if "same_as" in v and hashes.get(v["same_as"]) != h:
            print(f"{path}: {v['name']!r} does not hash like {v['same_as']!r}", file=sys.stderr)
            failures += 1
    # Then against this script's vectors: the file is generated, never edited by hand.
    if text != dumps(build()):
        print(f"{path} differs from `{sys.argv[0]} --write {path}`", file=sys.stderr)
        failures += 1
    if failures == 0:
        print(f"{path}: {len(hashes)} content hash vectors reproduced")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="FILE", help="write the golden vectors to FILE")
    g.add_argument("--check", metavar="FILE", help="recompute FILE's hashes; fail on any difference")
    p.add_argument("document", nargs="?", help="a JSON list of document fields to hash")
    a = p.parse_args()
    if a.check:
        sys.exit(check(a.check))
    if a.write:
        with open(a.write, "w", encoding="utf-8") as f:
            f.write(dumps(build()))
        return
    if a.document:
        with open(a.document, encoding="utf-8") as f:
            doc = json.load(f)
        if isinstance(doc, dict):
            print(hashlib.sha256(message_v2(doc["document"], doc.get("skip_hash", []))).hexdigest())
        else:
            print(content_hash(doc))
        return
    sys.stdout.write(dumps(build()))


if __name__ == "__main__":
    main()
