//! natural-key on engines that behave as the managed services document (docs/engines.md),
//! through the test proxy's engine mode on the real engine: Azure Cosmos DB's throttle (16500
//! with `RetryAfterMs`) of whole commands and of some statements of a batch, its unknown
//! outcome (50 after applying), and an engine that answers only the legacy `isMaster`.
//!
//! Every suite ends with the stored data exactly the input and the outcome counts exact; with a
//! retry policy no throttle is a permanent error, without one every throttle is transient.

mod support;

use std::time::{Duration, Instant};

use natural_key::bson::{doc, Document};
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{Collection, RetryPolicy};
use support::proxy::{self, Engine, Faults, Proxy};

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

fn corpus(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("post-{i:05}"),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            body: format!("body of post {i}"),
        })
        .collect()
}

fn events(n: usize) -> Vec<Click> {
    (0..n)
        .map(|i| Click {
            id: Ulid::new(),
            page: format!("/{i}"),
        })
        .collect()
}

/// What a throttled engine looks like in the suites: a tenth of the write commands refused
/// whole, a tenth cut (some statements applied, the rest refused), one in twenty applied and
/// answered 50. A short wait keeps the suites quick; the wait itself is tested on its own.
fn busy() -> Engine {
    Engine {
        throttle_command: 0.1,
        throttle_statements: 0.1,
        unknown_outcome: 0.05,
        retry_after_ms: 5,
        ..Engine::none()
    }
}

fn patient() -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(200)
        .deadline(Duration::from_secs(120))
}

/// The test's database, directly and through a proxy in engine mode.
async fn through_engine(test: &str, engine: Engine, seed: u64) -> (Database, Database, Proxy) {
    let (direct, _) = support::database(test).await;
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), seed).await;
    proxy.set_engine(engine);
    let client = support::client_for(&proxy.uri(), &support::Commands::default()).await;
    (
        direct,
        client.database(&support::database_name(test)),
        proxy,
    )
}

/// Every stored post, read directly, as the input type.
async fn stored_posts(direct: &Database) -> Vec<Post> {
    let docs = support::all_documents(&direct.collection::<Document>("posts")).await;
    let mut posts: Vec<Post> = docs
        .into_iter()
        .map(|d| natural_key::bson::from_document(d).unwrap())
        .collect();
    posts.sort_by(|a, b| a.slug.cmp(&b.slug));
    posts
}

#[tokio::test]
async fn open_works_on_an_engine_without_hello() {
    let engine = Engine {
        no_hello: true,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("no_hello", engine, 1).await;
    let detected = Collection::<Post>::open(&direct, "posts").await.unwrap();
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let stats = proxy.stats();
    assert!(
        stats.hellos_refused >= 1,
        "natural-key asked `hello` first: {stats:?}"
    );
    assert_eq!(
        stats.count("hello"),
        stats.hellos_refused,
        "only natural-key's detection sent `hello`: the driver kept to `isMaster`"
    );
    assert!(stats.count("isMaster") + stats.count("ismaster") >= 1);
    assert_eq!(
        posts.deployment(),
        detected.deployment(),
        "the same engine, the same facts"
    );
    let p = &corpus(1)[0];
    assert!(matches!(
        p.upsert(&posts).await.unwrap(),
        UpsertOutcome::Inserted(_)
    ));
}

#[tokio::test]
async fn a_throttled_write_waits_as_long_as_the_engine_asks() {
    let engine = Engine {
        throttle_command: 1.0,
        retry_after_ms: 400,
        at_most: 1,
        ..Engine::none()
    };
    let (_direct, db, proxy) = through_engine("retry_after", engine, 2).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let p = &corpus(1)[0];
    let start = Instant::now();
    let outcome = posts.upsert(p).retry(RetryPolicy::default()).await.unwrap();
    let took = start.elapsed();
    assert!(matches!(outcome, UpsertOutcome::Inserted(_)), "{outcome:?}");
    let stats = proxy.stats();
    assert_eq!(stats.throttled_commands, 1);
    assert_eq!(
        stats.count("insert"),
        2,
        "the throttled insert, then the same insert once more: {stats:?}"
    );
    // A lower bound: a busy machine only makes the call slower. Without RetryAfterMs the
    // policy's first backoff is 25-50 ms.
    assert!(
        took >= Duration::from_millis(400),
        "the insert was sent again after {took:?}, before the 400 ms the engine asked for"
    );
}

#[tokio::test]
async fn a_partly_applied_batch_sends_again_only_what_was_refused() {
    let engine = Engine {
        throttle_statements: 1.0,
        retry_after_ms: 5,
        at_most: 1,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("partial", engine, 3).await;
    let commands = support::Commands::default();
    let client = support::client_for(&proxy.uri(), &commands).await;
    let posts = Collection::<Post>::new(client.database(db.name()).collection("posts"))
        .await
        .unwrap();
    let docs = corpus(10);
    commands.reset();
    let report = posts.upsert_many(&docs).retry(patient()).await.unwrap();
    assert_eq!(
        (report.inserted, report.failures.len()),
        (10, 0),
        "{report:?}"
    );
    let refused = proxy.stats().throttled_statements as usize;
    assert!((1..10).contains(&refused), "{:?}", proxy.stats());
    let inserts = commands.documents("insert");
    assert_eq!(
        inserts.len(),
        2,
        "the batch, then what was refused: {inserts:?}"
    );
    let ids = |cmd: &Document| -> Vec<String> {
        let docs = cmd.get_array("documents").unwrap();
        docs.iter()
            .map(|d| d.as_document().unwrap().get_str("_id").unwrap().to_string())
            .collect()
    };
    let (first, again) = (ids(&inserts[0]), ids(&inserts[1]));
    assert_eq!(first.len(), 10);
    assert_eq!(
        again.len(),
        refused,
        "only the refused documents are sent again"
    );
    assert!(again.iter().all(|id| first.contains(id)));
    assert_eq!(stored_posts(&direct).await, docs);
}

#[tokio::test]
async fn an_unknown_outcome_is_decided_by_the_next_read() {
    let engine = Engine {
        unknown_outcome: 1.0,
        at_most: 2,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("unknown", engine, 4).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let clicks = Collection::<Click>::open(&db, "clicks").await.unwrap();
    let p = &corpus(1)[0];
    // Applied, answered 50: still this call's insert, not somebody else's `Unchanged`.
    let outcome = p.upsert(&posts).retry(patient()).await.unwrap();
    assert!(matches!(outcome, UpsertOutcome::Inserted(_)), "{outcome:?}");
    let click = Click {
        id: Ulid::new(),
        page: "/".into(),
    };
    let outcome = click.upsert(&clicks).retry(patient()).await.unwrap();
    assert!(matches!(outcome, InsertOutcome::Inserted(_)), "{outcome:?}");
    assert_eq!(proxy.stats().unknown_outcomes, 2);
    assert_eq!(stored_posts(&direct).await, vec![p.clone()]);
    let stored = direct
        .collection::<Document>("clicks")
        .count_documents(doc! {})
        .await;
    assert_eq!(stored.unwrap(), 1);
}

#[tokio::test]
async fn single_upserts_on_a_busy_engine_are_exact() {
    let (direct, db, proxy) = through_engine("single", busy(), 5).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus(100);
    for p in &docs {
        let outcome = p.upsert(&posts).retry(patient()).await.unwrap();
        assert!(matches!(outcome, UpsertOutcome::Inserted(_)), "{outcome:?}");
    }
    for p in &docs {
        let outcome = p.upsert(&posts).retry(patient()).await.unwrap();
        assert!(
            matches!(outcome, UpsertOutcome::Unchanged(_)),
            "{outcome:?}"
        );
    }
    let stats = proxy.stats();
    assert!(stats.engine_actions > 0, "the engine was busy: {stats:?}");
    assert_eq!(stored_posts(&direct).await, docs);
}

#[tokio::test]
async fn batches_on_a_busy_engine_are_exact() {
    let (direct, db, proxy) = through_engine("batch", busy(), 6).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let mut docs = corpus(2000);
    let counts =
        |r: &natural_key::BatchReport| (r.inserted, r.updated, r.unchanged, r.failures.len());

    let r = posts
        .upsert_many(&docs)
        .batch_size(100)
        .retry(patient())
        .await
        .unwrap();
    assert_eq!(counts(&r), (2000, 0, 0, 0), "first ingest");
    let r = posts
        .upsert_many(&docs)
        .batch_size(100)
        .retry(patient())
        .await
        .unwrap();
    assert_eq!(counts(&r), (0, 0, 2000, 0), "unchanged re-ingest");
    for p in docs.iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
    }
    let r = posts
        .upsert_many(&docs)
        .batch_size(100)
        .retry(patient())
        .await
        .unwrap();
    assert_eq!(counts(&r), (0, 20, 1980, 0), "1% changed");

    let stats = proxy.stats();
    assert!(
        stats.throttled_commands > 0
            && stats.throttled_statements > 0
            && stats.unknown_outcomes > 0,
        "every behaviour was met: {stats:?}"
    );
    assert_eq!(stored_posts(&direct).await, docs);
}

#[tokio::test]
async fn events_on_a_busy_engine_are_stored_once() {
    let (direct, db, proxy) = through_engine("events", busy(), 7).await;
    let clicks = Collection::<Click>::open(&db, "clicks").await.unwrap();
    let events = events(1500);
    let r = clicks
        .insert_many(&events)
        .batch_size(300)
        .retry(patient())
        .await
        .unwrap();
    assert_eq!(
        (r.inserted, r.already_applied, r.failures.len()),
        (1500, 0, 0),
        "{r:?}"
    );
    let r = clicks
        .insert_many(&events)
        .batch_size(300)
        .retry(patient())
        .await
        .unwrap();
    assert_eq!(
        (r.inserted, r.already_applied, r.failures.len()),
        (0, 1500, 0),
        "{r:?}"
    );
    assert!(proxy.stats().engine_actions > 0);
    let stored = direct
        .collection::<Document>("clicks")
        .count_documents(doc! {})
        .await;
    assert_eq!(stored.unwrap(), 1500);
}

#[tokio::test]
async fn maintenance_on_a_busy_engine_is_exact() {
    let (direct, db, proxy) = through_engine("maintain", busy(), 8).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus(600);
    let r = posts.upsert_many(&docs).retry(patient()).await.unwrap();
    assert_eq!(r.inserted, 600);
    // Documents another program wrote, without natural-key's fields: adopted.
    let legacy: Vec<Document> = (600..700)
        .map(|i| {
            let p = &corpus(700)[i];
            doc! { "slug": &p.slug, "published_at": p.published_at, "body": &p.body }
        })
        .collect();
    direct
        .collection::<Document>("posts")
        .insert_many(legacy)
        .await
        .unwrap();
    let adopted = posts.adopt().await.unwrap();
    assert_eq!(
        (adopted.adopted, adopted.failures.len()),
        (100, 0),
        "{adopted:?}"
    );
    let audit = posts.audit().await.unwrap();
    assert!(audit.is_clean(), "{audit}");
    // A snapshot without the last 50: pruned.
    let kept = &corpus(700)[..650];
    let sync = posts
        .upsert_many(kept)
        .retry(patient())
        .prune()
        .await
        .unwrap();
    assert_eq!(sync.pruned.deleted, 50, "{:?}", sync.pruned);
    assert!(proxy.stats().engine_actions > 0);
    assert_eq!(stored_posts(&direct).await, kept);
}

/// Adopt merges the copies of a document with one set-based delete. On an engine that refuses
/// commands, and single statements, as busy (Cosmos DB's 16500), that delete is sent again
/// after the wait, as every other write is: every copy merged, the count exact. (A refused
/// statement of it was a permanent `WriteFailed`.)
#[tokio::test]
async fn adopt_merges_copies_on_a_busy_engine() {
    let engine = Engine {
        throttle_command: 0.3,
        throttle_statements: 0.3,
        retry_after_ms: 5,
        at_most: 12,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("adopt_busy", engine, 4).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus(50);
    // Two copies of each post, as code that sent an insert again with a fresh id leaves them.
    let copies: Vec<Document> = docs
        .iter()
        .flat_map(|p| {
            let d = doc! { "slug": &p.slug, "published_at": p.published_at, "body": &p.body };
            [d.clone(), d]
        })
        .collect();
    direct
        .collection::<Document>("posts")
        .insert_many(copies)
        .await
        .unwrap();
    let adopted = posts.adopt().await.unwrap();
    assert_eq!(
        (adopted.adopted, adopted.merged, adopted.failures.len()),
        (50, 100, 0),
        "{adopted:?}"
    );
    let stats = proxy.stats();
    assert!(
        stats.commands.get("delete").copied().unwrap_or(0) >= 2,
        "the set-based delete met the busy engine: {stats:?}"
    );
    assert!(posts.audit().await.unwrap().is_clean());
    assert_eq!(stored_posts(&direct).await, docs);
}

/// Rekey moves a document with an insert, an update and a delete; on a busy engine it waits
/// out throttles, and a move that met an unknown outcome is finished by running it again
/// (`ConcurrentChange`, transient), as a move killed anywhere is.
#[tokio::test]
async fn rekey_on_a_busy_engine_moves_each_document_once() {
    let (direct, db, proxy) = through_engine("rekey", busy(), 10).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus(40);
    let r = posts.upsert_many(&docs).retry(patient()).await.unwrap();
    assert_eq!(r.inserted, 40);
    let mut corrected = docs.clone();
    for p in corrected.iter_mut().take(20) {
        p.published_at += 1;
    }
    for p in &corrected[..20] {
        let mut runs = 0;
        let moved = loop {
            runs += 1;
            match posts.rekey(p).await {
                Ok(outcome) => break outcome,
                Err(e) if e.is_transient() && runs < 20 => continue,
                Err(e) => panic!("rekey of {} failed after {runs} runs: {e}", p.slug),
            }
        };
        let expected = p.id().unwrap();
        assert!(
            matches!(moved, natural_key::RekeyOutcome::Moved { to, .. } if to == expected),
            "{moved:?}"
        );
    }
    assert!(proxy.stats().engine_actions > 0, "{:?}", proxy.stats());
    let stored = stored_posts(&direct).await;
    assert_eq!(
        stored.len(),
        40,
        "each document moved once: no copy left behind"
    );
    assert_eq!(stored, corrected);
    let ids: Vec<String> = support::all_documents(&direct.collection::<Document>("posts"))
        .await
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_string())
        .collect();
    for p in &corrected {
        assert!(
            ids.contains(&p.id().unwrap().to_string()),
            "{} at its id",
            p.slug
        );
    }
}

/// A write refused as inside a transaction the engine aborted (251 `NoSuchTransaction` with the
/// label `TransientTransactionError`) ends the call at its first attempt, under the handle's
/// default policy as under any: no attempt can succeed in a transaction that is gone, and the
/// caller's transaction loop is what runs it again. Transient all the same, for that loop.
#[tokio::test]
async fn an_aborted_transaction_ends_the_call_at_once() {
    let engine = Engine {
        transaction_aborted: 1.0,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("transaction_aborted", engine, 13).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus(3);

    let e = docs[0].upsert(&posts).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    let e = posts.upsert_many(&docs).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    let e = posts
        .upsert(&docs[1])
        .retry(RetryPolicy::default().max_attempts(5))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert_eq!(
        proxy.stats().transactions_aborted,
        3,
        "one attempt per call"
    );
    assert!(stored_posts(&direct).await.is_empty());
}

#[tokio::test]
async fn without_a_policy_every_throttle_is_transient() {
    let engine = Engine {
        throttle_command: 1.0,
        retry_after_ms: 5,
        ..Engine::none()
    };
    let (direct, db, _proxy) = through_engine("no_policy", engine, 9).await;
    let none = RetryPolicy::none();
    let posts = Collection::<Post>::open(&db, "posts")
        .retry(none)
        .await
        .unwrap();
    let clicks = Collection::<Click>::open(&db, "clicks")
        .retry(none)
        .await
        .unwrap();
    let docs = corpus(20);

    let e = docs[0].upsert(&posts).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert_eq!(e.kind(), "throttled");
    assert!(e.retry_after().is_some(), "{e:?}");

    let e = posts.upsert_many(&docs).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");

    let events = events(1500);
    let e = clicks.insert_many(&events).await.unwrap_err();
    assert!(
        e.is_transient(),
        "one transient error, not a failure per event: {e:?}"
    );
    assert!(e.report.failures.is_empty(), "{:?}", e.report.failures);

    let written = direct
        .collection::<Document>("posts")
        .count_documents(doc! {})
        .await;
    assert_eq!(written.unwrap(), 0, "a throttled command applied nothing");
}

/// A large re-ingest on a throttled engine, with the default policy: every throttled `find`,
/// `getMore` and write is sent again where it failed, and the call finishes exact. First the
/// engine refuses the re-ingest's first read eight times in a row (fewer than the policy's ten
/// attempts, which bound one command's throttles in a row); then a fifth of its reads and a
/// fifth of its writes. A throttled read is sent again where it failed, not from the batch's
/// start, so a batch's attempts are not spent on its restarts. Size `NK_THROTTLE_DOCS` (default 20,000; the figure in docs/reliability.md is
/// 100,000).
#[tokio::test]
async fn a_large_reingest_on_a_throttled_engine_converges_with_the_default_policy() {
    let n: usize = support::env_or("NK_THROTTLE_DOCS", 20_000);
    let (direct, db, proxy) = through_engine("throttled_reingest", Engine::none(), 11).await;
    let stored = Collection::<Post>::open(&direct, "posts").await.unwrap();
    let mut docs = corpus(n);
    let r = stored.upsert_many(&docs).await.unwrap();
    assert_eq!(r.inserted as usize, n);
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let edited = n.div_ceil(100) as u64;
    for (phase, engine) in [
        Engine {
            throttle_reads: 1.0,
            at_most: 8,
            retry_after_ms: 5,
            ..Engine::none()
        },
        Engine {
            throttle_reads: 0.2,
            throttle_command: 0.1,
            throttle_statements: 0.1,
            retry_after_ms: 5,
            ..Engine::none()
        },
    ]
    .into_iter()
    .enumerate()
    {
        for p in docs.iter_mut().skip(phase).step_by(100) {
            p.body.push_str(" (edited)");
        }
        proxy.reset_stats();
        proxy.set_engine(engine);
        let start = Instant::now();
        let r = posts
            .upsert_many(&docs)
            .retry(RetryPolicy::default())
            .await
            .unwrap_or_else(|e| panic!("after {:?}: {e} ({:?})", start.elapsed(), proxy.stats()));
        assert_eq!(
            (r.inserted, r.updated, r.unchanged, r.failures.len()),
            (0, edited, n as u64 - edited, 0),
            "{r:?}"
        );
        let stats = proxy.stats();
        if phase == 0 {
            assert_eq!(stats.throttled_reads, 8, "{stats:?}");
        }
        println!(
            "{n} documents re-ingested in {:?}: {} reads and {} write commands/statements \
             throttled",
            start.elapsed(),
            stats.throttled_reads,
            stats.throttled_commands + stats.throttled_statements
        );
        assert_eq!(stored_posts(&direct).await, docs);
    }
}

/// A read the engine refuses as busy, without a policy to wait in: `Error::Throttled`, with
/// the engine's wait, as a throttled write is (it was `Error::Transient`).
#[tokio::test]
async fn a_throttled_read_without_a_policy_is_a_throttle() {
    let (direct, db, proxy) = through_engine("throttled_read", Engine::none(), 12).await;
    let stored = Collection::<Post>::open(&direct, "posts").await.unwrap();
    let docs = corpus(3);
    stored.upsert_many(&docs).await.unwrap();
    proxy.set_engine(Engine {
        throttle_reads: 1.0,
        retry_after_ms: 7,
        ..Engine::none()
    });
    let posts = Collection::<Post>::open(&db, "posts")
        .retry(RetryPolicy::none())
        .await
        .unwrap();
    let e = docs[0].upsert(&posts).await.unwrap_err();
    assert_eq!(e.kind(), "throttled", "{e:?}");
    assert_eq!(e.retry_after(), Some(Duration::from_millis(7)));
    let e = posts.get(docs[0].id().unwrap()).await.unwrap_err();
    assert_eq!(e.kind(), "throttled", "{e:?}");
    assert_eq!(proxy.stats().throttled_reads, 2);
}

/// MongoDB 8.2+ and Atlas under overload: a tenth of the commands, reads and writes, refused
/// with 463 labelled `SystemOverloadedError`, `RetryableError`, `NoWritesPerformed` (not run:
/// sent again), and one write in twenty applied and answered 463 with `SystemOverloadedError`
/// alone (it may have run: decided by the next read). Outcomes stay exact.
#[tokio::test]
async fn overload_errors_are_sent_again_or_decided_by_their_labels() {
    let engine = Engine {
        overload: 0.1,
        overload_after_apply: 0.05,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("overload", engine, 13).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let clicks = Collection::<Click>::open(&db, "clicks").await.unwrap();
    let mut docs = corpus(1000);
    let counts =
        |r: &natural_key::BatchReport| (r.inserted, r.updated, r.unchanged, r.failures.len());
    let policy = RetryPolicy::default();
    let r = posts
        .upsert_many(&docs)
        .batch_size(100)
        .retry(policy)
        .await
        .unwrap();
    assert_eq!(counts(&r), (1000, 0, 0, 0), "first ingest");
    for p in docs.iter_mut().step_by(50) {
        p.body.push_str(" (edited)");
    }
    let r = posts
        .upsert_many(&docs)
        .batch_size(100)
        .retry(policy)
        .await
        .unwrap();
    assert_eq!(counts(&r), (0, 20, 980, 0), "2% changed");
    for p in &docs[..50] {
        let outcome = p.upsert(&posts).retry(policy).await.unwrap();
        assert!(
            matches!(outcome, UpsertOutcome::Unchanged(_)),
            "{outcome:?}"
        );
    }
    let events = events(1000);
    let r = clicks
        .insert_many(&events)
        .batch_size(100)
        .retry(policy)
        .await
        .unwrap();
    assert_eq!(
        (r.inserted, r.already_applied, r.failures.len()),
        (1000, 0, 0),
        "{r:?}"
    );
    let stats = proxy.stats();
    assert!(
        stats.overloaded > 0 && stats.overloaded_after_apply > 0,
        "both were met: {stats:?}"
    );
    assert_eq!(stored_posts(&direct).await, docs);
    let stored = direct
        .collection::<Document>("clicks")
        .count_documents(doc! {})
        .await;
    assert_eq!(stored.unwrap(), 1000);

    // Without a policy: a throttle, and nothing written.
    proxy.set_engine(Engine {
        overload: 1.0,
        ..Engine::none()
    });
    let fresh = corpus(1001).pop().unwrap();
    let e = fresh
        .upsert(&posts.with_retry(RetryPolicy::none()))
        .await
        .unwrap_err();
    assert_eq!((e.kind(), e.is_transient()), ("throttled", true), "{e:?}");
    assert_eq!(stored_posts(&direct).await, docs);
}

/// An engine that drops cursors (CursorNotFound on every other `getMore`, as after a restart or
/// an idle timeout): a guard read is read again, and audit, adopt and prune scans read on
/// from the last `_id` they handed out — the same counts as without, no document skipped or
/// seen twice. Before, each of them failed with the engine's error.
#[tokio::test]
async fn dropped_cursors_are_read_again_never_skipped() {
    let engine = Engine {
        lose_every_nth_get_more: 2,
        ..Engine::none()
    };
    let (direct, db, proxy) = through_engine("cursors", Engine::none(), 14).await;
    // More than a scan's batch (10,000): the scans need `getMore`s. Legacy documents of two
    // `_id` types (ObjectId, a string) sort after the natural-key ones and between them.
    let n = 21_000;
    let all = corpus(n + 600);
    let stored = Collection::<Post>::open(&direct, "posts").await.unwrap();
    stored.upsert_many(&all[..n]).await.unwrap();
    let legacy: Vec<Document> = all[n..]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut d = doc! { "slug": &p.slug, "published_at": p.published_at, "body": &p.body };
            if i % 2 == 1 {
                d.insert("_id", format!("legacy-{i:04}"));
            }
            d
        })
        .collect();
    direct
        .collection::<Document>("posts")
        .insert_many(legacy)
        .await
        .unwrap();
    let expected = stored.audit().await.unwrap();
    proxy.set_engine(engine);
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();

    let audit = posts.audit().await.unwrap();
    assert_eq!(format!("{audit:?}"), format!("{expected:?}"));
    assert_eq!((audit.scanned, audit.legacy.count), (n as u64 + 600, 600));

    let mut docs = all.clone();
    for p in docs.iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
    }
    let r = posts
        .upsert_many(&docs[..n])
        .retry(RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(
        (r.updated, r.unchanged, r.failures.len()),
        (210, n as u64 - 210, 0),
        "{r:?}"
    );

    let adopted = posts.adopt().await.unwrap();
    assert_eq!(
        (adopted.adopted, adopted.failures.len()),
        (600, 0),
        "{adopted:?}"
    );
    let audit = stored.audit().await.unwrap();
    assert!(audit.is_clean(), "{audit}");

    let kept = &docs[..n + 500];
    let sync = posts
        .upsert_many(kept)
        .retry(RetryPolicy::default())
        .prune()
        .await
        .unwrap();
    assert_eq!(sync.pruned.deleted, 100, "{:?}", sync.pruned);
    let stats = proxy.stats();
    assert!(stats.cursors_lost > 0, "cursors were dropped: {stats:?}");
    assert_eq!(stored_posts(&direct).await, kept);
}

/// A re-ingest of 300 unchanged posts through an engine in `mode`, its guard reads in replies
/// of 50 (a `find` and six `getMore`s) under the default policy: its result, the read commands
/// it sent (`find`, `getMore`) and the proxy's counts.
async fn reingest_in_replies_of_50(
    test: &str,
    seed: u64,
    mode: Engine,
) -> (
    Result<natural_key::BatchReport, natural_key::BatchError>,
    Vec<String>,
    proxy::Stats,
) {
    let (direct, _, proxy) = through_engine(test, Engine::none(), seed).await;
    let docs = corpus(300);
    let stored = Collection::<Post>::open(&direct, "posts").await.unwrap();
    stored.upsert_many(&docs).await.unwrap();
    let commands = support::Commands::default();
    let client = support::client_for(&proxy.uri(), &commands).await;
    let db = client.database(direct.name());
    let deployment = natural_key::Deployment::detect(db.client()).await.unwrap();
    let limits = natural_key::Limits {
        read_batch: 50,
        min_read_identities: 300,
        max_read_identities: 300,
        span_reads: false,
        ..deployment.limits()
    };
    let posts = Collection::new(db.collection::<Post>("posts"))
        .deployment(deployment.with_limits(limits))
        .await
        .unwrap();
    commands.reset();
    proxy.set_engine(mode);
    let r = posts.upsert_many(&docs).retry(RetryPolicy::default()).await;
    let reads = commands
        .sequence()
        .into_iter()
        .filter(|c| c == "find" || c == "getMore")
        .collect();
    (r, reads, proxy.stats())
}

/// A `getMore` that may have run (answered 463 `SystemOverloadedError` alone, after it ran)
/// moved its cursor on: sent again, it would skip a batch of the guard read. The read starts
/// over instead: on the wire, the next read command after it is a `find`.
#[tokio::test]
async fn a_get_more_that_may_have_run_is_not_sent_again() {
    let mode = Engine {
        overload_after_apply: 1.0,
        at_most: 1,
        ..Engine::none()
    };
    let (r, reads, stats) = reingest_in_replies_of_50("get_more_ran", 15, mode).await;
    let r = r.unwrap_or_else(|e| panic!("{e}: {reads:?}"));
    assert_eq!((r.unchanged, r.failures.len()), (300, 0), "{r:?}");
    if stats.overloaded_after_apply == 0 {
        // mongo-java-server answers a whole result in its first batch: no `getMore`.
        assert!(!reads.contains(&"getMore".to_string()), "{reads:?}");
        return;
    }
    let first = reads.iter().position(|c| c == "getMore").unwrap();
    assert_eq!(
        reads.get(first + 1).map(String::as_str),
        Some("find"),
        "the read started over after the getMore that may have run: {reads:?}"
    );
}

/// A guard read of many batches on an engine that keeps refusing reads as busy: after a
/// refused `getMore` the read goes on by commands whose refused `getMore`s are sent again in
/// place, and it ends. Started over at every refusal instead, a read of seven commands half of
/// which are refused would need about 128 starts, far past the policy's ten.
#[tokio::test]
async fn a_guard_read_of_many_batches_ends_on_an_engine_that_keeps_throttling() {
    let mode = Engine {
        throttle_reads: 0.5,
        retry_after_ms: 1,
        ..Engine::none()
    };
    let (r, reads, stats) = reingest_in_replies_of_50("throttled_get_more", 16, mode).await;
    let r = r.unwrap_or_else(|e| panic!("{e}: {reads:?} {stats:?}"));
    assert_eq!((r.unchanged, r.failures.len()), (300, 0), "{r:?}");
    if !reads.contains(&"getMore".to_string()) {
        // mongo-java-server answers a whole result in its first batch.
        return;
    }
    assert!(stats.throttled_reads > 0, "{reads:?}");
}

/// A unique index the engine will not build (here: stored documents already share an
/// identity; on Cosmos DB also any non-empty collection) is a typed error naming the remedy,
/// not the engine's bare refusal.
#[tokio::test]
async fn an_index_the_engine_will_not_build_is_a_typed_error() {
    let (direct, _) = support::database("index_refused").await;
    let shared = doc! { "_nk_identity": "same", "slug": "a", "published_at": 1, "body": "" };
    let twin = doc! { "_nk_identity": "same", "slug": "b", "published_at": 2, "body": "" };
    direct
        .collection::<Document>("posts")
        .insert_many([shared, twin])
        .await
        .unwrap();
    let e = Collection::<Post>::open(&direct, "posts")
        .await
        .unwrap_err();
    match &e {
        natural_key::Error::IndexUnavailable { name, field, .. } => {
            assert_eq!(
                (name.as_str(), field.as_str()),
                ("nk_identity", "_nk_identity")
            );
        }
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("before its first document is written"),
        "{text}"
    );
    assert!(!e.is_transient());
}
