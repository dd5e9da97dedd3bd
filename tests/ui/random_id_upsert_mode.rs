use natural_key::prelude::*;
use natural_key::Collection;

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

// An event's `upsert` stores it once and never updates it: it has no write mode.
#[allow(dead_code)]
fn replace(click: &Click, clicks: &Collection<Click>) {
    let _ = click.upsert(clicks).mode(WriteMode::Replace);
}

fn main() {}
