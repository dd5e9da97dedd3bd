//! The canonical content hash: SHA-256 over a streaming, order-independent encoding of a
//! value's serde representation (layout in docs/id-scheme.md, "Content hash").

use std::fmt;
use std::str::FromStr;

use serde::ser::{self, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Error;

/// Domain-separation prefix of content hash v1.
const CONTENT_PREFIX: &[u8] = b"natural-key/content/v1\0";

mod tag {
    pub const NULL: u8 = 0x00;
    pub const BOOL: u8 = 0x01;
    pub const INT: u8 = 0x02;
    pub const UINT128: u8 = 0x03;
    pub const FLOAT: u8 = 0x04;
    pub const STR: u8 = 0x05;
    pub const BYTES: u8 = 0x06;
    pub const SEQ: u8 = 0x07;
    pub const SEQ_END: u8 = 0x08;
    pub const MAP: u8 = 0x09;
    pub const MAP_END: u8 = 0x0A;
    pub const STRUCT: u8 = 0x0B;
    pub const STRUCT_END: u8 = 0x0C;
    pub const VARIANT: u8 = 0x0D;
}

/// A 32-byte SHA-256 content hash. `Display` is lowercase hex; stored that way in `_nk_hash`.
///
/// ```
/// use natural_key_runtime::ContentHash;
/// let h: ContentHash = "00".repeat(32).parse().unwrap();
/// assert_eq!(h.to_string(), "00".repeat(32));
/// assert_eq!(h.as_bytes(), &[0u8; 32]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::key::hex(&self.0))
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

/// Error parsing a [`ContentHash`] from text: it must be exactly 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a content hash is 64 hex digits, got {0:?}")]
pub struct ParseContentHashError(String);

impl FromStr for ContentHash {
    type Err = ParseContentHashError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseContentHashError(s.chars().take(80).collect());
        if s.len() != 64 {
            return Err(err());
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(err)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(err)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Ok(ContentHash(out))
    }
}

impl Serialize for ContentHash {
    fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ContentHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Canonical hash of any serializable value (the same encoding the derive uses per field).
///
/// ```
/// use std::collections::HashMap;
/// let a: HashMap<_, _> = [("x", 1), ("y", 2)].into_iter().collect();
/// let b: HashMap<_, _> = [("y", 2), ("x", 1)].into_iter().collect();
/// assert_eq!(natural_key_runtime::canonical_hash(&a).unwrap(),
///            natural_key_runtime::canonical_hash(&b).unwrap());
/// ```
pub fn canonical_hash<T: Serialize + ?Sized>(value: &T) -> Result<ContentHash, Error> {
    let mut h = Sha256::new();
    h.update(CONTENT_PREFIX);
    value
        .serialize(&mut Canon { out: &mut h })
        .map_err(Error::serialize::<T>)?;
    Ok(ContentHash(h.finalize().into()))
}

/// Streams a document's hashed fields; generated `content_hash` code drives it.
#[doc(hidden)]
pub struct ContentHasher {
    h: Sha256,
}

impl Default for ContentHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl ContentHasher {
    pub fn new() -> Self {
        let mut h = Sha256::new();
        h.update(CONTENT_PREFIX);
        h.update([tag::STRUCT]);
        ContentHasher { h }
    }

    /// One field: its name, then its canonical value.
    pub fn field<Owner: ?Sized, V: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &V,
    ) -> Result<(), Error> {
        let mut c = Canon { out: &mut self.h };
        c.str(name);
        value.serialize(&mut c).map_err(Error::serialize::<Owner>)
    }

    pub fn finish(mut self) -> ContentHash {
        self.h.update([tag::STRUCT_END]);
        ContentHash(self.h.finalize().into())
    }
}

trait Sink {
    fn put(&mut self, bytes: &[u8]);
}
impl Sink for Sha256 {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes)
    }
}
impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes)
    }
}

#[derive(Debug)]
struct CanonError(String);
impl fmt::Display for CanonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for CanonError {}
impl ser::Error for CanonError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        CanonError(msg.to_string())
    }
}

struct Canon<'a, S: Sink> {
    out: &'a mut S,
}

impl<S: Sink> Canon<'_, S> {
    #[inline]
    fn byte(&mut self, b: u8) {
        self.out.put(&[b]);
    }
    #[inline]
    fn int(&mut self, v: i128) {
        let mut buf = [0u8; 17];
        buf[0] = tag::INT;
        buf[1..].copy_from_slice(&v.to_be_bytes());
        self.out.put(&buf);
    }
    #[inline]
    fn len_prefixed(&mut self, t: u8, bytes: &[u8]) {
        let mut head = [0u8; 9];
        head[0] = t;
        head[1..].copy_from_slice(&(bytes.len() as u64).to_be_bytes());
        self.out.put(&head);
        self.out.put(bytes);
    }
    #[inline]
    fn str(&mut self, s: &str) {
        self.len_prefixed(tag::STR, s.as_bytes())
    }
}

type R = Result<(), CanonError>;

impl<'a, 'b, S: Sink> ser::Serializer for &'a mut Canon<'b, S> {
    type Ok = ();
    type Error = CanonError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = MapCanon<'a, S>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, v: bool) -> R {
        self.out.put(&[tag::BOOL, v as u8]);
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> R {
        self.int(v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> R {
        self.int(v.into());
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> R {
        match i128::try_from(v) {
            Ok(i) => self.int(i),
            Err(_) => {
                let mut buf = [0u8; 17];
                buf[0] = tag::UINT128;
                buf[1..].copy_from_slice(&v.to_be_bytes());
                self.out.put(&buf);
            }
        }
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> R {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> R {
        // Engines store -0.0 as 0.0 (FerretDB) and NaN has many bit patterns: hash the value a
        // reader would get back, so a round-tripped document hashes the same.
        let bits = if v == 0.0 {
            0
        } else if v.is_nan() {
            0x7ff8_0000_0000_0000
        } else {
            v.to_bits()
        };
        let mut buf = [0u8; 9];
        buf[0] = tag::FLOAT;
        buf[1..].copy_from_slice(&bits.to_be_bytes());
        self.out.put(&buf);
        Ok(())
    }
    fn serialize_char(self, v: char) -> R {
        self.str(v.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> R {
        self.str(v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> R {
        self.len_prefixed(tag::BYTES, v);
        Ok(())
    }
    fn serialize_none(self) -> R {
        self.byte(tag::NULL);
        Ok(())
    }
    // `Some(x)` hashes as `x`: BSON stores them identically.
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_unit(self) -> R {
        self.byte(tag::NULL);
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> R {
        self.byte(tag::NULL);
        Ok(())
    }
    fn serialize_unit_variant(self, _name: &'static str, _i: u32, variant: &'static str) -> R {
        self.byte(tag::VARIANT);
        self.str(variant);
        self.byte(tag::NULL);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        value: &T,
    ) -> R {
        self.byte(tag::VARIANT);
        self.str(variant);
        value.serialize(self)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self, CanonError> {
        self.byte(tag::SEQ);
        Ok(self)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self, CanonError> {
        self.byte(tag::SEQ);
        Ok(self)
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self, CanonError> {
        self.byte(tag::SEQ);
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, CanonError> {
        self.byte(tag::VARIANT);
        self.str(variant);
        self.byte(tag::SEQ);
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapCanon<'a, S>, CanonError> {
        let n = len.unwrap_or(0);
        Ok(MapCanon {
            out: self.out,
            buf: Vec::with_capacity(n * 32),
            spans: Vec::with_capacity(n),
        })
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, CanonError> {
        self.byte(tag::STRUCT);
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _i: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, CanonError> {
        self.byte(tag::VARIANT);
        self.str(variant);
        self.byte(tag::STRUCT);
        Ok(self)
    }
}

macro_rules! seq_like {
    ($trait:ident, $method:ident, $end:expr) => {
        impl<S: Sink> ser::$trait for &mut Canon<'_, S> {
            type Ok = ();
            type Error = CanonError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
                value.serialize(&mut **self)
            }
            fn end(self) -> R {
                self.byte($end);
                Ok(())
            }
        }
    };
}
seq_like!(SerializeSeq, serialize_element, tag::SEQ_END);
seq_like!(SerializeTuple, serialize_element, tag::SEQ_END);
seq_like!(SerializeTupleStruct, serialize_field, tag::SEQ_END);
seq_like!(SerializeTupleVariant, serialize_field, tag::SEQ_END);

macro_rules! struct_like {
    ($trait:ident) => {
        impl<S: Sink> ser::$trait for &mut Canon<'_, S> {
            type Ok = ();
            type Error = CanonError;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> R {
                self.str(key);
                value.serialize(&mut **self)
            }
            fn end(self) -> R {
                self.byte(tag::STRUCT_END);
                Ok(())
            }
        }
    };
}
struct_like!(SerializeStruct);
struct_like!(SerializeStructVariant);

/// A map is buffered entry by entry, then written sorted by the entries' encoded bytes, so the
/// hash does not depend on iteration order (`HashMap`'s differs between processes).
struct MapCanon<'a, S: Sink> {
    out: &'a mut S,
    buf: Vec<u8>,
    /// (key start, value start, entry end) into `buf`.
    spans: Vec<(usize, usize, usize)>,
}

impl<S: Sink> ser::SerializeMap for MapCanon<'_, S> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> R {
        let start = self.buf.len();
        key.serialize(&mut Canon { out: &mut self.buf })?;
        self.spans.push((start, self.buf.len(), self.buf.len()));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
        value.serialize(&mut Canon { out: &mut self.buf })?;
        let end = self.buf.len();
        match self.spans.last_mut() {
            Some(span) if span.2 == span.1 => {
                span.2 = end;
                Ok(())
            }
            _ => Err(CanonError("map value serialized without a key".into())),
        }
    }
    fn end(mut self) -> R {
        let buf = &self.buf;
        self.spans
            .sort_unstable_by(|a, b| buf[a.0..a.2].cmp(&buf[b.0..b.2]));
        self.out.put(&[tag::MAP]);
        for &(k, _, e) in &self.spans {
            self.out.put(&buf[k..e]);
        }
        self.out.put(&[tag::MAP_END]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    #[test]
    fn map_order_does_not_matter() {
        let a: Vec<(String, i32)> = (0..50).map(|i| (format!("k{i}"), i)).collect();
        let h1: HashMap<_, _> = a.iter().cloned().collect();
        let b1: BTreeMap<_, _> = a.iter().cloned().collect();
        assert_eq!(canonical_hash(&h1).unwrap(), canonical_hash(&b1).unwrap());
    }

    #[test]
    fn distinguishes_types_and_boundaries() {
        let h = |v: &dyn erased::Ser| v.hash();
        assert_ne!(h(&("ab", "c")), h(&("a", "bc")));
        assert_ne!(h(&1i64), h(&"1"));
        assert_ne!(h(&vec![1, 2]), h(&(vec![1], 2)));
        assert_eq!(h(&1u8), h(&1i64), "integer width does not matter");
        assert_eq!(h(&-0.0f64), h(&0.0f64));
        assert_eq!(h(&Some(3)), h(&3));
    }

    mod erased {
        pub trait Ser {
            fn hash(&self) -> super::ContentHash;
        }
        impl<T: serde::Serialize> Ser for T {
            fn hash(&self) -> super::ContentHash {
                super::canonical_hash(self).unwrap()
            }
        }
    }

    #[test]
    fn serialize_errors_are_reported() {
        struct Bad;
        impl Serialize for Bad {
            fn serialize<S: ser::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(ser::Error::custom("boom"))
            }
        }
        let e = canonical_hash(&Bad).unwrap_err();
        assert!(
            matches!(e, Error::Serialize { ref message, .. } if message == "boom"),
            "{e}"
        );
    }

    #[test]
    fn hex_round_trip() {
        let h = canonical_hash("x").unwrap();
        assert_eq!(h.to_string().parse::<ContentHash>().unwrap(), h);
        assert!("zz".parse::<ContentHash>().is_err());
        assert!("g".repeat(64).parse::<ContentHash>().is_err());
    }
}
