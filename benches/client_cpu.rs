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
    let mut bson_bytes = 0;
    for p in &docs {
        let (key, _, len) = floors(p);
        assert_eq!(key, *p.identity().unwrap().as_bytes());
        bson_bytes += len;
    }
    let avg_bson = bson_bytes as f64 / n as f64;
    let bytes = coll.__first_ingest_client_work(&docs).expect("client work");
    println!(
        "client_cpu on {:?}: {n} posts of {avg_bson:.0} B of BSON, insert commands {bytes} B, \
         {rounds} rounds",
        coll.deployment().engine(),
    );

    let work = || {
        black_box(coll.__first_ingest_client_work(black_box(&docs)).unwrap());
    };
    let floor = || {
        for p in black_box(&docs) {
            black_box(floors(p));
        }
    };
    let (p10, p50, p90) = support::paired_ratio(rounds, 1, work, floor);
    // Per document: the two sides, then the parts of the work, each over the same posts.
    let lines: [(&str, &dyn Fn()); 5] = [
        ("client work", &work),
        ("floors", &floor),
        ("  id() + identity", &|| {
            for p in black_box(&docs) {
                black_box(p.identity().unwrap());
                black_box(p.id().unwrap());
            }
        }),
        ("  content_hash()", &|| {
            for p in black_box(&docs) {
                black_box(p.content_hash().unwrap());
            }
        }),
        ("  bson::to_raw_document_buf", &|| {
            for p in black_box(&docs) {
                black_box(bson::to_raw_document_buf(p).unwrap());
            }
        }),
    ];
    let reps = rounds.div_ceil(3);
    for (name, f) in lines {
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / (n * reps) as f64;
        println!("  {name:<28} {ns:>8.0} ns/doc");
    }
    println!(
        "client work / floors, paired: median {p50:.2}x (p10 {p10:.2}, p90 {p90:.2}); target <= 1.3x"
    );
}
