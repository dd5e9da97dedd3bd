//! What a version field costs, on the real engine (`scripts/db up`, or `MONGODB_URI`): three
//! re-ingests of `NK_BENCH_DOCS` (default 10,000) posts of ~2 KB, alternated repetition by
//! repetition so that the machine's drifting load falls on all three alike:
//!
//! * (u) `upsert_many` of unchanged posts into a collection of a type without a version — the
//!   baseline;
//! * (v) the same with a `#[natural_key(version)]` field (each post at the stored version);
//! * (s) a stale replay: every post at an older version, with other content — what an
//!   accidental re-run of yesterday's export sends.
//!
//! The goals (docs/performance.md, "Versions"): (v) within 1.1× of (u), (s) as cheap as (v).
//! Last, what tombstones cost: `collStats` of (v) before and after every post is deleted.
//! Each scenario runs once first on a client that counts commands, and checks that none of
//! the three sends a write: the guard read decides all of it. No timing is asserted.
//!
//! Run: `cargo bench --bench versions` (`NK_BENCH_REPS`, default 7).

mod support;

use std::time::{Duration, Instant};

use natural_key::prelude::*;
use natural_key::{BatchReport, Collection};
use support::posts::corpus;
use support::{counting_client, drop_collection, env_usize, median, plain_client, Wire};

/// The bench post with a version.
#[derive(NaturalKey, Serialize, Deserialize, Clone)]
struct Versioned {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    rev: u64,
    title: String,
    author: String,
    body: String,
    tags: Vec<String>,
    views: u64,
}

fn versioned(docs: &[support::posts::Post], rev: u64) -> Vec<Versioned> {
    docs.iter()
        .map(|p| Versioned {
            slug: p.slug.clone(),
            lang: p.lang.clone(),
            published_at: p.published_at,
            rev,
            title: p.title.clone(),
            author: p.author.clone(),
            // An older version holds other content: a replay is stale, not unchanged.
            body: if rev == 1 {
                format!("{} (old)", p.body)
            } else {
                p.body.clone()
            },
            tags: p.tags.clone(),
            views: p.views,
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let smoke = !support::invoked_by_cargo_bench();
    let n = env_usize("NK_BENCH_DOCS", if smoke { 200 } else { 10_000 });
    let reps = env_usize("NK_BENCH_REPS", if smoke { 1 } else { 7 }).max(1);
    let uri = support::uri();
    let wire = Wire::default();
    let plain = plain_client(&uri).await.database("nk_bench_versions");
    let counted = counting_client(&uri, &wire)
        .await
        .database("nk_bench_versions");
    plain.drop().await.unwrap();

    let docs = corpus(n);
    let today = versioned(&docs, 2);
    let yesterday = versioned(&docs, 1);
    let u_plain = plain.collection::<support::posts::Post>("u");
    let v_plain = plain.collection::<Versioned>("v");
    drop_collection(&u_plain).await;
    drop_collection(&v_plain).await;
    let u = Collection::new(u_plain).await.unwrap();
    let v = Collection::<Versioned>::new(v_plain).await.unwrap();
    u.upsert_many(&docs).await.unwrap();
    v.upsert_many(&today).await.unwrap();
    let u_counted = Collection::<support::posts::Post>::open(&counted, "u")
        .await
        .unwrap();
    let v_counted = Collection::<Versioned>::open(&counted, "v").await.unwrap();
    eprintln!("versions: {n} posts, {reps} timed repetitions + 1 counted");

    let (mut tu, mut tv, mut ts) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..=reps {
        let counting = rep == 0;
        let time = |d: Duration| d.as_secs_f64();
        wire.take();
        let at = Instant::now();
        let r = match counting {
            true => u_counted.upsert_many(&docs).await,
            false => u.upsert_many(&docs).await,
        };
        let du = at.elapsed();
        check("u", r.unwrap(), n, 0, &wire, counting);
        let at = Instant::now();
        let r = match counting {
            true => v_counted.upsert_many(&today).await,
            false => v.upsert_many(&today).await,
        };
        let dv = at.elapsed();
        check("v", r.unwrap(), n, 0, &wire, counting);
        let at = Instant::now();
        let r = match counting {
            true => v_counted.upsert_many(&yesterday).await,
            false => v.upsert_many(&yesterday).await,
        };
        let ds = at.elapsed();
        check("s", r.unwrap(), 0, n, &wire, counting);
        if !counting {
            tu.push(time(du));
            tv.push(time(dv));
            ts.push(time(ds));
        }
    }
    let ratios =
        |x: &[f64], y: &[f64]| -> Vec<f64> { x.iter().zip(y).map(|(a, b)| a / b).collect() };
    println!("| scenario | median s | docs/s |");
    println!("|---|---|---|");
    for (key, what, t) in [
        ("u", "unchanged re-ingest, no version (baseline)", &tu),
        ("v", "unchanged re-ingest, with a version", &tv),
        ("s", "stale replay (every post older)", &ts),
    ] {
        let m = median(t);
        println!("| ({key}) {what} | {m:.3} | {:.0} |", n as f64 / m);
    }
    println!(
        "v/u median {:.2} (goal ≤ 1.10); s/v median {:.2} (goal ≈ 1.00)",
        median(&ratios(&tv, &tu)),
        median(&ratios(&ts, &tv))
    );

    // What a tombstone costs: the collection's size as the engine reports it, before and after
    // every post is deleted (each leaving a tombstone).
    let before = stats(&plain, "v").await;
    let r = v.delete_many(&today).await.unwrap();
    assert_eq!(r.deleted as usize, n, "{r:?}");
    let after = stats(&plain, "v").await;
    println!("| collStats of (v) | documents | size (B) | storageSize (B) | B per document |");
    println!("|---|---|---|---|---|");
    for (what, s) in [("live posts", before), ("their tombstones", after)] {
        let per =
            s.1.zip(s.0)
                .map_or("n/a".into(), |(b, c)| format!("{:.0}", b as f64 / c as f64));
        let show = |x: Option<i64>| x.map_or("n/a".into(), |x| x.to_string());
        println!(
            "| {what} | {} | {} | {} | {per} |",
            show(s.0),
            show(s.1),
            show(s.2)
        );
    }
}

/// `count`, `size` and `storageSize` of `collStats` (`None` where the engine leaves one out).
async fn stats(
    db: &natural_key::mongodb::Database,
    coll: &str,
) -> (Option<i64>, Option<i64>, Option<i64>) {
    let reply = db
        .run_command(natural_key::bson::doc! {"collStats": coll})
        .await
        .unwrap_or_default();
    let num = |k: &str| match reply.get(k) {
        Some(natural_key::bson::Bson::Int32(x)) => Some(i64::from(*x)),
        Some(natural_key::bson::Bson::Int64(x)) => Some(*x),
        Some(natural_key::bson::Bson::Double(x)) => Some(*x as i64),
        _ => None,
    };
    (num("count"), num("size"), num("storageSize"))
}

/// Every post settled as expected, and (on the counting run) no write sent.
fn check(key: &str, r: BatchReport, unchanged: usize, stale: usize, wire: &Wire, counting: bool) {
    assert!(r.failures.is_empty(), "({key}) {:?}", r.failures);
    assert_eq!(
        (r.unchanged as usize, r.stale as usize),
        (unchanged, stale),
        "({key}) {r:?}"
    );
    let sent = wire.take();
    if counting {
        assert_eq!(
            sent.write_commands(),
            0,
            "({key}) sent writes: {}",
            sent.summary()
        );
    }
}
