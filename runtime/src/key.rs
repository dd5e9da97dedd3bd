//! The id scheme: how key fields become the 80 hashed bits and the 48 timestamp bits of a ULID.
//!
//! The byte layout is a format, specified in `docs/id-scheme.md` and frozen by golden vectors:
//! a change here that alters any id is a new scheme, never an edit.

use std::borrow::Cow;
use std::fmt;

use ulid::Ulid;

use crate::error::KeyError;
use crate::sha::Sha256;

/// The largest timestamp a ULID can carry: 2^48 - 1 ms since the Unix epoch.
pub const MAX_TIMESTAMP_MS: u64 = (1 << 48) - 1;

/// Domain-separation prefix of the default scheme; never changes for scheme v1.
const DEFAULT_PREFIX: &[u8] = b"natural-key/v1\0";

/// The default scheme's hasher after the prefix and an empty namespace (its `u32` length, 0):
/// where most ids start.
const DEFAULT_NO_NAMESPACE: Sha256 = Sha256::with_prefix(&[DEFAULT_PREFIX, &0u32.to_be_bytes()]);

/// A key field's value in the form the id scheme hashes.
///
/// Implement [`KeyPart`] for your own key types by returning one of these.
///
/// ```
/// use natural_key_runtime::{KeyPart, KeyValue};
/// assert_eq!(7u8.key_value(), KeyValue::Int(7));
/// assert_eq!(Some("en").key_value(), KeyValue::Str("en".into()));
/// assert_eq!(None::<&str>.key_value(), KeyValue::None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyValue<'a> {
    /// An absent optional key (`None`).
    None,
    /// Text (UTF-8). Subject to `#[key(nfc)]` and `#[key(lowercase)]`.
    Str(Cow<'a, str>),
    /// Any integer, widened to 128 bits so that changing a field from `i32` to `i64` keeps ids.
    Int(i128),
    /// A boolean.
    Bool(bool),
    /// Raw bytes.
    Bytes(Cow<'a, [u8]>),
    /// A UUID (16 bytes).
    Uuid([u8; 16]),
    /// A BSON ObjectId (12 bytes).
    ObjectId([u8; 12]),
}

impl KeyValue<'_> {
    /// Type tag of the default scheme (docs/id-scheme.md).
    #[inline(always)]
    fn tag(&self) -> u8 {
        match self {
            KeyValue::None => 0x00,
            KeyValue::Str(_) => 0x01,
            KeyValue::Int(_) => 0x02,
            KeyValue::Bool(_) => 0x03,
            KeyValue::Bytes(_) => 0x04,
            KeyValue::Uuid(_) => 0x05,
            KeyValue::ObjectId(_) => 0x06,
        }
    }

    /// Calls `f` with the default scheme's payload bytes (no allocation for the common types).
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            KeyValue::None => f(&[]),
            KeyValue::Str(s) => f(s.as_bytes()),
            KeyValue::Int(i) => f(&i.to_be_bytes()),
            KeyValue::Bool(b) => f(&[*b as u8]),
            KeyValue::Bytes(b) => f(b),
            KeyValue::Uuid(u) => f(u),
            KeyValue::ObjectId(o) => f(o),
        }
    }

    /// The joined (seed-compatible) scheme's text form.
    fn joined_text(&self) -> Cow<'_, str> {
        match self {
            KeyValue::None => Cow::Borrowed(""),
            KeyValue::Str(s) => Cow::Borrowed(s),
            KeyValue::Int(i) => Cow::Owned(i.to_string()),
            KeyValue::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
            KeyValue::Bytes(b) => Cow::Owned(hex(b)),
            KeyValue::Uuid(u) => Cow::Owned(uuid::Uuid::from_bytes(*u).hyphenated().to_string()),
            KeyValue::ObjectId(o) => Cow::Owned(hex(o)),
        }
    }
}

impl fmt::Display for KeyValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::None => f.write_str("None"),
            KeyValue::Str(s) => write!(f, "{s:?}"),
            other => f.write_str(&other.joined_text()),
        }
    }
}

/// The lowercase hex digits of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    crate::sha::hex_into(bytes, &mut out);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// A type that can be an identity key field (`#[key]`).
///
/// Implemented for `str`, `String`, `char`, the integers, `bool`, [`uuid::Uuid`],
/// [`bson::oid::ObjectId`], `Option<T>` and references. Implement it for your own types:
///
/// ```
/// use natural_key_runtime::{KeyPart, KeyValue};
/// enum Lang { En, ZhTw }
/// impl KeyPart for Lang {
///     fn key_value(&self) -> KeyValue<'_> {
///         KeyValue::Str(match self { Lang::En => "en", Lang::ZhTw => "zh-TW" }.into())
///     }
/// }
/// assert_eq!(Lang::ZhTw.key_value(), KeyValue::Str("zh-TW".into()));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[key]` field",
    label = "this type does not implement `natural_key::KeyPart`",
    note = "implement `natural_key::KeyPart` for it, returning a `KeyValue` (text, integer, bytes, ...)"
)]
pub trait KeyPart {
    /// The value the id scheme hashes.
    fn key_value(&self) -> KeyValue<'_>;
}

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn key_value(&self) -> KeyValue<'_> {
        (**self).key_value()
    }
}
impl<T: KeyPart + ?Sized> KeyPart for Box<T> {
    fn key_value(&self) -> KeyValue<'_> {
        (**self).key_value()
    }
}
impl KeyPart for str {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Str(Cow::Borrowed(self))
    }
}
impl KeyPart for String {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Str(Cow::Borrowed(self))
    }
}
impl KeyPart for Cow<'_, str> {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Str(Cow::Borrowed(self))
    }
}
impl KeyPart for char {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Str(Cow::Owned(self.to_string()))
    }
}
impl KeyPart for bool {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Bool(*self)
    }
}
macro_rules! int_key {
    ($($t:ty),*) => {$(
        impl KeyPart for $t {
            fn key_value(&self) -> KeyValue<'_> { KeyValue::Int(*self as i128) }
        }
    )*};
}
int_key!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, usize);
impl KeyPart for uuid::Uuid {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(*self.as_bytes())
    }
}
impl KeyPart for bson::oid::ObjectId {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::ObjectId(self.bytes())
    }
}
impl KeyPart for bson::Uuid {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Uuid(self.bytes())
    }
}
impl KeyPart for [u8] {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Bytes(Cow::Borrowed(self))
    }
}
impl<T: KeyPart> KeyPart for Option<T> {
    fn key_value(&self) -> KeyValue<'_> {
        match self {
            Some(v) => v.key_value(),
            None => KeyValue::None,
        }
    }
}

impl KeyPart for KeyValue<'_> {
    fn key_value(&self) -> KeyValue<'_> {
        match self {
            KeyValue::Str(s) => KeyValue::Str(Cow::Borrowed(s)),
            KeyValue::Bytes(b) => KeyValue::Bytes(Cow::Borrowed(b)),
            other => other.clone(),
        }
    }
}

/// Derives an id from key values known only at run time — the same id `#[derive(NaturalKey)]`
/// computes for a struct whose `#[key]` fields hold these values in this order (after any
/// normalization). Useful for ids of documents written by other code, e.g. a Go service.
///
/// ```
/// use natural_key_runtime::{compute_id, KeyValue, Scheme};
/// // The seed recipe: ULID(publishedAt, sha256("hello-world" + ":" + "en")[0:10]).
/// let id = compute_id(
///     Scheme::Joined { separator: ":" },
///     &[KeyValue::Str("hello-world".into()), KeyValue::Str("en".into())],
///     1_700_000_000_000,
/// )?;
/// assert_eq!(id.to_string(), "01HF7YAT002BC0VWVKC580KT23");
/// # Ok::<(), natural_key_runtime::KeyError>(())
/// ```
pub fn compute_id(
    scheme: Scheme,
    keys: &[KeyValue<'_>],
    timestamp_ms: i128,
) -> Result<Ulid, KeyError> {
    let digest = compute_identity(scheme, keys)?;
    Ok(ulid_from(
        check_timestamp("timestamp", timestamp_ms)?,
        &digest.0,
    ))
}

/// The identity digest (what `_nk_identity` stores, hex) of run-time key values; see
/// [`compute_id`].
pub fn compute_identity(
    scheme: Scheme,
    keys: &[KeyValue<'_>],
) -> Result<crate::ContentHash, KeyError> {
    let mut sink = KeySink::new(scheme, false);
    for k in keys {
        sink.part("key", k, Normalize::NONE)?;
    }
    Ok(crate::ContentHash(sink.finish()))
}

/// Per-field normalization requested with `#[key(nfc)]` / `#[key(lowercase)]`; applies to
/// text values only.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Normalize {
    /// Unicode lowercase (`str::to_lowercase`), applied first.
    pub lowercase: bool,
    /// Unicode NFC, applied after lowercasing (lowercasing can denormalize).
    pub nfc: bool,
}

impl Normalize {
    /// No normalization.
    pub const NONE: Normalize = Normalize {
        lowercase: false,
        nfc: false,
    };

    #[inline]
    fn apply<'a>(self, v: KeyValue<'a>) -> KeyValue<'a> {
        // Most keys ask for nothing: keep that path free of the call below.
        if !self.lowercase && !self.nfc {
            return v;
        }
        self.apply_text(v)
    }

    #[inline(never)]
    fn apply_text<'a>(self, v: KeyValue<'a>) -> KeyValue<'a> {
        match v {
            KeyValue::Str(s) if self.lowercase || self.nfc => {
                use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
                // Only ASCII without A-Z is known to lowercase to itself: titlecase letters
                // such as U+01C5 are not `is_uppercase` but still have a lowercase mapping.
                let unchanged =
                    |s: &str| s.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase());
                let s = if self.lowercase && !unchanged(&s) {
                    Cow::Owned(s.to_lowercase())
                } else {
                    s
                };
                let s = if self.nfc && is_nfc_quick(s.chars()) != IsNormalized::Yes {
                    Cow::Owned(s.nfc().collect::<String>())
                } else {
                    s
                };
                KeyValue::Str(s)
            }
            other => other,
        }
    }
}

/// Which byte layout turns key fields into the id's 80 hashed bits (`docs/id-scheme.md`).
/// Chosen per type with `#[natural_key(scheme = "...")]`; used directly by [`compute_id`].
///
/// ```
/// use natural_key_runtime::{compute_id, KeyValue, Scheme};
/// let keys = [KeyValue::Str("a:b".into()), KeyValue::Str("c".into())];
/// let other = [KeyValue::Str("a".into()), KeyValue::Str("b:c".into())];
/// let joined = Scheme::Joined { separator: ":" };
/// let default = Scheme::Default { namespace: "" };
/// // The seed recipe cannot tell these apart; the default scheme can.
/// assert_eq!(compute_id(joined, &keys, 0)?, compute_id(joined, &other, 0)?);
/// assert_ne!(compute_id(default, &keys, 0)?, compute_id(default, &other, 0)?);
/// # Ok::<(), natural_key_runtime::KeyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Scheme v1: type-tagged, length-prefixed fields after a namespace; unambiguous.
    Default {
        /// From `#[natural_key(namespace = "...")]`; empty when absent.
        namespace: &'static str,
    },
    /// The seed recipe: SHA-256 over the fields' text joined by `separator`. Byte-identical to
    /// `sha256(slug + ":" + lang)`; ambiguous when a value contains the separator.
    Joined {
        /// From `#[natural_key(separator = "...")]`; `":"` when absent.
        separator: &'static str,
    },
}

impl Scheme {
    /// [`Scheme::Default`] under a namespace known only at run time (read from configuration,
    /// say). The text is interned: kept once per distinct text for the life of the process, so
    /// a program that builds its schemes again and again keeps no more than the first time.
    ///
    /// ```
    /// use natural_key_runtime::Scheme;
    /// let configured = String::from("blog.post");
    /// assert_eq!(Scheme::with_namespace(&configured), Scheme::Default { namespace: "blog.post" });
    /// ```
    pub fn with_namespace(namespace: &str) -> Scheme {
        Scheme::Default {
            namespace: intern(namespace),
        }
    }

    /// [`Scheme::Joined`] with a separator known only at run time, interned as
    /// [`with_namespace`](Scheme::with_namespace)'s namespace is.
    ///
    /// ```
    /// use natural_key_runtime::Scheme;
    /// assert_eq!(Scheme::joined_by(&String::from("|")), Scheme::Joined { separator: "|" });
    /// ```
    pub fn joined_by(separator: &str) -> Scheme {
        Scheme::Joined {
            separator: intern(separator),
        }
    }
}

/// `text` as a `&'static str`: the names of a key described at run time live as long as the
/// derive's (which are literals), so that the scheme, the key sink and [`KeyError`] serve both.
/// Each distinct text is kept once for the life of the process; a spec read again from the
/// same configuration adds nothing.
pub(crate) fn intern(text: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match names.get(text) {
        Some(name) => name,
        None => {
            let name: &'static str = Box::leak(text.into());
            names.insert(name);
            name
        }
    }
}

/// Receives the key fields of one document, in declaration order; generated code feeds it.
/// Either hashes them (for ids) or, with `describe` set, writes them out as text (for error
/// messages). The hasher lives inline, not behind an enum, so building and finishing a sink
/// moves no state around: `id()` is a few hundred nanoseconds, most of it SHA-256.
#[doc(hidden)]
pub struct KeySink {
    scheme: Scheme,
    fields: usize,
    hash: Sha256,
    describe: Option<String>,
}

impl KeySink {
    #[inline]
    pub(crate) fn new(scheme: Scheme, describe: bool) -> Self {
        let hash = match scheme {
            Scheme::Default { namespace: "" } => DEFAULT_NO_NAMESPACE,
            Scheme::Default { namespace } => {
                let mut hash = Sha256::with_prefix(&[DEFAULT_PREFIX]);
                // A namespace longer than u32::MAX cannot come from a string literal in
                // practice; the derive rejects it at compile time anyway.
                hash.update(&(namespace.len() as u32).to_be_bytes());
                hash.update(namespace.as_bytes());
                hash
            }
            Scheme::Joined { .. } => Sha256::with_prefix(&[]),
        };
        KeySink {
            scheme,
            fields: 0,
            hash,
            describe: describe.then(String::new),
        }
    }

    #[inline(always)]
    pub(crate) fn finish(&mut self) -> [u8; 32] {
        self.hash.finish()
    }

    /// Adds one key field.
    #[inline]
    pub fn part<T: KeyPart + ?Sized>(
        &mut self,
        field: &'static str,
        value: &T,
        normalize: Normalize,
    ) -> Result<(), KeyError> {
        let v = value.key_value();
        // Checked before normalizing, so that the position is one in the text the caller
        // gave: lowercasing and NFC change byte lengths ("\u{1e9e}" -> "\u{df}"), and they
        // never add or remove a NUL, so the verdict is the same either way.
        if let KeyValue::Str(s) = &v {
            if has_nul(s.as_bytes()) {
                let position = s.bytes().position(|b| b == 0).unwrap_or_default();
                return Err(KeyError::NulByte { field, position });
            }
        }
        let v = normalize.apply(v);
        let first = self.fields == 0;
        self.fields += 1;
        if let Some(out) = &mut self.describe {
            use fmt::Write;
            if !first {
                out.push_str(", ");
            }
            let _ = write!(out, "{field}={v}");
            return Ok(());
        }
        let h = &mut self.hash;
        match self.scheme {
            Scheme::Default { .. } => {
                let tag = v.tag();
                v.with_bytes(|b| {
                    let len = u32::try_from(b.len()).map_err(|_| KeyError::TooLong {
                        field,
                        len: b.len(),
                    })?;
                    h.update_field(tag, len.to_be_bytes(), b);
                    Ok::<(), KeyError>(())
                })?;
            }
            Scheme::Joined { separator } => {
                if !first {
                    h.update(separator.as_bytes());
                }
                h.update(v.joined_text().as_bytes());
            }
        }
        Ok(())
    }
}

/// Whether `b` holds a NUL byte, eight bytes at a time. Every text key is checked on every
/// `id()`; keys are short, and core's `memchr` is an out-of-line call for them.
#[inline]
fn has_nul(b: &[u8]) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte is zero exactly when subtracting one borrows through it into its high bit.
    let zero_in = |c: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        x.wrapping_sub(LOW) & !x & HIGH != 0
    };
    if b.len() < 8 {
        // Not `contains`: for bytes that is core's `memchr`, out of line.
        #[allow(clippy::manual_contains)]
        return b.iter().any(|&c| c == 0);
    }
    // The last eight bytes as one word (overlapping the chunks before it), not a byte loop.
    b.chunks_exact(8).any(zero_in) || zero_in(&b[b.len() - 8..])
}

/// A type whose key fields can be fed to a [`KeySink`]; the `NaturalKey` derive implements it.
#[doc(hidden)]
pub trait WriteKey {
    const SCHEME: Scheme;
    fn write_key(&self, sink: &mut KeySink) -> Result<(), KeyError>;
}

/// SHA-256 over the identity (non-timestamp key fields) in the given scheme.
pub(crate) fn identity_digest<T: WriteKey + ?Sized>(doc: &T) -> Result<[u8; 32], KeyError> {
    let mut sink = KeySink::new(T::SCHEME, false);
    doc.write_key(&mut sink)?;
    Ok(sink.finish())
}

/// `slug="hello", lang="en"`: the key values as text, for error messages.
pub(crate) fn describe<T: WriteKey + ?Sized>(doc: &T) -> String {
    let mut sink = KeySink::new(T::SCHEME, true);
    let result = doc.write_key(&mut sink);
    let text = sink.describe.unwrap_or_default();
    match result {
        Ok(()) => text,
        Err(e) => format!("{text} ({e})"),
    }
}

/// The text stored (and uniquely indexed) for a RandomId type's `#[idempotency_key]`.
pub(crate) fn idempotency_text<T: KeyPart + ?Sized>(
    field: &'static str,
    value: &T,
) -> Result<Option<String>, KeyError> {
    let v = value.key_value();
    match &v {
        KeyValue::None => Err(KeyError::Missing { field }),
        KeyValue::Str(s) => match s.bytes().position(|b| b == 0) {
            Some(position) => Err(KeyError::NulByte { field, position }),
            None => Ok(Some(s.to_string())),
        },
        other => Ok(Some(other.joined_text().into_owned())),
    }
}

/// Builds the ULID: 48-bit timestamp, then the first 10 bytes of the identity digest.
pub(crate) fn ulid_from(timestamp_ms: u64, digest: &[u8; 32]) -> Ulid {
    let mut low = [0u8; 16];
    low[6..].copy_from_slice(&digest[..10]);
    Ulid::from_parts(timestamp_ms, u128::from_be_bytes(low))
}

/// Checks a timestamp against the ULID range: never wrap or clamp.
#[doc(hidden)]
pub fn check_timestamp(field: &'static str, millis: i128) -> Result<u64, KeyError> {
    if (0..=MAX_TIMESTAMP_MS as i128).contains(&millis) {
        Ok(millis as u64)
    } else {
        Err(KeyError::TimestampOutOfRange { field, millis })
    }
}

/// A type that can be the `#[key(timestamp)]` field: it knows its instant in Unix milliseconds.
///
/// Implemented for `i64`/`u64`/`i128`/`i32`/`u32` (already milliseconds),
/// [`bson::DateTime`], [`std::time::SystemTime`], and — behind the `chrono`, `time` and `jiff`
/// features — `chrono::DateTime<Tz>`, `time::OffsetDateTime`/`UtcDateTime`,
/// `jiff::Timestamp`/`Zoned`. Sub-millisecond parts are floored.
///
/// ```
/// use natural_key_runtime::KeyTimestamp;
/// assert_eq!(1_700_000_000_000i64.unix_millis(), 1_700_000_000_000);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[key(timestamp)]` field",
    label = "not a timestamp: expected Unix milliseconds (i64/u64), bson::DateTime, SystemTime, or a chrono/time/jiff instant",
    note = "the timestamp key becomes the ULID's 48-bit millisecond prefix; implement `natural_key::KeyTimestamp` for custom types"
)]
pub trait KeyTimestamp {
    /// Milliseconds since 1970-01-01T00:00:00Z (negative before it). Range checking is done by
    /// the caller, so implementations never clamp.
    fn unix_millis(&self) -> i128;
}

impl<T: KeyTimestamp + ?Sized> KeyTimestamp for &T {
    fn unix_millis(&self) -> i128 {
        (**self).unix_millis()
    }
}
macro_rules! ms_timestamp {
    ($($t:ty),*) => {$(
        impl KeyTimestamp for $t {
            fn unix_millis(&self) -> i128 { *self as i128 }
        }
    )*};
}
ms_timestamp!(i32, i64, i128, u32, u64);
impl KeyTimestamp for bson::DateTime {
    fn unix_millis(&self) -> i128 {
        self.timestamp_millis() as i128
    }
}
impl KeyTimestamp for std::time::SystemTime {
    fn unix_millis(&self) -> i128 {
        match self.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_millis() as i128,
            // Before the epoch: floor toward negative infinity.
            Err(e) => {
                let d = e.duration();
                let ms = d.as_millis() as i128;
                if d.subsec_nanos() % 1_000_000 != 0 {
                    -(ms + 1)
                } else {
                    -ms
                }
            }
        }
    }
}
#[cfg(feature = "chrono")]
impl<Tz: chrono::TimeZone> KeyTimestamp for chrono::DateTime<Tz> {
    fn unix_millis(&self) -> i128 {
        self.timestamp_millis() as i128
    }
}
#[cfg(feature = "time")]
impl KeyTimestamp for time::OffsetDateTime {
    fn unix_millis(&self) -> i128 {
        self.unix_timestamp_nanos().div_euclid(1_000_000)
    }
}
#[cfg(feature = "time")]
impl KeyTimestamp for time::UtcDateTime {
    fn unix_millis(&self) -> i128 {
        self.unix_timestamp_nanos().div_euclid(1_000_000)
    }
}
#[cfg(feature = "jiff")]
impl KeyTimestamp for jiff::Timestamp {
    fn unix_millis(&self) -> i128 {
        self.as_nanosecond().div_euclid(1_000_000)
    }
}
#[cfg(feature = "jiff")]
impl KeyTimestamp for jiff::Zoned {
    fn unix_millis(&self) -> i128 {
        self.timestamp().as_nanosecond().div_euclid(1_000_000)
    }
}

/// Checks a version against what `_nk_version` holds (an int64): never wrap or clamp.
#[doc(hidden)]
pub fn check_version(field: &'static str, value: i128) -> Result<i64, KeyError> {
    i64::try_from(value).map_err(|_| KeyError::VersionOutOfRange { field, value })
}

/// A type that can be a document's version field (`#[natural_key(version)]`): an integer, or
/// an instant of any type the timestamp key accepts (compared in Unix milliseconds, floored, as
/// the timestamp key is: two instants within one millisecond are one version; use an integer
/// version where finer order matters).
///
/// ```
/// use natural_key_runtime::KeyVersion;
/// assert_eq!(7u32.version(), 7);
/// assert_eq!(natural_key_runtime::bson::DateTime::from_millis(1_500).version(), 1_500);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[natural_key(version)]` field",
    label = "not a version: expected an integer, bson::DateTime, SystemTime, or a chrono/time/jiff instant",
    note = "versions are compared as int64 (instants in Unix milliseconds); implement `natural_key::KeyVersion` for custom types"
)]
pub trait KeyVersion {
    /// The version as a number: larger is newer. Range checking (int64) is the caller's.
    fn version(&self) -> i128;
}

impl<T: KeyVersion + ?Sized> KeyVersion for &T {
    fn version(&self) -> i128 {
        (**self).version()
    }
}
macro_rules! number_version {
    ($($t:ty),*) => {$(
        impl KeyVersion for $t {
            fn version(&self) -> i128 { *self as i128 }
        }
    )*};
}
number_version!(i8, i16, i32, i64, i128, u8, u16, u32, u64);
macro_rules! instant_version {
    ($($(#[$cfg:meta])* $t:ty),*) => {$(
        $(#[$cfg])*
        impl KeyVersion for $t {
            fn version(&self) -> i128 { KeyTimestamp::unix_millis(self) }
        }
    )*};
}
instant_version!(
    bson::DateTime,
    std::time::SystemTime,
    #[cfg(feature = "time")]
    time::OffsetDateTime,
    #[cfg(feature = "time")]
    time::UtcDateTime,
    #[cfg(feature = "jiff")]
    jiff::Timestamp,
    #[cfg(feature = "jiff")]
    jiff::Zoned
);
#[cfg(feature = "chrono")]
impl<Tz: chrono::TimeZone> KeyVersion for chrono::DateTime<Tz> {
    fn version(&self) -> i128 {
        KeyTimestamp::unix_millis(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_never_wrapped() {
        assert_eq!(check_version("v", u64::MAX as i128 / 2), Ok(i64::MAX));
        assert_eq!(
            check_version("v", u64::MAX.version()),
            Err(KeyError::VersionOutOfRange {
                field: "v",
                value: u64::MAX as i128
            })
        );
        assert_eq!(check_version("v", (-5i8).version()), Ok(-5));
    }

    proptest::proptest! {
        /// The word-at-a-time check agrees with a plain search, for bytes that stress it
        /// (0x00, 0x01, 0x80, 0xff) at every length and position.
        #[test]
        fn has_nul_is_contains_zero(
            b in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 0x7f, 0x80, 0x81, 0xfe, 0xff, b'a']), 0..40),
        ) {
            proptest::prop_assert_eq!(has_nul(&b), b.contains(&0));
        }
    }

    #[test]
    fn system_time_before_epoch_floors() {
        use std::time::{Duration, UNIX_EPOCH};
        let t = UNIX_EPOCH - Duration::from_micros(1500);
        assert_eq!(t.unix_millis(), -2);
        let t = UNIX_EPOCH - Duration::from_millis(3);
        assert_eq!(t.unix_millis(), -3);
        let t = UNIX_EPOCH + Duration::from_micros(1999);
        assert_eq!(t.unix_millis(), 1);
    }

    #[test]
    fn timestamp_range_is_checked_not_clamped() {
        assert_eq!(check_timestamp("t", 0), Ok(0));
        assert_eq!(
            check_timestamp("t", MAX_TIMESTAMP_MS as i128),
            Ok(MAX_TIMESTAMP_MS)
        );
        assert_eq!(
            check_timestamp("t", MAX_TIMESTAMP_MS as i128 + 1),
            Err(KeyError::TimestampOutOfRange {
                field: "t",
                millis: MAX_TIMESTAMP_MS as i128 + 1
            })
        );
        assert_eq!(
            check_timestamp("t", -1),
            Err(KeyError::TimestampOutOfRange {
                field: "t",
                millis: -1
            })
        );
    }

    #[test]
    fn normalization() {
        let n = Normalize {
            lowercase: true,
            nfc: true,
        };
        // "CAFE\u{301}" (E + combining acute) lowercases and composes to "café".
        assert_eq!(
            n.apply(KeyValue::Str("CAFE\u{301}".into())),
            KeyValue::Str("caf\u{e9}".into())
        );
        assert_eq!(n.apply(KeyValue::Int(5)), KeyValue::Int(5));
    }

    /// Titlecase letters are not `is_uppercase`, yet `to_lowercase` maps them: a check for
    /// uppercase characters before lowercasing skipped them and forked the id.
    #[test]
    fn lowercase_maps_titlecase_letters() {
        let lower = Normalize {
            lowercase: true,
            nfc: false,
        };
        let id = |text: &str| {
            let mut sink = KeySink::new(Scheme::Default { namespace: "" }, false);
            sink.part("key", text, lower).unwrap();
            sink.finish()
        };
        assert!(!'\u{1c5}'.is_uppercase());
        assert_eq!(id("\u{1c5}emal"), id("\u{1c6}emal"));
        assert_eq!(id("\u{1c5}emal"), id(&"\u{1c5}emal".to_lowercase()));
    }

    /// Found by tests/fuzz.rs: the position was counted in the normalized text, so a key
    /// `"\u{1e9e}\0"` under `lowercase` reported byte 2 (of `"\u{df}\0"`), not byte 3.
    #[test]
    fn nul_position_is_in_the_text_given() {
        for (text, lowercase, nfc) in [
            ("\u{1e9e}\0", true, false), // 3 bytes, lowercased to 2
            ("\u{130}\0", true, false),  // 2 bytes, lowercased to 3
            ("e\u{301}\0", false, true), // 3 bytes, composed to 2
        ] {
            let mut sink = KeySink::new(Scheme::Default { namespace: "" }, false);
            assert_eq!(
                sink.part("key", text, Normalize { lowercase, nfc }),
                Err(KeyError::NulByte {
                    field: "key",
                    position: text.find('\0').unwrap()
                }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn ulid_layout() {
        let mut d = [0u8; 32];
        for (i, b) in d.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let u = ulid_from(0x0102_0304_0506, &d);
        assert_eq!(u.timestamp_ms(), 0x0102_0304_0506);
        assert_eq!(&u.to_bytes()[..6], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&u.to_bytes()[6..], &d[..10]);
    }
}
