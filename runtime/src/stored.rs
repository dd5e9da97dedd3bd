//! The stored form: each document's BSON, id, identity and hashes, built and checked once
//! before anything is sent.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bson::{doc, Bson, Document, RawBson, RawDocument, RawDocumentBuf};
use ulid::Ulid;

use crate::content::{canonical_hash, ContentHash};
use crate::error::{Error, FieldNameProblem};
use crate::names::{
    DELETED_FIELD, HASH_FIELD, IDEMPOTENCY_FIELD, IDENTITY_FIELD, RESERVED_PREFIX, VERSION_FIELD,
    WRITE_FIELD,
};
use crate::op::command::delete_one;
use crate::op::Target;
use crate::traits::{NaturalKey, RandomId};

/// BSON bytes `_id` (a 26-character ULID string) and `_nk_write` add to a body.
const ID_BYTES: usize = 1 + 4 + 4 + 27;
const TOKEN_BYTES: usize = 1 + 10 + 4 + 27;

/// Everything derived from a [`NaturalKey`] document before touching the database.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) id: Ulid,
    pub(crate) id_text: String,
    pub(crate) identity: String,
    pub(crate) hash: String,
    /// The stored fields but `_id`: the document, its identity and its hash — built once;
    /// commands copy it without a `Document` tree in between.
    pub(crate) body: RawDocumentBuf,
    /// For a type with `#[natural_key(relative)]` fields, the body an update writes: without
    /// them, which relative updates own once the document exists (an insert writes `body`).
    pub(crate) update_body: Option<RawDocumentBuf>,
    /// Those fields' stored names.
    pub(crate) relative: &'static [&'static str],
    /// The version (`_nk_version`, in `body`) of a versioned document.
    pub(crate) version: Option<i64>,
    /// A tombstone: what a versioned delete stores in place of the document (`body` holds the
    /// identity, version and time of deletion; `hash` is empty).
    pub(crate) tombstone: bool,
}

impl Prepared {
    /// What an update of the stored document writes.
    pub(crate) fn update_body(&self) -> &RawDocumentBuf {
        self.update_body.as_ref().unwrap_or(&self.body)
    }
}

impl Prepared {
    pub(crate) fn of<T: NaturalKey>(doc: &T, target: &Target) -> Result<Self, Error> {
        // `id()` and `identity()` in one pass over the key fields.
        let (id, digest) = crate::traits::derive_key(doc)?;
        let identity = crate::content::ContentHash(digest).to_string();
        let hash = doc.content_hash()?.to_string();
        let version = doc.__version()?;
        let mut body = bson::to_raw_document_buf(doc).map_err(Error::serialize::<T>)?;
        check_names(&body, OwnId::Derived).map_err(|e| e.into_error::<T>(target, id))?;
        body.append(IDENTITY_FIELD, identity.as_str());
        body.append(HASH_FIELD, hash.as_str());
        if let Some(v) = version {
            body.append(VERSION_FIELD, v);
        }
        check_size(target, id, body.as_bytes().len() + ID_BYTES + TOKEN_BYTES)?;
        let relative = T::__relative_fields();
        let update_body = (!relative.is_empty())
            .then(|| {
                let mut b = RawDocumentBuf::new();
                append_fields(&mut b, &body, relative).map(|()| b)
            })
            .transpose()
            .map_err(Error::serialize::<T>)?;
        Ok(Prepared {
            id,
            id_text: id.to_string(),
            identity,
            hash,
            body,
            update_body,
            relative,
            version,
            tombstone: false,
        })
    }
}

impl Prepared {
    /// A document without a Rust type (a [`KeySpec`](crate::spec::KeySpec)'s), from what its
    /// spec derived: [`Prepared::of`]'s checks, by the same rules. An `_id` in `doc` is
    /// accepted only when it is the derived id as text (a re-import of an export of the
    /// collection) and is not copied; any other `_id` is refused like a typed document's. The
    /// `engine_owned` field (the spec's changed-at field) is not copied either.
    pub(crate) fn of_untyped(
        id: Ulid,
        identity: ContentHash,
        hash: ContentHash,
        version: Option<i64>,
        doc: &RawDocument,
        engine_owned: Option<&str>,
        target: &Target,
    ) -> Result<Self, Error> {
        let id_text = id.to_string();
        let unreadable = |e: bson::raw::Error| Error::Serialize {
            type_name: "a BSON document",
            message: e.to_string(),
        };
        let mut body = RawDocumentBuf::new();
        for element in doc {
            let (name, value) = element.map_err(unreadable)?;
            if name == "_id" && value.as_str() == Some(id_text.as_str()) {
                continue;
            }
            // The changed-at field is the engine's to set (an export carries it): not copied.
            if Some(name) == engine_owned {
                continue;
            }
            body.append_ref(name, value);
        }
        check_names(&body, OwnId::Derived).map_err(|e| e.into_error::<RawDocument>(target, id))?;
        let identity = identity.to_string();
        let hash = hash.to_string();
        body.append(IDENTITY_FIELD, identity.as_str());
        body.append(HASH_FIELD, hash.as_str());
        if let Some(v) = version {
            body.append(VERSION_FIELD, v);
        }
        check_size(target, id, body.as_bytes().len() + ID_BYTES + TOKEN_BYTES)?;
        Ok(Prepared {
            id,
            id_text,
            identity,
            hash,
            body,
            update_body: None,
            relative: &[],
            version,
            tombstone: false,
        })
    }

    /// The tombstone a delete at `version` leaves of the document `id`/`identity`: no body,
    /// no content hash; the time of deletion by the client's clock, for pruning by age (an
    /// insert cannot take the engine's).
    pub(crate) fn tombstone(
        id: Ulid,
        identity: ContentHash,
        version: i64,
        shard: Option<&(&'static str, RawBson)>,
    ) -> Self {
        let identity = identity.to_string();
        let mut body = RawDocumentBuf::new();
        // Sharded on a key field, the tombstone stays on the document's shard.
        if let Some((key, value)) = shard {
            body.append(*key, value.clone());
        }
        body.append(IDENTITY_FIELD, identity.as_str());
        body.append(VERSION_FIELD, version);
        body.append(DELETED_FIELD, bson::DateTime::now());
        Prepared {
            id,
            id_text: id.to_string(),
            identity,
            hash: String::new(),
            body,
            update_body: None,
            relative: &[],
            version: Some(version),
            tombstone: true,
        }
    }
}

/// Whether a stored `_nk_hash` says the document holds the content whose hash is `hash`: it is
/// `hash`, or — for a type hashed v2 — its v1 hash `hash_v1`, which a writer before the
/// upgrade stored (docs/id-scheme.md, "Upgrading from v1"). Accepting it is what lets an
/// upgrade rewrite nothing; the v1 hash stays until the document's content changes.
/// `hash_v1` is asked only when `stored` is not `hash`, so a scan computes it for the
/// documents still holding a v1 hash alone.
pub(crate) fn same_content<S: AsRef<str>>(
    stored: &str,
    hash: &str,
    hash_v1: impl FnOnce() -> Option<S>,
) -> bool {
    stored == hash || hash_v1().is_some_and(|v1| v1.as_ref() == stored)
}

/// Everything derived from a [`RandomId`] event before touching the database.
#[derive(Debug)]
pub(crate) struct PreparedEvent {
    pub(crate) id: Ulid,
    pub(crate) idempotency_key: Option<String>,
    /// This write's token, stored in `_nk_write`: a stored event carrying it was inserted by
    /// this call (an attempt whose reply was lost), not by another writer of the same event.
    pub(crate) token: String,
    /// The document to insert: `_id` (the event's ULID as text), the event's fields, its
    /// idempotency key and the token.
    pub(crate) body: RawDocumentBuf,
    /// The stored names of its fields that are not payload ([`RandomId::__payload_skip`]).
    pub(crate) skip: &'static [&'static str],
}

impl PreparedEvent {
    pub(crate) fn of<T: RandomId>(doc: &T, target: &Target) -> Result<Self, Error> {
        let id = doc.id();
        let idempotency_key = doc.__idempotency_key()?;
        // `_id` first, then the event's fields but its own `_id` (the `#[id]` field): one copy
        // of the serialized event.
        let raw = bson::to_raw_document_buf(doc).map_err(Error::serialize::<T>)?;
        let id_text = id.to_string();
        check_names(&raw, OwnId::Carried(&id_text)).map_err(|e| e.into_error::<T>(target, id))?;
        let mut body = RawDocumentBuf::new();
        body.append("_id", id_text);
        append_fields(&mut body, &raw, &["_id"]).map_err(Error::serialize::<T>)?;
        if let Some(k) = &idempotency_key {
            body.append(IDEMPOTENCY_FIELD, k.as_str());
        }
        let token = Ulid::new().to_string();
        body.append(WRITE_FIELD, token.as_str());
        check_size(target, id, body.as_bytes().len())?;
        Ok(PreparedEvent {
            id,
            idempotency_key,
            token,
            body,
            skip: T::__payload_skip(),
        })
    }

    /// How `stored`, an event holding this event's `_id` or idempotency key (`stored_key`, as
    /// stored), differs from it: the names of the payload fields whose values differ or that
    /// only one of the two holds, in name order, and [`IDEMPOTENCY_FIELD`] when both carry a
    /// key and the keys differ (the same `_id` reused for another request). Empty: the same
    /// event. An `Err` is a stored document that cannot be read, described.
    pub(crate) fn differences(
        &self,
        stored: &RawDocument,
        stored_key: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let ours = payload(&self.body, self.skip).map_err(|e| format!("this event: {e}"))?;
        let theirs = payload(stored, self.skip)?;
        let mut names: BTreeSet<&str> = ours.keys().chain(theirs.keys()).copied().collect();
        names.retain(|name| ours.get(name) != theirs.get(name));
        if let (Some(ours), Some(theirs)) = (&self.idempotency_key, stored_key) {
            if ours != theirs {
                names.insert(IDEMPOTENCY_FIELD);
            }
        }
        Ok(names.into_iter().map(str::to_string).collect())
    }
}

/// An event's payload, by stored name: every top-level field but `_id`, natural-key's own
/// (`_nk_*`) and `skip`, each with the canonical hash of its value. The content hash's rules
/// decide what is the same value (an `int32` and an `int64` of one number, `-0.0` and `0.0`, a
/// nested document's fields in any order); what is compared is the stored BSON, the same on
/// both sides, so an event stored by any version of natural-key — or by other code — compares.
fn payload<'a>(
    doc: &'a RawDocument,
    skip: &[&str],
) -> Result<BTreeMap<&'a str, ContentHash>, String> {
    let mut fields = BTreeMap::new();
    for element in doc {
        let (name, value) = element.map_err(|e| e.to_string())?;
        if name == "_id" || name.starts_with(RESERVED_PREFIX) || skip.contains(&name) {
            continue;
        }
        let hash = canonical_hash(&value).map_err(|e| format!("field {name:?}: {e}"))?;
        fields.insert(name, hash);
    }
    Ok(fields)
}

fn check_size(target: &Target, id: Ulid, bytes: usize) -> Result<(), Error> {
    let limit = target.deployment.limits().max_document_bytes;
    if bytes > limit {
        return Err(Error::DocumentTooLarge {
            collection: target.namespace.clone(),
            id,
            bytes,
            limit,
        });
    }
    Ok(())
}

/// Whose `_id` a serialized document may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnId<'a> {
    /// A [`NaturalKey`] document: the library derives `_id`, so the document may not set it.
    Derived,
    /// A [`RandomId`] event: `_id` is its `#[id]` field, this text; any other `_id` would be
    /// replaced by it.
    Carried(&'a str),
}

/// A name [`check_names`] refused, or the document it could not read.
#[derive(Debug)]
pub(crate) enum NameError {
    Name(String, FieldNameProblem),
    Bson(bson::raw::Error),
}

impl NameError {
    fn into_error<T: ?Sized>(self, target: &Target, id: Ulid) -> Error {
        match self {
            NameError::Name(field, problem) => Error::InvalidFieldName {
                collection: target.namespace.clone(),
                id,
                field,
                problem,
            },
            NameError::Bson(e) => Error::serialize::<T>(e),
        }
    }
}

/// The one rule for the top-level names of a document natural-key writes (docs/crate.md,
/// "Field names are data"): each becomes a field of its own, so none may be a path (`.`), an
/// operator (`$`), empty, one of the library's names or a repeat. Names inside values are
/// never interpreted and are not checked.
pub(crate) fn check_names(doc: &RawDocumentBuf, own_id: OwnId<'_>) -> Result<(), NameError> {
    // A document's names are usually few: they are gathered on the stack, and only a document
    // with more than `FEW` of them allocates (once per document written, so it shows).
    const FEW: usize = 32;
    let mut few = [""; FEW];
    let mut many = Vec::new();
    let mut n = 0;
    // Elements, not values: a value is parsed (its text validated) only where it matters.
    for element in doc.iter_elements() {
        let element = element.map_err(NameError::Bson)?;
        let name = element.key();
        let id_is_ours = match own_id {
            OwnId::Derived => true,
            OwnId::Carried(id) => {
                name != "_id" || element.value().map_err(NameError::Bson)?.as_str() != Some(id)
            }
        };
        if let Some(problem) = name_problem(name, id_is_ours) {
            return Err(NameError::Name(name.to_string(), problem));
        }
        if n < FEW {
            few[n] = name;
        } else {
            if many.is_empty() {
                many.extend_from_slice(&few);
            }
            many.push(name);
        }
        n += 1;
    }
    let names = if n <= FEW {
        &mut few[..n]
    } else {
        &mut many[..]
    };
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(NameError::Name(
            w[0].to_string(),
            FieldNameProblem::Repeated,
        )),
        None => Ok(()),
    }
}

/// What is wrong with one top-level name, if anything (`id_is_ours`: natural-key writes this
/// document's `_id`, so the document cannot).
pub(crate) fn name_problem(name: &str, id_is_ours: bool) -> Option<FieldNameProblem> {
    if name.is_empty() {
        Some(FieldNameProblem::Empty)
    } else if name.starts_with('$') {
        Some(FieldNameProblem::DollarPrefixed)
    } else if name.contains('.') {
        Some(FieldNameProblem::Dotted)
    } else if name.starts_with(RESERVED_PREFIX) || (name == "_id" && id_is_ours) {
        Some(FieldNameProblem::Reserved)
    } else {
        None
    }
}

/// Appends the fields of `src` to `dst`, but those named in `skip`: a byte copy per field, no
/// `Document`.
pub(crate) fn append_fields(
    dst: &mut RawDocumentBuf,
    src: &RawDocumentBuf,
    skip: &[&str],
) -> Result<(), bson::raw::Error> {
    for element in src {
        let (key, value) = element?;
        if !skip.contains(&key) {
            dst.append_ref(key, value);
        }
    }
    Ok(())
}

/// The stored `_id` as text, for messages (ids are stored as 26-character ULID strings).
pub(crate) fn id_text(id: &bson::Bson) -> String {
    match id {
        bson::Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The names a type's `Deserialize` implementation expects, as stored (serde renames applied):
/// the fields an upsert in Merge mode unsets when the serialized document lacks them (an
/// `Option` skipped when `None`, say). `None` for a type that does not deserialize as a plain
/// struct (`#[serde(flatten)]`, a hand-written impl): its absent fields cannot be known.
pub(crate) fn struct_fields<T: serde::de::DeserializeOwned>() -> Option<&'static [&'static str]> {
    use serde::de::{self, Visitor};

    struct Probe(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> de::Deserializer<'de> for &mut Probe {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut probe = Probe(None);
    let _ = T::deserialize(&mut probe);
    probe.0
}

/// A delete by key, derived before anything is sent: the id, the identity, the statement.
#[derive(Debug)]
pub(crate) struct PreparedDelete {
    pub(crate) id: Ulid,
    pub(crate) id_text: String,
    pub(crate) identity: String,
    /// `{q: {_id, _nk_identity}, limit: 1}`: the identity is the shard key natural-key asks
    /// for, so on a sharded collection the statement goes to one shard.
    pub(crate) statement: RawDocumentBuf,
    /// A versioned delete's tombstone, written through the guarded upsert in place of the
    /// statement.
    pub(crate) tombstone: Option<Prepared>,
}

impl PreparedDelete {
    /// `version`: the deleted document's version, for a versioned type. `shard`: the stored
    /// value of the key field the collection is sharded on, if it is (a tenant id), which the
    /// statement and the tombstone carry.
    pub(crate) fn new(
        id: Ulid,
        identity: ContentHash,
        version: Option<i64>,
        shard: Option<(&'static str, RawBson)>,
    ) -> Result<Self, Error> {
        let id_text = id.to_string();
        let tombstone = version.map(|v| Prepared::tombstone(id, identity, v, shard.as_ref()));
        let identity = identity.to_string();
        let mut q = doc! { "_id": &id_text, IDENTITY_FIELD: &identity };
        if let Some((key, value)) = shard {
            q.insert(
                key,
                Bson::try_from(value).map_err(Error::serialize::<Document>)?,
            );
        }
        let statement = delete_one(q)?;
        Ok(PreparedDelete {
            id,
            id_text,
            identity,
            statement,
            tombstone,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// The payload comparison: the content hash's equalities hold, the names that are not
    /// payload are ignored, anything else that differs is named.
    #[test]
    fn payloads_compare_under_the_content_hash_rules() {
        let ours = PreparedEvent {
            id: Ulid::nil(),
            idempotency_key: Some("k".into()),
            token: "mine".into(),
            body: rawdoc! {
                "_id": "A", "id": "A", "amount": 1i64, "ratio": -0.0f64, "nan": f64::NAN,
                "lines": { "a": 1i64, "b": [1i64, 2i64] }, "received_at": 1i64,
                "_nk_idempotency": "k", "_nk_write": "mine",
            },
            skip: &["id", "received_at"],
        };
        let same = rawdoc! {
            "lines": { "b": [1i32, 2i64], "a": 1i32 }, "nan": -f64::NAN, "ratio": 0.0f64,
            "amount": 1i32, "_id": "B", "id": "B", "received_at": 2i64, "_nk_other": 1i32,
        };
        assert_eq!(ours.differences(&same, Some("k")), Ok(vec![]));
        assert_eq!(ours.differences(&same, None), Ok(vec![]), "no stored key");
        assert_eq!(
            ours.differences(&same, Some("other")),
            Ok(vec![IDEMPOTENCY_FIELD.to_string()])
        );
        let mut other = rawdoc! {
            "lines": { "a": 1i32, "b": [2i64, 1i64] }, "nan": f64::NAN, "ratio": 0.0f64,
            "amount": 1.0f64, "extra": bson::RawBson::Null,
        };
        assert_eq!(
            ours.differences(&other, Some("k")),
            Ok(vec!["amount".into(), "extra".into(), "lines".into()]),
            "a double is not an integer, sequences keep their order, a null is a value"
        );
        other.append("received_at", "later");
        assert_eq!(ours.differences(&other, Some("k")).map(|d| d.len()), Ok(3));
    }

    /// A repeated name is found wherever its twin stands, below, at and beyond the names
    /// gathered on the stack; distinct names pass.
    #[test]
    fn a_repeated_name_is_found_among_any_number_of_names() {
        for n in [1, 2, 31, 32, 33, 40, 70] {
            let mut doc = RawDocumentBuf::new();
            for i in 0..n {
                doc.append(format!("f{i}"), i);
            }
            assert!(
                check_names(&doc, OwnId::Derived).is_ok(),
                "{n} distinct names"
            );
            for twin in 0..n {
                let mut repeated = doc.clone();
                repeated.append(format!("f{twin}"), 0);
                match check_names(&repeated, OwnId::Derived) {
                    Err(NameError::Name(name, FieldNameProblem::Repeated)) => {
                        assert_eq!(name, format!("f{twin}"), "{n} names")
                    }
                    other => panic!("{n} names, f{twin} twice: {other:?}"),
                }
            }
        }
    }
}
