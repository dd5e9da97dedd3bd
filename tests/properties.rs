//! Property tests of the id scheme and the content hash (no database).

use std::collections::{BTreeMap, HashMap};

use natural_key::prelude::*;
use natural_key::{canonical_hash, KeyError, MAX_TIMESTAMP_MS};
use proptest::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: u64,
    body: String,
    meta: HashMap<String, i64>,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

fn post(slug: String, lang: String, published_at: u64) -> Post {
    Post {
        slug,
        lang,
        published_at,
        body: String::new(),
        meta: HashMap::new(),
        fetched_at: 0,
    }
}

/// A versioned type: `#[natural_key(version)]` and `changed_at`; the version is content.
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug)]
#[natural_key(changed_at = "changedAt")]
#[serde(rename_all = "camelCase")]
struct Revision {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: u64,
    body: String,
    #[natural_key(version)]
    rev: u32,
    // The engine's time, read back; never written by the struct (nor read by this test).
    #[allow(dead_code)]
    #[serde(default, skip_serializing)]
    changed_at: Option<natural_key::bson::DateTime>,
}

/// The version as an instant, and one too large for the int64 it is compared as.
#[derive(NaturalKey, Serialize)]
struct Edited<V: natural_key::KeyVersion + Serialize> {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: u64,
    #[natural_key(version, skip_hash)]
    edited_at: V,
}

fn edited<V: natural_key::KeyVersion + Serialize>(edited_at: V) -> Edited<V> {
    Edited {
        slug: "s".into(),
        published_at: 1,
        edited_at,
    }
}

#[test]
fn the_version_and_changed_at_are_what_the_attributes_say() {
    let doc = Revision {
        slug: "s".into(),
        published_at: 1,
        body: String::new(),
        rev: 7,
        changed_at: None,
    };
    assert_eq!(doc.__version(), Ok(Some(7)));
    assert_eq!(Revision::__changed_at_field(), Some("changedAt"));
    assert_eq!(Post::__changed_at_field(), None);
    assert_eq!(post("s".into(), "en".into(), 1).__version(), Ok(None));

    let at = natural_key::bson::DateTime::from_millis(1_700_000_000_123);
    assert_eq!(edited(at).__version(), Ok(Some(1_700_000_000_123)));
    assert_eq!(
        edited(u64::MAX).__version(),
        Err(KeyError::VersionOutOfRange {
            field: "edited_at",
            value: u64::MAX.into()
        })
    );
    // `skip_hash` leaves it out of the content hash, as on any field.
    assert_eq!(
        edited(1u64).content_hash().unwrap(),
        edited(2u64).content_hash().unwrap()
    );
}

proptest! {
    /// The version is neither id nor identity; it is content unless `skip_hash` says otherwise.
    #[test]
    fn the_version_is_content_not_identity(slug in ".{0,20}", ts in 0..=MAX_TIMESTAMP_MS, r1 in any::<u32>(), r2 in any::<u32>()) {
        prop_assume!(!slug.contains('\0'));
        let a = Revision { slug, published_at: ts, body: "b".into(), rev: r1, changed_at: None };
        let b = Revision { rev: r2, ..a.clone() };
        prop_assert_eq!(a.__version(), Ok(Some(i64::from(r1))));
        prop_assert_eq!(a.id().unwrap(), b.id().unwrap());
        prop_assert_eq!(a.identity().unwrap(), b.identity().unwrap());
        prop_assert_eq!(a.content_hash().unwrap() == b.content_hash().unwrap(), r1 == r2);
    }

    #[test]
    fn ids_are_deterministic_and_decode_to_the_timestamp(
        slug in ".*", lang in "[a-z]{2}(-[A-Z]{2})?", ts in 0..=MAX_TIMESTAMP_MS
    ) {
        prop_assume!(!slug.contains('\0'));
        let a = post(slug.clone(), lang.clone(), ts);
        let b = post(slug, lang, ts);
        let id = a.id().unwrap();
        prop_assert_eq!(id, b.id().unwrap());
        prop_assert_eq!(id.timestamp_ms(), ts);
        // The text form round-trips, as it is what `_id` stores.
        prop_assert_eq!(id.to_string().parse::<Ulid>().unwrap(), id);
    }

    #[test]
    fn ids_sort_by_timestamp(
        k1 in "[a-z0-9-]{0,20}", k2 in "[a-z0-9-]{0,20}",
        t1 in 0..=MAX_TIMESTAMP_MS, t2 in 0..=MAX_TIMESTAMP_MS
    ) {
        prop_assume!(t1 != t2);
        let a = post(k1, "en".into(), t1).id().unwrap();
        let b = post(k2, "en".into(), t2).id().unwrap();
        prop_assert_eq!(a < b, t1 < t2);
        prop_assert_eq!(a.to_string() < b.to_string(), t1 < t2, "the stored text sorts the same way");
    }

    #[test]
    fn out_of_range_timestamps_are_errors(ts in (MAX_TIMESTAMP_MS + 1)..=u64::MAX) {
        let err = post("x".into(), "en".into(), ts).id().unwrap_err();
        prop_assert_eq!(err, natural_key::KeyError::TimestampOutOfRange { field: "published_at", millis: ts as i128 });
    }

    /// ("a:b","c") and ("a","b:c"): every way to split one joined string gives its own id.
    #[test]
    fn default_scheme_has_no_join_collisions(parts in prop::collection::vec("[a-z:]{0,6}", 2..5), ts in 0..1000u64) {
        let joined = parts.join(":");
        let cuts: Vec<usize> = joined.match_indices(':').map(|(i, _)| i).collect();
        let ids: Vec<_> = cuts
            .iter()
            .map(|&i| post(joined[..i].to_string(), joined[i + 1..].to_string(), ts).id().unwrap())
            .collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        prop_assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn content_hash_ignores_map_order(entries in prop::collection::vec((".{0,8}", any::<i64>()), 0..40)) {
        let forward: HashMap<String, i64> = entries.iter().cloned().collect();
        let backward: HashMap<String, i64> = entries.iter().rev().cloned().collect();
        // `backward` keeps the first value of a duplicate key: rebuild it from `forward`.
        let backward: HashMap<String, i64> = backward.keys().map(|k| (k.clone(), forward[k])).collect();
        let sorted: BTreeMap<String, i64> = forward.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut a = post("s".into(), "en".into(), 1);
        a.meta = forward;
        let mut b = a.clone();
        b.meta = backward;
        prop_assert_eq!(a.content_hash().unwrap(), b.content_hash().unwrap());
        prop_assert_eq!(canonical_hash(&a.meta).unwrap(), canonical_hash(&sorted).unwrap());
    }

    #[test]
    fn content_hash_sees_every_hashed_field(body in ".{0,40}", other in ".{0,40}", fetched in any::<i64>()) {
        let mut a = post("s".into(), "en".into(), 1);
        a.body = body.clone();
        let mut b = a.clone();
        b.body = other.clone();
        prop_assert_eq!(a.content_hash().unwrap() == b.content_hash().unwrap(), body == other);
        let mut c = a.clone();
        c.fetched_at = fetched;
        prop_assert_eq!(a.content_hash().unwrap(), c.content_hash().unwrap(), "skip_hash fields are left out");
    }
}
