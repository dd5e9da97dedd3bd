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
        race_one_identity(&posts, round, |w| Post {
            slug: slug.clone(),
            published_at: 1_700_000_000_000 + w,
            body: format!("writer {w}"),
        })
        .await;
        assert_eq!(count(&db, "posts", doc! { "slug": &slug }).await, 1);
    }
}

/// 16 writers upsert `writer(w)`, one identity with 16 timestamp keys, at once: one inserted,
/// 15 refused with `ImmutableKeyChanged`, each after whatever the engine made it wait through.
async fn race_one_identity<T>(coll: &Collection<T>, round: usize, writer: impl Fn(i64) -> T)
where
    T: NaturalKey + Send + Sync + 'static,
{
    let mut tasks = Vec::new();
    for w in 0..16 {
        let (coll, doc) = (coll.clone(), writer(w));
        tasks.push(tokio::spawn(async move {
            coll.upsert(&doc).retry(RetryPolicy::default()).await
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

/// An order of a multi-tenant service: sharded on `tenant`, one of its identity keys, stored as
/// it is, so every document of one identity holds the same `tenant` and lands on one shard.
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Order {
    #[key]
    tenant: String,
    #[key]
    number: String,
    #[key(timestamp)]
    placed_at: i64,
    #[natural_key(version)]
    revision: i64,
    status: String,
    #[natural_key(relative)]
    #[serde(default)]
    paid_cents: i64,
}

fn order(tenant: usize, number: usize) -> Order {
    Order {
        tenant: format!("tenant-{tenant}"),
        number: format!("{number:05}"),
        placed_at: 1_700_000_000_000 + number as i64,
        revision: 1,
        status: "placed".into(),
        paid_cents: 0,
    }
}

/// The same, with a tenant key that is lowercased before hashing: "Acme" and "acme" are one
/// identity stored under two values, so it cannot be the shard key.
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Account {
    #[key(lowercase)]
    tenant: String,
    #[key]
    name: String,
    #[key(timestamp)]
    opened_at: i64,
}

/// The filter (`q`) of every statement of the `command`s sent since the last reset.
fn filters(commands: &support::Commands, command: &str, list: &str) -> Vec<Document> {
    commands
        .documents(command)
        .iter()
        .flat_map(|c| c.get_array(list).unwrap().clone())
        .map(|s| s.as_document().unwrap().get_document("q").unwrap().clone())
        .collect()
}

/// Sharded on `tenant`, one of `Order`'s identity keys: `open` finds it from the engine's plans
/// and accepts it, every update's and delete's filter carries the document's tenant (asserted
/// on the wire), and 16 writers racing one identity with different timestamp keys leave one
/// document every round, as on `_nk_identity`.
#[tokio::test]
async fn a_tenant_key_is_accepted_carried_and_guards_the_identity() {
    if !on_cluster("tenant_key") {
        return;
    }
    let (db, commands) = sharded("tenant_key", &["orders"], "tenant").await;
    let orders = Collection::<Order>::open(&db, "orders").await.unwrap();
    assert_eq!(orders.shard_key(), Some("tenant"));

    let all: Vec<Order> = (0..120).map(|n| order(n % 6, n)).collect();
    let report = orders.upsert_many(&all).await.unwrap();
    assert_eq!(report.inserted, 120);
    commands.reset();
    let again = orders.upsert_many(&all).await.unwrap();
    assert_eq!(again.unchanged, 120);
    assert_eq!(commands.writes(), 0, "unchanged: nothing sent");

    let mut edited = all[7].clone();
    (edited.status, edited.revision) = ("shipped".into(), 2);
    commands.reset();
    assert!(matches!(
        orders.upsert(&edited).await.unwrap(),
        UpsertOutcome::Updated(_)
    ));
    for q in filters(&commands, "update", "updates") {
        assert_eq!(
            q.get_str("tenant"),
            Ok(edited.tenant.as_str()),
            "filter {q}"
        );
    }
    commands.reset();
    assert!(matches!(
        orders.delete(&edited).await.unwrap(),
        natural_key::DeleteOutcome::Deleted(_)
    ));
    let written: Vec<Document> = [("update", "updates"), ("delete", "deletes")]
        .iter()
        .flat_map(|(c, l)| filters(&commands, c, l))
        .collect();
    assert!(!written.is_empty());
    for q in written {
        assert_eq!(
            q.get_str("tenant"),
            Ok(edited.tenant.as_str()),
            "filter {q}"
        );
    }

    for round in 0..10 {
        let number = format!("raced-{round}");
        race_one_identity(&orders, round, |w| Order {
            tenant: format!("tenant-{}", round % 3),
            number: number.clone(),
            placed_at: 1_700_000_000_000 + w,
            ..order(0, 0)
        })
        .await;
        assert_eq!(count(&db, "orders", doc! { "number": &number }).await, 1);
    }
}

/// Still refused at `open`, before anything is written: a shard key that is not part of the
/// identity (the timestamp key, a field of the content), and an identity key whose stored value
/// the identity does not determine (lowercased: "Acme" and "acme" are one identity on two
/// shards). The refusal names the keys the type could be sharded on.
#[tokio::test]
async fn a_shard_key_outside_the_identity_is_still_refused() {
    if !on_cluster("tenant_refused") {
        return;
    }
    let (db, commands) = sharded("tenant_refused", &["by_time"], "placed_at").await;
    shard(&db, "by_status", "status");
    shard(&db, "accounts", "tenant");
    commands.reset();
    for coll in ["by_time", "by_status"] {
        let e = Collection::<Order>::open(&db, coll).await.unwrap_err();
        assert!(
            matches!(e, Error::ShardKeyUnsupported { .. }),
            "{coll}: {e}"
        );
        assert!(e.to_string().contains("`tenant`, `number`"), "{e}");
    }
    let e = Collection::<Account>::open(&db, "accounts")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ShardKeyUnsupported { .. }), "{e}");
    assert!(!e.to_string().contains("`tenant`"), "{e}");
    assert_eq!(commands.writes(), 0, "nothing written");
    assert_eq!(commands.count("createIndexes"), 0, "no index created");
}

/// The lifecycle on a collection sharded on `tenant`: other code's copies adopted onto their
/// derived ids (each stays on its tenant's shard), a relative update applied once, a timestamp
/// key corrected by `rekey`, a versioned delete whose tombstone stays on the tenant's shard and
/// turns a late older write away, the tombstone pruned, and a tenant change, which is a new
/// identity: the document is deleted under the old tenant and written under the new one.
#[tokio::test]
async fn audit_adopt_apply_rekey_delete_and_prune_hold_on_tenant_shards() {
    if !on_cluster("tenant_lifecycle") {
        return;
    }
    let (db, _) = sharded("tenant_lifecycle", &["orders"], "tenant").await;
    let raw = db.collection::<Document>("orders");
    // Other code's documents: ObjectId `_id`s, one order stored twice.
    let legacy: Vec<Order> = (0..9).map(|n| order(n % 3, n)).collect();
    let mut docs: Vec<Document> = legacy
        .iter()
        .map(|o| natural_key::bson::to_document(o).unwrap())
        .collect();
    docs.push(docs[4].clone());
    raw.insert_many(docs).await.unwrap();

    let orders = Collection::<Order>::open(&db, "orders").await.unwrap();
    assert_eq!(orders.shard_key(), Some("tenant"));
    let audit = orders.audit().await.unwrap();
    assert_eq!(audit.legacy.count, 10, "{audit:?}");
    orders.adopt().await.unwrap();
    assert!(orders.audit().await.unwrap().is_clean());
    assert_eq!(count(&db, "orders", doc! {}).await, 9);
    for o in &legacy {
        assert_eq!(orders.get(o.id().unwrap()).await.unwrap().as_ref(), Some(o));
    }

    let paid = legacy[2].id().unwrap();
    let op = || natural_key::OpId::new("payment-1", 1_764_000_000_000_i64);
    let pay = || natural_key::Change::new().inc("paid_cents", 500);
    let first = orders.apply(paid, op(), pay()).await.unwrap();
    assert_eq!(first, natural_key::ApplyOutcome::Applied);
    let retried = orders.apply(paid, op(), pay()).await.unwrap();
    assert_eq!(retried, natural_key::ApplyOutcome::AlreadyApplied);
    assert_eq!(orders.get(paid).await.unwrap().unwrap().paid_cents, 500);

    let wrong = legacy[5].clone();
    let corrected = Order {
        placed_at: wrong.placed_at - 86_400_000,
        ..wrong.clone()
    };
    let moved = orders.rekey(&corrected).await.unwrap();
    assert!(
        matches!(moved, natural_key::RekeyOutcome::Moved { .. }),
        "{moved}"
    );
    assert_eq!(orders.get(wrong.id().unwrap()).await.unwrap(), None);
    assert_eq!(
        orders.get(corrected.id().unwrap()).await.unwrap(),
        Some(corrected.clone())
    );

    // A tenant change is a new identity: deleted under the old tenant, written under the new.
    let old = legacy[1].clone();
    let deleted = orders.delete(&old).await.unwrap();
    assert_eq!(
        deleted,
        natural_key::DeleteOutcome::Deleted(old.id().unwrap())
    );
    let tombstone = raw
        .find_one(doc! {"_id": old.id().unwrap().to_string()})
        .await
        .unwrap()
        .expect("a tombstone");
    assert_eq!(tombstone.get_str("tenant"), Ok(old.tenant.as_str()));
    let late = orders.upsert(&old).await.unwrap();
    assert!(matches!(late, UpsertOutcome::Stale(_)), "{late:?}");
    let moved_tenant = Order {
        tenant: "tenant-9".into(),
        revision: 2,
        ..old.clone()
    };
    let written = orders.upsert(&moved_tenant).await.unwrap();
    assert!(matches!(written, UpsertOutcome::Inserted(_)), "{written:?}");

    let pruned = orders
        .prune_tombstones(std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(pruned.pruned, 1);
    assert_eq!(
        count(
            &db,
            "orders",
            doc! {"tenant": &old.tenant, "number": &old.number}
        )
        .await,
        0
    );
    assert_eq!(count(&db, "orders", doc! {"tenant": "tenant-9"}).await, 1);
    assert!(orders.audit().await.unwrap().is_clean());
}

/// The derive lists the identity keys a collection may be sharded on: stored as they are, one
/// stored value per identity (no engine needed).
#[test]
fn the_keys_a_type_may_be_sharded_on() {
    use natural_key::__private::Indexes;

    #[derive(NaturalKey, Serialize, Deserialize)]
    struct Mixed {
        #[key]
        tenant: String,
        #[key(lowercase)]
        name: String,
        #[key]
        #[serde(rename = "n")]
        number: u64,
        #[key]
        #[serde(skip_serializing_if = "String::is_empty")]
        note: String,
        #[key(timestamp)]
        at: i64,
        body: String,
    }
    #[derive(NaturalKey, Serialize, Deserialize)]
    #[natural_key(scheme = "joined", separator = ":")]
    struct Joined {
        #[key]
        tenant: String,
        #[key(timestamp)]
        at: i64,
    }
    assert_eq!(Mixed::__shard_key_fields(), ["tenant", "n"]);
    assert_eq!(Order::__shard_key_fields(), ["tenant", "number"]);
    assert!(Joined::__shard_key_fields().is_empty());
    assert!(<Payment as Indexes>::__shard_key_fields().is_empty());
}
