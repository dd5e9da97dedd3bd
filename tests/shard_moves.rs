//! The cluster changes shape while natural-key writes: shards move between workers mid-call
//! (`scripts/db move`: Citus' `citus_move_shard_placement`, as an operator or the rebalancer
//! runs it), under batches of posts, events, relative updates from four writers, deletes by
//! key, and sixteen writers racing one identity.
//!
//! With a `RetryPolicy` every call ends `Ok` with exact outcomes. The engine itself loses some
//! writes it acknowledged while a shard was moving (DocumentDB 0.106 on Citus 12.1, both
//! transfer modes: `scripts/engine/shard_move_loss.sh` shows it with the engine's own SQL and no
//! natural-key; docs/engines.md), so after each call a replay of it (the repair
//! docs/reliability.md gives) must redo no more writes than the call made while a shard moved,
//! and leave the stored data exactly the input. Without a policy, a call ends `Ok` or with a
//! transient error, and a rerun converges.
//!
//! Cluster only (CI's cluster pass, `NK_EXPECT_ENGINE=cluster`, whose collections are
//! hash-sharded on `_nk_identity`; the events here on `_id`); elsewhere each test says so and
//! returns. Moves are serialized within this binary: Citus moves a shard's whole colocation
//! group, which may hold the collections of the tests running beside it. Size: `NK_MOVE_DOCS`
//! documents (default 3,000), `NK_MOVE_OPS` relative operations (default 400). Each test prints
//! one `MOVES` line: each move's shard, its nodes, how long it took (the longest a write to
//! that shard waits: `block_writes`), and how far the call got while it ran.
//!
//! ```text
//! NK_MOVE_DOCS=100000 cargo test --release --test shard_moves -- --nocapture
//! ```

#[path = "fault_calls/mod.rs"]
mod fault_calls;
mod support;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Instant;

use fault_calls::{
    assert_events_inserted, assert_every_event_once, assert_every_sale_once,
    assert_half_stored_upserted, clicks, corpus, corpus_post, four_writers_apply, items,
    on_cluster, repair_events, replay_sales, shard_clicks, sold_by_kind, stored_posts, Click, Post,
};
use natural_key::bson::Document;
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{ApplyOutcome, Collection, Error, RetryPolicy};
use support::watch::Watch;

/// Moves per call, at a fifth, two fifths and three fifths of its progress: the rest of the
/// call is long enough for the last move to end in it too.
const MOVES: u64 = 3;

fn docs_n() -> usize {
    support::env_or("NK_MOVE_DOCS", 3_000usize)
}

/// One move, as `scripts/db move` reported it, and where the call was.
#[derive(Debug)]
struct Moved {
    /// `SHARD FROM -> TO SECONDS`.
    said: String,
    /// The call's progress when the move began and when it ended.
    at: (u64, u64),
    /// Whether the call was still running when the move ended.
    mid_call: bool,
}

/// The most writes the engine can have lost across `moved`: what the call made while a shard
/// moved, and what was in flight when each move began (`in_flight` per move). A replay that
/// redoes more found a write lost outside a move: natural-key's, not the engine's.
fn lost_at_most(moved: &[Moved], in_flight: u64) -> u64 {
    moved.iter().map(|m| m.at.1 - m.at.0 + in_flight).sum()
}

/// A replay of `call` after the moves redid `redone` writes: ones the engine acknowledged
/// during a move and did not keep. At most [`lost_at_most`].
fn assert_lost_during_moves(call: &str, redone: u64, moved: &[Moved], in_flight: u64) {
    let most = lost_at_most(moved, in_flight);
    println!("REPLAY {call}: {redone} writes redone; {most} made while a shard moved");
    assert!(
        redone <= most,
        "{call}: the replay redid {redone} writes, more than the {most} made while a shard moved"
    );
}

/// What changes the cluster's shape at a point of a call.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// One shard of the call's collection to the next worker (`scripts/db move`).
    Move,
    /// A new worker joins (`scripts/db add-worker`), holding nothing yet.
    AddWorker,
    /// Citus' rebalancer spreads the shards over every worker (`scripts/db rebalance`).
    Rebalance,
}

/// Runs `step` on the pass's cluster: what `scripts/db` printed.
fn change(step: Step, db: &str, coll: &str) -> String {
    // One change at a time in this binary (see the module's doc).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let args: Vec<&str> = match step {
        Step::Move => vec!["move", db, coll],
        Step::AddWorker => vec!["add-worker"],
        Step::Rebalance => vec!["rebalance"],
    };
    let args: Vec<&str> = args.into_iter().chain(["--engine", "cluster"]).collect();
    let said = support::db(&args, &[]).unwrap_or_else(|e| panic!("scripts/db {args:?}: {e}"));
    format!("{step:?} {}", said.trim())
}

fn move_shard(db: &str, coll: &str) -> String {
    change(Step::Move, db, coll)
}

/// Runs `steps[k]` once the call's progress reaches its `k`th point; stops once the call is
/// done.
async fn mover(watch: Arc<Watch>, db: String, coll: &'static str, steps: Vec<Step>) -> Vec<Moved> {
    let mut moved = Vec::new();
    for (&point, &step) in watch.points.iter().zip(&steps) {
        if !watch.until(point).await {
            return moved;
        }
        let from = watch.progress();
        let (d, w) = (db.clone(), watch.clone());
        let said = tokio::task::spawn_blocking(move || {
            // The call goes on once the move has begun: the process is started below.
            w.begin();
            change(step, &d, coll)
        })
        .await
        .unwrap();
        moved.push(Moved {
            said,
            at: (from, watch.progress()),
            mid_call: !watch.is_done(),
        });
    }
    moved
}

/// `call`, with three shard moves of `db.coll` aimed at it: its result and the moves.
async fn moved_call<R, F>(
    db: &Database,
    coll: &'static str,
    total: u64,
    call: impl FnOnce(Arc<Watch>) -> F,
) -> (R, Vec<Moved>, f64)
where
    F: std::future::Future<Output = R>,
{
    changed_call(db, coll, total, vec![Step::Move; MOVES as usize], call).await
}

/// `call`, with `steps` aimed at it, each at a point of its progress.
async fn changed_call<R, F>(
    db: &Database,
    coll: &'static str,
    total: u64,
    steps: Vec<Step>,
    call: impl FnOnce(Arc<Watch>) -> F,
) -> (R, Vec<Moved>, f64)
where
    F: std::future::Future<Output = R>,
{
    let n = steps.len();
    let watch = Watch::spread(total, n);
    let mover = tokio::spawn(mover(watch.clone(), db.name().to_string(), coll, steps));
    let start = Instant::now();
    let r = call(watch.clone()).await;
    let secs = start.elapsed().as_secs_f64();
    watch.end();
    let moved = mover.await.unwrap();
    assert_eq!(moved.len(), n, "every change began mid-call: {moved:?}");
    assert!(
        moved.iter().any(|m| m.mid_call),
        "no move ended before the call did: {moved:?}"
    );
    (r, moved, secs)
}

fn report(test: &str, n: usize, moved: &[Moved], secs: f64, outcome: String) {
    println!(
        "MOVES {test}: {n} in {secs:.1} s; moves {:?}; {outcome}",
        moved
            .iter()
            .map(|m| format!(
                "[{}] from {} to {}{}",
                m.said,
                m.at.0,
                m.at.1,
                if m.mid_call { "" } else { " (after the call)" }
            ))
            .collect::<Vec<_>>()
    );
}

/// Half of the posts stored before, 1% of those edited, the other half new: one
/// `upsert_many` inserts, updates and leaves alone while three shards move.
#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_many_rides_out_shard_moves() {
    if !on_cluster("an_upsert_many_rides_out_shard_moves") {
        return;
    }
    upsert_across_moves("moves_upsert", false).await;
}

/// The same through `upsert_stream`, the posts made one at a time as the stream is read (the
/// input is never held whole: the 100,000-post runs of docs/reliability.md).
#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_stream_rides_out_shard_moves() {
    if !on_cluster("an_upsert_stream_rides_out_shard_moves") {
        return;
    }
    upsert_across_moves("moves_stream", true).await;
}

/// The post `i` of the test's input: the first half stored before the call, every 100th of
/// those edited.
fn post(i: usize) -> Post {
    let mut p = corpus_post("move", i);
    if i < docs_n() / 2 && i.is_multiple_of(100) {
        p.body.push_str(" (edited)");
    }
    p
}

async fn upsert_across_moves(test: &str, stream: bool) {
    let n = docs_n();
    let (db, _) = support::database(test).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    posts
        .upsert_stream(futures::stream::iter(
            (0..n / 2).map(|i| corpus_post("move", i)),
        ))
        .await
        .unwrap();
    let edited = (n / 2).div_ceil(100) as u64;
    let call = if stream {
        "upsert_stream"
    } else {
        "upsert_many"
    };
    let docs: Vec<Post> = (0..n).map(post).collect();
    let (r, moved, secs) = moved_call(&db, "posts", n as u64, |seen| {
        let progress = move |r: &natural_key::BatchReport| seen.reached(r.processed());
        let retry = RetryPolicy::default();
        if stream {
            let input = futures::stream::iter((0..n).map(post));
            let call = posts.upsert_stream(input).batch_size(250).retry(retry);
            call.on_progress(progress).into_future()
        } else {
            let call = posts.upsert_many(&docs).batch_size(250).retry(retry);
            call.on_progress(progress).into_future()
        }
    })
    .await;
    let r = r.unwrap_or_else(|e| panic!("across {moved:?}: {}", natural_key::ErrorChain(&e)));
    report(
        call,
        n,
        &moved,
        secs,
        format!(
            "inserted={} updated={} unchanged={}",
            r.inserted, r.updated, r.unchanged
        ),
    );
    assert_half_stored_upserted(&r, n, edited);
    let replay = posts
        .upsert_stream(futures::stream::iter((0..n).map(post)))
        .await
        .unwrap();
    assert_eq!(replay.failures.len(), 0, "{replay:?}");
    assert_lost_during_moves(call, replay.inserted + replay.updated, &moved, 250);
    assert_eq!(stored_posts(&db).await, docs);
}

/// Events inserted once each while three shards move: none lost, none twice.
#[tokio::test(flavor = "multi_thread")]
async fn an_insert_many_of_events_rides_out_shard_moves() {
    if !on_cluster("an_insert_many_of_events_rides_out_shard_moves") {
        return;
    }
    let n = docs_n();
    let (db, _) = support::database("moves_events").await;
    shard_clicks(&db);
    let events = clicks(n);
    let clicks = Collection::<Click>::open(&db, "clicks").await.unwrap();
    let (r, moved, secs) = moved_call(&db, "clicks", n as u64, |seen| {
        clicks
            .insert_many(&events)
            .batch_size(250)
            .retry(RetryPolicy::default())
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    let r = r.unwrap_or_else(|e| panic!("across {moved:?}: {}", natural_key::ErrorChain(&e)));
    report(
        "insert_many",
        n,
        &moved,
        secs,
        format!(
            "inserted={} already_applied={}",
            r.inserted, r.already_applied
        ),
    );
    assert_events_inserted(&r, n);
    let lost = repair_events(&db, &clicks, &events).await;
    assert_lost_during_moves("insert_many", lost, &moved, 250);
    assert_every_event_once(&db, &events).await;
}

/// Relative updates from four racing writers over ten items while three shards move: every
/// operation applied once.
#[tokio::test(flavor = "multi_thread")]
async fn relative_updates_from_four_writers_ride_out_shard_moves() {
    if !on_cluster("relative_updates_from_four_writers_ride_out_shard_moves") {
        return;
    }
    let ops: usize = support::env_or("NK_MOVE_OPS", 400);
    let (db, _) = support::database("moves_apply").await;
    let (coll, ids) = items(&db).await;
    let (outcomes, moved, secs) = moved_call(&db, "items", ops as u64, |watch| {
        four_writers_apply(&coll, &ids, ops, watch)
    })
    .await;
    let by_kind = sold_by_kind(&outcomes, &moved);
    report("apply", ops, &moved, secs, format!("{by_kind:?}"));
    assert!(outcomes
        .iter()
        .all(|(_, r)| matches!(r, Ok(ApplyOutcome::Applied | ApplyOutcome::AlreadyApplied))));
    let redone = replay_sales(&coll, &ids, ops).await;
    assert_lost_during_moves("apply", redone, &moved, 4);
    assert_every_sale_once(&db, ops).await;
}

/// Nine posts in ten stored, then all deleted by key in one `delete_many` while three shards
/// move: nothing left; a stored post `Deleted` or `Gone`, a post never stored `NotFound`.
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_many_rides_out_shard_moves() {
    if !on_cluster("a_delete_many_rides_out_shard_moves") {
        return;
    }
    let n = docs_n();
    let (db, _) = support::database("moves_deletes").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus("gone", n);
    let stored: Vec<Post> = docs.iter().filter(|p| !absent(p)).cloned().collect();
    posts.upsert_many(&stored).await.unwrap();
    let (r, moved, secs) = moved_call(&db, "posts", n as u64, |seen| {
        posts
            .delete_many(&docs)
            .batch_size(250)
            .retry(RetryPolicy::default())
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    let r = r.unwrap_or_else(|e| panic!("across {moved:?}: {}", natural_key::ErrorChain(&e)));
    report(
        "delete_many",
        n,
        &moved,
        secs,
        format!(
            "deleted={} gone={} not_found={}",
            r.deleted, r.gone, r.not_found
        ),
    );
    assert_eq!(
        (r.deleted + r.gone, r.not_found, r.failures.len()),
        (stored.len() as u64, (n - stored.len()) as u64, 0),
        "{r:?}"
    );
    let replay = posts.delete_many(&docs).await.unwrap();
    assert_eq!(replay.failures.len(), 0, "{replay:?}");
    assert_lost_during_moves("delete_many", replay.deleted, &moved, 250);
    let left = support::all_documents(&db.collection::<Document>("posts")).await;
    assert!(left.is_empty(), "{} posts left: {left:?}", left.len());
}

fn absent(p: &Post) -> bool {
    p.published_at / 60_000 % 10 == 3
}

/// Sixteen writers race one identity, each with a different timestamp key, while a shard
/// moves, round after round: one winner and fifteen refused each round, never two documents.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_writers_racing_a_fork_during_moves_leave_one_document() {
    if !on_cluster("sixteen_writers_racing_a_fork_during_moves_leave_one_document") {
        return;
    }
    let rounds = 6;
    let (db, _) = support::database("moves_forks").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let (mut said, mut lost) = (Vec::new(), 0);
    for round in 0..rounds {
        let name = db.name().to_string();
        let mover = tokio::task::spawn_blocking(move || move_shard(&name, "posts"));
        let mut racers = Vec::new();
        for w in 0..16i64 {
            let posts = posts.clone();
            racers.push(tokio::spawn(async move {
                posts
                    .upsert(&racer(round, w))
                    .retry(RetryPolicy::default())
                    .await
            }));
        }
        let (mut winner, mut refused) = (Vec::new(), 0);
        for (w, r) in racers.into_iter().enumerate() {
            match r.await.unwrap() {
                // A winner whose reply a move held back may find its own content on a retry.
                Ok(UpsertOutcome::Inserted(_) | UpsertOutcome::Unchanged(_)) => winner.push(w),
                Err(Error::ImmutableKeyChanged { .. }) => refused += 1,
                other => panic!("round {round}: {other:?}"),
            }
        }
        said.push(mover.await.unwrap());
        assert_eq!((winner.len(), refused), (1, 15), "round {round}");
        let slug = format!("fork-{round}");
        let stored = count_slug(&db, &slug).await;
        // Never two documents: the fork guard. None if the engine lost the winner's insert
        // (the move loss above), which its replay repairs.
        assert!(stored <= 1, "round {round}: {stored} documents");
        if stored == 0 {
            lost += 1;
            let again = posts.upsert(&racer(round, winner[0] as i64)).await.unwrap();
            assert!(matches!(again, UpsertOutcome::Inserted(_)), "{again:?}");
        }
        assert_eq!(
            count_slug(&db, &slug).await,
            1,
            "round {round}: one document"
        );
    }
    println!(
        "MOVES forks: {rounds} rounds of 16 racers; moves {said:?}; one document each round, \
         {lost} written again after the engine lost it"
    );
}

fn racer(round: usize, w: i64) -> Post {
    Post {
        slug: format!("fork-{round}"),
        published_at: 1_700_000_000_000 + w * 1_000,
        body: format!("racer {w}"),
    }
}

async fn count_slug(db: &Database, slug: &str) -> u64 {
    db.collection::<Document>("posts")
        .count_documents(natural_key::bson::doc! { "slug": slug })
        .await
        .unwrap()
}

/// Without a policy, a call across shard moves ends `Ok` or, promptly, with a transient
/// error; the same call run again converges.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_policy_a_call_across_moves_ends_ok_or_transient_and_a_rerun_converges() {
    if !on_cluster(
        "without_a_policy_a_call_across_moves_ends_ok_or_transient_and_a_rerun_converges",
    ) {
        return;
    }
    let n = docs_n();
    let (db, _) = support::database("moves_nopolicy").await;
    let posts = Collection::<Post>::open(&db, "posts")
        .retry(RetryPolicy::none())
        .await
        .unwrap();
    let docs = corpus("np", n);
    let (r, moved, secs) = moved_call(&db, "posts", n as u64, |seen| {
        posts
            .upsert_many(&docs)
            .batch_size(250)
            .on_progress(move |r| seen.reached(r.processed()))
            .into_future()
    })
    .await;
    let ended = match &r {
        Ok(r) => format!("Ok: inserted={} failures={}", r.inserted, r.failures.len()),
        Err(e) => {
            assert!(e.is_transient(), "{e} ({:?})", e.error);
            format!("{} after {secs:.1} s", e.error.kind())
        }
    };
    report("without a policy", n, &moved, secs, ended);
    let rerun = posts.upsert_many(&docs).await.unwrap();
    assert_eq!(rerun.failures.len(), 0, "{rerun:?}");
    assert_eq!(stored_posts(&db).await, docs);
}

/// A worker joins the cluster while an `upsert_many` runs, then Citus' rebalancer moves shards
/// onto it, still mid-call: exact outcomes, the new worker holding its share of the posts, and
/// a replay that redoes no more than what was written while shards moved.
///
/// It leaves the pass's cluster a worker bigger, so it runs alone and last (`--ignored`, CI's
/// cluster pass).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "grows the pass's cluster: run last, alone (.ci/run's cluster pass)"]
async fn a_worker_joins_and_a_rebalance_runs_under_an_upsert_many() {
    if !on_cluster("a_worker_joins_and_a_rebalance_runs_under_an_upsert_many") {
        return;
    }
    let n = docs_n();
    let (db, _) = support::database("moves_rebalance").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let mut docs = corpus("grow", n);
    posts.upsert_many(&docs[..n / 2]).await.unwrap();
    for p in docs[..n / 2].iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
    }
    let (r, moved, secs) = changed_call(
        &db,
        "posts",
        n as u64,
        vec![Step::AddWorker, Step::Rebalance],
        |seen| {
            posts
                .upsert_many(&docs)
                .batch_size(250)
                .retry(RetryPolicy::default())
                .on_progress(move |r| seen.reached(r.processed()))
                .into_future()
        },
    )
    .await;
    let r = r.unwrap_or_else(|e| panic!("across {moved:?}: {}", natural_key::ErrorChain(&e)));
    report(
        "a worker joins, a rebalance",
        n,
        &moved,
        secs,
        format!(
            "inserted={} updated={} unchanged={}",
            r.inserted, r.updated, r.unchanged
        ),
    );
    let edited = (n / 2).div_ceil(100) as u64;
    assert_half_stored_upserted(&r, n, edited);
    let replay = posts.upsert_many(&docs).await.unwrap();
    assert_eq!(replay.failures.len(), 0, "{replay:?}");
    assert_lost_during_moves("rebalance", replay.inserted + replay.updated, &moved, 250);
    assert_eq!(stored_posts(&db).await, docs);
    let new = moved[0].said.rsplit(' ').next().unwrap().to_string();
    let placement = placement(db.name(), "posts");
    assert!(
        placement
            .iter()
            .any(|(node, count)| *node == new && *count > 0),
        "{new} holds posts after the rebalance: {placement:?}"
    );
}

/// How many of `db.coll`'s documents each node holds (`scripts/db placement`).
fn placement(db: &str, coll: &str) -> Vec<(String, u64)> {
    let args = ["placement", "--engine", "cluster", db, coll];
    support::db(&args, &[])
        .unwrap_or_else(|e| panic!("scripts/db placement: {e}"))
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(node, count)| (node.to_string(), count.trim().parse().unwrap()))
        .collect()
}
