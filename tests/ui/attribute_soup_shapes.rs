use natural_key::prelude::*;

// Inputs the derives cannot take, each reported at the item, several per compile.

#[derive(NaturalKey, Serialize)]
struct Unit;

#[derive(NaturalKey, Serialize)]
struct NoKeysAtAll {
    slug: String,
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct TwoTimestampsNoIdentity {
    #[key(timestamp)]
    created_at: i64,
    #[key(timestamp)]
    updated_at: i64,
}

#[derive(RandomId, Serialize)]
struct IdWithArguments {
    #[id(random)]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
}

#[derive(RandomId, Serialize)]
struct IdWithValue {
    #[id = "x"]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    #[idempotency_key(text)]
    request: String,
}

#[derive(RandomId, Serialize)]
struct TwoIds {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    #[id]
    other: natural_key::Ulid,
}

#[derive(RandomId, Serialize)]
struct IdIsIdempotencyKey {
    #[id]
    #[idempotency_key]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
}

#[derive(RandomId, Serialize)]
struct TwoIdempotencyKeys {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    #[idempotency_key]
    request: String,
    #[idempotency_key]
    retry_of: String,
}

#[derive(RandomId, Serialize)]
struct RandomIdFieldOptions {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    #[natural_key(skip_hash)]
    received_at: i64,
    #[natural_key(skip_payload)]
    page: String,
}

fn main() {}
