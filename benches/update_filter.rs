//! What an engine pays for the shape of an update statement's filter: the same 200 `$set`
//! statements (16 per command) over a collection of N documents, filtered by `{_id}` alone and
//! by `{_id, _nk_hash}` (the compare-and-set the guard uses where the engine compares the hash
//! atomically), alternated three times so load drift hits both. This is the measurement behind
//! `Deployment::compares_hash_in_update_filter` (docs/performance.md).
//!
//! Run: `cargo bench --bench update_filter`. Environment: `NK_FILTER_DOCS` (default 2,000),
//! `MONGODB_URI` (else `scripts/db up`). Under `cargo test --benches`: 100 documents, once.

mod support;

use std::time::Instant;

use natural_key::bson::{doc, Document};

#[tokio::main]
async fn main() {
    let full = support::invoked_by_cargo_bench();
    let n = if full {
        support::env_usize("NK_FILTER_DOCS", 2_000)
    } else {
        100
    };
    let client = support::plain_client(&support::uri()).await;
    let db = client.database("nk_bench_update_filter");
    db.drop().await.unwrap();
    let c = db.collection::<Document>("posts");
    let docs: Vec<Document> = (0..n)
        .map(|i| doc! {"_id": format!("id{i:07}"), "_nk_hash": "h0", "body": "x".repeat(200)})
        .collect();
    for chunk in docs.chunks(10_000) {
        c.insert_many(chunk.to_vec()).await.unwrap();
    }
    let statements = 200.min(n);
    for round in 0..if full { 3 } else { 1 } {
        for hash in [true, false] {
            let updates: Vec<Document> = (0..statements)
                .map(|k| {
                    let mut q = doc! {"_id": format!("id{:07}", (k * 7 + round * 13) % n)};
                    if hash {
                        q.insert("_nk_hash", "h0");
                    }
                    doc! {"q": q, "u": {"$set": {"body": format!("y{round}")}}, "upsert": true, "multi": false}
                })
                .collect();
            let t = Instant::now();
            for chunk in updates.chunks(16) {
                let r = db
                    .run_command(
                        doc! {"update": "posts", "updates": chunk.to_vec(), "ordered": false},
                    )
                    .await
                    .unwrap();
                // Counts asserted, never time: each statement matched its document.
                assert_eq!(r.get_i32("n").unwrap() as usize, chunk.len(), "{r}");
            }
            let shape = if hash { "{_id, _nk_hash}" } else { "{_id}" };
            println!(
                "update_filter n={n} round={round} filter={shape:<16} {statements} statements {:>8.3} s",
                t.elapsed().as_secs_f64()
            );
        }
    }
    db.drop().await.unwrap();
}
