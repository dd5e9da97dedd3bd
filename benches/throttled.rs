//! What a throttling engine costs an ingest: the same first ingest of N posts through the test
//! proxy, once with 15% of the write commands refused whole as Azure Cosmos DB refuses them
//! (16500, `RetryAfterMs`), once unthrottled, alternated so load drift hits both; each run
//! verified (exactly N inserted and stored). The throttled run pays the waits the engine asks
//! for plus the policy's backoff on top, and sends only the refused commands again.
//!
//! Run: `cargo bench --bench throttled`. Environment: `NK_THROTTLE_DOCS` (default 10,000),
//! `NK_THROTTLE_BATCH` (documents per batch, default 500), `NK_THROTTLE_WAIT_MS` (the
//! `RetryAfterMs` named, default 10), `NK_THROTTLE_REPS` (pairs, default 3), `MONGODB_URI`
//! (else `scripts/db up`). Under `cargo test --benches`: 200 posts, one pair.

mod support;

#[allow(dead_code)]
#[path = "../tests/support/proxy.rs"]
mod proxy;

use std::time::{Duration, Instant};

use natural_key::bson::{doc, Document};
use natural_key::prelude::*;
use natural_key::{Collection, RetryPolicy};
use proxy::{Engine, Faults, Proxy};

#[derive(NaturalKey, Serialize, Deserialize, Clone)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[tokio::main]
async fn main() {
    let full = support::invoked_by_cargo_bench();
    let n = if full {
        support::env_usize("NK_THROTTLE_DOCS", 10_000)
    } else {
        200
    };
    let batch = support::env_usize("NK_THROTTLE_BATCH", 500);
    let wait = support::env_usize("NK_THROTTLE_WAIT_MS", 10) as u64;
    let reps = if full {
        support::env_usize("NK_THROTTLE_REPS", 3)
    } else {
        1
    };
    let posts: Vec<Post> = (0..n)
        .map(|i| Post {
            slug: format!("post-{i:06}"),
            published_at: 1_700_000_000_000 + i as i64,
            body: "x".repeat(500),
        })
        .collect();
    let uri = support::uri();
    let proxy = Proxy::start(proxy::upstream_addr(&uri), Faults::none(), 15).await;
    let client = support::plain_client(&proxy.uri()).await;
    let db = client.database("nk_bench_throttled");
    let policy = RetryPolicy::default()
        .max_attempts(1000)
        .deadline(Duration::from_secs(600));
    let throttled = Engine {
        throttle_command: 0.15,
        retry_after_ms: wait,
        ..Engine::none()
    };
    let mut ratios = Vec::new();
    for rep in 0..reps {
        let mut took = [0.0; 2];
        for (k, engine) in [Engine::none(), throttled].into_iter().enumerate() {
            db.drop().await.unwrap();
            let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
            proxy.set_engine(engine);
            proxy.reset_stats();
            let t = Instant::now();
            let r = coll
                .upsert_many(&posts)
                .batch_size(batch)
                .retry(policy)
                .await
                .unwrap();
            took[k] = t.elapsed().as_secs_f64();
            let stats = proxy.stats();
            proxy.set_engine(Engine::none());
            // Verified, never timed: every post inserted once, by this call.
            assert_eq!((r.inserted as usize, r.failures.len()), (n, 0), "{r:?}");
            let stored = db
                .collection::<Document>("posts")
                .count_documents(doc! {})
                .await;
            assert_eq!(stored.unwrap() as usize, n);
            println!(
                "throttled n={n} batch={batch} rep={rep} {:<11} {:>8.3} s  write commands {:>4}, throttled {:>3}",
                if k == 0 { "unthrottled" } else { "throttled" },
                took[k],
                stats.writes(),
                stats.throttled_commands,
            );
        }
        ratios.push(took[1] / took[0]);
    }
    println!(
        "throttled/unthrottled n={n} batch={batch} RetryAfterMs={wait}: median {:.2}x over {reps} pairs {:?}",
        support::median(&ratios),
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>()
    );
}
