use natural_key::prelude::*;

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    page: String,
}

// The handle's `upsert` is the guarded upsert of a NaturalKey type; an event is written
// once with `clicks.insert(&click)` (or `click.upsert(&clicks)`).
#[allow(dead_code)]
fn record(clicks: &natural_key::Collection<Click>, click: &Click) {
    let _ = clicks.upsert(click);
}

fn main() {}
