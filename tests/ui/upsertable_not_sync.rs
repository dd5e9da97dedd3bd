use std::cell::Cell;

use natural_key::prelude::*;

// Not `Sync`: the derive compiles (its id and content hash work), but no `Collection` can
// hold it, so it is not `Upsertable`.
#[derive(NaturalKey, Serialize)]
struct Counter {
    #[key]
    name: String,
    #[key(timestamp)]
    at: i64,
    hits: Cell<u32>,
}

fn upsertable<T: Upsertable>(_: &T) {}

#[allow(dead_code)]
fn check(counter: &Counter) -> Result<Ulid, natural_key::KeyError> {
    upsertable(counter);
    counter.id()
}

fn main() {}
