//! `natural-key ingest` end to end on the test engine: the documents a Rust type writes and the
//! same documents ingested from a file are the same documents (id, identity, content hash);
//! reruns write nothing; bad lines are refused alone into `--reject`; a run killed midway and
//! run again converges; CSV; merge and replace; the connection string stays out of sight.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_input_error, assert_stopped, bin, uri};
use natural_key::bson::{doc, Document};
use natural_key::mongodb::{Client, Database};
use natural_key::prelude::*;
use serde_json::Value;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    slug: String,
    #[key(lowercase)]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
    tags: Vec<String>,
    draft: bool,
    rating: f64,
    editor: Option<String>,
    meta: Meta,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Meta {
    words: u32,
    source: String,
}

const TS: i64 = 1_700_000_000_000;

fn posts(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("post-{i}"),
            lang: if i % 2 == 0 { "en" } else { "DE" }.into(),
            published_at: TS + i as i64,
            body: format!("Body of post {i}, with \"quotes\" and ünïcode"),
            tags: vec!["a".into(), format!("t{}", i % 7)],
            draft: i % 3 == 0,
            rating: i as f64 / 4.0,
            editor: (i % 5 == 0).then(|| "ed".to_string()),
            meta: Meta {
                words: i as u32 * 10,
                source: "feed".into(),
            },
        })
        .collect()
}

/// The post as one NDJSON line: serde_json writes the fields in declaration order, as BSON
/// stores them.
fn line(p: &Post) -> String {
    serde_json::to_string(p).unwrap()
}

const SPEC: [&str; 6] = [
    "--key",
    "slug:str",
    "--key",
    "lang:str:lowercase",
    "--timestamp",
    "published_at",
];

async fn database(name: &str) -> Database {
    let client = Client::with_uri_str(uri()).await.unwrap();
    let db = client.database(name);
    db.drop().await.unwrap();
    db
}

fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nk-ingest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn ingest(db: &str, coll: &str, input: &std::path::Path, extra: &[&str]) -> Output {
    bin()
        .arg("ingest")
        .arg(input)
        .args(["--uri", &uri(), "--db", db, "--collection", coll])
        .args(SPEC)
        .args(extra)
        .output()
        .expect("run natural-key ingest")
}

fn summary(out: &Output) -> Value {
    assert!(
        out.status.code().is_some(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `(_id, _nk_identity, _nk_hash, _nk_write)` of every stored document, by `_id`.
async fn stored(db: &Database, coll: &str) -> Vec<(String, String, String, String)> {
    let c = db.collection::<Document>(coll);
    let mut out = Vec::new();
    let mut cursor = c.find(doc! {}).await.unwrap();
    while cursor.advance().await.unwrap() {
        let d = cursor.deserialize_current().unwrap();
        out.push((
            d.get_str("_id").unwrap().to_string(),
            d.get_str("_nk_identity").unwrap().to_string(),
            d.get_str("_nk_hash").unwrap().to_string(),
            d.get_str("_nk_write").unwrap_or("").to_string(),
        ));
    }
    out.sort();
    out
}

/// The same posts, written by the Rust type into one collection and ingested from a file into
/// another, are stored under the same ids, identities and content hashes; the file ingested
/// into the Rust type's collection finds every post unchanged and writes nothing; and the
/// Rust type reads the ingested documents back as they were.
#[tokio::test]
async fn a_file_ingests_to_the_documents_the_rust_type_writes() {
    let name = "nk_cli_ingest_same";
    let db = database(name).await;
    let all = posts(50);
    let typed = natural_key::Collection::<Post>::open(&db, "typed")
        .await
        .unwrap();
    typed.upsert_many(&all).await.unwrap();
    let text: String = all.iter().map(|p| line(p) + "\n").collect();
    let input = file("same.ndjson", &text);

    let out = ingest(name, "ingested", &input, &["--json"]);
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert_eq!(
        (s["inserted"].as_u64(), s["rejected"].as_u64()),
        (Some(50), Some(0)),
        "{s}"
    );
    let ours: Vec<_> = stored(&db, "ingested").await;
    let theirs: Vec<_> = stored(&db, "typed").await;
    let strip = |v: Vec<(String, String, String, String)>| -> Vec<(String, String, String)> {
        v.into_iter().map(|(a, b, c, _)| (a, b, c)).collect()
    };
    assert_eq!(
        strip(ours),
        strip(theirs.clone()),
        "same _id, identity and hash"
    );
    for p in &all {
        let back: Post = natural_key::Collection::<Post>::open(&db, "ingested")
            .await
            .unwrap()
            .get(p.id().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&back, p);
    }

    // Into the Rust type's own collection: nothing to write.
    let out = ingest(name, "typed", &input, &["--json"]);
    let s = summary(&out);
    assert_eq!(
        (
            s["unchanged"].as_u64(),
            s["inserted"].as_u64(),
            s["updated"].as_u64()
        ),
        (Some(50), Some(0), Some(0)),
        "{s}"
    );
    assert_eq!(
        stored(&db, "typed").await,
        theirs,
        "not one document rewritten"
    );

    // And the Rust type finds the ingested documents unchanged.
    let ingested = natural_key::Collection::<Post>::open(&db, "ingested")
        .await
        .unwrap();
    let r = ingested.upsert_many(&all).await.unwrap();
    assert_eq!((r.unchanged, r.inserted, r.updated), (50, 0, 0));
}

/// The same file again: every line unchanged, no write (the stored write tokens stay), exit 0;
/// an edited line is the one update.
#[tokio::test]
async fn a_rerun_writes_nothing_and_an_edit_is_one_update() {
    let name = "nk_cli_ingest_rerun";
    let db = database(name).await;
    let mut all = posts(30);
    let input = file(
        "rerun.ndjson",
        &all.iter().map(|p| line(p) + "\n").collect::<String>(),
    );
    let first = summary(&ingest(name, "posts", &input, &["--json"]));
    assert_eq!(first["inserted"], 30, "{first}");
    let before = stored(&db, "posts").await;
    let again = ingest(name, "posts", &input, &["--json"]);
    assert_eq!(again.status.code(), Some(0));
    let again = summary(&again);
    assert_eq!(
        (
            again["unchanged"].as_u64(),
            again["inserted"].as_u64(),
            again["updated"].as_u64()
        ),
        (Some(30), Some(0), Some(0)),
        "{again}"
    );
    assert_eq!(stored(&db, "posts").await, before);

    all[7].body.push_str(" (edited)");
    let input = file(
        "rerun2.ndjson",
        &all.iter().map(|p| line(p) + "\n").collect::<String>(),
    );
    let edited = summary(&ingest(name, "posts", &input, &["--json"]));
    assert_eq!(
        (edited["unchanged"].as_u64(), edited["updated"].as_u64()),
        (Some(29), Some(1)),
        "{edited}"
    );

    // A changed timestamp key would fork the document: refused, nothing written for it.
    let mut moved = all[3].clone();
    moved.published_at += 1;
    let input = file("fork.ndjson", &(line(&moved) + "\n"));
    let reject = file("fork-rejects.ndjson", "");
    let out = ingest(
        name,
        "posts",
        &input,
        &["--json", "--reject", reject.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let rejects = std::fs::read_to_string(&reject).unwrap();
    let r: Value = serde_json::from_str(rejects.lines().next().unwrap()).unwrap();
    assert_eq!(r["kind"], "immutable_key_changed", "{r}");
    assert_eq!(r["line"], 1);
    let count = db
        .collection::<Document>("posts")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(count, 30, "no fork");
}

/// Each bad line is refused alone, with its line number, kind and reason, into `--reject`
/// (its text kept to replay), and the good lines around it are written; exit status 1.
#[tokio::test]
async fn bad_lines_are_refused_alone_into_the_reject_file() {
    let name = "nk_cli_ingest_bad";
    let db = database(name).await;
    let good = posts(2);
    let deep = format!("{}1{}", "{\"a\":".repeat(300), "}".repeat(300));
    let big = format!(
        r#"{{"slug":"big","lang":"en","published_at":1,"body":"{}"}}"#,
        "x".repeat(17 * 1024 * 1024)
    );
    let mut text = String::new();
    text.push_str(&(line(&good[0]) + "\n")); // 1
    text.push_str("{not json\n"); // 2
    text.push_str(r#"{"slug":"s","published_at":1}"#); // 3: lang missing
    text.push('\n');
    text.push_str(r#"{"slug":"s","lang":7,"published_at":1}"#); // 4: lang not a string
    text.push('\n');
    text.push_str(r#"{"slug":"s","lang":"en","published_at":1,"$where":"x"}"#); // 5
    text.push('\n');
    text.push_str(r#"{"slug":"s","lang":"en","published_at":1,"a.b":1}"#); // 6
    text.push('\n');
    // 7: a `_nk_` field the ingest cannot recompute (`_nk_identity`, `_nk_hash` and `_nk_write`
    // it drops and recomputes).
    text.push_str(r#"{"slug":"s","lang":"en","published_at":1,"_nk_legacy_ids":["x"]}"#);
    text.push('\n');
    text.push_str(&format!(
        r#"{{"slug":"s","lang":"en","published_at":1,"d":{deep}}}"#
    )); // 8
    text.push('\n');
    text.push_str(&big); // 9
    text.push('\n');
    text.push_str("[1,2]\n"); // 10
    text.push('\n'); // 11: blank, skipped
    text.push_str(r#"{"slug":"s","lang":"en","published_at":"yesterday"}"#); // 12
    text.push('\n');
    text.push_str(&(line(&good[1]) + "\n")); // 13
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(
        b"{\"slug\":\"s\",\"lang\":\"en\",\"published_at\":1,\"b\":\"\xc3\x28\"}\n",
    ); // 14
    let input = file("bad.ndjson", "");
    std::fs::write(&input, bytes).unwrap();
    // In one batch, and in batches of two: a failure the library reports by its index in the
    // call is placed on its line wherever its batch falls.
    for (coll, batch) in [("posts", "10000"), ("posts_in_twos", "2")] {
        let reject = file(&format!("bad-rejects-{batch}.ndjson"), "");
        let out = ingest(
            name,
            coll,
            &input,
            &[
                "--json",
                "--reject",
                reject.to_str().unwrap(),
                "--batch-size",
                batch,
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s = summary(&out);
        assert_eq!(
            (
                s["inserted"].as_u64(),
                s["rejected"].as_u64(),
                s["lines"].as_u64()
            ),
            (Some(2), Some(11), Some(14)),
            "{s}"
        );
        assert_eq!(s["first_rejected"]["line"], 2, "{s}");
        let mut rejects: Vec<Value> = std::fs::read_to_string(&reject)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        rejects.sort_by_key(|r| r["line"].as_u64());
        let got: Vec<(u64, &str)> = rejects
            .iter()
            .map(|r| (r["line"].as_u64().unwrap(), r["kind"].as_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                (2, "input"),
                (3, "key_fields"),
                (4, "key_fields"),
                (5, "invalid_field_name"),
                (6, "invalid_field_name"),
                (7, "invalid_field_name"),
                (8, "input"),
                (9, "document_too_large"),
                (10, "input"),
                (12, "key_fields"),
                (14, "input"),
            ]
        );
        for r in &rejects {
            assert!(!r["reason"].as_str().unwrap().is_empty(), "{r}");
        }
        assert!(rejects[0]["reason"].as_str().unwrap().contains("not JSON"));
        assert_eq!(
            rejects[0]["input"], "{not json",
            "the line's text, to fix and replay"
        );
        assert!(
            rejects[6]["reason"]
                .as_str()
                .unwrap()
                .contains("recursion limit"),
            "{}",
            rejects[6]
        );
        assert!(rejects[10]["reason"].as_str().unwrap().contains("UTF-8"));
        let stored = db
            .collection::<Document>(coll)
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(stored, 2, "the good lines, and nothing of the bad ones");
    }
}

/// A run SIGKILLed midway, then run again: every line stored once, the rerun counts what the
/// killed run stored as unchanged (or updated: its write may have landed unacknowledged), and a
/// third run writes nothing.
#[tokio::test]
async fn a_killed_run_run_again_converges() {
    let name = "nk_cli_ingest_kill";
    let db = database(name).await;
    let n = 20_000;
    let all = posts(n);
    let input = file(
        "kill.ndjson",
        &all.iter().map(|p| line(p) + "\n").collect::<String>(),
    );
    let coll = db.collection::<Document>("posts");
    let mut child = bin()
        .arg("ingest")
        .arg(&input)
        .args([
            "--uri",
            &uri(),
            "--db",
            name,
            "--collection",
            "posts",
            "--batch-size",
            "500",
        ])
        .args(SPEC)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut killed_at = 0;
    while start.elapsed() < Duration::from_secs(120) {
        let count = coll.count_documents(doc! {}).await.unwrap();
        if count >= 2_000 {
            child.kill().unwrap();
            killed_at = count;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.wait();
    assert!(
        killed_at > 0 && killed_at < n as u64,
        "killed midway: {killed_at}"
    );
    let count_after_kill = coll.count_documents(doc! {}).await.unwrap();
    let s = summary(&ingest(name, "posts", &input, &["--json"]));
    let (ins, upd, unch) = (
        s["inserted"].as_u64().unwrap(),
        s["updated"].as_u64().unwrap(),
        s["unchanged"].as_u64().unwrap(),
    );
    assert_eq!(ins + upd + unch, n as u64, "{s}");
    // What the killed run stored is found unchanged (an insert it sent may still land after
    // the count above: the engine finishes a command whose client is gone).
    assert!(unch >= count_after_kill, "{s}");
    assert_eq!(upd, 0, "nothing stored changed: {s}");
    assert_eq!(
        coll.count_documents(doc! {}).await.unwrap(),
        n as u64,
        "every line once"
    );
    let s = summary(&ingest(name, "posts", &input, &["--json"]));
    assert_eq!(s["unchanged"].as_u64(), Some(n as u64), "{s}");
    println!("KILL ingest: killed at {killed_at} stored, {count_after_kill} after; rerun {s}");
}

/// CSV with a header: cells are strings but the key fields, which take their spec's type;
/// from stdin with `--format csv`, the same ids as NDJSON lines holding the same values.
#[tokio::test]
async fn csv_rows_are_documents_typed_by_the_key_spec() {
    let name = "nk_cli_ingest_csv";
    let db = database(name).await;
    let csv =
        "sku,region,day,title\n42,eu,1700000000000,\"Blue, large\"\n43,eu,1700000000001,Red\n";
    let mut child = bin()
        .args(["ingest", "-", "--format", "csv", "--json"])
        .args(["--uri", &uri(), "--db", name, "--collection", "items"])
        .args([
            "--key",
            "sku:int",
            "--key",
            "region:str",
            "--timestamp",
            "day:ms",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(csv.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let s = summary(&out);
    assert_eq!(
        (out.status.code(), s["inserted"].as_u64()),
        (Some(0), Some(2)),
        "{s}"
    );
    let nd = file(
        "items.ndjson",
        "{\"sku\":42,\"region\":\"eu\",\"day\":1700000000000,\"title\":\"Blue, large\"}\n",
    );
    let out = bin()
        .args(["ingest", nd.to_str().unwrap(), "--json"])
        .args(["--uri", &uri(), "--db", name, "--collection", "items"])
        .args([
            "--key",
            "sku:int",
            "--key",
            "region:str",
            "--timestamp",
            "day:ms",
        ])
        .output()
        .unwrap();
    let s = summary(&out);
    assert_eq!(
        s["unchanged"].as_u64(),
        Some(1),
        "an int32 and an int64 of one number hash the same: {s}"
    );
    let d = db
        .collection::<Document>("items")
        .find_one(doc! { "sku": 42 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.get_str("title").unwrap(), "Blue, large");
}

/// merge keeps the stored fields a line lacks; replace makes the stored document the line's.
#[tokio::test]
async fn merge_keeps_other_fields_and_replace_drops_them() {
    let name = "nk_cli_ingest_mode";
    let db = database(name).await;
    let coll = db.collection::<Document>("posts");
    let full = file(
        "mode1.ndjson",
        "{\"slug\":\"a\",\"lang\":\"en\",\"published_at\":1,\"body\":\"x\",\"extra\":1}\n",
    );
    let less = file(
        "mode2.ndjson",
        "{\"slug\":\"a\",\"lang\":\"en\",\"published_at\":1,\"body\":\"y\"}\n",
    );
    assert_eq!(ingest(name, "posts", &full, &[]).status.code(), Some(0));
    assert_eq!(
        ingest(name, "posts", &less, &["--mode", "merge"])
            .status
            .code(),
        Some(0)
    );
    let d = coll.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(
        (d.get_str("body").unwrap(), d.get_i32("extra").ok()),
        ("y", Some(1)),
        "{d}"
    );
    let even_less = file(
        "mode3.ndjson",
        "{\"slug\":\"a\",\"lang\":\"en\",\"published_at\":1,\"body\":\"z\"}\n",
    );
    assert_eq!(
        ingest(name, "posts", &even_less, &["--mode", "replace"])
            .status
            .code(),
        Some(0)
    );
    let d = coll.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(
        (d.get_str("body").unwrap(), d.get("extra")),
        ("z", None),
        "{d}"
    );
}

/// `--uri` falls back to MONGODB_URI; a password in it is never printed, even in an error.
#[test]
fn the_connection_string_comes_from_the_environment_and_stays_out_of_messages() {
    let input = file(
        "env.ndjson",
        "{\"slug\":\"a\",\"lang\":\"en\",\"published_at\":1}\n",
    );
    let out = bin()
        .args([
            "ingest",
            input.to_str().unwrap(),
            "--db",
            "d",
            "--collection",
            "c",
        ])
        .args(SPEC)
        .args(["--timeout", "1"])
        .env(
            "MONGODB_URI",
            "mongodb://reader:s3cret-pw@127.0.0.1:9/?retryWrites=false",
        )
        .output()
        .unwrap();
    // A server that does not answer stops the run: exit status 3, "run it again".
    assert_stopped(&out, "cannot open d.c");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("s3cret-pw"));
    let out = bin()
        .args([
            "ingest",
            input.to_str().unwrap(),
            "--db",
            "d",
            "--collection",
            "c",
        ])
        .args(SPEC)
        .env_remove("MONGODB_URI")
        .output()
        .unwrap();
    assert_input_error(&out, "--uri");
    let out = bin()
        .args([
            "ingest",
            "/no/such/file.ndjson",
            "--db",
            "d",
            "--collection",
            "c",
        ])
        .args(SPEC)
        .env("MONGODB_URI", "mongodb://127.0.0.1:9/")
        .output()
        .unwrap();
    assert_input_error(&out, "cannot read /no/such/file.ndjson");
}

/// Tombstones, as change-data-capture streams send them: a line whose `--delete-when` field
/// says so deletes its document by key, in input order with the upserts around it; the marker
/// field is never stored.
#[tokio::test]
async fn tombstone_lines_delete_by_key_in_input_order() {
    let name = "nk_cli_ingest_tombstones";
    let db = database(name).await;
    let line = |slug: &str, body: &str, deleted: &str| {
        format!(
            "{{\"slug\":\"{slug}\",\"lang\":\"en\",\"published_at\":1,\"body\":\"{body}\",\"__deleted\":\"{deleted}\"}}\n"
        )
    };
    let first: String = ["a", "b", "c"]
        .iter()
        .map(|s| line(s, "v1", "false"))
        .collect();
    let input = file("tomb1.ndjson", &first);
    let s = summary(&ingest(
        name,
        "posts",
        &input,
        &["--json", "--delete-when", "__deleted"],
    ));
    assert_eq!(s["inserted"], 3, "{s}");
    let second = [
        line("a", "", "true"),
        line("b", "v2", "false"),
        line("never", "", "true"),
        line("e", "v1", "false"),
        line("e", "", "true"),
    ]
    .concat();
    let input = file("tomb2.ndjson", &second);
    let out = ingest(
        name,
        "posts",
        &input,
        &["--json", "--delete-when", "__deleted"],
    );
    assert_eq!(out.status.code(), Some(0));
    let s = summary(&out);
    assert_eq!(
        (
            s["deleted"].as_u64(),
            s["not_found"].as_u64(),
            s["updated"].as_u64(),
            s["inserted"].as_u64()
        ),
        (Some(2), Some(1), Some(1), Some(1)),
        "{s}"
    );
    let coll = db.collection::<Document>("posts");
    let mut slugs: Vec<String> = support_all(&coll)
        .await
        .iter()
        .map(|d| {
            assert!(
                d.get("__deleted").is_none(),
                "the marker is not stored: {d}"
            );
            d.get_str("slug").unwrap().to_string()
        })
        .collect();
    slugs.sort();
    assert_eq!(slugs, ["b", "c"]);
    // Again: the deletions find nothing, the upserts nothing to change, e is inserted and
    // deleted once more (its lines say so, in that order).
    let s = summary(&ingest(
        name,
        "posts",
        &input,
        &["--json", "--delete-when", "__deleted"],
    ));
    assert_eq!(
        (
            s["not_found"].as_u64(),
            s["unchanged"].as_u64(),
            s["deleted"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{s}"
    );
}

async fn support_all(coll: &natural_key::mongodb::Collection<Document>) -> Vec<Document> {
    let mut out = Vec::new();
    let mut cursor = coll.find(doc! {}).await.unwrap();
    while cursor.advance().await.unwrap() {
        out.push(cursor.deserialize_current().unwrap());
    }
    out
}

/// `--prune` for a full snapshot: what the file no longer holds is deleted once every line is
/// written, never beyond `--max-prune-fraction`, never when a line was refused; `--dry-run`
/// writes and deletes nothing.
#[tokio::test]
async fn prune_deletes_what_the_snapshot_dropped_and_dry_run_nothing() {
    let name = "nk_cli_ingest_prune";
    let db = database(name).await;
    let coll = db.collection::<Document>("posts");
    let all = posts(20);
    let snapshot = |ps: &[Post]| ps.iter().map(|p| line(p) + "\n").collect::<String>();
    let full = file("prune-full.ndjson", &snapshot(&all));
    assert_eq!(
        summary(&ingest(name, "posts", &full, &["--json"]))["inserted"],
        20
    );
    // Other code's document, without _nk_identity: never pruned.
    coll.insert_one(doc! { "slug": "legacy" }).await.unwrap();

    // A dry run of a snapshot without post 0 and 1: writes nothing, deletes nothing.
    let less = file("prune-less.ndjson", &snapshot(&all[2..]));
    let out = ingest(name, "posts", &less, &["--json", "--prune", "--dry-run"]);
    let s = summary(&out);
    assert_eq!(
        (
            out.status.code(),
            s["pruned"].as_u64(),
            s["checked"].as_u64()
        ),
        (Some(0), Some(2), Some(18)),
        "{s}"
    );
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 21);

    // Beyond the fraction (2 of 20 > 0.05): refused, nothing deleted.
    let out = ingest(
        name,
        "posts",
        &less,
        &["--json", "--prune", "--max-prune-fraction", "0.05"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-prune-fraction"));
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 21);

    // A refused line: the prune is skipped (its document might be one of those it would drop).
    let bad = file("prune-bad.ndjson", &(snapshot(&all[2..]) + "{oops\n"));
    let out = ingest(name, "posts", &bad, &["--json", "--prune"]);
    assert_eq!(
        (out.status.code(), summary(&out)["pruned"].clone()),
        (Some(1), Value::Null)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prune skipped"));
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 21);

    // The real thing.
    let out = ingest(name, "posts", &less, &["--json", "--prune"]);
    let s = summary(&out);
    assert_eq!(
        (
            out.status.code(),
            s["pruned"].as_u64(),
            s["unchanged"].as_u64()
        ),
        (Some(0), Some(2), Some(18)),
        "{s}"
    );
    assert_eq!(
        coll.count_documents(doc! {}).await.unwrap(),
        19,
        "18 posts and the legacy document"
    );
    assert!(coll
        .find_one(doc! {"slug": "legacy"})
        .await
        .unwrap()
        .is_some());
}
