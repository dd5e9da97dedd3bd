use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[key(timestamp)]
    updated_at: i64,
    body: String,
}

fn main() {}
