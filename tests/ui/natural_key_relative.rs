// `#[natural_key(relative)]`: never on a key, never with a value, only where serde stores the
// field under its own name; and unknown to RandomId. Every problem reported at once.
use natural_key::{NaturalKey, RandomId, Ulid};
use serde::{Deserialize, Serialize};

#[derive(NaturalKey, Serialize, Deserialize)]
struct Item {
    #[key]
    #[natural_key(relative)]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    #[natural_key(relative = true)]
    stock: i64,
    #[natural_key(relative)]
    #[serde(skip)]
    reserved: i64,
}

#[derive(RandomId, Serialize, Deserialize)]
struct Sale {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[natural_key(relative)]
    qty: i64,
}

fn main() {}
