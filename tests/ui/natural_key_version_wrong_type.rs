use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    rev: String,
}

fn main() {}
