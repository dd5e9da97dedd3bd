use natural_key::prelude::*;

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    page: String,
}

// A RandomId type is inserted once (`click.insert(coll)`); it has no upsert.
#[allow(dead_code)]
fn record(coll: &natural_key::mongodb::Collection<Click>, click: &Click) {
    let _ = click.upsert(coll);
}

fn main() {}
