//! [`KeySpec`]: a natural key described at run time — which stored BSON fields are the
//! identity keys and which is the timestamp — and what it derives from a document: the id,
//! the identity and the content hash, exactly as `#[derive(NaturalKey)]` derives them from the
//! same fields (through the same [`KeySink`]). Pure: no I/O. A document it describes is written
//! through the same verbs as a typed one (`write::keyed`), and audited through the same scan.

use std::fmt;

use bson::spec::BinarySubtype;
use bson::{RawBsonRef, RawDocument};
use ulid::Ulid;

use crate::content::ContentHash;
use crate::error::{Error, SpecError};
use crate::key::{check_timestamp, intern, ulid_from, KeySink, KeyValue, Normalize, Scheme};
use crate::names::RESERVED_PREFIX;

/// The type of an identity key field, as the derive's key types are stored in BSON
/// (docs/id-scheme.md, "Key values").
///
/// ```
/// use natural_key_runtime::spec::KeyKind;
/// assert_eq!("uuid".parse::<KeyKind>(), Ok(KeyKind::Uuid));
/// assert_eq!(KeyKind::ObjectId.to_string(), "objectid");
/// assert!("float".parse::<KeyKind>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyKind {
    /// `str`: a BSON string (`String`, `&str`, `char` fields).
    Str,
    /// `int`: a BSON int32 or int64 (every integer key type).
    Int,
    /// `bool`: a BSON boolean.
    Bool,
    /// `bytes`: a generic BSON binary, or an array of integers 0..=255 (how serde stores a
    /// `Box<[u8]>`).
    Bytes,
    /// `uuid`: a 16-byte BSON binary of subtype 4 or 0 (a `bson::Uuid`, a `uuid::Uuid`), or its
    /// hyphenated text. A legacy subtype-3 UUID is refused: its byte order is not known.
    Uuid,
    /// `objectid`: a BSON ObjectId.
    ObjectId,
}

impl KeyKind {
    const ALL: [(&'static str, KeyKind); 6] = [
        ("str", KeyKind::Str),
        ("int", KeyKind::Int),
        ("bool", KeyKind::Bool),
        ("bytes", KeyKind::Bytes),
        ("uuid", KeyKind::Uuid),
        ("objectid", KeyKind::ObjectId),
    ];
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = KeyKind::ALL
            .iter()
            .find(|(_, k)| k == self)
            .map(|(n, _)| *n);
        f.write_str(name.unwrap_or("?"))
    }
}

impl std::str::FromStr for KeyKind {
    type Err = UnknownName;

    /// `str`, `int`, `bool`, `bytes`, `uuid` or `objectid` (the names of the golden vectors).
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        KeyKind::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, k)| *k)
            .ok_or_else(|| UnknownName {
                what: "key type",
                name: s.to_string(),
                expected: "str, int, bool, bytes, uuid or objectid",
            })
    }
}

/// A name that is not a [`KeyKind`] or a [`TimestampForm`].
///
/// ```
/// let e = "float".parse::<natural_key_runtime::spec::KeyKind>().unwrap_err();
/// assert_eq!(e.to_string(), "unknown key type `float`: use str, int, bool, bytes, uuid or objectid");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`: use {expected}")]
pub struct UnknownName {
    what: &'static str,
    name: String,
    expected: &'static str,
}

/// How the timestamp field is stored: each BSON form of a type the derive accepts for
/// `#[key(timestamp)]`.
///
/// ```
/// use natural_key_runtime::spec::TimestampForm;
/// assert_eq!("date".parse::<TimestampForm>(), Ok(TimestampForm::Date));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TimestampForm {
    /// Any of the forms below, told apart by the BSON type.
    #[default]
    Any,
    /// `ms`: Unix milliseconds as int32 or int64 (`i64`, `u64`, `i32`, `u32` fields).
    Millis,
    /// `date`: a BSON date (`bson::DateTime`).
    Date,
    /// `rfc3339`: RFC 3339 text (`chrono::DateTime`, `jiff::Timestamp`), floored to the ms.
    Rfc3339,
    /// `systemtime`: `{secs_since_epoch, nanos_since_epoch}` (`std::time::SystemTime`).
    SystemTime,
}

impl std::str::FromStr for TimestampForm {
    type Err = UnknownName;

    /// `any`, `ms`, `date`, `rfc3339` or `systemtime`.
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Ok(match s {
            "any" => TimestampForm::Any,
            "ms" => TimestampForm::Millis,
            "date" => TimestampForm::Date,
            "rfc3339" => TimestampForm::Rfc3339,
            "systemtime" => TimestampForm::SystemTime,
            _ => {
                return Err(UnknownName {
                    what: "timestamp form",
                    name: s.to_string(),
                    expected: "any, ms, date, rfc3339 or systemtime",
                })
            }
        })
    }
}

/// One identity key field of a [`KeySpec`], with the derive's per-field options.
///
/// ```
/// use natural_key_runtime::spec::{KeyField, KeyKind};
/// // #[key(lowercase)] lang: Option<String>
/// let lang = KeyField::new("lang", KeyKind::Str).lowercase().optional();
/// assert_eq!(lang.name(), "lang");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    name: &'static str,
    kind: KeyKind,
    normalize: Normalize,
    optional: bool,
}

impl KeyField {
    /// A required field `name` of type `kind`. `name` may be read at run time (it is interned:
    /// kept once per distinct name for the life of the process).
    pub fn new(name: impl AsRef<str>, kind: KeyKind) -> Self {
        KeyField {
            name: intern(name.as_ref()),
            kind,
            normalize: Normalize::NONE,
            optional: false,
        }
    }

    /// `#[key(lowercase)]`: Unicode lowercase before hashing (text only).
    pub fn lowercase(mut self) -> Self {
        self.normalize.lowercase = true;
        self
    }

    /// `#[key(nfc)]`: Unicode NFC before hashing, after any lowercase (text only).
    pub fn nfc(mut self) -> Self {
        self.normalize.nfc = true;
        self
    }

    /// An `Option` field: absent or `null` is the key `None`.
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// The stored field name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The field's type.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// Whether absent or `null` is the key `None` ([`optional`](KeyField::optional)).
    pub fn is_optional(&self) -> bool {
        self.optional
    }
}

/// A natural key described at run time: the scheme, the identity key fields in declaration
/// order, and the timestamp field — what `#[derive(NaturalKey)]` declares on a struct, for
/// documents read as BSON. [`derive`](KeySpec::derive) gives the id and identity a stored
/// document's fields derive, exactly as the derived type would (same [`Scheme`], same key
/// values, same normalization); [`audit`](KeySpec::audit) audits a collection with it.
///
/// Names may come from configuration: they are taken as any `&str` or `String` and interned
/// (kept once per distinct name for the life of the process, as the derive's literals are), as
/// are a scheme's namespace or separator read at run time ([`Scheme::with_namespace`],
/// [`Scheme::joined_by`]).
///
/// ```
/// use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec};
/// use natural_key_runtime::Scheme;
/// let config = ("published_at".to_string(), vec!["slug".to_string(), "lang".to_string()]);
/// let mut configured = KeySpec::new(Scheme::with_namespace(""), &config.0);
/// for name in &config.1 {
///     configured = configured.key(KeyField::new(name, KeyKind::Str));
/// }
/// let spec = KeySpec::new(Scheme::Default { namespace: "" }, "published_at")
///     .key(KeyField::new("slug", KeyKind::Str))
///     .key(KeyField::new("lang", KeyKind::Str));
/// let doc = bson::rawdoc! { "slug": "hello-world", "lang": "en", "published_at": 1_700_000_000_000i64 };
/// let (id, identity) = spec.derive(&doc)?;
/// assert_eq!(id.to_string(), "01HF7YAT00EGYGDZ2RBKJ019EA");
/// assert_eq!(identity.to_string(), "743d06fc585ce400a5ca0866fb38437dc9686081cbf0db2c12010d3fd62caf82");
///
/// let missing = bson::rawdoc! { "slug": "hello-world", "published_at": 1_700_000_000_000i64 };
/// assert_eq!(spec.derive(&missing).unwrap_err().to_string(), "field `lang` is missing");
/// assert_eq!(configured, spec);
/// # Ok::<(), natural_key_runtime::spec::SpecError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    scheme: Scheme,
    keys: Vec<KeyField>,
    timestamp: &'static str,
    form: TimestampForm,
    skip_hash: Vec<&'static str>,
    /// The version field and the form it is read in (`#[natural_key(version)]`).
    version: Option<(&'static str, TimestampForm)>,
    /// The field the engine stamps when a write changes the content.
    changed_at: Option<&'static str>,
}

impl KeySpec {
    /// A spec with no identity key yet; add them with [`key`](KeySpec::key), in declaration
    /// order. `timestamp` is the `#[key(timestamp)]` field.
    pub fn new(scheme: Scheme, timestamp: impl AsRef<str>) -> Self {
        KeySpec {
            scheme,
            keys: Vec::new(),
            timestamp: intern(timestamp.as_ref()),
            form: TimestampForm::Any,
            skip_hash: Vec::new(),
            version: None,
            changed_at: None,
        }
    }

    /// Adds the next identity key field.
    pub fn key(mut self, field: KeyField) -> Self {
        self.keys.push(field);
        self
    }

    /// The identity key fields a collection of these documents may be sharded on: those whose
    /// stored value the identity determines. A text key without normalization, a boolean and
    /// an ObjectId, under the default scheme; not an integer (int32 and int64 give one key and
    /// two stored values), a UUID or bytes (two stored forms each), an optional key (absent and
    /// `null`), nor any key of the joined scheme (its separator makes values ambiguous).
    pub(crate) fn shard_key_fields(&self) -> Vec<&'static str> {
        if !matches!(self.scheme, Scheme::Default { .. }) {
            return Vec::new();
        }
        self.keys
            .iter()
            .filter(|k| !k.optional && k.normalize == Normalize::NONE)
            .filter(|k| matches!(k.kind, KeyKind::Str | KeyKind::Bool | KeyKind::ObjectId))
            .map(|k| k.name)
            .collect()
    }

    /// Reads the timestamp in this form only (default [`TimestampForm::Any`]).
    pub fn timestamp_form(mut self, form: TimestampForm) -> Self {
        self.form = form;
        self
    }

    /// A `#[natural_key(skip_hash)]` field: left out when an audit compares the content of
    /// duplicates.
    pub fn skip_hash(mut self, field: impl AsRef<str>) -> Self {
        self.skip_hash.push(intern(field.as_ref()));
        self
    }

    /// The document's version field (a `#[natural_key(version)]`), read in `form`: an integer
    /// ([`TimestampForm::Millis`] reads int32 and int64 as they are) or an instant in any form
    /// the timestamp accepts, compared in Unix milliseconds. A write whose version is lower
    /// than the stored one is [`Stale`](crate::UpsertOutcome::Stale) and writes nothing; every
    /// document must hold the field.
    ///
    /// ```
    /// use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec, TimestampForm};
    /// use natural_key_runtime::Scheme;
    /// let spec = KeySpec::new(Scheme::Default { namespace: "" }, "published_at")
    ///     .key(KeyField::new("slug", KeyKind::Str))
    ///     .version("rev", TimestampForm::Millis);
    /// let doc = bson::rawdoc! { "slug": "a", "published_at": 1_700_000_000_000i64, "rev": 7 };
    /// assert_eq!(spec.version_of(&doc)?, Some(7));
    /// assert_eq!(spec.version_field(), Some("rev"));
    /// # Ok::<(), natural_key_runtime::spec::SpecError>(())
    /// ```
    pub fn version(mut self, field: impl AsRef<str>, form: TimestampForm) -> Self {
        self.version = Some((intern(field.as_ref()), form));
        self
    }

    /// A field the engine sets to its own clock (`$currentDate`) whenever a write changes the
    /// stored content — never when a write is unchanged or stale — so that downstream jobs can
    /// read what changed since a time (`#[natural_key(changed_at = "...")]`). A document's own
    /// value of the field is not stored (an export of the collection carries it) and not
    /// hashed.
    ///
    /// ```
    /// use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec};
    /// use natural_key_runtime::Scheme;
    /// let spec = KeySpec::new(Scheme::Default { namespace: "" }, "at")
    ///     .key(KeyField::new("slug", KeyKind::Str))
    ///     .changed_at("changed_at");
    /// let a = bson::rawdoc! { "slug": "a", "at": 1i64, "changed_at": 5i64 };
    /// let b = bson::rawdoc! { "slug": "a", "at": 1i64 };
    /// assert_eq!(spec.content_hash(&a)?, spec.content_hash(&b)?);
    /// # Ok::<(), natural_key_runtime::Error>(())
    /// ```
    pub fn changed_at(mut self, field: impl AsRef<str>) -> Self {
        self.changed_at = Some(intern(field.as_ref()));
        self
    }

    /// The changed-at field, if the spec has one.
    pub fn changed_at_field(&self) -> Option<&'static str> {
        self.changed_at
    }

    /// The version field, if the spec has one.
    pub fn version_field(&self) -> Option<&'static str> {
        self.version.map(|(f, _)| f)
    }

    /// `doc`'s version as `_nk_version` stores it (`None` for a spec without a version field).
    pub fn version_of(&self, doc: &RawDocument) -> Result<Option<i64>, SpecError> {
        let Some((field, form)) = self.version else {
            return Ok(None);
        };
        let value = instant(doc, field, form, "an integer (int32 or int64)")?;
        Ok(Some(crate::key::check_version(field, value)?))
    }

    /// The identity key fields, in order.
    pub fn keys(&self) -> &[KeyField] {
        &self.keys
    }

    /// The timestamp field.
    pub fn timestamp(&self) -> &'static str {
        self.timestamp
    }

    /// The form the timestamp is read in ([`timestamp_form`](KeySpec::timestamp_form)).
    pub fn form(&self) -> TimestampForm {
        self.form
    }

    /// The id and identity (`_nk_identity`, as hex through `Display`) that `doc`'s fields
    /// derive. A spec without identity keys derives nothing ([`SpecError::NoIdentityKey`]),
    /// as the derive refuses such a type.
    pub fn derive(&self, doc: &RawDocument) -> Result<(Ulid, ContentHash), SpecError> {
        if self.keys.is_empty() {
            return Err(SpecError::NoIdentityKey);
        }
        let mut sink = KeySink::new(self.scheme, false);
        for k in &self.keys {
            let v = key_value(k, doc)?;
            sink.part(k.name, &v, k.normalize)?;
        }
        let identity = sink.finish();
        let ms = check_timestamp(self.timestamp, self.timestamp_ms(doc)?)?;
        Ok((ulid_from(ms, &identity), ContentHash(identity)))
    }

    fn timestamp_ms(&self, doc: &RawDocument) -> Result<i128, SpecError> {
        instant(doc, self.timestamp, self.form, "Unix ms (int32 or int64)")
    }

    /// The content hash natural-key stores for `doc` as a document without a Rust type
    /// (docs/id-scheme.md, "A document without a Rust type"): its fields in stored order but
    /// `_id`, natural-key's own and the spec's skip_hash fields. Where the values' types agree
    /// it is the hash a `#[derive(NaturalKey)]` type with these fields, in this order, stores.
    ///
    /// ```
    /// use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec};
    /// use natural_key_runtime::Scheme;
    /// let spec = KeySpec::new(Scheme::Default { namespace: "" }, "published_at")
    ///     .key(KeyField::new("slug", KeyKind::Str));
    /// let a = bson::rawdoc! { "slug": "hello", "published_at": 1_700_000_000_000i64, "body": "Hi" };
    /// let b = bson::rawdoc! { "slug": "hello", "published_at": 1_700_000_000_000i64, "body": "Hi!" };
    /// assert_ne!(spec.content_hash(&a)?, spec.content_hash(&b)?);
    /// # Ok::<(), natural_key_runtime::Error>(())
    /// ```
    pub fn content_hash(&self, doc: &RawDocument) -> Result<ContentHash, Error> {
        self.hash(doc, false)
    }

    /// prefix (what a v2 type whose stored fields these are writes, accepted as equal).
    pub(crate) fn hash(&self, doc: &RawDocument, v2: bool) -> Result<ContentHash, Error> {
        let skip = |name: &str| {
            name == "_id"
                || name.starts_with(RESERVED_PREFIX)
                || self.skip_hash.contains(&name)
                || Some(name) == self.changed_at
        };
        crate::content::untyped_hash(doc, skip, v2).map_err(|message| Error::Serialize {
            type_name: "a BSON document",
            message,
        })
    }
}

/// The instant (or, for a version, the integer) `field` holds in `form`; `millis` names what
/// [`TimestampForm::Millis`] reads.
fn instant(
    doc: &RawDocument,
    field: &'static str,
    form: TimestampForm,
    millis: &'static str,
) -> Result<i128, SpecError> {
    let value = get(doc, field)?.ok_or(SpecError::Missing { field })?;
    let wrong = |expected| SpecError::WrongType {
        field,
        expected,
        found: type_name(&value),
    };
    let allows = |f: TimestampForm| form == TimestampForm::Any || form == f;
    match value {
        RawBsonRef::Int32(ms) if allows(TimestampForm::Millis) => Ok(ms.into()),
        RawBsonRef::Int64(ms) if allows(TimestampForm::Millis) => Ok(ms.into()),
        RawBsonRef::DateTime(d) if allows(TimestampForm::Date) => Ok(d.timestamp_millis().into()),
        RawBsonRef::String(s) if allows(TimestampForm::Rfc3339) => {
            crate::rfc3339::rfc3339_millis(s).map_err(|e| SpecError::BadTimestamp {
                field,
                message: e.to_string(),
            })
        }
        RawBsonRef::Document(d) if allows(TimestampForm::SystemTime) => {
            system_time(d).ok_or_else(|| SpecError::BadTimestamp {
                field,
                message: "a document that is not {secs_since_epoch, nanos_since_epoch}".into(),
            })
        }
        _ => Err(wrong(match form {
            TimestampForm::Any => {
                "Unix ms (int), a date, RFC 3339 text or {secs_since_epoch, nanos_since_epoch}"
            }
            TimestampForm::Millis => millis,
            TimestampForm::Date => "a date",
            TimestampForm::Rfc3339 => "RFC 3339 text",
            TimestampForm::SystemTime => "{secs_since_epoch, nanos_since_epoch}",
        })),
    }
}

fn get<'a>(doc: &'a RawDocument, field: &'static str) -> Result<Option<RawBsonRef<'a>>, SpecError> {
    doc.get(field).map_err(|_| SpecError::WrongType {
        field,
        expected: "a readable BSON value",
        found: "malformed BSON",
    })
}

fn key_value<'a>(k: &KeyField, doc: &'a RawDocument) -> Result<KeyValue<'a>, SpecError> {
    let field = k.name;
    let value = match get(doc, field)? {
        None | Some(RawBsonRef::Null) if k.optional => return Ok(KeyValue::None),
        None | Some(RawBsonRef::Null) => return Err(SpecError::Missing { field }),
        Some(v) => v,
    };
    let wrong = |expected| SpecError::WrongType {
        field,
        expected,
        found: type_name(&value),
    };
    Ok(match (k.kind, value) {
        (KeyKind::Str, RawBsonRef::String(s)) => KeyValue::Str(s.into()),
        (KeyKind::Str, _) => return Err(wrong("a string")),
        (KeyKind::Int, RawBsonRef::Int32(i)) => KeyValue::Int(i.into()),
        (KeyKind::Int, RawBsonRef::Int64(i)) => KeyValue::Int(i.into()),
        (KeyKind::Int, _) => return Err(wrong("an int32 or int64")),
        (KeyKind::Bool, RawBsonRef::Boolean(b)) => KeyValue::Bool(b),
        (KeyKind::Bool, _) => return Err(wrong("a boolean")),
        (KeyKind::Bytes, RawBsonRef::Binary(b)) if b.subtype == BinarySubtype::Generic => {
            KeyValue::Bytes(b.bytes.into())
        }
        (KeyKind::Bytes, RawBsonRef::Array(a)) => {
            let mut bytes = Vec::new();
            for v in a {
                let byte = match v {
                    Ok(RawBsonRef::Int32(i)) => u8::try_from(i).ok(),
                    Ok(RawBsonRef::Int64(i)) => u8::try_from(i).ok(),
                    _ => None,
                };
                bytes.push(byte.ok_or(SpecError::WrongType {
                    field,
                    expected: "binary or an array of integers 0..=255",
                    found: "an array holding something else",
                })?);
            }
            KeyValue::Bytes(bytes.into())
        }
        (KeyKind::Bytes, _) => return Err(wrong("binary or an array of integers 0..=255")),
        (KeyKind::Uuid, RawBsonRef::Binary(b))
            if matches!(b.subtype, BinarySubtype::Uuid | BinarySubtype::Generic) =>
        {
            KeyValue::Uuid(b.bytes.try_into().map_err(|_| SpecError::WrongType {
                field,
                expected: "a UUID of 16 bytes",
                found: "binary of another length",
            })?)
        }
        (KeyKind::Uuid, RawBsonRef::String(s)) => match uuid::Uuid::try_parse(s) {
            Ok(u) if s.len() == 36 => KeyValue::Uuid(*u.as_bytes()),
            _ => return Err(wrong("a UUID (binary, or hyphenated text)")),
        },
        (KeyKind::Uuid, _) => return Err(wrong("a UUID (binary subtype 4, or hyphenated text)")),
        (KeyKind::ObjectId, RawBsonRef::ObjectId(o)) => KeyValue::ObjectId(o.bytes()),
        (KeyKind::ObjectId, _) => return Err(wrong("an ObjectId")),
    })
}

/// A `SystemTime` as serde stores it, floored to the millisecond.
fn system_time(d: &RawDocument) -> Option<i128> {
    let int = |name| match d.get(name).ok()?? {
        RawBsonRef::Int32(i) => Some(i128::from(i)),
        RawBsonRef::Int64(i) => Some(i128::from(i)),
        _ => None,
    };
    let (secs, nanos) = (int("secs_since_epoch")?, int("nanos_since_epoch")?);
    if d.into_iter().count() != 2 || secs < 0 || !(0..1_000_000_000).contains(&nanos) {
        return None;
    }
    Some(secs * 1000 + nanos / 1_000_000)
}

fn type_name(v: &RawBsonRef<'_>) -> &'static str {
    match v {
        RawBsonRef::Double(_) => "a double",
        RawBsonRef::String(_) => "a string",
        RawBsonRef::Array(_) => "an array",
        RawBsonRef::Document(_) => "a document",
        RawBsonRef::Boolean(_) => "a boolean",
        RawBsonRef::Null => "null",
        RawBsonRef::Int32(_) => "int32",
        RawBsonRef::Int64(_) => "int64",
        RawBsonRef::DateTime(_) => "a date",
        RawBsonRef::ObjectId(_) => "an ObjectId",
        RawBsonRef::Binary(b) if b.subtype == BinarySubtype::UuidOld => "a legacy UUID (subtype 3)",
        RawBsonRef::Binary(_) => "binary",
        RawBsonRef::Decimal128(_) => "a decimal128",
        RawBsonRef::Timestamp(_) => "a BSON timestamp",
        _ => "another BSON type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys a collection may be sharded on: those one stored value per identity.
    #[test]
    fn a_spec_may_be_sharded_on_the_keys_whose_stored_value_the_identity_determines() {
        let keys = |scheme| {
            KeySpec::new(scheme, "at")
                .key(KeyField::new("tenant", KeyKind::Str))
                .key(KeyField::new("name", KeyKind::Str).lowercase())
                .key(KeyField::new("region", KeyKind::Str).optional())
                .key(KeyField::new("number", KeyKind::Int))
                .key(KeyField::new("live", KeyKind::Bool))
                .key(KeyField::new("owner", KeyKind::ObjectId))
                .key(KeyField::new("ref", KeyKind::Uuid))
                .shard_key_fields()
        };
        assert_eq!(
            keys(Scheme::Default { namespace: "" }),
            ["tenant", "live", "owner"]
        );
        assert!(keys(Scheme::Joined { separator: ":" }).is_empty());
    }

    #[test]
    fn rfc3339_agrees_with_bson_on_instants_after_the_epoch() {
        for text in [
            "1970-01-01T00:00:00Z",
            "2000-02-29T12:00:00.5Z",
            "2023-11-14T22:13:20.123456789Z",
            "2024-03-01T09:30:00.123+05:30",
            "2024-03-01t09:30:00.123-08:00",
            "2100-12-31T23:59:59.999Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            let ours = crate::rfc3339::rfc3339_millis(text).unwrap();
            let theirs = bson::DateTime::parse_rfc3339_str(text).unwrap();
            assert_eq!(ours, i128::from(theirs.timestamp_millis()), "{text}");
        }
    }

    #[test]
    fn rfc3339_refuses_what_is_not_one() {
        for text in [
            "",
            "2024-03-01",
            "2024-03-01T09:30:00",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-03-01T24:00:00Z",
            "2024-03-01T23:59:60Z",
            "2024-03-01T09:30:00.Z",
            "2024-03-01T09:30:00+0100",
            "2024-03-01T09:30:00Zjunk",
            "+024-03-01T09:30:00Z",
        ] {
            assert!(crate::rfc3339::rfc3339_millis(text).is_err(), "{text}");
        }
    }

    #[test]
    fn system_time_is_floored_and_strict() {
        let d = bson::rawdoc! { "secs_since_epoch": 1_700_000_000i64, "nanos_since_epoch": 123_999_999 };
        assert_eq!(system_time(&d), Some(1_700_000_000_123));
        let d = bson::rawdoc! { "secs_since_epoch": 1, "nanos_since_epoch": 1_000_000_000 };
        assert_eq!(system_time(&d), None);
        let d = bson::rawdoc! { "secs_since_epoch": 1 };
        assert_eq!(system_time(&d), None);
    }
}
