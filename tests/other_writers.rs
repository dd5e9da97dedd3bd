//! What another writer (a Go service, say) must store for the guard to protect its documents:
//! docs/id-scheme.md, "Writing from another language", checked on the real engine. The raw
//! statements below are the ones the spec tells such a writer to send; the worked example's
//! values are those interop/go computes (interop/go/stored_test.go asserts the same literals).

mod support;

use natural_key::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use natural_key::prelude::*;
use natural_key::{Collection, Error, HASH_FIELD, IDENTITY_FIELD, LEGACY_IDS_FIELD};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[natural_key(namespace = "blog.post")]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: DateTime,
    title: String,
    body: String,
}

/// 2024-03-01T09:30:00.123Z
const MS: i64 = 1_709_285_400_123;
const ID: &str = "01HQWNJQHVYFS02189P4P8M0NY";
const IDENTITY: &str = "f3f2010509b12c8a02be714ab620abadcc626eb34d55dc44fc43b1ac2ec5d7bf";

fn example(body: &str) -> Post {
    Post {
        slug: "retries".into(),
        lang: "en".into(),
        published_at: DateTime::from_millis(MS),
        title: "Retries".into(),
        body: body.into(),
    }
}

/// The document's own fields as the Rust type stores them, which is what the other writer
/// `$set`s: serde names, a BSON date for the `DateTime`.
fn fields(body: &str) -> Document {
    doc! {
        "slug": "retries",
        "lang": "en",
        "published_at": DateTime::from_millis(MS),
        "title": "Retries",
        "body": body,
    }
}

/// The statement the spec gives: `{q: {_id}, u: {$set: {...fields, _nk_identity}, $unset:
/// {_nk_hash: ""}}, upsert: true}`.
async fn go_upsert(
    raw: &natural_key::mongodb::Collection<Document>,
    id: &str,
    identity: &str,
    body: &str,
) -> Result<(), natural_key::mongodb::error::Error> {
    let mut set = fields(body);
    set.insert(IDENTITY_FIELD, identity);
    raw.update_one(
        filter(id, identity),
        doc! {"$set": set, "$unset": {HASH_FIELD: ""}},
    )
    .upsert(true)
    .await
    .map(|_| ())
}

/// The statement's `q` (docs/id-scheme.md, "The statement"): by `_id`, and on a sharded
/// collection (the cluster pass) with the shard key `_nk_identity` too.
fn filter(id: &str, identity: &str) -> Document {
    match support::sharded_pass() {
        true => doc! {"_id": id, IDENTITY_FIELD: identity},
        false => doc! {"_id": id},
    }
}

async fn posts(test: &str) -> (Collection<Post>, natural_key::mongodb::Collection<Document>) {
    let (db, _) = support::database(test).await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    (posts, db.collection::<Document>("posts"))
}

async fn stored(raw: &natural_key::mongodb::Collection<Document>, id: Bson) -> Document {
    raw.find_one(doc! {"_id": id}).await.unwrap().unwrap()
}

#[test]
fn the_worked_example_matches_the_go_module() {
    let p = example("Again.");
    assert_eq!(p.id().unwrap().to_string(), ID);
    assert_eq!(p.identity().unwrap().to_string(), IDENTITY);
    assert_eq!(p.id().unwrap().timestamp_ms(), MS as u64);
    // What the Rust writer's next upsert adds as `_nk_hash` (the spec's example shows it).
    assert_eq!(
        p.content_hash().unwrap().to_string(),
        "56e94541b8e4c41931c2c4fcf5f2d3c6d607486317b4da3894c17012d637030b"
    );
    // The stored form of the type is what `fields` writes (plus the library's two fields).
    let mut own = natural_key::bson::to_document(&p).unwrap();
    assert_eq!(own, fields("Again."));
    own.insert(IDENTITY_FIELD, IDENTITY);
    assert_eq!(own.len(), 6);
}

#[tokio::test]
async fn a_document_with_id_and_identity_is_guarded() {
    let (posts, raw) = posts("guarded").await;
    go_upsert(&raw, ID, IDENTITY, "Again.").await.unwrap();
    let d = stored(&raw, ID.into()).await;
    assert_eq!(d.get_str(IDENTITY_FIELD).unwrap(), IDENTITY);
    assert!(d.get(HASH_FIELD).is_none());

    // Without a hash the document is clean but for it.
    let a = posts.audit().await.unwrap();
    assert_eq!((a.scanned, a.clean, a.hash_drift.count), (1, 0, 1));
    assert!(a.is_clean(), "{a}");
    // The Rust writer's first upsert of the same content rewrites it once, with its hash.
    let p = example("Again.");
    let id = p.id().unwrap();
    assert_eq!(posts.upsert(&p).await.unwrap(), UpsertOutcome::Updated(id));
    assert_eq!(
        posts.upsert(&p).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
    let d = stored(&raw, ID.into()).await;
    assert_eq!(
        d.get_str(HASH_FIELD).unwrap(),
        p.content_hash().unwrap().to_string()
    );
    assert_eq!(posts.audit().await.unwrap().clean, 1);

    // The other writer changes the body: its $unset of the hash makes the Rust writer's next
    // upsert write its own content again instead of calling it unchanged.
    go_upsert(&raw, ID, IDENTITY, "Edited in Go.")
        .await
        .unwrap();
    assert!(stored(&raw, ID.into()).await.get(HASH_FIELD).is_none());
    assert_eq!(posts.upsert(&p).await.unwrap(), UpsertOutcome::Updated(id));
    assert_eq!(
        stored(&raw, ID.into()).await.get_str("body").unwrap(),
        "Again."
    );
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);

    // A second document of the identity, under the id of another timestamp, is refused by
    // the unique identity index: the other writer's ImmutableKeyChanged.
    let other = example("Again.");
    let fork = Post {
        published_at: DateTime::from_millis(MS + 1),
        ..other
    };
    let fork_id = fork.id().unwrap().to_string();
    let err = go_upsert(&raw, &fork_id, IDENTITY, "Again.")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("11000") || err.to_string().to_lowercase().contains("duplicate"),
        "{err}"
    );
    // And the Rust writer refuses the edited timestamp the same way.
    assert!(matches!(
        posts.upsert(&fork).await,
        Err(Error::ImmutableKeyChanged { .. })
    ));
}

/// Why the statement unsets `_nk_hash`: a hash left from the Rust writer's last write tells
/// it that the stored content is still its own.
#[tokio::test]
async fn a_stale_hash_hides_another_writers_change() {
    let (posts, raw) = posts("stale_hash").await;
    let p = example("Again.");
    let id = p.id().unwrap();
    posts.upsert(&p).await.unwrap();
    let mut set = fields("Edited in Go.");
    set.insert(IDENTITY_FIELD, IDENTITY);
    raw.update_one(filter(ID, IDENTITY), doc! {"$set": set})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(
        posts.upsert(&p).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
    assert_eq!(
        stored(&raw, ID.into()).await.get_str("body").unwrap(),
        "Edited in Go.",
        "the upsert reported Unchanged over content it did not write"
    );
    // The audit sees it: the stored hash is not the stored content's.
    assert_eq!(posts.audit().await.unwrap().hash_drift.count, 1);
}

/// A document at its derived `_id` without `_nk_identity`: the upsert adopts it in place.
#[tokio::test]
async fn a_document_without_identity_at_its_id_is_adopted_by_the_upsert() {
    let (posts, raw) = posts("no_identity_upsert").await;
    let mut d = fields("Again.");
    d.insert("_id", ID);
    raw.insert_one(d).await.unwrap();
    let a = posts.audit().await.unwrap();
    assert_eq!((a.scanned, a.legacy.count), (1, 1));
    assert!(!a.is_clean());

    let p = example("Again.");
    let id = p.id().unwrap();
    assert_eq!(posts.upsert(&p).await.unwrap(), UpsertOutcome::Updated(id));
    assert_eq!(
        posts.upsert(&p).await.unwrap(),
        UpsertOutcome::Unchanged(id)
    );
    let d = stored(&raw, ID.into()).await;
    assert_eq!(d.get_str(IDENTITY_FIELD).unwrap(), IDENTITY);
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
    assert_eq!(posts.audit().await.unwrap().clean, 1);
}

/// The same document, adopted by `Collection::adopt` instead.
#[tokio::test]
async fn a_document_without_identity_at_its_id_is_adopted_by_adopt() {
    let (posts, raw) = posts("no_identity_adopt").await;
    let mut d = fields("Again.");
    d.insert("_id", ID);
    raw.insert_one(d).await.unwrap();
    let r = posts.adopt().await.unwrap();
    assert_eq!((r.adopted, r.merged), (1, 0));
    let d = stored(&raw, ID.into()).await;
    assert_eq!(d.get_str(IDENTITY_FIELD).unwrap(), IDENTITY);
    assert_eq!(
        d.get_str(HASH_FIELD).unwrap(),
        example("Again.").content_hash().unwrap().to_string()
    );
    assert_eq!(posts.audit().await.unwrap().clean, 1);
}

/// Under another `_id` and without `_nk_identity`, the guard cannot find the document: the
/// upsert writes a second one, the audit shows the pair, adopt merges them.
#[tokio::test]
async fn a_document_without_identity_under_another_id_is_duplicated_until_adopted() {
    let (posts, raw) = posts("no_identity_other_id").await;
    let oid = ObjectId::new();
    let mut d = fields("Again.");
    d.insert("_id", oid);
    raw.insert_one(d).await.unwrap();

    let p = example("Again.");
    let id = p.id().unwrap();
    assert_eq!(posts.upsert(&p).await.unwrap(), UpsertOutcome::Inserted(id));
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 2);
    let a = posts.audit().await.unwrap();
    assert_eq!(
        (a.clean, a.legacy.count, a.duplicates_identical.count),
        (1, 1, 1)
    );

    let r = posts.adopt().await.unwrap();
    assert_eq!(r.merged, 1);
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
    let d = stored(&raw, ID.into()).await;
    assert_eq!(
        d.get_array(LEGACY_IDS_FIELD).unwrap(),
        &vec![Bson::ObjectId(oid)]
    );
}

/// The text forms are compared as stored: a lowercase `_id` is another id, an uppercase
/// identity another identity.
#[tokio::test]
async fn the_stored_text_forms_are_exact() {
    let (posts, raw) = posts("text_forms").await;
    let p = example("Again.");

    let lower = ID.to_lowercase();
    go_upsert(&raw, &lower, IDENTITY, "Again.").await.unwrap();
    assert!(matches!(
        posts.upsert(&p).await,
        Err(Error::ImmutableKeyChanged { .. })
    ));
    raw.delete_many(doc! {}).await.unwrap();
    // Sharded on `_nk_identity`, a document under another identity text lives on another
    // shard, where an insert's `_id` does not meet it: the audit still counts it as drifted,
    // and `adopt` moves it (README, "On a sharded cluster").
    if support::sharded_pass() {
        go_upsert(&raw, ID, &IDENTITY.to_uppercase(), "Again.")
            .await
            .unwrap();
        assert_eq!(posts.audit().await.unwrap().id_drift.count, 1);
        return;
    }

    // An identity in uppercase is not found; the upsert meets the document by `_id` and
    // adopts it, storing the identity in lowercase. The audit counted it as drifted.
    go_upsert(&raw, ID, &IDENTITY.to_uppercase(), "Again.")
        .await
        .unwrap();
    assert_eq!(posts.audit().await.unwrap().id_drift.count, 1);
    let id = p.id().unwrap();
    assert_eq!(posts.upsert(&p).await.unwrap(), UpsertOutcome::Updated(id));
    assert_eq!(
        stored(&raw, ID.into())
            .await
            .get_str(IDENTITY_FIELD)
            .unwrap(),
        IDENTITY
    );
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
}

// ---------------------------------------------------------------------------------------------
// A versioned other writer (docs/id-scheme.md, "Versions and tombstones" and "Writing from
// another language", "A versioned writer"): the statements below are the ones the spec gives,
// written out; interop/go's VersionedFilter, VersionedUpdate, TombstoneFilter and Tombstone
// build the same documents.

/// `Post` with a version: the same namespace and keys, so the same `_id` and `_nk_identity`
/// (type and field names are not hashed).
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[natural_key(namespace = "blog.post")]
struct Revised {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: DateTime,
    #[natural_key(version)]
    rev: i64,
    body: String,
}

const VERSION: &str = "_nk_version";
const DELETED: &str = "_nk_deleted";

fn revised(rev: i64, body: &str) -> Revised {
    Revised {
        slug: "retries".into(),
        lang: "en".into(),
        published_at: DateTime::from_millis(MS),
        rev,
        body: body.into(),
    }
}

async fn revisions(
    test: &str,
) -> (
    Collection<Revised>,
    natural_key::mongodb::Collection<Document>,
) {
    let (db, _) = support::database(test).await;
    let coll = Collection::<Revised>::open(&db, "posts").await.unwrap();
    (coll, db.collection::<Document>("posts"))
}

/// The versioned statement: `{q: {_id, _nk_version: {$not: {$gte: v}}}, u: {$set: {...fields,
/// _nk_identity, _nk_version: v}, $unset: {_nk_hash: "", _nk_deleted: ""}}, upsert: true}`.
/// `version` is what the other writer stores in `_nk_version`: the version as an int64.
async fn go_versioned_upsert(
    raw: &natural_key::mongodb::Collection<Document>,
    version: i64,
    mut set: Document,
) -> Result<(), natural_key::mongodb::error::Error> {
    set.insert(IDENTITY_FIELD, IDENTITY);
    set.insert(VERSION, version);
    let mut q = filter(ID, IDENTITY);
    q.insert(VERSION, doc! {"$not": {"$gte": version}});
    raw.update_one(
        q,
        doc! {"$set": set, "$unset": {HASH_FIELD: "", DELETED: ""}},
    )
    .upsert(true)
    .await
    .map(|_| ())
}

/// The document's fields as `Revised` stores them.
fn revised_fields(rev: i64, body: &str) -> Document {
    let mut d = fields(body);
    d.insert("rev", rev);
    d
}

/// The versioned delete: the document replaced by a tombstone, `{q: {_id, _nk_version: {$not:
/// {$gt: v}}}, u: {_nk_identity, _nk_version: v, _nk_deleted: <now>}, upsert: true}`.
async fn go_tombstone(
    raw: &natural_key::mongodb::Collection<Document>,
    version: i64,
) -> Result<(), natural_key::mongodb::error::Error> {
    let mut q = filter(ID, IDENTITY);
    q.insert(VERSION, doc! {"$not": {"$gt": version}});
    raw.replace_one(
        q,
        doc! {IDENTITY_FIELD: IDENTITY, VERSION: version, DELETED: DateTime::now()},
    )
    .upsert(true)
    .await
    .map(|_| ())
}

/// The refusal the spec tells the other writer to expect: a duplicate key (11000) on `_id`,
/// the upsert's insert of an `_id` that is stored at a version its filter did not match.
fn assert_duplicate_key(r: Result<(), natural_key::mongodb::error::Error>) {
    use natural_key::mongodb::error::{ErrorKind, WriteFailure};
    let err = r.expect_err("the statement applied; the spec says it fails with 11000");
    match &*err.kind {
        ErrorKind::Write(WriteFailure::WriteError(e)) => assert_eq!(e.code, 11000, "{err}"),
        _ => panic!("not a write error 11000: {err}"),
    }
}

#[tokio::test]
async fn a_versioned_other_writer_and_the_rust_writer_order_by_version() {
    let (posts, raw) = revisions("versioned_other_writer").await;
    let id = revised(0, "").id().unwrap();
    assert_eq!(id.to_string(), ID);

    assert_eq!(
        posts.upsert(&revised(2, "two")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    let before = stored(&raw, ID.into()).await;
    // Older or equal: the filter does not match the stored v2, the upsert's insert of the
    // stored `_id` is refused, nothing is written.
    for (v, body) in [(1, "one"), (2, "two from Go")] {
        assert_duplicate_key(go_versioned_upsert(&raw, v, revised_fields(v, body)).await);
        assert_eq!(
            stored(&raw, ID.into()).await,
            before,
            "v{v} changed the document"
        );
    }
    // Newer: applied, with its version and without the Rust writer's hash.
    go_versioned_upsert(&raw, 3, revised_fields(3, "three from Go"))
        .await
        .unwrap();
    let d = stored(&raw, ID.into()).await;
    assert_eq!(d.get_str("body"), Ok("three from Go"));
    assert_eq!(d.get(VERSION), Some(&Bson::Int64(3)));
    assert!(d.get(HASH_FIELD).is_none(), "{d}");
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);

    // The Rust writer: its older version is stale; at the other writer's version it cannot
    // tell the content equal (no hash), so it is a conflict; a newer one is written.
    assert_eq!(
        posts.upsert(&revised(2, "two")).await.unwrap(),
        UpsertOutcome::Stale(id)
    );
    assert!(matches!(
        posts.upsert(&revised(3, "three from Go")).await,
        Err(Error::VersionConflict { version: 3, .. })
    ));
    assert_eq!(
        stored(&raw, ID.into()).await.get_str("body"),
        Ok("three from Go")
    );
    assert_eq!(
        posts.upsert(&revised(4, "four")).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    assert_eq!(posts.get(id).await.unwrap(), Some(revised(4, "four")));

    // The other writer deletes at v5: a tombstone replaces the document.
    go_tombstone(&raw, 5).await.unwrap();
    let t = stored(&raw, ID.into()).await;
    assert_eq!(t.get(VERSION), Some(&Bson::Int64(5)));
    assert!(t.get_datetime(DELETED).is_ok(), "{t}");
    assert_eq!(t.get_str(IDENTITY_FIELD), Ok(IDENTITY));
    assert_eq!(t.len(), 4, "{t}");
    // An older delete is refused the same way, and changes nothing.
    assert_duplicate_key(go_tombstone(&raw, 4).await);
    assert_eq!(stored(&raw, ID.into()).await, t);
    // The tombstone is no document to the Rust writer's reads, nor to the live filter.
    assert_eq!(posts.get(id).await.unwrap(), None);
    assert_eq!(posts.find_by_key(&revised(0, "")).await.unwrap(), None);
    assert_eq!(raw.count_documents(doc! {DELETED: null}).await.unwrap(), 0);
    // A Rust write at or below it is stale; a newer one brings the document back.
    for v in [4, 5] {
        assert_eq!(
            posts.upsert(&revised(v, "late")).await.unwrap(),
            UpsertOutcome::Stale(id)
        );
    }
    assert_eq!(stored(&raw, ID.into()).await, t);
    assert_eq!(
        posts.upsert(&revised(6, "six")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    let d = stored(&raw, ID.into()).await;
    assert!(d.get(DELETED).is_none(), "{d}");
    assert_eq!(posts.get(id).await.unwrap(), Some(revised(6, "six")));
    // And the other writer's v5 is stale against it.
    assert_duplicate_key(go_versioned_upsert(&raw, 5, revised_fields(5, "five")).await);
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
}

/// The other writer's versioned statements, where the Rust writer is the one that deleted:
/// its tombstone stops an older or equal version, a newer one brings the document back
/// (unsetting `_nk_deleted`), and the other writer's delete of a document never stored leaves
/// a tombstone that stops the Rust writer's older version.
#[tokio::test]
async fn the_rust_writers_tombstone_stops_the_other_writer_too() {
    let (posts, raw) = revisions("versioned_other_writer_tombstones").await;
    let id = revised(0, "").id().unwrap();
    posts.upsert(&revised(1, "one")).await.unwrap();
    assert_eq!(
        posts.delete(&revised(3, "")).await.unwrap(),
        natural_key::DeleteOutcome::Deleted(id)
    );
    let t = stored(&raw, ID.into()).await;
    for v in [2, 3] {
        assert_duplicate_key(go_versioned_upsert(&raw, v, revised_fields(v, "late")).await);
        assert_eq!(stored(&raw, ID.into()).await, t);
    }
    go_versioned_upsert(&raw, 4, revised_fields(4, "back from Go"))
        .await
        .unwrap();
    let d = stored(&raw, ID.into()).await;
    assert!(d.get(DELETED).is_none(), "{d}");
    assert_eq!(
        posts.get(id).await.unwrap(),
        Some(revised(4, "back from Go"))
    );

    raw.delete_many(doc! {}).await.unwrap();
    go_tombstone(&raw, 7).await.unwrap();
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
    assert_eq!(
        posts.upsert(&revised(7, "seven")).await.unwrap(),
        UpsertOutcome::Stale(id)
    );
    assert_eq!(
        posts.delete(&revised(6, "")).await.unwrap(),
        natural_key::DeleteOutcome::Stale(id)
    );
    assert_eq!(
        posts.upsert(&revised(8, "eight")).await.unwrap(),
        UpsertOutcome::Inserted(id)
    );
    // The other writer's delete at the stored version deletes, as the Rust writer's does.
    go_tombstone(&raw, 8).await.unwrap();
    assert_eq!(posts.get(id).await.unwrap(), None);
    assert_eq!(
        stored(&raw, ID.into()).await.get(VERSION),
        Some(&Bson::Int64(8))
    );
}

/// A document stored without `_nk_version` — by the other writer's unversioned statement, or
/// with a `_nk_version` that is not an integer — is older than any version, for both writers.
#[tokio::test]
async fn a_document_without_a_version_is_older_than_any() {
    let (posts, raw) = revisions("versioned_other_writer_unversioned").await;
    let id = revised(0, "").id().unwrap();
    go_upsert(&raw, ID, IDENTITY, "unversioned").await.unwrap();
    assert!(stored(&raw, ID.into()).await.get(VERSION).is_none());
    assert_eq!(
        posts.upsert(&revised(i64::MIN, "min")).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    assert_eq!(
        stored(&raw, ID.into()).await.get(VERSION),
        Some(&Bson::Int64(i64::MIN))
    );

    // The other writer's `$not` matches a document without the field, and one whose
    // `_nk_version` is null or not a number, as the Rust writer's rule does.
    for unversioned in [
        doc! {"$unset": {VERSION: ""}},
        doc! {"$set": {VERSION: Bson::Null}},
        doc! {"$set": {VERSION: "7"}},
    ] {
        raw.update_one(filter(ID, IDENTITY), unversioned.clone())
            .await
            .unwrap();
        go_versioned_upsert(&raw, -1, revised_fields(-1, "from Go"))
            .await
            .unwrap_or_else(|e| panic!("after {unversioned}: {e}"));
        let d = stored(&raw, ID.into()).await;
        assert_eq!(
            d.get(VERSION),
            Some(&Bson::Int64(-1)),
            "after {unversioned}"
        );
        // The same for a delete.
        raw.update_one(filter(ID, IDENTITY), unversioned.clone())
            .await
            .unwrap();
        go_tombstone(&raw, -1).await.unwrap();
        assert!(stored(&raw, ID.into()).await.get(DELETED).is_some());
        // Back to a live, unversioned document for the next round.
        raw.replace_one(filter(ID, IDENTITY), {
            let mut d = revised_fields(0, "plain");
            d.insert(IDENTITY_FIELD, IDENTITY);
            d
        })
        .await
        .unwrap();
    }
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
}

/// An instant version is stored in Unix milliseconds, floored: the other writer converts its
/// time the same way (Go: `t.UnixMilli()`), and an equal instant is an equal version.
#[tokio::test]
async fn an_instant_version_is_compared_in_milliseconds() {
    #[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[natural_key(namespace = "blog.post")]
    struct Edited {
        #[key]
        slug: String,
        #[key]
        lang: String,
        #[key(timestamp)]
        published_at: DateTime,
        #[natural_key(version)]
        edited_at: DateTime,
        body: String,
    }
    let (db, _) = support::database("versioned_other_writer_instant").await;
    let posts = Collection::<Edited>::open(&db, "posts").await.unwrap();
    let raw = db.collection::<Document>("posts");
    let at = |ms: i64, body: &str| Edited {
        slug: "retries".into(),
        lang: "en".into(),
        published_at: DateTime::from_millis(MS),
        edited_at: DateTime::from_millis(ms),
        body: body.into(),
    };
    // 2024-03-02T00:00:00.456Z
    let edited = 1_709_337_600_456;
    posts.upsert(&at(edited, "rust")).await.unwrap();
    assert_eq!(
        stored(&raw, ID.into()).await.get(VERSION),
        Some(&Bson::Int64(edited))
    );
    let set = |ms: i64| {
        let mut d = fields("go");
        d.insert("edited_at", DateTime::from_millis(ms));
        d
    };
    assert_duplicate_key(go_versioned_upsert(&raw, edited, set(edited)).await);
    go_versioned_upsert(&raw, edited + 1, set(edited + 1))
        .await
        .unwrap();
    let id = at(0, "").id().unwrap();
    assert_eq!(
        posts.upsert(&at(edited, "rust")).await.unwrap(),
        UpsertOutcome::Stale(id)
    );
    assert_eq!(posts.get(id).await.unwrap(), Some(at(edited + 1, "go")));
}

/// What a tombstone costs: the Rust writer's, read back from the engine as BSON, is 208
/// bytes (`_id` 36, `_nk_identity` 83, `_nk_version` 21, `_nk_deleted` 21, `_nk_write` 42, and
/// the document's 5); the other writer's, without `_nk_write`, 166. docs/id-scheme.md gives
/// these figures.
#[tokio::test]
async fn a_tombstone_is_208_bytes() {
    use natural_key::bson::RawDocumentBuf;
    let (posts, raw) = revisions("versioned_tombstone_size").await;
    let raw_bytes = raw.clone_with_type::<RawDocumentBuf>();
    let size = || async {
        let d = raw_bytes.find_one(doc! {"_id": ID}).await.unwrap().unwrap();
        let names: Vec<String> = d.iter().map(|e| e.unwrap().0.to_string()).collect();
        (d.as_bytes().len(), names)
    };
    posts
        .upsert(&revised(1, "a body of some length"))
        .await
        .unwrap();
    posts.delete(&revised(1, "")).await.unwrap();
    let (bytes, mut names) = size().await;
    names.sort();
    assert_eq!(
        names,
        [
            "_id",
            "_nk_deleted",
            "_nk_identity",
            "_nk_version",
            "_nk_write"
        ]
    );
    assert_eq!(bytes, 208);
    go_tombstone(&raw, 2).await.unwrap();
    let (bytes, names) = size().await;
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(bytes, 166);
}
