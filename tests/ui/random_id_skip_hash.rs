use std::collections::BTreeMap;

use natural_key::prelude::*;

// `skip_hash` leaves a field out of an event's payload under the name serde stores it with;
// where there is no such name, or the field is never compared, it is refused as on a
// NaturalKey type.
#[derive(RandomId, Serialize)]
struct Payment {
    #[id]
    #[serde(rename = "_id")]
    #[natural_key(skip_hash)]
    id: natural_key::Ulid,
    #[idempotency_key]
    #[natural_key(skip_hash)]
    request_id: String,
    #[serde(skip)]
    #[natural_key(skip_hash)]
    cache: u32,
    #[natural_key(skip_hash)]
    #[serde(flatten)]
    extra: BTreeMap<String, String>,
    #[natural_key(skip_hash)]
    received_at: i64,
}

#[derive(RandomId, Serialize, Clone)]
#[serde(into = "Wire")]
struct Into {
    #[id]
    id: natural_key::Ulid,
    #[natural_key(skip_hash)]
    received_at: i64,
}

#[derive(Serialize)]
struct Wire {
    id: natural_key::Ulid,
}

impl From<Into> for Wire {
    fn from(p: Into) -> Self {
        Wire { id: p.id }
    }
}

fn main() {}
