use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post(#[key] String, #[key(timestamp)] i64);

fn main() {}
