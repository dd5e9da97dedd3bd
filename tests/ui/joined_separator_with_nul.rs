use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(scheme = "joined", separator = "a\0b")]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

fn main() {}
