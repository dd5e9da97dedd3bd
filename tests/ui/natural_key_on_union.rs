use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
union Post {
    slug: u64,
    published_at: i64,
}

fn main() {}
