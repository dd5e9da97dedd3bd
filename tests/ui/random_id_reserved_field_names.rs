use natural_key::prelude::*;

// Only the `#[id]` field may be stored as `_id`; `_nk_` names are natural-key's.
#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[serde(rename(serialize = "_id", deserialize = "other"))]
    other: String,
    #[serde(rename = "_nk_idempotency")]
    request: String,
    _nk_write: String,
}

fn main() {}
