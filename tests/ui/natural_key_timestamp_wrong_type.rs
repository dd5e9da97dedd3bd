use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: String,
    body: String,
}

fn main() {}
