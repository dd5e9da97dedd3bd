//! `content_hash()` throughput against raw SHA-256 over the same document's BSON bytes.
//!
//! For each size (~200 B, ~4 KB, ~64 KB of BSON) the group holds:
//! * `raw_sha256_bson`: SHA-256 over `bson::to_vec(&doc)`, the bytes precomputed outside the
//!   timed loop — the floor: hashing the document's bytes and nothing else.
//! * `content_hash`: `doc.content_hash()` (streaming canonical encoding + SHA-256).
//!   Target (issue #15): ≥ 60% of the floor's throughput at 269 B, ≥ 85% at 4 KB.
//! * `bson_to_vec_then_sha256`: serializing to BSON inside the loop, then hashing — what a
//!   hand-rolled "hash the BSON" recipe costs (for reference; not canonical for maps).
//!
//! Throughput is reported against the BSON size of the document for all three, so the numbers
//! compare like for like.
//!
//! After the criterion groups, the throughput ratio content_hash/raw is also measured *paired*
//! (alternating rounds of both, median of the per-round ratios), which holds up on a loaded
//! machine.
//!
//! Run: `cargo bench --bench content_hash -- --warm-up-time 1 --measurement-time 3`

use std::collections::HashMap;
use std::hint::black_box;

mod support;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use natural_key::bson;
use natural_key::prelude::*;
use sha2::{Digest, Sha256};

#[derive(NaturalKey, Serialize, Deserialize)]
struct Article {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    title: String,
    author: String,
    body: String,
    tags: HashMap<String, String>,
    categories: Vec<String>,
    views: u64,
    rating: f64,
    word_count: i32,
    draft: bool,
}

#[rustfmt::skip]
const WORDS: &[&str] = &[
    "ingest", "idempotent", "natural", "key", "mongodb", "document", "batch", "stream", "hash",
    "content", "identity", "timestamp", "writer", "reader", "collection", "index", "the", "a",
    "of", "and", "to", "in", "is", "that", "with", "for", "on", "by",
];

/// Deterministic prose of about `bytes` bytes.
fn prose(seed: usize, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    let mut i = seed;
    while s.len() < bytes {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[i % WORDS.len()]);
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s.truncate(bytes);
    s
}

/// An article whose BSON encoding is about `target` bytes: 1/8 of the budget in tags and
/// categories, the rest in the body.
fn article(target: usize) -> Article {
    let n_tags = (target / 256).clamp(1, 64);
    let n_cats = (target / 512).clamp(1, 32);
    let tags = (0..n_tags)
        .map(|i| (format!("tag-{i}"), prose(i, 8)))
        .collect::<HashMap<_, _>>();
    let categories = (0..n_cats).map(|i| prose(100 + i, 10)).collect::<Vec<_>>();
    let mut a = Article {
        slug: "how-we-made-ingest-idempotent".into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: "How we made ingest idempotent".into(),
        author: "Ada".into(),
        body: String::new(),
        tags,
        categories,
        views: 12_345,
        rating: 4.25,
        word_count: 0,
        draft: false,
    };
    let overhead = bson::to_vec(&a).unwrap().len();
    a.body = prose(7, target.saturating_sub(overhead + 1));
    a.word_count = a.body.split(' ').count() as i32;
    a
}

fn content_hash(c: &mut Criterion) {
    for (label, target) in [("200B", 200), ("4KB", 4096), ("64KB", 65536)] {
        let doc = article(target);
        let bytes = bson::to_vec(&doc).unwrap();
        eprintln!(
            "content_hash/{label}: BSON {} bytes, {} tags, {} categories",
            bytes.len(),
            doc.tags.len(),
            doc.categories.len()
        );
        let mut g = c.benchmark_group(format!("content_hash/{label}"));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(BenchmarkId::from_parameter("raw_sha256_bson"), |b| {
            b.iter(|| Sha256::digest(black_box(&bytes[..])))
        });
        g.bench_function(BenchmarkId::from_parameter("content_hash"), |b| {
            b.iter(|| black_box(&doc).content_hash().unwrap())
        });
        g.bench_function(
            BenchmarkId::from_parameter("bson_to_vec_then_sha256"),
            |b| b.iter(|| Sha256::digest(bson::to_vec(black_box(&doc)).unwrap())),
        );
        g.finish();
    }
}

/// Throughput of `content_hash()` as a fraction of raw SHA-256's, paired.
fn paired() {
    for (label, target, inner) in [
        ("200B", 200, 20_000),
        ("4KB", 4096, 2_000),
        ("64KB", 65536, 100),
    ] {
        let doc = article(target);
        let bytes = bson::to_vec(&doc).unwrap();
        // time(raw)/time(content_hash) = throughput(content_hash)/throughput(raw).
        let (p10, p50, p90) = support::paired_ratio(
            300,
            inner,
            || {
                black_box(Sha256::digest(black_box(&bytes[..])));
            },
            || {
                black_box(black_box(&doc).content_hash().unwrap());
            },
        );
        println!(
            "paired throughput content_hash / raw_sha256_bson at {label} ({} B): median \
             {:.0}% (p10 {:.0}%, p90 {:.0}%){}",
            bytes.len(),
            p50 * 100.0,
            p10 * 100.0,
            p90 * 100.0,
            match label {
                "200B" => "; target >= 60%",
                "4KB" => "; target >= 85%",
                _ => "",
            }
        );
    }
}

criterion_group!(benches, content_hash);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Not under `cargo test --benches` (no `--bench` argument): that run only smoke-tests.
    if support::invoked_by_cargo_bench() {
        paired();
    }
}
