use natural_key::prelude::*;

// Three independent mistakes: all are reported from one compile.
#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(bogus = "x")]
struct Post {
    #[key(foo)]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(nope)]
    body: String,
}

fn main() {}
