use natural_key::prelude::*;

#[derive(NaturalKey, RandomId, Serialize, Deserialize)]
struct Post {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

fn main() {}
