//! The calls the cluster's fault suites run through a fault (a shard move, a partition), and
//! what each must leave: the documents, the relative updates and the events, exactly, after a
//! replay. Used by `tests/shard_moves.rs` and `tests/partitions.rs` (`#[path]`), which bring
//! the fault; `crate::support` is theirs.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use natural_key::bson::Document;
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{ApplyOutcome, Change, Collection, Error, OpId, RetryPolicy};

use crate::support;
use crate::support::watch::Watch;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Post {
    #[key]
    pub slug: String,
    #[key(timestamp)]
    pub published_at: i64,
    pub body: String,
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Click {
    #[id]
    #[serde(rename = "_id")]
    pub id: Ulid,
    pub page: String,
}

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Item {
    #[key]
    pub sku: String,
    #[key(timestamp)]
    pub listed_at: i64,
    #[natural_key(relative)]
    pub stock: i64,
    #[natural_key(relative)]
    #[serde(default)]
    pub payments: Vec<String>,
}

/// Whether this pass runs on the cluster; elsewhere the test says why it did nothing.
pub fn on_cluster(test: &str) -> bool {
    let yes = std::env::var("NK_EXPECT_ENGINE").as_deref() == Ok("cluster");
    if !yes {
        eprintln!("{test}: not the cluster engine (NK_EXPECT_ENGINE=cluster): nothing to test");
    }
    yes
}

pub fn corpus(prefix: &str, n: usize) -> Vec<Post> {
    (0..n).map(|i| corpus_post(prefix, i)).collect()
}

pub fn corpus_post(prefix: &str, i: usize) -> Post {
    Post {
        slug: format!("{prefix}-{i:06}"),
        published_at: 1_700_000_000_000 + i as i64 * 60_000,
        body: format!("body of post {i}"),
    }
}

/// Every stored post, by slug.
pub async fn stored_posts(db: &Database) -> Vec<Post> {
    let docs = support::all_documents(&db.collection::<Document>("posts")).await;
    let mut posts: Vec<Post> = docs
        .into_iter()
        .map(|d| natural_key::bson::from_document(d).unwrap())
        .collect();
    posts.sort_by(|a, b| a.slug.cmp(&b.slug));
    posts
}

/// `n` events with new ids.
pub fn clicks(n: usize) -> Vec<Click> {
    (0..n)
        .map(|i| Click {
            id: Ulid::new(),
            page: format!("/{i}"),
        })
        .collect()
}

/// The repair of an `insert_many` the engine may have lost some of: the events not stored,
/// inserted again (a replay of all of them is the same repair, but on the cluster 3,000
/// inserts of stored `_id`s take about a minute: each duplicate is rolled back to a savepoint
/// of its own across the coordinator and a worker). How many it inserted.
pub async fn repair_events(db: &Database, clicks: &Collection<Click>, events: &[Click]) -> u64 {
    let stored = support::all_documents(&db.collection::<Document>("clicks")).await;
    let kept: std::collections::HashSet<String> = stored
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_string())
        .collect();
    let lost: Vec<Click> = events
        .iter()
        .filter(|e| !kept.contains(&e.id.to_string()))
        .cloned()
        .collect();
    if !lost.is_empty() {
        let replay = clicks.insert_many(&lost).await.unwrap();
        assert_eq!(
            (replay.inserted, replay.failures.len()),
            (lost.len() as u64, 0),
            "{replay:?}"
        );
    }
    lost.len() as u64
}

/// Every event stored, once.
pub async fn assert_every_event_once(db: &Database, events: &[Click]) {
    let stored = support::all_documents(&db.collection::<Document>("clicks")).await;
    let mut ids: Vec<String> = stored
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    expected.sort();
    assert_eq!(ids, expected, "every event once");
}

/// Sale `k`: its operation key, id and change.
pub fn sale(k: usize) -> (String, OpId, Change) {
    let key = format!("order-{k}");
    let change = Change::new()
        .inc("stock", -1)
        .push("payments", key.as_str());
    (key.clone(), OpId::new(key, k as i64 + 1), change)
}

/// Ten items with stock for every sale, stored in `db.items`: the handle and their ids.
pub async fn items(db: &Database) -> (Collection<Item>, Vec<Ulid>) {
    let items: Vec<Item> = (0..10)
        .map(|i| Item {
            sku: format!("sku-{i}"),
            listed_at: 1_700_000_000_000,
            stock: 1_000_000,
            payments: Vec::new(),
        })
        .collect();
    let coll = Collection::<Item>::open(db, "items").await.unwrap();
    coll.upsert_many(&items).await.unwrap();
    (coll, items.iter().map(|i| i.id().unwrap()).collect())
}

pub type Sold = Vec<(String, Result<ApplyOutcome, Error>)>;

/// Sales `0..ops` from four writers racing over the items, each `apply` with the default
/// policy, the call's progress one per sale: each sale's key and outcome.
pub async fn four_writers_apply(
    coll: &Collection<Item>,
    ids: &[Ulid],
    ops: usize,
    watch: Arc<Watch>,
) -> Sold {
    let mut writers = Vec::new();
    for w in 0..4 {
        let (coll, watch, ids) = (coll.clone(), watch.clone(), ids.to_vec());
        writers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for k in (w..ops).step_by(4) {
                let (key, op, change) = sale(k);
                let r = coll
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
    outcomes
}

/// The outcomes by kind; a failed sale stops the test, naming `fault`.
pub fn sold_by_kind(outcomes: &Sold, fault: &dyn std::fmt::Debug) -> HashMap<String, usize> {
    let mut by_kind: HashMap<String, usize> = HashMap::new();
    for (key, r) in outcomes {
        match r {
            Ok(o) => *by_kind.entry(format!("{o:?}")).or_default() += 1,
            Err(e) => panic!("{key} across {fault:?}: {e:?}"),
        }
    }
    by_kind
}

/// Every sale sent again: how many the engine had not kept (`Applied` again).
pub async fn replay_sales(coll: &Collection<Item>, ids: &[Ulid], ops: usize) -> u64 {
    let mut redone = 0;
    for k in 0..ops {
        let (key, op, change) = sale(k);
        match coll.apply(ids[k % ids.len()], op, change).await {
            Ok(ApplyOutcome::Applied) => redone += 1,
            Ok(ApplyOutcome::AlreadyApplied) => {}
            other => panic!("{key} replayed after the fault: {other:?}"),
        }
    }
    redone
}

/// Every sale applied once: each item's stock down by its payments, every key once.
pub async fn assert_every_sale_once(db: &Database, ops: usize) {
    let stored = support::all_documents(&db.collection::<Document>("items")).await;
    let mut keys: Vec<String> = Vec::new();
    for d in &stored {
        let payments = d.get_array("payments").unwrap();
        assert_eq!(
            d.get_i64("stock").unwrap(),
            1_000_000 - payments.len() as i64,
            "one sale per payment: {d}"
        );
        keys.extend(payments.iter().map(|p| p.as_str().unwrap().to_string()));
    }
    keys.sort();
    let all = keys.len();
    keys.dedup();
    assert_eq!((all, keys.len()), (ops, ops), "every operation once");
}

/// `n` posts of `prefix`, the first half stored in `posts` before the call, every 100th of
/// those edited since: the input and how many it edits.
pub async fn half_stored(posts: &Collection<Post>, prefix: &str, n: usize) -> (Vec<Post>, u64) {
    let mut docs = corpus(prefix, n);
    posts.upsert_many(&docs[..n / 2]).await.unwrap();
    let mut edited = 0;
    for p in docs[..n / 2].iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
        edited += 1;
    }
    (docs, edited)
}

/// What an upsert of [`half_stored`]'s input reports: the new half inserted, the edits
/// updated, the rest unchanged, nothing failed.
pub fn assert_half_stored_upserted(r: &natural_key::BatchReport, n: usize, edited: u64) {
    assert_eq!(
        (r.inserted, r.updated, r.unchanged, r.failures.len()),
        ((n - n / 2) as u64, edited, (n / 2) as u64 - edited, 0),
        "{r:?}"
    );
}

/// `db.clicks` hash-sharded on `_id`, what an event type without an idempotency key needs.
pub fn shard_clicks(db: &Database) {
    if let Err(said) = support::db_shard(db.name(), "clicks", "_id") {
        panic!("scripts/db shard {} clicks _id: {said}", db.name());
    }
}

/// What an `insert_many` of `n` events reports: each inserted (or found inserted by an attempt
/// whose reply was lost), nothing failed.
pub fn assert_events_inserted(r: &natural_key::BatchReport, n: usize) {
    assert_eq!(
        (r.inserted + r.already_applied, r.failures.len()),
        (n as u64, 0),
        "{r:?}"
    );
}
