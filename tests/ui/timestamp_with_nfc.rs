use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp, nfc)]
    published_at: i64,
}

fn main() {}
