//! A worker cut off from the coordinator while natural-key writes, and the client cut off from
//! the front: partitions, not kills. The coordinator reaches the first worker through a relay
//! (`scripts/db route worker1 PORT`, tests/support/relay.rs) that black-holes every connection
//! (open, nothing answered), then resets them all, then heals; the front is reached the same
//! way by the client.
//!
//! With a `RetryPolicy` a batch of posts, events' `insert_many` and `apply` from four writers
//! end `Ok` with exact outcomes, and a replay after the heal repairs no more than one batch
//! per writer (what was in flight when the link reset). Without a policy a call ends `Ok` or
//! with a transient error by the heal, or `Timeout` at its attempt's limit while the link
//! stays silent, and a rerun converges.
//!
//! Cluster only (CI's cluster pass, `NK_EXPECT_ENGINE=cluster`); elsewhere each test says so
//! and returns. The tests cut the same worker: they run one at a time. Size: `NK_PARTITION_DOCS`
//! documents (default 2,000), `NK_PARTITION_OPS` relative operations (default 400). Each test
//! prints a `PARTITION` line: where the call was when the link went silent and when it healed,
//! how long the call took to move again after the heal, and its outcomes.

#[path = "fault_calls/mod.rs"]
mod fault_calls;
mod support;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fault_calls::{
    assert_events_inserted, assert_every_event_once, assert_every_sale_once,
    assert_half_stored_upserted, clicks, corpus, four_writers_apply, half_stored, items,
    on_cluster, repair_events, replay_sales, shard_clicks, sold_by_kind, stored_posts, Click, Post,
};
use natural_key::{Collection, RetryPolicy};
use support::relay::{Link, Relay};
use support::watch::Watch;

/// How long the link stays silent, then resetting, before it heals.
const SILENT: Duration = Duration::from_secs(3);
const RESETTING: Duration = Duration::from_secs(1);
/// Time a call may take past a bound for the machine (2 shared cores) to get to it.
const SLACK: Duration = Duration::from_secs(10);
/// Documents per batch: at most this many writes in flight per writer when the link resets.
const BATCH: usize = 250;

fn docs_n() -> usize {
    support::env_or("NK_PARTITION_DOCS", 2_000usize)
}

/// One partition at a time in this binary: they cut the same worker.
static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The pass's first worker, reached by the coordinator through a relay for the life of the
/// value; routed back to its own port (and the link up) when dropped, a failed test's too.
struct CutWorker {
    relay: Arc<Relay>,
}

impl CutWorker {
    async fn start() -> CutWorker {
        let own: u16 = route(None)
            .trim()
            .parse()
            .expect("scripts/db route prints a port");
        let relay = Arc::new(Relay::start(own).await);
        route(Some(relay.port()));
        CutWorker { relay }
    }
}

impl Drop for CutWorker {
    fn drop(&mut self) {
        self.relay.set(Link::Up);
        route(None);
    }
}

/// `scripts/db route worker1 [PORT]`: what it printed (worker1's own port).
fn route(port: Option<u16>) -> String {
    let port = port.map(|p| p.to_string());
    let mut args = vec!["route", "worker1", "--engine", "cluster"];
    args.extend(port.as_deref());
    support::db(&args, &[]).unwrap_or_else(|e| panic!("scripts/db {args:?}: {e}"))
}

/// Settles what the reset left prepared on the worker (`scripts/db recover`), as Citus' own
/// recovery would within a minute, before the stored data is read.
fn recover() {
    if let Err(e) = support::db(&["recover", "--engine", "cluster"], &[]) {
        panic!("scripts/db recover: {e}");
    }
}

/// One partition, as the call met it.
#[derive(Debug)]
struct Partitioned {
    /// The call's progress when the link went silent, and when it healed.
    at: (u64, u64),
    /// From the heal until the call moved on (or ended).
    recovered: Duration,
}

impl std::fmt::Display for Partitioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "silent at {}, healed at {}, moving again {:.1} s after the heal",
            self.at.0,
            self.at.1,
            self.recovered.as_secs_f64()
        )
    }
}

/// Black-holes `relay` once the call reaches its point, resets it after [`SILENT`], heals it
/// after [`RESETTING`]; `None` if the call ended first.
async fn partitioner(watch: Arc<Watch>, relay: Arc<Relay>) -> Option<Partitioned> {
    if !watch.until(watch.points[0]).await {
        return None;
    }
    let from = watch.progress();
    relay.set(Link::BlackHole);
    watch.begin();
    tokio::time::sleep(SILENT).await;
    relay.set(Link::Reset);
    tokio::time::sleep(RESETTING).await;
    relay.set(Link::Up);
    let healed = Instant::now();
    let at = watch.progress();
    while watch.progress() == at && !watch.is_done() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Some(Partitioned {
        at: (from, at),
        recovered: healed.elapsed(),
    })
}

/// `call`, with `relay` partitioned at a third of its progress: its result, the partition,
/// and how long the call took.
async fn partitioned_call<R, F>(
    relay: &Arc<Relay>,
    total: u64,
    call: impl FnOnce(Arc<Watch>) -> F,
) -> (R, Partitioned, f64)
where
    F: std::future::Future<Output = R>,
{
    let watch = Watch::at(vec![total / 3]);
    let cutter = tokio::spawn(partitioner(watch.clone(), relay.clone()));
    let start = Instant::now();
    let r = call(watch.clone()).await;
    let secs = start.elapsed().as_secs_f64();
    watch.end();
    let cut = cutter.await.unwrap().expect("the partition began mid-call");
    (r, cut, secs)
}

fn report(test: &str, n: usize, cut: &Partitioned, secs: f64, outcome: String) {
    println!("PARTITION {test}: {n} in {secs:.1} s; {cut}; {outcome}");
}

/// A replay after the heal redid `redone` writes: ones the engine acknowledged and did not
/// keep when the link reset under them. At most a batch per writer.
fn assert_repaired_at_most(call: &str, redone: u64, writers: u64) {
    println!("REPLAY {call}: {redone} writes redone");
    let most = BATCH as u64 * writers;
    assert!(
        redone <= most,
        "{call}: the replay redid {redone} writes, more than the {most} in flight"
    );
}

/// Half of the posts stored before, 1% of those edited, the other half new, while the worker
/// is cut off: inserted, updated and left alone exactly.
#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_many_rides_out_a_partitioned_worker() {
    if !on_cluster("an_upsert_many_rides_out_a_partitioned_worker") {
        return;
    }
    let _one = ONE.lock().await;
    let n = docs_n();
    let (db, _) = support::database("cut_upsert").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let (docs, edited) = half_stored(&posts, "cut", n).await;
    let cut = CutWorker::start().await;
    let (r, partition, secs) = partitioned_call(&cut.relay, n as u64, |seen| {
        posts
            .upsert_many(&docs)
            .batch_size(BATCH)
            .retry(RetryPolicy::default())
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    drop(cut);
    let r = r.unwrap_or_else(|e| panic!("{partition}: {}", natural_key::ErrorChain(&e)));
    report(
        "upsert_many",
        n,
        &partition,
        secs,
        format!(
            "inserted={} updated={} unchanged={}",
            r.inserted, r.updated, r.unchanged
        ),
    );
    assert_half_stored_upserted(&r, n, edited);
    recover();
    let replay = posts.upsert_many(&docs).await.unwrap();
    assert_repaired_at_most("upsert_many", replay.inserted + replay.updated, 1);
    assert_eq!(stored_posts(&db).await, docs);
}

/// Events inserted once each while the worker is cut off.
#[tokio::test(flavor = "multi_thread")]
async fn an_insert_many_of_events_rides_out_a_partitioned_worker() {
    if !on_cluster("an_insert_many_of_events_rides_out_a_partitioned_worker") {
        return;
    }
    let _one = ONE.lock().await;
    let n = docs_n();
    let (db, _) = support::database("cut_events").await;
    shard_clicks(&db);
    let events = clicks(n);
    let clicks = Collection::<Click>::open(&db, "clicks").await.unwrap();
    let cut = CutWorker::start().await;
    let (r, partition, secs) = partitioned_call(&cut.relay, n as u64, |seen| {
        clicks
            .insert_many(&events)
            .batch_size(BATCH)
            .retry(RetryPolicy::default())
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    drop(cut);
    let r = r.unwrap_or_else(|e| panic!("{partition}: {}", natural_key::ErrorChain(&e)));
    report(
        "insert_many",
        n,
        &partition,
        secs,
        format!(
            "inserted={} already_applied={}",
            r.inserted, r.already_applied
        ),
    );
    assert_events_inserted(&r, n);
    recover();
    let lost = repair_events(&db, &clicks, &events).await;
    assert_repaired_at_most("insert_many", lost, 1);
    assert_every_event_once(&db, &events).await;
}

/// Relative updates from four racing writers over ten items while the worker is cut off:
/// every operation applied once.
#[tokio::test(flavor = "multi_thread")]
async fn relative_updates_from_four_writers_ride_out_a_partitioned_worker() {
    if !on_cluster("relative_updates_from_four_writers_ride_out_a_partitioned_worker") {
        return;
    }
    let _one = ONE.lock().await;
    let ops: usize = support::env_or("NK_PARTITION_OPS", 400);
    let (db, _) = support::database("cut_apply").await;
    let (coll, ids) = items(&db).await;
    let cut = CutWorker::start().await;
    let (outcomes, partition, secs) = partitioned_call(&cut.relay, ops as u64, |watch| {
        four_writers_apply(&coll, &ids, ops, watch)
    })
    .await;
    drop(cut);
    let by_kind = sold_by_kind(&outcomes, &partition);
    report("apply", ops, &partition, secs, format!("{by_kind:?}"));
    recover();
    let redone = replay_sales(&coll, &ids, ops).await;
    println!("REPLAY apply: {redone} operations redone");
    // One operation in flight per writer.
    assert!(redone <= 4, "the replay applied {redone} operations again");
    assert_every_sale_once(&db, ops).await;
}

/// Without a policy: a call across a partition that heals ends `Ok` or with a transient
/// error, never waiting past the heal (the engine reconnects to the worker by itself: it ended
/// `Ok` in every run here); a call whose worker stays silent ends `Timeout` at its attempt's
/// limit. After the heal a rerun converges.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_policy_a_call_across_a_partition_ends_in_bounded_time_and_a_rerun_converges() {
    if !on_cluster("without_a_policy_a_call_across_a_partition") {
        return;
    }
    let _one = ONE.lock().await;
    let n = docs_n();
    let (db, _) = support::database("cut_no_policy").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let mut docs = corpus("bare", n);
    let cut = CutWorker::start().await;
    let (r, partition, secs) = partitioned_call(&cut.relay, n as u64, |seen| {
        posts
            .upsert_many(&docs)
            .batch_size(BATCH)
            .retry(RetryPolicy::none())
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    let outcome = match &r {
        Ok(r) => format!("Ok: inserted={} failures={}", r.inserted, r.failures.len()),
        Err(e) => format!("{}: {}", e.error.kind(), natural_key::ErrorChain(&e.error)),
    };
    report("no policy", n, &partition, secs, outcome);
    if let Err(e) = &r {
        assert!(e.is_transient(), "{:?}", e.error);
    }
    assert!(
        Duration::from_secs_f64(secs) <= SILENT + RESETTING + SLACK,
        "the call ended {secs:.1} s after it began: it waited past the heal"
    );

    // Silent until the call has ended: its one attempt times out.
    for p in docs.iter_mut().step_by(10) {
        p.body.push_str(" (edited)");
    }
    let attempt = Duration::from_secs(2);
    cut.relay.set(Link::BlackHole);
    let start = Instant::now();
    let e = posts
        .upsert_many(&docs)
        .retry(RetryPolicy::none().attempt_timeout(attempt))
        .await
        .expect_err("the worker answers nothing");
    let took = start.elapsed();
    println!(
        "PARTITION worker silent, no policy: {} after {:.1} s",
        e.error.kind(),
        took.as_secs_f64()
    );
    assert_eq!(e.error.kind(), "timeout", "{:?}", e.error);
    assert!(took <= attempt + SLACK, "ended {took:?} after it began");
    drop(cut);
    recover();
    let rerun = posts
        .upsert_many(&docs)
        .retry(RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(rerun.failures.len(), 0, "{rerun:?}");
    assert_eq!(stored_posts(&db).await, docs);
}

/// The client's connection to the front black-holed mid-call: with a policy whose attempts
/// time out sooner than the silence lasts, the call ends `Ok` and exact; without a policy it
/// ends `Timeout` at its attempt's limit, and a rerun after the heal converges.
#[tokio::test(flavor = "multi_thread")]
async fn a_front_black_holed_mid_call_is_ridden_out_or_ends_at_the_deadline() {
    if !on_cluster("a_front_black_holed_mid_call") {
        return;
    }
    let _one = ONE.lock().await;
    let n = docs_n();
    let (db, _) = support::database("cut_front").await;
    let front = support::proxy::upstream_addr(&support::uri());
    let relay = Arc::new(Relay::start(front.port()).await);
    let commands = support::Commands::default();
    let uri = format!("mongodb://127.0.0.1:{}/?retryWrites=false", relay.port());
    let via = support::client_for(&uri, &commands)
        .await
        .database(db.name());
    let posts = Collection::<Post>::open(&via, "posts").await.unwrap();
    let mut docs = corpus("front", n);
    let attempt = Duration::from_secs(2);

    let (r, partition, secs) = partitioned_call(&relay, n as u64, |seen| {
        posts
            .upsert_many(&docs)
            .batch_size(BATCH)
            .retry(RetryPolicy::default().attempt_timeout(attempt))
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    let r = r.unwrap_or_else(|e| panic!("{partition}: {}", natural_key::ErrorChain(&e)));
    report(
        "front, with a policy",
        n,
        &partition,
        secs,
        format!("inserted={} unchanged={}", r.inserted, r.unchanged),
    );
    assert_eq!(
        (r.inserted + r.unchanged, r.failures.len()),
        (n as u64, 0),
        "{r:?}"
    );
    assert_eq!(stored_posts(&db).await, docs);

    for p in docs.iter_mut().step_by(10) {
        p.body.push_str(" (edited)");
    }
    relay.set(Link::BlackHole);
    let start = Instant::now();
    let e = posts
        .upsert_many(&docs)
        .retry(RetryPolicy::none().attempt_timeout(attempt))
        .await
        .expect_err("nothing is answered");
    let took = start.elapsed();
    relay.set(Link::Up);
    println!(
        "PARTITION front, no policy: {} after {:.1} s",
        e.error.kind(),
        took.as_secs_f64()
    );
    assert!(e.is_transient(), "{:?}", e.error);
    assert!(took <= attempt + SLACK, "ended {took:?} after it began");
    let rerun = posts
        .upsert_many(&docs)
        .retry(RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(rerun.failures.len(), 0, "{rerun:?}");
    assert_eq!(stored_posts(&db).await, docs);
}
