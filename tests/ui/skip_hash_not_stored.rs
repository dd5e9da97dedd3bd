use natural_key::prelude::*;

// A field serde never stores is never hashed: `skip_hash` on it says nothing, and is refused
// rather than left to suggest otherwise.
#[derive(NaturalKey, Serialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[serde(skip)]
    #[natural_key(skip_hash)]
    cache: u32,
    #[natural_key(skip_hash)]
    #[serde(rename = "seen", skip_serializing)]
    seen_at: i64,
}

fn main() {}
