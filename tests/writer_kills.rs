//! The writer process dies: a child streams posts through `upsert_stream` (or inserts events
//! through `insert_stream`) and is SIGKILLed at a seeded random moment; the input is then run
//! to completion. The end state is exact — one document per identity (per event), under its
//! derived id, `_nk_hash` the content hash of the stored body, nothing half-written, nothing
//! lost — and the rerun's own outcomes account for every input.
//!
//! The child prints every command it starts and every reply it gets; after the kill, the last
//! of those lines says where the kill landed (during a read, an insert, an update, or between
//! commands). CI-sized by default; full size:
//!
//! ```text
//! NK_KILLS=20 NK_KILL_DOCS=20000 cargo test --release --test writer_kills -- --nocapture
//! ```

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use natural_key::bson::{doc, Document};
use natural_key::mongodb::event::command::CommandEvent;
use natural_key::mongodb::event::EventHandler;
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::{Client, Database};
use natural_key::prelude::*;
use natural_key::{Collection, HASH_FIELD, IDENTITY_FIELD};
use support::child::Kill;

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
    amount_cents: i64,
}

fn docs_n() -> usize {
    support::env_or("NK_KILL_DOCS", 1_000)
}

fn kills() -> usize {
    support::env_or("NK_KILLS", 8)
}

/// Documents per batch: small enough that a run is many read / insert / update rounds.
fn batch() -> usize {
    (docs_n() / 20).max(10)
}

/// The input: every third post new, every third stored as a draft (an update), every third
/// stored as it is (unchanged) — so each batch reads, inserts and updates.
fn posts() -> Vec<Post> {
    (0..docs_n())
        .map(|i| Post {
            slug: format!("post-{i:06}"),
            published_at: 1_700_000_000_000 + i as i64,
            body: format!("body {i}"),
        })
        .collect()
}

fn stored_before(all: &[Post]) -> Vec<Post> {
    all.iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(i, p)| match i % 3 {
            1 => Post {
                body: format!("draft {i}"),
                ..p.clone()
            },
            _ => p.clone(),
        })
        .collect()
}

/// Event ids are created once, so the input must be the same in the child and the rerun.
fn events() -> Vec<Delivery> {
    (0..docs_n())
        .map(|i| Delivery {
            id: Ulid::from_parts(1_700_000_000_000 + i as u64, 0xE7E7_0000 + i as u128),
            request: format!("req-{i:06}"),
            amount_cents: 100 + i as i64,
        })
        .collect()
}

/// A client whose every command start and reply is a line on stdout, flushed as it happens
/// (stdout is line-buffered): what the parent reads back after the kill.
async fn traced_database(name: &str) -> Database {
    let mut opts = ClientOptions::parse(support::uri()).await.unwrap();
    opts.retry_writes = Some(false);
    let t0 = Instant::now();
    opts.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
        let ms = t0.elapsed().as_millis();
        match ev {
            CommandEvent::Started(s) => println!("CMD started {} {ms}", s.command_name),
            CommandEvent::Succeeded(s) => println!("CMD ended {} {ms}", s.command_name),
            CommandEvent::Failed(s) => println!("CMD ended {} {ms}", s.command_name),
            _ => {}
        }
    }));
    Client::with_options(opts)
        .unwrap()
        .database(&support::database_name(name))
}

/// Where the kill landed, from the child's last command line.
fn landed(lines: &[String]) -> &'static str {
    let last = lines.iter().rev().find(|l| l.starts_with("CMD "));
    match last.map(|l| l.split_whitespace().collect::<Vec<_>>()) {
        Some(w) if w[1] == "started" => match w[2] {
            "find" | "getMore" => "during a read",
            "insert" => "during an insert",
            "update" => "during an update",
            _ => "during another command",
        },
        Some(_) => "between commands",
        None => "before any command",
    }
}

/// Milliseconds a run spent waiting on each command, from its lines: where kills can land.
fn time_in_commands(lines: &[String]) -> BTreeMap<String, u128> {
    let mut started: HashMap<String, u128> = HashMap::new();
    let mut spent: BTreeMap<String, u128> = BTreeMap::new();
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        let ["CMD", what, name, ms] = w[..] else {
            continue;
        };
        let ms: u128 = ms.parse().unwrap();
        match what {
            "started" => {
                started.insert(name.to_string(), ms);
            }
            _ => {
                if let Some(s) = started.remove(name) {
                    *spent.entry(name.to_string()).or_default() += ms - s;
                }
            }
        }
    }
    spent
}

async fn all_docs(db: &Database, coll: &str) -> Vec<Document> {
    db.collection::<Document>(coll)
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// One document per post, under its id, with its body, identity and the hash of that body.
async fn assert_posts_exact(db: &Database, expected: &[Post]) {
    let by_slug: HashMap<&str, &Post> = expected.iter().map(|p| (p.slug.as_str(), p)).collect();
    let all = all_docs(db, "posts").await;
    assert_eq!(all.len(), expected.len(), "one document per identity");
    let mut seen = std::collections::HashSet::new();
    for d in all {
        let stored: Post = natural_key::bson::from_document(d.clone())
            .unwrap_or_else(|e| panic!("a half-written document {d}: {e}"));
        assert!(seen.insert(stored.slug.clone()), "{} twice", stored.slug);
        let want = by_slug[stored.slug.as_str()];
        assert_eq!(&stored, want);
        assert_eq!(d.get_str("_id").unwrap(), want.id().unwrap().to_string());
        assert_eq!(
            d.get_str(IDENTITY_FIELD).unwrap(),
            want.identity().unwrap().to_string()
        );
        // The stored hash is the hash of the stored body, not merely of the input.
        assert_eq!(
            d.get_str(HASH_FIELD).unwrap(),
            stored.content_hash().unwrap().to_string(),
            "{d}"
        );
    }
}

async fn assert_events_exact(db: &Database, expected: &[Delivery]) {
    let by_id: HashMap<String, &Delivery> =
        expected.iter().map(|e| (e.id.to_string(), e)).collect();
    let all = all_docs(db, "deliveries").await;
    assert_eq!(all.len(), expected.len(), "one document per event");
    let mut seen = std::collections::HashSet::new();
    for d in all {
        let stored: Delivery = natural_key::bson::from_document(d.clone())
            .unwrap_or_else(|e| panic!("a half-written event {d}: {e}"));
        let id = d.get_str("_id").unwrap().to_string();
        assert!(seen.insert(id.clone()), "{id} twice");
        assert_eq!(&stored, by_id[&id]);
    }
}

/// Kill `k` of a series: in turn at a random moment of a full run, and at the start of a read,
/// an insert and an update — the how-manieth one drawn from those a full run sends — so every
/// phase is hit however little of a run it takes.
fn kill_point(k: usize, full: Duration, sent: &HashMap<String, usize>, rng: &mut u64) -> Kill {
    let r = support::child::next(rng);
    let command = ["find", "insert", "update"][k % 3];
    match sent.get(command).copied().unwrap_or(0) {
        n if n > 0 && k % 4 != 3 => Kill::OnCommand(command, 1 + (r as usize) % n),
        _ => Kill::After(full.mul_f64((r % 1000) as f64 / 1000.0)),
    }
}

/// Commands started in a run, by name.
fn commands_sent(lines: &[String]) -> HashMap<String, usize> {
    let mut sent = HashMap::new();
    for l in lines {
        if let Some(rest) = l.strip_prefix("CMD started ") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            *sent.entry(name.to_string()).or_default() += 1;
        }
    }
    sent
}

/// The parent side of both tests: calibrate, then kill `kills()` children and finish each
/// input in this process; returns where the kills landed.
async fn kill_and_finish<F, R, C>(
    test: &str,
    name: &str,
    var: &str,
    seed: u64,
    reset: F,
    finish: R,
    check: C,
) -> BTreeMap<&'static str, usize>
where
    F: AsyncFn(&Database),
    R: AsyncFn(&Database),
    C: AsyncFn(&Database),
{
    let (db, _) = support::database(name).await;
    reset(&db).await;
    let started = Instant::now();
    let (_, lines) = support::child::run(test, var, Kill::Never);
    let full = started.elapsed();
    let sent = commands_sent(&lines);
    check(&db).await;
    eprintln!(
        "{test}: a full run waits on commands (ms) {:?}",
        time_in_commands(&lines)
    );

    let mut rng = seed;
    let mut phases: BTreeMap<&'static str, usize> = BTreeMap::new();
    for k in 0..kills() {
        let (db, _) = support::database(name).await;
        reset(&db).await;
        let kill = kill_point(k, full, &sent, &mut rng);
        let (killed, lines) = support::child::run(test, var, kill);
        let at = if killed {
            landed(&lines)
        } else {
            "after the end"
        };
        *phases.entry(at).or_default() += 1;
        finish(&db).await;
        check(&db).await;
    }
    eprintln!(
        "{test}: {} documents, batches of {}, a full run {full:?}; {} kills landed {phases:?}",
        docs_n(),
        batch(),
        kills()
    );
    phases
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_stream_killed_anywhere_then_rerun_ends_exact() {
    const TEST: &str = "upsert_stream_killed_anywhere_then_rerun_ends_exact";
    let all = posts();
    if std::env::var("NK_CHILD_UPSERT").is_ok() {
        let db = traced_database("upserts").await;
        let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
        println!("CHILD-READY");
        coll.upsert_stream(futures::stream::iter(&all))
            .batch_size(batch())
            .await
            .unwrap();
        return;
    }
    let reset = async |db: &Database| {
        let coll = Collection::<Post>::open(db, "posts").await.unwrap();
        coll.upsert_many(&stored_before(&all)).await.unwrap();
    };
    let finish = async |db: &Database| {
        let coll = Collection::<Post>::open(db, "posts").await.unwrap();
        let r = coll
            .upsert_stream(futures::stream::iter(&all))
            .batch_size(batch())
            .await
            .unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.inserted + r.updated + r.unchanged, all.len() as u64);
    };
    let check = async |db: &Database| assert_posts_exact(db, &all).await;
    let phases = kill_and_finish(
        TEST,
        "upserts",
        "NK_CHILD_UPSERT",
        0x0057_4e4b,
        reset,
        finish,
        check,
    )
    .await;
    // A kill aimed at a command can lose the race with its reply: only the full size has
    // aims enough to insist.
    if kills() >= 20 {
        for p in ["during a read", "during an insert", "during an update"] {
            assert!(phases.contains_key(p), "no kill landed {p}: {phases:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn insert_stream_killed_anywhere_then_rerun_ends_exact() {
    const TEST: &str = "insert_stream_killed_anywhere_then_rerun_ends_exact";
    let all = events();
    if std::env::var("NK_CHILD_INSERT").is_ok() {
        let db = traced_database("inserts").await;
        let coll = Collection::<Delivery>::open(&db, "deliveries")
            .await
            .unwrap();
        println!("CHILD-READY");
        coll.insert_stream(futures::stream::iter(&all))
            .batch_size(batch())
            .await
            .unwrap();
        return;
    }
    let reset = async |db: &Database| {
        Collection::<Delivery>::open(db, "deliveries")
            .await
            .unwrap();
    };
    let finish = async |db: &Database| {
        let coll = Collection::<Delivery>::open(db, "deliveries")
            .await
            .unwrap();
        let r = coll
            .insert_stream(futures::stream::iter(&all))
            .batch_size(batch())
            .await
            .unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.inserted + r.already_applied, all.len() as u64);
    };
    let check = async |db: &Database| assert_events_exact(db, &all).await;
    let phases = kill_and_finish(
        TEST,
        "inserts",
        "NK_CHILD_INSERT",
        0xE7E7_4E4B,
        reset,
        finish,
        check,
    )
    .await;
    if kills() >= 20 {
        assert!(
            phases.contains_key("during an insert"),
            "no kill landed during an insert: {phases:?}"
        );
    }
}
