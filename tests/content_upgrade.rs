//! Upgrading a collection written under content hash v1 to a type now hashed v2 (its serde
//! attributes make the stored document differ from its Rust fields) rewrites nothing: a stored
//! v1 hash counts as the same content (docs/id-scheme.md, "Upgrading from v1"). On the real
//! engine (FerretDB from scripts/db, or MONGODB_URI).

mod support;

use natural_key::bson::{doc, Document};
use natural_key::prelude::*;
use natural_key::{Collection, ContentHash, HASH_FIELD, IDENTITY_FIELD};

/// Every kind of difference between the Rust fields and the stored document that v1 hashed
/// wrongly: a container `rename_all`, a field `rename`, a raw identifier, a `#[serde(skip)]`
/// field, and a `skip_hash` field whose stored name comes from `rename_all`.
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Listing {
    #[key]
    slug: String,
    #[key(timestamp)]
    listed_at: i64,
    #[serde(rename = "headline")]
    title: String,
    r#type: String,
    #[serde(skip)]
    views_cache: u32,
    price_cents: i64,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

const T: i64 = 1_700_000_000_000;

fn listing(slug: &str, title: &str, ty: &str, cache: u32, price: i64, fetched: i64) -> Listing {
    Listing {
        slug: slug.into(),
        listed_at: T,
        title: title.into(),
        r#type: ty.into(),
        views_cache: cache,
        price_cents: price,
        fetched_at: fetched,
    }
}

/// The values of the v1 collection, and the `_nk_hash` a v1 writer stored for each: computed
/// by natural-key before content hash v2 existed (commit 65b73d7, where `Listing` was hashed
/// by its Rust fields: `slug`, `listed_at`, `title`, `r#type`, `views_cache`, `price_cents`),
/// and reproduced by scripts/content_hash.py. Golden: they never change.
fn v1_written() -> [(Listing, &'static str); 3] {
    [
        (
            listing("loft-3b", "Sunny loft", "rent", 0, 250_000, 1),
            "c9eaaa2acff125ebc94f899dc992603dd99b27f714c90c989b4ff1b90845c574",
        ),
        (
            listing("loft-3b", "Sunny loft", "rent", 41, 250_000, 99),
            "20e90f1f6c514840c59f0596dd1294a90cfef457de130253129e44c081fd2873",
        ),
        (
            listing("barn-7", "Old barn, new roof", "sale", 0, 31_000_000, 0),
            "0b76296aa029a720b140a424b643430df29bc2ad08969fcdf9e3d5ec0baeb7af",
        ),
    ]
}

async fn listings(test: &str) -> (Collection<Listing>, support::Commands) {
    let (db, commands) = support::database(test).await;
    let coll = Collection::new(db.collection::<Listing>("listings"))
        .await
        .unwrap();
    commands.reset();
    (coll, commands)
}

/// What a v1 writer stored for `l`: its serde form, `_id`, identity, and the v1 hash.
fn v1_document(l: &Listing, v1_hash: &str) -> Document {
    let mut d = doc! { "_id": l.id().unwrap().to_string() };
    d.extend(natural_key::bson::to_document(l).unwrap());
    d.insert(IDENTITY_FIELD, l.identity().unwrap().to_string());
    d.insert(HASH_FIELD, v1_hash);
    d
}

async fn stored_hash(coll: &Collection<Listing>, l: &Listing) -> String {
    let d = coll
        .inner()
        .clone_with_type::<Document>()
        .find_one(doc! { "_id": l.id().unwrap().to_string() })
        .await
        .unwrap()
        .expect("stored");
    d.get_str(HASH_FIELD).unwrap().to_string()
}

#[test]
fn the_golden_v1_hashes_are_the_v1_walk() {
    for (l, v1) in v1_written() {
        let v1: ContentHash = v1.parse().unwrap();
        assert_eq!(l.__content_hash_v1(), Some(v1));
        assert_ne!(l.content_hash().unwrap(), v1, "Listing is hashed v2");
    }
}

#[tokio::test]
async fn a_v1_collection_is_unchanged_until_its_content_changes() {
    let (coll, commands) = listings("upgrade").await;
    let [(loft, loft_v1), (_, _), (barn, barn_v1)] = v1_written();
    coll.inner()
        .clone_with_type::<Document>()
        .insert_many([v1_document(&loft, loft_v1), v1_document(&barn, barn_v1)])
        .await
        .unwrap();
    commands.reset();

    // The same values, one by one and as a batch: unchanged, and nothing is written.
    for l in [&loft, &barn] {
        assert_eq!(
            coll.upsert(l).await.unwrap(),
            UpsertOutcome::Unchanged(l.id().unwrap())
        );
    }
    let r = coll
        .upsert_many(&[loft.clone(), barn.clone()])
        .await
        .unwrap();
    assert_eq!((r.inserted, r.updated, r.unchanged), (0, 0, 2));
    assert_eq!(commands.writes(), 0, "{:?}", commands.sequence());
    assert_eq!(
        stored_hash(&coll, &loft).await,
        loft_v1,
        "the v1 hash stays"
    );

    // The audit counts them clean, not as hash drift.
    let report = coll.audit().await.unwrap();
    assert_eq!((report.clean, report.hash_drift.count), (2, 0), "{report}");
    assert!(report.is_clean(), "{report}");

    // A real change writes, and the stored hash becomes the v2 hash.
    let cheaper = Listing {
        price_cents: 240_000,
        ..loft.clone()
    };
    commands.reset();
    assert_eq!(
        coll.upsert(&cheaper).await.unwrap(),
        UpsertOutcome::Updated(loft.id().unwrap())
    );
    assert_eq!(commands.writes(), 1);
    assert_eq!(
        stored_hash(&coll, &loft).await,
        cheaper.content_hash().unwrap().to_string()
    );
    assert_eq!(stored_hash(&coll, &barn).await, barn_v1, "untouched");
    let back: Listing = coll
        .inner()
        .find_one(doc! { "_id": loft.id().unwrap().to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        back,
        Listing {
            views_cache: 0,
            ..cheaper.clone()
        }
    );
    commands.reset();
    assert_eq!(
        coll.upsert(&cheaper).await.unwrap(),
        UpsertOutcome::Unchanged(loft.id().unwrap())
    );
    assert_eq!(commands.writes(), 0);
}

/// The one write an upgrade can cost: v1 hashed fields that are not stored (`views_cache`),
/// so a value that differs from the stored one only there matches neither hash. It is written
/// once, under its v2 hash; from then on such changes are unchanged.
#[tokio::test]
async fn a_change_only_v1_saw_is_written_once() {
    let (coll, commands) = listings("v1_only_change").await;
    let [(loft, loft_v1), (recounted, recounted_v1), _] = v1_written();
    assert_ne!(loft_v1, recounted_v1);
    assert_eq!(
        loft.content_hash().unwrap(),
        recounted.content_hash().unwrap()
    );
    coll.inner()
        .clone_with_type::<Document>()
        .insert_one(v1_document(&loft, loft_v1))
        .await
        .unwrap();
    commands.reset();
    assert_eq!(
        coll.upsert(&recounted).await.unwrap(),
        UpsertOutcome::Updated(loft.id().unwrap())
    );
    assert_eq!(commands.writes(), 1);
    assert_eq!(
        stored_hash(&coll, &loft).await,
        recounted.content_hash().unwrap().to_string()
    );
    commands.reset();
    for cache in [0, 7, 41] {
        let l = Listing {
            views_cache: cache,
            ..recounted.clone()
        };
        assert_eq!(
            coll.upsert(&l).await.unwrap(),
            UpsertOutcome::Unchanged(loft.id().unwrap())
        );
    }
    assert_eq!(commands.writes(), 0);
}

#[tokio::test]
async fn fields_serde_does_not_store_or_skip_hash_never_write() {
    let (coll, commands) = listings("not_stored").await;
    let l = listing("cabin-1", "Cabin", "rent", 0, 90_000, 0);
    let id = l.id().unwrap();
    assert_eq!(coll.upsert(&l).await.unwrap(), UpsertOutcome::Inserted(id));
    commands.reset();
    for (cache, fetched) in [(1, 0), (0, 5), (99, 99)] {
        let again = Listing {
            views_cache: cache,
            fetched_at: fetched,
            ..l.clone()
        };
        assert_eq!(
            coll.upsert(&again).await.unwrap(),
            UpsertOutcome::Unchanged(id)
        );
    }
    assert_eq!(commands.writes(), 0);
    // A raw identifier's field is stored, and hashed, as `type`.
    let sold = Listing {
        r#type: "sale".into(),
        ..l.clone()
    };
    assert_eq!(
        coll.upsert(&sold).await.unwrap(),
        UpsertOutcome::Updated(id)
    );
    let stored = coll
        .inner()
        .clone_with_type::<Document>()
        .find_one(doc! { "_id": id.to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.get_str("type").unwrap(), "sale");
    assert!(!stored.contains_key("viewsCache"));
}
