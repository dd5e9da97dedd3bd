//! The guarded upsert against the real engine (FerretDB from scripts/db, or MONGODB_URI).

mod support;

use std::collections::HashMap;

use natural_key::bson::{doc, Document, RawDocumentBuf};
use natural_key::prelude::*;
use natural_key::{Collection, Error, KeyError, RetryPolicy, HASH_FIELD, IDENTITY_FIELD};
use support::proxy::{self, Faults, Proxy};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    title: String,
    body: String,
    #[serde(default)]
    tags: HashMap<String, String>,
    #[natural_key(skip_hash)]
    #[serde(default)]
    fetched_at: i64,
}

fn post(slug: &str, body: &str) -> Post {
    Post {
        slug: slug.into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        title: format!("Title of {slug}"),
        body: body.into(),
        tags: HashMap::new(),
        fetched_at: 0,
    }
}

async fn posts(test: &str) -> (Collection<Post>, support::Commands) {
    let (db, commands) = support::database(test).await;
    let coll = Collection::new(db.collection::<Post>("posts"))
        .await
        .unwrap();
    commands.reset();
    (coll, commands)
}

async fn raw(coll: &Collection<Post>, filter: Document) -> Vec<RawDocumentBuf> {
    use futures::TryStreamExt;
    coll.inner()
        .clone_with_type::<RawDocumentBuf>()
        .find(filter)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn insert_then_unchanged_a_hundred_times() {
    let (coll, commands) = posts("unchanged").await;
    let p = post("hello", "first body");
    let id = p.id().unwrap();
    assert_eq!(coll.upsert(&p).await.unwrap(), UpsertOutcome::Inserted(id));
    assert_eq!(commands.writes(), 1);

    commands.reset();
    for _ in 0..100 {
        assert_eq!(coll.upsert(&p).await.unwrap(), UpsertOutcome::Unchanged(id));
    }
    assert_eq!(
        commands.writes(),
        0,
        "an unchanged document sends no write command"
    );
    assert_eq!(commands.count("find"), 100, "one read per upsert");
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);

    let stored = coll
        .inner()
        .clone_with_type::<Document>()
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.get_str("_id").unwrap(), id.to_string());
    assert_eq!(
        stored.get_str(HASH_FIELD).unwrap(),
        p.content_hash().unwrap().to_string()
    );
    assert_eq!(
        stored.get_str(IDENTITY_FIELD).unwrap(),
        p.identity().unwrap().to_string()
    );
    // The document reads back as the struct it was written from.
    let back: Post = coll
        .inner()
        .find_one(doc! { "_id": id.to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, p);
}

#[tokio::test]
async fn body_edit_updates_in_place() {
    let (coll, commands) = posts("body_edit").await;
    let p = post("edit-me", "v1");
    let id = p.id().unwrap();
    coll.upsert(&p).await.unwrap();
    let edited = Post {
        body: "v2".into(),
        ..p.clone()
    };
    commands.reset();
    assert_eq!(
        coll.upsert(&edited).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    assert_eq!(commands.writes(), 1);
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);
    let back = coll
        .inner()
        .find_one(doc! { "_id": id.to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.body, "v2");
    assert_eq!(
        coll.upsert(&edited).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
}

#[tokio::test]
async fn timestamp_edit_is_refused_and_writes_nothing() {
    let (coll, commands) = posts("ts_edit").await;
    let p = post("frozen", "body");
    let id = p.id().unwrap();
    coll.upsert(&p).await.unwrap();
    let before = raw(&coll, doc! {}).await;

    let moved = Post {
        published_at: p.published_at + 86_400_000,
        body: "also edited".into(),
        ..p.clone()
    };
    commands.reset();
    let err = coll.upsert(&moved).await.unwrap_err();
    match &err {
        Error::ImmutableKeyChanged {
            collection,
            stored_id,
            derived_id,
            key,
        } => {
            assert_eq!(
                collection,
                &format!("{}.posts", coll.inner().namespace().db)
            );
            assert_eq!(stored_id, &id.to_string());
            assert_eq!(*derived_id, moved.id().unwrap());
            assert_eq!(key, r#"slug="frozen", lang="en""#);
        }
        other => panic!("expected ImmutableKeyChanged, got {other:?}"),
    }
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(
        msg.contains("frozen")
            && msg.contains(&id.to_string())
            && msg.contains("Nothing was written"),
        "{msg}"
    );
    assert_eq!(commands.writes(), 0);
    let after = raw(&coll, doc! {}).await;
    assert_eq!(before.len(), 1);
    assert_eq!(
        before.iter().map(|d| d.as_bytes()).collect::<Vec<_>>(),
        after.iter().map(|d| d.as_bytes()).collect::<Vec<_>>(),
        "the stored document is byte-for-byte unchanged"
    );
}

#[tokio::test]
async fn skip_hash_field_change_alone_is_unchanged() {
    let (coll, commands) = posts("skip_hash").await;
    let p = post("volatile", "body");
    coll.upsert(&p).await.unwrap();
    let refetched = Post {
        fetched_at: 99_999,
        ..p.clone()
    };
    commands.reset();
    assert!(matches!(
        coll.upsert(&refetched).await.unwrap(),
        UpsertOutcome::Unchanged(_)
    ));
    assert_eq!(commands.writes(), 0);
}

/// Writes (or, as the child, re-writes) a HashMap-bearing post; the parent runs this file's
/// binary again so the second upsert happens in a fresh process with fresh hash seeds.
#[tokio::test]
async fn hashmap_document_is_unchanged_from_a_fresh_process() {
    fn tagged() -> Post {
        let mut p = post("maps", "body");
        p.tags = (0..64)
            .map(|i| (format!("key-{i}"), format!("value-{i}")))
            .collect();
        p
    }
    if std::env::var("NK_CHILD_UPSERT").is_ok() {
        let (db, _) = support::database_existing("hashmap").await;
        let coll = Collection::new(db.collection::<Post>("posts"))
            .await
            .unwrap();
        let outcome = coll.upsert(&tagged()).await.unwrap();
        println!("CHILD-OUTCOME {}", outcome.as_str());
        return;
    }
    let (coll, _) = posts("hashmap").await;
    assert!(matches!(
        coll.upsert(&tagged()).await.unwrap(),
        UpsertOutcome::Inserted(_)
    ));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hashmap_document_is_unchanged_from_a_fresh_process",
            "--nocapture",
        ])
        .env("NK_CHILD_UPSERT", "1")
        .env("MONGODB_URI", support::uri())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("CHILD-OUTCOME unchanged"),
        "child said: {stdout}"
    );
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn eight_writers_racing_one_new_document() {
    let (coll, _) = posts("race_new").await;
    for round in 0..5 {
        let p = post(&format!("contended-{round}"), "same body");
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (coll, p) = (coll.clone(), p.clone());
            tasks.push(tokio::spawn(async move { coll.upsert(&p).await }));
        }
        let mut inserted = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(UpsertOutcome::Inserted(_)) => inserted += 1,
                Ok(UpsertOutcome::Unchanged(_) | UpsertOutcome::Updated(_)) => {}
                other => panic!("writer failed: {other:?}"),
            }
        }
        assert_eq!(inserted, 1, "exactly one writer inserts");
        assert_eq!(
            coll.inner()
                .count_documents(doc! { "slug": p.slug.clone() })
                .await
                .unwrap(),
            1
        );
    }
}

#[tokio::test]
async fn two_writers_racing_a_timestamp_fork() {
    let (coll, _) = posts("race_fork").await;
    for round in 0..5 {
        let a = post(&format!("forked-{round}"), "a");
        let b = Post {
            published_at: a.published_at + 1,
            body: "b".into(),
            ..a.clone()
        };
        let (ca, cb) = (coll.clone(), coll.clone());
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { ca.upsert(&a).await }),
            tokio::spawn(async move { cb.upsert(&b).await })
        );
        let results = [ra.unwrap(), rb.unwrap()];
        let ok = results
            .iter()
            .filter(|r| matches!(r, Ok(UpsertOutcome::Inserted(_))))
            .count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(Error::ImmutableKeyChanged { .. })))
            .count();
        assert_eq!((ok, refused), (1, 1), "round {round}: {results:?}");
        assert_eq!(
            coll.inner()
                .count_documents(doc! { "slug": format!("forked-{round}") })
                .await
                .unwrap(),
            1
        );
    }
}

#[tokio::test]
async fn concurrent_edits_leave_a_consistent_document() {
    let (coll, _) = posts("race_edit").await;
    let base = post("busy", "v0");
    coll.upsert(&base).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (coll, p) = (
            coll.clone(),
            Post {
                body: format!("v{i}"),
                ..base.clone()
            },
        );
        tasks.push(tokio::spawn(async move { coll.upsert(&p).await }));
    }
    for t in tasks {
        let o = t.await.unwrap().unwrap();
        assert!(
            matches!(o, UpsertOutcome::Updated(_) | UpsertOutcome::Unchanged(_)),
            "{o:?}"
        );
    }
    // Whatever body won, the stored hash is the hash of the stored body: no torn write.
    let stored: Post = coll.inner().find_one(doc! {}).await.unwrap().unwrap();
    let raw = coll
        .inner()
        .clone_with_type::<Document>()
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        raw.get_str(HASH_FIELD).unwrap(),
        stored.content_hash().unwrap().to_string()
    );
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn bad_input_fails_before_any_command() {
    let (coll, commands) = posts("bad_input").await;
    let nul = post("bad\0slug", "body");
    assert!(matches!(
        coll.upsert(&nul).await,
        Err(Error::Key(KeyError::NulByte {
            field: "slug",
            position: 3
        }))
    ));
    let early = Post {
        published_at: -5,
        ..post("early", "body")
    };
    let err = coll.upsert(&early).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Key(KeyError::TimestampOutOfRange {
                field: "published_at",
                millis: -5
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("published_at"), "{err}");
    let late = Post {
        published_at: 1 << 48,
        ..post("late", "body")
    };
    assert!(matches!(
        coll.upsert(&late).await,
        Err(Error::Key(KeyError::TimestampOutOfRange { .. }))
    ));
    assert_eq!(commands.total(), 0, "no command at all reached the server");
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 0);
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Unserializable {
    #[key]
    name: String,
    #[key(timestamp)]
    at: i64,
    // BSON has no unsigned 64-bit integer: values above i64::MAX do not serialize.
    big: u64,
}

#[tokio::test]
async fn a_document_that_will_not_serialize_is_a_typed_error() {
    let (db, commands) = support::database("unserializable").await;
    let coll = Collection::new(db.collection::<Unserializable>("things"))
        .await
        .unwrap();
    commands.reset();
    let doc = Unserializable {
        name: "x".into(),
        at: 1,
        big: u64::MAX,
    };
    let err = coll.upsert(&doc).await.unwrap_err();
    assert!(matches!(err, Error::Serialize { .. }), "{err:?}");
    assert!(err.to_string().contains("Unserializable"), "{err}");
    assert_eq!(commands.total(), 0);
}

#[tokio::test]
async fn merge_keeps_foreign_fields_replace_removes_them() {
    let (coll, _) = posts("modes").await;
    let p = post("modes", "v1");
    let id = p.id().unwrap().to_string();
    coll.upsert(&p).await.unwrap();
    let rawc = coll.inner().clone_with_type::<Document>();
    rawc.update_one(doc! { "_id": &id }, doc! { "$set": { "views": 7 } })
        .await
        .unwrap();

    coll.upsert(&Post {
        body: "v2".into(),
        ..p.clone()
    })
    .await
    .unwrap();
    let d = rawc.find_one(doc! { "_id": &id }).await.unwrap().unwrap();
    assert_eq!(
        d.get_i32("views").unwrap(),
        7,
        "merge ($set) keeps fields written by other code"
    );

    let o = coll
        .upsert(&Post {
            body: "v3".into(),
            ..p.clone()
        })
        .replace()
        .await
        .unwrap();
    assert!(matches!(o, UpsertOutcome::Updated(_)));
    let d = rawc.find_one(doc! { "_id": &id }).await.unwrap().unwrap();
    assert!(
        d.get("views").is_none(),
        "replace removes fields the struct does not have"
    );
    assert_eq!(d.get_str("body").unwrap(), "v3");
    assert_eq!(
        d.get_str(IDENTITY_FIELD).unwrap(),
        p.identity().unwrap().to_string()
    );
}

#[tokio::test]
async fn adopts_a_document_written_by_other_code_with_the_same_id() {
    let (coll, _) = posts("adopt").await;
    let p = post("legacy", "from go");
    let id = p.id().unwrap().to_string();
    // What a Go service following the same recipe wrote: same _id, no natural-key fields.
    coll.inner()
        .clone_with_type::<Document>()
        .insert_one(doc! { "_id": &id, "slug": "legacy", "lang": "en", "body": "old" })
        .await
        .unwrap();
    assert!(matches!(
        coll.upsert(&p).await.unwrap(),
        UpsertOutcome::Updated(_)
    ));
    assert!(matches!(
        coll.upsert(&p).await.unwrap(),
        UpsertOutcome::Unchanged(_)
    ));
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn the_identity_index_refuses_a_fork_written_around_the_library() {
    let (coll, _) = posts("index").await;
    let p = post("indexed", "body");
    coll.upsert(&p).await.unwrap();
    let fork = doc! { "_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", IDENTITY_FIELD: p.identity().unwrap().to_string() };
    let err = coll
        .inner()
        .clone_with_type::<Document>()
        .insert_one(fork)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("11000") || err.to_string().to_lowercase().contains("duplicate"),
        "{err}"
    );
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug)]
struct Payment {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[idempotency_key]
    request_id: String,
    amount_cents: i64,
}

#[tokio::test]
async fn random_id_events_are_stored_once() {
    let (db, commands) = support::database("events").await;
    let clicks = Collection::new(db.collection::<Click>("clicks"))
        .await
        .unwrap();
    let c = Click {
        id: Ulid::new(),
        page: "/".into(),
    };
    assert_eq!(
        clicks.insert(&c).await.unwrap(),
        InsertOutcome::Inserted(c.id)
    );
    assert_eq!(
        clicks.insert(&c).await.unwrap(),
        InsertOutcome::AlreadyApplied(c.id)
    );
    // Identical content, new event: it sits beside the first.
    let again = Click {
        id: Ulid::new(),
        page: "/".into(),
    };
    assert_eq!(
        clicks.insert(&again).await.unwrap(),
        InsertOutcome::Inserted(again.id)
    );
    assert_eq!(clicks.inner().count_documents(doc! {}).await.unwrap(), 2);
    assert!(commands.count("insert") >= 3);

    let payments = Collection::new(db.collection::<Payment>("payments"))
        .await
        .unwrap();
    let first = Payment {
        id: Ulid::new(),
        request_id: "req-1".into(),
        amount_cents: 100,
    };
    assert_eq!(
        payments.insert(&first).await.unwrap(),
        InsertOutcome::Inserted(first.id)
    );
    // The client lost the reply and rebuilt the request with a new id but the same key.
    let retry = Payment {
        id: Ulid::new(),
        ..first.clone()
    };
    assert_eq!(
        payments.insert(&retry).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.id)
    );
    assert_eq!(payments.inner().count_documents(doc! {}).await.unwrap(), 1);
    let nul = Payment {
        id: Ulid::new(),
        request_id: "a\0".into(),
        amount_cents: 1,
    };
    assert!(matches!(
        payments.insert(&nul).await,
        Err(Error::Key(KeyError::NulByte { .. }))
    ));
}

#[tokio::test]
async fn a_stopped_engine_is_a_transient_error_and_nothing_is_half_written() {
    // A private engine, so stopping it does not disturb the other tests.
    let state = std::env::temp_dir().join(format!("nk-stop-test-{}", std::process::id()));
    let data = state.join("data");
    let state_s = state.to_string_lossy().to_string();
    let data_s = data.to_string_lossy().to_string();
    let env = [("NK_DB_STATE", state_s.as_str())];
    let uri = support::db_up(&["--data", &data_s], &env);
    let port = uri
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();

    let commands = support::Commands::default();
    let client = support::client_for(&uri, &commands).await;
    let coll = Collection::new(client.database("nk_stop").collection::<Post>("posts"))
        .retry(RetryPolicy::none())
        .await
        .unwrap();
    let p = post("survivor", "v1");
    coll.upsert(&p).await.unwrap();

    support::db_down(&env);
    let err = coll
        .upsert(&Post {
            body: "v2".into(),
            ..p.clone()
        })
        .await
        .unwrap_err();
    assert!(
        err.is_transient(),
        "a stopped engine must be transient, got {err:?}"
    );
    assert!(matches!(err, Error::Transient(_)), "{err:?}");

    // Same data, same port: the document is exactly the one written before the stop.
    let env_port = [
        ("NK_DB_STATE", state_s.as_str()),
        ("NK_DB_PORT", port.as_str()),
    ];
    support::db_up(&["--data", &data_s], &env_port);
    let back: Vec<Post> = {
        use futures::TryStreamExt;
        coll.inner()
            .find(doc! {})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    };
    assert_eq!(back, vec![p.clone()]);
    assert!(matches!(
        coll.upsert(&p).await.unwrap(),
        UpsertOutcome::Unchanged(_)
    ));
    support::db_down(&env);
    let _ = std::fs::remove_dir_all(&state);
}

/// Captures formatted tracing output.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn upserts_emit_a_span_with_collection_id_and_outcome() {
    let (coll, _) = posts("tracing").await;
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let p = post("traced", "body");
    coll.upsert(&p).await.unwrap();
    coll.upsert(&p).await.unwrap();
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let spans: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("natural_key.upsert"))
        .collect();
    assert_eq!(spans.len(), 2, "{text}");
    let id = p.id().unwrap().to_string();
    let ns = coll.inner().namespace().to_string();
    for (line, outcome) in spans.iter().zip(["inserted", "unchanged"]) {
        assert!(line.contains(&format!("collection={ns}")), "{line}");
        assert!(line.contains(&format!("id={id}")), "{line}");
        assert!(
            line.contains(&format!("outcome=\"{outcome}\""))
                || line.contains(&format!("outcome={outcome}")),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `doc.upsert(&coll)`: the same writes, spelled from the document (`Upsertable`).

/// What code generic over the kind of document writes: either kind, through one bound.
async fn save<T: Upsertable>(
    doc: &T,
    coll: &Collection<T>,
    policy: RetryPolicy,
) -> Result<T::Outcome, Error> {
    doc.upsert(coll).retry(policy).await
}

async fn clicks(db: &natural_key::mongodb::Database) -> Collection<Click> {
    Collection::<Click>::open(db, "clicks").await.unwrap()
}

fn click(page: &str) -> Click {
    Click {
        id: Ulid::new(),
        page: page.into(),
    }
}

#[tokio::test]
async fn doc_upsert_inserts_then_leaves_alone_then_updates_with_the_builders_options() {
    let (coll, commands) = posts("doc_upsert").await;
    let p = post("from-the-doc", "v1");
    let id = p.id().unwrap();
    assert_eq!(p.upsert(&coll).await.unwrap(), UpsertOutcome::Inserted(id));
    assert_eq!(commands.writes(), 1);

    commands.reset();
    let policy = RetryPolicy::default();
    assert_eq!(
        p.upsert(&coll).retry(policy).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
    assert_eq!(commands.writes(), 0, "unchanged: no write command");

    // A field other code wrote: the default merge keeps it, `.mode(Replace)` removes it.
    let rawc = coll.inner().clone_with_type::<Document>();
    rawc.update_one(
        doc! { "_id": id.to_string() },
        doc! { "$set": { "views": 7 } },
    )
    .await
    .unwrap();
    let v2 = Post {
        body: "v2".into(),
        ..p.clone()
    };
    assert_eq!(
        v2.upsert(&coll).retry(policy).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    let stored = rawc.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(stored.get_str("body").unwrap(), "v2");
    assert_eq!(stored.get_i32("views").unwrap(), 7, "merge keeps it");

    let v3 = Post {
        body: "v3".into(),
        ..p.clone()
    };
    assert_eq!(
        v3.upsert(&coll)
            .mode(WriteMode::Replace)
            .retry(policy)
            .await
            .unwrap(),
        UpsertOutcome::Updated(id)
    );
    let stored = rawc.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(stored.get_str("body").unwrap(), "v3");
    assert!(
        stored.get("views").is_none(),
        "replace removes it: {stored}"
    );
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);

    // The same call as the handle's: what one wrote, the other finds unchanged.
    assert_eq!(
        coll.upsert(&v3).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
}

#[tokio::test]
async fn event_upsert_stores_the_event_once() {
    let (db, _) = support::database("event_upsert").await;
    let clicks = clicks(&db).await;
    let c = click("/");
    assert_eq!(
        c.upsert(&clicks).await.unwrap(),
        InsertOutcome::Inserted(c.id)
    );
    assert_eq!(
        c.upsert(&clicks)
            .retry(RetryPolicy::default())
            .await
            .unwrap(),
        InsertOutcome::AlreadyApplied(c.id)
    );
    assert_eq!(
        clicks.insert(&c).await.unwrap(),
        InsertOutcome::AlreadyApplied(c.id),
        "the same call as the handle's insert"
    );
    assert_eq!(clicks.inner().count_documents(doc! {}).await.unwrap(), 1);

    // A request rebuilt with a new id but the same idempotency key is the same event.
    let payments = Collection::<Payment>::open(&db, "payments").await.unwrap();
    let first = Payment {
        id: Ulid::new(),
        request_id: "req-7".into(),
        amount_cents: 700,
    };
    let rebuilt = Payment {
        id: Ulid::new(),
        ..first.clone()
    };
    assert_eq!(
        first.upsert(&payments).await.unwrap(),
        InsertOutcome::Inserted(first.id)
    );
    assert_eq!(
        rebuilt.upsert(&payments).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.id)
    );
    assert_eq!(payments.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn generic_save_writes_a_document_and_an_event() {
    let (coll, _) = posts("generic_save").await;
    let db = coll.inner().client().database(&coll.inner().namespace().db);
    let clicks = clicks(&db).await;
    let policy = RetryPolicy::default();

    let p = post("generic", "v1");
    let id = p.id().unwrap();
    let o = save(&p, &coll, policy).await.unwrap();
    assert_eq!(o, UpsertOutcome::Inserted(id));
    assert_eq!(WriteOutcome::id(&o), id);
    assert_eq!(o.to_string(), format!("inserted {id}"));
    assert_eq!(
        save(&p, &coll, policy).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
    let edited = Post {
        body: "v2".into(),
        ..p.clone()
    };
    assert_eq!(
        save(&edited, &coll, policy).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    assert_eq!(
        coll.get(id).await.unwrap().map(|p| p.body),
        Some("v2".into())
    );

    let c = click("/generic");
    let o = save(&c, &clicks, policy).await.unwrap();
    assert_eq!(o, InsertOutcome::Inserted(c.id));
    assert_eq!((o.id(), WriteOutcome::as_str(&o)), (c.id, "inserted"));
    let o = save(&c, &clicks, policy).await.unwrap();
    assert_eq!(o, InsertOutcome::AlreadyApplied(c.id));
    assert_eq!(o.to_string(), format!("already_applied {}", c.id));
    assert_eq!(clicks.inner().count_documents(doc! {}).await.unwrap(), 1);
}

/// `save(doc, coll, policy)` where `coll` writes through `proxy`: the call's first write command
/// is applied and its reply lost; every later one goes through.
async fn save_losing_the_first_reply<T: Upsertable>(
    proxy: &Proxy,
    doc: &T,
    coll: &Collection<T>,
    policy: RetryPolicy,
) -> Result<T::Outcome, Error> {
    proxy.gate_writes();
    let faults = async {
        proxy.until_arrived(1).await;
        proxy.set_faults(Faults {
            drop_reply_after_apply: 1.0,
            ..Faults::none()
        });
        proxy.admit(1);
        proxy.until_decided(1).await;
        proxy.set_faults(Faults::none());
        proxy.admit(1000);
    };
    tokio::join!(save(doc, coll, policy), faults).0
}

/// A client of its own, writing through a fresh proxy to the test's database.
async fn through_a_proxy(
    db: &natural_key::mongodb::Database,
) -> (Proxy, natural_key::mongodb::Database) {
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 28).await;
    let through = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(db.name());
    (proxy, through)
}

/// The policy generic code passes is the one the write runs under: without retries a lost
/// reply is the caller's error; with them, the call finds its own write (both kinds).
#[tokio::test]
async fn generic_save_retries_under_the_policy_it_is_given() {
    let (db, _) = support::database("generic_retry").await;
    let retries = RetryPolicy::default().max_attempts(3);
    for (name, policy) in [("none", RetryPolicy::none()), ("retries", retries)] {
        let (proxy, through) = through_a_proxy(&db).await;
        let posts = Collection::<Post>::open(&through, "posts").await.unwrap();
        let p = post(&format!("lost-{name}"), "v1");
        let result = save_losing_the_first_reply(&proxy, &p, &posts, policy).await;
        let stored = posts.get(p.id().unwrap()).await.unwrap();
        assert_eq!(stored.as_ref(), Some(&p), "{name}: the write was applied");
        match name {
            "none" => assert!(result.unwrap_err().is_transient(), "{name}"),
            _ => assert_eq!(
                result.unwrap(),
                UpsertOutcome::Inserted(p.id().unwrap()),
                "{name}"
            ),
        }

        let (proxy, through) = through_a_proxy(&db).await;
        let clicks = clicks(&through).await;
        let c = click(&format!("/lost-{name}"));
        let result = save_losing_the_first_reply(&proxy, &c, &clicks, policy).await;
        match name {
            "none" => assert!(result.unwrap_err().is_transient(), "{name}"),
            _ => assert_eq!(result.unwrap(), InsertOutcome::Inserted(c.id), "{name}"),
        }
        let stored = clicks
            .inner()
            .count_documents(doc! { "_id": c.id.to_string() })
            .await
            .unwrap();
        assert_eq!(stored, 1, "{name}: the event was stored once");
    }
}

/// The session generic code passes carries every command of the call (both kinds).
#[tokio::test]
async fn generic_save_runs_in_the_session_it_is_given() {
    async fn save_in<T: Upsertable>(
        doc: &T,
        coll: &Collection<T>,
        session: &mut natural_key::mongodb::ClientSession,
    ) -> Result<T::Outcome, Error> {
        doc.upsert(coll)
            .retry(RetryPolicy::default())
            .session(session)
            .await
    }

    let (coll, commands) = posts("generic_session").await;
    let db = coll.inner().client().database(&coll.inner().namespace().db);
    let clicks = clicks(&db).await;
    let mut session = match db.client().start_session().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("this engine has no sessions ({e}); nothing to check");
            return;
        }
    };
    let lsid = session.id().clone();
    commands.reset();
    let p = post("in-session", "v1");
    save_in(&p, &coll, &mut session).await.unwrap();
    let edited = Post {
        body: "v2".into(),
        ..p.clone()
    };
    save_in(&edited, &coll, &mut session).await.unwrap();
    let c = click("/in-session");
    save_in(&c, &clicks, &mut session).await.unwrap();
    let sent: Vec<Document> = ["find", "insert", "update"]
        .iter()
        .flat_map(|n| commands.documents(n))
        .collect();
    assert!(
        commands.count("insert") >= 2 && commands.count("update") >= 1,
        "{:?}",
        commands.sequence()
    );
    for c in &sent {
        assert_eq!(
            c.get_document("lsid").ok(),
            Some(&lsid),
            "not in the session: {c}"
        );
    }
}

/// A handle retries out of the box: with every write's reply lost after the engine applied it,
/// a call that names no policy still ends `Ok`, with the exact outcome, because the handle's
/// policy (`RetryPolicy::default()`) retries and the retry finds its own write. A handle opened
/// with `RetryPolicy::none()` returns the lost reply as a transient error; a call's own
/// `.retry(...)` overrides its handle's.
#[tokio::test]
async fn a_handle_retries_out_of_the_box_and_a_call_overrides_it() {
    let (db, _) = support::database("handle_policy").await;
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 11).await;
    let through = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(db.name());
    let posts = Collection::<Post>::open(&through, "posts").await.unwrap();
    assert_eq!(posts.retry_policy(), RetryPolicy::default());
    let once = Collection::<Post>::open(&through, "posts")
        .retry(RetryPolicy::none())
        .await
        .unwrap();
    assert_eq!(once.retry_policy(), RetryPolicy::none());
    proxy.set_faults(Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    });

    let a = post("handle-a", "v1");
    let outcome = posts.upsert(&a).await.unwrap();
    assert_eq!(outcome, UpsertOutcome::Inserted(a.id().unwrap()));
    let batch: Vec<Post> = (0..20)
        .map(|i| post(&format!("handle-{i}"), "v1"))
        .collect();
    let report = posts.upsert_many(&batch).batch_size(7).await.unwrap();
    assert_eq!(
        (report.inserted, report.failures.len()),
        (20, 0),
        "{report:?}"
    );

    let b = post("handle-b", "v1");
    let e = once.upsert(&b).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    let c = post("handle-c", "v1");
    let e = posts
        .upsert(&c)
        .retry(RetryPolicy::none())
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    // The lost replies were applied: the handle's policy finds them, never a second copy.
    let outcome = once.upsert(&b).retry(RetryPolicy::default()).await.unwrap();
    assert_eq!(outcome, UpsertOutcome::Unchanged(b.id().unwrap()));
    let edited = post("handle-b", "v2");
    let outcome = posts
        .with_retry(RetryPolicy::default())
        .upsert(&edited)
        .await
        .unwrap();
    assert_eq!(outcome, UpsertOutcome::Updated(b.id().unwrap()));
    proxy.set_faults(Faults::none());
    let stored = db
        .collection::<Document>("posts")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(stored, 23);
    assert!(
        proxy.stats().replies_dropped > 0,
        "{:?}",
        proxy.stats().replies_dropped
    );
}
