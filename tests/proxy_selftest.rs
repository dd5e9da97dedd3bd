//! The fault-injection proxy of tests/support/proxy.rs against the real engine: each fault does
//! to a write what it claims to, seen from the client and from the database.

mod support;

use std::time::Duration;

use futures::TryStreamExt;
use natural_key::bson::{doc, Document};
use natural_key::mongodb::{Collection, Database};
use support::proxy::{self, Fault, Faults, Proxy};

/// The test's database read directly, and the same collection through a proxy with `faults`.
async fn setup(
    test: &str,
    faults: Faults,
    seed: u64,
) -> (Collection<Document>, Collection<Document>, Proxy) {
    let (db, _) = support::database(test).await;
    let direct = db.collection::<Document>("items");
    // The collection exists before any fault, so a faulted insert is the only write in play.
    db.create_collection("items").await.unwrap();
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), faults, seed).await;
    let proxied = proxied(&proxy, db.name())
        .await
        .collection::<Document>("items");
    (direct, proxied, proxy)
}

/// The database named `name` through `proxy`, on a client of its own (no retryable writes).
async fn proxied(proxy: &Proxy, name: &str) -> Database {
    support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(name)
}

async fn ids(coll: &Collection<Document>) -> Vec<i32> {
    let docs: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

#[test]
fn upstream_addr_parses_uris() {
    assert_eq!(
        proxy::upstream_addr("mongodb://127.0.0.1:35403/?retryWrites=false").to_string(),
        "127.0.0.1:35403"
    );
    assert_eq!(
        proxy::upstream_addr("mongodb://u:p@127.0.0.1:1234,h2:5/db?x=y").to_string(),
        "127.0.0.1:1234"
    );
    assert_eq!(
        proxy::upstream_addr("mongodb://127.0.0.1").to_string(),
        "127.0.0.1:27017"
    );
    assert_eq!(
        proxy::upstream_addr("mongodb://localhost:4000").port(),
        4000
    );
}

#[tokio::test]
async fn no_faults_passes_everything_through() {
    let (direct, coll, proxy) = setup("no_faults", Faults::none(), 1).await;
    coll.insert_one(doc! { "_id": 1, "v": "a" }).await.unwrap();
    coll.insert_one(doc! { "_id": 2, "v": "b" }).await.unwrap();
    let found = coll.find_one(doc! { "_id": 2 }).await.unwrap().unwrap();
    assert_eq!(found.get_str("v").unwrap(), "b");
    assert_eq!(ids(&coll).await, [1, 2]);
    assert_eq!(ids(&direct).await, [1, 2]);

    let stats = proxy.stats();
    assert_eq!(stats.count("insert"), 2, "{stats:?}");
    assert_eq!(stats.count("find"), 2, "{stats:?}");
    assert_eq!(stats.count("update"), 0);
    assert_eq!(stats.writes(), 2);
    assert_eq!(stats.writes_forwarded, 2);
    assert_eq!(stats.faults(), 0);
    assert!(stats.connections >= 1);
    assert!(
        stats.count("hello") + stats.count("isMaster") + stats.count("ismaster") >= 1,
        "{stats:?}"
    );
    assert_eq!(
        stats.decisions,
        [
            ("insert".to_string(), Fault::None),
            ("insert".to_string(), Fault::None)
        ]
    );
}

#[tokio::test]
async fn dropped_reply_after_apply_errors_but_the_write_is_applied() {
    let faults = Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    };
    let (direct, coll, proxy) = setup("drop_reply", faults, 2).await;
    let err = coll
        .insert_one(doc! { "_id": 1 })
        .await
        .expect_err("the ack is lost");
    eprintln!("drop_reply_after_apply: {err}");
    assert_eq!(ids(&direct).await, [1], "the insert was applied");
    let stats = proxy.stats();
    assert_eq!(
        (
            stats.count("insert"),
            stats.writes_forwarded,
            stats.replies_dropped
        ),
        (1, 1, 1),
        "{stats:?}"
    );

    // Faults off: the same client recovers and sees the document.
    proxy.set_faults(Faults::none());
    assert_eq!(ids(&coll).await, [1]);
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    assert_eq!(ids(&direct).await, [1, 2]);
}

#[tokio::test]
async fn dropped_request_errors_and_nothing_is_written() {
    let faults = Faults {
        drop_request: 1.0,
        ..Faults::none()
    };
    let (direct, coll, proxy) = setup("drop_request", faults, 3).await;
    let err = coll
        .insert_one(doc! { "_id": 1 })
        .await
        .expect_err("the request is dropped");
    eprintln!("drop_request: {err}");
    assert_eq!(
        ids(&direct).await,
        Vec::<i32>::new(),
        "the server never saw the insert"
    );
    let stats = proxy.stats();
    assert_eq!(
        (
            stats.count("insert"),
            stats.writes_forwarded,
            stats.requests_dropped
        ),
        (1, 0, 1),
        "{stats:?}"
    );

    // Reads are never faulted.
    assert_eq!(ids(&coll).await, Vec::<i32>::new());
    proxy.set_faults(Faults::none());
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    assert_eq!(ids(&direct).await, [1]);
}

#[tokio::test]
async fn reset_mid_reply_errors_but_the_write_is_applied() {
    let faults = Faults {
        reset_mid_reply: 1.0,
        ..Faults::none()
    };
    let (direct, coll, proxy) = setup("reset", faults, 4).await;
    let err = coll
        .insert_one(doc! { "_id": 1 })
        .await
        .expect_err("the reply is cut");
    eprintln!("reset_mid_reply: {err}");
    assert_eq!(ids(&direct).await, [1], "the insert was applied");
    let stats = proxy.stats();
    assert_eq!(
        (stats.count("insert"), stats.writes_forwarded, stats.resets),
        (1, 1, 1),
        "{stats:?}"
    );

    proxy.set_faults(Faults::none());
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    assert_eq!(ids(&direct).await, [1, 2]);
}

/// Every write meets the fault its draw decides; the same seed gives the same decisions.
#[tokio::test]
async fn mixed_faults_are_deterministic_per_seed() {
    let faults = Faults {
        drop_reply_after_apply: 0.25,
        drop_request: 0.25,
        reset_mid_reply: 0.25,
    };
    let (db, _) = support::database("mixed").await;
    let upstream = proxy::upstream_addr(&support::uri());
    let mut runs = Vec::new();
    for (coll_name, seed) in [("a", 42), ("b", 42), ("c", 43)] {
        let direct = db.collection::<Document>(coll_name);
        db.create_collection(coll_name).await.unwrap();
        let proxy = Proxy::start(upstream, faults, seed).await;
        let coll = proxied(&proxy, db.name())
            .await
            .collection::<Document>(coll_name);
        let mut errored = Vec::new();
        for i in 0..16 {
            errored.push(coll.insert_one(doc! { "_id": i }).await.is_err());
        }
        let stats = proxy.stats();
        let decisions: Vec<Fault> = stats
            .decisions
            .iter()
            .map(|(name, f)| {
                assert_eq!(name, "insert");
                *f
            })
            .collect();
        assert_eq!(decisions.len(), 16, "{stats:?}");
        for (i, f) in decisions.iter().enumerate() {
            assert_eq!(errored[i], *f != Fault::None, "insert {i} under {f:?}");
        }
        let applied: Vec<i32> = (0..16)
            .filter(|&i| decisions[i as usize] != Fault::DropRequest)
            .collect();
        assert_eq!(ids(&direct).await, applied);
        let n = |k: Fault| decisions.iter().filter(|&&f| f == k).count() as u64;
        assert_eq!(stats.requests_dropped, n(Fault::DropRequest));
        assert_eq!(stats.replies_dropped, n(Fault::DropReplyAfterApply));
        assert_eq!(stats.resets, n(Fault::ResetMidReply));
        assert_eq!(stats.writes_forwarded, 16 - n(Fault::DropRequest));
        for k in [
            Fault::None,
            Fault::DropRequest,
            Fault::DropReplyAfterApply,
            Fault::ResetMidReply,
        ] {
            assert!(
                n(k) > 0,
                "16 draws at 1/4 each give every kind (seed {seed}): {decisions:?}"
            );
        }
        runs.push(decisions);
    }
    assert_eq!(runs[0], runs[1], "the same seed gives the same decisions");
    assert_ne!(runs[0], runs[2], "another seed gives others");
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 0).await;
    let addr = proxy.addr();
    tokio::net::TcpStream::connect(addr)
        .await
        .expect("the proxy accepts");
    proxy.shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens after shutdown"
    );
}
