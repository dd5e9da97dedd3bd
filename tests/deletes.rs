//! Deletes by key: only the document whose derived `_id` and identity both match is deleted;
//! outcomes exact where a reply says so, `Gone` (never a false `NotFound`) where a lost reply
//! hides who deleted it; a delete racing an upsert of the same key ends in one of the two
//! orders, never a fork; racing deleters delete each document once.

mod support;

use std::sync::Arc;

use natural_key::bson::{doc, Document};
use natural_key::mongodb::Database;
use natural_key::prelude::*;
use natural_key::{Collection, DeleteOutcome, Error, RetryPolicy};
use support::proxy::{self, Faults, Proxy};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

fn posts(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("del-{i:05}"),
            published_at: 1_700_000_000_000 + i as i64,
            body: format!("body {i}"),
        })
        .collect()
}

async fn count(db: &Database) -> u64 {
    db.collection::<Document>("posts")
        .count_documents(doc! {})
        .await
        .unwrap()
}

#[tokio::test]
async fn a_delete_is_deleted_then_not_found_and_touches_nothing_else() {
    let (db, _) = support::database("deletes_single").await;
    let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
    let all = posts(3);
    coll.upsert_many(&all).await.unwrap();
    let id = all[1].id().unwrap();
    assert_eq!(
        coll.delete(&all[1]).await.unwrap(),
        DeleteOutcome::Deleted(id)
    );
    assert_eq!(
        coll.delete(&all[1]).await.unwrap(),
        DeleteOutcome::NotFound(id)
    );
    assert_eq!(count(&db).await, 2);
    // The body does not matter: the key does.
    let mut edited = all[0].clone();
    edited.body = "another body".into();
    assert!(matches!(
        coll.delete(&edited).await.unwrap(),
        DeleteOutcome::Deleted(_)
    ));
    assert_eq!(
        coll.get(all[2].id().unwrap()).await.unwrap(),
        Some(all[2].clone())
    );
}

/// A changed timestamp key derives another id: the stored document of that identity is not
/// this one, and deleting it by the new id would leave the old one; refused, nothing deleted.
#[tokio::test]
async fn a_delete_under_an_edited_timestamp_key_is_refused() {
    let (db, _) = support::database("deletes_fork").await;
    let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
    let all = posts(1);
    coll.upsert(&all[0]).await.unwrap();
    let mut moved = all[0].clone();
    moved.published_at += 1;
    let e = coll.delete(&moved).await.unwrap_err();
    assert!(matches!(e, Error::ImmutableKeyChanged { .. }), "{e}");
    assert_eq!(count(&db).await, 1);
}

#[tokio::test]
async fn delete_many_counts_deleted_and_not_found_exactly() {
    let (db, _) = support::database("deletes_many").await;
    let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
    let all = posts(300);
    let stored: Vec<Post> = all.iter().step_by(3).cloned().collect();
    coll.upsert_many(&stored).await.unwrap();
    let r = coll.delete_many(&all).batch_size(64).await.unwrap();
    assert_eq!(
        (r.deleted, r.not_found, r.gone, r.failures.len()),
        (100, 200, 0, 0),
        "{r:?}"
    );
    assert_eq!(count(&db).await, 0);
}

/// Through a proxy that loses 30% of write replies after the engine applied them: with a
/// policy, every stored document ends `Deleted` or `Gone`, never `NotFound`; every one that was
/// never stored ends `NotFound`; nothing is left.
#[tokio::test]
async fn lost_replies_never_turn_a_delete_into_not_found() {
    let (db, _) = support::database("deletes_lost").await;
    let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
    let all = posts(400);
    coll.upsert_many(&all[..200]).await.unwrap();
    let faults = Faults {
        drop_reply_after_apply: 0.3,
        ..Faults::none()
    };
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), faults, 71).await;
    let via = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(db.name());
    let through = Collection::<Post>::open(&via, "posts").await.unwrap();
    let mut outcomes = Vec::new();
    for chunk in all.chunks(10) {
        for p in chunk {
            let o = through
                .delete(p)
                .retry(RetryPolicy::default())
                .await
                .unwrap();
            outcomes.push(o);
        }
    }
    let r = through
        .delete_many(&all)
        .batch_size(50)
        .retry(RetryPolicy::default())
        .await
        .unwrap();
    let stats = proxy.stats();
    for (i, o) in outcomes.iter().enumerate() {
        match (i < 200, o) {
            (true, DeleteOutcome::Deleted(_) | DeleteOutcome::Gone(_)) => {}
            (false, DeleteOutcome::NotFound(_)) => {}
            _ => panic!("post {i}: {o}"),
        }
    }
    let gone = outcomes
        .iter()
        .filter(|o| matches!(o, DeleteOutcome::Gone(_)))
        .count();
    assert!(stats.faults() > 0, "the proxy lost replies");
    assert_eq!((r.not_found, r.deleted, r.gone), (400, 0, 0), "{r:?}");
    assert_eq!(count(&db).await, 0);
    println!(
        "DELETES lost replies: 200 stored, {} faults; {} Deleted, {gone} Gone, 200 NotFound",
        stats.faults(),
        200 - gone
    );
}

/// Four deleters racing over the same documents: every document deleted once. A deleter's
/// command whose `n` falls short (another deleter took some of its documents first) cannot say
/// which it deleted: those are `Gone`. So the `Deleted` of all deleters never count a document
/// twice, and with the `Gone` they cover every one.
#[tokio::test(flavor = "multi_thread")]
async fn racing_deleters_delete_each_document_once() {
    let (db, _) = support::database("deletes_race").await;
    let coll = Arc::new(Collection::<Post>::open(&db, "posts").await.unwrap());
    let all = Arc::new(posts(400));
    coll.upsert_many(all.iter()).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let (coll, all) = (coll.clone(), all.clone());
        tasks.push(tokio::spawn(async move {
            // Each in its own order, in batches of its own size.
            let mut mine: Vec<Post> = all.to_vec();
            mine.rotate_left(w * 100);
            coll.delete_many(&mine)
                .batch_size(17 + w * 13)
                .retry(RetryPolicy::default())
                .await
                .unwrap()
        }));
    }
    let (mut deleted, mut gone, mut not_found) = (0, 0, 0);
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.failures.len(), 0, "{r:?}");
        assert_eq!(r.processed(), 400, "{r:?}");
        deleted += r.deleted;
        gone += r.gone;
        not_found += r.not_found;
    }
    assert!(
        deleted <= 400 && deleted + gone >= 400,
        "{deleted} deleted, {gone} gone"
    );
    assert_eq!(deleted + gone + not_found, 1600);
    assert_eq!(count(&db).await, 0);
    println!("DELETES racing deleters: 400 documents, 4 deleters: {deleted} Deleted, {gone} Gone, {not_found} NotFound");
}

/// A delete racing an upsert of the same document: whichever order the engine applies them
/// in, at most one document holds the identity, under its derived id, and the outcomes say
/// which order it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_racing_an_upsert_ends_in_one_order_never_a_fork() {
    let (db, _) = support::database("deletes_upsert_race").await;
    let coll = Arc::new(Collection::<Post>::open(&db, "posts").await.unwrap());
    let all = posts(50);
    let raw = db.collection::<Document>("posts");
    let (mut present, mut absent) = (0, 0);
    let rounds = support::env_or("NK_DELETE_ROUNDS", 8);
    for round in 0..rounds {
        coll.upsert_many(&all).await.unwrap();
        let edited: Vec<Post> = all
            .iter()
            .map(|p| Post {
                body: format!("{} round {round}", p.body),
                ..p.clone()
            })
            .collect();
        let (a, b) = (coll.clone(), coll.clone());
        let del = all.clone();
        let deleter = tokio::spawn(async move {
            a.delete_many(&del)
                .batch_size(7)
                .retry(RetryPolicy::default())
                .await
                .unwrap()
        });
        let upserter = tokio::spawn(async move {
            b.upsert_many(&edited)
                .batch_size(5)
                .retry(RetryPolicy::default())
                .await
                .unwrap()
        });
        let (d, u) = (deleter.await.unwrap(), upserter.await.unwrap());
        assert_eq!((d.failures.len(), u.failures.len()), (0, 0), "{d:?} {u:?}");
        let docs = support::all_documents(&raw).await;
        for p in &all {
            let stored: Vec<&Document> = docs
                .iter()
                .filter(|d| d.get_str("slug") == Ok(p.slug.as_str()))
                .collect();
            assert!(stored.len() <= 1, "a fork: {stored:?}");
            match stored.first() {
                Some(d) => {
                    assert_eq!(d.get_str("_id").unwrap(), p.id().unwrap().to_string());
                    present += 1;
                }
                None => absent += 1,
            }
        }
        // Every post was stored when the deleter read it (an upsert never removes one): each
        // is deleted (`Gone` where the upsert stored it again before the deleter's next read
        // could count what its command deleted; that read then deletes it again). A post is
        // stored at the end only if the upsert inserted it again after a delete.
        assert_eq!(d.deleted + d.gone, all.len() as u64, "{d:?}");
        assert_eq!(d.not_found, 0, "{d:?}");
        assert!(docs.len() as u64 <= u.inserted, "{d:?} {u:?}");
    }
    println!(
        "DELETES racing upserts: {rounds} rounds of 50: {present} ended stored, {absent} deleted"
    );
}
