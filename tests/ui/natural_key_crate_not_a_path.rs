use natural_key::prelude::*;

// The package name, not a path: crate names use `_`.
#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(crate = "natural-key")]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

// A path, but not as a string.
#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(crate = natural_key)]
struct Page {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

fn main() {}
