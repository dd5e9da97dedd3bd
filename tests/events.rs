//! An event whose `_id` or idempotency key is already stored (against the real engine): the
//! same payload again is `AlreadyApplied`, another payload is refused with
//! `Error::IdempotencyKeyReused` and nothing is written (docs/crate.md, "The same id, another
//! payload").

mod support;

use std::collections::BTreeMap;

use natural_key::bson::{doc, Bson, Document};
use natural_key::prelude::*;
use natural_key::{Collection, Error, IDEMPOTENCY_FIELD};

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Payment {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[idempotency_key]
    request_id: String,
    amount_cents: i64,
    currency: String,
}

fn payment(request: &str, amount_cents: i64) -> Payment {
    Payment {
        id: Ulid::new(),
        request_id: request.into(),
        amount_cents,
        currency: "EUR".into(),
    }
}

/// A client that lost the reply rebuilds the request: a new id, the same key and payload.
fn rebuilt(p: &Payment) -> Payment {
    Payment {
        id: Ulid::new(),
        ..p.clone()
    }
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

async fn open<T: RandomId + for<'de> Deserialize<'de> + Send + Sync + 'static>(
    test: &str,
    name: &str,
) -> Collection<T> {
    let (db, _) = support::database(test).await;
    Collection::new(db.collection::<T>(name)).await.unwrap()
}

/// Every stored document, as stored (sorted by `_id`).
async fn stored<T: Send + Sync>(coll: &Collection<T>) -> Vec<Document> {
    support::all_documents(&coll.inner().clone_with_type::<Document>()).await
}

/// The refusal's fields, asserting it is one.
fn reused(result: Result<InsertOutcome, Error>) -> (Ulid, Option<String>, Ulid, Vec<String>) {
    match result {
        Err(e @ Error::IdempotencyKeyReused { .. }) => {
            assert!(!e.is_transient(), "{e}");
            assert_eq!(e.kind(), "idempotency_key_reused");
            let text = e.to_string();
            let Error::IdempotencyKeyReused {
                id,
                key,
                attempted,
                fields,
                ..
            } = e
            else {
                unreachable!()
            };
            for f in &fields {
                assert!(text.contains(f.as_str()), "{text} names {f}");
            }
            assert!(text.contains(&id.to_string()), "{text}");
            (id, key, attempted, fields)
        }
        other => panic!("expected IdempotencyKeyReused, got {other:?}"),
    }
}

#[tokio::test]
async fn another_payload_under_a_stored_key_is_refused_and_nothing_is_written() {
    let payments = open::<Payment>("reused_key", "payments").await;
    let first = payment("req-1", 100);
    assert_eq!(
        payments.insert(&first).await.unwrap(),
        InsertOutcome::Inserted(first.id)
    );
    let before = stored(&payments).await;

    // The same key for another request (another amount), with a fresh id.
    let other = Payment {
        amount_cents: 250,
        ..rebuilt(&first)
    };
    for result in [
        payments.insert(&other).await,
        other.upsert(&payments).await,
        payments
            .insert(&other)
            .retry(natural_key::RetryPolicy::default())
            .await,
    ] {
        let (id, key, attempted, fields) = reused(result);
        assert_eq!(id, first.id, "names the stored event");
        assert_eq!(key.as_deref(), Some("req-1"));
        assert_eq!(attempted, other.id);
        assert_eq!(fields, ["amount_cents"]);
    }
    // Two fields differ: both are named.
    let changed = Payment {
        currency: "USD".into(),
        amount_cents: 1,
        ..rebuilt(&first)
    };
    let (_, _, _, fields) = reused(payments.insert(&changed).await);
    assert_eq!(fields, ["amount_cents", "currency"]);

    assert_eq!(stored(&payments).await, before, "nothing written");
}

#[tokio::test]
async fn the_same_payload_under_a_stored_key_or_id_is_already_applied() {
    let payments = open::<Payment>("same_payload", "payments").await;
    let first = payment("req-1", 100);
    payments.insert(&first).await.unwrap();
    let before = stored(&payments).await;
    assert_eq!(
        payments.insert(&rebuilt(&first)).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.id),
        "a new id, the same key and payload"
    );
    assert_eq!(
        rebuilt(&first).upsert(&payments).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.id)
    );
    assert_eq!(
        payments.insert(&first).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.id),
        "the same value again"
    );
    assert_eq!(stored(&payments).await, before);
}

#[tokio::test]
async fn another_payload_under_a_stored_id_is_refused() {
    let clicks = open::<Click>("reused_id", "clicks").await;
    let c = Click {
        id: Ulid::new(),
        page: "/".into(),
    };
    clicks.insert(&c).await.unwrap();
    let before = stored(&clicks).await;
    let other = Click {
        page: "/pricing".into(),
        ..c.clone()
    };
    let (id, key, attempted, fields) = reused(clicks.insert(&other).await);
    assert_eq!((id, key, attempted), (c.id, None, c.id));
    assert_eq!(fields, ["page"]);
    assert_eq!(stored(&clicks).await, before);

    // The same id under another idempotency key is another request, whatever its payload.
    let payments = open::<Payment>("reused_id_key", "payments").await;
    let first = payment("req-1", 100);
    payments.insert(&first).await.unwrap();
    let before = stored(&payments).await;
    let other_key = Payment {
        request_id: "req-2".into(),
        ..first.clone()
    };
    let (id, key, attempted, fields) = reused(payments.insert(&other_key).await);
    assert_eq!(
        (id, key.as_deref(), attempted),
        (first.id, Some("req-1"), first.id)
    );
    assert_eq!(fields, [IDEMPOTENCY_FIELD]);
    assert_eq!(stored(&payments).await, before);
}

/// In a batch the refused events are failures at their indexes; the others are written or
/// already applied, in the same calls.
#[tokio::test]
async fn a_batch_refuses_its_reused_keys_and_writes_the_rest() {
    let payments = open::<Payment>("batch", "payments").await;
    let a = payment("req-a", 100);
    let b = payment("req-b", 200);
    let c = payment("req-c", 300);
    let r = payments.insert_many([&a, &b, &c]).await.unwrap();
    assert_eq!(r.inserted, 3);
    let before = stored(&payments).await;

    let fresh = payment("req-d", 400);
    let input = vec![
        fresh.clone(), // 0: new
        Payment {
            // 1: key a, another amount
            amount_cents: 101,
            ..rebuilt(&a)
        },
        rebuilt(&b), // 2: key b, same payload
        c.clone(),   // 3: the same value again
        Payment {
            // 4: id of b, another amount
            amount_cents: 201,
            ..b.clone()
        },
    ];
    for (round, report) in [
        payments.insert_many(&input).await.unwrap(),
        // Again, one at a time per batch: the new one is now already applied.
        payments.insert_many(&input).batch_size(1).await.unwrap(),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(
            (report.inserted, report.already_applied),
            (
                if round == 0 { 1 } else { 0 },
                if round == 0 { 2 } else { 3 }
            ),
            "round {round}: {report:?}"
        );
        let failed: Vec<usize> = report.failures.iter().map(|(i, _)| *i).collect();
        assert_eq!(failed, [1, 4], "round {round}");
        let mut failures = report.failures.into_iter();
        let (_, e1) = failures.next().unwrap();
        let (id, key, attempted, fields) = reused(Err(e1));
        assert_eq!(
            (id, key.as_deref(), attempted),
            (a.id, Some("req-a"), input[1].id)
        );
        assert_eq!(fields, ["amount_cents"]);
        let (_, e4) = failures.next().unwrap();
        let (id, key, _, fields) = reused(Err(e4));
        assert_eq!((id, key.as_deref()), (b.id, Some("req-b")));
        assert_eq!(fields, ["amount_cents"]);
    }
    let mut expected = before;
    let fresh_stored = payments
        .inner()
        .clone_with_type::<Document>()
        .find_one(doc! { "_id": fresh.id.to_string() })
        .await
        .unwrap()
        .expect("the new event is stored");
    expected.push(fresh_stored);
    expected.sort_by_key(|d| d.get("_id").map(ToString::to_string));
    assert_eq!(
        stored(&payments).await,
        expected,
        "only the new event was written"
    );
}

/// An event stored by another writer (or an earlier version: no `_nk_write`) in another
/// representation of the same values — an `int32` for an `i64`, its fields and a nested
/// document's in another order — holds the same payload: the content hash's rules decide.
#[tokio::test]
async fn representations_the_content_hash_equates_are_the_same_payload() {
    #[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
    struct Order {
        #[id]
        #[serde(rename = "_id")]
        id: Ulid,
        #[idempotency_key]
        request_id: String,
        amount_cents: i64,
        ratio: f64,
        lines: BTreeMap<String, i64>,
    }
    let orders = open::<Order>("representations", "orders").await;
    let raw = orders.inner().clone_with_type::<Document>();
    let stored_id = Ulid::new();
    let by_hand = |amount_cents: Bson| {
        let mut d = doc! {
            "lines": { "b": 2i32, "a": 1i64 },
            "ratio": 0.0f64,
            "amount_cents": amount_cents,
            "request_id": "req-1",
            "_id": stored_id.to_string(),
        };
        d.insert(IDEMPOTENCY_FIELD, "req-1");
        d
    };
    raw.insert_one(by_hand(Bson::Int32(100))).await.unwrap();
    let order = Order {
        id: Ulid::new(),
        request_id: "req-1".into(),
        amount_cents: 100,
        ratio: -0.0,
        lines: [("a".to_string(), 1), ("b".to_string(), 2)].into(),
    };
    assert_eq!(
        orders.insert(&order).await.unwrap(),
        InsertOutcome::AlreadyApplied(stored_id)
    );
    // A double is not an integer, under the content hash as here. (Replaced, not `$set`:
    // mongo-java-server keeps the stored int32 when `$set` gives an equal double.)
    raw.delete_one(doc! { "_id": stored_id.to_string() })
        .await
        .unwrap();
    raw.insert_one(by_hand(Bson::Double(100.0))).await.unwrap();
    let as_double = Order {
        id: Ulid::new(),
        ..order.clone()
    };
    let (id, _, _, fields) = reused(orders.insert(&as_double).await);
    assert_eq!((id, fields), (stored_id, vec!["amount_cents".to_string()]));
    assert_eq!(raw.count_documents(doc! {}).await.unwrap(), 1);
}

/// A `skip_hash` field is not payload: each retry of one request may set it anew. Found under
/// its stored name (`rename_all`), as is the `#[id]` field stored under a name of its own
/// beside `_id`.
#[tokio::test]
async fn skip_hash_fields_and_the_id_field_are_not_payload() {
    #[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Delivery {
        #[id]
        delivery_id: Ulid,
        #[idempotency_key]
        request_id: String,
        amount_cents: i64,
        #[natural_key(skip_hash)]
        received_at: i64,
    }
    let deliveries = open::<Delivery>("skip_hash", "deliveries").await;
    let first = Delivery {
        delivery_id: Ulid::new(),
        request_id: "req-1".into(),
        amount_cents: 100,
        received_at: 1,
    };
    deliveries.insert(&first).await.unwrap();
    let before = stored(&deliveries).await;
    assert!(before[0].contains_key("deliveryId") && before[0].contains_key("receivedAt"));
    let retry = Delivery {
        delivery_id: Ulid::new(),
        received_at: 2,
        ..first.clone()
    };
    assert_eq!(
        deliveries.insert(&retry).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.delivery_id)
    );
    let same_id = Delivery {
        received_at: 3,
        ..first.clone()
    };
    assert_eq!(
        deliveries.insert(&same_id).await.unwrap(),
        InsertOutcome::AlreadyApplied(first.delivery_id)
    );
    let other = Delivery {
        amount_cents: 101,
        ..retry.clone()
    };
    let (id, _, _, fields) = reused(deliveries.insert(&other).await);
    assert_eq!(
        (id, fields),
        (first.delivery_id, vec!["amountCents".to_string()])
    );
    assert_eq!(stored(&deliveries).await, before);
}
