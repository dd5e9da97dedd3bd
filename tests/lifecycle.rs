//! The life of a collection: audit, adopt, rekey and prune on the real engine, against
//! collections that other code wrote the way the seed texts describe (random ids, duplicates
//! from retried writes, edited fields). Runs unchanged on each engine (`MONGODB_URI`).

mod support;

use natural_key::bson::{doc, oid::ObjectId, Bson, Document};
use natural_key::prelude::*;
use natural_key::{Collection, LEGACY_IDS_FIELD};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
    edited_at: i64,
}

fn post(slug: &str, body: &str) -> Post {
    Post {
        slug: slug.into(),
        lang: "en".into(),
        published_at: 1_700_000_000_000,
        body: body.into(),
        edited_at: 0,
    }
}

/// What the naive recipe stores: the post's fields under a fresh random id.
fn legacy(p: &Post, id: Bson) -> Document {
    let mut d = natural_key::bson::to_document(p).unwrap();
    d.insert("_id", id);
    d
}

fn oid() -> Bson {
    Bson::ObjectId(ObjectId::new())
}

fn random_ulid() -> Bson {
    Bson::String(Ulid::new().to_string())
}

/// Every stored document, sorted by `_id` text, for before/after comparisons.
/// A collection as years of the random-id recipe leave it, beside natural-key's own documents.
struct Seeded {
    raw: natural_key::mongodb::Collection<Document>,
    posts: Collection<Post>,
    commands: support::Commands,
    /// A legacy post written once, and its id.
    single: (Post, Bson),
    /// A post written three times with identical content (two lost acknowledgements).
    tripled: (Post, Vec<Bson>),
    /// A post written twice, the second time edited: differing content.
    forked: (Post, Post, Vec<Bson>),
    /// A natural-key document whose timestamp key other code edited.
    drifted: Post,
    /// A natural-key document whose body other code edited (stale hash).
    hash_drifted: Post,
    /// Clean documents.
    clean: Vec<Post>,
}

async fn seeded(test: &str) -> Seeded {
    let (db, commands) = support::database(test).await;
    let raw = db.collection::<Document>("posts");
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let clean: Vec<Post> = (0..5).map(|i| post(&format!("clean-{i}"), "ok")).collect();
    posts.upsert_many(&clean).await.unwrap();

    let single = (post("single", "one copy"), oid());
    let tripled = (
        post("tripled", "three copies"),
        vec![oid(), random_ulid(), oid()],
    );
    let mut edited = post("forked", "second, edited");
    edited.edited_at = 5;
    let forked = (post("forked", "first"), edited, vec![random_ulid(), oid()]);
    let mut docs = vec![legacy(&single.0, single.1.clone())];
    docs.extend(tripled.1.iter().map(|id| legacy(&tripled.0, id.clone())));
    docs.push(legacy(&forked.0, forked.2[0].clone()));
    docs.push(legacy(&forked.1, forked.2[1].clone()));
    // Not a post at all.
    docs.push(doc! {"_id": oid(), "title": "not a post"});
    raw.insert_many(docs).await.unwrap();

    let drifted = post("drifted", "moved in time");
    let id = posts.upsert(&drifted).await.unwrap().id();
    raw.update_one(
        doc! {"_id": id.to_string()},
        doc! {"$set": {"published_at": 1_600_000_000_000_i64}},
    )
    .await
    .unwrap();
    let drifted = Post {
        published_at: 1_600_000_000_000,
        ..drifted
    };
    let hash_drifted = post("hash-drifted", "original");
    let id = posts.upsert(&hash_drifted).await.unwrap().id();
    raw.update_one(
        doc! {"_id": id.to_string()},
        doc! {"$set": {"body": "edited by other code"}},
    )
    .await
    .unwrap();
    let hash_drifted = Post {
        body: "edited by other code".into(),
        ..hash_drifted
    };
    commands.reset();
    Seeded {
        raw,
        posts,
        commands,
        single,
        tripled,
        forked,
        drifted,
        hash_drifted,
        clean,
    }
}

#[tokio::test]
async fn audit_finds_every_kind_of_document_in_one_scan() {
    let s = seeded("audit").await;
    let report = s.posts.audit().await.unwrap();
    assert_eq!(report.scanned, 5 + 1 + 3 + 2 + 1 + 1 + 1, "{report}");
    assert_eq!(report.clean, 5, "{report}");
    assert_eq!(report.unreadable.count, 1, "{report}");
    assert!(report.first_unreadable.is_some());
    assert_eq!(
        report.legacy.count, 6,
        "single, three tripled, two forked: {report}"
    );
    assert_eq!(report.id_drift.count, 1, "{report}");
    assert_eq!(report.hash_drift.count, 1, "{report}");
    assert_eq!(report.duplicates_identical.count, 1, "{report}");
    assert_eq!(report.duplicates_differing.count, 1, "{report}");
    assert_eq!(report.surplus_documents, 2 + 1, "{report}");
    assert!(!report.is_clean());
    assert!(report.legacy.sample.contains(&s.single.1));
    assert_eq!(
        report.id_drift.sample,
        [Bson::String(s.drifted.id_with_old_timestamp())]
    );
    let table = report.to_string();
    for row in [
        "legacy",
        "id drift",
        "duplicates, identical",
        "duplicates, differing",
    ] {
        assert!(table.contains(row), "{table}");
    }
    assert_eq!(s.commands.writes(), 0, "an audit writes nothing");
    // One scan: a find, and a getMore per further batch (here none).
    assert_eq!(s.commands.count("find"), 1);
}

trait OldId {
    fn id_with_old_timestamp(&self) -> String;
}

impl OldId for Post {
    fn id_with_old_timestamp(&self) -> String {
        Post {
            published_at: 1_700_000_000_000,
            ..self.clone()
        }
        .id()
        .unwrap()
        .to_string()
    }
}

#[tokio::test]
async fn adopt_moves_merges_and_leaves_conflicts_to_a_policy() {
    let s = seeded("adopt").await;
    let before = support::all_documents(&s.raw).await;

    // A dry run computes everything and sends no write.
    let plan = s.posts.adopt().dry_run().mapping().await.unwrap();
    assert!(plan.dry_run);
    assert_eq!(s.commands.writes(), 0);
    assert_eq!(
        support::all_documents(&s.raw).await,
        before,
        "a dry run changes nothing"
    );

    let done = s.posts.adopt().mapping().await.unwrap();
    assert!(done.failures.is_empty(), "{:?}", done.failures);
    assert_eq!(
        (done.adopted, done.merged, done.conflicts.count),
        (plan.adopted, plan.merged, plan.conflicts.count),
        "the dry run said what the run did"
    );
    // single, tripled and drifted now live under their derived ids; the forked pair is left.
    assert_eq!(done.adopted, 3);
    assert_eq!(
        done.merged,
        1 + 3 + 1,
        "old copies deleted: single, tripled, drifted"
    );
    assert_eq!(done.conflicts.count, 1);
    let stored = s
        .raw
        .find_one(doc! {"_id": s.single.0.id().unwrap().to_string()})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.get_array(LEGACY_IDS_FIELD).unwrap(),
        &vec![s.single.1.clone()]
    );
    let stored = s
        .raw
        .find_one(doc! {"_id": s.tripled.0.id().unwrap().to_string()})
        .await
        .unwrap()
        .unwrap();
    let mut legacy_ids = stored.get_array(LEGACY_IDS_FIELD).unwrap().clone();
    legacy_ids.sort_by_key(Bson::to_string);
    let mut want = s.tripled.1.clone();
    want.sort_by_key(Bson::to_string);
    assert_eq!(
        legacy_ids, want,
        "the three copies collapsed into one, all ids kept"
    );
    assert_eq!(
        s.posts.get(s.drifted.id().unwrap()).await.unwrap(),
        Some(s.drifted.clone())
    );
    for (old, new) in &done.mapping {
        assert!(
            s.raw
                .find_one(doc! {"_id": old.clone()})
                .await
                .unwrap()
                .is_none(),
            "{old} deleted"
        );
        assert!(s
            .raw
            .find_one(doc! {"_id": new.to_string()})
            .await
            .unwrap()
            .is_some());
    }

    let report = s.posts.audit().await.unwrap();
    assert_eq!(
        report.legacy.count, 2,
        "the forked pair is untouched: {report}"
    );
    assert_eq!(report.duplicates_differing.count, 1);
    assert_eq!(
        report.id_drift.count + report.duplicates_identical.count,
        0,
        "{report}"
    );
    assert_eq!(
        report.hash_drift.count, 1,
        "adopt does not touch hash drift"
    );
    assert_eq!(report.clean, 5 + 3, "{report}");

    // A policy resolves the fork: the newest edit wins.
    let resolved = s
        .posts
        .adopt()
        .on_conflict(|c| (0..c.len()).max_by_key(|&i| c[i].doc.edited_at))
        .await
        .unwrap();
    assert!(resolved.failures.is_empty(), "{:?}", resolved.failures);
    assert_eq!(
        (resolved.resolved, resolved.adopted, resolved.merged),
        (1, 1, 2)
    );
    let (_, newest, ids) = &s.forked;
    assert_eq!(
        s.posts.get(newest.id().unwrap()).await.unwrap().as_ref(),
        Some(newest)
    );
    let stored = s
        .raw
        .find_one(doc! {"_id": newest.id().unwrap().to_string()})
        .await
        .unwrap()
        .unwrap();
    let mut got = stored.get_array(LEGACY_IDS_FIELD).unwrap().clone();
    got.sort_by_key(Bson::to_string);
    let mut want = ids.clone();
    want.sort_by_key(Bson::to_string);
    assert_eq!(got, want);
    let report = s.posts.audit().await.unwrap();
    assert!(report.is_clean(), "{report}");

    // Nothing left to do: a second run sends no write, and the same posts upsert unchanged.
    s.commands.reset();
    let again = s.posts.adopt().await.unwrap();
    assert_eq!((again.adopted, again.merged), (0, 0));
    assert_eq!(s.commands.writes(), 0, "{:?}", s.commands.sequence());
    let all = [
        s.single.0.clone(),
        s.tripled.0.clone(),
        newest.clone(),
        s.drifted.clone(),
    ];
    let r = s.posts.upsert_many(&all).await.unwrap();
    assert_eq!(r.unchanged, 4, "{r:?}");
    assert_eq!(s.commands.writes(), 0);
    let _ = (&s.hash_drifted, &s.clean);
}

#[tokio::test]
async fn rekey_moves_a_document_to_its_corrected_id_once() {
    let (db, commands) = support::database("rekey").await;
    let raw = db.collection::<Document>("posts");
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let wrong = post("typo-date", "body");
    let old = posts.upsert(&wrong).await.unwrap().id();
    // Other code's field on the stored document survives the move.
    raw.update_one(doc! {"_id": old.to_string()}, doc! {"$set": {"views": 7}})
        .await
        .unwrap();
    let corrected = Post {
        published_at: 1_650_000_000_000,
        ..wrong.clone()
    };
    let new = corrected.id().unwrap();
    let e = posts.upsert(&corrected).await.unwrap_err();
    assert!(
        e.to_string().contains("rekey"),
        "the refusal points to rekey: {e}"
    );

    commands.reset();
    let plan = posts.rekey(&corrected).dry_run().await.unwrap();
    let moved = natural_key::RekeyOutcome::Moved {
        from: old.to_string(),
        to: new,
    };
    assert_eq!(plan, moved);
    assert_eq!(commands.writes(), 0, "a dry run writes nothing");

    assert_eq!(posts.rekey(&corrected).await.unwrap(), moved);
    assert_eq!(posts.get(new).await.unwrap(), Some(corrected.clone()));
    assert_eq!(posts.get(old).await.unwrap(), None);
    let stored = raw
        .find_one(doc! {"_id": new.to_string()})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.get_i32("views").unwrap(), 7);
    assert_eq!(
        stored.get_array(LEGACY_IDS_FIELD).unwrap(),
        &vec![Bson::String(old.to_string())]
    );
    // A retry after a lost acknowledgement reports the same move and writes nothing.
    commands.reset();
    assert_eq!(posts.rekey(&corrected).await.unwrap(), moved);
    assert_eq!(commands.writes(), 0);
    assert_eq!(
        posts.upsert(&corrected).await.unwrap(),
        UpsertOutcome::Unchanged(new)
    );
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
    assert!(posts.audit().await.unwrap().is_clean());

    // Never onto another identity's document.
    let a = post("a", "x");
    posts.upsert(&a).await.unwrap();
    let a_corrected = Post {
        published_at: 1_650_000_000_000,
        ..a.clone()
    };
    let taken = a_corrected.id().unwrap();
    raw.insert_one(doc! {"_id": taken.to_string(), "_nk_identity": "f".repeat(64)})
        .await
        .unwrap();
    let before = support::all_documents(&raw).await;
    let e = posts.rekey(&a_corrected).await.unwrap_err();
    assert!(
        matches!(e, natural_key::Error::RekeyTargetTaken { id, .. } if id == taken),
        "{e:?}"
    );
    assert_eq!(
        support::all_documents(&raw).await,
        before,
        "nothing written"
    );
    assert_eq!(
        posts.rekey(&post("nothing", "z")).await.unwrap(),
        natural_key::RekeyOutcome::NotFound
    );
}

#[tokio::test]
async fn prune_deletes_what_the_full_input_dropped_and_nothing_else() {
    let (db, commands) = support::database("prune").await;
    let raw = db.collection::<Document>("posts");
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let all: Vec<Post> = (0..20).map(|i| post(&format!("p{i}"), "b")).collect();
    posts.upsert_many(&all).await.unwrap();
    let legacy_id = oid();
    raw.insert_one(legacy(&post("legacy", "b"), legacy_id.clone()))
        .await
        .unwrap();

    // An unchanged full re-ingest prunes nothing and sends no write.
    commands.reset();
    let r = posts.upsert_many(&all).prune().await.unwrap();
    assert_eq!(
        (r.written.unchanged, r.pruned.deleted, r.pruned.stored),
        (20, 0, 20)
    );
    assert_eq!(commands.writes(), 0);

    // The source dropped two posts.
    let kept = &all[2..];
    let plan = posts.upsert_many(kept).prune().dry_run().await.unwrap();
    let dropped: Vec<String> = all[..2]
        .iter()
        .map(|p| p.id().unwrap().to_string())
        .collect();
    let mut ids = plan.pruned.ids.clone();
    ids.sort();
    let mut want = dropped.clone();
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(
        raw.count_documents(doc! {}).await.unwrap(),
        21,
        "a dry run deletes nothing"
    );

    // More than the allowed fraction is refused.
    let e = posts.upsert_many(&all[15..]).prune().await.unwrap_err();
    assert!(
        matches!(
            e.error,
            natural_key::Error::PruneRefused {
                would_delete: 15,
                stored: 20,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 21);

    let done = posts.upsert_many(kept).prune().await.unwrap();
    assert_eq!(done.pruned.deleted, 2);
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 19);
    assert!(
        raw.find_one(doc! {"_id": legacy_id})
            .await
            .unwrap()
            .is_some(),
        "legacy documents are never pruned"
    );

    // An input with a failed document prunes nothing.
    let mut bad = kept.to_vec();
    bad.push(Post {
        published_at: -1,
        ..post("bad", "b")
    });
    let e = posts
        .upsert_many(&bad[5..])
        .prune()
        .force()
        .await
        .unwrap_err();
    assert!(
        matches!(e.error, natural_key::Error::PruneSkipped { failed: 1, .. }),
        "{e:?}"
    );
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 19);
}

/// The upsert compares `_id` byte for byte, so a lowercase ULID text is another id: the audit
/// says so (id drift), and adopt moves the document to the id the upsert will look for.
#[tokio::test]
async fn a_lowercase_id_is_drift_not_clean() {
    let (db, _) = support::database("lowercase_id").await;
    let raw = db.collection::<Document>("posts");
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let p = post("lower", "b");
    let mut d = legacy(&p, Bson::String(p.id().unwrap().to_string().to_lowercase()));
    d.insert("_nk_identity", p.identity().unwrap().to_string());
    d.insert("_nk_hash", p.content_hash().unwrap().to_string());
    raw.insert_one(d).await.unwrap();
    let report = posts.audit().await.unwrap();
    assert_eq!((report.clean, report.id_drift.count), (0, 1), "{report}");
    let done = posts.adopt().await.unwrap();
    assert_eq!((done.adopted, done.merged), (1, 1));
    assert_eq!(posts.get(p.id().unwrap()).await.unwrap(), Some(p.clone()));
    assert_eq!(
        posts.upsert(&p).await.unwrap(),
        UpsertOutcome::Unchanged(p.id().unwrap())
    );
}
