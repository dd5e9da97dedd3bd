use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Reading {
    #[key]
    sensor: String,
    #[key]
    position: Vec<f64>,
    #[key(timestamp)]
    taken_at: i64,
    value: f64,
}

fn main() {}
