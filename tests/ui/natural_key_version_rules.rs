// `#[natural_key(version)]`: one field, never a key, never `relative`, always stored by serde,
// a flag without a value, and unknown to RandomId. Every problem reported at once; `skip_hash`
// beside it is accepted.
use natural_key::{NaturalKey, RandomId, Ulid};
use serde::{Deserialize, Serialize};

#[derive(NaturalKey, Serialize, Deserialize)]
struct IdentityKey {
    #[key]
    #[natural_key(version)]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct TimestampKey {
    #[key]
    slug: String,
    #[key(timestamp)]
    #[natural_key(version)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Twice {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    rev: u32,
    #[natural_key(version, skip_hash)]
    edited_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Relative {
    #[key]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    #[natural_key(relative, version)]
    stock: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Skipped {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    #[serde(skip)]
    rev: u32,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct NotSerialized {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[serde(skip_serializing)]
    #[natural_key(version)]
    rev: u32,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct SometimesSerialized {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rev: Option<u32>,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct WithValue {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version = "rev")]
    rev: u32,
}

// Accepted: the version may be left out of the content hash.
#[derive(NaturalKey, Serialize, Deserialize)]
struct SkipHash {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version, skip_hash)]
    rev: u32,
}

#[derive(RandomId, Serialize, Deserialize)]
struct Sale {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[natural_key(version)]
    rev: u32,
}

fn main() {}
