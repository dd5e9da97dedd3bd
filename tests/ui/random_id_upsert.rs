use natural_key::prelude::*;

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    page: String,
}

// A RandomId type is inserted once (`clicks.insert(&click)`); it has no upsert.
#[allow(dead_code)]
fn record(clicks: &natural_key::Collection<Click>, click: &Click) {
    let _ = clicks.upsert(click);
}

fn main() {}
