//! What distribution costs: the same posts through the same phases on single-node DocumentDB and
//! on DocumentDB on Citus (coordinator + 2 workers, FerretDB 2.5 in front), in one run, the two
//! engines one after the other at each size. On the cluster `posts` is hash-sharded on
//! `_nk_identity` (what natural-key needs) and the blind writer's collection on `_id` (what it
//! needs: its filters carry nothing else).
//!
//! Per engine and size, over N posts of ~0.5 KB (the peer bench's):
//! * `open`: `Collection::open` of an existing collection (its `explain` of the collection's
//!   placement, its deployment read, its indexes ensured), median of 5;
//! * `nk`: `upsert_many` first ingest, unchanged re-ingest, 1% changed; `nk-in`: the unchanged
//!   re-ingest again with `Limits::span_reads` off, reading by `_nk_identity` only (on the
//!   cluster: reads the engine routes by the shard key, where a span of `_id`s goes to every
//!   shard);
//! * `blind`: unordered bulk upserts replacing by `_id`, 1,000 per command, the same phases;
//! * guard reads of one document, alternated: by `_nk_identity` (one shard) and by `_id` (every
//!   shard), median µs of `NK_CLUSTER_READS` each;
//! * the `_id` check a sharded collection's inserts add per batch (`{_nk_identity: null, _id:
//!   {$in: 1,000 ids}}`), median of 5;
//! * on the cluster, the documents each worker holds (`scripts/db placement`);
//! * what more writers buy: the posts split into contiguous runs among 1, 2 and 4 writers, each
//!   a client of its own (as processes or `ingest` runs on disjoint files would be), writing at
//!   once: a first ingest and an unchanged re-ingest, each writer count on a fresh collection;
//! * what batches in flight buy: one handle writing every post in batches of 1,000 with 1, 2
//!   and 4 in flight (`in_flight`), the same two phases.
//!
//! Every phase is checked by its outcome (the report's counts; the blind writer's document
//! count), never timed against a bound.
//!
//! Run: `MONGODB_URI=$(scripts/db up | tail -1) NK_CLUSTER_SIZES=100000,1000000 cargo bench
//! --bench cluster`. The single node is `MONGODB_URI` (else `scripts/db up`); the cluster is
//! `NK_CLUSTER_URI` with `NK_CLUSTER_STATE` (its `scripts/db` state dir, for `shard` and
//! `placement`), else one the bench starts (`scripts/db up --engine cluster` in a state dir of
//! its own) and stops. `NK_CLUSTER_SIZES` (default 10,000), `NK_CLUSTER_REPS` (default 1; the
//! median is reported). Under `cargo test --benches`: 200 posts, once.

mod support;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use natural_key::bson::{self, doc, Bson, Document};
use natural_key::mongodb::{Client, Database};
use natural_key::prelude::*;
use natural_key::{Collection, Deployment, Limits};
use support::blog::{corpus, one_percent_changed, Post};

/// An engine of the run.
struct Engine {
    name: &'static str,
    uri: String,
    client: Client,
    /// The cluster's `scripts/db` state dir (`None`: the single node).
    state: Option<PathBuf>,
}

/// The cluster the bench started, stopped on drop.
struct Started(PathBuf);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = db_script(&["down", "--engine", "cluster"], &self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `scripts/db ARGS` with `NK_DB_STATE=state`: its stdout, or a panic with its stderr.
fn db_script(args: &[&str], state: &Path) -> String {
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db"))
        .args(args)
        .env("NK_DB_STATE", state)
        .output()
        .expect("run scripts/db");
    assert!(
        out.status.success(),
        "scripts/db {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

impl Engine {
    /// Hash-shards `db.coll` on `field` (the cluster only).
    fn shard(&self, db: &str, coll: &str, field: &str) {
        if let Some(state) = &self.state {
            db_script(&["shard", "--engine", "cluster", db, coll, field], state);
        }
    }

    /// The documents of `db.coll` per worker ("worker1 4903, worker2 5097").
    fn placement(&self, db: &str, coll: &str) -> Option<String> {
        let state = self.state.as_ref()?;
        let out = db_script(&["placement", "--engine", "cluster", db, coll], state);
        Some(out.lines().collect::<Vec<_>>().join(", "))
    }
}

/// One engine's figures at one size, per repetition: phase name → seconds (or µs / ms where the
/// name says).
type Figures = BTreeMap<&'static str, Vec<f64>>;

const PHASES: [&str; 10] = [
    "open (ms)",
    "nk first ingest",
    "nk unchanged",
    "nk-in unchanged",
    "nk 1% changed",
    "blind first ingest",
    "blind unchanged",
    "blind 1% changed",
    "read one by _nk_identity (µs)",
    "read one by _id (µs)",
];

/// A handle on `db.posts`; `spans: false` reads by `_nk_identity` only.
async fn handle(db: &Database, spans: bool) -> Collection<Post> {
    let detected = Deployment::detect(db.client()).await.unwrap();
    let limits = Limits {
        span_reads: spans,
        ..detected.limits()
    };
    Collection::new(db.collection::<Post>("posts"))
        .deployment(detected.with_limits(limits))
        .await
        .unwrap()
}

/// Unordered bulk upserts replacing each post by its `_id` in `db.blind`, 1,000 per command.
async fn blind(db: &Database, docs: &[Post]) {
    for chunk in docs.chunks(1000) {
        let statements: Vec<Bson> = chunk
            .iter()
            .map(|p| {
                let id = p.id().unwrap().to_string();
                let u = bson::to_document(p).unwrap();
                Bson::Document(doc! { "q": { "_id": id }, "u": u, "upsert": true, "multi": false })
            })
            .collect();
        let reply = db
            .run_command(doc! { "update": "blind", "updates": statements, "ordered": false })
            .await
            .unwrap();
        assert!(!reply.contains_key("writeErrors"), "{reply}");
        // Every statement matched or upserted its document: none was skipped.
        let n = reply
            .get_i32("n")
            .map(i64::from)
            .or_else(|_| reply.get_i64("n"));
        assert_eq!(n, Ok(chunk.len() as i64), "{reply}");
    }
    let stored = db
        .collection::<Document>("blind")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(stored, docs.len() as u64, "the blind writer's documents");
}

/// Seconds `f` took.
async fn timed<F: std::future::Future<Output = R>, R>(f: F) -> (f64, R) {
    let start = Instant::now();
    let r = f.await;
    (start.elapsed().as_secs_f64(), r)
}

/// One repetition on `engine` at `docs.len()` posts: every phase, into `figures`.
async fn run(engine: &Engine, docs: &[Post], changed: &[Post], figures: &mut Figures) {
    let n = docs.len();
    let name = format!("nk_bench_cluster_{}", engine.name);
    let db = engine.client.database(&name);
    db.drop().await.unwrap();
    engine.shard(&name, "posts", "_nk_identity");
    engine.shard(&name, "blind", "_id");
    let mut put = |phase: &'static str, v: f64| figures.entry(phase).or_default().push(v);

    let posts = handle(&db, true).await;
    assert_eq!(posts.is_sharded(), engine.state.is_some(), "found sharded");
    let (t, r) = timed(posts.upsert_many(docs).into_future()).await;
    let r = r.unwrap();
    assert_eq!((r.inserted, r.failures.len()), (n as u64, 0), "{r:?}");
    put("nk first ingest", t);
    let (t, _) = timed(blind(&db, docs)).await;
    put("blind first ingest", t);

    let mut opens = Vec::new();
    for _ in 0..5 {
        let (t, opened) = timed(Collection::<Post>::open(&db, "posts").into_future()).await;
        opened.unwrap();
        opens.push(t * 1e3);
    }
    put("open (ms)", support::median(&opens));

    let posts = handle(&db, true).await;
    let (t, r) = timed(posts.upsert_many(docs).into_future()).await;
    let r = r.unwrap();
    assert_eq!(r.unchanged, n as u64, "{r:?}");
    put("nk unchanged", t);
    let by_identity = handle(&db, false).await;
    let (t, r) = timed(by_identity.upsert_many(docs).into_future()).await;
    let r = r.unwrap();
    assert_eq!(r.unchanged, n as u64, "{r:?}");
    put("nk-in unchanged", t);
    let (t, _) = timed(blind(&db, docs)).await;
    put("blind unchanged", t);

    let posts = handle(&db, true).await;
    let (t, r) = timed(posts.upsert_many(changed).into_future()).await;
    let r = r.unwrap();
    assert_eq!(
        (r.updated, r.failures.len()),
        (n.div_ceil(100) as u64, 0),
        "{r:?}"
    );
    put("nk 1% changed", t);
    let (t, _) = timed(blind(&db, changed)).await;
    put("blind 1% changed", t);

    // Guard reads of one document, alternated so that load drift meets both.
    let raw = db.collection::<Document>("posts");
    let reads = support::env_usize("NK_CLUSTER_READS", 300).min(n);
    let (mut by_key, mut by_id) = (Vec::new(), Vec::new());
    for p in docs.iter().step_by((n / reads).max(1)).take(reads) {
        let (identity, id) = (
            p.identity().unwrap().to_string(),
            p.id().unwrap().to_string(),
        );
        let (t, found) = timed(
            raw.find_one(doc! { "_nk_identity": identity })
                .into_future(),
        )
        .await;
        assert!(found.unwrap().is_some());
        by_key.push(t * 1e6);
        let (t, found) = timed(raw.find_one(doc! { "_id": id }).into_future()).await;
        assert!(found.unwrap().is_some());
        by_id.push(t * 1e6);
    }
    put("read one by _nk_identity (µs)", support::median(&by_key));
    put("read one by _id (µs)", support::median(&by_id));
}

/// The writer counts compared.
const WRITERS: [usize; 3] = [1, 2, 4];

/// `w` writers, each a client of its own writing its `w`th of the posts (a contiguous run),
/// all at once, on a fresh collection: seconds for the first ingest and for an unchanged
/// re-ingest.
async fn writers(engine: &Engine, docs: &[Post], w: usize) -> [f64; 2] {
    let name = format!("nk_bench_cluster_{}", engine.name);
    let coll = format!("writers{w}");
    let db = engine.client.database(&name);
    db.collection::<Document>(&coll).drop().await.unwrap();
    engine.shard(&name, &coll, "_nk_identity");
    let mut parts = Vec::new();
    for k in 0..w {
        let client = support::plain_client(&engine.uri).await;
        let posts = Collection::<Post>::open(&client.database(&name), &coll)
            .await
            .unwrap();
        // Contiguous runs of the corpus (ids ascend with it), as disjoint files would be.
        let part: Vec<Post> = docs
            .chunks(docs.len().div_ceil(w))
            .nth(k)
            .unwrap_or(&[])
            .to_vec();
        parts.push((posts, part));
    }
    let mut times = [0.0; 2];
    for (phase, time) in times.iter_mut().enumerate() {
        let start = Instant::now();
        let tasks: Vec<_> = parts
            .iter()
            .map(|(posts, part)| {
                let (posts, part) = (posts.clone(), part.clone());
                tokio::spawn(async move { posts.upsert_many(&part).await.unwrap() })
            })
            .collect();
        let mut done = 0;
        for task in tasks {
            let r = task.await.unwrap();
            assert_eq!(r.failures.len(), 0, "{r:?}");
            done += if phase == 0 { r.inserted } else { r.unchanged };
        }
        *time = start.elapsed().as_secs_f64();
        assert_eq!(done, docs.len() as u64, "{w} writers, phase {phase}");
    }
    times
}

/// Batches of [`IN_FLIGHT_BATCH`] posts compared at 1, 2 and 4 in flight.
const IN_FLIGHT: [usize; 3] = [1, 2, 4];
const IN_FLIGHT_BATCH: usize = 1_000;

/// One handle writing every post with `k` batches in flight (`in_flight(k)`), on a fresh
/// collection: seconds for the first ingest and for an unchanged re-ingest.
async fn in_flight(engine: &Engine, docs: &[Post], k: usize) -> [f64; 2] {
    let name = format!("nk_bench_cluster_{}", engine.name);
    let coll = format!("in_flight{k}");
    let db = engine.client.database(&name);
    db.collection::<Document>(&coll).drop().await.unwrap();
    engine.shard(&name, &coll, "_nk_identity");
    let posts = Collection::<Post>::open(&db, &coll).await.unwrap();
    let mut times = [0.0; 2];
    for (phase, time) in times.iter_mut().enumerate() {
        let call = posts.upsert_many(docs).batch_size(IN_FLIGHT_BATCH);
        let (secs, r) = timed(call.in_flight(k).into_future()).await;
        let r = r.unwrap();
        let done = if phase == 0 { r.inserted } else { r.unchanged };
        assert_eq!(
            done,
            docs.len() as u64,
            "{k} in flight, phase {phase}: {r:?}"
        );
        *time = secs;
    }
    times
}

/// A table's rows: per count, each engine's µs per post and speed-up over a count of 1, for
/// the first ingest and the unchanged re-ingest (medians of the repetitions).
fn print_speedups(counts: &[usize], by: &[BTreeMap<usize, [Vec<f64>; 2]>; 2], n: usize) {
    for w in counts {
        let mut row = format!("| {w} |");
        for per_engine in by {
            for (one, this) in per_engine[&1].iter().zip(&per_engine[w]) {
                let (one, this) = (support::median(one), support::median(this));
                row.push_str(&format!(
                    " {:.1} ({:.2}×) |",
                    this * 1e6 / n as f64,
                    one / this
                ));
            }
        }
        println!("{row}");
    }
    println!();
}

/// The `_id` check of one insert batch of 1,000 on `db.posts` (finds nothing), median ms of 5.
async fn id_check(engine: &Engine, docs: &[Post]) -> f64 {
    let db = engine
        .client
        .database(&format!("nk_bench_cluster_{}", engine.name));
    let ids: Vec<String> = docs
        .iter()
        .take(1000)
        .map(|p| p.id().unwrap().to_string())
        .collect();
    let raw = db.collection::<Document>("posts");
    let mut times = Vec::new();
    for _ in 0..5 {
        let (t, found) = timed(async {
            use futures::TryStreamExt;
            let cursor = raw
                .find(doc! { "_nk_identity": Bson::Null, "_id": { "$in": ids.clone() } })
                .await
                .unwrap();
            cursor.try_collect::<Vec<_>>().await.unwrap()
        })
        .await;
        assert!(found.is_empty());
        times.push(t * 1e3);
    }
    support::median(&times)
}

/// The cluster: `NK_CLUSTER_URI` (with `NK_CLUSTER_STATE`), or one started here.
fn cluster() -> (String, PathBuf, Option<Started>) {
    if let Ok(uri) = std::env::var("NK_CLUSTER_URI") {
        let state = std::env::var("NK_CLUSTER_STATE")
            .expect("NK_CLUSTER_URI needs NK_CLUSTER_STATE (its scripts/db state dir)");
        return (uri, PathBuf::from(state), None);
    }
    let state = std::env::temp_dir().join(format!("nk-bench-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let started = Started(state.clone());
    let out = db_script(&["up", "--engine", "cluster"], &state);
    let uri = out.lines().last().expect("the URI").trim().to_string();
    (uri, state, Some(started))
}

#[tokio::main]
async fn main() {
    let full = support::invoked_by_cargo_bench();
    let sizes: Vec<usize> = if full {
        std::env::var("NK_CLUSTER_SIZES")
            .unwrap_or_else(|_| "10000".into())
            .split(',')
            .map(|s| s.trim().replace('_', "").parse().expect("NK_CLUSTER_SIZES"))
            .collect()
    } else {
        vec![200]
    };
    let reps = if full {
        support::env_usize("NK_CLUSTER_REPS", 1)
    } else {
        1
    };
    let (cluster_uri, state, _started) = cluster();
    let engines = [
        Engine {
            name: "single",
            uri: support::uri(),
            client: support::plain_client(&support::uri()).await,
            state: None,
        },
        Engine {
            name: "cluster",
            uri: cluster_uri.clone(),
            client: support::plain_client(&cluster_uri).await,
            state: Some(state),
        },
    ];
    for n in sizes {
        let docs = corpus(n);
        let changed = one_percent_changed(&docs);
        let mut figures: [Figures; 2] = Default::default();
        let mut placement = None;
        let mut checks = [0.0; 2];
        // Per engine, per writer count: first-ingest and unchanged seconds, per repetition.
        let mut by_writers: [BTreeMap<usize, [Vec<f64>; 2]>; 2] = Default::default();
        let mut by_in_flight: [BTreeMap<usize, [Vec<f64>; 2]>; 2] = Default::default();
        for rep in 0..reps {
            for (k, engine) in engines.iter().enumerate() {
                run(engine, &docs, &changed, &mut figures[k]).await;
                for w in WRITERS {
                    let t = writers(engine, &docs, w).await;
                    let entry = by_writers[k].entry(w).or_default();
                    entry[0].push(t[0]);
                    entry[1].push(t[1]);
                }
                for f in IN_FLIGHT {
                    let t = in_flight(engine, &docs, f).await;
                    let entry = by_in_flight[k].entry(f).or_default();
                    entry[0].push(t[0]);
                    entry[1].push(t[1]);
                }
                if rep == 0 {
                    checks[k] = id_check(engine, &docs).await;
                    placement = placement.or_else(|| {
                        engine.placement(&format!("nk_bench_cluster_{}", engine.name), "posts")
                    });
                }
                println!("cluster bench: {n} posts, rep {rep}, {} done", engine.name);
            }
        }
        for engine in &engines {
            engine
                .client
                .database(&format!("nk_bench_cluster_{}", engine.name))
                .drop()
                .await
                .unwrap();
        }
        println!(
            "\n{n} posts of ~0.5 KB, median of {reps}; writes in µs per post\n\n\
             | phase | single node | cluster | cluster / single |\n|---|---:|---:|---:|"
        );
        for phase in PHASES {
            let [single, cluster] = [&figures[0], &figures[1]].map(|f| support::median(&f[phase]));
            let per = if phase.contains('(') {
                1.0
            } else {
                1e6 / n as f64
            };
            println!(
                "| {phase} | {:.1} | {:.1} | {:.2}× |",
                single * per,
                cluster * per,
                cluster / single
            );
        }
        println!(
            "| `_id` check of 1,000 inserts (ms) | {:.1} | {:.1} | {:.2}× |",
            checks[0],
            checks[1],
            checks[1] / checks[0]
        );
        for (k, engine) in engines.iter().enumerate() {
            let f = &figures[k];
            let ratio =
                |nk: &str, blind: &str| support::median(&f[blind]) / support::median(&f[nk]);
            println!(
                "{}: nk ahead of blind ×{:.2} first ingest, ×{:.2} unchanged, ×{:.2} 1% changed",
                engine.name,
                ratio("nk first ingest", "blind first ingest"),
                ratio("nk unchanged", "blind unchanged"),
                ratio("nk 1% changed", "blind 1% changed"),
            );
        }
        println!(
            "documents per worker: {}\n",
            placement.unwrap_or_else(|| "?".into())
        );
        println!(
            "writers on contiguous runs of the posts, each a client of its own; µs per post (and the speed-up over \
             one writer)\n\n| writers | single: first ingest | single: unchanged | cluster: first \
             ingest | cluster: unchanged |\n|---:|---:|---:|---:|---:|"
        );
        print_speedups(&WRITERS, &by_writers, n);
        println!(
            "one handle, batches of {IN_FLIGHT_BATCH} in flight at once; µs per post (and the \
             speed-up over one)\n\n| in flight | single: first ingest | single: unchanged | \
             cluster: first ingest | cluster: unchanged |\n|---:|---:|---:|---:|---:|"
        );
        print_speedups(&IN_FLIGHT, &by_in_flight, n);
    }
}
