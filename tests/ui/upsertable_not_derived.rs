use natural_key::prelude::*;
use natural_key::{Collection, Error};

// Derives serde's traits but neither NaturalKey nor RandomId.
#[derive(Serialize, Deserialize)]
struct Note {
    text: String,
}

async fn save<T: Upsertable>(doc: &T, coll: &Collection<T>) -> Result<T::Outcome, Error> {
    doc.upsert(coll).await
}

#[allow(dead_code)]
async fn write(note: &Note, notes: &Collection<Note>) {
    let _ = note.upsert(notes);
    let _ = save(note, notes);
}

fn main() {}
