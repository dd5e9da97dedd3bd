//! natural-key's own fields in a line, as an export of a natural-key collection carries them:
//! `_id` and the `_nk_` fields. The derived ones are recomputed (`_nk_version` too, from the
//! `--version-field` it was read from), an `_id` of another scheme is refused or kept under a
//! field of its own (`--keep-id`), and nothing is dropped that the write would not give back.

use natural_key_runtime::bson::{Bson, RawBsonRef, RawDocumentBuf};
use natural_key_runtime::spec::KeySpec;
use natural_key_runtime::{HASH_FIELD, IDENTITY_FIELD, RESERVED_PREFIX, WRITE_FIELD};

/// The fields the write derives from the document again: dropping them loses nothing.
const RECOMPUTED: [&str; 3] = [IDENTITY_FIELD, HASH_FIELD, WRITE_FIELD];
/// A versioned document's stored version, which the write derives from the spec's version
/// field (natural_key_runtime's `VERSION_FIELD`, not exported by name).
const VERSION: &str = "_nk_version";
/// What marks a tombstone (natural_key_runtime's `DELETED_FIELD`): a deleted document.
const DELETED: &str = "_nk_deleted";

/// Why a line was refused: its reject's kind, and the reason.
pub(crate) type Refusal = (&'static str, String);

/// What to do with a line's `_id` when it is not the derived one.
pub(crate) struct OwnFields {
    /// `--keep-id FIELD`.
    pub(crate) keep_id: Option<String>,
}

impl OwnFields {
    /// `doc` without the fields the write recomputes, and its `_id` dropped where it is the
    /// id its key derives (or, with `--keep-id`, moved to that field in its place where it is
    /// not); the document unchanged, uncopied, when it has none of them.
    pub(crate) fn apply(
        &self,
        doc: RawDocumentBuf,
        spec: &KeySpec,
    ) -> Result<RawDocumentBuf, Refusal> {
        let unreadable = |e: natural_key_runtime::bson::raw::Error| ("input", e.to_string());
        let mut own = false;
        for element in &doc {
            let (name, _) = element.map_err(unreadable)?;
            own |= name == "_id" || name.starts_with(RESERVED_PREFIX);
        }
        if !own {
            return Ok(doc);
        }
        // A line whose key gives no id keeps its `_id`: the write refuses it for its key.
        let derived = spec.derive(&doc).ok().map(|(id, _)| id.to_string());
        let mut out = RawDocumentBuf::new();
        for element in &doc {
            let (name, value) = element.map_err(unreadable)?;
            if RECOMPUTED.contains(&name) || (name == VERSION && spec.version_field().is_some()) {
                continue;
            }
            if name.starts_with(RESERVED_PREFIX) {
                return Err(not_recomputed(name));
            }
            if name != "_id" || derived.is_none() {
                out.append_ref(name, value);
                continue;
            }
            if value.as_str() == derived.as_deref() {
                continue;
            }
            let derived = derived.as_deref().unwrap_or_default();
            let field = self
                .keep_id
                .as_deref()
                .ok_or_else(|| foreign(value, derived))?;
            if doc.get(field).ok().flatten().is_some() {
                return Err((
                    "foreign_id",
                    format!(
                        "the `_id` is not the derived one ({derived}), and --keep-id `{field}` \
                         cannot keep it: the line has a field `{field}` already"
                    ),
                ));
            }
            out.append_ref(field, value);
        }
        Ok(out)
    }
}

fn not_recomputed(name: &str) -> Refusal {
    let reason = match name {
        VERSION => format!(
            "`{VERSION}` is the stored version of a versioned document: give --version-field \
             (the field it is read from) to recompute it, or remove it from the line to store \
             the document without a version"
        ),
        DELETED => format!(
            "the line is a tombstone (`{DELETED}`: what a versioned delete leaves of a \
             document), not a document: an ingest writes none; leave it out of the input"
        ),
        _ => format!(
            "`{name}` is natural-key's own field, which an ingest cannot recompute (it \
             recomputes {}, {}, {} and, with --version-field, {VERSION}): remove it from the \
             line to store the document without it",
            IDENTITY_FIELD, HASH_FIELD, WRITE_FIELD
        ),
    };
    ("invalid_field_name", reason)
}

fn foreign(id: RawBsonRef<'_>, derived: &str) -> Refusal {
    let shown = Bson::try_from(id.to_raw_bson())
        .map(|b| b.into_relaxed_extjson().to_string())
        .unwrap_or_else(|_| "(unreadable)".into());
    (
        "foreign_id",
        format!(
            "the `_id` {shown} is not the id the line's key derives ({derived}): the document \
             is stored under the derived id; keep the other under a field of its own with \
             --keep-id FIELD, or remove it from the line"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use natural_key_runtime::bson::{oid::ObjectId, rawdoc};
    use natural_key_runtime::spec::{KeyField, KeyKind, TimestampForm};
    use natural_key_runtime::Scheme;

    fn spec() -> KeySpec {
        KeySpec::new(Scheme::Default { namespace: "" }, "at").key(KeyField::new("k", KeyKind::Str))
    }

    fn names(d: &RawDocumentBuf) -> Vec<String> {
        d.iter().map(|e| e.unwrap().0.to_string()).collect()
    }

    #[test]
    fn the_derived_id_and_the_recomputed_fields_go_and_the_rest_stays_in_order() {
        let plain = rawdoc! { "k": "a", "at": 1i64, "body": "x" };
        let id = spec().derive(&plain).unwrap().0.to_string();
        let keep = OwnFields { keep_id: None };
        let exported = rawdoc! {
            "_id": id.as_str(), "k": "a", "at": 1i64, "body": "x",
            "_nk_identity": "i", "_nk_hash": "h", "_nk_write": "w",
        };
        assert_eq!(keep.apply(exported, &spec()).unwrap(), plain);
        assert_eq!(keep.apply(plain.clone(), &spec()).unwrap(), plain);
    }

    #[test]
    fn an_exported_version_is_recomputed_with_a_version_field_and_refused_without_one() {
        let versioned = spec().version("rev", TimestampForm::Millis);
        let plain = rawdoc! { "k": "a", "at": 1i64, "rev": 3 };
        let exported = rawdoc! { "k": "a", "at": 1i64, "rev": 3, "_nk_version": 3i64 };
        let keep = OwnFields { keep_id: None };
        assert_eq!(keep.apply(exported.clone(), &versioned).unwrap(), plain);
        let (kind, reason) = keep.apply(exported, &spec()).unwrap_err();
        assert_eq!(kind, "invalid_field_name");
        assert!(reason.contains("--version-field"), "{reason}");
        let tombstone = rawdoc! { "_id": "x", "_nk_version": 3i64, "_nk_deleted": 1 };
        let (_, reason) = keep.apply(tombstone, &versioned).unwrap_err();
        assert!(reason.contains("tombstone"), "{reason}");
    }

    #[test]
    fn a_foreign_id_is_refused_or_kept_under_the_named_field() {
        let oid = ObjectId::parse_str("655403a0bd2d1ef3bc3a7f30").unwrap();
        let line = rawdoc! { "_id": oid, "k": "a", "at": 1i64 };
        let (kind, reason) = OwnFields { keep_id: None }
            .apply(line.clone(), &spec())
            .unwrap_err();
        assert_eq!(kind, "foreign_id");
        assert!(reason.contains("655403a0bd2d1ef3bc3a7f30"), "{reason}");
        assert!(reason.contains("--keep-id"), "{reason}");
        let kept = OwnFields {
            keep_id: Some("legacy_id".into()),
        };
        let doc = kept.apply(line, &spec()).unwrap();
        assert_eq!(names(&doc), ["legacy_id", "k", "at"]);
        assert_eq!(doc.get_object_id("legacy_id").unwrap(), oid);
        let taken = rawdoc! { "_id": 7, "k": "a", "at": 1i64, "legacy_id": 1 };
        let (kind, reason) = kept.apply(taken, &spec()).unwrap_err();
        assert_eq!(kind, "foreign_id");
        assert!(
            reason.contains("has a field `legacy_id` already"),
            "{reason}"
        );
    }

    #[test]
    fn other_own_fields_refuse_the_line_and_a_keyless_line_keeps_its_id_for_the_write() {
        let line = rawdoc! { "k": "a", "at": 1i64, "_nk_legacy_ids": [1] };
        let (kind, reason) = OwnFields { keep_id: None }
            .apply(line, &spec())
            .unwrap_err();
        assert_eq!(kind, "invalid_field_name");
        assert!(reason.contains("`_nk_legacy_ids`"), "{reason}");
        let keyless = rawdoc! { "_id": 7, "at": 1i64, "_nk_hash": "h" };
        let doc = OwnFields { keep_id: None }.apply(keyless, &spec()).unwrap();
        assert_eq!(names(&doc), ["_id", "at"]);
    }
}
