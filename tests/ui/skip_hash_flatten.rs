use std::collections::BTreeMap;

use natural_key::prelude::*;

// The content hash covers what is stored; a flattened field is stored as its entries, under
// names the derive cannot see, so it cannot be left out by name.
#[derive(NaturalKey, Serialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(skip_hash)]
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
}

fn main() {}
