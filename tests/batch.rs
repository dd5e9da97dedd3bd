//! Batch and streaming writes against the real engine.

mod support;

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};

use natural_key::bson::{doc, Document};
use natural_key::prelude::*;
use natural_key::{Collection, Error, KeyError};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

fn corpus(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("post-{i:05}"),
            lang: ["en", "zh-TW", "ja", "ko"][i % 4].into(),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            body: format!("body of post {i}"),
        })
        .collect()
}

/// The question a large first batch asks before it decides how to start: one `_id` of the
/// whole collection, in a single batch.
fn assert_probe(find: &Document) {
    assert_eq!(find.get_document("filter").unwrap(), &doc! {}, "{find}");
    assert_eq!(
        find.get_document("projection").unwrap(),
        &doc! { "_id": 1 },
        "{find}"
    );
    assert_eq!(find.get_i64("limit").unwrap(), 1, "{find}");
    assert!(find.get_bool("singleBatch").unwrap(), "{find}");
}

async fn posts(test: &str) -> (Collection<Post>, support::Commands) {
    let (db, commands) = support::database(test).await;
    let coll = Collection::new(db.collection::<Post>("posts"))
        .await
        .unwrap();
    commands.reset();
    (coll, commands)
}

#[tokio::test]
async fn ingest_reingest_and_one_percent_changed_in_constant_round_trips() {
    let (coll, commands) = posts("reingest").await;
    let docs = corpus(1000);

    let r = coll.upsert_many(&docs).batch_size(250).await.unwrap();
    assert_eq!(
        (r.inserted, r.updated, r.unchanged, r.failures.len()),
        (1000, 0, 0, 0)
    );
    assert_eq!(r.batches, 4);
    assert_eq!(
        commands.sequence()[..2],
        ["find", "insert"],
        "the first batch asks whether the collection is empty, then inserts without a read"
    );
    assert_probe(&commands.documents("find")[0]);
    assert_eq!(
        commands.count("find"),
        1,
        "no batch reads its identities: the first found the collection empty, the others \
         follow a batch that was all new"
    );
    assert_eq!(
        commands.count("insert"),
        4,
        "new documents: one insert command per batch"
    );
    assert_eq!(commands.count("update"), 0);
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1000);

    commands.reset();
    let r = coll.upsert_many(&docs).batch_size(250).await.unwrap();
    assert_eq!((r.inserted, r.updated, r.unchanged), (0, 0, 1000));
    assert_eq!(
        commands.writes(),
        0,
        "an unchanged re-ingest sends no write command"
    );
    let finds = commands.documents("find");
    assert_eq!(finds.len(), 5, "the probe, then each batch reads");
    assert_probe(&finds[0]);
    assert!(finds[1..].iter().all(|f| f
        .get_document("filter")
        .unwrap()
        .contains_key("_nk_identity")));

    let mut changed = docs.clone();
    for p in changed.iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
    }
    commands.reset();
    let r = coll
        .upsert_many(changed.iter())
        .batch_size(250)
        .await
        .unwrap();
    assert_eq!((r.inserted, r.updated, r.unchanged), (0, 10, 990));
    assert_eq!(
        commands.count("update"),
        4,
        "changed documents: one update command per batch"
    );
    assert_eq!(commands.count("insert"), 0);
    for p in changed.iter().step_by(100) {
        let stored = coll
            .inner()
            .find_one(doc! { "_id": p.id().unwrap().to_string() })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&stored, p);
    }
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1000);
}

#[tokio::test]
async fn bad_documents_are_reported_at_their_index_and_do_not_stop_the_rest() {
    let (coll, _) = posts("failures").await;
    let mut docs = corpus(20);
    coll.upsert_many(&docs[..10]).await.unwrap();
    docs[3].slug = "nul\0byte".into();
    docs[5].published_at = -1;
    docs[7].published_at += 1; // a timestamp edit of a stored post
    docs[12].body = "new".into();
    let r = coll.upsert_many(&docs).batch_size(6).await.unwrap();
    let indexes: Vec<usize> = r.failures.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, vec![3, 5, 7]);
    assert!(matches!(
        r.failures[0].1,
        Error::Key(KeyError::NulByte { .. })
    ));
    assert!(matches!(
        r.failures[1].1,
        Error::Key(KeyError::TimestampOutOfRange { .. })
    ));
    match &r.failures[2].1 {
        Error::ImmutableKeyChanged { key, .. } => assert!(key.contains("post-00007"), "{key}"),
        e => panic!("expected ImmutableKeyChanged, got {e:?}"),
    }
    assert_eq!((r.inserted, r.updated, r.unchanged), (10, 0, 7));
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 20);
    let stored = coll
        .inner()
        .find_one(doc! { "slug": "post-00007" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.published_at,
        corpus(20)[7].published_at,
        "the refused post is untouched"
    );
}

#[tokio::test]
async fn batches_that_start_with_the_insert_still_refuse_forks_and_skip_unchanged() {
    let (coll, commands) = posts("insert_first").await;
    let docs = corpus(40);
    coll.upsert_many(&docs[..20]).await.unwrap();

    // 10 new posts, then — the next batch starting with its insert — a batch holding a
    // timestamp edit of a stored post (index 13), an unchanged stored post (index 15) and an
    // edited stored post (index 17) among 7 new ones.
    let mut input: Vec<Post> = docs[20..37].to_vec();
    let mut fork = docs[3].clone();
    fork.published_at += 1;
    let mut edited = docs[5].clone();
    edited.body = "edited".into();
    input.splice(13..13, [fork]);
    input.splice(15..15, [docs[4].clone()]);
    input.splice(17..17, [edited.clone()]);
    commands.reset();
    let r = coll.upsert_many(&input).batch_size(10).await.unwrap();
    assert_eq!(r.batches, 2);
    let indexes: Vec<usize> = r.failures.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, vec![13]);
    assert!(matches!(r.failures[0].1, Error::ImmutableKeyChanged { .. }));
    assert_eq!((r.inserted, r.updated, r.unchanged), (17, 1, 1));
    assert_eq!(
        commands.sequence(),
        [
            "find",   // batch 1 reads: all new
            "insert", //   and inserts its 10; the handle holds the identity index, so
            "insert", // batch 2 starts with its insert; the engine refuses 3 of 10,
            "find",   //   which are read back and decided:
            "update", //   one edit; one fork refused; one unchanged
        ],
    );

    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 37);
    let stored = coll
        .inner()
        .find_one(doc! { "_id": docs[3].id().unwrap().to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, docs[3], "the refused edit changed nothing");
    let stored = coll
        .inner()
        .find_one(doc! { "_id": docs[5].id().unwrap().to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, edited);
}

#[tokio::test]
async fn a_batch_with_hundreds_of_changed_documents_completes() {
    // FerretDB 1.x hangs on an `update` command of ~100 statements (each statement's query
    // holds one of its 100 SQLite connections until the command ends).
    let (coll, commands) = posts("many_changed").await;
    let mut docs = corpus(300);
    coll.upsert_many(&docs).await.unwrap();
    for p in &mut docs {
        p.body.push_str(" (edited)");
    }
    commands.reset();
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        coll.upsert_many(&docs).into_future(),
    )
    .await
    .expect("the batch completes (no engine deadlock)")
    .unwrap();
    assert_eq!((r.updated, r.failures.len()), (300, 0), "{:?}", r.failures);
    let edited = coll
        .inner()
        .count_documents(doc! { "body": { "$regex": "edited" } })
        .await
        .unwrap();
    assert_eq!(edited, 300);
}

#[tokio::test]
async fn a_batch_means_the_same_as_writing_one_after_another() {
    let (coll, _) = posts("sequential").await;
    let a = corpus(1).remove(0);
    let edited = Post {
        body: "second version".into(),
        ..a.clone()
    };
    let r = coll.upsert_many([&a, &a, &edited]).await.unwrap();
    assert_eq!((r.inserted, r.updated, r.unchanged), (1, 1, 1));
    assert_eq!(
        coll.inner().find_one(doc! {}).await.unwrap().unwrap(),
        edited
    );
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 1);
}

#[tokio::test]
async fn streaming_ingest_reports_progress_per_batch() {
    let (coll, _) = posts("stream").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let docs = futures::stream::iter((0..2000).map(|i| Post {
        slug: format!("s-{i}"),
        lang: "en".into(),
        published_at: 1_600_000_000_000 + i,
        body: "x".repeat(100),
    }));
    let r = coll
        .upsert_stream(docs)
        .batch_size(100)
        .on_progress(move |r| seen2.lock().unwrap().push(r.processed()))
        .await
        .unwrap();
    assert_eq!(r.inserted, 2000);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20);
    assert_eq!(seen, (1..=20).map(|b| b * 100).collect::<Vec<u64>>());
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 2000);
}

#[tokio::test]
async fn racing_batches_over_overlapping_documents_converge() {
    let (coll, _) = posts("race").await;
    let docs = corpus(400);
    let mut tasks = Vec::new();
    for w in 0..4 {
        let coll = coll.clone();
        // Each writer covers an overlapping window, in its own order.
        let mut mine: Vec<Post> = docs[w * 50..w * 50 + 250].to_vec();
        if w % 2 == 1 {
            mine.reverse();
        }
        tasks.push(tokio::spawn(async move {
            coll.upsert_many(mine).batch_size(64).await
        }));
    }
    let mut inserted = 0;
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        inserted += r.inserted;
    }
    assert_eq!(
        inserted, 400,
        "every document inserted exactly once across the writers"
    );
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 400);
}

/// Two writers ingest the same documents at once, one in reverse order, each in one command.
/// FerretDB 2 / DocumentDB runs a command as one PostgreSQL transaction that locks each row
/// and unique-index entry it inserts: in opposite orders the two waited on each other for
/// minutes (measured: still waiting after 6 minutes with 2,000 documents). natural-key sends
/// every command's documents in `_id` order, so the second writer waits for the first at
/// most once and then finds its documents stored.
#[tokio::test(flavor = "multi_thread")]
async fn writers_in_opposite_orders_do_not_wait_on_each_other() {
    let (coll, _) = posts("opposite_orders").await;
    let n = support::env_or("NK_OPPOSITE_DOCS", 2000_usize);
    let docs = corpus(n);
    let mut tasks = Vec::new();
    for reverse in [false, true] {
        let coll = coll.clone();
        let mut mine = docs.clone();
        if reverse {
            mine.reverse();
        }
        tasks.push(tokio::spawn(async move {
            coll.upsert_many(mine).batch_size(n).await
        }));
    }
    let all = futures::future::join_all(tasks);
    let done = tokio::time::timeout(std::time::Duration::from_secs(60), all)
        .await
        .expect("two writers of the same documents still waiting after 60 s");
    let mut inserted = 0;
    for r in done {
        let r = r.unwrap().unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        inserted += r.inserted;
    }
    assert_eq!(inserted, n as u64, "every document inserted once");
    assert_eq!(
        coll.inner().count_documents(doc! {}).await.unwrap(),
        n as u64
    );
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[idempotency_key]
    request: String,
    page: String,
}

#[tokio::test]
async fn events_in_batches_are_stored_once() {
    let (db, commands) = support::database("events").await;
    let coll = Collection::new(db.collection::<Click>("clicks"))
        .await
        .unwrap();
    let clicks: Vec<Click> = (0..300)
        .map(|i| Click {
            id: Ulid::new(),
            request: format!("req-{i}"),
            page: "/".into(),
        })
        .collect();
    let r = coll.insert_many(&clicks).batch_size(100).await.unwrap();
    assert_eq!(
        (r.inserted, r.already_applied, r.failures.len()),
        (300, 0, 0)
    );
    commands.reset();
    let r = coll.insert_many(&clicks).batch_size(100).await.unwrap();
    assert_eq!((r.inserted, r.already_applied), (0, 300));
    assert_eq!(commands.count("insert"), 3);
    // Rebuilt requests (new ids, same idempotency keys) are recognised too.
    let rebuilt: Vec<Click> = clicks
        .iter()
        .take(10)
        .map(|c| Click {
            id: Ulid::new(),
            ..c.clone()
        })
        .collect();
    let r = coll.insert_many(&rebuilt).await.unwrap();
    assert_eq!(r.already_applied, 10);
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 300);
}

/// A batch of more operations than the engine takes in one write command: cut to what it
/// takes. FerretDB 2 says 100,000 in `hello` and refuses more than 25,000 (code 16,
/// "Write batch sizes must be between 1 and 25000"): a batch of 30,000 failed whole there.
#[tokio::test]
async fn a_batch_of_more_operations_than_a_command_takes_is_cut_to_fit() {
    let (coll, commands) = posts("many_ops").await;
    let n = 30_000;
    let docs = corpus(n);
    let r = coll.upsert_many(&docs).batch_size(n).await.unwrap();
    assert_eq!(
        (r.inserted as usize, r.failures.len()),
        (n, 0),
        "{:?}",
        r.failures
    );
    let most = commands
        .documents("insert")
        .iter()
        .map(|c| c.get_array("documents").unwrap().len())
        .max()
        .unwrap();
    let limit = coll.deployment().limits().max_documents;
    assert!(most <= limit, "an insert of {most} documents, over {limit}");
    assert_eq!(
        coll.inner().count_documents(doc! {}).await.unwrap(),
        n as u64
    );
}

#[tokio::test]
async fn large_documents_are_cut_into_batches_and_commands_that_fit() {
    let (coll, commands) = posts("big_docs").await;
    // 40 posts of ~1 MiB: more than one batch (MAX_BATCH_BYTES), and more than one command
    // document (16 MiB) holds.
    let big = |p: Post| Post {
        body: "x".repeat(1 << 20),
        ..p
    };
    let mut docs: Vec<Post> = corpus(40).into_iter().map(big).collect();
    let r = coll.upsert_many(&docs).await.unwrap();
    assert_eq!((r.inserted, r.failures.len()), (40, 0), "{:?}", r.failures);
    assert!(r.batches >= 2, "cut by bytes: {} batches", r.batches);
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 40);

    // 12 MiB of changed documents: more than one `update` command.
    for p in docs.iter_mut().take(12) {
        p.body = "y".repeat(1 << 20);
    }
    commands.reset();
    let r = coll.upsert_many(&docs).await.unwrap();
    assert_eq!(
        (r.updated, r.unchanged, r.failures.len()),
        (12, 28, 0),
        "{:?}",
        r.failures
    );
    assert!(commands.count("update") >= 2, "{:?}", commands.sequence());
    let stored = coll
        .inner()
        .find_one(doc! { "_id": docs[11].id().unwrap().to_string() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, docs[11]);
    let r = coll.upsert_many(&docs).await.unwrap();
    assert_eq!(r.unchanged, 40);

    let (db, _) = support::database("big_events").await;
    let clicks = Collection::new(db.collection::<Click>("clicks"))
        .await
        .unwrap();
    let events: Vec<Click> = (0..40)
        .map(|i| Click {
            id: Ulid::new(),
            request: format!("r{i}"),
            page: "p".repeat(1 << 20),
        })
        .collect();
    let r = clicks.insert_many(&events).await.unwrap();
    assert_eq!((r.inserted, r.failures.len()), (40, 0), "{:?}", r.failures);
    assert!(r.batches >= 2);
    let r = clicks.insert_many(&events).await.unwrap();
    assert_eq!(r.already_applied, 40);
}

/// A handle over `posts` whose detected limits `edit` changes, and the commands it sent.
async fn posts_with(
    test: &str,
    edit: impl FnOnce(natural_key::Limits) -> natural_key::Limits,
) -> (Collection<Post>, support::Commands) {
    let (db, commands) = support::database(test).await;
    let detected = natural_key::Deployment::detect(db.client()).await.unwrap();
    let limits = edit(detected.limits());
    let coll = Collection::new(db.collection::<Post>("posts"))
        .deployment(detected.with_limits(limits))
        .await
        .unwrap();
    (coll, commands)
}

/// The identities a guard read asks for by `$in`; `None` for another read.
fn in_values(find: &Document) -> Option<Vec<String>> {
    let values = find
        .get_document("filter")
        .ok()?
        .get_document(natural_key::IDENTITY_FIELD)
        .ok()?
        .get_array("$in")
        .ok()?;
    Some(
        values
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect(),
    )
}

/// A handle over `n` stored posts with these read bounds, and the sizes of the guard reads
/// (after the first `find`, the question) of an unchanged re-ingest in one batch.
async fn reread_sizes(test: &str, n: usize, least: usize, most: usize) -> Vec<usize> {
    let (coll, commands) = posts_with(test, |limits| natural_key::Limits {
        max_read_identities: most,
        min_read_identities: least,
        span_reads: false,
        ..limits
    })
    .await;
    let docs = corpus(n);
    coll.upsert_many(&docs).batch_size(n).await.unwrap();
    commands.reset();
    let r = coll.upsert_many(&docs).batch_size(n).await.unwrap();
    assert_eq!((r.unchanged, r.failures.len()), (n as u64, 0));
    let finds = commands.documents("find");
    assert_probe(&finds[0]);
    finds[1..]
        .iter()
        .map(|find| in_values(find).expect("a read by identity").len())
        .collect()
}

/// Equal read bounds fix the size: 1,000 pending with 100 per read are ten `find`s, each
/// asking for 100.
#[tokio::test]
async fn a_batch_reads_its_identities_in_reads_of_the_configured_size() {
    let sizes = reread_sizes("read_size", 1000, 100, 100).await;
    assert_eq!(sizes, vec![100; 10], "one read per 100 identities");
}

/// Between unequal bounds the handle measures its reads and picks sizes inside them; every
/// read but a batch's last asks for at least the least, none for more than the most.
#[tokio::test]
async fn measured_reads_stay_within_the_bounds() {
    let sizes = reread_sizes("read_bounds", 1500, 20, 160).await;
    assert_eq!(sizes.iter().sum::<usize>(), 1500, "{sizes:?}");
    let (last, others) = sizes.split_last().unwrap();
    assert!(*last <= 160, "{sizes:?}");
    assert!(others.iter().all(|n| (20..=160).contains(n)), "{sizes:?}");
}

/// A handle over `posts` that may read a batch's span, and the commands it sent.
async fn spanning(test: &str) -> (Collection<Post>, support::Commands) {
    posts_with(test, |limits| natural_key::Limits {
        span_reads: true,
        ..limits
    })
    .await
}

/// The `_id` range of a span read, and its limit; `None` for a read by identity.
fn span_of(find: &Document) -> Option<(String, String, i64)> {
    let range = find.get_document("filter").ok()?.get_document("_id").ok()?;
    let bound = |op: &str| range.get_str(op).unwrap().to_string();
    Some((bound("$gte"), bound("$lte"), find.get_i64("limit").unwrap()))
}

fn id_of(post: &Post) -> String {
    post.id().unwrap().to_string()
}

/// The least and greatest id of `posts`.
fn bounds(posts: &[Post]) -> (String, String) {
    let ids: Vec<String> = posts.iter().map(id_of).collect();
    let least = ids.iter().min().unwrap().clone();
    (least, ids.into_iter().max().unwrap())
}

/// A fresh handle tries its first large batch as a span: one `find` of the `_id` range from
/// the least to the greatest id, at most twice as many documents as it has pending, and
/// nothing else read when that shows every stored document.
#[tokio::test]
async fn a_first_large_read_is_one_span_of_ids() {
    let (coll, commands) = spanning("span_read").await;
    let mut docs = corpus(600);
    coll.upsert_many(&docs[..400]).await.unwrap();
    docs[10].body = "edited".into();
    commands.reset();
    let r = coll.upsert_many(&docs).await.unwrap();
    assert_eq!((r.inserted, r.updated, r.unchanged), (200, 1, 399));
    let finds = commands.documents("find");
    assert_probe(&finds[0]);
    let (least, greatest) = bounds(&docs);
    assert_eq!(span_of(&finds[1]), Some((least, greatest, 1200)));
    assert_eq!(finds.len(), 2, "nothing read but the span: {finds:?}");
    let stored = coll.get(docs[10].id().unwrap()).await.unwrap();
    assert_eq!(stored.unwrap().body, "edited");
}

/// A handle that has measured a span measures the `$in` reads on its next large batch with
/// one read of their size, then reads the rest as a span: never the whole batch by identity
/// (where a read asks for every pending identity, as on FerretDB 1.x, that one read is all).
#[tokio::test]
async fn a_second_large_read_samples_the_in_reads_then_spans_the_rest() {
    let (coll, commands) = spanning("span_sample").await;
    let docs = corpus(600);
    coll.upsert_many(&docs).await.unwrap();
    coll.upsert_many(&docs).await.unwrap();
    commands.reset();
    let r = coll.upsert_many(&docs).await.unwrap();
    assert_eq!((r.unchanged, r.failures.len()), (600, 0));
    let finds = commands.documents("find");
    assert_probe(&finds[0]);
    let sample = in_values(&finds[1]).expect("first the sample, by identity");
    let n = sample.len();
    let first: Vec<String> = docs[..n]
        .iter()
        .map(|p| p.identity().unwrap().to_string())
        .collect();
    assert_eq!(sample, first, "the first pending identities");
    if n < docs.len() {
        let (least, greatest) = bounds(&docs[n..]);
        assert_eq!(span_of(&finds[2]), Some((least, greatest, 1200)));
    }
    let reads = if n < docs.len() { 3 } else { 2 };
    assert_eq!(finds.len(), reads, "the sample and the span: {finds:?}");
}

/// A span finds nothing stored under another `_id`: a post whose timestamp moved from before
/// the batch's least id is taken as new, the identity index refuses its insert, and the next
/// round, reading by identity, refuses the fork. Nothing is written for it.
#[tokio::test]
async fn a_span_misses_a_moved_timestamp_and_the_identity_index_catches_it() {
    let (coll, commands) = spanning("span_fork").await;
    let docs = corpus(300);
    coll.upsert_many(&docs).await.unwrap();
    let mut input = docs.clone();
    input[0].published_at = docs[150].published_at + 1;
    commands.reset();
    let r = coll.upsert_many(&input).await.unwrap();
    let failures: Vec<usize> = r.failures.iter().map(|(i, _)| *i).collect();
    assert_eq!(failures, vec![0]);
    assert!(
        matches!(r.failures[0].1, Error::ImmutableKeyChanged { .. }),
        "{:?}",
        r.failures[0].1
    );
    assert_eq!((r.inserted, r.updated, r.unchanged), (0, 0, 299));
    let finds = commands.documents("find");
    let (least, greatest) = bounds(&input);
    assert!(
        least > id_of(&docs[0]),
        "the stored post lies outside the span"
    );
    assert_eq!(span_of(&finds[1]), Some((least, greatest, 600)));
    let reread = in_values(&finds[2]).expect("a read by identity");
    assert_eq!(reread.len(), 1, "the refused post is read by identity");
    assert_eq!(coll.inner().count_documents(doc! {}).await.unwrap(), 300);
    let stored = coll.get(docs[0].id().unwrap()).await.unwrap();
    assert_eq!(stored.unwrap(), docs[0], "the stored post is untouched");
}

/// A span holding more than twice as many documents as the batch has pending is cut at its
/// limit; what it did not show is read by identity before anything is written.
#[tokio::test]
async fn a_crowded_span_reads_the_rest_by_identity() {
    let (coll, commands) = spanning("span_crowded").await;
    let docs = corpus(900);
    coll.upsert_many(&docs).await.unwrap();
    let batch: Vec<Post> = docs.iter().step_by(3).cloned().collect();
    commands.reset();
    let r = coll.upsert_many(&batch).await.unwrap();
    assert_eq!((r.unchanged, r.failures.len()), (300, 0));
    let sequence = commands.sequence();
    assert!(
        sequence.iter().all(|c| c == "find" || c == "getMore"),
        "nothing written: {sequence:?}"
    );
    let finds = commands.documents("find");
    let (least, greatest) = bounds(&batch);
    assert_eq!(span_of(&finds[1]), Some((least, greatest, 600)));
    let wanted: std::collections::HashSet<String> = batch
        .iter()
        .map(|p| p.identity().unwrap().to_string())
        .collect();
    let reread: Vec<String> = finds[2..]
        .iter()
        .flat_map(|find| in_values(find).expect("a read by identity"))
        .collect();
    assert!(!reread.is_empty(), "the span was cut short");
    assert!(
        reread.len() < 300,
        "only what the span did not show: {}",
        reread.len()
    );
    assert!(reread.iter().all(|i| wanted.contains(i)));
}

/// Four batches in flight over an input that repeats identities from batch to batch, each time
/// with new content: every write of one document lands in input order (the last content is
/// stored), the outcomes are exact (inserted once, updated at every later line), and the
/// report counts every line.
#[tokio::test(flavor = "multi_thread")]
async fn batches_in_flight_keep_each_documents_writes_in_input_order() {
    let (posts, _) = posts("in_flight_order").await;
    let keys = corpus(25);
    let input: Vec<Post> = (0..1_000)
        .map(|i| Post {
            body: format!("version {i}"),
            ..keys[(i * 7) % 25].clone()
        })
        .collect();
    let mut progress = Vec::new();
    let report = posts
        .upsert_many(&input)
        .batch_size(10)
        .in_flight(4)
        .on_progress(|r| progress.push(r.processed()))
        .await
        .unwrap();
    assert_eq!(
        (report.inserted, report.updated, report.failures.len()),
        (25, 975, 0),
        "{report:?}"
    );
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    assert_eq!(progress.last(), Some(&1_000));
    for key in &keys {
        let last = input.iter().rev().find(|p| p.slug == key.slug).unwrap();
        let stored = posts.get(key.id().unwrap()).await.unwrap();
        assert_eq!(stored.as_ref(), Some(last), "{}", key.slug);
    }
}

/// `in_flight(2)` has two batches' writes on the wire at once, asserted at a proxy that holds
/// every write: a second one arrives before the first is answered, which one batch at a time
/// (its commands one after another) never sends. But a batch holding documents of the batch in
/// flight sends nothing until that one is answered.
#[tokio::test(flavor = "multi_thread")]
async fn two_batches_are_on_the_wire_at_once_never_two_writes_of_one_document() {
    use support::proxy::{self, Faults, Proxy};
    let (direct, _) = support::database("in_flight_wire").await;
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 7).await;
    let db = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(direct.name());
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    let docs = corpus(40);
    proxy.gate_writes();
    let writer = {
        let (posts, docs) = (posts.clone(), docs.clone());
        tokio::spawn(async move { posts.upsert_many(&docs).batch_size(10).in_flight(2).await })
    };
    // Two writes held at the gate, none let through: two batches in flight.
    proxy.until_arrived(2).await;
    proxy.admit(1_000);
    let report = writer.await.unwrap().unwrap();
    assert_eq!(
        (report.inserted, report.failures.len()),
        (40, 0),
        "{report:?}"
    );
    assert_eq!(
        support::all_documents(&direct.collection::<Document>("posts"))
            .await
            .len(),
        40
    );

    // A batch holding the documents of a batch in flight waits for it: while the first
    // batch's write (10 new posts) is held, the second (the same 10 posts, edited) sends
    // nothing.
    let new = corpus(50)[40..].to_vec();
    let mut edited = new.clone();
    for p in &mut edited {
        p.body.push_str(" (edited)");
    }
    let input: Vec<Post> = new.iter().chain(&edited).cloned().collect();
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 8).await;
    let db = support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(direct.name());
    let posts = Collection::<Post>::open(&db, "posts").await.unwrap();
    proxy.gate_writes();
    let writer = {
        let posts = posts.clone();
        tokio::spawn(async move { posts.upsert_many(&input).batch_size(10).in_flight(2).await })
    };
    proxy.until_arrived(1).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        proxy.arrived(),
        1,
        "the second batch wrote while the first was held"
    );
    proxy.admit(1_000);
    let report = writer.await.unwrap().unwrap();
    assert_eq!((report.inserted, report.updated), (10, 10), "{report:?}");
    for p in &edited {
        assert_eq!(posts.get(p.id().unwrap()).await.unwrap().as_ref(), Some(p));
    }
}
