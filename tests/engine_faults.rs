//! The engine itself fails: SIGKILLed in the middle of a call — the front
//! (FerretDB) and, on FerretDB 2 / DocumentDB, PostgreSQL under it — and started again on the
//! same data dir and address while the call is still retrying; or silent (SIGSTOP: its
//! connections open, nothing answered), for good or for a while. Each engine is the test's own
//! (`support::engine`, the pass's `NK_DB_ENGINE`), reached through a proxy that only watches:
//! a kill goes out while a write command is on the engine.
//!
//! With a `RetryPolicy` whose deadline covers the outage, every call ends `Ok` with exact
//! outcomes, and the stored data is exactly the input: every document once, every edit stored,
//! every relative operation applied once. With `RetryPolicy::none()`, the call ends promptly with a transient
//! error, and running it again converges. Three kills per call, at different points. A silent
//! engine ends a call at its policy's deadline (60 s by default, `RetryPolicy::none()`'s too).
//!
//! On the cluster (`NK_DB_ENGINE=cluster`: DocumentDB on Citus, coordinator + 2 workers) the
//! posts and items are hash-sharded on `_nk_identity` and the events on `_id`, so every batch
//! spans both workers. The kills take a worker, the coordinator, then the worker again; the
//! silences, the coordinator and then a worker. There the engine itself can acknowledge a write
//! a killed worker never committed (`PrivateEngine::acknowledged_failed_commits`): after each
//! call, a replay of it must redo no more writes than the engine logged so, and none elsewhere.
//!
//! Size: `NK_KILL_DOCS` documents (default 3,000; docs/reliability.md reports 10,000) and
//! `NK_KILL_OPS` relative operations (default 300). Each test prints one `KILLS` line.
//!
//! ```text
//! NK_KILL_DOCS=10000 NK_KILL_OPS=1000 cargo test --release --test engine_faults -- --nocapture
//! ```

mod support;

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use natural_key::bson::{doc, Document};
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{ApplyOutcome, Change, Collection, OpId, RetryPolicy};
use support::engine::{Part, PrivateEngine};
use support::proxy::{self, Faults, Proxy};
use support::watch::Watch;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Item {
    #[key]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    #[natural_key(relative)]
    stock: i64,
    #[natural_key(relative)]
    #[serde(default)]
    payments: Vec<String>,
}

const KILLS: u64 = 3;
/// How long the engine stays down after a kill before it is started again.
const DOWN: Duration = Duration::from_millis(1000);

/// What may pass between a deadline and the error it causes: the driver dropping what was in
/// flight, a busy machine. A bound on hanging, not a speed goal.
const SLACK: Duration = Duration::from_secs(10);

fn docs_n() -> usize {
    support::env_or("NK_KILL_DOCS", 3_000usize)
}

fn corpus(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("kill-{i:06}"),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            body: format!("body of post {i}"),
        })
        .collect()
}

/// The test's engine, a database on it reached directly, and the same through the proxy.
struct Rig {
    engine: Arc<PrivateEngine>,
    direct: Database,
    via: Database,
    proxy: Arc<Proxy>,
}

async fn rig(name: &'static str, seed: u64) -> Rig {
    let engine = Arc::new(
        tokio::task::spawn_blocking(move || PrivateEngine::start(name))
            .await
            .unwrap(),
    );
    let db = format!("nk_{}", name.replace('-', "_"));
    if engine.has_workers() {
        let (e, d) = (engine.clone(), db.clone());
        tokio::task::spawn_blocking(move || {
            for (coll, key) in [
                ("posts", "_nk_identity"),
                ("items", "_nk_identity"),
                ("clicks", "_id"),
            ] {
                e.shard(&d, coll, key);
            }
        })
        .await
        .unwrap();
    }
    let direct = support::client_for(&engine.uri, &support::Commands::default())
        .await
        .database(&db);
    let proxy =
        Arc::new(Proxy::start(proxy::upstream_addr(&engine.uri), Faults::none(), seed).await);
    let via = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(&db);
    Rig {
        engine,
        direct,
        via,
        proxy,
    }
}

impl Rig {
    /// The parts to kill, one per kill: on the cluster, a worker, the coordinator, the worker
    /// again; on FerretDB 2 / DocumentDB, PostgreSQL, then the front, then PostgreSQL again;
    /// elsewhere the front each time.
    fn parts(&self) -> Vec<Part> {
        if self.engine.has_workers() {
            vec![Part::Worker, Part::Storage, Part::Worker]
        } else if self.engine.has_storage() {
            vec![Part::Storage, Part::Front, Part::Storage]
        } else {
            vec![Part::Front; KILLS as usize]
        }
    }

    /// A fresh direct client's view of the database: the old one's predates the restarts.
    /// A new client's view of the test's database, once the engine has settled what a kill left
    /// prepared (a cluster's in-doubt transactions, committed by recovery).
    async fn fresh(&self) -> Database {
        self.engine.recover();
        support::client_for(&self.engine.uri, &support::Commands::default())
            .await
            .database(self.direct.name())
    }
}

/// One kill: what it took, and the call's progress when it went out.
#[derive(Debug)]
struct Killed {
    part: Part,
    at: u64,
    /// Kill, wait and restart, in seconds.
    outage: f64,
}

/// Kills `parts[k]` once the call's progress reaches `points[k]` with a write command on the
/// engine, and starts the engine again after [`DOWN`]; stops early once the call is done.
async fn killer(
    rig: (Arc<PrivateEngine>, Arc<Proxy>),
    watch: Arc<Watch>,
    parts: Vec<Part>,
) -> Vec<Killed> {
    let (engine, proxy) = rig;
    let mut kills = Vec::new();
    for (k, part) in parts.into_iter().enumerate() {
        let point = watch.points[k];
        // Watched without a timer, and a kill already armed: a write on the engine lasts a
        // few milliseconds, less than a process takes to start.
        let armed = engine.arm_kill(part);
        watch.begin();
        let (p, w) = (proxy.clone(), watch.clone());
        let fired = tokio::task::spawn_blocking(move || {
            while w.progress() < point || p.writes_in_flight() == 0 {
                if w.is_done() {
                    return false;
                }
                std::thread::yield_now();
            }
            armed.fire();
            true
        })
        .await
        .unwrap();
        if !fired {
            return kills;
        }
        let at = watch.progress();
        let started = Instant::now();
        let e = engine.clone();
        tokio::task::spawn_blocking(move || e.kill(part))
            .await
            .unwrap();
        tokio::time::sleep(DOWN).await;
        let e = engine.clone();
        // Back up, a cluster settles what the kill left prepared (a multi-shard write between
        // its two phases) now, as Citus' own recovery would within citus.recover_2pc_interval,
        // so that reads see what was committed before the next kill.
        tokio::task::spawn_blocking(move || {
            e.restart();
            e.recover();
        })
        .await
        .unwrap();
        kills.push(Killed {
            part,
            at,
            outage: started.elapsed().as_secs_f64(),
        });
    }
    kills
}

/// Progress points `total / 4`, `total / 2`, `3 total / 4`.
fn points(total: u64) -> Vec<u64> {
    (1..=KILLS).map(|k| total * k / (KILLS + 1)).collect()
}

fn start_killer(rig: &Rig, total: u64) -> (Arc<Watch>, tokio::task::JoinHandle<Vec<Killed>>) {
    let watch = Watch::at(points(total));
    let task = tokio::spawn(killer(
        (rig.engine.clone(), rig.proxy.clone()),
        watch.clone(),
        rig.parts(),
    ));
    (watch, task)
}

async fn stored_posts(db: &Database) -> Vec<Post> {
    let docs = support::all_documents(&db.collection::<Document>("posts")).await;
    let mut posts: Vec<Post> = docs
        .into_iter()
        .map(|d| natural_key::bson::from_document(d).unwrap())
        .collect();
    posts.sort_by(|a, b| a.slug.cmp(&b.slug));
    posts
}

fn report(test: &str, n: usize, kills: &[Killed], secs: f64, rig: &Rig, outcome: String) {
    let unanswered: u64 = rig.proxy.stats().unanswered.values().sum();
    println!(
        "KILLS {test}: {n} in {secs:.1} s; kills {:?}; commands the engine never answered \
         {unanswered}; {outcome}",
        kills
            .iter()
            .map(|k| format!("{:?} at {} (out {:.1} s)", k.part, k.at, k.outage))
            .collect::<Vec<_>>()
    );
}

/// A replay of a call, once the engine is back and settled, redid `redone` writes: ones the
/// engine acknowledged and did not keep. At most the commits it logged failing after it had
/// acknowledged them ([`PrivateEngine::acknowledged_failed_commits`]: the cluster), none
/// elsewhere: a write natural-key lost, or reported without sending, fails this. The replay
/// is the repair docs/reliability.md gives for the cluster: natural-key's writes are safe to
/// send again, so the ones the engine kept are left alone and the lost ones are written once.
fn assert_lost_by_the_engine_only(rig: &Rig, call: &str, redone: u64) {
    let failed = rig.engine.acknowledged_failed_commits() as u64;
    println!(
        "REPLAY {call}: {redone} writes redone; the engine logged {failed} commits failed after \
         it acknowledged them"
    );
    assert!(
        redone <= failed,
        "{call}: the replay redid {redone} writes, and the engine logged {failed} failed commits"
    );
}

/// `call` (which reports its progress to the watch it is given) run across the kills aimed at a
/// call of `n` documents: its result, which must be `Ok`, once every kill has landed mid-call.
/// Prints its `KILLS` line, `summary` saying what the call reported.
async fn killed_call<R, E, F>(
    rig: &Rig,
    name: &str,
    n: usize,
    call: impl FnOnce(Arc<Watch>) -> F,
    summary: impl FnOnce(&R) -> String,
) -> R
where
    E: std::error::Error,
    F: std::future::Future<Output = Result<R, E>>,
{
    let (watch, killer) = start_killer(rig, n as u64);
    let start = Instant::now();
    let r = call(watch.clone()).await;
    let secs = start.elapsed().as_secs_f64();
    watch.end();
    let kills = killer.await.unwrap();
    let r = r.unwrap_or_else(|e| panic!("after {kills:?}: {}", natural_key::ErrorChain(&e)));
    report(name, n, &kills, secs, rig, summary(&r));
    assert_eq!(kills.len() as u64, KILLS, "every kill landed mid-call");
    r
}

/// Half of the posts stored before, 1% of those edited, the other half new: one
/// `upsert_many` inserts, updates and leaves alone, across three kills.
#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_many_survives_three_kills_of_the_engine() {
    let n = docs_n();
    let rig = rig("kills-posts", 31).await;
    let mut docs = corpus(n);
    let before = Collection::<Post>::open(&rig.direct, "posts")
        .await
        .unwrap();
    before.upsert_many(&docs[..n / 2]).await.unwrap();
    let mut edited = 0;
    for p in docs[..n / 2].iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
        edited += 1;
    }
    let posts = Collection::<Post>::open(&rig.via, "posts").await.unwrap();
    let r = killed_call(
        &rig,
        "upsert_many",
        n,
        |seen| {
            posts
                .upsert_many(&docs)
                .batch_size(250)
                .retry(RetryPolicy::default())
                .on_progress(move |r| seen.reached(r.processed()))
                .into_future()
        },
        |r| {
            format!(
                "inserted={} updated={} unchanged={}",
                r.inserted, r.updated, r.unchanged
            )
        },
    )
    .await;
    assert_eq!(
        (r.inserted, r.updated, r.unchanged, r.failures.len()),
        ((n - n / 2) as u64, edited, (n / 2) as u64 - edited, 0),
        "{r:?}"
    );
    let replay = Collection::<Post>::open(&rig.fresh().await, "posts")
        .await
        .unwrap()
        .upsert_many(&docs)
        .await
        .unwrap();
    assert_eq!(replay.failures.len(), 0, "{replay:?}");
    assert_lost_by_the_engine_only(&rig, "upsert_many", replay.inserted + replay.updated);
    assert_stored_posts(&rig, &docs).await;
}

/// Nine posts in ten stored, then all deleted by key in one `delete_many` across three kills:
/// nothing left, and every outcome true — a stored post `Deleted` or (its reply lost to a kill)
/// `Gone`, never `NotFound`; a post never stored `NotFound`, as the read before any delete
/// found it.
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_many_survives_three_kills_of_the_engine() {
    let n = docs_n();
    let rig = rig("kills-deletes", 36).await;
    let docs = corpus(n);
    let stored: Vec<Post> = docs.iter().filter(|p| !absent(p)).cloned().collect();
    let before = Collection::<Post>::open(&rig.direct, "posts")
        .await
        .unwrap();
    before.upsert_many(&stored).await.unwrap();
    let posts = Collection::<Post>::open(&rig.via, "posts").await.unwrap();
    let r = killed_call(
        &rig,
        "delete_many",
        n,
        |seen| {
            posts
                .delete_many(&docs)
                .batch_size(250)
                .retry(RetryPolicy::default())
                .on_progress(move |r| seen.reached(r.processed()))
                .into_future()
        },
        |r| {
            format!(
                "deleted={} gone={} not_found={}",
                r.deleted, r.gone, r.not_found
            )
        },
    )
    .await;
    assert_eq!(
        (r.deleted + r.gone, r.not_found, r.failures.len()),
        (stored.len() as u64, (n - stored.len()) as u64, 0),
        "{r:?}"
    );
    let fresh = rig.fresh().await;
    let replay = Collection::<Post>::open(&fresh, "posts")
        .await
        .unwrap()
        .delete_many(&docs)
        .await
        .unwrap();
    assert_eq!((replay.gone, replay.failures.len()), (0, 0), "{replay:?}");
    assert_lost_by_the_engine_only(&rig, "delete_many", replay.deleted);
    let left = support::all_documents(&fresh.collection::<Document>("posts")).await;
    assert!(left.is_empty(), "{} posts left: {left:?}", left.len());
}

/// The posts of [`a_delete_many_survives_three_kills_of_the_engine`] never stored.
fn absent(p: &Post) -> bool {
    p.published_at / 60_000 % 10 == 3
}

/// The stored posts are `docs`; if not, what the differing ones store (their write tokens
/// say which write left them), and whether they are `docs` a while later.
async fn assert_stored_posts(rig: &Rig, docs: &[Post]) {
    let db = rig.fresh().await;
    let stored = stored_posts(&db).await;
    if stored == docs {
        return;
    }
    let differ: Vec<&str> = docs
        .iter()
        .filter(|p| !stored.contains(p))
        .map(|p| p.slug.as_str())
        .collect();
    let raw = support::all_documents(&db.collection::<Document>("posts")).await;
    let shown: Vec<String> = raw
        .iter()
        .filter(|d| differ.contains(&d.get_str("slug").unwrap_or("")))
        .map(|d| d.to_string())
        .collect();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let later = stored_posts(&rig.fresh().await).await == docs;
    panic!(
        "{} posts differ: {shown:?}; 20 s and a recovery later they are {}",
        differ.len(),
        if later { "as written" } else { "still not" }
    );
}

/// Events inserted once each across three kills: none lost, none twice, every outcome
/// `Inserted` (this call stored them all).
#[tokio::test(flavor = "multi_thread")]
async fn an_insert_many_of_events_survives_three_kills_of_the_engine() {
    let n = docs_n();
    let rig = rig("kills-events", 32).await;
    let events: Vec<Click> = (0..n)
        .map(|i| Click {
            id: Ulid::new(),
            page: format!("/{i}"),
        })
        .collect();
    let clicks = Collection::<Click>::open(&rig.via, "clicks").await.unwrap();
    let r = killed_call(
        &rig,
        "insert_many",
        n,
        |seen| {
            clicks
                .insert_many(&events)
                .batch_size(250)
                .retry(RetryPolicy::default())
                .on_progress(move |r| seen.reached(r.processed()))
                .into_future()
        },
        |r| {
            format!(
                "inserted={} already_applied={}",
                r.inserted, r.already_applied
            )
        },
    )
    .await;
    assert_eq!(
        (r.inserted, r.already_applied, r.failures.len()),
        (n as u64, 0, 0),
        "{r:?}"
    );
    let fresh = rig.fresh().await;
    let replay = Collection::<Click>::open(&fresh, "clicks")
        .await
        .unwrap()
        .insert_many(&events)
        .await
        .unwrap();
    assert_eq!(replay.failures.len(), 0, "{replay:?}");
    assert_lost_by_the_engine_only(&rig, "insert_many", replay.inserted);
    let stored = support::all_documents(&fresh.collection::<Document>("clicks")).await;
    let mut ids: Vec<String> = stored
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    expected.sort();
    assert_eq!(ids, expected, "every event once");
}

/// Relative updates from two writers over ten items across three kills: every operation
/// applied once (each item's stock down by its sales, each payment recorded once).
#[tokio::test(flavor = "multi_thread")]
async fn relative_updates_survive_three_kills_of_the_engine() {
    let ops: usize = support::env_or("NK_KILL_OPS", 300);
    let rig = rig("kills-apply", 33).await;
    let items: Vec<Item> = (0..10)
        .map(|i| Item {
            sku: format!("sku-{i}"),
            listed_at: 1_700_000_000_000,
            stock: 1_000_000,
            payments: Vec::new(),
        })
        .collect();
    let before = Collection::<Item>::open(&rig.direct, "items")
        .await
        .unwrap();
    before.upsert_many(&items).await.unwrap();
    let via = Collection::<Item>::open(&rig.via, "items").await.unwrap();
    let (watch, killer) = start_killer(&rig, ops as u64);
    let start = Instant::now();
    let mut writers = Vec::new();
    for w in 0..2 {
        let (via, watch) = (via.clone(), watch.clone());
        let ids: Vec<Ulid> = items.iter().map(|i| i.id().unwrap()).collect();
        writers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for k in (w..ops).step_by(2) {
                let (key, op, change) = sale(k);
                let r = via
                    .apply(ids[k % ids.len()], op, change)
                    .retry(RetryPolicy::default())
                    .await;
                watch.advance().await;
                outcomes.push((key, r));
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for w in writers {
        outcomes.extend(w.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    watch.end();
    let kills = killer.await.unwrap();
    let mut by_kind: HashMap<String, usize> = HashMap::new();
    for (key, r) in &outcomes {
        match r {
            Ok(o) => *by_kind.entry(format!("{o:?}")).or_default() += 1,
            Err(e) => panic!("{key} after {kills:?}: {e:?}"),
        }
    }
    report("apply", ops, &kills, secs, &rig, format!("{by_kind:?}"));
    assert_eq!(kills.len() as u64, KILLS, "every kill landed mid-run");
    assert!(outcomes
        .iter()
        .all(|(_, r)| matches!(r, Ok(ApplyOutcome::Applied | ApplyOutcome::AlreadyApplied))));
    let fresh = rig.fresh().await;
    let again = Collection::<Item>::open(&fresh, "items").await.unwrap();
    let mut redone = 0;
    for k in 0..ops {
        let (key, op, change) = sale(k);
        match again
            .apply(items[k % items.len()].id().unwrap(), op, change)
            .await
        {
            Ok(ApplyOutcome::Applied) => redone += 1,
            Ok(ApplyOutcome::AlreadyApplied) => {}
            other => panic!("{key} replayed: {other:?}"),
        }
    }
    assert_lost_by_the_engine_only(&rig, "apply", redone);
    let stored = support::all_documents(&fresh.collection::<Document>("items")).await;
    let mut sold = 0;
    for d in &stored {
        let payments = d.get_array("payments").unwrap();
        let stock = d.get_i64("stock").unwrap();
        assert_eq!(
            stock,
            1_000_000 - payments.len() as i64,
            "one sale per payment: {d}"
        );
        sold += payments.len();
    }
    assert_eq!(sold, ops, "every operation applied once");
    let mut keys: Vec<&str> = stored
        .iter()
        .flat_map(|d| d.get_array("payments").unwrap().iter())
        .map(|p| p.as_str().unwrap())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), ops, "no payment twice");
}

/// Sale `k` of the relative updates' test: its operation key, id and change.
fn sale(k: usize) -> (String, OpId, Change) {
    let key = format!("order-{k}");
    let change = Change::new()
        .inc("stock", -1)
        .push("payments", key.as_str());
    (key.clone(), OpId::new(key, k as i64 + 1), change)
}

/// With `RetryPolicy::none()`, a call the kill cuts short ends promptly with a transient error, and
/// the same call run again once the engine is back converges.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_policy_a_killed_call_ends_transient_and_a_rerun_converges() {
    let n = docs_n();
    let rig = rig("kills-nopolicy", 34).await;
    let docs = corpus(n);
    let posts = Collection::<Post>::open(&rig.via, "posts")
        .retry(RetryPolicy::none())
        .await
        .unwrap();
    let mut seen = Vec::new();
    for (round, part) in rig.parts().into_iter().enumerate() {
        // One kill per round, at a different point each time.
        let watch = Watch::at(vec![n as u64 * (round as u64 + 1) / (KILLS + 1)]);
        let killer = tokio::spawn(killer(
            (rig.engine.clone(), rig.proxy.clone()),
            watch.clone(),
            vec![part],
        ));
        let start = Instant::now();
        let p = watch.clone();
        let r = posts
            .upsert_many(&docs)
            .batch_size(250)
            .on_progress(move |r| p.reached(r.processed()))
            .await;
        let ended = start.elapsed();
        watch.end();
        let kills = killer.await.unwrap();
        assert_eq!(kills.len(), 1, "round {round}: the kill landed mid-call");
        let e = r.expect_err("a call without a policy does not outlive the kill");
        assert!(e.is_transient(), "round {round}: {e} ({:?})", e.error);
        assert!(
            ended < Duration::from_secs(30),
            "round {round}: the call ended {ended:?} after it began, not promptly"
        );
        seen.push(format!("{part:?}: {} after {ended:.1?}", e.error.kind()));
    }
    // The engine is back: the same call, still without a policy, finishes the job.
    let r = posts.upsert_many(&docs).await.unwrap();
    assert_eq!(r.failures.len(), 0, "{r:?}");
    assert_eq!(stored_posts(&rig.fresh().await).await, docs);
    println!("KILLS without a policy: {n} posts; each call ended {seen:?}; the rerun converged");
}

/// A silent engine (SIGSTOP): a call with a policy ends at its deadline, and one without at
/// `RetryPolicy::none()`'s (60 s), each with a transient error and however much it wrote; once
/// the engine answers again, the same call converges. A pause shorter than the deadline, in the
/// middle of a call, is ridden out.
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_engine_ends_a_call_at_its_deadline_and_a_pause_is_ridden_out() {
    let n = docs_n();
    let rig = rig("silent", 35).await;
    let mut docs = corpus(n);
    let posts = Collection::<Post>::open(&rig.via, "posts").await.unwrap();
    let (first, second) = match (rig.engine.has_workers(), rig.engine.has_storage()) {
        (true, _) => (Part::Storage, Part::Worker),
        (false, true) => (Part::Front, Part::Storage),
        (false, false) => (Part::Front, Part::Front),
    };
    let mut seen = Vec::new();
    for (part, policy, deadline) in [
        (
            first,
            RetryPolicy::default().deadline(Duration::from_secs(5)),
            5,
        ),
        (second, RetryPolicy::none(), 60),
    ] {
        rig.engine.pause(part);
        let start = Instant::now();
        let r = posts.upsert_many(&docs).retry(policy).await;
        let took = start.elapsed();
        rig.engine.resume(part);
        let e = r.expect_err("nothing is answered");
        assert!(e.is_transient(), "{part:?}: {e}");
        // Silence is no engine asking to wait: the driver labels a connection it could not
        // open `SystemOverloadedError`, which is not a throttle.
        assert!(
            ["timeout", "transient"].contains(&e.error.kind()),
            "{part:?}: {:?}",
            e.error
        );
        assert!(
            took <= Duration::from_secs(deadline) + SLACK,
            "{part:?}: the call ended {took:?} after it began, past its {deadline} s deadline"
        );
        seen.push(format!(
            "{part:?} silent: {} after {took:.1?}",
            e.error.kind()
        ));
    }
    let r = posts
        .upsert_many(&docs)
        .retry(RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(r.failures.len(), 0, "{r:?}");
    assert_eq!(stored_posts(&rig.fresh().await).await, docs);

    // Silent for 2 s in the middle of a call whose deadline covers it.
    for p in docs.iter_mut().step_by(10) {
        p.body.push_str(" (edited)");
    }
    let progress = Arc::new(AtomicU64::new(0));
    let (engine, watched) = (rig.engine.clone(), progress.clone());
    let pauser = tokio::spawn(async move {
        while watched.load(Ordering::SeqCst) < n as u64 / 2 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        engine.pause(second);
        tokio::time::sleep(Duration::from_secs(2)).await;
        engine.resume(second);
    });
    let start = Instant::now();
    let p = progress.clone();
    let r = posts
        .upsert_many(&docs)
        .batch_size(250)
        .retry(RetryPolicy::default())
        .on_progress(move |r| p.store(r.processed(), Ordering::SeqCst))
        .await;
    let took = start.elapsed();
    pauser.await.unwrap();
    let r = r.unwrap();
    assert_eq!(
        (r.updated, r.failures.len()),
        (n.div_ceil(10) as u64, 0),
        "{r:?}"
    );
    assert!(
        took >= Duration::from_secs(2),
        "the pause was inside the call: {took:?}"
    );
    assert_eq!(stored_posts(&rig.fresh().await).await, docs);
    println!("KILLS silent: {n} posts; {seen:?}; paused 2 s mid-call, finished in {took:.1?}");
}
