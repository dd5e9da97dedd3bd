//! Peak RSS and time of `audit` and `adopt` over a collection that the random-id recipe wrote
//! (5% of the posts written twice), against one raw `find` of every document (the floor of a
//! scan), for several N.
//!
//! Each step runs in a child process of its own (peak RSS is per process): `seed` inserts the
//! legacy documents, then `find`, `audit` and `adopt` each report seconds and `VmHWM`.
//!
//! Run: `cargo bench --bench maintain_rss`. Environment: `NK_MAINTAIN_DOCS` (comma-separated
//! N, default `100000`), `NK_MAINTAIN_STEPS` (default `seed,find,audit,adopt`; steps may
//! repeat, each ratio is to the `find` before it), `MONGODB_URI` (else `scripts/db up`). No assertion on time or memory
//! beyond the counts; the numbers are printed. Under `cargo test --benches` it is a smoke pass
//! of 2,000 documents.

mod support;

use std::process::Command;
use std::time::Instant;

use natural_key::bson::{doc, oid::ObjectId, Document};
use natural_key::prelude::*;
use support::{drop_collection, peak_rss_kib, plain_client};

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    title: String,
    body: String,
}

fn post(i: u64) -> Post {
    Post {
        slug: format!("post-{i:07}"),
        lang: ["en", "zh-TW", "ja", "ko"][(i % 4) as usize].into(),
        published_at: 1_700_000_000_000 + i as i64,
        title: format!("Post number {i}"),
        body: format!("{:0>200}", i),
    }
}

/// Every twentieth post is stored twice: a retried write under a fresh random id.
fn copies(i: u64) -> u64 {
    if i.is_multiple_of(20) {
        2
    } else {
        1
    }
}

fn child(step: &str, n: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // NK_MAINTAIN_WIRE=1: count and time the commands (monitoring costs time itself).
        let wire = support::Wire::default();
        let client = if std::env::var("NK_MAINTAIN_WIRE").is_ok() {
            support::counting_client(&support::uri(), &wire).await
        } else {
            plain_client(&support::uri()).await
        };
        let db = client.database("nk_bench_maintain");
        let name = format!("posts_{n}");
        let raw = db.collection::<Document>(&name);
        let t = Instant::now();
        let detail = match step {
            "seed" => {
                drop_collection(&raw).await;
                let mut batch = Vec::new();
                for i in 0..n {
                    for _ in 0..copies(i) {
                        let mut d = natural_key::bson::to_document(&post(i)).unwrap();
                        d.insert("_id", ObjectId::new());
                        batch.push(d);
                    }
                    if batch.len() >= 10_000 {
                        raw.insert_many(std::mem::take(&mut batch)).await.unwrap();
                    }
                }
                if !batch.is_empty() {
                    raw.insert_many(batch).await.unwrap();
                }
                format!("stored={}", raw.count_documents(doc! {}).await.unwrap())
            }
            "find" => {
                use futures::TryStreamExt;
                let mut cursor = raw.find(doc! {}).batch_size(10_000).await.unwrap();
                let mut seen = 0u64;
                while cursor.try_next().await.unwrap().is_some() {
                    seen += 1;
                }
                format!("read={seen}")
            }
            "audit" => {
                let posts = natural_key::Collection::<Post>::open(&db, &name)
                    .await
                    .unwrap();
                let r = posts.audit().await.unwrap();
                assert_eq!(r.legacy.count, r.scanned);
                assert_eq!(r.duplicates_identical.count, n.div_ceil(20));
                format!(
                    "scanned={} duplicates={}",
                    r.scanned, r.duplicates_identical.count
                )
            }
            "adopt" => {
                let posts = natural_key::Collection::<Post>::open(&db, &name)
                    .await
                    .unwrap();
                let r = posts.adopt().await.unwrap();
                assert!(r.failures.is_empty(), "{:?}", r.failures.first());
                assert_eq!(r.adopted, n);
                let left = posts.inner().count_documents(doc! {}).await.unwrap();
                assert_eq!(left, n);
                format!("adopted={} merged={}", r.adopted, r.merged)
            }
            other => panic!("unknown step {other}"),
        };
        let secs = t.elapsed().as_secs_f64();
        let peak = peak_rss_kib().unwrap_or(0);
        println!("RESULT step={step} n={n} secs={secs:.2} peak_rss_kib={peak} {detail}");
        if std::env::var("NK_MAINTAIN_WIRE").is_ok() {
            eprintln!("  {step}: {}", wire.take().summary());
        }
    });
}

fn main() {
    if let (Ok(step), Ok(n)) = (
        std::env::var("NK_MAINTAIN_STEP"),
        std::env::var("NK_MAINTAIN_N"),
    ) {
        child(&step, n.parse().expect("NK_MAINTAIN_N is a number"));
        return;
    }
    let smoke = !support::invoked_by_cargo_bench();
    let default = if smoke { "2000" } else { "100000" };
    let list = std::env::var("NK_MAINTAIN_DOCS").unwrap_or_else(|_| default.into());
    // Steps may repeat: `seed,find,audit,find,audit` pairs each audit with the find before it.
    let steps =
        std::env::var("NK_MAINTAIN_STEPS").unwrap_or_else(|_| "seed,find,audit,adopt".into());
    let uri = support::uri();
    let exe = std::env::current_exe().unwrap();
    println!("| N | step | seconds | × find | peak RSS (VmHWM) | detail |");
    println!("|---:|---|---:|---:|---:|---|");
    for n in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut find_secs = None;
        for step in steps.split(',').map(str::trim) {
            eprintln!("maintain_rss: n={n} {step}");
            let out = Command::new(&exe)
                .env("NK_MAINTAIN_STEP", step)
                .env("NK_MAINTAIN_N", n)
                .env("MONGODB_URI", &uri)
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("run the child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let Some(line) = stdout.lines().find(|l| l.starts_with("RESULT ")) else {
                panic!("n={n} {step}: child failed ({}):\n{stdout}", out.status);
            };
            let field = |k: &str| {
                line.split_whitespace()
                    .find_map(|f| f.strip_prefix(&format!("{k}=")))
                    .unwrap_or("?")
                    .to_string()
            };
            let secs: f64 = field("secs").parse().unwrap_or(f64::NAN);
            if step == "find" {
                find_secs = Some(secs);
            }
            let ratio = match (step, find_secs) {
                ("audit" | "adopt", Some(f)) => format!("{:.2}", secs / f),
                _ => String::new(),
            };
            let detail: Vec<&str> = line.split_whitespace().skip(5).collect();
            let kib: f64 = field("peak_rss_kib").parse().unwrap_or(0.0);
            println!(
                "| {n} | {step} | {secs:.2} | {ratio} | {:.1} MiB | {} |",
                kib / 1024.0,
                detail.join(" ")
            );
        }
    }
}
