use natural_key::prelude::*;

#[derive(RandomId, Serialize, Deserialize)]
#[natural_key(crate = "natural_key")]
#[natural_key(crate = "natural_key", namespace = "clicks")]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: natural_key::Ulid,
    page: String,
}

fn main() {}
