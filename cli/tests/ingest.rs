//! `natural-key ingest` end to end on the test engine: the documents a Rust type writes and the
//! same documents ingested from a file are the same documents (id, identity, content hash);
//! reruns write nothing; bad lines are refused alone into `--reject`; a run killed midway and
//! run again converges; CSV; merge and replace; the connection string stays out of sight;
//! with `--version-field`, an older version writes nothing (a replayed export, lines out of
//! order) and two contents of one version are refused; `--mode` insert, update and upsert.

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

/// `--version-field rev:ms`: the lines below carry an integer revision.
const VERSIONED: [&str; 2] = ["--version-field", "rev:ms"];

/// A post at revision `rev`, as one NDJSON line.
fn rev_line(slug: &str, rev: i64, body: &str) -> String {
    let post = serde_json::json!({
        "slug": slug, "lang": "en", "published_at": TS, "rev": rev, "body": body,
    });
    format!("{post}\n")
}

/// Every stored document whole, as the engine returns it, by `_id`: equal only if not one byte
/// (`_nk_write` included) was rewritten.
async fn raw_documents(db: &Database, coll: &str) -> Vec<natural_key::bson::RawDocumentBuf> {
    let c = db.collection::<natural_key::bson::RawDocumentBuf>(coll);
    let mut cursor = c.find(doc! {}).sort(doc! { "_id": 1 }).await.unwrap();
    let mut out = Vec::new();
    while cursor.advance().await.unwrap() {
        out.push(cursor.current().to_raw_document_buf());
    }
    out
}

fn counts(s: &Value, names: &[&str]) -> Vec<Option<u64>> {
    names.iter().map(|n| s[n].as_u64()).collect()
}

/// The replayed export: today's file is ingested, then yesterday's by mistake. Every document
/// edited since is `stale` and the others `unchanged`: nothing is written, not one byte of a
/// stored document changes, and the run succeeds (exit 0), in the JSON object, the summary line
/// and `-v`'s lines alike.
#[tokio::test]
async fn a_replayed_older_export_writes_nothing_and_counts_the_edited_documents_stale() {
    let name = "nk_cli_ingest_replay";
    let db = database(name).await;
    let slugs: Vec<String> = (0..10).map(|i| format!("post-{i}")).collect();
    // Yesterday: every post at revision 1. Today: posts 0 to 5 edited, at revision 2.
    let yesterday: String = slugs.iter().map(|s| rev_line(s, 1, "old")).collect();
    let today: String = slugs
        .iter()
        .enumerate()
        .map(|(i, s)| match i < 6 {
            true => rev_line(s, 2, "edited"),
            false => rev_line(s, 1, "old"),
        })
        .collect();
    let (yesterday, today) = (
        file("replay-yesterday.ndjson", &yesterday),
        file("replay-today.ndjson", &today),
    );
    let out = ingest(
        name,
        "posts",
        &today,
        &[&VERSIONED[..], &["--json"]].concat(),
    );
    assert_eq!(summary(&out)["inserted"], 10);
    let before = raw_documents(&db, "posts").await;
    assert_eq!(before.len(), 10);

    let out = ingest(
        name,
        "posts",
        &yesterday,
        &[&VERSIONED[..], &["--json"]].concat(),
    );
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert_eq!(
        counts(
            &s,
            &["stale", "unchanged", "inserted", "updated", "rejected"]
        ),
        [Some(6), Some(4), Some(0), Some(0), Some(0)],
        "{s}"
    );
    assert_eq!(
        counts(&s, &["existed", "missing"]),
        [Some(0), Some(0)],
        "{s}"
    );
    assert_eq!(raw_documents(&db, "posts").await, before, "nothing written");

    // The summary line and -v's line per batch say so too.
    let out = ingest(
        name,
        "posts",
        &yesterday,
        &[&VERSIONED[..], &["-v"]].concat(),
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("0 inserted, 0 updated, 4 unchanged, 6 stale, 0 rejected"),
        "{stdout}"
    );
    assert!(!stdout.contains("existed") && !stdout.contains("missing"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("4 unchanged, 0 deleted, 6 stale"),
        "{stderr}"
    );
    assert_eq!(raw_documents(&db, "posts").await, before, "nothing written");
    let d = db
        .collection::<Document>("posts")
        .find_one(doc! { "slug": "post-0" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (d.get_str("body"), d.get_i64("_nk_version")),
        (Ok("edited"), Ok(2))
    );
}

/// Lines of one document out of order in one file, revision 3 before revision 2: the document
/// ends at revision 3, in one batch or in batches of one.
#[tokio::test]
async fn versions_out_of_order_in_one_file_end_at_the_highest() {
    let name = "nk_cli_ingest_out_of_order";
    let db = database(name).await;
    let input = file(
        "out-of-order.ndjson",
        &[rev_line("a", 3, "three"), rev_line("a", 2, "two")].concat(),
    );
    for (coll, batch) in [("posts", "1000"), ("posts_in_ones", "1")] {
        let extra = [&VERSIONED[..], &["--json", "--batch-size", batch]].concat();
        let out = ingest(name, coll, &input, &extra);
        let s = summary(&out);
        assert_eq!(out.status.code(), Some(0), "{s}");
        assert_eq!(
            counts(&s, &["inserted", "stale", "updated"]),
            [Some(1), Some(1), Some(0)],
            "{s}"
        );
        let d = db
            .collection::<Document>(coll)
            .find_one(doc! {})
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                d.get_str("body"),
                d.get_i32("rev"),
                d.get_i64("_nk_version")
            ),
            (Ok("three"), Ok(3), Ok(3)),
            "{d}"
        );
    }
}

/// Two contents cannot share a version: the line is refused alone into `--reject` (kind
/// version_conflict), its reason naming the document and what to do, and the stored document
/// is left as it was; the other lines are written.
#[tokio::test]
async fn an_equal_version_with_other_content_is_refused_and_changes_nothing() {
    let name = "nk_cli_ingest_version_conflict";
    let db = database(name).await;
    let first = file("conflict1.ndjson", &rev_line("a", 2, "two"));
    assert_eq!(
        ingest(name, "posts", &first, &VERSIONED).status.code(),
        Some(0)
    );
    let before = raw_documents(&db, "posts").await;
    let id = before[0].get_str("_id").unwrap().to_string();

    let input = file(
        "conflict2.ndjson",
        &[rev_line("b", 1, "new"), rev_line("a", 2, "TWO")].concat(),
    );
    let reject = file("conflict-rejects.ndjson", "");
    let extra = [
        &VERSIONED[..],
        &["--json", "--reject", reject.to_str().unwrap()],
    ]
    .concat();
    let out = ingest(name, "posts", &input, &extra);
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert_eq!(
        counts(&s, &["inserted", "rejected", "updated", "stale"]),
        [Some(1), Some(1), Some(0), Some(0)],
        "{s}"
    );
    let rejects = std::fs::read_to_string(&reject).unwrap();
    let r: Value = serde_json::from_str(rejects.lines().next().unwrap()).unwrap();
    assert_eq!(
        (r["line"].as_u64(), r["kind"].as_str()),
        (Some(2), Some("version_conflict"))
    );
    let reason = r["reason"].as_str().unwrap();
    for says in [id.as_str(), "slug=\"a\"", "version 2", "higher version"] {
        assert!(reason.contains(says), "`{says}` not in: {reason}");
    }
    assert_eq!(r["input"], rev_line("a", 2, "TWO").trim_end());
    let after = raw_documents(&db, "posts").await;
    assert_eq!(
        after.iter().find(|d| d.get_str("_id") == Ok(&id)),
        Some(&before[0]),
        "the stored document is left as it was"
    );
}

/// A line without the version field, or with one of another form (text where `ms` reads an
/// integer), is refused alone as a line without its key is; the others are written. A version
/// field that is also a key or the timestamp is a usage error.
#[tokio::test]
async fn a_line_without_a_readable_version_is_refused_alone() {
    let name = "nk_cli_ingest_bad_version";
    let db = database(name).await;
    let text = [
        "{\"slug\":\"a\",\"lang\":\"en\",\"published_at\":1,\"body\":\"no rev\"}\n".to_string(),
        "{\"slug\":\"b\",\"lang\":\"en\",\"published_at\":1,\"rev\":\"2\"}\n".to_string(),
        rev_line("c", 1, "fine"),
    ]
    .concat();
    let input = file("bad-version.ndjson", &text);
    let reject = file("bad-version-rejects.ndjson", "");
    let extra = [
        &VERSIONED[..],
        &["--json", "--reject", reject.to_str().unwrap()],
    ]
    .concat();
    let out = ingest(name, "posts", &input, &extra);
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert_eq!(
        counts(&s, &["inserted", "rejected"]),
        [Some(1), Some(2)],
        "{s}"
    );
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
    assert_eq!(got, [(1, "key_fields"), (2, "key_fields")]);
    for r in &rejects {
        assert!(r["reason"].as_str().unwrap().contains("`rev`"), "{r}");
    }
    let stored = db.collection::<Document>("posts");
    assert_eq!(stored.count_documents(doc! {}).await.unwrap(), 1);

    let out = ingest(name, "posts", &input, &["--version-field", "slug"]);
    assert_input_error(&out, "field `slug` is named twice");
}

/// `--mode insert` creates new documents only and counts a stored one `existed`; `--mode
/// update` changes stored documents only and counts a new one `missing`; neither is an error.
/// `--mode upsert` is mongoimport's name for replace; its `delete` mode is refused.
#[tokio::test]
async fn insert_update_and_upsert_modes_and_delete_refused() {
    let name = "nk_cli_ingest_modes";
    let db = database(name).await;
    let coll = db.collection::<Document>("posts");
    let post = |slug: &str, body: &str, extra: &str| {
        format!(
            "{{\"slug\":\"{slug}\",\"lang\":\"en\",\"published_at\":1,\"body\":\"{body}\"{extra}}}\n"
        )
    };
    let first = file("modes1.ndjson", &post("a", "one", ",\"extra\":1"));
    let s = summary(&ingest(name, "posts", &first, &["--json"]));
    assert_eq!(
        counts(&s, &["inserted", "stale", "existed", "missing"]),
        [Some(1), Some(0), Some(0), Some(0)],
        "the keys are always there: {s}"
    );
    let before = raw_documents(&db, "posts").await;

    let input = file(
        "modes2.ndjson",
        &[post("a", "two", ""), post("b", "new", "")].concat(),
    );
    let out = ingest(name, "posts", &input, &["--mode", "insert", "--json"]);
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert_eq!(
        counts(&s, &["inserted", "existed", "updated", "unchanged"]),
        [Some(1), Some(1), Some(0), Some(0)],
        "{s}"
    );
    let a = raw_documents(&db, "posts").await;
    assert!(a.contains(&before[0]), "a stored document left alone");
    let out = ingest(name, "posts", &input, &["--mode", "insert"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("0 unchanged, 2 existed, 0 rejected"),
        "{stdout}"
    );

    let input = file(
        "modes3.ndjson",
        &[post("a", "three", ""), post("c", "never", "")].concat(),
    );
    let out = ingest(name, "posts", &input, &["--mode", "update", "--json"]);
    let s = summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert_eq!(
        counts(&s, &["updated", "missing", "inserted"]),
        [Some(1), Some(1), Some(0)],
        "{s}"
    );
    assert!(coll.find_one(doc! { "slug": "c" }).await.unwrap().is_none());
    let a = coll.find_one(doc! { "slug": "a" }).await.unwrap().unwrap();
    assert_eq!(
        (a.get_str("body"), a.get_i32("extra")),
        (Ok("three"), Ok(1)),
        "update merges: {a}"
    );

    let input = file("modes4.ndjson", &post("a", "four", ""));
    let s = summary(&ingest(
        name,
        "posts",
        &input,
        &["--mode", "upsert", "--json"],
    ));
    assert_eq!(s["updated"], 1, "{s}");
    let a = coll.find_one(doc! { "slug": "a" }).await.unwrap().unwrap();
    assert_eq!(
        (a.get_str("body"), a.get("extra")),
        (Ok("four"), None),
        "upsert replaces: {a}"
    );

    let out = ingest(name, "posts", &input, &["--mode", "delete"]);
    assert_input_error(&out, "--delete-when");
    assert!(String::from_utf8_lossy(&out.stderr).contains("delete mode"));
}

/// Change-data-capture deletions with a version leave tombstones, so a replay of an older
/// version is stale; `prune-tombstones` deletes the tombstones older than its age (a dry run
/// counts them first), after which the same replay creates the document again.
#[tokio::test]
async fn versioned_deletions_leave_tombstones_that_prune_tombstones_deletes() {
    let name = "nk_cli_prune_tombstones";
    database(name).await;
    let version = [
        "--json",
        "--version-field",
        "rev:ms",
        "--delete-when",
        "__deleted",
    ];
    let first: String = (0..4).map(|i| rev_line(&format!("p{i}"), 1, "b")).collect();
    assert_eq!(
        ingest(name, "posts", &file("t1.ndjson", &first), &version)
            .status
            .code(),
        Some(0)
    );
    let gone: String = (0..2)
        .map(|i| {
            let post = serde_json::json!({
                "slug": format!("p{i}"), "lang": "en", "published_at": TS, "rev": 2,
                "__deleted": true,
            });
            format!("{post}\n")
        })
        .collect();
    let out = ingest(name, "posts", &file("t2.ndjson", &gone), &version);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replay = ingest(name, "posts", &file("t1.ndjson", &first), &version);
    let s = summary(&replay);
    assert_eq!(
        counts(&s, &["stale", "unchanged"]),
        [Some(2), Some(2)],
        "{s}"
    );

    let prune = |extra: &[&str]| {
        bin()
            .args([
                "prune-tombstones",
                "--uri",
                &uri(),
                "--db",
                name,
                "--collection",
                "posts",
            ])
            .args(extra)
            .output()
            .expect("run natural-key prune-tombstones")
    };
    let young = summary(&prune(&["--older-than", "1h", "--json"]));
    assert_eq!(young["pruned"], 0, "{young}");
    let plan = summary(&prune(&["--older-than", "0s", "--dry-run", "--json"]));
    assert_eq!(
        (plan["pruned"].as_u64(), plan["dry_run"].as_bool()),
        (Some(2), Some(true))
    );
    let done = prune(&["--older-than", "0s"]);
    assert_eq!(done.status.code(), Some(0));
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(text.contains("pruned 2 tombstones"), "{text}");
    let bad = prune(&["--older-than", "30x"]);
    assert_input_error(&bad, "30x");
    let again = summary(&ingest(name, "posts", &file("t1.ndjson", &first), &version));
    assert_eq!(
        counts(&again, &["inserted", "unchanged"]),
        [Some(2), Some(2)],
        "{again}"
    );
}

/// `--changed-at`: the engine stamps the field when a line changes the stored content, not
/// when a rerun finds it unchanged; a line's own value of it is not stored; the field cannot be
/// a key.
#[tokio::test]
async fn changed_at_is_stamped_by_the_engine_when_content_changes() {
    let name = "nk_cli_changed_at";
    let db = database(name).await;
    let flags = ["--json", "--changed-at", "changed_at"];
    let first = rev_line("a", 1, "one");
    let out = ingest(name, "posts", &file("c1.ndjson", &first), &flags);
    assert_eq!(summary(&out)["inserted"], 1);
    let coll = db.collection::<Document>("posts");
    let stamp = || async {
        let d = coll.find_one(doc! {}).await.unwrap().unwrap();
        *d.get_datetime("changed_at")
            .unwrap_or_else(|_| panic!("stamped: {d}"))
    };
    let t1 = stamp().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // An export's own value is the engine's to set: unchanged, not stored.
    let exported = first.replace(
        "\"body\"",
        "\"changed_at\":{\"$date\":\"2001-01-01T00:00:00Z\"},\"body\"",
    );
    let out = ingest(name, "posts", &file("c2.ndjson", &exported), &flags);
    assert_eq!(
        summary(&out)["unchanged"],
        1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stamp().await, t1);
    let edited = rev_line("a", 1, "two");
    assert_eq!(
        summary(&ingest(name, "posts", &file("c3.ndjson", &edited), &flags))["updated"],
        1
    );
    assert!(stamp().await > t1);
    let bad = ingest(
        name,
        "posts",
        &file("c1.ndjson", &first),
        &["--changed-at", "slug"],
    );
    assert_input_error(&bad, "--changed-at");
}

/// `--parallel 4`: batches written at once, a document's lines still in input order (its last
/// line is what is stored), the summary exact; `--parallel 0` is refused before anything runs.
#[tokio::test]
async fn parallel_batches_keep_each_documents_lines_in_order() {
    let name = "nk_cli_ingest_parallel";
    let db = database(name).await;
    let base = posts(20);
    let lines: Vec<Post> = (0..300)
        .map(|i| Post {
            body: format!("version {i}"),
            ..base[(i * 7) % 20].clone()
        })
        .collect();
    let text: String = lines.iter().map(|p| line(p) + "\n").collect();
    let input = file("parallel.ndjson", &text);
    let args = ["--json", "--parallel", "4", "--batch-size", "10"];
    let s = summary(&ingest(name, "posts", &input, &args));
    assert_eq!(
        (
            s["inserted"].as_u64(),
            s["updated"].as_u64(),
            s["rejected"].as_u64()
        ),
        (Some(20), Some(280), Some(0)),
        "{s}"
    );
    let coll = db.collection::<Post>("posts");
    for p in &base {
        let last = lines.iter().rev().find(|l| l.slug == p.slug).unwrap();
        let stored = coll
            .find_one(doc! {"_id": p.id().unwrap().to_string()})
            .await
            .unwrap();
        assert_eq!(stored.as_ref(), Some(last), "{}", p.slug);
    }
    let out = ingest(name, "posts", &input, &["--parallel", "0"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
