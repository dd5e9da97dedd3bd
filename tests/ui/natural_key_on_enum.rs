use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
enum Post {
    Draft { slug: String },
    Published { slug: String, published_at: i64 },
}

fn main() {}
