//! Peak RSS of a streaming ingest (`upsert_stream`) of generated documents, for several N, to
//! show that memory does not grow with the number of documents.
//!
//! Each N runs in a child process of its own (peak RSS is per process): the child builds a
//! `futures::stream::iter` over a lazy iterator of ~300 B documents (nothing is materialized),
//! ingests it into a fresh collection with `upsert_stream`, samples `VmRSS` after every tenth
//! of the batches, and reports `VmHWM` (peak RSS) from /proc/self/status at the end.
//!
//! Run: `cargo bench --bench stream_rss`. Environment: `NK_RSS_DOCS` (comma-separated list of
//! N, default `10000,100000,1000000`), `NK_BENCH_BATCH` (default: the library's),
//! `MONGODB_URI` (else `scripts/db up`). No assertion on time or memory; the numbers are
//! printed. Under `cargo test --benches` it is a smoke pass of 3,000 documents.

mod support;

use std::process::Command;
use std::time::Instant;

use natural_key::prelude::*;
use support::{drop_collection, env_usize, peak_rss_kib, plain_client, rss_kib};

#[derive(NaturalKey, Serialize, Deserialize)]
struct Reading {
    #[key]
    device: String,
    #[key]
    seq: u64,
    #[key(timestamp)]
    at: i64,
    unit: String,
    note: String,
    values: Vec<f64>,
}

fn reading(i: u64) -> Reading {
    Reading {
        device: format!("device-{:04}", i % 1000),
        seq: i,
        at: 1_700_000_000_000 + i as i64,
        unit: "celsius".into(),
        note: format!("{:0>150}", i),
        values: (0..8).map(|k| (i as f64) * 0.5 + k as f64).collect(),
    }
}

fn child(n: u64) {
    let batch = env_usize("NK_BENCH_BATCH", natural_key::DEFAULT_BATCH_SIZE);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let uri = support::uri();
        let coll = plain_client(&uri)
            .await
            .database("nk_bench_stream")
            .collection::<Reading>(&format!("readings_{n}"));
        drop_collection(&coll).await;
        let readings = natural_key::Collection::new(coll).await.unwrap();
        let bson_size = natural_key::bson::to_vec(&reading(n / 2)).unwrap().len();
        let rss_start = rss_kib().unwrap_or(0);
        let total_batches = n.div_ceil(batch as u64).max(1);
        let every = (total_batches / 10).max(1);
        let mut samples: Vec<(u64, u64)> = Vec::new();
        let t = Instant::now();
        let docs = futures::stream::iter((0..n).map(reading));
        let report = readings
            .upsert_stream(docs)
            .batch_size(batch)
            .on_progress(|r| {
                if r.batches % every == 0 {
                    samples.push((r.processed(), rss_kib().unwrap_or(0)));
                    eprintln!(
                        "  n={n}: {} docs, {:.0} s, VmRSS {} KiB",
                        r.processed(),
                        t.elapsed().as_secs_f64(),
                        rss_kib().unwrap_or(0)
                    );
                }
            })
            .await
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(report.inserted, n);
        assert!(report.failures.is_empty());
        let peak = peak_rss_kib().unwrap_or(0);
        let samples: Vec<String> = samples
            .iter()
            .map(|(d, kib)| format!("{d}:{kib}"))
            .collect();
        // One machine-readable line for the parent.
        println!(
            "RESULT n={n} bson_bytes={bson_size} batch={batch} secs={secs:.1} docs_per_s={:.0} \
             rss_start_kib={rss_start} peak_rss_kib={peak} samples={}",
            n as f64 / secs,
            samples.join(",")
        );
        // Leave the engine small for whoever runs next.
        readings.inner().drop().await.unwrap();
    });
}

fn main() {
    if let Ok(n) = std::env::var("NK_RSS_CHILD") {
        child(
            n.replace('_', "")
                .parse()
                .expect("NK_RSS_CHILD is a number"),
        );
        return;
    }
    // Under `cargo test --benches` (no `--bench` argument): a smoke pass of 3,000 documents.
    let smoke = !support::invoked_by_cargo_bench();
    let default = if smoke {
        "3000"
    } else {
        "10000,100000,1000000"
    };
    let list = std::env::var("NK_RSS_DOCS").unwrap_or_else(|_| default.into());
    let uri = support::uri();
    let exe = std::env::current_exe().unwrap();
    let mut results = Vec::new();
    for n in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        eprintln!("stream_rss: n={n}");
        let out = Command::new(&exe)
            .env("NK_RSS_CHILD", n)
            .env("MONGODB_URI", &uri)
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run the child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().find(|l| l.starts_with("RESULT ")) {
            Some(line) if out.status.success() => {
                println!("{line}");
                results.push(line.to_string());
            }
            _ => panic!("n={n}: child failed ({}):\n{stdout}", out.status),
        }
    }
    println!();
    println!("| N | secs | docs/s | RSS at start KiB | peak RSS (VmHWM) KiB |");
    println!("|---:|---:|---:|---:|---:|");
    for line in &results {
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("{k}=")))
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            field("n"),
            field("secs"),
            field("docs_per_s"),
            field("rss_start_kib"),
            field("peak_rss_kib")
        );
    }
}
