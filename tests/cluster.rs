//! natural-key on a sharded cluster: DocumentDB's distributed extension on Citus (a
//! coordinator and two workers) behind FerretDB 2.5, `scripts/db up --engine cluster`. The
//! engine enforces a unique index only among documents of one shard-key value, and FerretDB
//! shows no sign of sharding on the wire: what holds here is what the handle finds out and
//! refuses by itself.
//!
//! Every test shards its collections with `scripts/db shard`, so they run on the cluster
//! only (CI's cluster pass, `NK_EXPECT_ENGINE=cluster`); elsewhere each says so and returns.

mod support;

use natural_key::bson::{doc, Document};
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{Collection, Error, InsertOutcome, RetryPolicy};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Payment {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[idempotency_key]
    request: String,
    amount_cents: i64,
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

/// Whether this pass runs on the cluster; elsewhere the test says why it did nothing.
fn on_cluster(test: &str) -> bool {
    let yes = std::env::var("NK_EXPECT_ENGINE").as_deref() == Ok("cluster");
    if !yes {
        eprintln!("{test}: not the cluster engine (NK_EXPECT_ENGINE=cluster): nothing to test");
    }
    yes
}

/// The test's fresh database, with `colls` hash-sharded on `field` (created by the sharding).
async fn sharded(test: &str, colls: &[&str], field: &str) -> (Database, support::Commands) {
    let (db, commands) = support::database(test).await;
    for coll in colls {
        shard(&db, coll, field);
    }
    commands.reset();
    (db, commands)
}

fn shard(db: &Database, coll: &str, field: &str) {
    if let Err(said) = support::db_shard(db.name(), coll, field) {
        panic!("scripts/db shard {} {coll} {field}: {said}", db.name());
    }
}

async fn count(db: &Database, coll: &str, filter: Document) -> u64 {
    db.collection::<Document>(coll)
        .count_documents(filter)
        .await
        .unwrap()
}

/// Sharded on `{_id: "hashed"}`, which the engine accepts without a word, the identity index
/// would hold per shard only: `open` refuses, declared sharded or not, before it creates an
/// index or writes anything.
#[tokio::test]
async fn a_collection_sharded_on_id_is_refused_at_open() {
    if !on_cluster("refused_at_open") {
        return;
    }
    let (db, commands) = sharded("refused_on_id", &["posts"], "_id").await;
    for declared in [None, Some(true), Some(false)] {
        let mut open = Collection::<Post>::open(&db, "posts");
        if let Some(d) = declared {
            open = open.sharded(d);
        }
        match open.await {
            Err(e @ Error::ShardKeyUnsupported { .. }) => {
                assert!(!e.is_transient());
                let text = e.to_string();
                assert!(text.contains("Shard it on `_nk_identity`"), "{text}");
            }
            other => panic!("declared {declared:?}: {other:?}"),
        }
    }
    assert_eq!(commands.count("createIndexes"), 0, "no index was created");
    assert_eq!(commands.writes(), 0);
    // An event type with an idempotency key needs the key routed; `_id` does not do.
    shard(&db, "payments", "_id");
    let refused = Collection::<Payment>::open(&db, "payments").await;
    assert!(
        matches!(&refused, Err(Error::ShardKeyUnsupported { needed, .. }) if needed == "_nk_idempotency"),
        "{refused:?}"
    );
    // One without a key is stored once per `_id`: sharded on `_id` is what it needs.
    shard(&db, "clicks", "_id");
    Collection::<Click>::open(&db, "clicks").await.unwrap();
}

/// Sharded on `_nk_identity`, the handle finds it out by itself: write filters carry the shard
/// key (each update goes to one shard), asserted on the wire; an unsharded collection of the
/// same cluster (`_plain`: the cluster pass shards no such name) keeps `{_id}` alone.
#[tokio::test]
async fn the_shard_key_is_found_and_carried_by_every_write() {
    if !on_cluster("shard_key_found") {
        return;
    }
    let (db, commands) = sharded("shard_key_found", &["posts"], "_nk_identity").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    assert!(posts.is_sharded());
    let plain = Collection::<Post>::open(&db, "posts_plain").await.unwrap();
    assert!(!plain.is_sharded());
    for coll in [&posts, &plain] {
        let mut p = Post {
            slug: "hello".into(),
            published_at: 1_700_000_000_000,
            body: "v1".into(),
        };
        commands.reset();
        coll.upsert(&p).await.unwrap();
        // Sharded, an insert first looks for other code's document at its `_id`, on the shard
        // where documents without `_nk_identity` live (the engine's `_id` index would not see
        // it from another shard).
        let checks = if coll.is_sharded() { 1 } else { 0 };
        assert_eq!(commands.id_checks(), checks);
        p.body = "v2".into();
        commands.reset();
        assert!(matches!(
            coll.upsert(&p).await.unwrap(),
            UpsertOutcome::Updated(_)
        ));
        let updates = commands.documents("update");
        assert_eq!(updates.len(), 1);
        let q = updates[0].get_array("updates").unwrap()[0]
            .as_document()
            .unwrap()
            .get_document("q")
            .unwrap()
            .clone();
        assert_eq!(
            q.contains_key("_nk_identity"),
            coll.is_sharded(),
            "filter {q}"
        );
    }
}

/// 16 writers race one identity with different timestamp keys, 20 rounds: one document each
/// round, every other writer refused with `ImmutableKeyChanged` (or finding its own content),
/// and no engine cancellation (57014) or deadlock (40P01) ends a call.
#[tokio::test]
async fn sixteen_writers_racing_a_fork_leave_one_document() {
    if !on_cluster("racing_fork") {
        return;
    }
    let (db, _) = sharded("racing_fork", &["posts"], "_nk_identity").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    for round in 0..20 {
        let slug = format!("raced-{round}");
        let mut tasks = Vec::new();
        for w in 0..16 {
            let (posts, p) = (
                posts.clone(),
                Post {
                    slug: slug.clone(),
                    published_at: 1_700_000_000_000 + w,
                    body: format!("writer {w}"),
                },
            );
            tasks.push(tokio::spawn(async move {
                posts.upsert(&p).retry(RetryPolicy::default()).await
            }));
        }
        let (mut inserted, mut refused) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(UpsertOutcome::Inserted(_)) => inserted += 1,
                Err(Error::ImmutableKeyChanged { .. }) => refused += 1,
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!((inserted, refused), (1, 15), "round {round}");
        assert_eq!(count(&db, "posts", doc! { "slug": &slug }).await, 1);
    }
}

/// 16 writers send one payment (one idempotency key), each under a new `_id`, 20 rounds, on a
/// collection sharded on `_nk_idempotency`: stored once each round, the others told
/// `AlreadyApplied`.
#[tokio::test]
async fn sixteen_writers_racing_one_idempotency_key_store_it_once() {
    if !on_cluster("racing_key") {
        return;
    }
    let (db, _) = sharded("racing_key", &["payments"], "_nk_idempotency").await;
    let payments = Collection::<Payment>::open(&db, "payments").await.unwrap();
    for round in 0..20 {
        let request = format!("req-{round}");
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (payments, p) = (
                payments.clone(),
                Payment {
                    id: Ulid::new(),
                    request: request.clone(),
                    amount_cents: 1999,
                },
            );
            tasks.push(tokio::spawn(async move {
                payments.insert(&p).retry(RetryPolicy::default()).await
            }));
        }
        let (mut inserted, mut applied) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(InsertOutcome::Inserted(_)) => inserted += 1,
                Ok(InsertOutcome::AlreadyApplied(_)) => applied += 1,
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!((inserted, applied), (1, 15), "round {round}");
        let stored = count(&db, "payments", doc! { "_nk_idempotency": &request }).await;
        assert_eq!(stored, 1, "round {round}");
    }
}
