//! What once-per-operation costs: N relative updates (`$inc` of a counter) over a few items, by
//! `Collection::apply` (the change and its operation's record in one guarded update) against a
//! plain `update_one` with `$inc` (the floor: no record, not safe to retry), one at a time,
//! alternated per repetition so load drift hits both; each run verified (the counters exact).
//! The records grow to their retention bound during the run, as they would in service.
//!
//! Run: `cargo bench --bench relative`. Environment: `NK_RELATIVE_BENCH_OPS` (default 2,000),
//! `NK_RELATIVE_BENCH_ITEMS` (default 10), `NK_RELATIVE_BENCH_REPS` (default 3),
//! `MONGODB_URI` (else `scripts/db up`). Under `cargo test --benches`: 50 operations, once.

mod support;

use std::time::Instant;

use natural_key::bson::{doc, Document};
use natural_key::prelude::*;
use natural_key::{Change, Collection, OpId};

#[derive(NaturalKey, Serialize, Deserialize, Clone)]
struct Item {
    #[key]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    name: String,
    #[natural_key(relative)]
    stock: i64,
}

#[tokio::main]
async fn main() {
    let full = support::invoked_by_cargo_bench();
    let ops = if full {
        support::env_usize("NK_RELATIVE_BENCH_OPS", 2_000)
    } else {
        50
    };
    let n_items = support::env_usize("NK_RELATIVE_BENCH_ITEMS", 10).max(1);
    let reps = if full {
        support::env_usize("NK_RELATIVE_BENCH_REPS", 3)
    } else {
        1
    };
    let client = support::plain_client(&support::uri()).await;
    let db = client.database("nk_bench_relative");
    let items: Vec<Item> = (0..n_items)
        .map(|i| Item {
            sku: format!("sku-{i}"),
            listed_at: 1_700_000_000_000,
            name: format!("item {i}"),
            stock: ops as i64,
        })
        .collect();
    let ids: Vec<Ulid> = items.iter().map(|i| i.id().unwrap()).collect();
    let mut ratios = Vec::new();
    for rep in 0..reps {
        let mut took = [0.0; 2];
        // Alternate which side goes first.
        for side in [rep % 2, 1 - rep % 2] {
            db.drop().await.unwrap();
            let coll = Collection::<Item>::open(&db, "items").await.unwrap();
            coll.upsert_many(&items).await.unwrap();
            let raw = db.collection::<Document>("items");
            let t = Instant::now();
            for k in 0..ops {
                let id = ids[k % n_items];
                if side == 0 {
                    raw.update_one(doc! {"_id": id.to_string()}, doc! {"$inc": {"stock": -1}})
                        .await
                        .unwrap();
                } else {
                    let op = OpId::new(format!("order-{k}"), k as i64);
                    coll.apply(id, op, Change::new().inc("stock", -1))
                        .await
                        .unwrap();
                }
            }
            took[side] = t.elapsed().as_secs_f64();
            for (i, id) in ids.iter().enumerate() {
                let d = raw
                    .find_one(doc! {"_id": id.to_string()})
                    .await
                    .unwrap()
                    .unwrap();
                let want = ops as i64 - (ops / n_items + usize::from(i < ops % n_items)) as i64;
                assert_eq!(d.get_i64("stock").unwrap(), want, "item {i}, side {side}");
            }
        }
        let per = |s: f64| s / ops as f64 * 1e3;
        println!(
            "relative rep={rep} plain $inc {:.3} ms/op, apply {:.3} ms/op (x{:.2})",
            per(took[0]),
            per(took[1]),
            took[1] / took[0]
        );
        ratios.push(took[1] / took[0]);
    }
    println!(
        "relative: {ops} operations over {n_items} items, apply / plain $inc, median of {reps}: x{:.2}",
        support::median(&ratios)
    );
}
