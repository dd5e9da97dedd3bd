//! What an engine pays for the shape of an update statement's filter: the same S `$set`
//! statements over a collection of N documents, filtered by `{_id}` alone and by
//! `{_id, _nk_hash}` (the compare-and-set the guard uses where the engine compares the hash
//! atomically), beside a blind rewrite of all N (replacements by `_id`, 1,000 per command, 16
//! on FerretDB 1.x, where 100 or more that match stored documents never return:
//! `benches/peers.rs`'s `blind`), alternated three times so load drift hits all three. This is
//! the measurement behind `Deployment::compares_hash_in_update_filter`, and behind the 1%-changed
//! re-ingest's floor on an engine that answers only a lone `_id` from an index
//! (docs/performance.md).
//!
//! Run: `cargo bench --bench update_filter`. Environment: `NK_FILTER_DOCS` (N, default 2,000),
//! `NK_FILTER_STATEMENTS` (S, default 200), `NK_FILTER_PER_COMMAND` (statements per `update`,
//! default 16), `NK_FILTER_BODY` (bytes of each document's body, default 200), `MONGODB_URI` (else `scripts/db up`). Under `cargo test --benches`: 100
//! documents, once.

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
    let body = support::env_usize("NK_FILTER_BODY", 200);
    let client = support::plain_client(&support::uri()).await;
    let db = client.database("nk_bench_update_filter");
    db.drop().await.unwrap();
    let c = db.collection::<Document>("posts");
    let docs: Vec<Document> = (0..n)
        .map(|i| doc! {"_id": format!("id{i:07}"), "_nk_hash": "h0", "body": "x".repeat(body)})
        .collect();
    for chunk in docs.chunks(10_000) {
        c.insert_many(chunk.to_vec()).await.unwrap();
    }
    let statements = support::env_usize("NK_FILTER_STATEMENTS", 200).min(n);
    let per_command = support::env_usize("NK_FILTER_PER_COMMAND", 16).max(1);
    let ferretdb = natural_key::Deployment::detect(&client)
        .await
        .unwrap()
        .engine()
        .is_ferretdb_v1();
    let blind_per_command = if ferretdb { 16 } else { 1000 };
    for round in 0..if full { 3 } else { 1 } {
        let t = Instant::now();
        for chunk in docs.chunks(blind_per_command) {
            let replacements: Vec<Document> = chunk
                .iter()
                .map(|d| {
                    let mut u = d.clone();
                    u.insert("body", format!("z{round}").repeat(body / 2));
                    doc! {"q": {"_id": d.get_str("_id").unwrap()}, "u": u, "upsert": true, "multi": false}
                })
                .collect();
            let r = db
                .run_command(doc! {"update": "posts", "updates": replacements, "ordered": false})
                .await
                .unwrap();
            assert_eq!(r.get_i32("n").unwrap() as usize, chunk.len(), "{r}");
        }
        println!(
            "update_filter n={n} round={round} blind rewrite of all {n:>27} {:>8.3} s",
            t.elapsed().as_secs_f64()
        );
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
            for chunk in updates.chunks(per_command) {
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
