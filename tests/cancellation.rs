//! Cancellation: every write future may be dropped at any await point — a `timeout` around it,
//! an aborted task. Each kind of write is dropped after a seeded random delay, many times; then
//! the state is checked (every stored document well-formed: its derived `_id`, identity, and
//! the hash of its stored body — nothing a later call could misread), the same input is run
//! again, and the end state is exact.
//!
//! The command in flight at each drop is recorded (command monitoring), so the test is seen to
//! drop futures mid-read, mid-write and between commands. CI-sized by default; full size:
//!
//! ```text
//! NK_CANCELS=1000 cargo test --release --test cancellation -- --nocapture
//! ```

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::TryStreamExt;
use natural_key::bson::{doc, Document};
use natural_key::mongodb::event::command::CommandEvent;
use natural_key::mongodb::event::EventHandler;
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::{Client, Database};
use natural_key::prelude::*;
use natural_key::{Collection, HASH_FIELD, IDENTITY_FIELD};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Delivery {
    #[id]
    id: Ulid,
    request: String,
}

/// Drops per kind of write.
fn cancels() -> usize {
    support::env_or("NK_CANCELS", 120)
}

/// Documents per batch call; batches of `BATCH` inside it.
const CALL: usize = 12;
const BATCH: usize = 4;

/// What the client has in flight: the last command started and not yet answered.
#[derive(Clone, Default)]
struct InFlight(Arc<Mutex<Option<String>>>);

impl InFlight {
    fn now(&self) -> &'static str {
        match self.0.lock().unwrap().as_deref() {
            Some("find") | Some("getMore") => "mid-read",
            Some("insert") => "mid-insert",
            Some("update") => "mid-update",
            Some(_) => "mid-other",
            None => "between commands",
        }
    }
}

async fn database(name: &str) -> (Database, InFlight) {
    let mut opts = ClientOptions::parse(support::uri()).await.unwrap();
    opts.retry_writes = Some(false);
    let flight = InFlight::default();
    let f = flight.0.clone();
    opts.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
        let mut f = f.lock().unwrap();
        match ev {
            CommandEvent::Started(s) => *f = Some(s.command_name),
            CommandEvent::Succeeded(_) | CommandEvent::Failed(_) => *f = None,
            _ => {}
        }
    }));
    let db = Client::with_options(opts)
        .unwrap()
        .database(&support::database_name(name));
    db.drop().await.unwrap();
    (db, flight)
}

/// Call `k`'s posts: a third new, a third stored as a draft, a third stored as they are.
fn posts(k: usize) -> (Vec<Post>, Vec<Post>) {
    let all: Vec<Post> = (0..CALL)
        .map(|i| Post {
            slug: format!("c{k:05}-{i:02}"),
            published_at: 1_700_000_000_000 + (k * CALL + i) as i64,
            body: format!("body {k} {i}"),
        })
        .collect();
    let before = all
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(i, p)| Post {
            body: if i % 3 == 1 {
                format!("draft {i}")
            } else {
                p.body.clone()
            },
            ..p.clone()
        })
        .collect();
    (all, before)
}

/// Each call writes a collection of its own, so every check reads only that call's documents.
async fn stored(db: &Database, coll: &str) -> Vec<Document> {
    db.collection::<Document>(coll)
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// Every stored post of call `k` is one natural-key would read right: at its derived id, with
/// its identity and the hash of the body it holds, once per identity.
async fn assert_well_formed(db: &Database, k: usize) -> Vec<Post> {
    let mut seen = HashMap::new();
    let mut out = Vec::new();
    for d in stored(db, &format!("posts_{k}")).await {
        let p: Post = natural_key::bson::from_document(d.clone())
            .unwrap_or_else(|e| panic!("call {k}: half-written {d}: {e}"));
        assert_eq!(
            d.get_str("_id").unwrap(),
            p.id().unwrap().to_string(),
            "{d}"
        );
        assert_eq!(
            d.get_str(IDENTITY_FIELD).unwrap(),
            p.identity().unwrap().to_string(),
            "{d}"
        );
        assert_eq!(
            d.get_str(HASH_FIELD).unwrap(),
            p.content_hash().unwrap().to_string(),
            "a stored hash that is not its body's: {d}"
        );
        assert!(
            seen.insert(p.slug.clone(), ()).is_none(),
            "{} twice",
            p.slug
        );
        out.push(p);
    }
    out
}

async fn assert_posts_exact(db: &Database, k: usize, want: &[Post]) {
    let mut got = assert_well_formed(db, k).await;
    got.sort_by(|a, b| a.slug.cmp(&b.slug));
    assert_eq!(got, want, "call {k}");
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Upsert,
    UpsertMany,
}

/// Drops `kind` `cancels()` times, each after a seeded delay within `window`; returns where
/// the drops landed.
async fn cancel_upserts(kind: Kind, seed: u64) -> BTreeMap<&'static str, usize> {
    let (db, flight) = database(&format!("{kind:?}").to_lowercase()).await;
    let write = |coll: Collection<Post>, all: Vec<Post>| async move {
        match kind {
            Kind::Upsert => {
                for p in &all {
                    coll.upsert(p).await.unwrap();
                }
            }
            Kind::UpsertMany => {
                let r = coll.upsert_many(&all).batch_size(BATCH).await.unwrap();
                assert!(r.failures.is_empty(), "{:?}", r.failures);
                assert_eq!(r.inserted + r.updated + r.unchanged, all.len() as u64);
            }
        }
    };
    let open = |k: usize| {
        let db = db.clone();
        async move {
            let coll = Collection::<Post>::open(&db, &format!("posts_{k}"))
                .await
                .unwrap();
            let (all, before) = posts(k);
            coll.upsert_many(&before).await.unwrap();
            (coll, all)
        }
    };
    // Calibrate: one whole call.
    let (coll, all) = open(99_999).await;
    let t = Instant::now();
    write(coll, all).await;
    let window = t.elapsed().mul_f64(0.9);

    let mut rng = seed;
    let mut landed: BTreeMap<&'static str, usize> = BTreeMap::new();
    for k in 0..cancels() {
        let (coll, all) = open(k).await;
        let delay = window.mul_f64((support::child::next(&mut rng) % 10_000) as f64 / 10_000.0);
        let at = match tokio::time::timeout(delay, write(coll.clone(), all.clone())).await {
            Ok(()) => "after the end",
            Err(_) => flight.now(),
        };
        *landed.entry(at).or_default() += 1;
        // What the drop left: only documents natural-key reads right.
        assert_well_formed(&db, k).await;
        write(coll, all.clone()).await;
        assert_posts_exact(&db, k, &all).await;
    }
    eprintln!(
        "{kind:?}: {} drops within {window:?}, landed {landed:?}",
        cancels()
    );
    landed
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_upsert_leaves_nothing_to_misread() {
    let landed = cancel_upserts(Kind::Upsert, 0xC0FFEE).await;
    assert!(
        landed.len() > 1,
        "every drop landed in one place: {landed:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_upsert_many_leaves_nothing_to_misread() {
    let landed = cancel_upserts(Kind::UpsertMany, 0xBADC0DE).await;
    assert!(
        landed.len() > 1,
        "every drop landed in one place: {landed:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_insert_many_leaves_nothing_to_misread() {
    let (db, flight) = database("insert_many").await;
    let events = |k: usize| -> Vec<Delivery> {
        (0..CALL)
            .map(|i| Delivery {
                id: Ulid::from_parts(1_700_000_000_000 + k as u64, i as u128 + 1),
                request: format!("c{k:05}-{i:02}"),
            })
            .collect()
    };
    let write = |coll: Collection<Delivery>, all: Vec<Delivery>| async move {
        let r = coll.insert_many(&all).batch_size(BATCH).await.unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.inserted + r.already_applied, all.len() as u64);
    };
    let open = |k: usize| {
        let db = db.clone();
        async move {
            Collection::<Delivery>::open(&db, &format!("deliveries_{k}"))
                .await
                .unwrap()
        }
    };
    let coll = open(99_999).await;
    let t = Instant::now();
    write(coll, events(99_999)).await;
    let window = t.elapsed().mul_f64(0.9);

    let mut rng = 0x1CE;
    let mut landed: BTreeMap<&'static str, usize> = BTreeMap::new();
    for k in 0..cancels() {
        let (coll, all) = (open(k).await, events(k));
        let delay = window.mul_f64((support::child::next(&mut rng) % 10_000) as f64 / 10_000.0);
        let at = match tokio::time::timeout(delay, write(coll.clone(), all.clone())).await {
            Ok(_) => "after the end",
            Err(_) => flight.now(),
        };
        *landed.entry(at).or_default() += 1;
        // The rerun is another call: what the dropped one stored counts as already applied.
        write(coll, all.clone()).await;
        let mut got: Vec<Delivery> = stored(&db, &format!("deliveries_{k}"))
            .await
            .iter()
            .map(|d| natural_key::bson::from_document(d.clone()).unwrap())
            .collect();
        got.sort_by(|a, b| a.request.cmp(&b.request));
        assert_eq!(got, all, "call {k}");
    }
    eprintln!(
        "insert_many: {} drops within {window:?}, landed {landed:?}",
        cancels()
    );
    assert!(
        landed.len() > 1,
        "every drop landed in one place: {landed:?}"
    );
}
