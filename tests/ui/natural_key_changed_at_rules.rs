// `#[natural_key(changed_at = "...")]`: a string, given once, naming a top-level field the
// engine can set and the struct does not store itself (under its stored name, after serde's
// renames); NaturalKey only. Every problem reported at once.
use natural_key::{NaturalKey, RandomId, Ulid};
use serde::{Deserialize, Serialize};

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "")]
struct Empty {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "$set")]
struct Operator {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "_nk_changed")]
struct Reserved {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "meta.changed")]
struct Path {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "changed\0at")]
struct Nul {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "_id")]
struct Id {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "body")]
struct AField {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "updated")]
struct Renamed {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[serde(rename = "updated")]
    updated_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[natural_key(changed_at = "updatedAt")]
struct RenamedAll {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    updated_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "changed_at")]
#[natural_key(changed_at = "updated_at")]
struct Twice {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at)]
struct NoValue {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = changed)]
struct NotAString {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

// Accepted: a field serde never writes may carry the name, to read the time back.
#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(changed_at = "changed_at")]
struct ReadBack {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[serde(default, skip_serializing)]
    changed_at: Option<natural_key::bson::DateTime>,
}

#[derive(RandomId, Serialize, Deserialize)]
#[natural_key(changed_at = "changed_at")]
struct Sale {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
}

fn main() {}
