use natural_key::prelude::*;

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    page: String,
}

fn main() {}
