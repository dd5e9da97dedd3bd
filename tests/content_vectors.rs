//! The content hash is a format (docs/id-scheme.md, "Content hash"): every stored document's
//! `_nk_hash` depends on it. These golden vectors are computed by an independent Python
//! implementation of that document (scripts/content_hash.py); each must be reproduced by the
//! Rust document it describes, and none may change: a v2 vector by its `content_hash()`, a v1
//! vector by the v1 hash of its type (`content_hash()` of a v1 type, `__content_hash_v1()` of
//! a type now hashed v2, whose documents written before still carry it).
//!
//! The documents derive only `Serialize` next to `NaturalKey`: hashing needs nothing else, and
//! the helper types below exist only to present a serde shape (an ordered map, bytes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDate, Utc};
use natural_key::prelude::*;
use natural_key::{bson, ContentHash};
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

const T: i64 = 1_700_000_000_000;

/// Most vectors share the identity key `k = "a"` and the timestamp key `ts = T`, both hashed
/// like any other field; this declares such a document with its remaining fields.
macro_rules! document {
    ($(#[$cm:meta])* struct $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        #[derive(NaturalKey, Serialize)]
        $(#[$cm])*
        struct $name {
            #[key]
            k: String,
            #[key(timestamp)]
            ts: i64,
            $($(#[$fm])* $f: $t,)*
        }
    };
}

/// A value of a [`document!`] type, its keys filled in.
macro_rules! doc {
    ($name:ident { $($f:ident : $e:expr),* $(,)? }) => {
        $name { k: "a".into(), ts: T, $($f: $e),* }
    };
}

/// Serializes as a map in the pairs' order: what a `HashMap` does in some process, made
/// reproducible, and the only way to hand the hasher a duplicate key.
struct Ordered<K, V>(Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for Ordered<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// serde's bytes, as `serde_bytes` would produce them (a plain `Vec<u8>` is a sequence).
struct Blob(Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

fn as_bytes<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

#[derive(NaturalKey, Serialize)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    title: String,
    body: String,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

#[derive(NaturalKey, Serialize)]
struct PostNoFetch {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    title: String,
    body: String,
}

fn post(fetched_at: i64) -> Post {
    Post {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: T,
        title: "Hello, world".into(),
        body: "First post.".into(),
        fetched_at,
    }
}

document! { struct Minimal {} }
document! { struct Ints {
    a: i8, b: i16, c: i32, d: i64, e: u8, f: u16, g: u32, h: u64, i: isize, j: usize,
    l: i128, m: i128, n: u128, o: u128, p: u128, q: u128,
} }
document! { struct IntI32 { n: i32 } }
document! { struct IntU8 { n: u8 } }
document! { struct IntU128 { n: u128 } }
document! { struct Floats {
    a: f64, b: f64, c: f64, d: f64, e: f64, f: f64, g: f64, h: f64, i: f64, j: f64,
    l: f32, m: f32, n: f32, o: f32,
} }
document! { struct OneF64 { x: f64 } }
document! { struct OneF32 { x: f32 } }
document! { struct Strings {
    empty: String, ascii: String, cjk: String, emoji: String, composed: String,
    decomposed: String, nul: String, long: String, borrowed: &'static str,
} }
document! { struct Chars { a: char, b: char, c: char, d: char } }
document! { struct OneString { c: String } }
document! { struct OneChar { c: char } }
document! { struct Bools { t: bool, f: bool } }
document! { struct Options {
    a: Option<i32>, b: Option<i32>, c: Option<Option<String>>, d: Option<Option<String>>,
    e: Option<Vec<u8>>,
} }
document! { struct OptString { c: Option<String> } }

#[derive(Serialize)]
struct Marker;
document! { struct Units { u: (), m: Marker, p: PhantomData<i32>, n: Option<u8> } }

#[derive(Serialize)]
struct Meters(f64);
#[derive(Serialize)]
struct Tag(String);
document! { struct Newtypes { m: Meters, t: Tag, b: Box<i32> } }
document! { struct Bare { m: f64, t: String, b: i32 } }

#[derive(Serialize)]
struct Point(i32, i32);
#[derive(Serialize)]
struct Nothing();
document! { struct Tuples {
    pair: (i32, String), single: (u8,), nested: ((), (bool, char)), point: Point,
    nothing: Nothing, arr: [u16; 3], empty_arr: [u8; 0],
} }
document! { struct Seqs {
    empty: Vec<String>, words: Vec<String>, nested: Vec<Vec<i64>>, set: BTreeSet<i32>,
    raw: Vec<u8>,
} }
document! { struct ArrAsSeq { v: [u8; 3] } }
document! { struct VecAsSeq { v: Vec<u8> } }
document! { struct Bytes { v: Blob, empty: Blob } }
document! { struct StrMap { m: BTreeMap<String, i64> } }
document! { struct StrMapOrdered { m: Ordered<String, i64> } }
document! { struct StrHashMap { m: HashMap<String, i64> } }
document! { struct OtherMaps {
    ints: BTreeMap<i64, bool>, tuples: BTreeMap<(u8, String), ()>,
    empty: BTreeMap<String, String>, nested: BTreeMap<String, BTreeMap<String, u8>>,
} }
document! { struct DupMap { m: Ordered<String, u8> } }

#[derive(Serialize)]
struct Deep {
    c: String,
}
#[derive(Serialize)]
struct Inner {
    a: u8,
    b: Deep,
}
#[derive(Serialize)]
struct Empty {}
document! { struct Nested { inner: Inner, list: Vec<Inner>, empty: Empty } }

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Attrs {
    first_name: String,
    #[serde(rename = "LAST")]
    last_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    middle: Option<String>,
    // Never serialized: here to show that serde's skip hides it from the hash too.
    #[allow(dead_code)]
    #[serde(skip)]
    cache: u32,
    r#type: u8,
}
document! { struct NestedAttrs { person: Attrs } }

#[derive(Serialize)]
struct Flat {
    a: u8,
    #[serde(flatten)]
    extra: BTreeMap<String, u8>,
}
document! { struct Flattened { f: Flat } }

document! {
    #[serde(rename_all = "camelCase")]
    struct Renamed {
        #[serde(rename = "Title")]
        the_title: String,
        page_count: u32,
    }
}
document! { struct Idents { r#type: String, größe: u8 } }
document! { struct SkipIf {
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
} }
document! { struct With {
    #[serde(serialize_with = "as_bytes")]
    data: Vec<u8>,
} }
document! { struct SkipSerde {
    #[serde(skip)]
    cache: u32,
} }
document! { struct FlattenTop {
    #[serde(flatten)]
    extra: BTreeMap<String, u8>,
} }

document! { struct FlattenOrdered {
    #[serde(flatten)]
    extra: Ordered<String, u8>,
} }

/// One type per `rename_all` rule, with a `skip_hash` field the rule renames: the derive must
/// leave it out under the very name serde stores it with.
macro_rules! renamed {
    ($($name:ident: $rule:literal),* $(,)?) => {$(
        document! {
            #[serde(rename_all = $rule)]
            struct $name {
                page_count: u32,
                #[natural_key(skip_hash)]
                last_seen_at: i64,
            }
        }
    )*};
}
renamed! {
    RenamedLower: "lowercase",
    RenamedUpper: "UPPERCASE",
    RenamedPascal: "PascalCase",
    RenamedCamel: "camelCase",
    RenamedSnake: "snake_case",
    RenamedScreaming: "SCREAMING_SNAKE_CASE",
    RenamedKebab: "kebab-case",
    RenamedScreamingKebab: "SCREAMING-KEBAB-CASE",
}

document! { struct FlatSkip {
    #[natural_key(skip_hash)]
    fetched_at: i64,
    #[serde(flatten)]
    extra: BTreeMap<String, u8>,
} }
document! {
    #[serde(tag = "kind")]
    struct TaggedDoc { n: u8 }
}

mod hex_text {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }
}
document! { struct WithModule {
    #[serde(with = "hex_text")]
    data: Vec<u8>,
} }
document! { struct RenameSer {
    #[serde(rename(serialize = "out", deserialize = "in"))]
    n: u8,
} }
document! {
    #[serde(rename = "Wire", deny_unknown_fields, rename_all(deserialize = "camelCase"))]
    struct DeOnly {
        #[serde(rename(deserialize = "in"), alias = "old", default)]
        n: u8,
    }
}
document! {
    #[derive(Clone)]
    #[serde(into = "IntoWire")]
    struct IntoDoc { n: u8 }
}
#[derive(Serialize)]
struct IntoWire {
    id: String,
    n: u8,
}
impl From<IntoDoc> for IntoWire {
    fn from(d: IntoDoc) -> Self {
        IntoWire { id: d.k, n: d.n }
    }
}
#[derive(NaturalKey, Serialize)]
#[serde(transparent)]
struct Transparent {
    #[key]
    #[serde(skip)]
    k: String,
    #[key(timestamp)]
    #[serde(skip)]
    ts: i64,
    inner: Inner,
}

#[derive(Serialize)]
enum Shape {
    Dot,
    Circle(u32),
    Line(i32, i32),
    Rect {
        w: u8,
        h: u8,
    },
    Hollow(),
    Void {},
    #[serde(rename = "sq")]
    Square(Option<u8>),
}
document! { struct Shapes {
    unit: Shape, newtype: Shape, tuple: Shape, strukt: Shape, empty_tuple: Shape,
    empty_struct: Shape, renamed: Shape, all: Vec<Shape>,
} }

#[derive(Serialize)]
#[serde(tag = "type")]
enum Internal {
    On,
    Set { level: u8 },
}
#[derive(Serialize)]
#[serde(tag = "t", content = "c")]
enum Adjacent {
    Off,
    Pair(u8, u8),
}
#[derive(Serialize)]
#[serde(untagged)]
enum Untagged {
    Num(i64),
    Text(String),
}
document! { struct Tagged {
    a: Internal, b: Internal, c: Adjacent, d: Adjacent, e: Untagged, f: Untagged,
} }

document! { struct StdTimes { at: SystemTime, took: Duration } }
document! { struct ChronoDates {
    at: DateTime<Utc>, ms: DateTime<Utc>, ns: DateTime<Utc>, day: NaiveDate,
} }
document! { struct BsonValues { at: bson::DateTime, oid: bson::oid::ObjectId } }
document! { struct Uuids { u: uuid::Uuid } }

/// One Rust counterpart of a vector.
struct Case {
    name: &'static str,
    hash: ContentHash,
    /// `__content_hash_v1()`: for a type hashed v2, the v1 hash a writer before the upgrade
    /// stored, which is what the type's v1 vectors describe.
    hash_v1: Option<ContentHash>,
    /// The document as serde presents it, in the vectors' value model, to be compared with the
    /// vector's fields: proof that the Rust value is the one the vector describes. `None` where
    /// serde attributes on the document's own fields make serde's view differ from the hashed
    /// one, which the derive builds from the Rust fields.
    serde_view: Option<Value>,
}

fn case<D: NaturalKey>(name: &'static str, doc: D) -> Case {
    Case {
        name,
        hash: doc.content_hash().unwrap(),
        hash_v1: doc.__content_hash_v1(),
        serde_view: Some(model::of(&doc)),
    }
}

fn case_derive_view<D: NaturalKey>(name: &'static str, doc: D) -> Case {
    Case {
        serde_view: None,
        ..case(name, doc)
    }
}

fn str_map() -> Vec<(String, i64)> {
    [("", 0), ("aa", 2), ("ab", 3), ("b", 1), ("é", 4)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}

fn utc(secs: i64, nanos: u32) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, nanos).unwrap()
}

fn cases() -> Vec<Case> {
    let s = |x: &str| x.to_owned();
    vec![
        case("minimal", doc!(Minimal {})),
        case("post", post(1_700_000_123_456)),
        case("post, other skip_hash value", post(0)),
        case(
            "post without the skipped field",
            PostNoFetch {
                slug: "hello-world".into(),
                lang: "en".into(),
                published_at: T,
                title: "Hello, world".into(),
                body: "First post.".into(),
            },
        ),
        case(
            "integers",
            doc!(Ints {
                a: i8::MIN,
                b: -300,
                c: -1,
                d: i64::MAX,
                e: u8::MAX,
                f: 65535,
                g: u32::MAX,
                h: u64::MAX,
                i: isize::MIN,
                j: usize::MAX,
                l: i128::MIN,
                m: i128::MAX,
                n: 0,
                o: i128::MAX as u128,
                p: i128::MAX as u128 + 1,
                q: u128::MAX,
            }),
        ),
        case("i32 five", doc!(IntI32 { n: 5 })),
        case("u8 five", doc!(IntU8 { n: 5 })),
        case("u128 five", doc!(IntU128 { n: 5 })),
        case(
            "floats",
            doc!(Floats {
                a: 0.0,
                b: 1.5,
                c: -2.25,
                d: 0.1,
                e: f64::MAX,
                f: f64::MIN_POSITIVE,
                g: 5e-324,
                h: f64::INFINITY,
                i: f64::NEG_INFINITY,
                j: f64::NAN,
                l: 0.1,
                m: f32::MAX,
                n: f32::NEG_INFINITY,
                o: f32::NAN,
            }),
        ),
        case("f64 zero", doc!(OneF64 { x: 0.0 })),
        case("f64 negative zero", doc!(OneF64 { x: -0.0 })),
        case("f32 negative zero", doc!(OneF32 { x: -0.0 })),
        case("f64 NaN", doc!(OneF64 { x: f64::NAN })),
        case(
            "f64 negative NaN with payload",
            doc!(OneF64 {
                x: f64::from_bits(0xfff8_0000_0000_0001)
            }),
        ),
        case(
            "f64 signaling NaN",
            doc!(OneF64 {
                x: f64::from_bits(0x7ff0_0000_0000_0001)
            }),
        ),
        case(
            "f32 NaN with payload",
            doc!(OneF32 {
                x: f32::from_bits(0xffc0_0001)
            }),
        ),
        case("f32 one and a half", doc!(OneF32 { x: 1.5 })),
        case("f64 one and a half", doc!(OneF64 { x: 1.5 })),
        case(
            "strings",
            doc!(Strings {
                empty: s(""),
                ascii: s("hello"),
                cjk: s("台北美食指南"),
                emoji: s("😀"),
                composed: s("Caf\u{e9}"),
                decomposed: s("Cafe\u{301}"),
                nul: s("a\0b"),
                long: "x".repeat(300),
                borrowed: "static",
            }),
        ),
        case(
            "chars",
            doc!(Chars {
                a: 'a',
                b: 'é',
                c: '中',
                d: '😀'
            }),
        ),
        case("one-char string", doc!(OneString { c: s("x") })),
        case("char", doc!(OneChar { c: 'x' })),
        case("bools", doc!(Bools { t: true, f: false })),
        case(
            "options",
            doc!(Options {
                a: Some(5),
                b: None,
                c: Some(Some(s("x"))),
                d: Some(None),
                e: Some(vec![]),
            }),
        ),
        case("some string", doc!(OptString { c: Some(s("x")) })),
        case(
            "units",
            doc!(Units {
                u: (),
                m: Marker,
                p: PhantomData,
                n: None
            }),
        ),
        case(
            "newtype structs",
            doc!(Newtypes {
                m: Meters(1.5),
                t: Tag(s("x")),
                b: Box::new(7)
            }),
        ),
        case(
            "newtype is transparent",
            doc!(Bare {
                m: 1.5,
                t: s("x"),
                b: 7
            }),
        ),
        case(
            "tuples and tuple structs",
            doc!(Tuples {
                pair: (1, s("one")),
                single: (9,),
                nested: ((), (true, 'z')),
                point: Point(-1, 2),
                nothing: Nothing(),
                arr: [1, 2, 3],
                empty_arr: [],
            }),
        ),
        case(
            "sequences",
            doc!(Seqs {
                empty: vec![],
                words: vec![s("b"), s("a")],
                nested: vec![vec![1], vec![], vec![-2, 3]],
                set: [3, -1, 2].into(),
                raw: vec![0, 255, 16],
            }),
        ),
        case("array is a sequence", doc!(ArrAsSeq { v: [0, 255, 16] })),
        case(
            "vec is the same sequence",
            doc!(VecAsSeq {
                v: vec![0, 255, 16]
            }),
        ),
        case(
            "bytes",
            doc!(Bytes {
                v: Blob(vec![0, 255, 16]),
                empty: Blob(vec![])
            }),
        ),
        case(
            "map with unsorted keys",
            doc!(StrMap {
                m: str_map().into_iter().collect()
            }),
        ),
        case(
            "same map, another insertion order",
            doc!(StrMapOrdered {
                m: Ordered([4, 3, 2, 0, 1].map(|i| str_map()[i].clone()).into())
            }),
        ),
        case(
            "same map as a HashMap",
            doc!(StrHashMap {
                m: str_map().into_iter().collect()
            }),
        ),
        case(
            "maps of other keys",
            doc!(OtherMaps {
                ints: [(i64::MIN, true), (-1, false), (0, true), (1, false)].into(),
                tuples: [((1, s("b")), ()), ((2, s("a")), ())].into(),
                empty: BTreeMap::new(),
                nested: [
                    (s("x"), [(s("b"), 2), (s("a"), 1)].into()),
                    (s("w"), BTreeMap::new()),
                ]
                .into(),
            }),
        ),
        case(
            "map with a duplicate key",
            doc!(DupMap {
                m: Ordered(vec![(s("a"), 2), (s("a"), 1)])
            }),
        ),
        case(
            "map with a duplicate key, other order",
            doc!(DupMap {
                m: Ordered(vec![(s("a"), 1), (s("a"), 2)])
            }),
        ),
        case(
            "nested structs",
            doc!(Nested {
                inner: Inner {
                    a: 1,
                    b: Deep { c: s("deep") }
                },
                list: vec![Inner {
                    a: 2,
                    b: Deep { c: s("") }
                }],
                empty: Empty {},
            }),
        ),
        case(
            "nested struct with serde attributes",
            doc!(NestedAttrs {
                person: Attrs {
                    first_name: s("Ada"),
                    last_name: s("Lovelace"),
                    middle: None,
                    cache: 7,
                    r#type: 1,
                }
            }),
        ),
        case(
            "nested struct with flatten",
            doc!(Flattened {
                f: Flat {
                    a: 1,
                    extra: [(s("z"), 3), (s("b"), 2)].into()
                }
            }),
        ),
        case_derive_view(
            "top-level serde rename",
            doc!(Renamed {
                the_title: s("t"),
                page_count: 3
            }),
        ),
        case_derive_view(
            "top-level raw and non-ASCII field names",
            doc!(Idents {
                r#type: s("post"),
                größe: 2
            }),
        ),
        case_derive_view("top-level skip_serializing_if", doc!(SkipIf { note: None })),
        case_derive_view(
            "top-level serialize_with",
            doc!(With {
                data: vec![0, 255, 16]
            }),
        ),
        case_derive_view("top-level serde skip", doc!(SkipSerde { cache: 7 })),
        case_derive_view(
            "top-level serde flatten",
            doc!(FlattenTop {
                extra: [(s("b"), 2), (s("a"), 1)].into()
            }),
        ),
        case(
            "enum variants",
            doc!(Shapes {
                unit: Shape::Dot,
                newtype: Shape::Circle(7),
                tuple: Shape::Line(-1, 1),
                strukt: Shape::Rect { w: 2, h: 3 },
                empty_tuple: Shape::Hollow(),
                empty_struct: Shape::Void {},
                renamed: Shape::Square(None),
                all: vec![Shape::Dot, Shape::Circle(0)],
            }),
        ),
        case(
            "tagged enums",
            doc!(Tagged {
                a: Internal::On,
                b: Internal::Set { level: 4 },
                c: Adjacent::Off,
                d: Adjacent::Pair(1, 2),
                e: Untagged::Num(5),
                f: Untagged::Text(s("x")),
            }),
        ),
        case(
            "std time types",
            doc!(StdTimes {
                at: UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
                took: Duration::from_millis(1500),
            }),
        ),
        case(
            "chrono dates",
            doc!(ChronoDates {
                at: utc(1_700_000_000, 0),
                ms: utc(1_700_000_000, 123_000_000),
                ns: utc(1_700_000_000, 123_456_789),
                day: NaiveDate::from_ymd_opt(2023, 11, 14).unwrap(),
            }),
        ),
        case(
            "bson values",
            doc!(BsonValues {
                at: bson::DateTime::from_millis(1_700_000_000_123),
                oid: bson::oid::ObjectId::parse_str("507f1f77bcf86cd799439011").unwrap(),
            }),
        ),
        case(
            "uuid",
            doc!(Uuids {
                u: uuid::Uuid::parse_str("67e55044-10b1-426f-9247-bb680e5fe0c8").unwrap()
            }),
        ),
        case(
            "top-level serde rename, v2",
            doc!(Renamed {
                the_title: s("t"),
                page_count: 3
            }),
        ),
        case(
            "top-level raw and non-ASCII field names, v2",
            doc!(Idents {
                r#type: s("post"),
                größe: 2
            }),
        ),
        case(
            "top-level skip_serializing_if, v2",
            doc!(SkipIf { note: None }),
        ),
        case(
            "top-level skip_serializing_if, present, v2",
            doc!(SkipIf { note: Some(s("x")) }),
        ),
        case(
            "top-level serialize_with, v2",
            doc!(With {
                data: vec![0, 255, 16]
            }),
        ),
        case("top-level serde skip, v2", doc!(SkipSerde { cache: 7 })),
        case(
            "top-level serde flatten, v2",
            doc!(FlattenTop {
                extra: [(s("b"), 2), (s("a"), 1)].into()
            }),
        ),
        case(
            "top-level serde flatten, another order, v2",
            doc!(FlattenOrdered {
                extra: Ordered(vec![(s("b"), 2), (s("a"), 1)])
            }),
        ),
        case(
            "skip_hash by its stored name, lowercase, v2",
            doc!(RenamedLower {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, UPPERCASE, v2",
            doc!(RenamedUpper {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, PascalCase, v2",
            doc!(RenamedPascal {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, camelCase, v2",
            doc!(RenamedCamel {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, snake_case, v2",
            doc!(RenamedSnake {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, SCREAMING_SNAKE_CASE, v2",
            doc!(RenamedScreaming {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, kebab-case, v2",
            doc!(RenamedKebab {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, SCREAMING-KEBAB-CASE, v2",
            doc!(RenamedScreamingKebab {
                page_count: 3,
                last_seen_at: T
            }),
        ),
        case(
            "skip_hash by its stored name, other value, v2",
            doc!(RenamedCamel {
                page_count: 3,
                last_seen_at: 0
            }),
        ),
        case(
            "skip_hash in a flattened document, v2",
            doc!(FlatSkip {
                fetched_at: 9,
                extra: [(s("z"), 1)].into()
            }),
        ),
        case(
            "skip_hash in a flattened document, other value, v2",
            doc!(FlatSkip {
                fetched_at: 0,
                extra: [(s("z"), 1)].into()
            }),
        ),
        case("container tag, v2", doc!(TaggedDoc { n: 5 })),
        case(
            "with module, v2",
            doc!(WithModule {
                data: vec![0, 255, 16]
            }),
        ),
        case(
            "rename for serialization only, v2",
            doc!(RenameSer { n: 5 }),
        ),
        case(
            "deserialization-only serde attributes keep v1",
            doc!(DeOnly { n: 5 }),
        ),
        case("into, v2", doc!(IntoDoc { n: 5 })),
        case(
            "transparent, v2",
            Transparent {
                k: s("a"),
                ts: T,
                inner: Inner {
                    a: 1,
                    b: Deep { c: s("deep") },
                },
            },
        ),
    ]
}

fn vectors() -> Vec<Value> {
    let doc: Value = serde_json::from_str(include_str!("vectors/content.json")).unwrap();
    doc["vectors"].as_array().unwrap().clone()
}

#[test]
fn golden_content_vectors_from_the_python_reference() {
    let vectors = vectors();
    let mut by_name: BTreeMap<&str, Case> = BTreeMap::new();
    for c in cases() {
        let name = c.name;
        assert!(
            by_name.insert(name, c).is_none(),
            "two cases named {name:?}"
        );
    }
    // Collected rather than asserted one by one: a format change shows as a pattern.
    let mut failures = Vec::new();
    for v in vectors.iter().filter(|v| v["version"] != "untyped") {
        let name = v["name"].as_str().unwrap();
        let Some(c) = by_name.remove(name) else {
            failures.push(format!(
                "{name:?}: no Rust counterpart in tests/content_vectors.rs"
            ));
            continue;
        };
        let v2 = v["version"] == 2;
        // The serde view is the whole document in v2, the fields (less their flags) in v1.
        let (got, expected) = if v2 {
            (c.serde_view.clone(), v["document"].clone())
        } else {
            let fields = v["fields"].as_array().unwrap().iter();
            let fields = fields.map(|f| Value::Array(f.as_array().unwrap()[..2].to_vec()));
            let view = c.serde_view.as_ref().map(|view| view["struct"][1].clone());
            (view, Value::Array(fields.collect()))
        };
        if let Some(got) = got {
            if model::normalize(&got) != model::normalize(&expected) {
                failures.push(format!(
                    "{name:?}: the Rust value is not the vector's\n  rust:   {got}\n  vector: {expected}"
                ));
                continue;
            }
        }
        if v2 && c.hash_v1.is_none() {
            failures.push(format!("{name:?}: a v2 vector, but its type is hashed v1"));
            continue;
        }
        let (what, hash) = match c.hash_v1 {
            Some(_) if v2 => ("content_hash()", c.hash),
            Some(v1) => ("__content_hash_v1()", v1),
            None => ("content_hash()", c.hash),
        };
        if hash.to_string() != v["hash"].as_str().unwrap() {
            failures.push(format!("{name:?}: {what} {hash}, vector {}", v["hash"]));
        }
    }
    for name in by_name.keys() {
        failures.push(format!("{name:?}: a case without a vector"));
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

/// The untyped vectors: a stored document in canonical Extended JSON, read as `natural-key
/// ingest` reads a line (its fields in order), hashed by `KeySpec::content_hash`; `same_as` a
/// typed vector means the document a Rust type stores and the same document without the type
/// hash alike.
#[test]
fn golden_untyped_content_vectors_from_the_python_reference() {
    use natural_key::spec::KeySpec;
    let mut hashes = BTreeMap::new();
    let mut checked = 0;
    for v in vectors() {
        let name = v["name"].as_str().unwrap().to_string();
        let hash = v["hash"].as_str().unwrap().to_string();
        if v["version"] == "untyped" {
            let doc: natural_key::bson::Document =
                serde_json::from_str(v["ejson"].as_str().unwrap()).unwrap();
            let raw = natural_key::bson::RawDocumentBuf::from_document(&doc).unwrap();
            let mut spec = KeySpec::new(natural_key::Scheme::Default { namespace: "" }, "ts");
            for f in v["skip_hash"].as_array().unwrap() {
                spec = spec.skip_hash(Box::leak(f.as_str().unwrap().to_string().into_boxed_str()));
            }
            assert_eq!(spec.content_hash(&raw).unwrap().to_string(), hash, "{name}");
            if let Some(same) = v["same_as"].as_str() {
                assert_eq!(hashes.get(same), Some(&hash), "{name} hashes like {same}");
            }
            checked += 1;
        }
        hashes.insert(name, hash);
    }
    assert!(checked >= 3, "{checked} untyped vectors");
}

// The rule beyond the vectors: what is hashed is what is stored, so two types that store the
// same document hash the same, whatever their Rust fields.

document! { struct TitleAsHeadline {
    #[serde(rename = "title")]
    headline: String,
} }
document! { struct TitleAsName {
    #[serde(rename = "title")]
    name: String,
} }
document! { struct HeadingAsHeadline {
    #[serde(rename = "heading")]
    headline: String,
} }

#[test]
fn a_renamed_field_is_hashed_under_its_stored_name() {
    let h = |d: &dyn Hash| d.hash();
    let a = doc!(TitleAsHeadline {
        headline: "x".into()
    });
    assert_eq!(h(&a), h(&doc!(TitleAsName { name: "x".into() })));
    assert_ne!(
        h(&a),
        h(&doc!(HeadingAsHeadline {
            headline: "x".into()
        }))
    );
}

document! { struct DataAsBlob {
    #[serde(rename = "data")]
    data: Blob,
} }
document! { struct DataAsSeq {
    #[serde(rename = "data")]
    data: Vec<u8>,
} }

#[test]
fn serialize_with_hashes_the_stored_representation() {
    let h = |d: &dyn Hash| d.hash();
    let with = doc!(With {
        data: vec![0, 255, 16]
    });
    assert_eq!(
        h(&with),
        h(&doc!(DataAsBlob {
            data: Blob(vec![0, 255, 16])
        }))
    );
    assert_ne!(
        h(&with),
        h(&doc!(DataAsSeq {
            data: vec![0, 255, 16]
        }))
    );
}

/// Not `Serialize`: a v1 walk could not hash a type holding it, a v2 hash never looks at it.
struct Handle(#[allow(dead_code)] u32);
document! { struct WithHandle {
    #[serde(skip)]
    handle: Handle,
    n: u8,
} }

#[test]
fn a_field_serde_skips_is_not_hashed_and_need_not_be_serialize() {
    let h = |d: &dyn Hash| d.hash();
    assert_eq!(
        h(&doc!(SkipSerde { cache: 7 })),
        h(&doc!(SkipSerde { cache: 8 }))
    );
    let a = doc!(WithHandle {
        handle: Handle(1),
        n: 5
    });
    assert_eq!(
        h(&a),
        h(&doc!(WithHandle {
            handle: Handle(2),
            n: 5
        }))
    );
    assert_ne!(
        h(&a),
        h(&doc!(WithHandle {
            handle: Handle(1),
            n: 6
        }))
    );
    assert_eq!(
        a.__content_hash_v1(),
        None,
        "no v1 writer can have stored it"
    );
}

document! { struct FlattenHash {
    #[serde(flatten)]
    extra: HashMap<String, u8>,
} }

#[test]
fn a_flattened_map_hashes_in_any_order() {
    let entries: Vec<(String, u8)> = (0..64).map(|i| (format!("f{i}"), i)).collect();
    let sorted = doc!(FlattenTop {
        extra: entries.iter().cloned().collect()
    });
    for _ in 0..8 {
        // Each HashMap has its own random order.
        let hashed = doc!(FlattenHash {
            extra: entries.iter().cloned().collect()
        });
        assert_eq!(
            hashed.content_hash().unwrap(),
            sorted.content_hash().unwrap()
        );
    }
    let reversed = doc!(FlattenOrdered {
        extra: Ordered(entries.iter().rev().cloned().collect())
    });
    assert_eq!(
        reversed.content_hash().unwrap(),
        sorted.content_hash().unwrap()
    );
}

trait Hash {
    fn hash(&self) -> ContentHash;
}
impl<D: NaturalKey> Hash for D {
    fn hash(&self) -> ContentHash {
        self.content_hash().unwrap()
    }
}

/// The vectors' language-neutral value model (see scripts/content_hash.py), produced from a
/// Rust value by serde: what the hasher is handed, written down.
mod model {
    use std::fmt;

    use serde::ser::{self, Serialize};
    use serde_json::{json, Value};

    pub fn of<T: Serialize + ?Sized>(v: &T) -> Value {
        v.serialize(Model).unwrap()
    }

    /// Makes two descriptions of one value equal: floats as bit patterns, pointer-sized
    /// integers as serde presents them (64-bit), map entries in one order.
    pub fn normalize(v: &Value) -> Value {
        match v {
            Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
            Value::Object(o) if o.len() == 1 => {
                let (kind, inner) = o.iter().next().unwrap();
                match (kind.as_str(), inner) {
                    ("f64", Value::String(s)) => {
                        json!({ "f64_bits": format!("{:016x}", s.parse::<f64>().unwrap().to_bits()) })
                    }
                    ("f32", Value::String(s)) => {
                        json!({ "f32_bits": format!("{:08x}", s.parse::<f32>().unwrap().to_bits()) })
                    }
                    ("isize", n) => json!({ "i64": n }),
                    ("usize", n) => json!({ "u64": n }),
                    ("map", Value::Array(entries)) => {
                        let mut e: Vec<Value> = entries.iter().map(normalize).collect();
                        e.sort_by_key(|x| x.to_string());
                        json!({ "map": e })
                    }
                    (k, inner) => json!({ k: normalize(inner) }),
                }
            }
            other => other.clone(),
        }
    }

    #[derive(Debug)]
    pub struct Error(String);
    impl fmt::Display for Error {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for Error {}
    impl ser::Error for Error {
        fn custom<T: fmt::Display>(msg: T) -> Self {
            Error(msg.to_string())
        }
    }

    type R = Result<Value, Error>;

    fn num(kind: &str, n: impl ToString) -> R {
        Ok(json!({ kind: n.to_string() }))
    }

    // Not human-readable-agnostic: like the content hasher it keeps serde's default (true).
    struct Model;

    pub struct Compound {
        kind: &'static str,
        name: &'static str,
        variant: &'static str,
        items: Vec<Value>,
    }

    impl Compound {
        fn new(kind: &'static str, name: &'static str, variant: &'static str) -> Self {
            Compound {
                kind,
                name,
                variant,
                items: Vec::new(),
            }
        }
        fn finish(self) -> R {
            let items = Value::Array(self.items);
            Ok(match self.kind {
                "seq" | "tuple" => json!({ self.kind: items }),
                "tuple_struct" | "struct" => json!({ self.kind: [self.name, items] }),
                _ => json!({ self.kind: [self.name, self.variant, items] }),
            })
        }
    }

    pub struct MapModel {
        entries: Vec<Value>,
        key: Option<Value>,
    }

    impl ser::Serializer for Model {
        type Ok = Value;
        type Error = Error;
        type SerializeSeq = Compound;
        type SerializeTuple = Compound;
        type SerializeTupleStruct = Compound;
        type SerializeTupleVariant = Compound;
        type SerializeMap = MapModel;
        type SerializeStruct = Compound;
        type SerializeStructVariant = Compound;

        fn serialize_bool(self, v: bool) -> R {
            Ok(json!({ "bool": v }))
        }
        fn serialize_i8(self, v: i8) -> R {
            num("i8", v)
        }
        fn serialize_i16(self, v: i16) -> R {
            num("i16", v)
        }
        fn serialize_i32(self, v: i32) -> R {
            num("i32", v)
        }
        fn serialize_i64(self, v: i64) -> R {
            num("i64", v)
        }
        fn serialize_i128(self, v: i128) -> R {
            num("i128", v)
        }
        fn serialize_u8(self, v: u8) -> R {
            num("u8", v)
        }
        fn serialize_u16(self, v: u16) -> R {
            num("u16", v)
        }
        fn serialize_u32(self, v: u32) -> R {
            num("u32", v)
        }
        fn serialize_u64(self, v: u64) -> R {
            num("u64", v)
        }
        fn serialize_u128(self, v: u128) -> R {
            num("u128", v)
        }
        fn serialize_f32(self, v: f32) -> R {
            Ok(json!({ "f32_bits": format!("{:08x}", v.to_bits()) }))
        }
        fn serialize_f64(self, v: f64) -> R {
            Ok(json!({ "f64_bits": format!("{:016x}", v.to_bits()) }))
        }
        fn serialize_char(self, v: char) -> R {
            Ok(json!({ "char": v.to_string() }))
        }
        fn serialize_str(self, v: &str) -> R {
            Ok(json!({ "str": v }))
        }
        fn serialize_bytes(self, v: &[u8]) -> R {
            let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
            Ok(json!({ "bytes": hex }))
        }
        fn serialize_none(self) -> R {
            Ok(json!({ "none": null }))
        }
        fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> R {
            Ok(json!({ "some": v.serialize(Model)? }))
        }
        fn serialize_unit(self) -> R {
            Ok(json!({ "unit": null }))
        }
        fn serialize_unit_struct(self, name: &'static str) -> R {
            Ok(json!({ "unit_struct": name }))
        }
        fn serialize_unit_variant(self, name: &'static str, _: u32, variant: &'static str) -> R {
            Ok(json!({ "unit_variant": [name, variant] }))
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, v: &T) -> R {
            Ok(json!({ "newtype_struct": [name, v.serialize(Model)?] }))
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            name: &'static str,
            _: u32,
            variant: &'static str,
            v: &T,
        ) -> R {
            Ok(json!({ "newtype_variant": [name, variant, v.serialize(Model)?] }))
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Compound, Error> {
            Ok(Compound::new("seq", "", ""))
        }
        fn serialize_tuple(self, _: usize) -> Result<Compound, Error> {
            Ok(Compound::new("tuple", "", ""))
        }
        fn serialize_tuple_struct(self, name: &'static str, _: usize) -> Result<Compound, Error> {
            Ok(Compound::new("tuple_struct", name, ""))
        }
        fn serialize_tuple_variant(
            self,
            name: &'static str,
            _: u32,
            variant: &'static str,
            _: usize,
        ) -> Result<Compound, Error> {
            Ok(Compound::new("tuple_variant", name, variant))
        }
        fn serialize_map(self, _: Option<usize>) -> Result<MapModel, Error> {
            Ok(MapModel {
                entries: Vec::new(),
                key: None,
            })
        }
        fn serialize_struct(self, name: &'static str, _: usize) -> Result<Compound, Error> {
            Ok(Compound::new("struct", name, ""))
        }
        fn serialize_struct_variant(
            self,
            name: &'static str,
            _: u32,
            variant: &'static str,
            _: usize,
        ) -> Result<Compound, Error> {
            Ok(Compound::new("struct_variant", name, variant))
        }
    }

    macro_rules! elements {
        ($trait:ident, $method:ident) => {
            impl ser::$trait for Compound {
                type Ok = Value;
                type Error = Error;
                fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
                    self.items.push(v.serialize(Model)?);
                    Ok(())
                }
                fn end(self) -> R {
                    self.finish()
                }
            }
        };
    }
    elements!(SerializeSeq, serialize_element);
    elements!(SerializeTuple, serialize_element);
    elements!(SerializeTupleStruct, serialize_field);
    elements!(SerializeTupleVariant, serialize_field);

    macro_rules! fields {
        ($trait:ident) => {
            impl ser::$trait for Compound {
                type Ok = Value;
                type Error = Error;
                fn serialize_field<T: Serialize + ?Sized>(
                    &mut self,
                    key: &'static str,
                    v: &T,
                ) -> Result<(), Error> {
                    self.items.push(json!([key, v.serialize(Model)?]));
                    Ok(())
                }
                fn end(self) -> R {
                    self.finish()
                }
            }
        };
    }
    fields!(SerializeStruct);
    fields!(SerializeStructVariant);

    impl ser::SerializeMap for MapModel {
        type Ok = Value;
        type Error = Error;
        fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
            self.key = Some(k.serialize(Model)?);
            Ok(())
        }
        fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
            let k = self.key.take().expect("serde hands a key before its value");
            self.entries.push(json!([k, v.serialize(Model)?]));
            Ok(())
        }
        fn end(self) -> R {
            Ok(json!({ "map": self.entries }))
        }
    }
}
