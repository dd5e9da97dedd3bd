//! Fuzzed inputs (issue #14, part 5): arbitrary serde values and key values through `id()`,
//! `identity()`, `content_hash()` and the public helpers. No database.
//!
//! Each property compares the library with an oracle written here from docs/id-scheme.md alone
//! (the identity message, the content hash's value table), so "no panic" (proptest turns a
//! panic into a failing, shrunk case), "equal values hash equal" and "different values hash
//! differently" are all checked against the spec's bytes, not against the code itself. Every
//! error must be the typed error the spec names, with a non-empty message.
//!
//! CI size: 256 cases per property. Full size: `NK_FUZZ_CASES=<cases per property>`, e.g.
//! `NK_FUZZ_CASES=100000 cargo test --release --all-features --test fuzz -- --nocapture`
//! (docs/reliability.md, "Fuzzed inputs", has the figures of a run).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use natural_key::bson::{self, oid::ObjectId, Bson, Document};
use natural_key::prelude::*;
use natural_key::{
    canonical_hash, compute_id, compute_identity, ContentHash, Error, KeyError, KeyPart,
    KeyTimestamp, KeyValue, Scheme, MAX_TIMESTAMP_MS,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde::ser::{
    SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant,
};
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

// ---------------------------------------------------------------------------------------------
// Harness

fn cases() -> u32 {
    match std::env::var("NK_FUZZ_CASES") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("NK_FUZZ_CASES={v:?} is not a number of cases")),
        Err(_) => 256,
    }
}

/// Runs `test` on `cases()` values of `strategy`, then prints how many executions ran and how
/// long they took (the figures docs/reliability.md records; nothing asserts on them).
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases: cases(),
        max_global_rejects: u32::MAX,
        failure_persistence: None,
        ..Config::default()
    };
    let executions = AtomicU64::new(0);
    let start = Instant::now();
    let result = TestRunner::new(config).run(&strategy, |v| {
        executions.fetch_add(1, Ordering::Relaxed);
        test(v)
    });
    eprintln!(
        "fuzz {name}: {} executions in {:.1} s",
        executions.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// Tiny deterministic generator for the rewrites below (the seed is part of the input, so a
/// failing case replays).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

fn seed() -> impl Strategy<Value = u64> {
    any::<u64>().prop_map(|s| s | 1)
}

// ---------------------------------------------------------------------------------------------
// Inputs

/// Characters that stress text handling: NUL, case mappings that change length or depend on
/// context (İ, Σ, ǅ, ẞ), combining marks and composable sequences, Hangul jamo, the Kelvin sign,
/// astral and non-character code points, a lone BOM.
const TRICKY: &[char] = &[
    '\0',
    'a',
    'A',
    'Z',
    '.',
    '$',
    ':',
    '_',
    '\u{130}',
    '\u{3a3}',
    '\u{3c3}',
    '\u{3c2}',
    '\u{1c5}',
    '\u{1e9e}',
    '\u{df}',
    '\u{301}',
    '\u{308}',
    '\u{323}',
    'e',
    'E',
    '\u{e9}',
    '\u{1100}',
    '\u{1161}',
    '\u{11a8}',
    '\u{212a}',
    '\u{2126}',
    '\u{2b0}',
    '\u{345}',
    '\u{ff21}',
    '\u{1f600}',
    '\u{10ffff}',
    '\u{fffe}',
    '\u{feff}',
    '\u{a7cb}',
    'J',
    '\u{30c}',
];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![3 => prop::sample::select(TRICKY), 1 => any::<char>()],
        0..10,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn f64s() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        prop::sample::select(vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            f64::from_bits(1),
            -f64::from_bits(1),
            f64::MAX,
            f64::MIN,
            1.0,
        ]),
        // NaNs of every sign and payload.
        (any::<bool>(), 1u64..(1 << 52)).prop_map(|(neg, payload)| f64::from_bits(
            ((neg as u64) << 63) | 0x7ff0_0000_0000_0000 | payload
        )),
        // Subnormals.
        (1u64..(1 << 52)).prop_map(f64::from_bits),
    ]
}

fn f32s() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<f32>(),
        prop::sample::select(vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(1),
            f32::MAX
        ]),
        (any::<bool>(), 1u32..(1 << 23)).prop_map(|(neg, payload)| f32::from_bits(
            ((neg as u32) << 31) | 0x7f80_0000 | payload
        )),
    ]
}

macro_rules! extremes {
    ($t:ty) => {
        prop_oneof![
            any::<$t>(),
            Just(<$t>::MIN),
            Just(<$t>::MAX),
            Just(0 as $t),
            Just(1 as $t)
        ]
    };
}

// ---------------------------------------------------------------------------------------------
// Content hash: a serde value of every shape, and the spec's encoding of it

/// Field and variant names (serde wants `&'static str`): the empty name, NUL, paths,
/// operators, natural-key's names, non-ASCII.
const NAMES: &[&str] = &[
    "",
    "a",
    "b",
    "ab",
    "slug",
    "fetched",
    "_id",
    "_nk_hash",
    "a.b",
    "$x",
    "\0",
    "\u{e9}",
    "\u{65e5}\u{672c}",
];

/// A value of serde's data model, serialized through exactly the matching `Serializer` call.
#[derive(Clone, Debug)]
enum V {
    Unit,
    None,
    Some(Box<V>),
    UnitStruct,
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    F32(f32),
    F64(f64),
    Char(char),
    Str(String),
    Bytes(Vec<u8>),
    Newtype(Box<V>),
    UnitVariant(&'static str),
    NewtypeVariant(&'static str, Box<V>),
    Seq(Vec<V>),
    Tuple(Vec<V>),
    TupleStruct(Vec<V>),
    TupleVariant(&'static str, Vec<V>),
    Map(Vec<(V, V)>),
    Struct(Vec<(&'static str, V)>),
    StructVariant(&'static str, Vec<(&'static str, V)>),
    /// A `Serialize` that fails: the hash must be `Error::Serialize`.
    Fail,
}

const FAIL: &str = "fuzz: this value refuses to serialize";

impl Serialize for V {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            V::Unit => s.serialize_unit(),
            V::None => s.serialize_none(),
            V::Some(v) => s.serialize_some(v),
            V::UnitStruct => s.serialize_unit_struct("U"),
            V::Bool(v) => s.serialize_bool(*v),
            V::I8(v) => s.serialize_i8(*v),
            V::I16(v) => s.serialize_i16(*v),
            V::I32(v) => s.serialize_i32(*v),
            V::I64(v) => s.serialize_i64(*v),
            V::I128(v) => s.serialize_i128(*v),
            V::U8(v) => s.serialize_u8(*v),
            V::U16(v) => s.serialize_u16(*v),
            V::U32(v) => s.serialize_u32(*v),
            V::U64(v) => s.serialize_u64(*v),
            V::U128(v) => s.serialize_u128(*v),
            V::F32(v) => s.serialize_f32(*v),
            V::F64(v) => s.serialize_f64(*v),
            V::Char(v) => s.serialize_char(*v),
            V::Str(v) => s.serialize_str(v),
            V::Bytes(v) => s.serialize_bytes(v),
            V::Newtype(v) => s.serialize_newtype_struct("N", v),
            V::UnitVariant(n) => s.serialize_unit_variant("E", 0, n),
            V::NewtypeVariant(n, v) => s.serialize_newtype_variant("E", 1, n, v),
            V::Seq(vs) => {
                let mut q = s.serialize_seq(Some(vs.len()))?;
                for v in vs {
                    q.serialize_element(v)?;
                }
                q.end()
            }
            V::Tuple(vs) => {
                let mut q = s.serialize_tuple(vs.len())?;
                for v in vs {
                    q.serialize_element(v)?;
                }
                q.end()
            }
            V::TupleStruct(vs) => {
                let mut q = s.serialize_tuple_struct("T", vs.len())?;
                for v in vs {
                    q.serialize_field(v)?;
                }
                q.end()
            }
            V::TupleVariant(n, vs) => {
                let mut q = s.serialize_tuple_variant("E", 2, n, vs.len())?;
                for v in vs {
                    q.serialize_field(v)?;
                }
                q.end()
            }
            V::Map(es) => {
                let mut m = s.serialize_map(Some(es.len()))?;
                for (k, v) in es {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            V::Struct(fs) => {
                let mut q = s.serialize_struct("S", fs.len())?;
                for (n, v) in fs {
                    q.serialize_field(n, v)?;
                }
                q.end()
            }
            V::StructVariant(n, fs) => {
                let mut q = s.serialize_struct_variant("E", 3, n, fs.len())?;
                for (f, v) in fs {
                    q.serialize_field(f, v)?;
                }
                q.end()
            }
            V::Fail => Err(serde::ser::Error::custom(FAIL)),
        }
    }
}

fn leaf() -> impl Strategy<Value = V> {
    prop_oneof![
        Just(V::Unit),
        Just(V::None),
        Just(V::UnitStruct),
        any::<bool>().prop_map(V::Bool),
        extremes!(i8).prop_map(V::I8),
        extremes!(i16).prop_map(V::I16),
        extremes!(i32).prop_map(V::I32),
        extremes!(i64).prop_map(V::I64),
        extremes!(i128).prop_map(V::I128),
        extremes!(u8).prop_map(V::U8),
        extremes!(u16).prop_map(V::U16),
        extremes!(u32).prop_map(V::U32),
        extremes!(u64).prop_map(V::U64),
        prop_oneof![
            extremes!(u128),
            Just(i128::MAX as u128),
            Just(i128::MAX as u128 + 1)
        ]
        .prop_map(V::U128),
        f32s().prop_map(V::F32),
        f64s().prop_map(V::F64),
        prop_oneof![prop::sample::select(TRICKY), any::<char>()].prop_map(V::Char),
        text().prop_map(V::Str),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(V::Bytes),
        prop::sample::select(NAMES).prop_map(V::UnitVariant),
    ]
}

fn value() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![40 => leaf(), 1 => Just(V::Fail)];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let name = prop::sample::select(NAMES);
        let list = prop::collection::vec(inner.clone(), 0..6);
        let fields = prop::collection::vec((name.clone(), inner.clone()), 0..6);
        prop_oneof![
            inner.clone().prop_map(|v| V::Some(Box::new(v))),
            inner.clone().prop_map(|v| V::Newtype(Box::new(v))),
            (name.clone(), inner.clone()).prop_map(|(n, v)| V::NewtypeVariant(n, Box::new(v))),
            list.clone().prop_map(V::Seq),
            list.clone().prop_map(V::Tuple),
            list.clone().prop_map(V::TupleStruct),
            (name.clone(), list).prop_map(|(n, l)| V::TupleVariant(n, l)),
            // Maps with duplicate keys too (a hand-written `Serialize` can write them).
            prop::collection::vec((inner.clone(), inner.clone()), 0..6).prop_map(V::Map),
            prop::collection::vec((text().prop_map(V::Str), inner.clone()), 0..6).prop_map(V::Map),
            fields.clone().prop_map(V::Struct),
            (name, fields).prop_map(|(n, f)| V::StructVariant(n, f)),
        ]
    })
}

/// The spec's encoding (docs/id-scheme.md, "Values"), `None` when the value fails to serialize.
fn encode(v: &V, out: &mut Vec<u8>) -> Option<()> {
    fn str(out: &mut Vec<u8>, s: &str) {
        out.push(0x05);
        out.extend((s.len() as u64).to_be_bytes());
        out.extend(s.as_bytes());
    }
    fn int(out: &mut Vec<u8>, i: i128) {
        out.push(0x02);
        out.extend(i.to_be_bytes());
    }
    fn float(out: &mut Vec<u8>, f: f64) {
        out.push(0x04);
        let bits = if f.is_nan() {
            0x7ff8_0000_0000_0000
        } else if f == 0.0 {
            0
        } else {
            f.to_bits()
        };
        out.extend(bits.to_be_bytes());
    }
    fn seq(out: &mut Vec<u8>, vs: &[V]) -> Option<()> {
        out.push(0x07);
        for v in vs {
            encode(v, out)?;
        }
        out.push(0x08);
        Some(())
    }
    fn fields(out: &mut Vec<u8>, fs: &[(&str, V)]) -> Option<()> {
        out.push(0x0B);
        for (n, v) in fs {
            str(out, n);
            encode(v, out)?;
        }
        out.push(0x0C);
        Some(())
    }
    match v {
        V::Unit | V::None | V::UnitStruct => out.push(0x00),
        V::Some(v) | V::Newtype(v) => encode(v, out)?,
        V::Bool(b) => out.extend([0x01, *b as u8]),
        V::I8(i) => int(out, *i as i128),
        V::I16(i) => int(out, *i as i128),
        V::I32(i) => int(out, *i as i128),
        V::I64(i) => int(out, *i as i128),
        V::I128(i) => int(out, *i),
        V::U8(i) => int(out, *i as i128),
        V::U16(i) => int(out, *i as i128),
        V::U32(i) => int(out, *i as i128),
        V::U64(i) => int(out, *i as i128),
        V::U128(i) if *i <= i128::MAX as u128 => int(out, *i as i128),
        V::U128(i) => {
            out.push(0x03);
            out.extend(i.to_be_bytes());
        }
        V::F32(f) => float(out, f64::from(*f)),
        V::F64(f) => float(out, *f),
        V::Char(c) => str(out, &c.to_string()),
        V::Str(s) => str(out, s),
        V::Bytes(b) => {
            out.push(0x06);
            out.extend((b.len() as u64).to_be_bytes());
            out.extend(b);
        }
        V::UnitVariant(n) => {
            out.push(0x0D);
            str(out, n);
            out.push(0x00);
        }
        V::NewtypeVariant(n, v) => {
            out.push(0x0D);
            str(out, n);
            encode(v, out)?;
        }
        V::Seq(vs) | V::Tuple(vs) | V::TupleStruct(vs) => seq(out, vs)?,
        V::TupleVariant(n, vs) => {
            out.push(0x0D);
            str(out, n);
            seq(out, vs)?;
        }
        V::Map(es) => {
            let mut entries = Vec::new();
            for (k, v) in es {
                let mut e = Vec::new();
                encode(k, &mut e)?;
                encode(v, &mut e)?;
                entries.push(e);
            }
            map(out, entries);
        }
        V::Struct(fs) => fields(out, fs)?,
        V::StructVariant(n, fs) => {
            out.push(0x0D);
            str(out, n);
            fields(out, fs)?;
        }
        V::Fail => return None,
    }
    Some(())
}

/// A map of already encoded entries: sorted by their bytes, all kept.
fn map(out: &mut Vec<u8>, mut entries: Vec<Vec<u8>>) {
    entries.sort();
    out.push(0x09);
    for e in entries {
        out.extend(e);
    }
    out.push(0x0A);
}

fn encoded(v: &V) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    encode(v, &mut out).map(|()| out)
}

const V1: &[u8] = b"natural-key/content/v1\0";
const V2: &[u8] = b"natural-key/content/v2\0";

/// What the spec says `canonical_hash` (the v1 prefix and the value) gives for `v`.
fn expected_canonical(v: &V) -> Option<ContentHash> {
    encoded(v).map(|e| ContentHash(sha256(&[V1, &e])))
}

/// A serialize failure must be `Error::Serialize` carrying the serializer's message.
fn check_serialize_error(e: &Error) -> Result<(), TestCaseError> {
    prop_assert!(!e.to_string().is_empty());
    match e {
        Error::Serialize { message, .. } => prop_assert!(message.contains(FAIL), "{e}"),
        other => prop_assert!(false, "not Error::Serialize: {other:?}"),
    }
    Ok(())
}

/// A value equal to `v` under every equality the spec states: map entries in another order,
/// `-0.0` for `0.0`, another NaN, an `f32` widened to `f64`, an integer in another width that
/// holds it, a char as its one-character string, unit/`None`/unit struct for one another,
/// `Some`/newtype wrappers added or removed, seq/tuple/tuple struct for one another.
fn rewrite(v: &V, r: &mut Rng) -> V {
    let wrap = |v: V, r: &mut Rng| match r.below(6) {
        0 => V::Some(Box::new(v)),
        1 => V::Newtype(Box::new(v)),
        _ => v,
    };
    let out = match v {
        V::Unit | V::None | V::UnitStruct => [V::Unit, V::None, V::UnitStruct][r.below(3)].clone(),
        V::Some(x) | V::Newtype(x) => {
            let x = rewrite(x, r);
            match r.below(3) {
                0 => x,
                1 => V::Some(Box::new(x)),
                _ => V::Newtype(Box::new(x)),
            }
        }
        V::F64(f) if *f == 0.0 => V::F64(if r.coin() { 0.0 } else { -0.0 }),
        V::F64(f) if f.is_nan() => {
            let bits = (r.next() & 0x800f_ffff_ffff_ffff) | 0x7ff0_0000_0000_0001;
            if r.coin() {
                V::F64(f64::from_bits(bits))
            } else {
                V::F32(f32::from_bits(
                    0x7fc0_0000 | (r.next() as u32 & 0x803f_ffff),
                ))
            }
        }
        V::F32(f) => V::F64(f64::from(*f)),
        V::Char(c) => V::Str(c.to_string()),
        V::Str(s) if s.chars().count() == 1 && r.coin() => V::Char(s.chars().next().unwrap()),
        V::Seq(vs) | V::Tuple(vs) | V::TupleStruct(vs) => {
            let vs: Vec<V> = vs.iter().map(|v| rewrite(v, r)).collect();
            match r.below(3) {
                0 => V::Seq(vs),
                1 => V::Tuple(vs),
                _ => V::TupleStruct(vs),
            }
        }
        V::TupleVariant(n, vs) => V::TupleVariant(n, vs.iter().map(|v| rewrite(v, r)).collect()),
        V::NewtypeVariant(n, x) => V::NewtypeVariant(n, Box::new(rewrite(x, r))),
        V::Map(es) => {
            let mut es: Vec<(V, V)> = es
                .iter()
                .map(|(k, v)| (rewrite(k, r), rewrite(v, r)))
                .collect();
            r.shuffle(&mut es);
            V::Map(es)
        }
        V::Struct(fs) => V::Struct(fs.iter().map(|(n, v)| (*n, rewrite(v, r))).collect()),
        V::StructVariant(n, fs) => {
            V::StructVariant(n, fs.iter().map(|(f, v)| (*f, rewrite(v, r))).collect())
        }
        other => match integer(other) {
            Some(i) => rewidth(i, r),
            None => other.clone(),
        },
    };
    wrap(out, r)
}

fn integer(v: &V) -> Option<i128> {
    Some(match v {
        V::I8(i) => *i as i128,
        V::I16(i) => *i as i128,
        V::I32(i) => *i as i128,
        V::I64(i) => *i as i128,
        V::I128(i) => *i,
        V::U8(i) => *i as i128,
        V::U16(i) => *i as i128,
        V::U32(i) => *i as i128,
        V::U64(i) => *i as i128,
        V::U128(i) => i128::try_from(*i).ok()?,
        _ => return None,
    })
}

/// `i` in a random width that holds it.
fn rewidth(i: i128, r: &mut Rng) -> V {
    let mut widths: Vec<V> = Vec::new();
    macro_rules! fits {
        ($($t:ty => $c:ident),*) => {$(
            if let Ok(x) = <$t>::try_from(i) { widths.push(V::$c(x)); }
        )*};
    }
    widths.push(V::I128(i));
    fits!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
          u64 => U64, u128 => U128);
    let n = widths.len();
    widths.swap_remove(r.below(n))
}

#[test]
fn canonical_hash_of_any_serde_value_is_the_specs_encoding() {
    fuzz(
        "canonical_hash: any value = spec encoding",
        (value(), seed()),
        |(v, s)| {
            let got = canonical_hash(&v);
            match expected_canonical(&v) {
                Some(want) => {
                    prop_assert_eq!(got.as_ref().ok(), Some(&want));
                    // Deterministic, also through a clone.
                    prop_assert_eq!(canonical_hash(&v.clone()).ok(), Some(want));
                    // Every equality of the spec: an equivalent spelling hashes the same.
                    let other = rewrite(&v, &mut Rng(s));
                    prop_assert_eq!(
                        encoded(&other),
                        encoded(&v),
                        "the rewrite changed the spec's bytes: {:?}",
                        other
                    );
                    prop_assert_eq!(canonical_hash(&other).ok(), Some(want), "{:?}", other);
                }
                None => check_serialize_error(&got.unwrap_err())?,
            }
            Ok(())
        },
    );
}

#[test]
fn different_values_hash_differently() {
    // Shallow values, so that pairs with equal encodings (unit and None, 5u8 and 5i64) are
    // common enough to test the "equal" side too.
    let small = leaf().prop_recursive(2, 6, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|v| V::Some(Box::new(v))),
            prop::collection::vec(inner.clone(), 0..3).prop_map(V::Seq),
            prop::collection::vec((inner.clone(), inner), 0..3).prop_map(V::Map),
        ]
    });
    fuzz(
        "canonical_hash: equal iff equal encodings",
        (small.clone(), small),
        |(a, b)| {
            let (ea, eb) = (encoded(&a).unwrap(), encoded(&b).unwrap());
            let (ha, hb) = (canonical_hash(&a).unwrap(), canonical_hash(&b).unwrap());
            prop_assert_eq!(ha == hb, ea == eb, "{:?} vs {:?}", a, b);
            Ok(())
        },
    );
}

// The derive's content hash, v1 (the Rust fields) and v2 (the serialization), over any values.

#[derive(NaturalKey, Serialize, Clone, Debug)]
struct Doc {
    #[key]
    slug: String,
    #[key(timestamp)]
    ts: i64,
    body: V,
    tags: Vec<V>,
    #[natural_key(skip_hash)]
    fetched: V,
}

/// Another type with the same field names and `Option`s where `Doc` has values: the type is not
/// hashed, `Some(x)` is `x`.
#[derive(NaturalKey, Serialize, Clone, Debug)]
struct DocOpt {
    #[key]
    slug: Option<String>,
    #[key(timestamp)]
    ts: i64,
    body: Option<V>,
    tags: Option<Vec<V>>,
    #[natural_key(skip_hash)]
    fetched: Option<V>,
}

/// A v2 type: a field renamed, a map flattened into the top level, a skip_hash field stored
/// under its `rename_all` name.
#[derive(NaturalKey, Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
struct DocV2 {
    #[key]
    slug: String,
    #[key(timestamp)]
    ts: i64,
    #[serde(rename = "Body")]
    body: V,
    #[serde(flatten)]
    extra: BTreeMap<String, V>,
    #[natural_key(skip_hash)]
    fetched_at: V,
}

fn field(out: &mut Vec<u8>, name: &str, v: &V) -> Option<()> {
    encode(&V::Str(name.into()), out)?;
    encode(v, out)
}

#[test]
fn content_hash_of_documents_with_any_values() {
    let docs = (
        text(),
        any::<i64>(),
        value(),
        prop::collection::vec(value(), 0..4),
        value(),
        value(),
    );
    fuzz(
        "content_hash: v1 document = spec",
        docs,
        |(slug, ts, body, tags, fetched, other)| {
            let doc = Doc {
                slug,
                ts,
                body,
                tags,
                fetched,
            };
            let mut e = vec![0x0B];
            let ok = field(&mut e, "slug", &V::Str(doc.slug.clone()))
                .and_then(|()| field(&mut e, "ts", &V::I64(doc.ts)))
                .and_then(|()| field(&mut e, "body", &doc.body))
                .and_then(|()| field(&mut e, "tags", &V::Seq(doc.tags.clone())));
            e.push(0x0C);
            let got = doc.content_hash();
            match ok {
                Some(()) => {
                    let want = ContentHash(sha256(&[V1, &e]));
                    prop_assert_eq!(got.as_ref().ok(), Some(&want));
                    prop_assert_eq!(doc.clone().content_hash().ok(), Some(want));
                    let skipped = Doc {
                        fetched: other,
                        ..doc.clone()
                    };
                    prop_assert_eq!(
                        skipped.content_hash().ok(),
                        Some(want),
                        "skip_hash is not hashed"
                    );
                    let opt = DocOpt {
                        slug: Some(doc.slug.clone()),
                        ts: doc.ts,
                        body: Some(doc.body.clone()),
                        tags: Some(doc.tags.clone()),
                        fetched: None,
                    };
                    prop_assert_eq!(opt.content_hash().ok(), Some(want), "Some(x) hashes as x");
                }
                None => check_serialize_error(&got.unwrap_err())?,
            }
            Ok(())
        },
    );
}

#[test]
fn content_hash_v2_of_documents_with_any_values() {
    let extra = prop::collection::btree_map(
        prop_oneof![
            text(),
            prop::sample::select(vec!["fetchedAt", "fetched_at", "Body", "slug"])
                .prop_map(String::from)
        ],
        value(),
        0..5,
    );
    let docs = (text(), any::<i64>(), value(), extra, value(), value());
    fuzz(
        "content_hash: v2 document = spec",
        docs,
        |(slug, ts, body, extra, fetched_at, other)| {
            let doc = DocV2 {
                slug,
                ts,
                body,
                extra,
                fetched_at,
            };
            // serde writes a flattened struct as a map of its entries, the flattened ones among
            // them; every entry stored as `fetchedAt` is left out, a flattened one too.
            let mut entries = Vec::new();
            let mut ok = Some(());
            let mut push = |name: &str, v: &V| {
                if name == "fetchedAt" {
                    return;
                }
                let mut e = Vec::new();
                if field(&mut e, name, v).is_none() {
                    ok = None;
                }
                entries.push(e);
            };
            push("slug", &V::Str(doc.slug.clone()));
            push("ts", &V::I64(doc.ts));
            push("Body", &doc.body);
            for (k, v) in &doc.extra {
                push(k, v);
            }
            let got = doc.content_hash();
            match ok {
                Some(()) => {
                    let mut e = Vec::new();
                    map(&mut e, entries);
                    let want = ContentHash(sha256(&[V2, &e]));
                    prop_assert_eq!(got.as_ref().ok(), Some(&want));
                    prop_assert_eq!(doc.clone().content_hash().ok(), Some(want));
                    let skipped = DocV2 {
                        fetched_at: other,
                        ..doc.clone()
                    };
                    prop_assert_eq!(
                        skipped.content_hash().ok(),
                        Some(want),
                        "skip_hash is not hashed"
                    );
                }
                None => check_serialize_error(&got.unwrap_err())?,
            }
            Ok(())
        },
    );
}

// serde_json and BSON values: their own `Serialize`, through the same encoding.

fn json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value as J;
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        extremes!(i64).prop_map(J::from),
        extremes!(u64).prop_map(J::from),
        // serde_json holds finite floats only; -0.0 and subnormals included.
        f64s().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(J::Number)),
        text().prop_map(J::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(J::Array),
            prop::collection::vec((text(), inner), 0..6)
                .prop_map(|es| J::Object(es.into_iter().collect())),
        ]
    })
}

/// serde_json's `Serialize` in our model: numbers as u64, else i64, else f64.
fn json_as_v(j: &serde_json::Value) -> V {
    use serde_json::Value as J;
    match j {
        J::Null => V::Unit,
        J::Bool(b) => V::Bool(*b),
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => V::U64(u),
            (None, Some(i), _) => V::I64(i),
            (_, _, f) => V::F64(f.expect("a serde_json number is u64, i64 or f64")),
        },
        J::String(s) => V::Str(s.clone()),
        J::Array(a) => V::Seq(a.iter().map(json_as_v).collect()),
        J::Object(o) => V::Map(
            o.iter()
                .map(|(k, v)| (V::Str(k.clone()), json_as_v(v)))
                .collect(),
        ),
    }
}

fn shuffle_json(j: &serde_json::Value, r: &mut Rng) -> serde_json::Value {
    use serde_json::Value as J;
    match j {
        J::Array(a) => J::Array(a.iter().map(|v| shuffle_json(v, r)).collect()),
        J::Object(o) => {
            let mut es: Vec<_> = o
                .iter()
                .map(|(k, v)| (k.clone(), shuffle_json(v, r)))
                .collect();
            r.shuffle(&mut es);
            J::Object(es.into_iter().collect())
        }
        other => other.clone(),
    }
}

#[test]
fn serde_json_values_hash_as_the_spec_says() {
    fuzz(
        "canonical_hash: serde_json::Value",
        (json(), seed()),
        |(j, s)| {
            let want = expected_canonical(&json_as_v(&j)).unwrap();
            prop_assert_eq!(canonical_hash(&j).ok(), Some(want));
            prop_assert_eq!(canonical_hash(&j.clone()).ok(), Some(want));
            // preserve_order (enabled by bson) keeps insertion order: the hash must not see it.
            prop_assert_eq!(
                canonical_hash(&shuffle_json(&j, &mut Rng(s))).ok(),
                Some(want)
            );
            Ok(())
        },
    );
}

fn bson_value() -> impl Strategy<Value = Bson> {
    let leaf = prop_oneof![
        f64s().prop_map(Bson::Double),
        text().prop_map(Bson::String),
        any::<bool>().prop_map(Bson::Boolean),
        Just(Bson::Null),
        extremes!(i32).prop_map(Bson::Int32),
        extremes!(i64).prop_map(Bson::Int64),
        any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
        extremes!(i64).prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
        (any::<u8>(), prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(t, bytes)| {
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::from(t),
                bytes,
            })
        }),
        text().prop_map(Bson::JavaScriptCode),
        text().prop_map(Bson::Symbol),
        (text(), "[imsxlu]{0,6}").prop_map(|(pattern, options)| {
            Bson::RegularExpression(bson::Regex { pattern, options })
        }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
        any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(bson::Decimal128::from_bytes(b))),
        Just(Bson::Undefined),
        Just(Bson::MaxKey),
        Just(Bson::MinKey),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let doc = prop::collection::vec((text(), inner.clone()), 0..6)
            .prop_map(|es| es.into_iter().collect::<Document>())
            .boxed();
        prop_oneof![
            prop::collection::vec(inner, 0..6).prop_map(Bson::Array),
            doc.clone().prop_map(Bson::Document),
            (text(), doc).prop_map(|(code, scope)| {
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
            }),
        ]
    })
}

/// The same value with every document's fields in another order, `-0.0` for `0.0` and NaNs of
/// other payloads: what an engine may give back.
fn reorder_bson(b: &Bson, r: &mut Rng) -> Bson {
    let doc = |d: &Document, r: &mut Rng| {
        let mut es: Vec<_> = d
            .iter()
            .map(|(k, v)| (k.clone(), reorder_bson(v, r)))
            .collect();
        r.shuffle(&mut es);
        es.into_iter().collect::<Document>()
    };
    match b {
        Bson::Array(a) => Bson::Array(a.iter().map(|v| reorder_bson(v, r)).collect()),
        Bson::Document(d) => Bson::Document(doc(d, r)),
        Bson::JavaScriptCodeWithScope(c) => {
            Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: c.code.clone(),
                scope: doc(&c.scope, r),
            })
        }
        Bson::Double(f) if *f == 0.0 => Bson::Double(if r.coin() { 0.0 } else { -0.0 }),
        Bson::Double(f) if f.is_nan() => {
            Bson::Double(f64::from_bits(0xfff0_0000_0000_0001 | (r.next() & 0xffff)))
        }
        other => other.clone(),
    }
}

#[test]
fn bson_values_of_every_type_hash() {
    fuzz(
        "canonical_hash: bson::Bson, every type",
        (bson_value(), seed()),
        |(b, s)| {
            let h = canonical_hash(&b);
            prop_assert!(h.is_ok(), "{:?}", h);
            let h = h.unwrap();
            prop_assert_eq!(canonical_hash(&b.clone()).ok(), Some(h));
            prop_assert_eq!(canonical_hash(&reorder_bson(&b, &mut Rng(s))).ok(), Some(h));
            // Integer width is not hashed: an Int32 is its Int64.
            if let Bson::Int32(i) = b {
                prop_assert_eq!(canonical_hash(&Bson::Int64(i.into())).ok(), Some(h));
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Identity and id: key values of every supported type

/// A key value as the spec's table types it.
#[derive(Clone, Debug, PartialEq)]
enum K {
    None,
    Str(String),
    Int(i128),
    Bool(bool),
    Bytes(Vec<u8>),
    Uuid([u8; 16]),
    Oid([u8; 12]),
}

fn key() -> impl Strategy<Value = K> {
    prop_oneof![
        1 => Just(K::None),
        4 => text().prop_map(K::Str),
        2 => prop_oneof![extremes!(i64).prop_map(i128::from), extremes!(u64).prop_map(i128::from), Just(i128::MIN), Just(i128::MAX), any::<i128>()].prop_map(K::Int),
        1 => any::<bool>().prop_map(K::Bool),
        1 => prop::collection::vec(any::<u8>(), 0..12).prop_map(K::Bytes),
        1 => any::<[u8; 16]>().prop_map(K::Uuid),
        1 => any::<[u8; 12]>().prop_map(K::Oid),
    ]
}

/// A user key type whose value is its text.
struct Lang(String);
impl KeyPart for Lang {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Str(Cow::Borrowed(&self.0))
    }
}

/// One of the Rust types that hold `k`, picked by `pick`: every type the spec lists as a key,
/// wrapped in `Some`, `Box` and `&` too.
fn repr<'a>(k: &'a K, pick: usize) -> Box<dyn KeyPart + 'a> {
    let mut all: Vec<Box<dyn KeyPart + 'a>> = match k {
        K::None => vec![
            Box::new(None::<String>),
            Box::new(None::<i64>),
            Box::new(None::<bool>),
            Box::new(Some(None::<u8>)),
            Box::new(None::<uuid::Uuid>),
            Box::new(None::<Box<[u8]>>),
        ],
        K::Str(s) => {
            let mut v: Vec<Box<dyn KeyPart + 'a>> = vec![
                Box::new(s.clone()),
                Box::new(s.as_str()),
                Box::new(s),
                Box::new(Box::<str>::from(s.as_str())),
                Box::new(Cow::<str>::Borrowed(s)),
                Box::new(Cow::<str>::Owned(s.clone())),
                Box::new(Some(s.clone())),
                Box::new(Some(Some(s.as_str()))),
                Box::new(Box::new(s.clone())),
                Box::new(Lang(s.clone())),
            ];
            let mut chars = s.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                v.push(Box::new(c));
                v.push(Box::new(Some(c)));
            }
            v
        }
        K::Int(i) => {
            let i = *i;
            let mut v: Vec<Box<dyn KeyPart + 'a>> =
                vec![Box::new(i), Box::new(Some(i)), Box::new(Box::new(i))];
            macro_rules! fits {
                ($($t:ty),*) => {$(
                    if let Ok(x) = <$t>::try_from(i) { v.push(Box::new(x)); v.push(Box::new(Some(x))); }
                )*};
            }
            fits!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
            v
        }
        K::Bool(b) => vec![Box::new(*b), Box::new(Some(*b)), Box::new(b)],
        K::Bytes(b) => vec![
            Box::new(b.as_slice()),
            Box::new(Box::<[u8]>::from(b.as_slice())),
            Box::new(Some(Box::<[u8]>::from(b.as_slice()))),
        ],
        K::Uuid(u) => vec![
            Box::new(uuid::Uuid::from_bytes(*u)),
            Box::new(bson::Uuid::from_bytes(*u)),
            Box::new(Some(bson::Uuid::from_bytes(*u))),
            // A subtype-4 Binary is the key `Binary::to_uuid()`.
            Box::new(
                bson::Binary {
                    subtype: bson::spec::BinarySubtype::Uuid,
                    bytes: u.to_vec(),
                }
                .to_uuid()
                .unwrap(),
            ),
        ],
        K::Oid(o) => vec![
            Box::new(ObjectId::from_bytes(*o)),
            Box::new(Some(ObjectId::from_bytes(*o))),
        ],
    };
    let n = all.len();
    all.swap_remove(pick % n)
}

/// The normalization a field asks for.
#[derive(Clone, Copy, Debug)]
struct Norm {
    lowercase: bool,
    nfc: bool,
}

const FIELDS: [(&str, Norm); 4] = [
    (
        "plain",
        Norm {
            lowercase: false,
            nfc: false,
        },
    ),
    (
        "lower",
        Norm {
            lowercase: true,
            nfc: false,
        },
    ),
    (
        "composed",
        Norm {
            lowercase: false,
            nfc: true,
        },
    ),
    (
        "both",
        Norm {
            lowercase: true,
            nfc: true,
        },
    ),
];

fn normalized(k: &K, n: Norm) -> K {
    match k {
        K::Str(s) => {
            let s = if n.lowercase {
                s.to_lowercase()
            } else {
                s.clone()
            };
            K::Str(if n.nfc { s.nfc().collect() } else { s })
        }
        other => other.clone(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The spec's identity of these key fields (after normalization), or the `NulByte` error of the
/// first text with a NUL, at its byte offset in the text given.
fn expected_identity(
    scheme: Scheme,
    keys: &[(&'static str, Norm, &K)],
) -> Result<[u8; 32], KeyError> {
    let mut msg = Vec::new();
    let mut texts = Vec::new();
    if let Scheme::Default { namespace } = scheme {
        msg.extend(b"natural-key/v1\0");
        msg.extend((namespace.len() as u32).to_be_bytes());
        msg.extend(namespace.as_bytes());
    }
    for &(field, norm, k) in keys {
        if let K::Str(s) = k {
            if let Some(position) = s.bytes().position(|b| b == 0) {
                return Err(KeyError::NulByte { field, position });
            }
        }
        let (tag, payload, text): (u8, Vec<u8>, String) = match normalized(k, norm) {
            K::None => (0, vec![], String::new()),
            K::Str(s) => (1, s.clone().into_bytes(), s),
            K::Int(i) => (2, i.to_be_bytes().to_vec(), i.to_string()),
            K::Bool(b) => (3, vec![b as u8], b.to_string()),
            K::Bytes(b) => (4, b.clone(), hex(&b)),
            K::Uuid(u) => (
                5,
                u.to_vec(),
                uuid::Uuid::from_bytes(u).hyphenated().to_string(),
            ),
            K::Oid(o) => (6, o.to_vec(), hex(&o)),
        };
        msg.push(tag);
        msg.extend((payload.len() as u32).to_be_bytes());
        msg.extend(payload);
        texts.push(text);
    }
    Ok(match scheme {
        Scheme::Default { .. } => sha256(&[&msg]),
        Scheme::Joined { separator } => sha256(&[texts.join(separator).as_bytes()]),
    })
}

macro_rules! four_keys {
    ($name:ident $(, $attr:meta)?) => {
        /// Four identity keys of any type (one per normalization), the timestamp in ms.
        #[derive(NaturalKey, Serialize)]
        $(#[$attr])?
        struct $name<'a> {
            #[key]
            #[serde(skip)]
            plain: Box<dyn KeyPart + 'a>,
            #[key(lowercase)]
            #[serde(skip)]
            lower: Box<dyn KeyPart + 'a>,
            #[key(nfc)]
            #[serde(skip)]
            composed: Box<dyn KeyPart + 'a>,
            #[key(nfc, lowercase)]
            #[serde(skip)]
            both: Box<dyn KeyPart + 'a>,
            #[key(timestamp)]
            ts: i64,
        }
        impl<'a> $name<'a> {
            fn new(keys: &'a [K; 4], picks: [usize; 4], ts: i64) -> Self {
                $name {
                    plain: repr(&keys[0], picks[0]),
                    lower: repr(&keys[1], picks[1]),
                    composed: repr(&keys[2], picks[2]),
                    both: repr(&keys[3], picks[3]),
                    ts,
                }
            }
        }
    };
}
four_keys!(Four, natural_key(namespace = "fuzz.four"));
four_keys!(
    JoinedFour,
    natural_key(scheme = "joined", separator = "\u{1f600}:")
);

fn keys4() -> impl Strategy<Value = [K; 4]> {
    [key(), key(), key(), key()]
}

fn timestamp_ms() -> impl Strategy<Value = i64> {
    let max = MAX_TIMESTAMP_MS as i64;
    prop_oneof![
        3 => 0..=max,
        1 => prop::sample::select(vec![0, -1, max, max + 1, i64::MIN, i64::MAX]),
        1 => any::<i64>(),
    ]
}

fn check_key_error(e: &KeyError) -> Result<(), TestCaseError> {
    prop_assert!(!e.to_string().is_empty());
    prop_assert!(!Error::from(e.clone()).to_string().is_empty());
    Ok(())
}

/// `identity()`, `id()` and `key_description()` of a document against the spec.
fn check_document<T: NaturalKey>(
    doc: &T,
    want: Result<[u8; 32], KeyError>,
    ts: i64,
    ts_field: &'static str,
) -> Result<(), TestCaseError> {
    let identity = doc.identity();
    prop_assert_eq!(&identity, &want.clone().map(ContentHash));
    prop_assert_eq!(&doc.identity(), &identity, "deterministic");
    let id = doc.id();
    match (&want, 0 <= ts && ts as u64 <= MAX_TIMESTAMP_MS) {
        (Err(e), _) => {
            prop_assert_eq!(id.as_ref().err(), Some(e));
            check_key_error(e)?;
        }
        (Ok(_), false) => {
            let e = id.unwrap_err();
            prop_assert_eq!(
                &e,
                &KeyError::TimestampOutOfRange {
                    field: ts_field,
                    millis: ts as i128
                }
            );
            check_key_error(&e)?;
        }
        (Ok(digest), true) => {
            let id = id.unwrap();
            prop_assert_eq!(id.timestamp_ms(), ts as u64);
            prop_assert_eq!(&id.to_bytes()[6..], &digest[..10]);
            prop_assert_eq!(id.to_string().parse::<Ulid>().ok(), Some(id));
        }
    }
    prop_assert!(!doc.key_description().is_empty());
    Ok(())
}

#[test]
fn identity_and_id_of_any_key_values_are_the_specs() {
    let input = (
        keys4(),
        any::<[usize; 4]>(),
        any::<[usize; 4]>(),
        timestamp_ms(),
    );
    fuzz(
        "identity/id: any keys, both schemes = spec",
        input,
        |(keys, a, b, ts)| {
            let fields: Vec<_> = FIELDS
                .iter()
                .zip(&keys)
                .map(|(&(f, n), k)| (f, n, k))
                .collect();
            let default = expected_identity(
                Scheme::Default {
                    namespace: "fuzz.four",
                },
                &fields,
            );
            let joined = expected_identity(
                Scheme::Joined {
                    separator: "\u{1f600}:",
                },
                &fields,
            );
            // Two independent choices of Rust types for the same values: one identity.
            check_document(&Four::new(&keys, a, ts), default.clone(), ts, "ts")?;
            check_document(&Four::new(&keys, b, ts), default, ts, "ts")?;
            check_document(&JoinedFour::new(&keys, a, ts), joined.clone(), ts, "ts")?;
            check_document(&JoinedFour::new(&keys, b, ts), joined, ts, "ts")?;
            Ok(())
        },
    );
}

#[test]
fn changing_one_key_changes_the_identity() {
    let input = (keys4(), 0..4usize, key(), any::<[usize; 4]>());
    fuzz(
        "identity: one key changed",
        input,
        |(keys, at, new, picks)| {
            let mut changed = keys.clone();
            changed[at] = new;
            let (a, b) = (Four::new(&keys, picks, 0), Four::new(&changed, picks, 0));
            let (ia, ib) = (a.identity(), b.identity());
            prop_assume!(ia.is_ok() && ib.is_ok());
            let norm = FIELDS[at].1;
            let same = normalized(&keys[at], norm) == normalized(&changed[at], norm);
            prop_assert_eq!(
                ia.unwrap() == ib.unwrap(),
                same,
                "{:?} -> {:?}",
                keys[at],
                changed[at]
            );
            Ok(())
        },
    );
}

/// `compute_id`/`compute_identity` take key lists of any length, any timestamp in i128 and, for
/// the joined scheme, any separator (`&'static str`: a fixed set).
#[test]
fn compute_id_takes_any_list_and_timestamp() {
    const SEPARATORS: &[&str] = &[":", "", "::", "\u{1f600}", "\0", "/"];
    let ts = prop_oneof![
        3 => (0..=MAX_TIMESTAMP_MS).prop_map(i128::from),
        1 => prop::sample::select(vec![-1, MAX_TIMESTAMP_MS as i128 + 1, i128::MIN, i128::MAX]),
        1 => any::<i128>(),
    ];
    let input = (
        prop::collection::vec(key(), 0..8),
        prop::sample::select(SEPARATORS),
        ts,
    );
    fuzz(
        "compute_id: any list, separator, i128 timestamp",
        input,
        |(keys, sep, ts)| {
            let values: Vec<KeyValue<'_>> = keys
                .iter()
                .map(|k| match k {
                    K::None => KeyValue::None,
                    K::Str(s) => KeyValue::Str(Cow::Borrowed(s)),
                    K::Int(i) => KeyValue::Int(*i),
                    K::Bool(b) => KeyValue::Bool(*b),
                    K::Bytes(b) => KeyValue::Bytes(Cow::Borrowed(b)),
                    K::Uuid(u) => KeyValue::Uuid(*u),
                    K::Oid(o) => KeyValue::ObjectId(*o),
                })
                .collect();
            let plain = Norm {
                lowercase: false,
                nfc: false,
            };
            let fields: Vec<_> = keys.iter().map(|k| ("key", plain, k)).collect();
            for scheme in [
                Scheme::Default { namespace: "" },
                Scheme::Joined { separator: sep },
            ] {
                let want = expected_identity(scheme, &fields);
                prop_assert_eq!(
                    &compute_identity(scheme, &values),
                    &want.clone().map(ContentHash)
                );
                let id = compute_id(scheme, &values, ts);
                match &want {
                    Err(e) => prop_assert_eq!(id.as_ref().err(), Some(e)),
                    Ok(_) if !(0..=MAX_TIMESTAMP_MS as i128).contains(&ts) => {
                        let e = id.unwrap_err();
                        prop_assert_eq!(
                            &e,
                            &KeyError::TimestampOutOfRange {
                                field: "timestamp",
                                millis: ts
                            }
                        );
                        check_key_error(&e)?;
                    }
                    Ok(digest) => {
                        let id = id.unwrap();
                        prop_assert_eq!(id.timestamp_ms() as i128, ts);
                        prop_assert_eq!(&id.to_bytes()[6..], &digest[..10]);
                    }
                }
            }
            Ok(())
        },
    );
}

// Timestamps of every supported type, out of range included.

#[derive(NaturalKey, Serialize)]
struct Stamp<T: KeyTimestamp + Serialize> {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: T,
}

/// Instants in nanoseconds since the epoch, around and far outside the ULID range.
fn nanos() -> impl Strategy<Value = i128> {
    let max = MAX_TIMESTAMP_MS as i128 * 1_000_000;
    prop_oneof![
        3 => 0..=max + 999_999,
        1 => -2_000_000i128..2_000_000,
        1 => max - 2_000_000..max + 2_000_000,
        1 => i64::MIN as i128 * 1_000_000..i64::MAX as i128 * 1_000_000,
    ]
}

/// The spec: floor(nanos / 10^6) ms, in range or `TimestampOutOfRange` with that value.
fn check_stamp<T: KeyTimestamp + Serialize>(
    at: T,
    millis: i128,
    slug: &str,
) -> Result<(), TestCaseError> {
    let doc = Stamp {
        slug: slug.to_string(),
        at,
    };
    let want = expected_identity(
        Scheme::Default { namespace: "" },
        &[(
            "slug",
            Norm {
                lowercase: false,
                nfc: false,
            },
            &K::Str(slug.to_string()),
        )],
    );
    prop_assert_eq!(
        doc.identity(),
        want.clone().map(ContentHash),
        "the identity ignores the timestamp"
    );
    let id = doc.id();
    match want {
        Err(e) => prop_assert_eq!(id.err(), Some(e)),
        Ok(digest) => match u64::try_from(millis)
            .ok()
            .filter(|&m| m <= MAX_TIMESTAMP_MS)
        {
            Some(ms) => {
                let id = id.unwrap();
                prop_assert_eq!(id.timestamp_ms(), ms);
                prop_assert_eq!(&id.to_bytes()[6..], &digest[..10]);
            }
            None => {
                let e = id.unwrap_err();
                prop_assert_eq!(
                    &e,
                    &KeyError::TimestampOutOfRange {
                        field: "at",
                        millis
                    }
                );
                check_key_error(&e)?;
            }
        },
    }
    Ok(())
}

fn system_time(nanos: i128) -> Option<SystemTime> {
    let (secs, sub) = (
        nanos.unsigned_abs() / 1_000_000_000,
        (nanos.unsigned_abs() % 1_000_000_000) as u32,
    );
    let d = Duration::new(u64::try_from(secs).ok()?, sub);
    if nanos >= 0 {
        UNIX_EPOCH.checked_add(d)
    } else {
        UNIX_EPOCH.checked_sub(d)
    }
}

#[test]
fn timestamps_of_every_type_and_range() {
    let input = (
        text(),
        nanos(),
        any::<i64>(),
        any::<u64>(),
        any::<i128>(),
        any::<i32>(),
        any::<u32>(),
    );
    fuzz(
        "id: timestamps of every type, any range",
        input,
        |(slug, n, i, u, w, i32_, u32_)| {
            let ms = n.div_euclid(1_000_000);
            check_stamp(i, i.into(), &slug)?;
            check_stamp(u, u.into(), &slug)?;
            check_stamp(w, w, &slug)?;
            check_stamp(i32_, i32_.into(), &slug)?;
            check_stamp(u32_, u32_.into(), &slug)?;
            if let Ok(m) = i64::try_from(ms) {
                check_stamp(m, ms, &slug)?;
                check_stamp(bson::DateTime::from_millis(m), ms, &slug)?;
            }
            if let Some(t) = system_time(n) {
                check_stamp(t, ms, &slug)?;
                // A reference is a timestamp type of its own.
                #[allow(clippy::needless_borrows_for_generic_args)]
                check_stamp(&t, ms, &slug)?;
            }
            #[cfg(feature = "chrono")]
            {
                let (secs, sub) = (
                    n.div_euclid(1_000_000_000),
                    n.rem_euclid(1_000_000_000) as u32,
                );
                if let Some(t) = i64::try_from(secs)
                    .ok()
                    .and_then(|s| chrono::DateTime::from_timestamp(s, sub))
                {
                    check_stamp(t, ms, &slug)?;
                    let east = chrono::FixedOffset::east_opt(5 * 3600 + 30 * 60).unwrap();
                    check_stamp(t.with_timezone(&east), ms, &slug)?;
                }
            }
            #[cfg(feature = "time")]
            {
                if let Ok(t) = time::OffsetDateTime::from_unix_timestamp_nanos(n) {
                    check_stamp(t, ms, &slug)?;
                    check_stamp(
                        t.to_offset(time::UtcOffset::from_hms(-7, 0, 0).unwrap()),
                        ms,
                        &slug,
                    )?;
                }
                if let Ok(t) = time::UtcDateTime::from_unix_timestamp_nanos(n) {
                    check_stamp(t, ms, &slug)?;
                }
            }
            #[cfg(feature = "jiff")]
            {
                if let Ok(t) = jiff::Timestamp::from_nanosecond(n) {
                    check_stamp(t, ms, &slug)?;
                    let tz = jiff::tz::TimeZone::fixed(jiff::tz::offset(9));
                    check_stamp(t.to_zoned(tz), ms, &slug)?;
                }
            }
            Ok(())
        },
    );
}

// Text forms parsed from anywhere.

#[test]
fn content_hash_text_parses_only_64_hex_digits() {
    let input = prop_oneof![
        text(),
        "[0-9a-fA-F]{64}",
        "[0-9a-fA-F]{62}",
        // 64 bytes that are not 64 characters.
        "[0-9a-f]{60}\u{e9}\u{e9}",
        ".{0,70}",
    ];
    fuzz("ContentHash::from_str: any text", input, |s| {
        match s.parse::<ContentHash>() {
            Ok(h) => {
                prop_assert!(
                    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{:?}",
                    s
                );
                prop_assert_eq!(h.to_string(), s.to_ascii_lowercase());
            }
            Err(e) => {
                prop_assert!(
                    !(s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())),
                    "{:?}",
                    s
                );
                prop_assert!(!e.to_string().is_empty());
            }
        }
        Ok(())
    });
}
