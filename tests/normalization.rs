//! `#[key(lowercase)]` / `#[key(nfc)]` are part of the id format: these golden vectors
//! (scripts/gen_normalization_vectors.py, CPython's implementation of docs/id-scheme.md) must
//! never change. The Rust code is the spec's reference, so a mismatch here is a format change.

use natural_key::prelude::*;
use natural_key::{compute_id, compute_identity, KeyValue, Scheme};
use serde_json::Value;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Lower {
    #[key(lowercase)]
    text: String,
    #[key(timestamp)]
    at: u64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Nfc {
    #[key(nfc)]
    text: String,
    #[key(timestamp)]
    at: u64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct LowerNfc {
    #[key(lowercase, nfc)]
    text: String,
    #[key(timestamp)]
    at: u64,
}

/// (id, identity hex, key description) of `text` through the derive with these flags.
fn derived(text: &str, lowercase: bool, nfc: bool, at: u64) -> (String, String, String) {
    fn of<T: NaturalKey>(doc: T) -> (String, String, String) {
        (
            doc.id().unwrap().to_string(),
            doc.identity().unwrap().to_string(),
            doc.key_description(),
        )
    }
    let text = text.to_owned();
    match (lowercase, nfc) {
        (true, false) => of(Lower { text, at }),
        (false, true) => of(Nfc { text, at }),
        (true, true) => of(LowerNfc { text, at }),
        (false, false) => panic!("a normalization vector without normalization"),
    }
}

#[test]
fn normalization_vectors() {
    let doc: Value = serde_json::from_str(include_str!("vectors/normalization.json")).unwrap();
    assert_eq!(doc["format"], "natural-key normalization vectors v1");
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 50, "the vector file lost entries");
    for v in vectors {
        let label = format!(
            "vector {:?} (lowercase={}, nfc={})",
            v["name"], v["lowercase"], v["nfc"]
        );
        assert_eq!(
            v["scheme"], "default",
            "{label}: only the default scheme is used"
        );
        assert_eq!(v["namespace"], "", "{label}");
        let input = v["input"].as_str().unwrap();
        let normalized = v["normalized"].as_str().unwrap();
        let (lowercase, nfc) = (
            v["lowercase"].as_bool().unwrap(),
            v["nfc"].as_bool().unwrap(),
        );
        let at = v["timestamp_ms"].as_u64().unwrap();
        let (want_id, want_identity) = (v["id"].as_str().unwrap(), v["identity"].as_str().unwrap());

        let (id, identity, description) = derived(input, lowercase, nfc, at);
        // The description shows the text after normalization, so this pins the text itself,
        // not only its hash.
        assert_eq!(description, format!("text={normalized:?}"), "{label}");
        assert_eq!(id, want_id, "{label}");
        assert_eq!(identity, want_identity, "{label}");

        // The id is the plain id of the normalized text, and normalizing is idempotent.
        let keys = [KeyValue::Str(normalized.into())];
        let scheme = Scheme::Default { namespace: "" };
        assert_eq!(
            compute_id(scheme, &keys, at.into()).unwrap().to_string(),
            want_id,
            "{label}"
        );
        assert_eq!(
            compute_identity(scheme, &keys).unwrap().to_string(),
            want_identity,
            "{label}"
        );
        assert_eq!(
            derived(normalized, lowercase, nfc, at).0,
            want_id,
            "{label}: normalizing twice"
        );
    }
}

/// The spec's lowercase is `str::to_lowercase`; the vectors' expectations must be exactly what
/// std computes, not only what the derive computes.
#[test]
fn normalization_vectors_follow_std() {
    let doc: Value = serde_json::from_str(include_str!("vectors/normalization.json")).unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        if v["lowercase"] == true && v["nfc"] == false {
            assert_eq!(
                v["input"].as_str().unwrap().to_lowercase(),
                v["normalized"].as_str().unwrap(),
                "vector {:?}",
                v["name"]
            );
        }
    }
}
