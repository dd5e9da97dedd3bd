//! The canonical content hash: SHA-256 over a streaming, order-independent encoding of a
//! value's serde representation (layout in docs/id-scheme.md, "Content hash").
//!
//! Two versions share the encoding ([`Canon`]) and differ in what they cover at the top level:
//! v1 walks the document's Rust fields ([`ContentHasher`], driven by the derive), v2 hashes the
//! document's own serialization ([`content_hash_v2`]), which is what is stored. The derive picks
//! v2 for a type whose serde attributes make the two differ.

use std::fmt;
use std::str::FromStr;

use serde::ser::{self, Serialize};

use crate::error::Error;

/// Domain-separation prefix of content hash v1.
const PREFIX_V1: &[u8] = b"natural-key/content/v1\0";
/// Domain-separation prefix of content hash v2: a v2 hash never equals a v1 hash, so a stored
/// hash says which walk produced it.
const PREFIX_V2: &[u8] = b"natural-key/content/v2\0";

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
        // On the stack: every stored hash and identity is this text, once per document.
        let mut digits = [0u8; 64];
        crate::sha::hex_into(&self.0, &mut digits);
        f.write_str(std::str::from_utf8(&digits).expect("hex digits are ASCII"))
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
    let mut h = START_V1;
    value
        .serialize(&mut Canon { out: &mut h })
        .map_err(Error::serialize::<T>)?;
    Ok(ContentHash(h.finish()))
}

/// A field name as the encoding writes every text ([`Canon::str`]: its tag, its length as a
/// big-endian `u64`, its bytes), at compile time: `N` is 9 and the name's length.
#[doc(hidden)]
pub const fn name_head<const N: usize>(name: &str) -> [u8; N] {
    let name = name.as_bytes();
    assert!(N == 9 + name.len(), "a name's head is 9 bytes and the name");
    let mut head = [0u8; N];
    head[0] = tag::STR;
    let len = (name.len() as u64).to_be_bytes();
    let mut i = 0;
    while i < N - 1 {
        head[1 + i] = if i < 8 { len[i] } else { name[i - 8] };
        i += 1;
    }
    head
}

/// Streams a document's hashed fields; generated `content_hash` code drives it.
#[doc(hidden)]
pub struct ContentHasher {
    h: Buffered,
}

impl Default for ContentHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl ContentHasher {
    pub fn new() -> Self {
        let mut h = START_V1;
        h.put(&[tag::STRUCT]);
        ContentHasher { h }
    }

    /// One field: its name as [`name_head`] encodes it (a constant the derive builds), then
    /// its value. A copy of a constant length, where encoding the name here took a call per
    /// field to copy a length only known at run time.
    pub fn field<Owner: ?Sized, V: Serialize + ?Sized, const N: usize>(
        &mut self,
        head: &[u8; N],
        value: &V,
    ) -> Result<(), Error> {
        self.h.put(head);
        value
            .serialize(&mut Canon { out: &mut self.h })
            .map_err(Error::serialize::<Owner>)
    }

    pub fn finish(mut self) -> ContentHash {
        self.h.put(&[tag::STRUCT_END]);
        ContentHash(self.h.finish())
    }
}

/// One field of a v2 type on its v1 walk ([`NaturalKey::__content_hash_v1`]). A v2 type may
/// hold fields that are not `Serialize` (`#[serde(skip)]`, `serialize_with`, `into`): such a
/// type could not have been hashed by v1, so its walk ends without a hash instead of failing
/// to compile. Generated code calls `(&V1Field(&self.f)).v1_field::<Self>(..)`, and method
/// lookup picks [`V1Hashable`] for a `Serialize` field, [`V1Unhashable`] (one autoref further)
/// otherwise.
///
/// [`NaturalKey::__content_hash_v1`]: crate::NaturalKey::__content_hash_v1
#[doc(hidden)]
pub struct V1Field<'a, T: ?Sized>(pub &'a T);

/// A `Serialize` field on the v1 walk: hashed as v1 did.
#[doc(hidden)]
pub trait V1Hashable {
    fn v1_field<Owner: ?Sized, const N: usize>(
        &self,
        hasher: &mut ContentHasher,
        head: &[u8; N],
    ) -> Result<(), Error>;
}

impl<T: Serialize + ?Sized> V1Hashable for V1Field<'_, T> {
    fn v1_field<Owner: ?Sized, const N: usize>(
        &self,
        hasher: &mut ContentHasher,
        head: &[u8; N],
    ) -> Result<(), Error> {
        hasher.field::<Owner, T, N>(head, self.0)
    }
}

/// A field that is not `Serialize` on the v1 walk: the type has no v1 hash.
#[doc(hidden)]
pub trait V1Unhashable {
    fn v1_field<Owner: ?Sized, const N: usize>(
        &self,
        _: &mut ContentHasher,
        head: &[u8; N],
    ) -> Result<(), Error> {
        let name = String::from_utf8_lossy(&head[9..]);
        Err(Error::serialize::<Owner>(format_args!(
            "field `{name}` is not Serialize: no v1 content hash"
        )))
    }
}

impl<T: ?Sized> V1Unhashable for &V1Field<'_, T> {}

/// Content hash v2 of a document: the canonical encoding of its serde serialization — what is
/// stored — without the top-level fields named in `skip` (the stored names of its
/// `#[natural_key(skip_hash)]` fields). The top level is a struct, or a map when serde
/// flattens a field into it; a field serde skips is simply absent.
#[doc(hidden)]
pub fn content_hash_v2<T: Serialize + ?Sized>(
    doc: &T,
    skip: &[&str],
) -> Result<ContentHash, Error> {
    let mut h = START_V2;
    write_v2(&mut h, doc, skip).map_err(Error::serialize::<T>)?;
    Ok(ContentHash(h.finish()))
}

fn write_v2<S: Sink, T: Serialize + ?Sized>(out: &mut S, doc: &T, skip: &[&str]) -> R {
    doc.serialize(Top {
        canon: &mut Canon { out },
        skip,
    })
}

/// The content hash of a document without a Rust type (a [`KeySpec`](crate::spec::KeySpec)
/// document, docs/id-scheme.md, "A document without a Rust type"): its top-level fields but
/// those named in `skip`, in stored order, as the struct a v1 type's fields make; every
/// embedded document as a struct too, every other value as the bson crate serializes it.
/// Under the v1 prefix, which such a writer stores; with `v2`, the same encoding under the v2
/// prefix, which a v2 type whose stored document has these fields writes and which is accepted
/// as equal (asked only when a stored hash is not the v1 one).
pub(crate) fn untyped_hash(
    doc: &bson::RawDocument,
    skip: impl Fn(&str) -> bool,
    v2: bool,
) -> Result<ContentHash, String> {
    let mut h = if v2 { START_V2 } else { START_V1 };
    write_untyped(&mut Canon { out: &mut h }, doc, Some(&skip)).map_err(|e| e.0)?;
    Ok(ContentHash(h.finish()))
}

/// A BSON document as a struct: `skip` applies at the top level only.
fn write_untyped<S: Sink>(
    canon: &mut Canon<'_, S>,
    doc: &bson::RawDocument,
    skip: Option<&dyn Fn(&str) -> bool>,
) -> R {
    canon.byte(tag::STRUCT);
    for element in doc {
        let (name, value) = element.map_err(ser::Error::custom)?;
        if skip.is_some_and(|skip| skip(name)) {
            continue;
        }
        canon.str(name);
        write_untyped_value(canon, value)?;
    }
    canon.byte(tag::STRUCT_END);
    Ok(())
}

fn write_untyped_value<S: Sink>(canon: &mut Canon<'_, S>, value: bson::RawBsonRef<'_>) -> R {
    use bson::RawBsonRef as B;
    use serde::ser::Serializer as _;
    match value {
        B::Document(d) => write_untyped(canon, d, None),
        B::Array(a) => {
            canon.byte(tag::SEQ);
            for v in a {
                write_untyped_value(canon, v.map_err(ser::Error::custom)?)?;
            }
            canon.byte(tag::SEQ_END);
            Ok(())
        }
        B::String(s) => canon.serialize_str(s),
        B::Int32(i) => canon.serialize_i32(i),
        B::Int64(i) => canon.serialize_i64(i),
        B::Double(f) => canon.serialize_f64(f),
        B::Boolean(b) => canon.serialize_bool(b),
        B::Null => canon.serialize_unit(),
        // The rest as the bson crate's `Serialize` writes them (canonical Extended JSON's
        // shapes: `{"$oid": hex}`, `{"$date": {"$numberLong": ms}}`, ...), as a typed field
        // of that bson type hashes.
        other => {
            let owned = bson::Bson::try_from(other.to_raw_bson()).map_err(ser::Error::custom)?;
            owned.serialize(canon)
        }
    }
}

trait Sink {
    fn put(&mut self, bytes: &[u8]);
    /// `tag`, then `word`, then `data`: every piece of the encoding but a lone tag.
    fn tagged<const N: usize>(&mut self, tag: u8, word: [u8; N], data: &[u8]);
}

/// SHA-256 of the encoding, which arrives in many small pieces (a tag, a length, a short
/// name): gathered in four blocks before they are compressed, so that the per-piece cost is a
/// copy (`crate::sha`).
type Buffered = crate::sha::Sha256<4>;

/// The hashers of each version after its prefix, built at compile time.
const START_V1: Buffered = Buffered::with_prefix(&[PREFIX_V1]);
const START_V2: Buffered = Buffered::with_prefix(&[PREFIX_V2]);

impl Sink for Buffered {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes)
    }
    #[inline]
    fn tagged<const N: usize>(&mut self, tag: u8, word: [u8; N], data: &[u8]) {
        self.update_field(tag, word, data)
    }
}
impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes)
    }
    #[inline]
    fn tagged<const N: usize>(&mut self, tag: u8, word: [u8; N], data: &[u8]) {
        self.push(tag);
        self.extend_from_slice(&word);
        self.extend_from_slice(data);
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
        self.out.tagged(tag::INT, v.to_be_bytes(), &[]);
    }
    #[inline]
    fn len_prefixed(&mut self, tag: u8, bytes: &[u8]) {
        self.out
            .tagged(tag, (bytes.len() as u64).to_be_bytes(), bytes);
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
            Err(_) => self.out.tagged(tag::UINT128, v.to_be_bytes(), &[]),
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
        self.out.tagged(tag::FLOAT, bits.to_be_bytes(), &[]);
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
            skip: &[],
            dropping: false,
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

/// The top level of a v2 document: a struct or a map drops the entries named in `skip`;
/// anything below is plain [`Canon`]. Newtypes and `Some` have no encoding of their own, so
/// the top level is the first struct or map under them.
struct Top<'a, 'b, S: Sink> {
    canon: &'a mut Canon<'b, S>,
    skip: &'a [&'a str],
}

/// A v2 document serialized as a struct: its fields but the skipped ones.
struct TopStruct<'a, 'b, S: Sink> {
    canon: &'a mut Canon<'b, S>,
    skip: &'a [&'a str],
}

macro_rules! to_canon {
    ($($method:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(fn $method(self, $($arg: $ty),*) -> $ret {
            ser::Serializer::$method(self.canon, $($arg),*)
        })*
    };
}

impl<'a, 'b, S: Sink> ser::Serializer for Top<'a, 'b, S> {
    type Ok = ();
    type Error = CanonError;
    type SerializeSeq = &'a mut Canon<'b, S>;
    type SerializeTuple = &'a mut Canon<'b, S>;
    type SerializeTupleStruct = &'a mut Canon<'b, S>;
    type SerializeTupleVariant = &'a mut Canon<'b, S>;
    type SerializeMap = MapCanon<'a, S>;
    type SerializeStruct = TopStruct<'a, 'b, S>;
    type SerializeStructVariant = &'a mut Canon<'b, S>;

    to_canon! {
        serialize_bool(v: bool) -> R;
        serialize_i8(v: i8) -> R;
        serialize_i16(v: i16) -> R;
        serialize_i32(v: i32) -> R;
        serialize_i64(v: i64) -> R;
        serialize_i128(v: i128) -> R;
        serialize_u8(v: u8) -> R;
        serialize_u16(v: u16) -> R;
        serialize_u32(v: u32) -> R;
        serialize_u64(v: u64) -> R;
        serialize_u128(v: u128) -> R;
        serialize_f32(v: f32) -> R;
        serialize_f64(v: f64) -> R;
        serialize_char(v: char) -> R;
        serialize_str(v: &str) -> R;
        serialize_bytes(v: &[u8]) -> R;
        serialize_none() -> R;
        serialize_unit() -> R;
        serialize_unit_struct(name: &'static str) -> R;
        serialize_unit_variant(name: &'static str, i: u32, variant: &'static str) -> R;
        serialize_seq(len: Option<usize>) -> Result<Self::SerializeSeq, CanonError>;
        serialize_tuple(len: usize) -> Result<Self::SerializeTuple, CanonError>;
        serialize_tuple_struct(name: &'static str, len: usize)
            -> Result<Self::SerializeTupleStruct, CanonError>;
        serialize_tuple_variant(name: &'static str, i: u32, variant: &'static str, len: usize)
            -> Result<Self::SerializeTupleVariant, CanonError>;
        serialize_struct_variant(name: &'static str, i: u32, variant: &'static str, len: usize)
            -> Result<Self::SerializeStructVariant, CanonError>;
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        value: &T,
    ) -> R {
        ser::Serializer::serialize_newtype_variant(self.canon, name, i, variant, value)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapCanon<'a, S>, CanonError> {
        let mut map = ser::Serializer::serialize_map(self.canon, len)?;
        map.skip = self.skip;
        Ok(map)
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, CanonError> {
        self.canon.byte(tag::STRUCT);
        Ok(TopStruct {
            canon: self.canon,
            skip: self.skip,
        })
    }
}

impl<S: Sink> ser::SerializeStruct for TopStruct<'_, '_, S> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> R {
        if self.skip.contains(&key) {
            return Ok(());
        }
        self.canon.str(key);
        value.serialize(&mut *self.canon)
    }
    fn end(self) -> R {
        self.canon.byte(tag::STRUCT_END);
        Ok(())
    }
}

/// A map is buffered entry by entry, then written sorted by the entries' encoded bytes, so the
/// hash does not depend on iteration order (`HashMap`'s differs between processes).
struct MapCanon<'a, S: Sink> {
    out: &'a mut S,
    buf: Vec<u8>,
    /// (key start, value start, entry end) into `buf`.
    spans: Vec<(usize, usize, usize)>,
    /// Entries whose key is one of these strings are left out (a v2 document's top level).
    skip: &'a [&'a str],
    /// The last key was left out: so is its value.
    dropping: bool,
}

impl<S: Sink> MapCanon<'_, S> {
    /// Whether `key`, an encoded map key, is the string of a skipped name.
    fn skipped(&self, key: &[u8]) -> bool {
        self.skip.iter().any(|name| {
            let (head, text) = key.split_at(key.len().min(9));
            head.first() == Some(&tag::STR)
                && head[1..] == (name.len() as u64).to_be_bytes()
                && text == name.as_bytes()
        })
    }
}

impl<S: Sink> ser::SerializeMap for MapCanon<'_, S> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> R {
        let start = self.buf.len();
        key.serialize(&mut Canon { out: &mut self.buf })?;
        if !self.skip.is_empty() && self.skipped(&self.buf[start..]) {
            self.buf.truncate(start);
            self.dropping = true;
            return Ok(());
        }
        self.spans.push((start, self.buf.len(), self.buf.len()));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
        if std::mem::take(&mut self.dropping) {
            return Ok(());
        }
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
    use sha2::{Digest, Sha256};
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

    /// The v2 message body of `doc`, for comparing bytes.
    fn v2_body<T: Serialize>(doc: &T, skip: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        write_v2(&mut out, doc, skip).unwrap();
        out
    }

    /// A field name's head, built at compile time, is the encoding of the name as a text:
    /// what `field` hashed before heads existed, so no stored hash moves.
    #[test]
    fn a_name_head_is_the_names_encoding_as_text() {
        fn text(name: &str) -> Vec<u8> {
            let mut out = Vec::new();
            Canon { out: &mut out }.str(name);
            out
        }
        assert_eq!(name_head::<9>("").as_slice(), text(""));
        assert_eq!(name_head::<13>("slug").as_slice(), text("slug"));
        assert_eq!(name_head::<15>("r#type").as_slice(), text("r#type"));
        assert_eq!(name_head::<16>("größe").as_slice(), text("größe"));
        let long = "f".repeat(300);
        assert_eq!(name_head::<309>(&long).as_slice(), text(&long));
    }

    fn sha(parts: &[&[u8]]) -> ContentHash {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        ContentHash(h.finalize().into())
    }

    #[derive(serde::Serialize)]
    struct Plain {
        a: u8,
        b: &'static str,
        m: BTreeMap<&'static str, i32>,
        n: Option<bool>,
    }

    fn plain() -> Plain {
        Plain {
            a: 7,
            b: "x",
            m: [("k", -1)].into(),
            n: None,
        }
    }

    /// Why a type without serialization-affecting serde attributes keeps v1: serde's
    /// `serialize_struct` through `Canon` writes exactly the v1 walk's bytes (STRUCT, then
    /// name and value per field, STRUCT_END), with or without skipped fields.
    #[test]
    fn serde_struct_is_the_v1_walk() {
        let d = plain();
        let mut expected = vec![tag::STRUCT];
        for (name, value) in [
            ("a", &[tag::INT][..]),
            ("b", &[tag::STR]),
            ("m", &[tag::MAP]),
            ("n", &[tag::NULL]),
        ] {
            expected.push(tag::STR);
            expected.extend((name.len() as u64).to_be_bytes());
            expected.extend(name.as_bytes());
            expected.extend(value);
            match name {
                "a" => expected.extend(7i128.to_be_bytes()),
                "b" => {
                    expected.extend(1u64.to_be_bytes());
                    expected.push(b'x');
                }
                "m" => {
                    expected.extend([tag::STR]);
                    expected.extend(1u64.to_be_bytes());
                    expected.push(b'k');
                    expected.push(tag::INT);
                    expected.extend((-1i128).to_be_bytes());
                    expected.push(tag::MAP_END);
                }
                _ => {}
            }
        }
        expected.push(tag::STRUCT_END);
        assert_eq!(v2_body(&d, &[]), expected);

        let walk = |skip: &[&str]| {
            let mut h = ContentHasher::new();
            for name in ["a", "b", "m", "n"]
                .into_iter()
                .filter(|n| !skip.contains(n))
            {
                match name {
                    "a" => h.field::<Plain, _, 10>(&name_head("a"), &d.a),
                    "b" => h.field::<Plain, _, 10>(&name_head("b"), &d.b),
                    "m" => h.field::<Plain, _, 10>(&name_head("m"), &d.m),
                    _ => h.field::<Plain, _, 10>(&name_head("n"), &d.n),
                }
                .unwrap();
            }
            h.finish()
        };
        for skip in [&[][..], &["a"], &["b", "n"], &["a", "b", "m", "n"]] {
            assert_eq!(
                sha(&[PREFIX_V1, &v2_body(&d, skip)]),
                walk(skip),
                "{skip:?}"
            );
            assert_eq!(
                sha(&[PREFIX_V2, &v2_body(&d, skip)]),
                content_hash_v2(&d, skip).unwrap()
            );
            assert_ne!(
                content_hash_v2(&d, skip).unwrap(),
                walk(skip),
                "prefixes differ"
            );
        }
    }

    #[derive(serde::Serialize)]
    struct Outer {
        a: u8,
        inner: Inner,
    }
    #[derive(serde::Serialize)]
    struct Inner {
        a: u8,
    }

    #[test]
    fn v2_skips_top_level_names_only() {
        let d = |outer, inner| Outer {
            a: outer,
            inner: Inner { a: inner },
        };
        let h = |d: &Outer| content_hash_v2(d, &["a"]).unwrap();
        assert_eq!(h(&d(1, 5)), h(&d(2, 5)), "the top-level `a` is not hashed");
        assert_ne!(h(&d(1, 5)), h(&d(1, 6)), "a nested `a` is");
        // Through a newtype and `Some`, which have no encoding, the top level is the same.
        #[derive(serde::Serialize)]
        struct Wrapped(Option<Outer>);
        let w = |outer| Wrapped(Some(d(outer, 5)));
        assert_eq!(
            content_hash_v2(&w(1), &["a"]).unwrap(),
            content_hash_v2(&w(2), &["a"]).unwrap()
        );
        assert_eq!(content_hash_v2(&w(1), &["a"]).unwrap(), h(&d(1, 5)));
    }

    #[derive(serde::Serialize)]
    struct Flat {
        a: u8,
        keep: u8,
        #[serde(flatten)]
        rest: HashMap<String, u8>,
    }

    #[test]
    fn v2_map_top_level_drops_skipped_keys_in_any_order() {
        let rest: Vec<(String, u8)> = (0..20).map(|i| (format!("k{i}"), i)).collect();
        let f = |a, rest: &[(String, u8)]| Flat {
            a,
            keep: 9,
            rest: rest.iter().cloned().collect(),
        };
        let reversed: Vec<_> = rest.iter().rev().cloned().collect();
        let h = |d: &Flat| content_hash_v2(d, &["a"]).unwrap();
        assert_eq!(h(&f(1, &rest)), h(&f(2, &reversed)));
        // The same entries as a map without the skipped one.
        let mut map: BTreeMap<String, u8> = rest.iter().cloned().collect();
        map.insert("keep".into(), 9);
        assert_eq!(v2_body(&f(1, &rest), &["a"]), v2_body(&map, &[]));
        // A key that only starts like a skipped name, or is not a string, is kept.
        let odd: HashMap<String, u8> = [("ab".to_string(), 1)].into();
        assert_ne!(
            v2_body(&odd, &["a"]),
            v2_body(&HashMap::<String, u8>::new(), &[])
        );
        let ints: BTreeMap<u8, u8> = [(1, 1)].into();
        assert_eq!(v2_body(&ints, &["\u{1}"]), v2_body(&ints, &[]));
    }

    #[test]
    fn hex_round_trip() {
        let h = canonical_hash("x").unwrap();
        assert_eq!(h.to_string().parse::<ContentHash>().unwrap(), h);
        assert!("zz".parse::<ContentHash>().is_err());
        assert!("g".repeat(64).parse::<ContentHash>().is_err());
    }
}
