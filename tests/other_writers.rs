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
