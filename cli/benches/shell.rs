//! `natural-key ingest` against what a data engineer runs instead, same file, same engine, one
//! run: N blog posts (~0.5 KB) as NDJSON through three phases — first import into an empty
//! collection, re-import of the unchanged file, re-import with 1% of the posts edited — by
//! * `cli`: the `natural-key ingest` binary, keys `slug` and `lang`, timestamp `published_at`;
//! * `mongoimport`: `mongoimport --mode upsert --upsertFields slug,lang` reproduced with the
//!   driver (mongoimport itself is not served to this machine): every line parsed, then ordered
//!   `update` commands of 1,000 replacement upserts matched by the key fields, which a unique
//!   index on them serves (created before the timing, as a careful user would);
//! * `blind`: unordered bulk replacement upserts by a key-derived `_id` (`slug|lang`), 1,000
//!   per command: no guard, no skip;
//! * `floor` (first import only): an unordered `insert` of the documents exactly as natural-key
//!   stores them into a collection with its unique index: what a first import cannot do
//!   without;
//! * `cli --dry-run`: the binary's own work (reading, parsing, ids, hashes, checks) with the
//!   engine out of the way, as lines per second.
//!
//! Every phase is verified (N documents stored, the edits stored). Run: `cargo bench -p
//! natural-key-cli --bench shell`. Environment: `NK_SHELL_DOCS` (default 10,000),
//! `NK_SHELL_REPS` (default 1), `NK_SHELL_MONGOIMPORT=0` (skip the mongoimport-style run: ~6
//! minutes a phase at 100,000 posts; its figures print as NaN), `MONGODB_URI` (else `scripts/db
//! up`). Under `cargo test
//! --benches`: 200 posts, once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use natural_key::bson::{doc, Document};
use natural_key::mongodb::{Client, Database};
use serde_json::Value;

const SPEC: [&str; 6] = [
    "--key",
    "slug:str",
    "--key",
    "lang:str",
    "--timestamp",
    "published_at",
];
const PER_COMMAND: usize = 1000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn uri() -> String {
    if let Ok(u) = std::env::var("MONGODB_URI") {
        if !u.is_empty() {
            return u;
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/db");
    let out = Command::new("bash").arg(script).arg("up").output().unwrap();
    assert!(out.status.success(), "scripts/db up failed");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().last().unwrap().trim().to_string()
}

/// Post `i` as one NDJSON line; `edited` appends to its body.
fn post(i: usize, edited: bool) -> String {
    let langs = ["en", "zh-TW", "ja", "ko"];
    let body = format!(
        "{} {}",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(7),
        if edited { "(edited)" } else { "" }
    );
    serde_json::json!({
        "slug": format!("post-{i:07}"),
        "lang": langs[i % 4],
        "published_at": 1_600_000_000_000i64 + i as i64 * 1000,
        "title": format!("Post number {i}"),
        "body": body,
        "tags": ["a", format!("t{}", i % 7)],
    })
    .to_string()
}

fn write_file(dir: &Path, name: &str, n: usize, edited_every: Option<usize>) -> PathBuf {
    let path = dir.join(name);
    let mut text = String::with_capacity(n * 600);
    for i in 0..n {
        text.push_str(&post(i, edited_every.is_some_and(|k| i % k == 0)));
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the binary on `file` into `db.coll`; its JSON summary and the seconds it took.
fn cli(uri: &str, db: &str, coll: &str, file: &Path, extra: &[&str]) -> (Value, f64) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_natural-key"))
        .arg("ingest")
        .arg(file)
        .args(["--uri", uri, "--db", db, "--collection", coll, "--json"])
        .args(["--batch-size", "10000"])
        .args(SPEC)
        .args(extra)
        .output()
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), secs)
}

/// The lines of `file` as documents (what mongoimport does first).
fn parse(file: &Path) -> Vec<Document> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Document>(l).unwrap())
        .collect()
}

/// Replacement upserts of `docs`, `filter` giving each one's match, in commands of
/// [`PER_COMMAND`], ordered or not.
async fn upserts(db: &Database, coll: &str, docs: &[Document], ordered: bool, id: bool) {
    for chunk in docs.chunks(PER_COMMAND) {
        let updates: Vec<Document> = chunk
            .iter()
            .map(|d| {
                let slug = d.get_str("slug").unwrap();
                let lang = d.get_str("lang").unwrap();
                let (q, mut u) = match id {
                    true => (doc! { "_id": format!("{slug}|{lang}") }, d.clone()),
                    false => (doc! { "slug": slug, "lang": lang }, d.clone()),
                };
                if id {
                    u.insert("_id", format!("{slug}|{lang}"));
                }
                doc! { "q": q, "u": u, "upsert": true }
            })
            .collect();
        let reply = db
            .run_command(doc! { "update": coll, "updates": updates, "ordered": ordered })
            .await
            .unwrap();
        assert!(
            reply
                .get_array("writeErrors")
                .map_or(true, |e| e.is_empty()),
            "{reply}"
        );
    }
}

async fn count(db: &Database, coll: &str) -> u64 {
    db.collection::<Document>(coll)
        .count_documents(doc! {})
        .await
        .unwrap()
}

async fn edits_stored(db: &Database, coll: &str, n: usize) -> u64 {
    let edited = (0..n).step_by(100).count() as u64;
    let found = db
        .collection::<Document>(coll)
        .count_documents(doc! { "body": { "$regex": "edited" } })
        .await
        .unwrap();
    assert_eq!(found, edited, "{coll}: the edits are stored");
    found
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n = if bench {
        env_or("NK_SHELL_DOCS", 10_000)
    } else {
        200
    };
    let reps = if bench { env_or("NK_SHELL_REPS", 1) } else { 1 };
    let uri = uri();
    let client = Client::with_uri_str(&uri).await.unwrap();
    let name = "nk_bench_shell";
    let db = client.database(name);
    let dir = std::env::temp_dir().join(format!("nk-bench-shell-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = write_file(&dir, "first.ndjson", n, None);
    let changed = write_file(&dir, "changed.ndjson", n, Some(100));
    println!("shell ingest, {n} posts, {reps} repetition(s), {uri}");
    let per = |secs: f64| secs * 1e6 / n as f64;
    for rep in 0..reps {
        db.drop().await.unwrap();
        // cli
        let (s, t_first) = cli(&uri, name, "cli", &first, &[]);
        assert_eq!(s["inserted"].as_u64(), Some(n as u64), "{s}");
        let (s, t_same) = cli(&uri, name, "cli", &first, &[]);
        assert_eq!(s["unchanged"].as_u64(), Some(n as u64), "{s}");
        let (s, t_changed) = cli(&uri, name, "cli", &changed, &[]);
        assert_eq!(s["updated"].as_u64(), Some(n.div_ceil(100) as u64), "{s}");
        edits_stored(&db, "cli", n).await;
        let (s, t_dry) = cli(&uri, name, "dry", &first, &["--dry-run"]);
        assert_eq!(s["checked"].as_u64(), Some(n as u64), "{s}");
        // floor: the stored documents, inserted into natural-key's indexes
        let stored: Vec<Document> = {
            let mut c = db
                .collection::<Document>("cli")
                .find(doc! {})
                .await
                .unwrap();
            let mut v = Vec::with_capacity(n);
            while c.advance().await.unwrap() {
                v.push(c.deserialize_current().unwrap());
            }
            v
        };
        db.run_command(doc! { "createIndexes": "floor", "indexes": [
            { "key": { "_nk_identity": 1 }, "name": "nk_identity", "unique": true, "sparse": true }
        ] })
        .await
        .unwrap();
        let start = Instant::now();
        for chunk in stored.chunks(PER_COMMAND) {
            let r = db
                .run_command(
                    doc! { "insert": "floor", "documents": chunk.to_vec(), "ordered": false },
                )
                .await
                .unwrap();
            assert_eq!(
                r.get_i32("n").ok().map(i64::from).or(r.get_i64("n").ok()),
                Some(chunk.len() as i64)
            );
        }
        let t_floor = start.elapsed().as_secs_f64();
        // mongoimport-style and blind
        db.run_command(doc! { "createIndexes": "mongoimport", "indexes": [
            { "key": { "slug": 1, "lang": 1 }, "name": "slug_lang", "unique": true }
        ] })
        .await
        .unwrap();
        let mut times = Vec::new();
        let mongoimport = env_or("NK_SHELL_MONGOIMPORT", 1) != 0;
        for (coll, ordered, id) in [("mongoimport", true, false), ("blind", false, true)] {
            if coll == "mongoimport" && !mongoimport {
                times.push(vec![f64::NAN; 3]);
                continue;
            }
            let mut phase = Vec::new();
            for file in [&first, &first, &changed] {
                let start = Instant::now();
                let docs = parse(file);
                upserts(&db, coll, &docs, ordered, id).await;
                phase.push(start.elapsed().as_secs_f64());
            }
            assert_eq!(count(&db, coll).await, n as u64);
            edits_stored(&db, coll, n).await;
            times.push(phase);
        }
        let (mi, bl) = (&times[0], &times[1]);
        println!(
            "rep {rep}: µs per post  first / unchanged / 1% changed\n  \
             cli          {:8.1} {:8.1} {:8.1}\n  \
             mongoimport  {:8.1} {:8.1} {:8.1}\n  \
             blind        {:8.1} {:8.1} {:8.1}\n  \
             floor        {:8.1}\n  \
             cli first ÷ floor {:.2}; mongoimport ÷ cli {:.1} / {:.1} / {:.1}; blind ÷ cli {:.1} / {:.1} / {:.1}\n  \
             cli --dry-run: {:.0} lines/s ({:.1} µs per line, process start and open included)",
            per(t_first), per(t_same), per(t_changed),
            per(mi[0]), per(mi[1]), per(mi[2]),
            per(bl[0]), per(bl[1]), per(bl[2]),
            per(t_floor),
            t_first / t_floor,
            mi[0] / t_first, mi[1] / t_same, mi[2] / t_changed,
            bl[0] / t_first, bl[1] / t_same, bl[2] / t_changed,
            n as f64 / t_dry, per(t_dry),
        );
    }
    db.drop().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
