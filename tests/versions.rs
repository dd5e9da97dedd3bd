//! Order-safe writes: with a version field, an older version never overwrites a newer one,
//! whatever order the writes arrive in and whichever replies are lost; a versioned delete
//! leaves a tombstone, so a late older write is stale instead of a resurrection, and a newer
//! one brings the document back.

mod support;

use std::sync::Arc;

use natural_key::bson::{doc, rawdoc, Bson, Document, RawDocumentBuf};
use natural_key::spec::{KeyField, KeyKind, KeySpec, SpecCollection, TimestampForm};
use natural_key::{BatchReport, Error, RetryPolicy, Scheme};
use support::proxy::{self, Faults, Proxy};

fn spec() -> KeySpec {
    KeySpec::new(Scheme::Default { namespace: "" }, "at")
        .key(KeyField::new("slug", KeyKind::Str))
        .version("rev", TimestampForm::Millis)
}

fn post(slug: &str, rev: i64, body: &str) -> RawDocumentBuf {
    rawdoc! { "slug": slug, "at": 1_700_000_000_000i64, "rev": rev, "body": body }
}

async fn write(coll: &SpecCollection, docs: Vec<RawDocumentBuf>) -> BatchReport {
    coll.upsert_many(docs).await.unwrap()
}

async fn delete(coll: &SpecCollection, docs: Vec<RawDocumentBuf>) -> BatchReport {
    coll.delete_many(docs).await.unwrap()
}

/// The one stored document (or tombstone) of `slug`, with every field.
async fn stored(db: &natural_key::mongodb::Database, slug: &str) -> Option<Document> {
    let id = spec().derive(&post(slug, 0, "")).unwrap().0.to_string();
    db.collection::<Document>("posts")
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
}

#[tokio::test]
async fn the_decision_table_on_the_engine() {
    let (db, _) = support::database("versions_table").await;
    let coll = spec().open(&db, "posts").await.unwrap();

    let r = write(&coll, vec![post("a", 2, "two")]).await;
    assert_eq!((r.inserted, r.stale), (1, 0));
    // Lower: stale, nothing written.
    let r = write(&coll, vec![post("a", 1, "one")]).await;
    assert_eq!((r.stale, r.updated, r.unchanged), (1, 0, 0));
    assert_eq!(stored(&db, "a").await.unwrap().get_str("body"), Ok("two"));
    // Equal, same content: unchanged; other content: a typed error, nothing written.
    let r = write(&coll, vec![post("a", 2, "two")]).await;
    assert_eq!((r.unchanged, r.stale), (1, 0));
    let r = write(&coll, vec![post("a", 2, "TWO")]).await;
    assert!(
        matches!(
            &r.failures[..],
            [(0, Error::VersionConflict { version: 2, .. })]
        ),
        "{r:?}"
    );
    assert_eq!(stored(&db, "a").await.unwrap().get_str("body"), Ok("two"));
    // Higher: written, with its version.
    let r = write(&coll, vec![post("a", 5, "five")]).await;
    assert_eq!(r.updated, 1);
    let d = stored(&db, "a").await.unwrap();
    assert_eq!(d.get_str("body"), Ok("five"));
    assert_eq!(d.get("_nk_version"), Some(&Bson::Int64(5)));

    // A document stored before the version was declared is older than any version.
    let plain = KeySpec::new(Scheme::Default { namespace: "" }, "at")
        .key(KeyField::new("slug", KeyKind::Str))
        .open(&db, "posts")
        .await
        .unwrap();
    plain
        .upsert_many(vec![
            rawdoc! { "slug": "b", "at": 1_700_000_000_000i64, "body": "old" },
        ])
        .await
        .unwrap();
    assert!(stored(&db, "b").await.unwrap().get("_nk_version").is_none());
    let r = write(&coll, vec![post("b", -3, "versioned")]).await;
    assert_eq!(r.updated, 1);
    assert_eq!(
        stored(&db, "b").await.unwrap().get("_nk_version"),
        Some(&Bson::Int64(-3))
    );
}

#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_only_a_newer_version_passes() {
    let (db, _) = support::database("versions_tombstones").await;
    let coll = spec().open(&db, "posts").await.unwrap();
    write(&coll, vec![post("a", 3, "three")]).await;

    // An older delete is stale; the delete at the stored version deletes.
    let r = delete(&coll, vec![post("a", 2, "")]).await;
    assert_eq!((r.stale, r.deleted), (1, 0));
    let r = delete(&coll, vec![post("a", 3, "")]).await;
    assert_eq!(r.deleted, 1, "{r:?}");
    let t = stored(&db, "a").await.unwrap();
    assert!(t.get_datetime("_nk_deleted").is_ok(), "{t}");
    assert_eq!(t.get("_nk_version"), Some(&Bson::Int64(3)));
    assert!(
        t.get("body").is_none() && t.get("_nk_hash").is_none(),
        "{t}"
    );

    // A late upsert at or below the deleted version does not bring it back.
    let r = write(&coll, vec![post("a", 3, "three"), post("a", 1, "one")]).await;
    assert_eq!(r.stale, 2, "{r:?}");
    assert!(stored(&db, "a").await.unwrap().get("_nk_deleted").is_some());
    // What the documented filter for live documents finds does not hold it.
    let id = spec().derive(&post("a", 0, "")).unwrap().0;
    assert!(db
        .collection::<Document>("posts")
        .find_one(doc! { "_id": id.to_string(), "_nk_deleted": null })
        .await
        .unwrap()
        .is_none());
    // Deleting again: not found; a newer delete raises the tombstone.
    let r = delete(&coll, vec![post("a", 3, "")]).await;
    assert_eq!(r.not_found, 1);
    let r = delete(&coll, vec![post("a", 4, "")]).await;
    assert_eq!(r.not_found, 1);
    assert_eq!(
        stored(&db, "a").await.unwrap().get("_nk_version"),
        Some(&Bson::Int64(4))
    );

    // A newer version brings it back, whole.
    let r = write(&coll, vec![post("a", 5, "five")]).await;
    assert_eq!(r.inserted, 1, "{r:?}");
    let d = stored(&db, "a").await.unwrap();
    assert_eq!(d.get_str("body"), Ok("five"));
    assert!(d.get("_nk_deleted").is_none(), "{d}");
    assert!(d.get("_nk_hash").is_some(), "{d}");

    // A delete of a document never stored leaves a tombstone too: the late upsert is stale.
    let r = delete(&coll, vec![post("c", 9, "")]).await;
    assert_eq!(r.not_found, 1);
    let r = write(&coll, vec![post("c", 8, "eight")]).await;
    assert_eq!(r.stale, 1);
    assert!(stored(&db, "c").await.unwrap().get("body").is_none());
}

/// How writer `w` of `writers` delivers its share of `writes`.
fn share(writes: &[(usize, i64, bool)], w: usize, writers: usize) -> Vec<(usize, i64, bool)> {
    writes.iter().copied().skip(w).step_by(writers).collect()
}

fn slug(i: usize) -> String {
    format!("doc-{i:05}")
}

/// 1,000 documents × 10 versions each, shuffled, split over 4 concurrent writers (one on
/// FerretDB 1.x) through a
/// proxy that loses 20% of write replies after the engine applied them; every tenth document's
/// last version is a delete. Each writer sends its share in batches of 25, under the default
/// retry policy. Every document ends at its highest version (a tombstone for the deleted
/// ones), every write has one outcome, none is `unchanged` (each version is sent once, and a
/// lost reply of our own write is recognised by its token), and shuffling made some stale.
#[tokio::test]
async fn out_of_order_delivery_converges_on_the_highest_version() {
    let docs = support::env_or("NK_VERSION_DOCS", 1_000usize);
    out_of_order("versions_out_of_order", spec(), docs, |v| format!("v{v}")).await;
}

/// The same with one content for every version and the version out of the content hash: each
/// newer version only records itself (`unchanged`), and only the version in the write's filter
/// keeps a racing older one from landing after it.
#[tokio::test]
async fn out_of_order_version_bumps_converge_too() {
    let docs = support::env_or("NK_VERSION_DOCS", 1_000usize) / 2;
    let spec = spec().skip_hash("rev");
    out_of_order("versions_bumps", spec, docs, |_| "same".to_string()).await;
}

async fn out_of_order(test: &str, spec: KeySpec, docs: usize, body: fn(i64) -> String) {
    let (db, _) = support::database(test).await;
    let opened = spec.open(&db, "posts").await.unwrap();
    // The cluster pass shards the collection on `_nk_identity`: every filter carries it.
    assert_eq!(opened.is_sharded(), support::sharded_pass());
    let faults = Faults {
        drop_reply_after_apply: 0.2,
        ..Faults::none()
    };
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), faults, 50).await;
    let via = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(db.name());
    let mut writes: Vec<(usize, i64, bool)> = (0..docs)
        .flat_map(|i| (1..=10).map(move |v| (i, v, i % 10 == 0 && v == 10)))
        .collect();
    let mut seed = 0x5eed_u64;
    for k in (1..writes.len()).rev() {
        let j = (support::child::next(&mut seed) % (k as u64 + 1)) as usize;
        writes.swap(k, j);
    }
    let writes = Arc::new(writes);
    // FerretDB 1.x checks an update's filter outside its write: two writers' updates of one
    // document can both apply, whatever the filter says, so there versions order what one
    // writer sends (docs/engines.md); everywhere else, four writers race.
    let writers = match opened.deployment().engine().is_ferretdb_v1() {
        true => 1,
        false => 4,
    };
    let mut tasks = Vec::new();
    for w in 0..writers {
        let coll = spec
            .open(&via, "posts")
            .retry(RetryPolicy::default())
            .await
            .unwrap();
        let mine = share(&writes, w, writers);
        tasks.push(tokio::spawn(async move {
            let mut total = BatchReport::default();
            for chunk in mine.chunks(25) {
                let (dels, ups): (Vec<_>, Vec<_>) = chunk.iter().partition(|w| w.2);
                let doc = |&(i, v, _): &(usize, i64, bool)| post(&slug(i), v, &body(v));
                let r = coll.upsert_many(ups.iter().map(doc)).await.unwrap();
                let d = coll.delete_many(dels.iter().map(doc)).await.unwrap();
                for r in [r, d] {
                    assert!(r.failures.is_empty(), "{:?}", r.failures);
                    total.inserted += r.inserted;
                    total.updated += r.updated;
                    total.unchanged += r.unchanged;
                    total.stale += r.stale;
                    total.deleted += r.deleted;
                    total.not_found += r.not_found;
                }
            }
            total
        }));
    }
    let mut total = BatchReport::default();
    for t in tasks {
        let r = t.await.unwrap();
        total.inserted += r.inserted;
        total.updated += r.updated;
        total.unchanged += r.unchanged;
        total.stale += r.stale;
        total.deleted += r.deleted;
        total.not_found += r.not_found;
    }
    assert!(proxy.stats().replies_dropped > 0, "no reply was lost");
    assert_eq!(total.processed(), (docs * 10) as u64, "{total:?}");
    // Each version is sent once, and a write of ours whose reply was lost is known by its
    // token: `unchanged` only where the content stays the same across versions.
    if body(1) != body(2) {
        assert_eq!(total.unchanged, 0, "{total:?}");
    }
    assert!(total.stale > 0, "{total:?}");

    let all: Vec<Document> = support::all_documents(&db.collection("posts")).await;
    assert_eq!(all.len(), docs, "one document or tombstone per identity");
    for d in &all {
        let slug = d.get_str("slug").ok();
        let version = d.get_i64("_nk_version");
        assert_eq!(version, Ok(10), "{d}");
        if d.get("_nk_deleted").is_some() {
            assert!(slug.is_none() && d.get("body").is_none(), "{d}");
        } else {
            assert_eq!(d.get_str("body"), Ok(body(10).as_str()), "{d}");
            assert_eq!(d.get_i64("rev"), Ok(10), "{d}");
        }
    }
    let dead = all
        .iter()
        .filter(|d| d.get("_nk_deleted").is_some())
        .count();
    assert_eq!(dead, docs.div_ceil(10));
}

/// Insert-only leaves a stored document alone and counts it; update-only creates nothing and
/// counts it; neither writes what it counts; both with or without a version.
#[tokio::test]
async fn insert_only_and_update_only() {
    use natural_key::WriteMode;
    let (db, _) = support::database("versions_modes").await;
    let coll = spec().open(&db, "posts").await.unwrap();
    write(&coll, vec![post("a", 1, "one")]).await;

    let r = coll
        .upsert_many(vec![post("a", 2, "two"), post("b", 1, "new")])
        .mode(WriteMode::InsertOnly)
        .await
        .unwrap();
    assert_eq!((r.existed, r.inserted), (1, 1), "{r:?}");
    assert_eq!(stored(&db, "a").await.unwrap().get_str("body"), Ok("one"));

    let r = coll
        .upsert_many(vec![post("a", 2, "two"), post("c", 1, "never")])
        .mode(WriteMode::UpdateOnly)
        .await
        .unwrap();
    assert_eq!((r.updated, r.missing), (1, 1), "{r:?}");
    assert_eq!(stored(&db, "a").await.unwrap().get_str("body"), Ok("two"));
    assert!(stored(&db, "c").await.is_none());

    // A deleted document is missing to update-only, and insert-only brings a newer one back.
    delete(&coll, vec![post("b", 1, "")]).await;
    let r = coll
        .upsert_many(vec![post("b", 2, "again")])
        .mode(WriteMode::UpdateOnly)
        .await
        .unwrap();
    assert_eq!(r.missing, 1, "{r:?}");
    let r = coll
        .upsert_many(vec![post("b", 2, "again")])
        .mode(WriteMode::InsertOnly)
        .await
        .unwrap();
    assert_eq!(r.inserted, 1, "{r:?}");
    assert_eq!(stored(&db, "b").await.unwrap().get_str("body"), Ok("again"));
}

#[derive(
    natural_key::NaturalKey, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq,
)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(version)]
    edited_at: natural_key::bson::DateTime,
    body: String,
}

/// A typed document with a timestamp version: single writes and deletes decide by it, and the
/// handle's reads do not see a tombstone.
#[tokio::test]
async fn a_typed_version_single_writes_and_reads() {
    use natural_key::bson::DateTime;
    use natural_key::{Collection, DeleteOutcome, NaturalKey, UpsertOutcome};
    let (db, _) = support::database("versions_typed").await;
    let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
    let at = |ms: i64, body: &str| Post {
        slug: "hello".into(),
        published_at: 1_700_000_000_000,
        edited_at: DateTime::from_millis(ms),
        body: body.into(),
    };
    let id = at(0, "").id().unwrap();
    assert_eq!(
        coll.upsert(&at(2_000, "b")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    assert_eq!(
        coll.upsert(&at(1_000, "a")).await.unwrap(),
        UpsertOutcome::Stale(id)
    );
    assert_eq!(
        coll.upsert(&at(3_000, "c")).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    assert_eq!(coll.get(id).await.unwrap(), Some(at(3_000, "c")));
    assert!(matches!(
        coll.upsert(&at(3_000, "C")).await,
        Err(Error::VersionConflict { version: 3_000, .. })
    ));
    assert_eq!(
        coll.delete(&at(2_999, "")).await.unwrap(),
        DeleteOutcome::Stale(id)
    );
    assert_eq!(
        coll.delete(&at(3_000, "")).await.unwrap(),
        DeleteOutcome::Deleted(id)
    );
    assert_eq!(coll.get(id).await.unwrap(), None);
    assert_eq!(coll.find_by_key(&at(0, "")).await.unwrap(), None);
    assert_eq!(
        coll.upsert(&at(3_000, "c")).await.unwrap(),
        UpsertOutcome::Stale(id)
    );
    assert_eq!(
        coll.upsert(&at(4_000, "d")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    assert_eq!(
        coll.find_by_key(&at(0, "")).await.unwrap(),
        Some(at(4_000, "d"))
    );
}

/// Tombstones are pruned by age on request: none younger than the cutoff, every older one
/// (a dry run counts them first); once pruned, a late older write is a new document again —
/// what a tombstone's cost buys.
#[tokio::test]
async fn tombstones_are_pruned_by_age() {
    use std::time::Duration;
    let (db, _) = support::database("versions_prune").await;
    let coll = spec().open(&db, "posts").await.unwrap();
    write(
        &coll,
        vec![post("a", 1, "a"), post("b", 1, "b"), post("c", 1, "c")],
    )
    .await;
    delete(
        &coll,
        vec![post("a", 2, ""), post("b", 2, ""), post("z", 2, "")],
    )
    .await;

    let hour = coll
        .prune_tombstones(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(hour.pruned, 0);
    let plan = coll
        .prune_tombstones(Duration::ZERO)
        .dry_run()
        .await
        .unwrap();
    assert_eq!((plan.pruned, plan.dry_run), (3, true));
    assert_eq!(
        db.collection::<Document>("posts")
            .count_documents(doc! {})
            .await
            .unwrap(),
        4
    );
    let done = coll.prune_tombstones(Duration::ZERO).await.unwrap();
    assert_eq!((done.pruned, done.changed), (3, 0));
    let left = support::all_documents(&db.collection("posts")).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].get_str("slug"), Ok("c"));
    let r = write(&coll, vec![post("a", 1, "a")]).await;
    assert_eq!(r.inserted, 1, "pruned: nothing remembers the deletion");
}

/// Maintenance with a version declared: the audit counts tombstones apart and reports
/// documents whose `_nk_version` is not their version; adopt leaves tombstones alone; rekey
/// does not move (and so bring back) a deleted document.
#[tokio::test]
async fn audit_adopt_and_rekey_know_tombstones() {
    use natural_key::bson::DateTime;
    use natural_key::{Collection, NaturalKey, RekeyOutcome};
    let (db, _) = support::database("versions_maintenance").await;
    let coll = Collection::<Post>::open(&db, "posts").await.unwrap();
    let at = |slug: &str, ms: i64| Post {
        slug: slug.into(),
        published_at: 1_700_000_000_000,
        edited_at: DateTime::from_millis(ms),
        body: "b".into(),
    };
    coll.upsert_many(&[at("a", 1), at("b", 1)]).await.unwrap();
    coll.delete(&at("b", 2)).await.unwrap();
    // Another writer moves `a`'s version field without `_nk_version`.
    let raw = db.collection::<Document>("posts");
    let a = at("a", 0).id().unwrap().to_string();
    raw.update_one(
        doc! {"_id": &a},
        doc! {"$set": {"edited_at": DateTime::from_millis(9)}},
    )
    .await
    .unwrap();

    let report = coll.audit().await.unwrap();
    assert_eq!(report.tombstones.count, 1, "{report}");
    assert_eq!(report.version_drift.count, 1, "{report}");
    assert_eq!(report.unreadable.count, 0, "{report}");
    // The version field is hashed: the other writer's edit is hash drift too.
    assert_eq!((report.clean, report.hash_drift.count), (0, 1), "{report}");
    assert!(report.is_clean(), "{report}");
    assert!(report.to_string().contains("tombstones"), "{report}");

    let adopted = coll.adopt().await.unwrap();
    assert!(adopted.audit.is_clean());
    let mut moved = at("b", 3);
    moved.published_at += 1;
    assert_eq!(coll.rekey(&moved).await.unwrap(), RekeyOutcome::NotFound);
    let b = raw
        .find_one(doc! {"_id": at("b", 0).id().unwrap().to_string()})
        .await
        .unwrap()
        .unwrap();
    assert!(
        b.get("_nk_deleted").is_some() && b.get("body").is_none(),
        "{b}"
    );
    // A write records the version the fields hold: no drift left.
    coll.upsert(&at("a", 10)).await.unwrap();
    assert_eq!(coll.audit().await.unwrap().version_drift.count, 0);
}

#[derive(natural_key::NaturalKey, serde::Serialize, serde::Deserialize, Clone, Debug)]
struct Item {
    #[key]
    sku: String,
    #[key(timestamp)]
    listed_at: i64,
    #[natural_key(version)]
    rev: u64,
    #[natural_key(relative)]
    stock: i64,
}

/// Relative updates with a version: an applied operation does not move the version (versions
/// order whole-document writes; operations are exactly-once by their own keys), a versioned
/// upsert keeps what operations changed, and a deleted document takes no operation.
#[tokio::test]
async fn relative_updates_with_a_version() {
    use natural_key::{Change, Collection, NaturalKey, OpId, UpsertOutcome};
    let (db, _) = support::database("versions_relative").await;
    let items = Collection::<Item>::open(&db, "items").await.unwrap();
    let item = |rev| Item {
        sku: "s".into(),
        listed_at: 1_700_000_000_000,
        rev,
        stock: 10,
    };
    let id = item(1).id().unwrap();
    items.upsert(&item(1)).await.unwrap();
    let sell = || Change::new().inc("stock", -1);
    items
        .apply(id, OpId::new("sale-1", 1_700_000_000_001_i64), sell())
        .await
        .unwrap();
    let raw = db.collection::<Document>("items");
    let stored = raw
        .find_one(doc! {"_id": id.to_string()})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.get_i64("_nk_version"), Ok(1), "{stored}");
    assert_eq!(stored.get_i64("stock"), Ok(9), "{stored}");
    assert_eq!(
        items.upsert(&item(2)).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    assert_eq!(
        items.upsert(&item(1)).await.unwrap(),
        UpsertOutcome::Stale(id)
    );
    let stored = raw
        .find_one(doc! {"_id": id.to_string()})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.get_i64("stock"),
        Ok(9),
        "an upsert keeps relative fields: {stored}"
    );
    items.delete(&item(2)).await.unwrap();
    let err = items
        .apply(id, OpId::new("sale-2", 1_700_000_000_002_i64), sell())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DocumentNotFound { .. }), "{err}");
}

#[derive(natural_key::NaturalKey, serde::Serialize, serde::Deserialize, Clone, Debug)]
#[natural_key(changed_at = "changed_at")]
struct Page {
    #[key]
    path: String,
    #[key(timestamp)]
    created_at: i64,
    #[natural_key(version)]
    #[natural_key(skip_hash)]
    rev: u64,
    body: String,
    #[serde(default, skip_serializing)]
    changed_at: Option<natural_key::bson::DateTime>,
}

/// The changed-at field is the engine's clock at each write that changes the content — an
/// insert, an update in either mode, a document brought back — and stays as it is when a write
/// is unchanged, stale, or only records a newer version. A typed value read back carries it,
/// and writing that value back is unchanged.
#[tokio::test]
async fn the_engine_stamps_what_changed() {
    use natural_key::{Collection, NaturalKey, UpsertOutcome, WriteMode};
    let (db, _) = support::database("versions_changed_at").await;
    let pages = Collection::<Page>::open(&db, "pages").await.unwrap();
    let page = |rev, body: &str| Page {
        path: "/".into(),
        created_at: 1_700_000_000_000,
        rev,
        body: body.into(),
        changed_at: None,
    };
    let id = page(1, "").id().unwrap();
    let stamp = || async {
        let d = db
            .collection::<Document>("pages")
            .find_one(doc! {"_id": id.to_string()})
            .await
            .unwrap()
            .unwrap();
        *d.get_datetime("changed_at")
            .unwrap_or_else(|_| panic!("stamped: {d}"))
    };
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(20));
    let before = natural_key::bson::DateTime::now().timestamp_millis() - 60_000;

    assert_eq!(
        pages.upsert(&page(1, "a")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    let t1 = stamp().await;
    assert!(t1.timestamp_millis() > before, "{t1}");
    let unchanged = [page(1, "a"), page(0, "z"), page(2, "a")];
    for p in &unchanged {
        pause().await;
        pages.upsert(p).await.unwrap();
        assert_eq!(stamp().await, t1, "{p:?}");
    }
    pause().await;
    assert_eq!(
        pages.upsert(&page(3, "b")).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    let t2 = stamp().await;
    assert!(t2 > t1);
    pause().await;
    let replaced = pages
        .upsert(&page(4, "c"))
        .mode(WriteMode::Replace)
        .await
        .unwrap();
    assert_eq!(replaced, UpsertOutcome::Updated(id));
    let t3 = stamp().await;
    assert!(t3 > t2);
    pause().await;
    pages
        .upsert(&page(5, "c"))
        .mode(WriteMode::Replace)
        .await
        .unwrap();
    assert_eq!(
        stamp().await,
        t3,
        "a version alone, replaced, keeps the stamp"
    );

    let read = pages.get(id).await.unwrap().unwrap();
    assert_eq!(read.changed_at, Some(t3));
    assert_eq!(
        pages.upsert(&read).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );

    pages.delete(&page(6, "")).await.unwrap();
    pause().await;
    assert_eq!(
        pages.upsert(&page(7, "d")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    assert!(stamp().await > t3, "brought back: changed");
}

/// At run time: a document's own changed-at value (an export carries it) is neither stored
/// nor hashed.
#[tokio::test]
async fn a_spec_changed_at_is_the_engines() {
    let (db, _) = support::database("versions_changed_at_spec").await;
    let coll = spec()
        .changed_at("changed_at")
        .open(&db, "posts")
        .await
        .unwrap();
    let exported = |at: i64| {
        let mut d = post("a", 1, "x");
        d.append("changed_at", natural_key::bson::DateTime::from_millis(at));
        d
    };
    assert_eq!(write(&coll, vec![exported(5)]).await.inserted, 1);
    let t = stored(&db, "a").await.unwrap();
    let stamped = *t.get_datetime("changed_at").unwrap();
    assert!(stamped.timestamp_millis() > 5, "{t}");
    let r = write(&coll, vec![exported(7)]).await;
    assert_eq!(r.unchanged, 1, "{r:?}");
    assert_eq!(
        stored(&db, "a").await.unwrap().get_datetime("changed_at"),
        Ok(&stamped)
    );
}

/// A sync from a full snapshot leaves tombstones alone: the snapshot agrees that their
/// documents are gone, and deleting a tombstone would let a late older write bring one back.
#[tokio::test]
async fn a_snapshot_sync_keeps_tombstones() {
    let (db, _) = support::database("versions_sync").await;
    let coll = spec().open(&db, "posts").await.unwrap();
    write(&coll, vec![post("a", 1, "a"), post("b", 1, "b")]).await;
    delete(&coll, vec![post("b", 2, "")]).await;
    let snapshot = [post("a", 1, "a")];
    let keep = snapshot.iter().map(|d| spec().derive(d).unwrap().1);
    let report = coll.prune_except(keep).force().await.unwrap();
    assert_eq!(report.deleted, 0, "{report:?}");
    let r = write(&coll, vec![post("b", 1, "b")]).await;
    assert_eq!(r.stale, 1, "{r:?}");
}
