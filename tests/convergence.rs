//! Convergence under lost acknowledgements: concurrent writers retrying through the
//! fault-injection proxy (tests/support/proxy.rs) end in exactly the expected state — no
//! duplicate, no lost document, every call `Ok` — and a control with the naive pattern (a fresh
//! random `_id` per attempt) shows the duplicates this guards against.
//!
//! Every write goes through the proxy; the checks read the engine directly. Each test prints one
//! summary line (`CONVERGENCE ...` / `CONTROL ...`) with the measured figures that
//! docs/reliability.md reports. Size: `NK_CONVERGENCE_DOCS` (default 300); the fault-kind and
//! restart tests use a quarter of it. Proxy seed: `NK_CONVERGENCE_SEED`.
//!
//! ```text
//! NK_CONVERGENCE_DOCS=10000 cargo test --release --test convergence -- --nocapture
//! ```

mod support;

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use natural_key::bson::{self, doc, Document};
use natural_key::mongodb::{self, Database};
use natural_key::prelude::*;
use natural_key::{Collection, RetryPolicy, HASH_FIELD, IDEMPOTENCY_FIELD, IDENTITY_FIELD};
use support::engine::{Part, PrivateEngine};
use support::proxy::{self, Faults, Proxy, Stats};

const WRITERS: usize = 4;
/// Documents per `upsert_many` / `insert_many` call, and the batch size inside it.
const CALL_DOCS: usize = 48;
const BATCH: usize = 12;

fn docs_n() -> usize {
    support::env_or("NK_CONVERGENCE_DOCS", 300)
}

fn seed(offset: u64) -> u64 {
    support::env_or("NK_CONVERGENCE_SEED", 20240611u64).wrapping_add(offset)
}

fn lost_acks() -> Faults {
    Faults {
        drop_reply_after_apply: 0.2,
        ..Faults::none()
    }
}

// ---------------------------------------------------------------------------------------------
// Documents

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

/// `n` posts with unique slugs (so a per-slug count finds any duplicate).
fn corpus(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("conv-{i:06}"),
            lang: ["en", "zh-TW", "ja", "de"][i % 4].into(),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            body: format!("final body of post {i}"),
        })
        .collect()
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Delivery {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    #[idempotency_key]
    request: String,
    amount_cents: i64,
}

// ---------------------------------------------------------------------------------------------
// Deterministic randomness (no rand dependency): splitmix64.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// Overlapping shares of `0..n`: each index goes to 2 writers (60%) or 3 (40%), so each
/// writer gets about 60% of the documents, together all of them; each share is shuffled.
fn overlapping_shares(n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = Rng(seed);
    let mut shares = vec![Vec::new(); WRITERS];
    for i in 0..n {
        let k = if rng.below(10) < 6 { 2 } else { 3 };
        let mut writers: Vec<usize> = (0..WRITERS).collect();
        rng.shuffle(&mut writers);
        for &w in &writers[..k] {
            shares[w].push(i);
        }
    }
    for s in &mut shares {
        rng.shuffle(s);
    }
    assert_eq!(
        shares.iter().flatten().collect::<HashSet<_>>().len(),
        n,
        "the shares cover every document"
    );
    shares
}

// ---------------------------------------------------------------------------------------------
// Counting the library's retries: RetryPolicy logs each one at WARN
// ("{what}: transient error, retrying") inside the write's span, whose `collection` field names
// the test's database. A global fmt subscriber writes every event into a line parser.

type RetryCounts = HashMap<String, HashMap<String, u64>>;

fn retry_counts() -> &'static Mutex<RetryCounts> {
    static COUNTS: OnceLock<Mutex<RetryCounts>> = OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

fn install_retry_counter() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        tracing_subscriber::fmt()
            // The write spans are INFO; the retry events WARN.
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "natural_key_runtime=info",
            ))
            .with_ansi(false)
            .without_time()
            .with_writer(|| LineSink(Vec::new()))
            .try_init()
            .expect("install the retry-counting subscriber");
    });
}

/// Receives one formatted event; parses it when dropped.
struct LineSink(Vec<u8>);

impl io::Write for LineSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineSink {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        for line in text.lines() {
            count_retry_line(line);
        }
    }
}

const RETRY_MESSAGE: &str = ": transient error, retrying";

fn count_retry_line(line: &str) {
    let Some(at) = line.find(RETRY_MESSAGE) else {
        return;
    };
    if std::env::var_os("NK_CONVERGENCE_LOG").is_some() {
        eprintln!("{line}");
    }
    let what = line[..at].rsplit(' ').next().unwrap_or("?").to_string();
    let db = line
        .split_once("collection=")
        .and_then(|(_, rest)| rest.split(['.', ' ', '}']).next())
        .unwrap_or("?")
        .to_string();
    *retry_counts()
        .lock()
        .unwrap()
        .entry(db)
        .or_default()
        .entry(what)
        .or_default() += 1;
}

/// Retries logged for writes to `db`, by operation.
fn retries_in(db: &str) -> HashMap<String, u64> {
    retry_counts()
        .lock()
        .unwrap()
        .get(db)
        .cloned()
        .unwrap_or_default()
}

fn total(m: &HashMap<String, u64>) -> u64 {
    m.values().sum()
}

fn by_op(m: &HashMap<String, u64>) -> String {
    let mut v: Vec<_> = m.iter().map(|(k, n)| format!("{k}:{n}")).collect();
    v.sort();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

// ---------------------------------------------------------------------------------------------
// Set-up

/// The test's database (dropped, read directly) and a proxy in front of the engine.
async fn setup(test: &str, faults: Faults, seed: u64) -> (Database, Arc<Proxy>) {
    install_retry_counter();
    let (db, _) = support::database(test).await;
    let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), faults, seed).await;
    (db, Arc::new(proxy))
}

/// A client of its own through the proxy (no retryable writes), on database `name`.
async fn through(proxy: &Proxy, name: &str) -> Database {
    support::client_for(&proxy.uri(), &support::Commands::default())
        .await
        .database(name)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// `posts.upsert(&doc)` / `events.insert(&event)`, one call per document.
    Single,
    /// `upsert_many` / `insert_many` of `CALL_DOCS` documents per call, `BATCH` per batch.
    Batch,
}

#[derive(Default, Debug)]
struct WriterResult {
    calls: u64,
    docs: u64,
    inserted: u64,
    updated: u64,
    unchanged: u64,
    already_applied: u64,
    errors: Vec<String>,
}

impl WriterResult {
    fn count_upsert(&mut self, o: UpsertOutcome) {
        match o {
            UpsertOutcome::Inserted(_) => self.inserted += 1,
            UpsertOutcome::Updated(_) => self.updated += 1,
            UpsertOutcome::Unchanged(_) => self.unchanged += 1,
            other => self
                .errors
                .push(format!("unexpected {other} (no version declared)")),
        }
    }
    fn count_insert(&mut self, o: InsertOutcome) {
        match o {
            InsertOutcome::Inserted(_) => self.inserted += 1,
            InsertOutcome::AlreadyApplied(_) => self.already_applied += 1,
        }
    }
    fn add(&mut self, o: WriterResult) {
        self.calls += o.calls;
        self.docs += o.docs;
        self.inserted += o.inserted;
        self.updated += o.updated;
        self.unchanged += o.unchanged;
        self.already_applied += o.already_applied;
        self.errors.extend(o.errors);
    }
}

async fn write_posts(
    coll: Collection<Post>,
    posts: Vec<Post>,
    mode: Mode,
    policy: RetryPolicy,
) -> WriterResult {
    let mut r = WriterResult::default();
    match mode {
        Mode::Single => {
            for p in &posts {
                r.calls += 1;
                r.docs += 1;
                match coll.upsert(p).retry(policy).await {
                    Ok(o) => r.count_upsert(o),
                    Err(e) => r.errors.push(format!(
                        "upsert {}: {}",
                        p.slug,
                        natural_key::ErrorChain(&e)
                    )),
                }
            }
        }
        Mode::Batch => {
            for chunk in posts.chunks(CALL_DOCS) {
                r.calls += 1;
                r.docs += chunk.len() as u64;
                match coll
                    .upsert_many(chunk)
                    .batch_size(BATCH)
                    .retry(policy)
                    .await
                {
                    Ok(report) => {
                        r.inserted += report.inserted;
                        r.updated += report.updated;
                        r.unchanged += report.unchanged;
                        for (i, e) in report.failures {
                            r.errors.push(format!("upsert_many {}: {e}", chunk[i].slug));
                        }
                    }
                    Err(e) => r
                        .errors
                        .push(format!("upsert_many: {}", natural_key::ErrorChain(&e))),
                }
            }
        }
    }
    r
}

async fn insert_events(
    coll: Collection<Delivery>,
    events: Vec<Delivery>,
    mode: Mode,
    policy: RetryPolicy,
) -> WriterResult {
    let mut r = WriterResult::default();
    match mode {
        Mode::Single => {
            for e in &events {
                r.calls += 1;
                r.docs += 1;
                match coll.insert(e).retry(policy).await {
                    Ok(o) => r.count_insert(o),
                    Err(err) => r.errors.push(format!(
                        "insert {}: {}",
                        e.request,
                        natural_key::ErrorChain(&err)
                    )),
                }
            }
        }
        Mode::Batch => {
            for chunk in events.chunks(CALL_DOCS) {
                r.calls += 1;
                r.docs += chunk.len() as u64;
                match coll
                    .insert_many(chunk)
                    .batch_size(BATCH)
                    .retry(policy)
                    .await
                {
                    Ok(report) => {
                        r.inserted += report.inserted;
                        r.already_applied += report.already_applied;
                        for (i, e) in report.failures {
                            r.errors
                                .push(format!("insert_many {}: {e}", chunk[i].request));
                        }
                    }
                    Err(e) => r
                        .errors
                        .push(format!("insert_many: {}", natural_key::ErrorChain(&e))),
                }
            }
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Verification, directly against the engine

#[derive(Default, Debug)]
struct Check {
    stored: u64,
    /// Documents beyond one per expected key.
    duplicates: u64,
    /// Keys stored more than once.
    duplicated_keys: u64,
    /// Expected keys with no document.
    lost: u64,
    /// Documents with a wrong `_id`, hash, identity or content, or an unexpected key.
    wrong: Vec<String>,
}

impl Check {
    fn assert_exact(&self, expected: usize) {
        assert!(self.wrong.is_empty(), "wrong documents: {:?}", self.wrong);
        assert_eq!(
            (self.duplicates, self.lost),
            (0, 0),
            "duplicates / lost documents"
        );
        assert_eq!(self.stored, expected as u64, "stored documents");
    }
}

/// Counts the keys stored more than once, and the extra documents.
fn tally_duplicates(check: &mut Check, per_key: &HashMap<String, u64>) {
    for &n in per_key.values() {
        if n > 1 {
            check.duplicates += n - 1;
            check.duplicated_keys += 1;
        }
    }
}

async fn check_posts(coll: &mongodb::Collection<Document>, expected: &[Post]) -> Check {
    let by_slug: HashMap<&str, &Post> = expected.iter().map(|p| (p.slug.as_str(), p)).collect();
    let mut check = Check::default();
    let mut per_slug: HashMap<String, u64> = HashMap::new();
    for d in support::all_documents(coll).await {
        check.stored += 1;
        let slug = d.get_str("slug").unwrap_or("<none>").to_string();
        *per_slug.entry(slug.clone()).or_default() += 1;
        let Some(p) = by_slug.get(slug.as_str()) else {
            check.wrong.push(format!("unexpected document {d}"));
            continue;
        };
        let ok = d.get_str("_id").ok() == Some(p.id().unwrap().to_string().as_str())
            && d.get_str(HASH_FIELD).ok() == Some(p.content_hash().unwrap().to_string().as_str())
            && d.get_str(IDENTITY_FIELD).ok() == Some(p.identity().unwrap().to_string().as_str())
            && bson::from_document::<Post>(d.clone()).ok().as_ref() == Some(*p);
        if !ok {
            check.wrong.push(format!("{slug}: stored {d}"));
        }
    }
    check.lost = expected
        .iter()
        .filter(|p| !per_slug.contains_key(&p.slug))
        .count() as u64;
    tally_duplicates(&mut check, &per_slug);
    check
}

/// `allowed`: for each request, the ids any writer may have stored it under.
async fn check_events(
    coll: &mongodb::Collection<Document>,
    expected: &[Delivery],
    allowed: &HashMap<String, HashSet<String>>,
) -> Check {
    let by_request: HashMap<&str, &Delivery> =
        expected.iter().map(|e| (e.request.as_str(), e)).collect();
    let mut check = Check::default();
    let mut per_request: HashMap<String, u64> = HashMap::new();
    for d in support::all_documents(coll).await {
        check.stored += 1;
        let request = d.get_str("request").unwrap_or("<none>").to_string();
        *per_request.entry(request.clone()).or_default() += 1;
        let Some(e) = by_request.get(request.as_str()) else {
            check.wrong.push(format!("unexpected event {d}"));
            continue;
        };
        let ok = d
            .get_str("_id")
            .is_ok_and(|id| allowed[&request].contains(id))
            && d.get_str(IDEMPOTENCY_FIELD).ok() == Some(request.as_str())
            && d.get_i64("amount_cents").ok() == Some(e.amount_cents);
        if !ok {
            check.wrong.push(format!("{request}: stored {d}"));
        }
    }
    check.lost = expected
        .iter()
        .filter(|e| !per_request.contains_key(&e.request))
        .count() as u64;
    tally_duplicates(&mut check, &per_request);
    check
}

// ---------------------------------------------------------------------------------------------
// Figures

fn fault_name(f: Faults) -> String {
    let mut parts = Vec::new();
    for (name, p) in [
        ("drop_reply_after_apply", f.drop_reply_after_apply),
        ("drop_request", f.drop_request),
        ("reset_mid_reply", f.reset_mid_reply),
    ] {
        if p > 0.0 {
            parts.push(format!("{name}={p}"));
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("+")
    }
}

#[allow(clippy::too_many_arguments)]
fn summary(
    label: &str,
    test: &str,
    faults: Faults,
    docs: usize,
    stats: &Stats,
    calls: u64,
    errors: usize,
    retries: &str,
    check: &Check,
    secs: f64,
) {
    println!(
        "{label} test={test} faults={} docs={docs} writers={WRITERS} calls={calls} \
         write_commands={} injected={} (dropped_replies={} dropped_requests={} resets={}) \
         retries={retries} errors={errors} stored={} duplicates={} duplicated_keys={} lost={} \
         wrong={} secs={secs:.1}",
        fault_name(faults),
        stats.writes(),
        stats.faults(),
        stats.replies_dropped,
        stats.requests_dropped,
        stats.resets,
        check.stored,
        check.duplicates,
        check.duplicated_keys,
        check.lost,
        check.wrong.len(),
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// `n` posts written by four overlapping writers through the proxy with `faults`; a third of
/// them is stored beforehand with an older body (so the writers update those: the update path
/// under faults too). `modes[w]` is writer w's mode.
async fn posts_scenario(
    test: &str,
    faults: Faults,
    n: usize,
    modes: [Mode; WRITERS],
    seed: u64,
) -> (Check, WriterResult, Stats) {
    let (db, proxy) = setup(test, Faults::none(), seed).await;
    let direct = Collection::new(db.collection::<Post>("posts"))
        .await
        .unwrap();
    let expected = corpus(n);
    let drafts: Vec<Post> = expected
        .iter()
        .step_by(3)
        .map(|p| Post {
            body: format!("draft of {}", p.slug),
            ..p.clone()
        })
        .collect();
    let r = direct.upsert_many(&drafts).await.unwrap();
    assert_eq!(r.inserted as usize, drafts.len());

    // Each writer opens its handle through the proxy before the faults are on (opening reads
    // the indexes; the deployment is the one the direct handle detected, the same engine).
    let mut handles = Vec::new();
    for _ in 0..WRITERS {
        let coll = through(&proxy, db.name()).await.collection::<Post>("posts");
        handles.push(
            Collection::new(coll)
                .deployment(direct.deployment().clone())
                .await
                .unwrap(),
        );
    }
    proxy.set_faults(faults);
    let shares = overlapping_shares(n, seed);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for ((w, share), coll) in shares.into_iter().enumerate().zip(handles) {
        let posts: Vec<Post> = share.iter().map(|&i| expected[i].clone()).collect();
        tasks.push(tokio::spawn(write_posts(
            coll,
            posts,
            modes[w],
            RetryPolicy::default(),
        )));
    }
    let mut result = WriterResult::default();
    for t in tasks {
        result.add(t.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    proxy.set_faults(Faults::none());
    let stats = proxy.stats();

    let check = check_posts(&db.collection::<Document>("posts"), &expected).await;
    let retries = retries_in(db.name());
    summary(
        "CONVERGENCE",
        test,
        faults,
        n,
        &stats,
        result.calls,
        result.errors.len(),
        &format!("{}[{}]", total(&retries), by_op(&retries)),
        &check,
        secs,
    );
    println!(
        "  {test}: outcomes inserted={} updated={} unchanged={} over {} document writes",
        result.inserted, result.updated, result.unchanged, result.docs
    );

    assert!(
        result.errors.is_empty(),
        "calls failed: {:?}",
        result.errors
    );
    assert_eq!(
        result.inserted + result.updated + result.unchanged,
        result.docs,
        "every document of every call has an outcome"
    );
    check.assert_exact(n);
    // Exact across lost replies and retries: every writer writes the same content, so each
    // new post is created by one call (`Inserted` once) and each draft overwritten by one
    // (`Updated` once); every other write finds its content stored. FerretDB 1.x does not
    // re-check an update's filter atomically: two writers' updates of one draft may both
    // apply, and each reports the write it made.
    assert_eq!(
        result.inserted as usize,
        n - drafts.len(),
        "one Inserted per document created: {result:?}"
    );
    if direct.deployment().engine().is_ferretdb_v1() {
        assert!(result.updated as usize >= drafts.len(), "{result:?}");
    } else {
        assert_eq!(
            result.updated as usize,
            drafts.len(),
            "one Updated per draft overwritten: {result:?}"
        );
    }
    if faults != Faults::none() {
        assert!(stats.faults() > 0, "the proxy injected no fault: {stats:?}");
        // Each fault fails exactly one attempt of one call, which the policy retries.
        assert!(
            total(&retries) >= stats.faults(),
            "{} faults injected, {} retries",
            stats.faults(),
            total(&retries)
        );
    }
    (check, result, stats)
}

/// `n` events; four writers over overlapping shares: writers 0 and 2 send the events as
/// created (same ids), writers 1 and 3 rebuild each request with a fresh id (only the
/// idempotency key is the same), as a client that lost the reply would.
async fn events_scenario(
    test: &str,
    faults: Faults,
    n: usize,
    modes: [Mode; WRITERS],
    seed: u64,
) -> (Check, WriterResult, Stats) {
    let (db, proxy) = setup(test, Faults::none(), seed).await;
    let direct = Collection::new(db.collection::<Delivery>("deliveries"))
        .await
        .unwrap();
    let expected: Vec<Delivery> = (0..n)
        .map(|i| Delivery {
            id: Ulid::new(),
            request: format!("req-{i:06}"),
            amount_cents: 100 + i as i64,
        })
        .collect();
    let mut allowed: HashMap<String, HashSet<String>> = expected
        .iter()
        .map(|e| (e.request.clone(), HashSet::from([e.id.to_string()])))
        .collect();

    // Each writer opens its handle through the proxy before the faults are on.
    let mut handles = Vec::new();
    for _ in 0..WRITERS {
        let coll = through(&proxy, db.name())
            .await
            .collection::<Delivery>("deliveries");
        handles.push(
            Collection::new(coll)
                .deployment(direct.deployment().clone())
                .await
                .unwrap(),
        );
    }
    proxy.set_faults(faults);
    let shares = overlapping_shares(n, seed ^ 0xE7E7);
    let mut writer_events = Vec::new();
    for (w, share) in shares.into_iter().enumerate() {
        let events: Vec<Delivery> = share
            .iter()
            .map(|&i| {
                let mut e = expected[i].clone();
                if w % 2 == 1 {
                    e.id = Ulid::new();
                    allowed
                        .get_mut(&e.request)
                        .unwrap()
                        .insert(e.id.to_string());
                }
                e
            })
            .collect();
        writer_events.push(events);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for ((w, events), coll) in writer_events.into_iter().enumerate().zip(handles) {
        tasks.push(tokio::spawn(insert_events(
            coll,
            events,
            modes[w],
            RetryPolicy::default(),
        )));
    }
    let mut result = WriterResult::default();
    for t in tasks {
        result.add(t.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    proxy.set_faults(Faults::none());
    let stats = proxy.stats();

    let check = check_events(
        &db.collection::<Document>("deliveries"),
        &expected,
        &allowed,
    )
    .await;
    let retries = retries_in(db.name());
    summary(
        "CONVERGENCE",
        test,
        faults,
        n,
        &stats,
        result.calls,
        result.errors.len(),
        &format!("{}[{}]", total(&retries), by_op(&retries)),
        &check,
        secs,
    );
    println!(
        "  {test}: outcomes inserted={} already_applied={} over {} event writes",
        result.inserted, result.already_applied, result.docs
    );

    assert!(
        result.errors.is_empty(),
        "calls failed: {:?}",
        result.errors
    );
    assert_eq!(
        result.inserted + result.already_applied,
        result.docs,
        "every event of every call has an outcome"
    );
    check.assert_exact(n);
    // Exact across lost replies and retries: the call whose event is stored reports
    // `Inserted` (its token is on the document), every other `AlreadyApplied`.
    assert_eq!(
        result.inserted, n as u64,
        "one Inserted per event stored: {result:?}"
    );
    if faults != Faults::none() {
        assert!(stats.faults() > 0, "the proxy injected no fault: {stats:?}");
        // Each fault fails exactly one attempt of one call, which the policy retries.
        assert!(
            total(&retries) >= stats.faults(),
            "{} faults injected, {} retries",
            stats.faults(),
            total(&retries)
        );
    }
    (check, result, stats)
}

// ---------------------------------------------------------------------------------------------
// 20% of write acknowledgements lost

#[tokio::test(flavor = "multi_thread")]
async fn single_upserts_converge_under_lost_acks() {
    posts_scenario(
        "upsert_single",
        lost_acks(),
        docs_n(),
        [Mode::Single; WRITERS],
        seed(1),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn batch_upserts_converge_under_lost_acks() {
    posts_scenario(
        "upsert_many",
        lost_acks(),
        docs_n(),
        [Mode::Batch; WRITERS],
        seed(2),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn events_are_stored_once_under_lost_acks() {
    events_scenario(
        "events",
        lost_acks(),
        docs_n(),
        [Mode::Single, Mode::Single, Mode::Batch, Mode::Batch],
        seed(3),
    )
    .await;
}

/// The control: the same faults, four writers, and the pattern natural-key replaces — a fresh
/// random `_id` per attempt, `insert_one`, retry on error. Each document is given to exactly
/// one writer, so without faults there would be exactly one copy of each: every duplicate is
/// a lost acknowledgement turned into a second document.
#[tokio::test(flavor = "multi_thread")]
async fn control_naive_retries_duplicate_under_lost_acks() {
    const ATTEMPTS: u32 = 10;
    let faults = lost_acks();
    let n = docs_n();
    let (db, proxy) = setup("control", faults, seed(4)).await;
    let expected = corpus(n);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let coll = through(&proxy, db.name())
            .await
            .collection::<Document>("posts");
        let mine: Vec<Post> = expected.iter().skip(w).step_by(WRITERS).cloned().collect();
        tasks.push(tokio::spawn(async move {
            let (mut calls, mut retries, mut errors) = (0u64, 0u64, Vec::new());
            for p in &mine {
                calls += 1;
                let mut delay = Duration::from_millis(25);
                for attempt in 1..=ATTEMPTS {
                    let d = doc! {
                        "_id": Ulid::new().to_string(),
                        "slug": &p.slug,
                        "lang": &p.lang,
                        "published_at": p.published_at,
                        "body": &p.body,
                    };
                    match coll.insert_one(d).await {
                        Ok(_) => break,
                        Err(e) if attempt == ATTEMPTS => errors.push(format!("{}: {e}", p.slug)),
                        Err(_) => {
                            retries += 1;
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(2));
                        }
                    }
                }
            }
            (calls, retries, errors)
        }));
    }
    let (mut calls, mut retries, mut errors) = (0, 0, Vec::new());
    for t in tasks {
        let (c, r, e) = t.await.unwrap();
        calls += c;
        retries += r;
        errors.extend(e);
    }
    let secs = start.elapsed().as_secs_f64();
    proxy.set_faults(Faults::none());
    let stats = proxy.stats();

    // Per slug, ignoring the natural-key checks (the naive documents have none of its fields).
    let mut check = Check::default();
    let mut per_slug: HashMap<String, u64> = HashMap::new();
    for d in support::all_documents(&db.collection::<Document>("posts")).await {
        check.stored += 1;
        *per_slug
            .entry(d.get_str("slug").unwrap_or("<none>").to_string())
            .or_default() += 1;
    }
    check.lost = expected
        .iter()
        .filter(|p| !per_slug.contains_key(&p.slug))
        .count() as u64;
    tally_duplicates(&mut check, &per_slug);
    summary(
        "CONTROL",
        "naive_insert_retry",
        faults,
        n,
        &stats,
        calls,
        errors.len(),
        &retries.to_string(),
        &check,
        secs,
    );

    assert!(stats.replies_dropped > 0, "the proxy injected no fault");
    assert!(
        check.duplicates > 0 && check.duplicated_keys > 0,
        "the naive pattern should duplicate under lost acknowledgements: {check:?}"
    );
    assert_eq!(
        check.duplicates, stats.replies_dropped,
        "every lost acknowledgement became exactly one extra document"
    );
}

// ---------------------------------------------------------------------------------------------
// Lost requests and replies cut mid-way: the same guarantees, a quarter of the size. Writers
// 0 and 1 use single calls, 2 and 3 batch calls, racing over the same documents.

const MIXED: [Mode; WRITERS] = [Mode::Single, Mode::Single, Mode::Batch, Mode::Batch];

fn quarter() -> usize {
    (docs_n() / 4).max(20)
}

#[tokio::test(flavor = "multi_thread")]
async fn converges_when_write_requests_are_lost() {
    let faults = Faults {
        drop_request: 0.2,
        ..Faults::none()
    };
    posts_scenario("drop_request_posts", faults, quarter(), MIXED, seed(5)).await;
    events_scenario("drop_request_events", faults, quarter(), MIXED, seed(6)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn converges_when_replies_are_cut_mid_way() {
    let faults = Faults {
        reset_mid_reply: 0.2,
        ..Faults::none()
    };
    posts_scenario("reset_posts", faults, quarter(), MIXED, seed(7)).await;
    events_scenario("reset_events", faults, quarter(), MIXED, seed(8)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn converges_under_all_three_faults_at_once() {
    let faults = Faults {
        drop_reply_after_apply: 0.1,
        drop_request: 0.1,
        reset_mid_reply: 0.1,
    };
    posts_scenario("mixed_posts", faults, quarter(), MIXED, seed(9)).await;
    events_scenario("mixed_events", faults, quarter(), MIXED, seed(10)).await;
}

// ---------------------------------------------------------------------------------------------
// Engine restart mid-run

/// Four batch writers (overlapping) through the proxy; once a few write commands have gone
/// through, at a moment a write command is on the engine, the engine is
/// SIGKILLed, left down for 1.5 s and started again on the same data dir and port. The proxy
/// sees the commands the engine never answered; the job converges to the exact state.
#[tokio::test(flavor = "multi_thread")]
async fn converges_across_an_engine_restart() {
    install_retry_counter();
    let n = quarter().max(100);
    let engine = Arc::new(
        tokio::task::spawn_blocking(|| PrivateEngine::start("convergence-restart"))
            .await
            .unwrap(),
    );
    let name = "nk_convergence_restart";
    let direct_db = support::client_for(&engine.uri, &support::Commands::default())
        .await
        .database(name);
    direct_db.drop().await.unwrap();
    let direct = Collection::new(direct_db.collection::<Post>("posts"))
        .await
        .unwrap();
    let proxy =
        Arc::new(Proxy::start(proxy::upstream_addr(&engine.uri), Faults::none(), seed(11)).await);
    let expected = corpus(n);
    let policy = RetryPolicy::default()
        .max_attempts(30)
        .deadline(Duration::from_secs(60));

    let finished = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for share in overlapping_shares(n, seed(12)) {
        let coll = Collection::new(through(&proxy, name).await.collection::<Post>("posts"))
            .deployment(direct.deployment().clone())
            .await
            .unwrap();
        let posts: Vec<Post> = share.iter().map(|&i| expected[i].clone()).collect();
        let finished = finished.clone();
        tasks.push(tokio::spawn(async move {
            let r = write_posts(coll, posts, Mode::Batch, policy).await;
            finished.fetch_add(1, Ordering::SeqCst);
            r
        }));
    }

    // The kill: early (batch writers send few commands, about n / 6 here, and the job must
    // have work left after the restart), at a moment a write command is on the engine.
    // FerretDB 2 on DocumentDB answers a batch of 12 in a few milliseconds, less than a
    // process takes to start or tokio's timer to tick: a thread watches the proxy without
    // sleeping and fires a kill that is already armed.
    let threshold = ((n / 50) as u64).max(2);
    let armed = engine.arm_kill(Part::Front);
    let (p, f) = (proxy.clone(), finished.clone());
    tokio::task::spawn_blocking(move || {
        while (p.writes_in_flight() == 0 || p.stats().writes() < threshold)
            && f.load(Ordering::SeqCst) < WRITERS
        {
            std::thread::yield_now();
        }
        armed.fire();
    })
    .await
    .unwrap();
    let writes_at_stop = proxy.stats().writes();
    let stopped_at = Instant::now();
    let e = engine.clone();
    tokio::task::spawn_blocking(move || e.kill_all())
        .await
        .unwrap();
    let finished_at_stop = finished.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Counted while the engine is down: the proxy counts only what it forwards, so whatever
    // it counts from here on was served by the restarted engine. (Counted after `restart`
    // returns, the count raced the writers: they may finish during its wait for a ping.)
    let writes_at_restart = proxy.stats().writes();
    let commands_at_restart: u64 = proxy.stats().commands.values().sum();
    let e = engine.clone();
    tokio::task::spawn_blocking(move || e.restart())
        .await
        .unwrap();
    let down = stopped_at.elapsed().as_secs_f64();

    let mut result = WriterResult::default();
    for t in tasks {
        result.add(t.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = proxy.stats();

    // A fresh direct client: the old one's view of the engine predates the restart.
    let fresh = support::client_for(&engine.uri, &support::Commands::default())
        .await
        .database(name);
    let check = check_posts(&fresh.collection::<Document>("posts"), &expected).await;
    let retries = retries_in(name);
    summary(
        "CONVERGENCE",
        "engine_restart",
        Faults::none(),
        n,
        &stats,
        result.calls,
        result.errors.len(),
        &format!("{}[{}]", total(&retries), by_op(&retries)),
        &check,
        secs,
    );
    println!(
        "  engine_restart: killed after {writes_at_stop} write commands with \
         {finished_at_stop}/{WRITERS} writers done, down {down:.1} s (kill + 1.5 s + start), {} \
         write commands after the restart; commands the engine never answered {:?}; outcomes \
         inserted={} updated={} unchanged={}",
        stats.writes() - writes_at_restart,
        stats.unanswered,
        result.inserted,
        result.updated,
        result.unchanged
    );
    // The engine died mid-command: the proxy forwarded commands it never answered. The kill
    // is aimed at a write in flight, and on FerretDB 1.x (every write a scan) it lands on
    // one; FerretDB 2 answers a batch in a few milliseconds, and the kill may land on the
    // reads around it instead (seen in CI: four `find`s). Either way the writers lost a
    // reply mid-call and had to converge.
    let unanswered: u64 = stats.unanswered.values().sum();
    assert!(
        unanswered > 0,
        "no command was on the engine when it was killed: {:?}",
        stats.unanswered
    );

    assert!(
        finished_at_stop < WRITERS,
        "the job was over before the kill"
    );
    assert!(
        stats.commands.values().sum::<u64>() > commands_at_restart,
        "the writers went on after the restart"
    );
    assert!(
        result.errors.is_empty(),
        "calls failed: {:?}",
        result.errors
    );
    assert!(
        total(&retries) > 0,
        "the stop caused no retry: did it happen mid-run?"
    );
    check.assert_exact(n);
    assert_eq!(
        result.inserted, n as u64,
        "one Inserted per document created: {result:?}"
    );
    drop(proxy);
}

// ---------------------------------------------------------------------------------------------
// Exact outcomes, one interleaving at a time: the proxy's gate holds the write commands of one
// writer while another writes, and the faults are set per command.

/// A writer whose first write request was lost (`A`) decides again; before its second write
/// reaches the engine, another writer (`B`) creates the document; `A`'s second write is applied
/// and its reply lost too. Only `B` created the document, so `A` must not report `Inserted`.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_does_not_claim_a_document_another_writer_created() {
    let (direct, _) = support::database("lost_twice").await;
    let b = Collection::new(direct.collection::<Post>("posts"))
        .await
        .unwrap();
    let proxy = Proxy::start(
        proxy::upstream_addr(&support::uri()),
        Faults::none(),
        seed(21),
    )
    .await;
    let a = Collection::new(
        through(&proxy, direct.name())
            .await
            .collection::<Post>("posts"),
    )
    .deployment(b.deployment().clone())
    .await
    .unwrap();
    let post = corpus(1).remove(0);
    proxy.gate_writes();
    let writer = {
        let post = post.clone();
        tokio::spawn(async move {
            let policy = RetryPolicy::default().max_attempts(5);
            a.upsert(&post).retry(policy).await
        })
    };

    // A's first write: never reaches the engine.
    proxy.until_arrived(1).await;
    proxy.set_faults(Faults {
        drop_request: 1.0,
        ..Faults::none()
    });
    proxy.admit(1);
    // A's second write, decided from a read that found nothing, waits while B creates it.
    proxy.until_arrived(2).await;
    assert_eq!(b.upsert(&post).await.unwrap().as_str(), "inserted");
    proxy.set_faults(Faults {
        drop_reply_after_apply: 1.0,
        ..Faults::none()
    });
    proxy.admit(1);
    // Whatever A sends after that goes through with its reply.
    proxy.until_decided(2).await;
    proxy.set_faults(Faults::none());
    proxy.admit(1000);
    let outcome = writer.await.unwrap().unwrap();

    let stats = proxy.stats();
    let decisions: Vec<_> = stats
        .decisions
        .iter()
        .map(|(n, f)| format!("{n}:{f:?}"))
        .collect();
    assert_eq!(
        outcome.as_str(),
        "unchanged",
        "A's outcome; A's writes: {decisions:?}"
    );
    // An insert cannot take over a document another writer made; an upsert can.
    assert_eq!(
        &decisions[..2],
        ["insert:DropRequest", "insert:DropReplyAfterApply"],
        "A's two writes"
    );
    let stored = support::all_documents(&direct.collection::<Document>("posts")).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].get_str("_id").unwrap(),
        post.id().unwrap().to_string()
    );
}
