use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    published_at: i64,
    body: String,
}

fn main() {}
