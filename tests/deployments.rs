//! Production-shaped deployments: user unique indexes, optional fields, collections that
//! already hold documents, read preference, write concern, sessions, sharded filters,
//! oversized documents, stalled engines. Every test runs unchanged on each engine
//! (`MONGODB_URI`); what depends on the deployment is asserted on the wire.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use natural_key::bson::{doc, Document};
use natural_key::mongodb::options::{
    ClientOptions, CollectionOptions, IndexOptions, ReadPreference, SelectionCriteria, WriteConcern,
};
use natural_key::mongodb::IndexModel;
use natural_key::prelude::*;
use natural_key::{Collection, Error, RetryPolicy};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Account {
    #[key]
    handle: String,
    #[key(timestamp)]
    created_at: i64,
    email: String,
}

fn account(handle: &str, email: &str) -> Account {
    Account {
        handle: handle.into(),
        created_at: 1_700_000_000_000,
        email: email.into(),
    }
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug)]
struct Signup {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    email: String,
}

async fn unique_email<T: Send + Sync>(coll: &Collection<T>) {
    coll.inner()
        .clone_with_type::<Document>()
        .create_index(
            IndexModel::builder()
                .keys(doc! { "email": 1 })
                .options(IndexOptions::builder().unique(true).build())
                .build(),
        )
        .await
        .unwrap();
}

fn is_ferretdb<T: Send + Sync>(coll: &Collection<T>) -> bool {
    coll.deployment().engine().is_ferretdb_v1()
}

/// Item 1: the user's own unique index is not a race to decide again.
#[tokio::test]
async fn a_violated_user_unique_index_is_permanent_and_named() {
    let (db, commands) = support::database("user_index").await;
    // Unsharded on the cluster too: a sharded engine enforces a unique index that does not
    // begin with the shard key only among documents of one shard-key value (README, "On a
    // sharded cluster"); what a user's index refuses is what this test is about.
    let accounts = Collection::<Account>::open(&db, support::UNSHARDED_ACCOUNTS)
        .await
        .unwrap();
    unique_email(&accounts).await;
    accounts
        .upsert(&account("ann", "a@example.com"))
        .await
        .unwrap();

    commands.reset();
    let err = accounts
        .upsert(&account("bob", "a@example.com"))
        .retry(RetryPolicy::default())
        .await
        .unwrap_err();
    let Error::UniqueIndexViolation { index, key, .. } = &err else {
        panic!("expected UniqueIndexViolation, got {err:?}");
    };
    assert!(!err.is_transient(), "{err}");
    if !is_ferretdb(&accounts) {
        assert_eq!(index, "email_1");
        // FerretDB 2 (DocumentDB) names the index, not the value.
        assert!(
            key.contains("a@example.com") || key == Error::UNNAMED_KEY,
            "{key}"
        );
        assert!(
            !err.to_string().contains("Duplicate key violation"),
            "{err}"
        );
    }
    // One attempt, at most three read-decide rounds (FerretDB names no index: an update by
    // `_id` that matches nothing, and the insert refused again, tell it apart) — not 8 rounds
    // times 10 attempts.
    let writes = if is_ferretdb(&accounts) { 3 } else { 1 };
    assert!(commands.writes() <= writes, "{:?}", commands.sequence());
    assert!(commands.count("find") <= 3, "{:?}", commands.sequence());
    let n = accounts.inner().count_documents(doc! {}).await.unwrap();
    assert_eq!(n, 1, "nothing was written for bob");

    // Batches: reported at its index; the others are written. Of two documents of one batch
    // that share a value of the user's index, the one with the smaller id is stored, whatever
    // their input order: the engine sees a command's documents in `_id` order.
    for (first, second) in [("cat", "dan"), ("dan", "cat")] {
        let batch = [
            account(first, "c@example.com"),
            account(second, "c@example.com"),
            account("eve", "e@example.com"),
        ];
        let r = accounts.upsert_many(&batch).await.unwrap();
        let refused = usize::from(batch[0].id().unwrap() < batch[1].id().unwrap());
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert_eq!(r.failures[0].0, refused, "{:?}", r.failures);
        assert!(
            matches!(r.failures[0].1, Error::UniqueIndexViolation { .. }),
            "{:?}",
            r.failures
        );
        if first == "cat" {
            assert_eq!(r.inserted, 2);
        } else {
            // The same documents again: the stored winner and eve are unchanged.
            assert_eq!((r.inserted, r.unchanged), (0, 2), "{r:?}");
        }
    }
    assert_eq!(accounts.inner().count_documents(doc! {}).await.unwrap(), 3);

    // Events likewise.
    let signups = Collection::<Signup>::open(&db, "signups").await.unwrap();
    unique_email(&signups).await;
    let first = Signup {
        id: Ulid::new(),
        email: "s@example.com".into(),
    };
    let second = Signup {
        id: Ulid::new(),
        ..first.clone()
    };
    signups.insert(&first).await.unwrap();
    let err = signups
        .insert(&second)
        .retry(RetryPolicy::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UniqueIndexViolation { .. }), "{err:?}");
    let r = signups.insert_many([&second]).await.unwrap();
    assert!(matches!(
        r.failures[..],
        [(0, Error::UniqueIndexViolation { .. })]
    ));
    assert_eq!(signups.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Page {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
    title: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    subtitle: Option<String>,
}

/// Item 2: reading back after an upsert gives what was written.
#[tokio::test]
async fn optional_fields_left_out_are_unset_in_every_mode() {
    let (db, _) = support::database("optional").await;
    let pages = Collection::<Page>::open(&db, "pages").await.unwrap();
    for (k, mode) in [WriteMode::Merge, WriteMode::Replace]
        .into_iter()
        .enumerate()
    {
        let with = Page {
            slug: format!("p{k}"),
            at: 1_700_000_000_000,
            title: "t".into(),
            subtitle: Some("old".into()),
        };
        let without = Page {
            subtitle: None,
            ..with.clone()
        };
        let id = with.id().unwrap();
        pages.upsert(&with).mode(mode).await.unwrap();
        // A field other code wrote, unknown to the type.
        pages
            .inner()
            .clone_with_type::<Document>()
            .update_one(
                doc! { "_id": id.to_string() },
                doc! { "$set": { "views": 7 } },
            )
            .await
            .unwrap();
        let o = pages.upsert(&without).mode(mode).await.unwrap();
        assert_eq!(o, UpsertOutcome::Updated(id), "{mode:?}");
        assert_eq!(
            pages.get(id).await.unwrap(),
            Some(without.clone()),
            "{mode:?}"
        );
        assert_eq!(
            pages.find_by_key(&without).await.unwrap(),
            Some(without.clone())
        );
        let stored = pages
            .inner()
            .clone_with_type::<Document>()
            .find_one(doc! { "_id": id.to_string() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.get("views").is_some(),
            mode == WriteMode::Merge,
            "merge keeps unknown fields, replace removes them"
        );

        // Batches: the same, there and back.
        let r = pages.upsert_many([&with]).mode(mode).await.unwrap();
        assert_eq!(r.updated, 1);
        let r = pages.upsert_many([&without]).mode(mode).await.unwrap();
        assert_eq!(r.updated, 1);
        assert_eq!(
            pages.get(id).await.unwrap(),
            Some(without),
            "{mode:?} batch"
        );
    }
}

/// Item 3: a collection that already holds documents without our fields can be opened.
#[tokio::test]
async fn a_collection_with_documents_written_by_other_code_is_adopted() {
    let (db, _) = support::database("legacy").await;
    let raw = db.collection::<Document>("accounts");
    raw.insert_many([
        doc! { "_id": "legacy-1", "handle": "old1", "email": "o1@example.com" },
        doc! { "_id": "legacy-2", "handle": "old2", "email": "o2@example.com" },
        doc! { "_id": "legacy-3", "handle": "old3", "email": "o3@example.com" },
    ])
    .await
    .unwrap();
    let accounts = Collection::<Account>::open(&db, "accounts").await.unwrap();
    let r = accounts
        .upsert_many([account("new1", "n1@x"), account("new2", "n2@x")])
        .await
        .unwrap();
    assert_eq!(r.inserted, 2);
    // The identity index still refuses a second document with a stored identity.
    let identity = account("new1", "n1@x").identity().unwrap().to_string();
    let dup = raw
        .insert_one(doc! { "_id": "fork", natural_key::IDENTITY_FIELD: identity })
        .await;
    assert!(dup.is_err(), "the identity index must stay unique");
    // Opening again finds its own index and accepts it.
    Collection::<Account>::open(&db, "accounts").await.unwrap();
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 5);
}

#[tokio::test]
async fn an_index_of_our_name_with_other_options_is_reported() {
    let (db, _) = support::database("index_conflict").await;
    let raw = db.collection::<Document>("accounts");
    raw.create_index(
        IndexModel::builder()
            .keys(doc! { natural_key::IDENTITY_FIELD: 1 })
            .options(
                IndexOptions::builder()
                    .name("nk_identity".to_string())
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    let err = Collection::<Account>::open(&db, "accounts")
        .await
        .unwrap_err();
    let Error::IndexConflict { name, .. } = &err else {
        panic!("expected IndexConflict, got {err:?}");
    };
    assert_eq!(name, "nk_identity");
    assert!(err.to_string().contains("drop that index"), "{err}");
}

/// Runs every kind of guard read and write once: a new document, an unchanged one, an edit,
/// a batch with new, unchanged and edited documents, and an event sent twice.
async fn every_kind_of_write(accounts: &Collection<Account>, signups: &Collection<Signup>) {
    let a = account("wire-a", "a@w");
    accounts.upsert(&a).await.unwrap();
    accounts.upsert(&a).await.unwrap();
    accounts.upsert(&account("wire-a", "a2@w")).await.unwrap();
    let batch = [
        account("wire-a", "a3@w"),
        account("wire-b", "b@w"),
        account("wire-c", "c@w"),
    ];
    accounts.upsert_many(&batch).await.unwrap();
    accounts.upsert_many(&batch).await.unwrap();
    let s = Signup {
        id: Ulid::new(),
        email: "s@w".into(),
    };
    signups.insert(&s).await.unwrap();
    assert_eq!(
        signups.insert(&s).await.unwrap(),
        InsertOutcome::AlreadyApplied(s.id)
    );
    signups.insert_many([&s]).await.unwrap();
}

fn read_preference(cmd: &Document) -> Option<String> {
    cmd.get_document("$readPreference")
        .ok()
        .and_then(|r| r.get_str("mode").ok())
        .map(str::to_string)
}

/// Item 4: every read that decides a write goes to the primary.
#[tokio::test]
async fn guard_reads_go_to_the_primary_whatever_the_client_says() {
    let commands = support::Commands::default();
    let mut opts = ClientOptions::parse(support::uri()).await.unwrap();
    opts.selection_criteria = Some(SelectionCriteria::ReadPreference(
        ReadPreference::SecondaryPreferred {
            options: Default::default(),
        },
    ));
    let client = support::client_with(opts, &commands);
    let db = client.database(&support::database_name("read_pref"));
    db.drop().await.unwrap();
    let accounts = Collection::<Account>::open(&db, "accounts").await.unwrap();
    let signups = Collection::<Signup>::open(&db, "signups").await.unwrap();
    commands.reset();
    every_kind_of_write(&accounts, &signups).await;
    let finds = commands.documents("find");
    assert!(finds.len() >= 5, "{:?}", commands.sequence());
    for f in &finds {
        assert!(
            matches!(read_preference(f).as_deref(), None | Some("primary")),
            "a guard read left the primary: {f}"
        );
    }
    // The control: the same client's own reads do carry its read preference, wherever the
    // topology lets a driver send one (a replica set; a standalone server gets none).
    commands.reset();
    accounts.inner().find_one(doc! {}).await.unwrap();
    let control = read_preference(&commands.documents("find")[0]);
    let replica_set = support::uri().contains("replicaSet=");
    if replica_set {
        assert_eq!(control.as_deref(), Some("secondaryPreferred"));
    } else {
        eprintln!("standalone engine: read preference checked on the replica-set engine");
    }
}

/// Item 5: every write command carries the collection's write concern.
#[tokio::test]
async fn every_write_carries_the_collections_write_concern() {
    let (db, commands) = support::database("write_concern").await;
    let wc = WriteConcern::builder()
        .w(natural_key::mongodb::options::Acknowledgment::Majority)
        .journal(true)
        .build();
    let opts = || {
        CollectionOptions::builder()
            .write_concern(wc.clone())
            .build()
    };
    let accounts = Collection::new(db.collection_with_options::<Account>("accounts", opts()))
        .await
        .unwrap();
    let signups = Collection::new(db.collection_with_options::<Signup>("signups", opts()))
        .await
        .unwrap();
    commands.reset();
    every_kind_of_write(&accounts, &signups).await;
    let writes: Vec<Document> = ["insert", "update"]
        .iter()
        .flat_map(|n| commands.documents(n))
        .collect();
    assert!(writes.len() >= 4, "{:?}", commands.sequence());
    assert!(!commands.documents("update").is_empty());
    for w in &writes {
        let got = w
            .get_document("writeConcern")
            .unwrap_or_else(|_| panic!("no writeConcern: {w}"));
        assert_eq!(got.get_str("w").ok(), Some("majority"), "{w}");
        assert_eq!(got.get_bool("j").ok(), Some(true), "{w}");
    }
}

/// Sessions: every command of a call runs in the session it was given.
#[tokio::test]
async fn a_session_given_to_a_call_carries_every_command() {
    let (db, commands) = support::database("session").await;
    let accounts = Collection::<Account>::open(&db, "accounts").await.unwrap();
    let mut session = match db.client().start_session().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("this engine has no sessions ({e}); nothing to check");
            return;
        }
    };
    let lsid = session.id().clone();
    commands.reset();
    let a = account("sess", "s@x");
    accounts.upsert(&a).session(&mut session).await.unwrap();
    accounts
        .upsert(&account("sess", "s2@x"))
        .session(&mut session)
        .await
        .unwrap();
    accounts
        .upsert_many([account("sess", "s3@x"), account("sess2", "t@x")])
        .session(&mut session)
        .await
        .unwrap();
    let sent: Vec<Document> = ["find", "insert", "update"]
        .iter()
        .flat_map(|n| commands.documents(n))
        .collect();
    assert!(sent.len() >= 6, "{:?}", commands.sequence());
    for c in &sent {
        assert_eq!(
            c.get_document("lsid").ok(),
            Some(&lsid),
            "not in the session: {c}"
        );
    }
}

/// Item 6: on a sharded (or partitioned) collection every write filter carries the identity.
#[tokio::test]
async fn sharded_collections_get_the_identity_in_every_write_filter() {
    for sharded in [false, true] {
        let (db, commands) = support::database(&format!("sharded_{sharded}")).await;
        let accounts = Collection::<Account>::new(db.collection("accounts"))
            .sharded(sharded)
            .await
            .unwrap();
        assert_eq!(accounts.is_sharded(), sharded);
        let signups = Collection::<Signup>::open(&db, "signups").await.unwrap();
        // A same-`_id` document without identity, adopted by an upsert by `_id`.
        let legacy = account("adopted", "x@x");
        accounts
            .inner()
            .clone_with_type::<Document>()
            .insert_one(doc! { "_id": legacy.id().unwrap().to_string(), "handle": "adopted" })
            .await
            .unwrap();
        commands.reset();
        every_kind_of_write(&accounts, &signups).await;
        if !sharded {
            accounts.upsert(&legacy).await.unwrap();
        }
        let updates = commands.documents("update");
        assert!(!updates.is_empty());
        // The stored hash guards an update only where the engine compares it atomically;
        // FerretDB 1.x does not, and scans the collection for any filter but `_id` alone.
        let ferret = accounts.deployment().engine().is_ferretdb_v1();
        let mut guarded = 0;
        for u in &updates {
            for s in u.get_array("updates").unwrap() {
                let q = s.as_document().unwrap().get_document("q").unwrap();
                assert!(q.contains_key("_id"), "{q}");
                assert_eq!(q.contains_key(natural_key::IDENTITY_FIELD), sharded, "{q}");
                guarded += q.contains_key(natural_key::HASH_FIELD) as usize;
            }
        }
        if ferret {
            assert_eq!(guarded, 0, "FerretDB: {updates:?}");
        } else {
            assert!(
                guarded > 0,
                "no update was guarded by its hash: {updates:?}"
            );
        }
    }
}

/// Item 7: an oversized document fails alone, before anything is sent for it.
#[tokio::test]
async fn an_oversized_document_fails_alone_before_it_is_sent() {
    let (db, commands) = support::database("oversized").await;
    let accounts = Collection::<Account>::open(&db, "accounts").await.unwrap();
    let limit = accounts.deployment().limits().max_document_bytes;
    let mut batch: Vec<Account> = (0..10).map(|i| account(&format!("o{i}"), "e")).collect();
    batch[3].email = "x".repeat(limit + 1);
    let r = accounts.upsert_many(&batch).await.unwrap();
    assert_eq!(r.inserted, 9);
    assert!(
        matches!(r.failures[..], [(3, Error::DocumentTooLarge { .. })]),
        "{:?}",
        r.failures
    );
    commands.reset();
    let err = accounts.upsert(&batch[3]).await.unwrap_err();
    assert!(matches!(err, Error::DocumentTooLarge { .. }), "{err:?}");
    assert_eq!(commands.total(), 0, "nothing was sent for it");

    let signups = Collection::<Signup>::open(&db, "signups").await.unwrap();
    let mut events: Vec<Signup> = (0..10)
        .map(|_| Signup {
            id: Ulid::new(),
            email: "e".into(),
        })
        .collect();
    events[7].email = "y".repeat(limit + 1);
    let r = signups.insert_many(&events).await.unwrap();
    assert_eq!(r.inserted, 9);
    assert!(matches!(
        r.failures[..],
        [(7, Error::DocumentTooLarge { .. })]
    ));
    assert_eq!(accounts.inner().count_documents(doc! {}).await.unwrap(), 9);
}

/// Item 8: an engine that stops answering mid-write does not hang the call.
#[tokio::test]
async fn a_stalled_engine_is_a_timeout_not_a_hang() {
    use support::proxy::{self, Faults, Proxy};
    let (db, _) = support::database("stalled").await;
    let direct = Collection::<Account>::open(&db, "accounts").await.unwrap();
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 7).await;
    let client = support::client_for(&proxy.uri(), &support::Commands::default()).await;
    let accounts = Collection::new(client.database(db.name()).collection::<Account>("accounts"))
        .deployment(direct.deployment().clone())
        .await
        .unwrap();
    accounts.upsert(&account("before", "b@x")).await.unwrap();
    proxy.set_stall(true);
    let stalled = account("stalled", "s@x");
    let call = accounts
        .upsert(&stalled)
        .retry(
            RetryPolicy::default()
                .max_attempts(2)
                .initial_backoff(Duration::from_millis(10))
                .attempt_timeout(Duration::from_millis(500)),
        )
        .into_future();
    let result = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the call hung although every attempt has a deadline");
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_transient());
    let batch = [account("s1", "1"), account("s2", "2")];
    let call = accounts
        .upsert_many(&batch)
        .retry(RetryPolicy::none().attempt_timeout(Duration::from_millis(500)))
        .into_future();
    let err = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the batch hung")
        .unwrap_err();
    assert!(matches!(err.error, Error::Timeout { .. }), "{err:?}");
    assert_eq!(err.settled, 0);
    proxy.set_stall(false);
    let stored = direct.inner().count_documents(doc! {}).await.unwrap();
    assert_eq!(stored, 1, "nothing but the first account was written");
}

/// The handle tells the engine apart as its own `buildInfo` reply does: FerretDB 1.x
/// (`ferretdbVersion`), FerretDB 2 on DocumentDB (`ferretdb.version`), anything else as MongoDB.
/// Where CI knows which engine it started, `NK_EXPECT_ENGINE` (documentdb, ferretdb1, java)
/// says so, and the detection must agree.
#[tokio::test]
async fn the_engine_is_told_apart_by_its_build_info() {
    let (db, _) = support::database("engine_detected").await;
    let info = db
        .client()
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .unwrap();
    let deployment = natural_key::Deployment::detect(db.client()).await.unwrap();
    let engine = deployment.engine();
    let v1 = info.get_str("ferretdbVersion").ok();
    let v2 = info
        .get_document("ferretdb")
        .ok()
        .and_then(|f| f.get_str("version").ok());
    match (v1, v2) {
        (Some(v), _) => {
            assert_eq!(engine, &natural_key::Engine::FerretDb { version: v.into() });
            assert!(engine.is_ferretdb_v1());
            assert_eq!(deployment.limits().max_statements, 16);
        }
        (None, Some(v)) => {
            assert_eq!(engine, &natural_key::Engine::FerretDb { version: v.into() });
            assert!(!engine.is_ferretdb_v1(), "{v}");
            assert!(deployment.limits().max_statements > 16);
        }
        (None, None) => {
            assert!(
                matches!(engine, natural_key::Engine::MongoDb { .. }),
                "{engine:?}"
            );
        }
    }
    let expected = std::env::var("NK_EXPECT_ENGINE").unwrap_or_default();
    let is = match (v1, v2) {
        (Some(_), _) => "ferretdb1",
        (None, Some(_)) => "documentdb",
        (None, None) => "java",
    };
    // The cluster is DocumentDB too, behind the same FerretDB.
    let expected = if expected == "cluster" {
        "documentdb".to_string()
    } else {
        expected
    };
    assert!(
        expected.is_empty() || expected == is,
        "CI started {expected}, the handle sees {is}: {engine:?}"
    );
}
