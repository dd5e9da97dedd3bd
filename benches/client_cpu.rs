//! The client's CPU per document on the batch path, against the sum of its floors.
//!
//! * `client work`: what `upsert_many` computes for a first-ingest batch before anything is
//!   sent — the id, the identity, the content hash, the stored BSON, the `insert` commands
//!   (`Collection::__first_ingest_client_work`, which runs the batch path's own plan and
//!   command builder and sends nothing);
//! * `floors`: per document, SHA-256 over the key bytes of the default scheme, `bson::to_vec`
//!   of the post and SHA-256 over that BSON — what any implementation must at least do.
//!
//! The posts are the ingest bench's (~2 KB of BSON). The two sides alternate in rounds of one
//! batch each; the ratio is the median of the per-round ratios (p10–p90 beside it), which holds
//! up on a loaded machine. A handle is opened on the engine once (it reads the deployment and
//! creates the indexes); nothing is written.
//!
//! Run: `cargo bench --bench client_cpu` (`NK_BENCH_DOCS`, default 1,000 per batch;
//! `NK_BENCH_ROUNDS`, default 300).

mod support;

use std::hint::black_box;
use std::time::Instant;

use natural_key::bson;
use natural_key::prelude::*;
use natural_key::Collection;
use sha2::{Digest, Sha256};
use support::posts::{corpus, Post};
use support::{env_usize, plain_client};

/// The floors of one post: the key bytes' SHA-256, its BSON, and the BSON's SHA-256.
fn floors(p: &Post) -> ([u8; 32], [u8; 32], usize) {
    let mut h = Sha256::new();
    h.update(b"natural-key/v1\0");
    h.update(0u32.to_be_bytes());
    for k in [&p.slug, &p.lang] {
        h.update([0x01]);
        h.update((k.len() as u32).to_be_bytes());
        h.update(k.as_bytes());
    }
    let bytes = bson::to_vec(p).expect("a post serializes");
    (
        h.finalize().into(),
        Sha256::digest(&bytes).into(),
        bytes.len(),
    )
}

fn per_doc_ns(secs: f64, docs: usize, rounds: usize) -> f64 {
    secs * 1e9 / (docs * rounds) as f64
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let bench = support::invoked_by_cargo_bench();
    let n = env_usize("NK_BENCH_DOCS", if bench { 1_000 } else { 20 });
    let rounds = env_usize("NK_BENCH_ROUNDS", if bench { 300 } else { 2 }).max(1);
    let uri = support::uri();
    let db = plain_client(&uri).await.database("nk_bench_client_cpu");
    let coll = Collection::<Post>::new(db.collection("posts"))
        .await
        .expect("open the handle");
    let docs = corpus(n);
    // The floor hashes the bytes the id hashes: the same identity, or the comparison is moot.
    for p in &docs {
        assert_eq!(floors(p).0, *p.identity().unwrap().as_bytes());
    }
    let bytes = coll.__first_ingest_client_work(&docs).expect("client work");
    let avg_bson = docs.iter().map(|p| floors(p).2).sum::<usize>() as f64 / n as f64;
    println!(
        "client_cpu on {:?}: {n} posts of {avg_bson:.0} B of BSON, insert commands {bytes} B, \
         {rounds} rounds",
        coll.deployment().engine(),
    );

    let work = || black_box(coll.__first_ingest_client_work(black_box(&docs)).unwrap());
    let floor = || {
        for p in black_box(&docs) {
            black_box(floors(p));
        }
    };
    // Parts of the work, for the table: each over the same posts.
    let parts: [(&str, &dyn Fn()); 3] = [
        ("id() + identity", &|| {
            for p in black_box(&docs) {
                black_box(p.identity().unwrap());
                black_box(p.id().unwrap());
            }
        }),
        ("content_hash()", &|| {
            for p in black_box(&docs) {
                black_box(p.content_hash().unwrap());
            }
        }),
        ("bson::to_raw_document_buf", &|| {
            for p in black_box(&docs) {
                black_box(bson::to_raw_document_buf(p).unwrap());
            }
        }),
    ];
    let (mut t_work, mut t_floor) = (0.0, 0.0);
    let mut ratios = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        work();
        let a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        floor();
        let b = t.elapsed().as_secs_f64();
        t_work += a;
        t_floor += b;
        ratios.push(a / b);
    }
    ratios.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
    println!(
        "  client work        {:>8.0} ns/doc",
        per_doc_ns(t_work, n, rounds)
    );
    println!(
        "  floors             {:>8.0} ns/doc",
        per_doc_ns(t_floor, n, rounds)
    );
    for (name, f) in parts {
        let t = Instant::now();
        for _ in 0..rounds.div_ceil(3) {
            f();
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "    {name:<26} {:>8.0} ns/doc",
            per_doc_ns(secs, n, rounds.div_ceil(3))
        );
    }
    println!(
        "client work / floors, paired: median {:.2}x (p10 {:.2}, p90 {:.2}); target <= 1.3x",
        q(0.5),
        q(0.1),
        q(0.9)
    );
}
