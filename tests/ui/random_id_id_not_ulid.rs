use natural_key::prelude::*;

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: String,
    page: String,
}

fn main() {}
