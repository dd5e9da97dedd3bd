//! `id()` of a derived type against its floor and the usual alternatives, in one run.
//!
//! * `floor_sha256_from_parts`: SHA-256 over exactly the bytes the default scheme hashes for
//!   this post (docs/id-scheme.md), then `Ulid::from_parts` — what any implementation of the
//!   scheme must do at least.
//! * `derived_default`: `Post::id()` (default scheme). Target (issue #15): ≤ 1.10× the floor.
//! * `floor_joined` / `derived_joined`: the same for the joined (seed) scheme.
//! * `ulid_new_random`, `uuid_v5`: the alternatives people reach for.
//!
//! After the criterion groups, the ratios derived/floor are also measured *paired* (alternating
//! rounds of both, median of the per-round ratios), which holds up on a loaded machine.
//!
//! Run: `cargo bench --bench id -- --warm-up-time 1 --measurement-time 3`

mod support;

use std::hint::black_box;

use criterion::{criterion_group, Criterion};
use natural_key::prelude::*;
use sha2::{Digest, Sha256};

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(scheme = "joined")]
struct JoinedPost {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

const SLUG: &str = "how-we-made-ingest-idempotent-with-natural-keys";
const LANG: &str = "zh-TW";
const TS: i64 = 1_700_000_000_000;

/// The default scheme written out by hand: prefix, u32be namespace length (0), then for each
/// key tag 0x01, u32be length, UTF-8 bytes.
fn floor_default(slug: &str, lang: &str, ts: i64) -> Ulid {
    let mut h = Sha256::new();
    h.update(b"natural-key/v1\0");
    h.update(0u32.to_be_bytes());
    for k in [slug, lang] {
        h.update([0x01]);
        h.update((k.len() as u32).to_be_bytes());
        h.update(k.as_bytes());
    }
    from_digest(ts, &h.finalize().into())
}

/// The joined scheme by hand: `sha256(slug + ":" + lang)`.
fn floor_joined(slug: &str, lang: &str, ts: i64) -> Ulid {
    let mut h = Sha256::new();
    h.update(slug.as_bytes());
    h.update(b":");
    h.update(lang.as_bytes());
    from_digest(ts, &h.finalize().into())
}

fn from_digest(ts: i64, d: &[u8; 32]) -> Ulid {
    let mut low = [0u8; 16];
    low[6..].copy_from_slice(&d[..10]);
    Ulid::from_parts(ts as u64, u128::from_be_bytes(low))
}

fn ids(c: &mut Criterion) {
    let post = Post {
        slug: SLUG.into(),
        lang: LANG.into(),
        published_at: TS,
        body: "x".repeat(2000),
    };
    let joined = JoinedPost {
        slug: SLUG.into(),
        lang: LANG.into(),
        published_at: TS,
        body: "x".repeat(2000),
    };
    // The floors compute the very same ids (otherwise the comparison would be meaningless).
    assert_eq!(post.id().unwrap(), floor_default(SLUG, LANG, TS));
    assert_eq!(joined.id().unwrap(), floor_joined(SLUG, LANG, TS));

    let mut g = c.benchmark_group("id");
    g.bench_function("floor_sha256_from_parts", |b| {
        b.iter(|| floor_default(black_box(&post.slug), black_box(&post.lang), black_box(TS)))
    });
    g.bench_function("derived_default", |b| {
        b.iter(|| black_box(&post).id().unwrap())
    });
    g.bench_function("floor_joined", |b| {
        b.iter(|| {
            floor_joined(
                black_box(&joined.slug),
                black_box(&joined.lang),
                black_box(TS),
            )
        })
    });
    g.bench_function("derived_joined", |b| {
        b.iter(|| black_box(&joined).id().unwrap())
    });
    g.bench_function("ulid_new_random", |b| b.iter(Ulid::new));
    let ns = uuid::Uuid::NAMESPACE_URL;
    let name = format!("{SLUG}:{LANG}");
    g.bench_function("uuid_v5", |b| {
        b.iter(|| uuid::Uuid::new_v5(black_box(&ns), black_box(name.as_bytes())))
    });
    g.finish();
}

/// derived/floor, paired, for both schemes.
fn paired() {
    let post = Post {
        slug: SLUG.into(),
        lang: LANG.into(),
        published_at: TS,
        body: String::new(),
    };
    let joined = JoinedPost {
        slug: SLUG.into(),
        lang: LANG.into(),
        published_at: TS,
        body: String::new(),
    };
    let (p10, p50, p90) = support::paired_ratio(
        400,
        20_000,
        || {
            black_box(black_box(&post).id().unwrap());
        },
        || {
            black_box(floor_default(
                black_box(SLUG),
                black_box(LANG),
                black_box(TS),
            ));
        },
    );
    println!(
        "paired ratio id/derived_default / id/floor_sha256_from_parts: median {p50:.3} \
         (p10 {p10:.3}, p90 {p90:.3}; target <= 1.10)"
    );
    let (p10, p50, p90) = support::paired_ratio(
        400,
        20_000,
        || {
            black_box(black_box(&joined).id().unwrap());
        },
        || {
            black_box(floor_joined(
                black_box(SLUG),
                black_box(LANG),
                black_box(TS),
            ));
        },
    );
    println!(
        "paired ratio id/derived_joined / id/floor_joined: median {p50:.3} \
         (p10 {p10:.3}, p90 {p90:.3})"
    );
}

criterion_group!(benches, ids);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Not under `cargo test --benches` (no `--bench` argument): that run only smoke-tests.
    if support::invoked_by_cargo_bench() {
        paired();
    }
}
