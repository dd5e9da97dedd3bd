//! Adopt and rekey killed (SIGKILL) at random points, then run again: the final state is exact
//! — one document per identity, under its derived id, with the chosen content and every old id
//! in `_nk_legacy_ids` — nothing lost, nothing doubled.
//!
//! CI-sized by default; `NK_KILLS=20 NK_KILL_POSTS=5000 NK_KILL_REKEYS=300` for the full size.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use natural_key::bson::{doc, oid::ObjectId, Bson, Document};
use natural_key::prelude::*;
use natural_key::{Collection, LEGACY_IDS_FIELD};
use support::child::Kill;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
    edited_at: i64,
}

/// The expected end state of one identity: its content and every old id.
type Expected = BTreeMap<String, (Post, BTreeSet<String>)>;

/// Legacy copies (1 to 3 per post, identical), forks (two differing copies: the newer edit must
/// win), and natural-key documents whose timestamp other code edited.
async fn seed(db: &natural_key::mongodb::Database, posts: usize) -> Expected {
    let raw = db.collection::<Document>("posts");
    Collection::<Post>::open(db, "posts").await.unwrap();
    let mut expected = Expected::new();
    let mut docs = Vec::new();
    for i in 0..posts {
        let p = Post {
            slug: format!("post-{i:05}"),
            published_at: 1_700_000_000_000 + i as i64,
            body: format!("body {i}"),
            edited_at: 0,
        };
        let mut ids = BTreeSet::new();
        match i % 10 {
            0 => {
                // A fork: the first copy, then an edit retried under a new id.
                let newer = Post {
                    body: format!("edited {i}"),
                    edited_at: 1,
                    ..p.clone()
                };
                for (copy, id) in [(&p, oid()), (&newer, oid())] {
                    ids.insert(id.to_string());
                    docs.push(legacy(copy, id));
                }
                expected.insert(p.slug.clone(), (newer, ids));
                continue;
            }
            1 => {
                // Written by natural-key, then its timestamp edited by other code: stored as
                // the original was, with the edited timestamp.
                let moved = Post {
                    published_at: 1_600_000_000_000 + i as i64,
                    ..p.clone()
                };
                let id = p.id().unwrap().to_string();
                let mut d = legacy(&moved, Bson::String(id.clone()));
                d.insert("_nk_identity", p.identity().unwrap().to_string());
                d.insert("_nk_hash", p.content_hash().unwrap().to_string());
                docs.push(d);
                ids.insert(id);
                expected.insert(p.slug.clone(), (moved, ids));
                continue;
            }
            _ => {}
        }
        for _ in 0..1 + i % 3 {
            let id = oid();
            ids.insert(id.to_string());
            docs.push(legacy(&p, id));
        }
        expected.insert(p.slug.clone(), (p, ids));
    }
    for chunk in docs.chunks(1000) {
        raw.insert_many(chunk.to_vec()).await.unwrap();
    }
    expected
}

fn oid() -> Bson {
    Bson::ObjectId(ObjectId::new())
}

fn legacy(p: &Post, id: Bson) -> Document {
    let mut d = natural_key::bson::to_document(p).unwrap();
    d.insert("_id", id);
    d
}

fn text(id: &Bson) -> String {
    match id {
        Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every document: one per identity, at its derived id, as expected.
async fn assert_exact(db: &natural_key::mongodb::Database, expected: &Expected) {
    let all = support::all_documents(&db.collection::<Document>("posts")).await;
    assert_eq!(all.len(), expected.len(), "one document per identity");
    for d in all {
        let post: Post = natural_key::bson::from_document(d.clone()).unwrap();
        let (want, old) = &expected[&post.slug];
        assert_eq!(&post, want);
        assert_eq!(d.get_str("_id").unwrap(), want.id().unwrap().to_string());
        let legacy: BTreeSet<String> = d
            .get_array(LEGACY_IDS_FIELD)
            .unwrap()
            .iter()
            .map(text)
            .collect();
        assert_eq!(&legacy, old, "{}", post.slug);
        assert_eq!(
            d.get_str("_nk_hash").unwrap(),
            want.content_hash().unwrap().to_string()
        );
    }
}

/// Where a kill landed, read from the collection afterwards.
async fn phase(db: &natural_key::mongodb::Database, before: u64) -> &'static str {
    let raw = db.collection::<Document>("posts");
    let homes = raw
        .count_documents(doc! {LEGACY_IDS_FIELD: {"$exists": true}})
        .await
        .unwrap();
    let total = raw.count_documents(doc! {}).await.unwrap();
    if homes == 0 && total == before {
        "before any write"
    } else if total < before
        && raw
            .count_documents(doc! {"_nk_identity": {"$exists": false}})
            .await
            .unwrap()
            == 0
    {
        "after the last write"
    } else {
        "mid-way"
    }
}

/// A kill point in the last three quarters of a full run's time: the first quarter is
/// mostly the child's start and the scans, which write nothing.
fn kill_point(full: Duration, rng: &mut u64) -> Duration {
    full.mul_f64(0.25 + 0.75 * (support::child::next(rng) % 1000) as f64 / 1000.0)
}

fn newest(c: &[natural_key::Candidate<Post>]) -> Option<usize> {
    (0..c.len()).max_by_key(|&i| c[i].doc.edited_at)
}

#[tokio::test]
async fn adopt_killed_anywhere_then_rerun_ends_exact() {
    const TEST: &str = "adopt_killed_anywhere_then_rerun_ends_exact";
    if std::env::var("NK_CHILD_ADOPT").is_ok() {
        let (db, _) = support::database_existing("adopt_kills").await;
        let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
        println!("CHILD-READY");
        posts.adopt().on_conflict(newest).await.unwrap();
        return;
    }
    let (kills, size) = (
        support::env_or("NK_KILLS", 8),
        support::env_or("NK_KILL_POSTS", 400),
    );
    // Calibrate: how long one adopt of this size takes here, in a child like the others.
    let (db, _) = support::database("adopt_kills").await;
    let expected = seed(&db, size).await;
    let started = Instant::now();
    support::child::run(TEST, "NK_CHILD_ADOPT", Kill::Never);
    let full = started.elapsed();
    assert_exact(&db, &expected).await;

    let mut rng = 0x5eed_u64;
    let mut phases: BTreeMap<&str, usize> = BTreeMap::new();
    for k in 0..kills {
        let (db, _) = support::database("adopt_kills").await;
        let expected = seed(&db, size).await;
        let before = db
            .collection::<Document>("posts")
            .count_documents(doc! {})
            .await
            .unwrap();
        let delay = kill_point(full, &mut rng);
        support::child::run(TEST, "NK_CHILD_ADOPT", Kill::After(delay));
        let landed = phase(&db, before).await;
        *phases.entry(landed).or_default() += 1;
        let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
        let mut r = posts.adopt().on_conflict(newest).await.unwrap();
        if !r.failures.is_empty() {
            // The engine finishes a command it received from the killed child: one that lands
            // after this run's scan is a concurrent change, reported as one, which the next run
            // finishes (`AdoptReport::failures`). Nothing else may fail, and only once.
            let late = r
                .failures
                .iter()
                .all(|(_, e)| matches!(e, natural_key::Error::ConcurrentChange { .. }));
            assert!(late, "kill {k} ({landed}): {:?}", r.failures);
            *phases.entry("written after the rerun's scan").or_default() += 1;
            r = posts.adopt().on_conflict(newest).await.unwrap();
        }
        assert!(
            r.failures.is_empty(),
            "kill {k} ({landed}): {:?}",
            r.failures
        );
        assert_exact(&db, &expected).await;
        assert!(posts.audit().await.unwrap().is_clean());
    }
    eprintln!("adopt ({size} posts, a full run {full:?}): kills landed {phases:?}");
    // Timing decides where a kill lands; only the full size has kills enough to insist.
    assert!(
        phases.get("mid-way").copied().unwrap_or(0) > 0 || kills < 10,
        "no kill landed mid-way: {phases:?}"
    );
}

#[tokio::test]
async fn rekey_killed_anywhere_then_rerun_ends_exact() {
    const TEST: &str = "rekey_killed_anywhere_then_rerun_ends_exact";
    let size = support::env_or("NK_KILL_REKEYS", 60);
    let wrong = |i: usize| Post {
        slug: format!("post-{i:04}"),
        published_at: 1_700_000_000_000 + i as i64,
        body: "b".into(),
        edited_at: 0,
    };
    let right = |i: usize| Post {
        published_at: 1_600_000_000_000 + i as i64,
        ..wrong(i)
    };
    if std::env::var("NK_CHILD_REKEY").is_ok() {
        let (db, _) = support::database_existing("rekey_kills").await;
        let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
        println!("CHILD-READY");
        for i in 0..size {
            posts.rekey(&right(i)).await.unwrap();
        }
        return;
    }
    let kills = support::env_or("NK_KILLS", 8);
    let seed = |db: natural_key::mongodb::Database| async move {
        let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
        let all: Vec<Post> = (0..size).map(wrong).collect();
        posts.upsert_many(&all).await.unwrap();
        posts
    };
    let (db, _) = support::database("rekey_kills").await;
    seed(db.clone()).await;
    let started = Instant::now();
    support::child::run(TEST, "NK_CHILD_REKEY", Kill::Never);
    let full = started.elapsed();

    let mut rng = 0x4e4b_u64;
    let mut moved_by_child = Vec::new();
    for _ in 0..kills {
        let (db, _) = support::database("rekey_kills").await;
        let posts = seed(db.clone()).await;
        let delay = kill_point(full, &mut rng);
        support::child::run(TEST, "NK_CHILD_REKEY", Kill::After(delay));
        let done = db
            .collection::<Document>("posts")
            .count_documents(doc! {LEGACY_IDS_FIELD: {"$exists": true}})
            .await
            .unwrap();
        moved_by_child.push(done);
        for i in 0..size {
            let outcome = posts.rekey(&right(i)).await.unwrap();
            assert_eq!(
                outcome,
                natural_key::RekeyOutcome::Moved {
                    from: wrong(i).id().unwrap().to_string(),
                    to: right(i).id().unwrap(),
                },
                "the rerun reports the same move"
            );
        }
        let expected: Expected = (0..size)
            .map(|i| {
                let old = BTreeSet::from([wrong(i).id().unwrap().to_string()]);
                (right(i).slug.clone(), (right(i), old))
            })
            .collect();
        assert_exact(&db, &expected).await;
    }
    eprintln!(
        "rekey ({size} documents, a full run {full:?}): moved before the kill {moved_by_child:?}"
    );
    assert!(
        moved_by_child.iter().any(|&m| m > 0 && (m as usize) < size) || kills < 10,
        "no kill landed mid-way: {moved_by_child:?}"
    );
}
