//! Ingest into the real engine (FerretDB from `scripts/db up`, or `MONGODB_URI`): a plain
//! measured harness (each scenario needs a prepared collection per repetition), printing a
//! table of medians and the ratios against the baselines measured in the same run.
//!
//! Scenarios, over `NK_BENCH_DOCS` (default 10,000) posts of ~2 KB:
//! * (a) blind driver `insert_many` with random ids into an empty collection — the floor;
//! * (a2) driver `insert_many` of the documents exactly as `upsert_many` stores them (derived
//!   `_id`, `_nk_identity`, `_nk_hash`) into an empty collection with the identity index: what
//!   the engine charges for the stored format, without any library code;
//! * (b) the recipe one document at a time on a re-ingest of unchanged data: per document
//!   `find_one({_id})` of the stored hash, then `update_one(upsert)` if it differs;
//! * (c) `upsert_many` first ingest into an empty collection (its handle opened, which
//!   creates the indexes, before the timing);
//! * (d) `upsert_many` re-ingest of unchanged data, alternated with (d0), its floor: one
//!   driver `find` of the same documents by `_id` with the same projection, read as raw
//!   documents;
//! * (e) `upsert_many` re-ingest with 1% of the documents changed.
//!
//! Each scenario first runs once, untimed, on a client that counts the commands and the
//! documents/statements they carry (from `CommandStartedEvent.command`), and checks them (the
//! library's handles are opened beforehand, so the index and deployment commands of opening
//! are not counted: only what a write call sends); then
//! `NK_BENCH_REPS` (default 3; `NK_BENCH_PAIRED_REPS`, default 7, for (a) and (c), which run
//! alternately) timed repetitions run on a client without monitoring. (b) is
//! slow (one round trip per document), so it runs `NK_BENCH_NAIVE_REPS` (default 1) times on
//! the counting client and every run is timed: monitoring a small `find` costs microseconds
//! against its milliseconds of round trip.
//!
//! Run: `cargo bench --bench ingest` (smoke: `NK_BENCH_DOCS=500 NK_BENCH_REPS=1 cargo bench
//! --bench ingest`); on mongo-java-server: `NK_BENCH_ENGINE=java cargo bench --bench ingest`
//! (or any engine through `MONGODB_URI`). `NK_BENCH_BATCH` sets `upsert_many`'s batch size (default: the library's);
//! `NK_BENCH_SCENARIOS` (default `a,a2,c,d,b,e`) picks scenarios; `NK_BENCH_A2_CALLS` splits
//! (a2) into that many `insert_many` calls; `NK_BENCH_AFTER_SEED`, a
//! shell command, runs once the collection of (d), (b) and (e) is seeded. No timing is
//! asserted; only the wire counts are checked.

mod support;

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use natural_key::bson::{self, doc, Document};
use natural_key::mongodb::{self, Database};
use natural_key::prelude::*;
use natural_key::{Collection, HASH_FIELD, IDENTITY_FIELD};
use support::posts::{corpus, Post};
use support::{
    counting_client, drop_collection, env_usize, median, plain_client, Wire, WireCounts,
};

/// The same content under a random id, for the blind-insert floor.
#[derive(Serialize, Deserialize)]
struct RandomPost {
    #[serde(rename = "_id")]
    id: String,
    slug: String,
    lang: String,
    published_at: i64,
    title: String,
    author: String,
    body: String,
    tags: Vec<String>,
    views: u64,
}

fn random_ids(docs: &[Post]) -> Vec<RandomPost> {
    docs.iter()
        .map(|p| RandomPost {
            id: Ulid::new().to_string(),
            slug: p.slug.clone(),
            lang: p.lang.clone(),
            published_at: p.published_at,
            title: p.title.clone(),
            author: p.author.clone(),
            body: p.body.clone(),
            tags: p.tags.clone(),
            views: p.views,
        })
        .collect()
}

/// The documents exactly as `upsert_many` stores them (derived `_id`, the document,
/// `_nk_identity`, `_nk_hash`), for the engine's own cost of that format: (a2).
fn stored_format(docs: &[Post]) -> Vec<Document> {
    docs.iter()
        .map(|p| {
            let mut d = doc! { "_id": p.id().unwrap().to_string() };
            d.extend(bson::to_document(p).unwrap());
            d.insert(IDENTITY_FIELD, p.identity().unwrap().to_string());
            d.insert(HASH_FIELD, p.content_hash().unwrap().to_string());
            d
        })
        .collect()
}

/// `docs` with exactly the documents at indexes ≡ 0 (mod 100) edited, differently per `round`.
fn one_percent_changed(docs: &[Post], round: usize) -> (Vec<Post>, usize) {
    let mut out = docs.to_vec();
    let mut n = 0;
    for p in out.iter_mut().step_by(100) {
        p.body.push_str(&format!(" (edit {round})"));
        n += 1;
    }
    (out, n)
}

/// A pause before a timed run, after dropping and creating collections, so that work the
/// engine defers (SQLite freeing pages, checkpointing its log) lands outside the timing.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn timed<F: IntoFuture>(f: F) -> (Duration, F::Output) {
    let t = Instant::now();
    let out = f.into_future().await;
    (t.elapsed(), out)
}

struct Row {
    key: &'static str,
    what: &'static str,
    secs: Vec<f64>,
    wire: WireCounts,
}

/// Prints the per-repetition ratios x/y of two alternated scenarios, sorted, and their median.
fn print_paired(label: &str, x: &[f64], y: &[f64], note: &str) {
    let mut ratios: Vec<f64> = x.iter().zip(y).map(|(x, y)| x / y).collect();
    ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let list: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!(
        "{label} per repetition, sorted: {} (median {:.2}{note})",
        list.join(", "),
        median(&ratios)
    );
}

/// An empty collection `name`, opened (indexes created).
async fn fresh(db: &Database, name: &str) -> Collection<Post> {
    let coll = db.collection::<Post>(name);
    drop_collection(&coll).await;
    Collection::new(coll).await.unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // Under `cargo test --benches` (no `--bench` argument): a smoke pass on 200 posts, which
    // still checks every scenario's counts on the wire.
    let smoke = !support::invoked_by_cargo_bench();
    let n = env_usize("NK_BENCH_DOCS", if smoke { 200 } else { 10_000 });
    let reps = env_usize("NK_BENCH_REPS", if smoke { 1 } else { 3 }).max(1);
    let naive_reps = env_usize("NK_BENCH_NAIVE_REPS", 1).max(1);
    // (a) and (c) take seconds and vary most with the machine's load: more repetitions.
    let paired_reps = env_usize("NK_BENCH_PAIRED_REPS", if smoke { 1 } else { 7 }).max(1);
    let batch = env_usize("NK_BENCH_BATCH", natural_key::DEFAULT_BATCH_SIZE);
    let a2_calls = env_usize("NK_BENCH_A2_CALLS", 1).max(1);
    let scenarios = std::env::var("NK_BENCH_SCENARIOS").unwrap_or_else(|_| "a,a2,c,d,b,e".into());
    let want = |k: &str| scenarios.split(',').any(|s| s.trim() == k);
    let uri = support::uri();
    let wire = Wire::default();
    let plain = plain_client(&uri).await.database("nk_bench_ingest");
    let counted = counting_client(&uri, &wire)
        .await
        .database("nk_bench_ingest");
    plain.drop().await.unwrap();
    let engine = natural_key::Deployment::detect(plain.client())
        .await
        .expect("the engine answers hello")
        .engine()
        .clone();

    let docs = corpus(n);
    let avg_bson = docs
        .iter()
        .map(|p| bson::to_vec(p).unwrap().len())
        .sum::<usize>() as f64
        / n as f64;
    eprintln!(
        "ingest on {engine:?}: {n} posts, {avg_bson:.0} B of BSON each on average, batch size \
         {batch}, {reps} timed repetitions + 1 counted ((b): {naive_reps} counted and timed)"
    );
    let db_for = |rep: usize| if rep == 0 { &counted } else { &plain };
    let started = Instant::now();
    let log = |key: &str, rep: usize, t: Duration| {
        eprintln!(
            "  ({key}) run {rep}{}: {:.3} s  [{:.0} s since start]",
            if rep == 0 { " (counted, untimed)" } else { "" },
            t.as_secs_f64(),
            started.elapsed().as_secs_f64()
        )
    };
    let mut rows: Vec<Row> = Vec::new();

    if want("a") || want("a2") || want("c") {
        // (a), (a2) and (c) alternate, repetition by repetition, so that drift in the machine's load
        // (or in the engine's data file) affects both alike; the ratio is also reported per
        // repetition.
        let mut row_a = Row {
            key: "a",
            what: "blind insert_many, random ids (floor)",
            secs: vec![],
            wire: Default::default(),
        };
        let mut row_a2 = Row {
            key: "a2",
            what: "driver insert_many of the stored format (derived _id, _nk_identity, _nk_hash) with the identity index",
            secs: vec![],
            wire: Default::default(),
        };
        let stored = stored_format(&docs);
        let mut row_c = Row {
            key: "c",
            what: "upsert_many, first ingest (empty collection with the indexes)",
            secs: vec![],
            wire: Default::default(),
        };
        for rep in 0..=paired_reps {
            if want("a") {
                // (a) Blind insert_many with random ids.
                // Like (c), the timed run follows the drop of the previous repetition's full
                // collection, and a pause for the engine to settle.
                let coll = db_for(rep).collection::<RandomPost>("a");
                drop_collection(&coll).await;
                let rdocs = random_ids(&docs);
                settle().await;
                wire.take();
                let (t, r) = timed(coll.insert_many(&rdocs)).await;
                log("a", rep, t);
                assert_eq!(r.unwrap().inserted_ids.len(), n);
                if rep == 0 {
                    row_a.wire = wire.take();
                    assert_eq!(row_a.wire.inserted_docs, n);
                } else {
                    row_a.secs.push(t.as_secs_f64());
                }
            }
            if want("a2") {
                // (a2) What the engine charges for the stored format alone: no library code.
                let coll = db_for(rep).collection::<Document>("a2");
                drop_collection(&coll).await;
                // Opening a handle creates the indexes; the writes below bypass it.
                Collection::<Post>::open(db_for(rep), "a2").await.unwrap();
                settle().await;
                wire.take();
                // In `a2_calls` calls, one after another (NK_BENCH_A2_CALLS): what the engine
                // charges for as many commands as (c) sends.
                let (t, r) = timed(async {
                    let mut inserted = 0;
                    for part in stored.chunks(n.div_ceil(a2_calls).max(1)) {
                        inserted += coll.insert_many(part).await?.inserted_ids.len();
                    }
                    Ok::<_, mongodb::error::Error>(inserted)
                })
                .await;
                log("a2", rep, t);
                assert_eq!(r.unwrap(), n);
                if rep == 0 {
                    row_a2.wire = wire.take();
                } else {
                    row_a2.secs.push(t.as_secs_f64());
                }
            }
            if want("c") {
                // (c) upsert_many, first ingest into an empty collection with the identity index.
                let posts = fresh(db_for(rep), "posts").await;
                settle().await;
                wire.take();
                let (t, r) = timed(posts.upsert_many(&docs).batch_size(batch)).await;
                log("c", rep, t);
                let r = r.unwrap();
                assert_eq!((r.inserted, r.updated, r.unchanged), (n as u64, 0, 0));
                assert!(r.failures.is_empty());
                if rep == 0 {
                    row_c.wire = wire.take();
                    assert_eq!(
                        (row_c.wire.inserted_docs, row_c.wire.update_statements),
                        (n, 0)
                    );
                } else {
                    row_c.secs.push(t.as_secs_f64());
                }
            }
        }
        for (label, x, y) in [
            ("(c)/(a)", &row_c, &row_a),
            ("(a2)/(a)", &row_a2, &row_a),
            ("(c)/(a2)", &row_c, &row_a2),
        ] {
            if x.secs.is_empty() || y.secs.is_empty() {
                continue;
            }
            print_paired(label, &x.secs, &y.secs, "");
        }
        drop_collection(&plain.collection::<RandomPost>("a")).await;
        drop_collection(&plain.collection::<Document>("a2")).await;
        for row in [row_a, row_a2, row_c] {
            if !row.secs.is_empty() {
                rows.push(row);
            }
        }
        if !want("c") && (want("d") || want("b") || want("e")) {
            let posts = fresh(&plain, "posts").await;
            let r = posts.upsert_many(&docs).batch_size(batch).await.unwrap();
            assert_eq!(r.inserted, n as u64);
        }
    } else if want("d") || want("b") || want("e") {
        let posts = fresh(&plain, "posts").await;
        let r = posts.upsert_many(&docs).batch_size(batch).await.unwrap();
        assert_eq!(r.inserted, n as u64);
    }

    // The "posts" collection now holds `docs`, unchanged, for (d), (b) and then (e): one
    // handle on it per client, opened once (and outside every counted run).
    if let Ok(cmd) = std::env::var("NK_BENCH_AFTER_SEED") {
        // A shell command run at this point only: docs/performance.md adds with it the `_id`
        // index FerretDB 1.24's SQLite backend lacks (scripts/ferretdb_id_path_index.py).
        let status = std::process::Command::new("sh")
            .args(["-c", &cmd])
            .status()
            .expect("NK_BENCH_AFTER_SEED runs");
        assert!(status.success(), "NK_BENCH_AFTER_SEED failed: {cmd}");
    }
    let (posts_counted, posts_plain) = if want("d") || want("e") {
        let counted_posts = Collection::<Post>::open(&counted, "posts").await.unwrap();
        let plain_posts = Collection::<Post>::open(&plain, "posts")
            .deployment(counted_posts.deployment().clone())
            .await
            .unwrap();
        (Some(counted_posts), Some(plain_posts))
    } else {
        (None, None)
    };
    let posts_for = |rep: usize| {
        if rep == 0 {
            posts_counted.as_ref()
        } else {
            posts_plain.as_ref()
        }
        .expect("opened for (d) and (e)")
    };

    if want("d") {
        // (d) upsert_many, re-ingest of unchanged data, alternated with its floor (d0): one
        // driver `find` of the same documents by their ids (the primary key) with the same
        // projection, read as raw documents (what (d) must at least ask the engine for). By
        // `_id`, not `_nk_identity`: on FerretDB 2 / DocumentDB an `$in` of 10,000 values on the
        // secondary index takes ten times as long, no floor (docs/performance.md).
        let mut row = Row {
            key: "d",
            what: "upsert_many, re-ingest unchanged",
            secs: vec![],
            wire: Default::default(),
        };
        let mut row0 = Row {
            key: "d0",
            what: "driver find of the same ids, same projection (the floor of (d))",
            secs: vec![],
            wire: Default::default(),
        };
        let ids: Vec<String> = docs.iter().map(|p| p.id().unwrap().to_string()).collect();
        let projection = doc! { "_id": 1, IDENTITY_FIELD: 1, HASH_FIELD: 1, "_nk_write": 1 };
        for rep in 0..=reps {
            let coll = if rep == 0 { &counted } else { &plain }
                .collection::<bson::RawDocumentBuf>("posts");
            wire.take();
            let find = async {
                let cursor = coll
                    .find(doc! { "_id": { "$in": &ids } })
                    .projection(projection.clone())
                    .await
                    .unwrap();
                futures::TryStreamExt::try_collect::<Vec<_>>(cursor)
                    .await
                    .unwrap()
                    .len()
            };
            let (t, found) = timed(find).await;
            log("d0", rep, t);
            assert_eq!(found, n);
            if rep == 0 {
                row0.wire = wire.take();
            } else {
                row0.secs.push(t.as_secs_f64());
            }
            let posts = posts_for(rep);
            wire.take();
            let (t, r) = timed(posts.upsert_many(&docs).batch_size(batch)).await;
            log("d", rep, t);
            let r = r.unwrap();
            assert_eq!((r.inserted, r.updated, r.unchanged), (0, 0, n as u64));
            if rep == 0 {
                row.wire = wire.take();
                assert_eq!(row.wire.write_commands(), 0, "unchanged: no write command");
            } else {
                row.secs.push(t.as_secs_f64());
            }
        }
        print_paired("(d)/(d0)", &row.secs, &row0.secs, "; target <= 1.2");
        rows.push(row0);
        rows.push(row);
    }

    if want("b") {
        // (b) The recipe one document at a time, same unchanged re-ingest; every run counted
        // and timed (see the module docs).
        let mut row = Row {
            key: "b",
            what: "per-document find_one + update_one(upsert), re-ingest unchanged",
            secs: vec![],
            wire: Default::default(),
        };
        for rep in 1..=naive_reps {
            let coll = counted.collection::<Post>("posts");
            wire.take();
            let (t, (unchanged, written)) = timed(support::recipe::run(
                &coll.clone_with_type::<Document>(),
                &docs,
                1,
            ))
            .await;
            log("b", rep, t);
            assert_eq!((unchanged, written), (n, 0));
            row.wire = wire.take();
            assert_eq!(row.wire.count("find"), n);
            assert_eq!(row.wire.write_commands(), 0);
            row.secs.push(t.as_secs_f64());
        }
        rows.push(row);
    }

    let mut changed_count = 0;
    if want("e") {
        // (e) upsert_many, re-ingest with 1% changed (a different edit each repetition, so
        // each one finds exactly 1% changed against what is stored).
        let mut row = Row {
            key: "e",
            what: "upsert_many, re-ingest with 1% changed",
            secs: vec![],
            wire: Default::default(),
        };
        for rep in 0..=reps {
            let posts = posts_for(rep);
            let (changed, k) = one_percent_changed(&docs, rep);
            changed_count = k;
            wire.take();
            let (t, r) = timed(posts.upsert_many(&changed).batch_size(batch)).await;
            log("e", rep, t);
            let r = r.unwrap();
            assert_eq!(
                (r.inserted, r.updated, r.unchanged),
                (0, k as u64, (n - k) as u64)
            );
            if rep == 0 {
                row.wire = wire.take();
                assert_eq!(
                    (row.wire.inserted_docs, row.wire.update_statements),
                    (0, k),
                    "exactly the changed documents are written"
                );
            } else {
                row.secs.push(t.as_secs_f64());
            }
        }
        rows.push(row);
    }

    // The table.
    let get = |k: &str| rows.iter().find(|r| r.key == k).map(|r| median(&r.secs));
    println!();
    println!(
        "ingest: {n} posts (~{avg_bson:.0} B BSON), batch size {batch}, medians of {reps} runs \
         ((b): {naive_reps})"
    );
    println!("| | scenario | median s | min s | max s | docs/s | on the wire (counted run) |");
    println!("|---|---|---:|---:|---:|---:|---|");
    for r in &rows {
        let min = r.secs.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = r.secs.iter().cloned().fold(0.0, f64::max);
        let med = median(&r.secs);
        println!(
            "| ({}) | {} | {:.3} | {:.3} | {:.3} | {:.0} | {} |",
            r.key,
            r.what,
            med,
            min,
            max,
            n as f64 / med,
            r.wire.summary()
        );
    }
    println!();
    if let (Some(a), Some(c)) = (get("a"), get("c")) {
        println!(
            "(c)/(a) first ingest vs blind insert: {:.2}x (target <= 1.3x)",
            c / a
        );
    }
    if let (Some(a2), Some(c)) = (get("a2"), get("c")) {
        println!(
            "(c)/(a2) first ingest vs insert_many of the stored format: {:.2}x (target <= 1.05x)",
            c / a2
        );
    }
    if let (Some(b), Some(d)) = (get("b"), get("d")) {
        println!(
            "(b)/(d) naive vs upsert_many re-ingest: {:.1}x faster (target >= 20x)",
            b / d
        );
    }
    let wire_of = |k: &str| rows.iter().find(|r| r.key == k).map(|r| r.wire.clone());
    if let Some(w) = wire_of("d") {
        println!("(d) write commands: {} (target 0)", w.write_commands());
    }
    if let Some(w) = wire_of("e") {
        println!(
            "(e) documents written: {} of {} changed ({} write commands)",
            w.written(),
            changed_count,
            w.write_commands()
        );
    }
    if let (Some(e), Some(d)) = (get("e"), get("d")) {
        println!("(e)/(d): {:.2}x (target <= 2x)", e / d);
    }
    eprintln!("ingest: total {:.0} s", started.elapsed().as_secs_f64());
}
