//! `#[natural_key(crate = "nk")]`: natural-key is a dependency named `nk` here, so
//! `::natural_key` does not resolve and a path the derives emit unsubstituted does not compile.
//! The values are compared with what natural-key computes without the derive (`compute_id`,
//! `canonical_hash`) and with the ids its own docs assert for the same types.

use nk::{canonical_hash, compute_id, KeyValue, NaturalKey, RandomId, Scheme, Ulid};

const AT: i64 = 1_700_000_000_000;

/// docs/crate.md's `Post`, there derived through `natural_key::prelude` without `crate`.
#[derive(nk::NaturalKey, serde::Serialize)]
#[natural_key(crate = "nk")]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

/// `Post` with a field left out of the content hash, and `crate` beside another option.
#[derive(nk::NaturalKey, serde::Serialize)]
#[natural_key(namespace = "blog.post", crate = "nk")]
struct FetchedPost {
    #[key]
    slug: String,
    #[key(lowercase)]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

/// The joined scheme, `crate` in an attribute of its own.
#[derive(nk::NaturalKey, serde::Serialize)]
#[natural_key(scheme = "joined")]
#[natural_key(crate = "nk")]
struct SeedPost {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
}

/// Hashed v2 (its serde attributes rename the stored fields): the v2 code paths resolve
/// through `crate` too.
#[derive(nk::NaturalKey, serde::Serialize)]
#[natural_key(crate = "nk")]
#[serde(rename_all = "camelCase")]
struct StoredPost {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

/// A version and `changed_at`: `__version` names `KeyVersion` and `check_version` through
/// `crate` too.
#[derive(nk::NaturalKey, serde::Serialize)]
#[natural_key(crate = "nk", changed_at = "changed_at")]
struct VersionedPost {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    rev: u64,
}

#[derive(nk::RandomId, serde::Serialize)]
#[natural_key(crate = "nk")]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[idempotency_key]
    request: String,
    page: String,
}

fn post() -> Post {
    Post {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: AT,
        body: "Hi".into(),
    }
}

fn keys() -> [KeyValue<'static>; 2] {
    [
        KeyValue::Str("hello-world".into()),
        KeyValue::Str("en".into()),
    ]
}

#[test]
fn default_scheme_id() {
    let id = post().id().unwrap();
    // The id docs/crate.md asserts for the same struct and values.
    assert_eq!(id.to_string(), "01HF7YAT00EGYGDZ2RBKJ019EA");
    let expected = compute_id(Scheme::Default { namespace: "" }, &keys(), AT.into()).unwrap();
    assert_eq!(id, expected);
}

#[test]
fn namespace_lowercase_and_skip_hash() {
    let p = post();
    let fetched = FetchedPost {
        slug: p.slug.clone(),
        lang: "EN".into(),
        published_at: p.published_at,
        body: p.body.clone(),
        fetched_at: 42,
    };
    let expected = compute_id(
        Scheme::Default {
            namespace: "blog.post",
        },
        &keys(),
        AT.into(),
    )
    .unwrap();
    assert_eq!(fetched.id().unwrap(), expected);
    assert_ne!(fetched.id().unwrap(), p.id().unwrap());
    // `fetched_at` is skipped, so only `lang` ("EN" against "en") tells the hashes apart.
    let same_lang = FetchedPost {
        lang: "en".into(),
        ..fetched
    };
    assert_eq!(same_lang.content_hash().unwrap(), p.content_hash().unwrap());
}

#[test]
fn content_hash_is_the_canonical_hash() {
    let p = post();
    assert_eq!(p.content_hash().unwrap(), canonical_hash(&p).unwrap());
    let edited = Post {
        body: "Hello".into(),
        ..post()
    };
    assert_ne!(edited.content_hash().unwrap(), p.content_hash().unwrap());
}

#[test]
fn joined_scheme_id() {
    let seed = SeedPost {
        slug: "hello-world".into(),
        lang: "en".into(),
        published_at: AT,
    };
    let id = seed.id().unwrap();
    // `compute_id`'s documented value for the seed recipe, sha256("hello-world" + ":" + "en").
    assert_eq!(id.to_string(), "01HF7YAT002BC0VWVKC580KT23");
    let expected = compute_id(Scheme::Joined { separator: ":" }, &keys(), AT.into()).unwrap();
    assert_eq!(id, expected);
}

#[test]
fn random_id_and_idempotency_key() {
    let id: Ulid = "01HF7YAT00EGYGDZ2RBKJ019EA".parse().unwrap();
    let click = Click {
        id,
        request: "req-1".into(),
        page: "/".into(),
    };
    assert_eq!(RandomId::id(&click), id);
    assert_eq!(click.__idempotency_key().unwrap().as_deref(), Some("req-1"));
}

#[test]
fn content_hash_v2() {
    let p = |fetched_at| StoredPost {
        slug: "hello-world".into(),
        published_at: AT,
        fetched_at,
    };
    assert_eq!(p(1).content_hash().unwrap(), p(2).content_hash().unwrap());
    let v1 = p(1)
        .__content_hash_v1()
        .expect("a v2 type keeps its v1 hash");
    assert_ne!(p(1).content_hash().unwrap(), v1);
}

#[test]
fn version_and_changed_at() {
    let doc = VersionedPost {
        slug: "hello-world".into(),
        published_at: AT,
        rev: 3,
    };
    assert_eq!(doc.__version(), Ok(Some(3)));
    assert_eq!(VersionedPost::__changed_at_field(), Some("changed_at"));
}
