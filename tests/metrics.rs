//! The `metrics` feature against the real engine: exact counter values as a recorder sees them,
//! per collection, for single and batch writes, errors and retries.

mod support;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use natural_key::metrics::{ERRORS_TOTAL, OUTCOMES_TOTAL, RETRIES_TOTAL};
use natural_key::prelude::*;
use natural_key::{Collection, RetryPolicy};
use support::proxy::{self, Faults, Proxy};

#[derive(NaturalKey, Serialize, Deserialize, Clone)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

fn post(slug: &str, body: &str) -> Post {
    Post {
        slug: slug.into(),
        published_at: 1_700_000_000_000,
        body: body.into(),
    }
}

type Counter = (String, Vec<(String, String)>, u64);

/// One recorder for the test binary (a process has one global recorder); the tests tell their
/// counters apart by the `collection` label, each using a database of its own.
fn snapshotter() -> &'static Snapshotter {
    static S: OnceLock<Snapshotter> = OnceLock::new();
    S.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

/// Every counter whose `collection` label is `ns`: (name, labels other than collection, total).
/// A snapshot resets the counters it reads and the tests run in parallel, so every snapshot
/// is added into one running total.
fn counters(ns: &str) -> Vec<Counter> {
    /// (name, labels) → running total.
    type Totals = BTreeMap<(String, Vec<(String, String)>), u64>;
    static TOTALS: Mutex<Totals> = Mutex::new(BTreeMap::new());
    let mut totals = TOTALS.lock().unwrap();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let DebugValue::Counter(n) = value else {
            panic!("{} is not a counter", key.name());
        };
        let labels = key
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        *totals.entry((key.name().to_string(), labels)).or_default() += n;
    }
    totals
        .iter()
        .filter(|((_, labels), _)| labels.iter().any(|(k, v)| k == "collection" && v == ns))
        .map(|((name, labels), n)| {
            let rest = labels
                .iter()
                .filter(|(k, _)| k != "collection")
                .cloned()
                .collect();
            (name.clone(), rest, *n)
        })
        .collect()
}

fn c(name: &str, labels: &[(&str, &str)], n: u64) -> Counter {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (name.to_string(), labels, n)
}

fn outcome(operation: &str, outcome: &str, n: u64) -> Counter {
    c(
        OUTCOMES_TOTAL,
        &[("operation", operation), ("outcome", outcome)],
        n,
    )
}

#[tokio::test]
async fn upserts_count_each_outcome_and_error_per_collection() {
    snapshotter();
    let (db, _) = support::database("upserts").await;
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let ns = format!("{}.posts", db.name());

    posts.upsert(&post("a", "1")).await.unwrap(); // inserted
    posts.upsert(&post("a", "1")).await.unwrap(); // unchanged
    posts.upsert(&post("a", "2")).await.unwrap(); // updated
    let nul = post("b\0", "1");
    assert!(matches!(
        posts.upsert(&nul).await,
        Err(natural_key::Error::Key(_))
    ));
    let mut moved = post("a", "2");
    moved.published_at += 1;
    assert!(matches!(
        posts.upsert(&moved).await,
        Err(natural_key::Error::ImmutableKeyChanged { .. })
    ));

    // A batch: two new, one unchanged, one edited, one bad key (reported at its index).
    let batch = [
        post("c", "1"),
        post("d", "1"),
        post("a", "2"),
        post("e\0", "1"),
    ];
    let report = posts.upsert_many(&batch).batch_size(2).await.unwrap();
    assert_eq!(
        (report.inserted, report.unchanged, report.failures.len()),
        (2, 1, 1)
    );
    let edited = [post("c", "2")];
    posts.upsert_many(&edited).await.unwrap();

    assert_eq!(
        counters(&ns),
        vec![
            c(
                ERRORS_TOTAL,
                &[("operation", "upsert"), ("kind", "immutable_key_changed")],
                1
            ),
            c(ERRORS_TOTAL, &[("operation", "upsert"), ("kind", "key")], 2),
            outcome("upsert", "inserted", 3),
            outcome("upsert", "unchanged", 2),
            outcome("upsert", "updated", 2),
        ]
    );
}

#[tokio::test]
async fn inserts_count_inserted_and_already_applied() {
    snapshotter();
    let (db, _) = support::database("inserts").await;
    let clicks = Collection::<Click>::open(&db, "clicks").await.unwrap();
    let ns = format!("{}.clicks", db.name());

    let click = Click {
        id: Ulid::new(),
        page: "/".into(),
    };
    clicks.insert(&click).await.unwrap();
    clicks.insert(&click).await.unwrap();
    let more = [
        Click {
            id: Ulid::new(),
            page: "/a".into(),
        },
        click,
    ];
    clicks.insert_many(&more).await.unwrap();

    assert_eq!(
        counters(&ns),
        vec![
            outcome("insert", "already_applied", 2),
            outcome("insert", "inserted", 2),
        ]
    );
}

#[tokio::test]
async fn each_retry_is_counted_with_the_error_that_caused_it() {
    snapshotter();
    let (db, _) = support::database("retries").await;
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 7).await;
    let through = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(db.name());
    let posts = Collection::<Post>::open(&through, "posts").await.unwrap();
    let ns = format!("{}.posts", db.name());
    let policy = RetryPolicy::default().max_attempts(3);

    // The insert lands and its acknowledgement is lost: the retry reads the stored document,
    // finds its own write token on it and sends nothing more — the call inserted it.
    proxy.set_faults(Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    });
    let landed = posts.upsert(&post("a", "1")).retry(policy).await.unwrap();
    assert!(matches!(landed, UpsertOutcome::Inserted(_)), "{landed}");

    // Every write is lost before the server sees it: three attempts, two retries, one error.
    proxy.set_faults(Faults {
        drop_request: 1.0,
        ..Faults::none()
    });
    let lost = posts
        .upsert(&post("b", "1"))
        .retry(policy)
        .await
        .unwrap_err();
    assert!(lost.is_transient(), "{lost}");
    proxy.set_faults(Faults::none());

    assert_eq!(
        counters(&ns),
        vec![
            c(
                ERRORS_TOTAL,
                &[("operation", "upsert"), ("kind", lost.kind())],
                1
            ),
            outcome("upsert", "inserted", 1),
            c(
                RETRIES_TOTAL,
                &[("operation", "upsert"), ("kind", lost.kind())],
                3
            ),
        ]
    );
}
