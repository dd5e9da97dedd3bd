//! natural-key against what its users would write instead (issue #30), same data, same engine,
//! one run: N posts of ~0.5 KB through three phases — first ingest into an empty collection,
//! re-ingest of unchanged data, re-ingest with 1% changed — by
//! * `nk`: `upsert_many` (default batch size; a handle per phase, opened before the timing as a
//!   user's ingest job opens it: its deployment read, its indexes ensured);
//! * `nk-in`: the same with `Limits::span_reads` off, reading by identity only;
//! * `recipe-1` and `recipe-8`: the seed's recipe per document (derive the id and content
//!   hash, `find_one({_id})` of the stored hash, `update_one({_id}, {$set}, upsert)` when it
//!   differs), one at a time and eight in flight;
//! * `blind`: unordered bulk upserts that replace by `_id` (the Kafka sink's write model: no
//!   guard, no skip), 1,000 statements per `update` command (on FerretDB 1.x 16, its safe
//!   count: 100 or more statements that match stored documents never return there);
//! * `floor`: what each phase cannot do without, by hand, into a collection with natural-key's
//!   indexes — first ingest: an unordered `insert` of the documents as natural-key stores them
//!   (fields, `_id`, `_nk_identity`, `_nk_hash`, `_nk_write`); unchanged: each document's id
//!   and content hash, one read of every stored hash by the primary key (`_id` `$in`, the
//!   whole result in one batch), the comparison; 1% changed: the same, then one `update` of
//!   the changed documents by `_id` (`$set`). It reads by `_id`, not by `_nk_identity`: on
//!   FerretDB 2 / DocumentDB an `$in` of 10,000 values on a secondary index took 1.2–1.4 s,
//!   on `_id` 0.10 s (pymongo, same engine); what the `_id` read cannot see (a stored copy
//!   under another timestamp) the unique identity index refuses, as natural-key's span reads
//!   rely on too.
//!
//! Every phase is verified (exactly N documents stored, the edits stored), never timed against
//! a bound. Peers run in a rotating order per repetition, so load drift spreads over all of
//! them; each phase is cut at a time budget, after which that peer's remaining phases are
//! reported as over budget.
//!
//! Run: `cargo bench --bench peers`. Environment: `NK_PEERS_DOCS` (default 10,000),
//! `NK_PEERS_REPS` (default 3), `NK_PEERS_BUDGET_S` (per phase, default 120),
//! `NK_PEERS` (default `nk,recipe-1,recipe-8,blind,floor`), `NK_PEERS_BLIND_PER_COMMAND`,
//! `NK_PEERS_NK_BATCH` (`upsert_many`'s batch size, default the library's), `NK_PEERS_WIRE=1`
//! (each phase's commands and the engine's time for them; monitoring costs time),
//! `MONGODB_URI` (else `scripts/db up`). Under `cargo test --benches`: 60 posts, once.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::stream::StreamExt;
use natural_key::bson::{self, doc, Bson, Document};
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{Collection, Deployment};
use support::blog::{corpus, one_percent_changed, Post};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Peer {
    /// With the batch size given (`None`: the library's default), and whether a batch's
    /// first read may be a span.
    NaturalKey(Option<usize>, bool),
    Recipe(usize),
    Blind(usize),
    /// With the `update` statements per command (FerretDB 1.x: 16).
    Floor(usize),
}

impl Peer {
    fn label(self) -> String {
        match self {
            Peer::NaturalKey(_, true) => "nk".into(),
            Peer::NaturalKey(_, false) => "nk-in".into(),
            Peer::Recipe(k) => format!("recipe-{k}"),
            Peer::Blind(_) => "blind".into(),
            Peer::Floor(_) => "floor".into(),
        }
    }

    /// What the peer prepares before a phase is timed: natural-key's handle, opened as a
    /// user's ingest job opens it (its deployment read, its indexes ensured). A handle per
    /// phase, so that each phase starts from what a fresh run of that job knows.
    async fn handle(self, db: &Database) -> Option<Collection<Post>> {
        let Peer::NaturalKey(_, spans) = self else {
            return None;
        };
        let detected = Deployment::detect(db.client()).await.unwrap();
        let limits = natural_key::Limits {
            span_reads: spans,
            ..detected.limits()
        };
        let posts = Collection::new(db.collection::<Post>("posts"))
            .deployment(detected.with_limits(limits))
            .await
            .unwrap();
        Some(posts)
    }

    /// One phase (`phase`, of [`PHASES`]): `docs` written the peer's way into `db.posts`
    /// (natural-key through `handle`).
    async fn write(
        self,
        db: &Database,
        handle: Option<&Collection<Post>>,
        docs: &[Post],
        phase: usize,
    ) {
        match self {
            Peer::NaturalKey(batch, _) => {
                let posts = handle.expect("natural-key's handle");
                let size = batch.unwrap_or(natural_key::DEFAULT_BATCH_SIZE);
                let r = posts.upsert_many(docs).batch_size(size).await.unwrap();
                assert!(r.failures.is_empty(), "{:?}", r.failures);
            }
            Peer::Recipe(in_flight) => {
                let raw = db.collection::<Document>("posts");
                support::recipe::run(&raw, docs, in_flight).await;
            }
            Peer::Blind(per_command) => blind(db, docs, per_command).await,
            Peer::Floor(per_command) => floor(db, docs, phase, per_command).await,
        }
    }
}

/// The floor of `phase` for `docs` (see the module's docs). It finds the changed documents by
/// their hashes and checks it found those `one_percent_changed` edits: none in the unchanged
/// phase, every hundredth in the 1% phase.
async fn floor(db: &Database, docs: &[Post], phase: usize, per_command: usize) {
    let raw = db.collection::<Document>("posts");
    if phase == 0 {
        let token = natural_key::Ulid::new().to_string();
        let stored: Vec<Document> = docs
            .iter()
            .map(|p| {
                let mut d = doc! { "_id": p.id().unwrap().to_string() };
                d.extend(bson::to_document(p).unwrap());
                d.insert("_nk_identity", p.identity().unwrap().to_string());
                d.insert("_nk_hash", p.content_hash().unwrap().to_string());
                d.insert("_nk_write", &token);
                d
            })
            .collect();
        // FerretDB 2 takes at most 25,000 operations per command, whatever `hello` says.
        for chunk in stored.chunks(25_000) {
            raw.insert_many(chunk).ordered(false).await.unwrap();
        }
        return;
    }
    // What any guarded re-ingest computes: each document's id and content hash.
    let mine: Vec<(String, String)> = docs
        .iter()
        .map(|p| {
            (
                p.id().unwrap().to_string(),
                p.content_hash().unwrap().to_string(),
            )
        })
        .collect();
    let mut stored = std::collections::HashMap::with_capacity(docs.len());
    // At most 100,000 ids (2.9 MB) per command, within the 16 MiB a command may hold.
    for part in mine.chunks(100_000) {
        let ids: Vec<&str> = part.iter().map(|(id, _)| id.as_str()).collect();
        let mut cursor = raw
            .find(doc! { "_id": { "$in": ids } })
            .projection(doc! { "_id": 1, "_nk_hash": 1 })
            .batch_size(1_000_000)
            .await
            .unwrap();
        while let Some(d) = cursor.next().await {
            let d = d.unwrap();
            let hash = d.get_str("_nk_hash").unwrap().to_string();
            stored.insert(d.get_str("_id").unwrap().to_string(), hash);
        }
    }
    assert_eq!(stored.len(), docs.len(), "the floor's read found every id");
    let changed: Vec<(&Post, &(String, String))> = docs
        .iter()
        .zip(&mine)
        .filter(|(_, (id, hash))| stored[id] != *hash)
        .collect();
    let expected = if phase == 2 {
        docs.len().div_ceil(100)
    } else {
        0
    };
    assert_eq!(
        changed.len(),
        expected,
        "the floor finds the changed documents"
    );
    for chunk in changed.chunks(per_command) {
        let statements: Vec<Bson> = chunk
            .iter()
            .map(|(p, (id, hash))| {
                let mut set = bson::to_document(p).unwrap();
                set.insert("_nk_hash", hash);
                Bson::Document(doc! {
                    "q": { "_id": id },
                    "u": { "$set": set },
                    "multi": false,
                })
            })
            .collect();
        send_update(db, statements).await;
    }
}

/// Commands by name, with the engine's round-trip time for them in all.
fn wire_ms(w: &support::WireCounts) -> String {
    let mut parts: Vec<String> = w
        .commands
        .iter()
        .map(|(name, n)| format!("{name} {n} [{:.1} ms]", w.time(name).as_secs_f64() * 1e3))
        .collect();
    parts.sort();
    format!("{}; {} statements", parts.join(", "), w.written())
}

/// Unordered bulk upserts replacing each document by its `_id`, `per_command` at a time.
async fn blind(db: &Database, docs: &[Post], per_command: usize) {
    for chunk in docs.chunks(per_command) {
        let statements: Vec<Bson> = chunk
            .iter()
            .map(|p| {
                let id = p.id().unwrap().to_string();
                let u = bson::to_document(p).unwrap();
                Bson::Document(doc! { "q": { "_id": id }, "u": u, "upsert": true, "multi": false })
            })
            .collect();
        send_update(db, statements).await;
    }
}

/// One unordered `update` command of `statements` on `posts`, every one of them accepted.
async fn send_update(db: &Database, statements: Vec<Bson>) {
    let reply = db
        .run_command(doc! { "update": "posts", "updates": statements, "ordered": false })
        .await
        .unwrap();
    assert!(!reply.contains_key("writeErrors"), "{reply}");
}

/// Exactly `docs` stored: as many documents, and each post's body as written.
async fn verify(db: &Database, docs: &[Post]) {
    let raw = db.collection::<Document>("posts");
    let mut bodies = BTreeMap::new();
    let mut cursor = raw
        .find(doc! {})
        .projection(doc! { "body": 1 })
        .await
        .unwrap();
    while let Some(d) = cursor.next().await {
        let d = d.unwrap();
        bodies.insert(
            d.get_str("_id").unwrap().to_string(),
            d.get_str("body").unwrap().to_string(),
        );
    }
    assert_eq!(bodies.len(), docs.len(), "stored documents");
    for p in docs {
        let id = p.id().unwrap().to_string();
        assert_eq!(bodies.get(&id), Some(&p.body), "the body of {id}");
    }
}

/// `NK_PEERS_NK_BATCH`, if set.
fn nk_batch() -> Option<usize> {
    std::env::var("NK_PEERS_NK_BATCH")
        .ok()
        .map(|_| support::env_usize("NK_PEERS_NK_BATCH", natural_key::DEFAULT_BATCH_SIZE))
}

const PHASES: [&str; 3] = ["first ingest", "unchanged", "1% changed"];

#[tokio::main]
async fn main() {
    let full = support::invoked_by_cargo_bench();
    let n = if full {
        support::env_usize("NK_PEERS_DOCS", 10_000)
    } else {
        60
    };
    let reps = if full {
        support::env_usize("NK_PEERS_REPS", 3)
    } else {
        1
    };
    let budget = Duration::from_secs(support::env_usize("NK_PEERS_BUDGET_S", 120) as u64);
    // NK_PEERS_WIRE=1: every phase's commands and the engine's time for them, per name.
    let wire = support::Wire::default();
    let watch_wire = std::env::var("NK_PEERS_WIRE").is_ok_and(|v| v == "1");
    let client = if watch_wire {
        support::counting_client(&support::uri(), &wire).await
    } else {
        support::plain_client(&support::uri()).await
    };
    let deployment = Deployment::detect(&client).await.unwrap();
    let ferretdb = deployment.engine().is_ferretdb_v1();
    let per_command = support::env_usize(
        "NK_PEERS_BLIND_PER_COMMAND",
        if ferretdb { 16 } else { 1000 },
    );
    let wanted =
        std::env::var("NK_PEERS").unwrap_or_else(|_| "nk,recipe-1,recipe-8,blind,floor".into());
    let peers: Vec<Peer> = wanted
        .split(',')
        .map(|w| match w.trim() {
            "nk" => Peer::NaturalKey(nk_batch(), true),
            "nk-in" => Peer::NaturalKey(nk_batch(), false),
            "recipe-1" => Peer::Recipe(1),
            "recipe-8" => Peer::Recipe(8),
            "blind" => Peer::Blind(per_command),
            "floor" => Peer::Floor(per_command),
            other => panic!("NK_PEERS: unknown peer {other:?}"),
        })
        .collect();
    // A database per peer and repetition, dropped only at the end: a phase cut at its budget
    // leaves the engine running what was in flight, and FerretDB 1.24 (SQLite) crashes with
    // SIGBUS when a database is dropped under running queries.
    let db_of = |label: &str, rep: usize| {
        client.database(&format!("nk_bench_peers_{}_{rep}", label.replace('-', "_")))
    };
    let first = corpus(n);
    let changed = one_percent_changed(&first);
    let inputs = [&first, &first, &changed];
    println!(
        "peers: {n} posts of ~0.5 KB, {reps} repetitions, {:?} engine, blind {per_command} per command, budget {budget:?} per phase",
        deployment.engine()
    );

    // times[peer][phase]: seconds per repetition; `None` once a phase ran over budget.
    let mut times: BTreeMap<String, [Vec<f64>; 3]> = BTreeMap::new();
    let mut over: BTreeMap<String, String> = BTreeMap::new();
    for rep in 0..reps {
        for k in 0..peers.len() {
            let peer = peers[(k + rep) % peers.len()];
            let label = peer.label();
            if over.contains_key(&label) {
                continue;
            }
            let db = db_of(&label, rep);
            db.drop().await.unwrap();
            if matches!(peer, Peer::NaturalKey(..) | Peer::Floor(_)) {
                Collection::<Post>::open(&db, "posts").await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            for (phase, docs) in inputs.iter().enumerate() {
                let handle = peer.handle(&db).await;
                wire.take();
                let start = Instant::now();
                let writing = peer.write(&db, handle.as_ref(), docs, phase);
                if tokio::time::timeout(budget, writing).await.is_err() {
                    over.insert(
                        label.clone(),
                        format!("{} over {budget:?} (rep {rep})", PHASES[phase]),
                    );
                    break;
                }
                let took = start.elapsed().as_secs_f64();
                if watch_wire {
                    println!(
                        "peers wire {label} {}: {}",
                        PHASES[phase],
                        wire_ms(&wire.take())
                    );
                }
                verify(&db, docs).await;
                println!(
                    "peers rep={rep} {label:<9} {:<13} {took:>8.3} s",
                    PHASES[phase]
                );
                times.entry(label.clone()).or_default()[phase].push(took);
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(if over.is_empty() { 0 } else { 30 })).await;
    for rep in 0..reps {
        for peer in &peers {
            db_of(&peer.label(), rep).drop().await.unwrap();
        }
    }

    println!(
        "\n| phase (median of {reps}, s) | {} |",
        peers
            .iter()
            .map(|p| p.label())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|{}", "---|".repeat(peers.len()));
    let median = |label: &str, phase: usize| {
        times
            .get(label)
            .filter(|t| t[phase].len() == reps)
            .map(|t| support::median(&t[phase]))
    };
    // nk's time over the peer's, per repetition (the two ran next to each other), median.
    let paired = |label: &str, phase: usize| {
        let (nk, other) = (times.get("nk")?, times.get(label)?);
        let ratios: Vec<f64> = nk[phase]
            .iter()
            .zip(&other[phase])
            .map(|(a, b)| a / b)
            .collect();
        (ratios.len() == reps).then(|| support::median(&ratios))
    };
    for (phase, name) in PHASES.iter().enumerate() {
        let nk = median("nk", phase);
        let cells: Vec<String> = peers
            .iter()
            .map(|p| match (median(&p.label(), phase), nk) {
                (Some(t), Some(nk)) if !matches!(p, Peer::NaturalKey(..)) => {
                    let pairs = paired(&p.label(), phase).expect("both ran every repetition");
                    format!("{t:.3} (nk {:.2}x; paired {pairs:.2}x)", nk / t)
                }
                (Some(t), _) => format!("{t:.3}"),
                (None, _) => over
                    .get(&p.label())
                    .cloned()
                    .unwrap_or_else(|| "over budget".into()),
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}
