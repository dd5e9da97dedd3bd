//! Relative updates applied at most once per operation (issue #29): outcomes and refusals,
//! the record's retention, the interplay with the guarded upsert, and the proof under lost
//! acknowledgements, concurrent writers and killed processes — with a naive `$inc` control.
//! Size: `NK_RELATIVE_OPS` (default 2,000 operations; `.ci/run` runs 10,000 on
//! mongo-java-server, where a lost reply costs the driver about half a second of server
//! selection, so 2,000 of them take four writers about five minutes).

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use natural_key::bson::{doc, Document};
use natural_key::prelude::*;
use natural_key::{
    ApplyOutcome, Change, Collection, Error, OpId, RekeyOutcome, RetryPolicy, OPS_FIELD,
    OPS_PRUNED_TO_FIELD,
};
use support::child::{self, Kill};
use support::proxy::{self, Faults, Proxy};

#[derive(NaturalKey, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Item {
    #[key]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    title: String,
    #[natural_key(relative)]
    stock: i64,
    #[natural_key(relative)]
    #[serde(default)]
    payments: Vec<String>,
}

fn item(sku: &str, stock: i64) -> Item {
    Item {
        sku: sku.into(),
        listed_at: 1_700_000_000_000,
        title: format!("item {sku}"),
        stock,
        payments: Vec::new(),
    }
}

fn ops_n() -> usize {
    support::env_or("NK_RELATIVE_OPS", 2_000usize)
}

fn sell() -> Change {
    Change::new().inc("stock", -1)
}

async fn stored(items: &Collection<Item>, id: natural_key::Ulid) -> Document {
    items
        .inner()
        .clone_with_type::<Document>()
        .find_one(doc! {"_id": id.to_string()})
        .await
        .unwrap()
        .expect("stored")
}

async fn open(test: &str) -> (Collection<Item>, support::Commands) {
    let (db, commands) = support::database(test).await;
    let items = Collection::new(db.collection::<Item>("items"))
        .await
        .unwrap();
    (items, commands)
}

/// The same collection as `items`, reached through `proxy`.
async fn through(proxy: &Proxy, items: &Collection<Item>) -> Collection<Item> {
    let client = support::client_for(&proxy.uri(), &support::Commands::default()).await;
    let db = client.database(items.inner().namespace().db.as_str());
    Collection::new(db.collection::<Item>("items"))
        .deployment(items.deployment().clone())
        .await
        .unwrap()
}

#[tokio::test]
async fn an_operation_applies_once_and_its_retry_is_recognised() {
    let (items, _) = open("rel_once").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let op = OpId::new("order-1", 1_700_000_000_001_i64);
    let first = items.apply(id, op.clone(), sell()).await.unwrap();
    let again = items.apply(id, op.clone(), sell()).await.unwrap();
    assert_eq!(
        (first, again),
        (ApplyOutcome::Applied, ApplyOutcome::AlreadyApplied)
    );
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 9);

    // The same operation id with another change, or another time: refused, nothing written.
    let other = items
        .apply(id, op.clone(), Change::new().inc("stock", -2))
        .await;
    assert!(
        matches!(other, Err(Error::OperationReused { ref op, .. }) if op == "order-1"),
        "{other:?}"
    );
    let later = OpId::new("order-1", 1_700_000_000_002_i64);
    assert!(matches!(
        items.apply(id, later, sell()).await,
        Err(Error::OperationReused { .. })
    ));
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 9);

    // No such document: an error, and nothing created.
    let missing = item("nope", 1).id().unwrap();
    let r = items
        .apply(missing, OpId::new("order-2", 1_i64), sell())
        .await;
    assert!(
        matches!(r, Err(Error::DocumentNotFound { id, .. }) if id == missing),
        "{r:?}"
    );
    assert_eq!(items.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn a_change_outside_the_relative_fields_is_refused_before_sending() {
    let (items, commands) = open("rel_invalid").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    commands.reset();
    let warehouse = "north.south"; // data: never a path
    let cases = [
        Change::new().inc("title", 1),
        Change::new().inc(["stock", warehouse], 1),
        Change::new().set(OPS_FIELD, 1),
        Change::new().set("_id", 1),
        Change::new().inc("$stock", 1),
        Change::new().inc("stock", 1).inc("stock", 2),
        Change::new().inc(["stock", "a\0b"], 1),
    ];
    for change in cases {
        let r = items
            .apply(id, OpId::new("op", 1_i64), change.clone())
            .await;
        assert!(
            matches!(r, Err(Error::InvalidChange { .. })),
            "{change:?}: {r:?}"
        );
    }
    for op in [
        OpId::new("", 1_i64),
        OpId::new("a\0b", 1_i64),
        OpId::new("x".repeat(513), 1_i64),
        OpId::new("op", -1_i64),
    ] {
        let r = items.apply(id, op.clone(), sell()).await;
        assert!(
            matches!(r, Err(Error::InvalidChange { .. })),
            "{op:?}: {r:?}"
        );
    }
    assert_eq!(commands.writes(), 0, "nothing sent");
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 10);
}

/// The record keeps between `retain` and twice as many operations; an operation at or before
/// the newest pruned time is refused, one after it applies.
#[tokio::test]
async fn the_record_is_bounded_and_a_pruned_operation_is_refused() {
    let (items, _) = open("rel_retain").await;
    let it = item("a", 1000);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    for t in 1..=40_i64 {
        let op = OpId::new(format!("op-{t}"), t);
        let r = items.apply(id, op, sell()).retain(4).await.unwrap();
        assert_eq!(r, ApplyOutcome::Applied);
        let doc = stored(&items, id).await;
        let n = doc.get_array(OPS_FIELD).unwrap().len();
        assert!(n <= 8, "record of {n} entries after {t}");
    }
    let doc = stored(&items, id).await;
    assert_eq!(doc.get_i64("stock").unwrap(), 960);
    let pruned_to = doc.get_i64(OPS_PRUNED_TO_FIELD).unwrap();
    assert!(pruned_to >= 30, "pruned to {pruned_to}");
    // A retry of a pruned operation: refused, not applied again.
    let r = items
        .apply(id, OpId::new("op-3", 3_i64), sell())
        .retain(4)
        .await;
    assert!(
        matches!(r, Err(Error::OperationExpired { at_ms: 3, .. })),
        "{r:?}"
    );
    // One still recorded: recognised. A new one: applied.
    let r = items
        .apply(id, OpId::new("op-40", 40_i64), sell())
        .retain(4)
        .await
        .unwrap();
    assert_eq!(r, ApplyOutcome::AlreadyApplied);
    let r = items
        .apply(id, OpId::new("op-41", 41_i64), sell())
        .retain(4)
        .await
        .unwrap();
    assert_eq!(r, ApplyOutcome::Applied);
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 959);
}

/// `rekey` moves a document to the id its corrected timestamp derives: what relative updates
/// own moves with it, as stored — the counters and the record of applied operations. Before,
/// the record was dropped and a replay of an applied operation at the new id applied again.
#[tokio::test]
async fn rekey_moves_the_operation_record_and_replays_stay_applied() {
    let (items, _) = open("rel_rekey").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let old = it.id().unwrap();
    let ops: Vec<OpId> = (1..=3_i64)
        .map(|t| OpId::new(format!("op-{t}"), t))
        .collect();
    for op in &ops {
        let change = sell().push("payments", op.key());
        let r = items.apply(old, op.clone(), change).await.unwrap();
        assert_eq!(r, ApplyOutcome::Applied);
    }
    // The caller's value still says 10 in stock: the stored 7 is what relative updates made.
    let corrected = Item {
        listed_at: it.listed_at + 1,
        ..it.clone()
    };
    let new = corrected.id().unwrap();
    let moved = items.rekey(&corrected).await.unwrap();
    assert_eq!(
        moved,
        RekeyOutcome::Moved {
            from: old.to_string(),
            to: new
        }
    );
    let doc = stored(&items, new).await;
    assert_eq!(doc.get_i64("stock").unwrap(), 7, "{doc}");
    assert_eq!(doc.get_array("payments").unwrap().len(), 3, "{doc}");
    assert_eq!(doc.get_array(OPS_FIELD).unwrap().len(), 3, "{doc}");
    for op in &ops {
        let change = sell().push("payments", op.key());
        let r = items.apply(new, op.clone(), change).await.unwrap();
        assert_eq!(r, ApplyOutcome::AlreadyApplied, "{op:?}");
    }
    assert_eq!(stored(&items, new).await.get_i64("stock").unwrap(), 7);
}

/// Adopt moves a document stored by other code (at an id natural-key did not derive) to its
/// derived id; a pruning sync rewrites what it keeps and deletes what the input dropped. The
/// record of applied operations moves and stays with what is kept: replays are
/// `AlreadyApplied`. Adopt dropped it (it copied no `_nk_` field), so a replay at the derived
/// id was applied a second time.
#[tokio::test]
async fn adopt_and_a_pruning_sync_keep_the_operation_record() {
    let (items, _) = open("rel_adopt").await;
    let raw = items.inner().clone_with_type::<Document>();
    let (a, b) = (item("a", 10), item("b", 10));
    // Stored by other code under a random ULID: relative updates reach it there.
    let legacy = natural_key::Ulid::new();
    raw.insert_one(doc! {
        "_id": legacy.to_string(), "sku": "a", "listed_at": a.listed_at,
        "title": &a.title, "stock": 10_i64, "payments": [],
    })
    .await
    .unwrap();
    items.upsert(&b).await.unwrap();
    let op = |k: &str, t: i64| OpId::new(k, t);
    let pay = |k: &str| sell().push("payments", k);
    for (k, t) in [("a1", 1), ("a2", 2)] {
        let r = items.apply(legacy, op(k, t), pay(k)).await.unwrap();
        assert_eq!(r, ApplyOutcome::Applied);
    }
    let b_id = b.id().unwrap();
    let r = items.apply(b_id, op("b1", 1), pay("b1")).await.unwrap();
    assert_eq!(r, ApplyOutcome::Applied);

    let adopted = items.adopt().await.unwrap();
    assert_eq!(adopted.adopted, 1, "{adopted:?}");
    let a_id = a.id().unwrap();
    let doc = stored(&items, a_id).await;
    assert_eq!(doc.get_i64("stock").unwrap(), 8, "{doc}");
    assert_eq!(doc.get_array(OPS_FIELD).map(|o| o.len()), Ok(2), "{doc}");
    for (k, t) in [("a1", 1), ("a2", 2)] {
        let r = items.apply(a_id, op(k, t), pay(k)).await.unwrap();
        assert_eq!(r, ApplyOutcome::AlreadyApplied, "{k} after adopt");
    }

    // The full input is now `a` edited: `b` goes, `a` is rewritten and keeps its record.
    let edited = Item {
        title: "renamed".into(),
        ..a.clone()
    };
    let sync = items.upsert_many([&edited]).prune().force().await.unwrap();
    assert_eq!(sync.pruned.deleted, 1, "{sync:?}");
    let doc = stored(&items, a_id).await;
    assert_eq!(doc.get_str("title").unwrap(), "renamed");
    assert_eq!(doc.get_i64("stock").unwrap(), 8, "{doc}");
    for (k, t) in [("a1", 1), ("a2", 2)] {
        let r = items.apply(a_id, op(k, t), pay(k)).await.unwrap();
        assert_eq!(r, ApplyOutcome::AlreadyApplied, "{k} after the sync");
    }
    // What prune deleted is gone with its record: nothing to apply to, and nothing recreated.
    let r = items.apply(b_id, op("b1", 1), pay("b1")).await;
    assert!(matches!(r, Err(Error::DocumentNotFound { .. })), "{r:?}");
    assert_eq!(stored(&items, a_id).await.get_i64("stock").unwrap(), 8);
}

/// An apply whose first attempt landed with its reply lost, and whose document's record was
/// pruned past it before the retry: the call cannot tell whether its change is stored, and
/// says so (`OperationOutcomeUnknown`). It said `OperationExpired`, "nothing was written",
/// although its change was stored.
#[tokio::test]
async fn an_outcome_the_pruned_record_cannot_tell_is_not_called_nothing_written() {
    let (items, _) = open("rel_pruned_past").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 43).await;
    let via = through(&proxy, &items).await;
    proxy.gate_writes();
    let writer = tokio::spawn(async move {
        let policy = RetryPolicy::default().initial_backoff(Duration::from_millis(1));
        via.apply(id, OpId::new("mine", 10_i64), sell())
            .retain(1)
            .retry(policy)
            .await
    });
    // The first attempt is applied and its reply lost.
    proxy.until_arrived(1).await;
    proxy.set_faults(Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    });
    proxy.admit(1);
    proxy.until_decided(1).await;
    proxy.set_faults(Faults::none());
    // While its retry waits at the gate, other operations fill the record and prune it.
    proxy.until_arrived(2).await;
    for t in [20_i64, 30, 40] {
        let op = OpId::new(format!("other-{t}"), t);
        items.apply(id, op, sell()).retain(1).await.unwrap();
    }
    let doc = stored(&items, id).await;
    assert!(doc.get_i64(OPS_PRUNED_TO_FIELD).unwrap() >= 10, "{doc}");
    proxy.admit(1000);
    let err = writer.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::OperationOutcomeUnknown { .. }),
        "{err:?}"
    );
    assert!(!err.to_string().contains("Nothing was written"), "{err}");
    assert!(!err.is_transient());
    // Its change is in fact stored: four sold.
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 6);

    // A call none of whose attempts can have landed is told plainly that it wrote nothing.
    let late = items.apply(id, OpId::new("late", 5_i64), sell()).retain(1);
    let err = late.await.unwrap_err();
    assert!(matches!(err, Error::OperationExpired { .. }), "{err:?}");
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 6);
}

/// On a sharded (or partitioned) collection every write filter carries the shard key: an
/// `apply`'s statements and its prune too, asserted on the wire. It sent `{_id, $nor, ...}`,
/// which a sharded cluster or a Cosmos DB partitioned collection cannot route.
#[tokio::test]
async fn a_sharded_handle_applies_with_the_shard_key_in_every_filter() {
    let (db, commands) = support::database("rel_sharded").await;
    let items = Collection::new(db.collection::<Item>("items"))
        .sharded(true)
        .await
        .unwrap();
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let identity = stored(&items, id).await.get("_nk_identity").cloned();
    let identity = identity.expect("the upsert stores the identity");
    commands.reset();
    // retain(1): the third operation finds the record full and prunes it.
    for t in 1..=3_i64 {
        let op = OpId::new(format!("op-{t}"), t);
        let r = items.apply(id, op, sell()).retain(1).await.unwrap();
        assert_eq!(r, ApplyOutcome::Applied);
    }
    let updates = commands.documents("update");
    assert!(
        updates.len() >= 4,
        "three statements and a prune: {updates:?}"
    );
    for u in &updates {
        for st in u.get_array("updates").unwrap() {
            let q = st.as_document().unwrap().get_document("q").unwrap();
            assert_eq!(q.get("_nk_identity"), Some(&identity), "{q}");
            assert_eq!(q.get_str("_id").unwrap(), id.to_string(), "{q}");
        }
    }
    let doc = stored(&items, id).await;
    assert_eq!(doc.get_i64("stock").unwrap(), 7);
    // A replay is recognised through the same filters.
    let again = items.apply(id, OpId::new("op-3", 3_i64), sell()).retain(1);
    assert_eq!(again.await.unwrap(), ApplyOutcome::AlreadyApplied);
}

/// An engine that takes an `apply`'s statement and never answers (a paused process, a
/// black-holed network): the call ends after its policy's attempt timeout, as `upsert` does,
/// with a transient `Timeout`. It waited on, past 12 s, before each step was bounded.
#[tokio::test]
async fn a_stalled_engine_ends_an_apply_at_its_attempt_timeout() {
    use std::future::IntoFuture;
    let (items, _) = open("rel_stalled").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 41).await;
    let via = through(&proxy, &items).await;
    proxy.set_stall(true);
    let policy = RetryPolicy::none().attempt_timeout(Duration::from_secs(2));
    let call = via
        .apply(id, OpId::new("op-1", 1_i64), sell())
        .retry(policy)
        .into_future();
    let outcome = tokio::time::timeout(Duration::from_secs(12), call)
        .await
        .expect("apply still waiting on a stalled engine after 12 s");
    let err = outcome.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_transient());

    // Under a policy with attempts left, the same call converges once the engine answers.
    let policy = RetryPolicy::default()
        .initial_backoff(Duration::from_millis(10))
        .attempt_timeout(Duration::from_millis(500));
    let writer = tokio::spawn(async move {
        via.apply(id, OpId::new("op-1", 1_i64), sell())
            .retry(policy)
            .await
    });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    proxy.set_stall(false);
    let outcome = writer.await.unwrap().unwrap();
    // The proxy holds a stalled write before forwarding it: the first call applied nothing.
    assert_eq!(outcome, ApplyOutcome::Applied);
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 9);
}

/// The prune is a write like the statement: when its reply is lost (applied, the connection
/// closed), the call retries under its policy instead of failing with the lost reply.
#[tokio::test]
async fn a_prune_whose_reply_is_lost_is_retried() {
    let (items, _) = open("rel_prune_lost").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    // retain(1): the record is full at two entries.
    for t in 1..=2_i64 {
        let op = OpId::new(format!("op-{t}"), t);
        items.apply(id, op, sell()).retain(1).await.unwrap();
    }
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 31).await;
    let via = through(&proxy, &items).await;
    proxy.gate_writes();
    let writer = tokio::spawn(async move {
        let policy = RetryPolicy::default().initial_backoff(Duration::from_millis(1));
        via.apply(id, OpId::new("op-3", 3_i64), sell())
            .retain(1)
            .retry(policy)
            .await
    });
    // The statement misses (the record is full); the prune that follows loses its reply.
    proxy.until_arrived(1).await;
    proxy.admit(1);
    proxy.until_arrived(2).await;
    proxy.set_faults(Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    });
    proxy.admit(1);
    proxy.until_decided(2).await;
    proxy.set_faults(Faults::none());
    proxy.admit(1000);
    let outcome = writer.await.unwrap();
    let decisions = proxy.stats().decisions;
    assert_eq!(
        outcome.as_ref().ok(),
        Some(&ApplyOutcome::Applied),
        "{outcome:?}; writes: {decisions:?}"
    );
    assert_eq!(
        decisions[1],
        ("update".into(), proxy::Fault::DropReplyAfterApply)
    );
    let doc = stored(&items, id).await;
    assert_eq!(doc.get_i64("stock").unwrap(), 7);
    assert_eq!(doc.get_i64(OPS_PRUNED_TO_FIELD).unwrap(), 1);
}

/// Lost replies are bounded by the call's retry policy, not by its rounds: eight in a row
/// (MAX_ROUNDS) under a policy of twenty attempts end in the operation, applied once.
#[tokio::test]
async fn lost_replies_are_the_policys_to_bound_not_the_rounds() {
    let (items, _) = open("rel_lost_in_a_row").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let lost = Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    };
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), lost, 37).await;
    let via = through(&proxy, &items).await;
    proxy.gate_writes();
    let writer = tokio::spawn(async move {
        let policy = RetryPolicy::default()
            .max_attempts(20)
            .initial_backoff(Duration::from_millis(1))
            .max_backoff(Duration::from_millis(20));
        via.apply(id, OpId::new("op-1", 1_i64), sell())
            .retry(policy)
            .await
    });
    for n in 1..=8 {
        proxy.until_arrived(n).await;
        proxy.admit(1);
    }
    proxy.until_decided(8).await;
    proxy.set_faults(Faults::none());
    proxy.admit(1000);
    let outcome = writer.await.unwrap();
    let stats = proxy.stats();
    assert_eq!(
        outcome.as_ref().ok(),
        Some(&ApplyOutcome::AlreadyApplied),
        "{outcome:?}; writes: {:?}",
        stats.decisions
    );
    assert_eq!(stats.replies_dropped, 8);
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 9);
}

/// A relative field survives upserts of the document: an unchanged upsert sends nothing, a
/// changed one leaves the counter and the record alone; Replace is refused.
#[tokio::test]
async fn an_upsert_neither_resets_nor_repeats_a_relative_change() {
    let (items, commands) = open("rel_upsert").await;
    let it = item("a", 10);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    items
        .apply(id, OpId::new("o1", 1_i64), sell())
        .await
        .unwrap();
    items
        .apply(
            id,
            OpId::new("o2", 2_i64),
            Change::new().push("payments", "pay-2"),
        )
        .await
        .unwrap();
    commands.reset();
    // The struct still says stock 10: relative fields are not content.
    let r = items.upsert(&it).await.unwrap();
    assert!(matches!(r, UpsertOutcome::Unchanged(_)), "{r:?}");
    assert_eq!(commands.writes(), 0);
    let edited = Item {
        title: "renamed".into(),
        ..it.clone()
    };
    let r = items.upsert(&edited).await.unwrap();
    assert!(matches!(r, UpsertOutcome::Updated(_)), "{r:?}");
    let doc = stored(&items, id).await;
    assert_eq!(doc.get_str("title").unwrap(), "renamed");
    assert_eq!(doc.get_i64("stock").unwrap(), 9);
    assert_eq!(doc.get_array("payments").unwrap().len(), 1);
    assert_eq!(doc.get_array(OPS_FIELD).unwrap().len(), 2);
    let r = items
        .upsert(&Item {
            title: "again".into(),
            ..it
        })
        .replace()
        .await;
    assert!(matches!(r, Err(Error::InvalidChange { .. })), "{r:?}");
    assert_eq!(
        items
            .apply(id, OpId::new("o1", 1_i64), sell())
            .await
            .unwrap(),
        ApplyOutcome::AlreadyApplied
    );
}

/// Many tasks applying the same operation at once: one applies it.
#[tokio::test]
async fn concurrent_applies_of_one_operation_apply_it_once() {
    let (items, _) = open("rel_same_op").await;
    let it = item("a", 100);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let atomic = !items.deployment().engine().is_ferretdb_v1();
    for round in 0..5_i64 {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let items = items.clone();
            tasks.push(tokio::spawn(async move {
                let op = OpId::new(format!("order-{round}"), round + 1);
                items
                    .apply(id, op, sell())
                    .retry(RetryPolicy::default())
                    .await
                    .unwrap()
            }));
        }
        let mut applied = 0;
        for t in tasks {
            applied += usize::from(t.await.unwrap() == ApplyOutcome::Applied);
        }
        // Where an engine checks the filter outside its write (FerretDB 1.x), several callers
        // may see their statement match and the operation recorded: each reports Applied, and
        // the document holds the change once (the stock below).
        let now = stored(&items, id).await;
        if atomic {
            assert_eq!(applied, 1, "round {round}: {now}");
        } else {
            assert!(applied >= 1, "round {round}: {now}");
        }
    }
    assert_eq!(stored(&items, id).await.get_i64("stock").unwrap(), 95);
}

/// The proof: `NK_RELATIVE_OPS` operations over 10 items from 4 writers through a proxy that
/// loses 20% of the replies after the write is applied. Every counter ends exact; the naive
/// control (`$inc` retried the same way) does not.
#[tokio::test]
async fn lost_replies_and_four_writers_end_exact_where_naive_inc_does_not() {
    let (items, _) = open("rel_proof").await;
    let skus: Vec<Item> = (0..10)
        .map(|i| item(&format!("sku-{i}"), 1_000_000))
        .collect();
    for it in &skus {
        items.upsert(it).await.unwrap();
    }
    let ids: Vec<_> = skus.iter().map(|i| i.id().unwrap()).collect();
    let n = ops_n();
    let faults = Faults {
        drop_reply_after_apply: 0.2,
        ..Faults::none()
    };
    let proxy = Arc::new(Proxy::start(proxy::upstream_addr(&support::uri()), faults, 29).await);
    let name = support::database_name("rel_proof");
    // A lost reply is known at once: retry at once.
    let policy = RetryPolicy::default()
        .max_attempts(200)
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(20))
        .deadline(Duration::from_secs(600));
    // Which item operation k decrements. Where the engine checks an update's filter outside
    // its write (FerretDB 1.x), two writers' different operations on one document can lose
    // one (docs/crate.md, "Relative updates"): there each writer owns its items, and the
    // lost replies and retries are what is proved.
    let atomic = !items.deployment().engine().is_ferretdb_v1();
    let item_of = move |k: usize| {
        if atomic {
            k % 10
        } else {
            k % 4 + 4 * (k / 4 % 2)
        }
    };
    let mut expected = [1_000_000_i64; 10];
    for k in 0..n {
        expected[item_of(k)] -= 1;
    }
    let naive_sent = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let client = support::client_for(&proxy.uri(), &support::Commands::default()).await;
        let via = Collection::new(client.database(&name).collection::<Item>("items"))
            .deployment(items.deployment().clone())
            .await
            .unwrap();
        let ids = ids.clone();
        let naive = client.database(&name).collection::<Document>("naive");
        let naive_sent = naive_sent.clone();
        tasks.push(tokio::spawn(async move {
            // Writer w takes operations w, w+4, ...: each operation is one order of one item.
            for k in (w..n).step_by(4) {
                let id = ids[item_of(k)];
                let op = OpId::new(format!("order-{k}"), k as i64);
                via.apply(id, op, sell()).retry(policy).await.unwrap();
                if k % 10 == 0 {
                    // The control: the same decrement as a plain `$inc`, retried on error.
                    loop {
                        naive_sent.fetch_add(1, Ordering::Relaxed);
                        let r = naive
                            .update_one(doc! {"_id": "counter"}, doc! {"$inc": {"n": 1}})
                            .upsert(true)
                            .await;
                        if r.is_ok() {
                            break;
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = proxy.stats();
    assert!(
        stats.faults() > (n as u64) / 10,
        "replies lost: {}",
        stats.faults()
    );
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            stored(&items, *id).await.get_i64("stock").unwrap(),
            expected[i],
            "item {i}"
        );
    }
    let db = items.inner().client().database(&name);
    let naive = db
        .collection::<Document>("naive")
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    let naive_n = naive
        .get_i32("n")
        .map(i64::from)
        .or_else(|_| naive.get_i64("n"))
        .unwrap();
    let wanted = n.div_ceil(10) as i64;
    println!(
        "{n} operations, {} replies lost; naive $inc: {naive_n} applied for {wanted} orders",
        stats.faults()
    );
    assert!(
        naive_n > wanted,
        "the control double-applies under lost replies"
    );
}

/// Writers SIGKILLed mid-run, then run again with the same operation ids: exact.
#[tokio::test]
async fn writers_killed_mid_run_then_rerun_end_exact() {
    const TEST: &str = "writers_killed_mid_run_then_rerun_end_exact";
    let n = ops_n() / 5;
    let name = "rel_kills";
    if std::env::var("NK_CHILD_APPLY").is_ok() {
        let (db, _) = support::database_existing(name).await;
        let items = Collection::new(db.collection::<Item>("items"))
            .await
            .unwrap();
        let id = item("k", 0).id().unwrap();
        println!("CHILD-READY");
        for k in 0..n {
            let op = OpId::new(format!("order-{k}"), k as i64);
            items
                .apply(id, op, sell())
                .retry(RetryPolicy::default())
                .await
                .unwrap();
        }
        return;
    }
    let (items, _) = open(name).await;
    let it = item("k", n as i64);
    items.upsert(&it).await.unwrap();
    let mut killed = 0;
    for k in 0..3u64 {
        let (was_running, _) = child::run(
            TEST,
            "NK_CHILD_APPLY",
            Kill::After(Duration::from_millis(300 + 400 * k)),
        );
        killed += usize::from(was_running);
    }
    let (_, lines) = child::run(TEST, "NK_CHILD_APPLY", Kill::Never);
    assert!(lines.iter().any(|l| l.contains("CHILD-READY")), "{lines:?}");
    assert!(killed >= 1, "no writer was killed mid-run");
    assert_eq!(
        stored(&items, it.id().unwrap())
            .await
            .get_i64("stock")
            .unwrap(),
        0
    );
}

/// Every outcome is true, checked against the stored document: writers apply operations to
/// one document through lost replies with a record of two, so that retries meet records
/// pruned past them. Each operation pushes its own key to `payments`, so the document says
/// how often each was applied: `Applied` and `AlreadyApplied` once, `OperationExpired` never,
/// `OperationOutcomeUnknown` at most once; and the stock is the initial one less every push.
#[tokio::test(flavor = "multi_thread")]
async fn every_outcome_is_true_under_lost_replies_and_a_small_window() {
    let (items, _) = open("rel_outcomes").await;
    let it = item("a", 1_000_000);
    items.upsert(&it).await.unwrap();
    let id = it.id().unwrap();
    let faults = Faults {
        drop_reply_after_apply: 0.25,
        ..Faults::none()
    };
    let proxy = Arc::new(Proxy::start(proxy::upstream_addr(&support::uri()), faults, 47).await);
    // FerretDB 1.x may lose one of two different operations racing on one document (its
    // update does not re-check its filter): one writer there, whose retries still meet lost
    // replies; the record is pruned past a retry only with concurrent writers.
    let writers = if items.deployment().engine().is_ferretdb_v1() {
        1
    } else {
        4
    };
    let per_writer: usize = support::env_or("NK_OUTCOME_OPS", 40);
    let policy = RetryPolicy::default()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(50));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let via = through(&proxy, &items).await;
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for i in 0..per_writer {
                let key = format!("w{w}-{i}");
                let op = OpId::new(key.clone(), (i * writers + w + 1) as i64);
                let change = sell().push("payments", key.as_str());
                let r = via.apply(id, op, change).retain(1).retry(policy).await;
                outcomes.push((key, r));
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.extend(t.await.unwrap());
    }
    let doc = stored(&items, id).await;
    let payments: Vec<&str> = doc
        .get_array("payments")
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let times = |key: &str| payments.iter().filter(|p| **p == key).count();
    let mut by_kind = std::collections::BTreeMap::<&str, usize>::new();
    for (key, r) in &outcomes {
        let kind = match r {
            Ok(ApplyOutcome::Applied) | Ok(ApplyOutcome::AlreadyApplied) => {
                assert_eq!(times(key), 1, "{key}: {r:?}");
                "applied"
            }
            Err(Error::OperationExpired { .. }) => {
                assert_eq!(times(key), 0, "{key}: {r:?} but its change is stored");
                "expired"
            }
            Err(Error::OperationOutcomeUnknown { .. }) => {
                assert!(times(key) <= 1, "{key}: {r:?}");
                "unknown"
            }
            other => panic!("{key}: {other:?}"),
        };
        *by_kind.entry(kind).or_default() += 1;
    }
    assert_eq!(
        doc.get_i64("stock").unwrap(),
        1_000_000 - payments.len() as i64,
        "one sale per stored payment"
    );
    println!(
        "{} operations, {} replies lost: {by_kind:?}",
        outcomes.len(),
        proxy.stats().faults()
    );
}
