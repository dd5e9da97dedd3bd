//! The seed's recipe, as a user writes it by hand: per document, derive the id and content
//! hash, read the stored hash by `_id`, and upsert by `_id` only when it differs. What the
//! ingest and peers benches measure natural-key against.

use futures::stream::{self, StreamExt};
use natural_key::bson::{self, doc, Document};
use natural_key::mongodb::Collection;
use natural_key::{NaturalKey, HASH_FIELD, IDENTITY_FIELD};

/// Runs the recipe over `docs`, `in_flight` documents at a time; returns how many were
/// unchanged and how many written.
pub async fn run<T: NaturalKey + Sync>(
    raw: &Collection<Document>,
    docs: &[T],
    in_flight: usize,
) -> (usize, usize) {
    let outcomes: Vec<bool> = stream::iter(docs)
        .map(|p| async move {
            let id = p.id().unwrap().to_string();
            let hash = p.content_hash().unwrap().to_string();
            let stored = raw
                .find_one(doc! { "_id": &id })
                .projection(doc! { HASH_FIELD: 1 })
                .await
                .unwrap();
            if stored.as_ref().and_then(|d| d.get_str(HASH_FIELD).ok()) == Some(hash.as_str()) {
                return false;
            }
            let mut body = bson::to_document(p).unwrap();
            body.insert(IDENTITY_FIELD, p.identity().unwrap().to_string());
            body.insert(HASH_FIELD, hash);
            raw.update_one(doc! { "_id": &id }, doc! { "$set": body })
                .upsert(true)
                .await
                .unwrap();
            true
        })
        .buffer_unordered(in_flight.max(1))
        .collect()
        .await;
    let written = outcomes.iter().filter(|w| **w).count();
    (outcomes.len() - written, written)
}
