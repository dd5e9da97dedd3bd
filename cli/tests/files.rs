//! `natural-key ingest` of the files users have, end to end on the test engine: an export of a
//! natural-key collection (canonical and relaxed Extended JSON, lines and an array) ingests into
//! another collection and again as all unchanged; a foreign `_id` is refused or kept; CSV/TSV
//! with multi-line quoted cells, a byte-order mark, typed columns and `--fields`; and every
//! exit status from a real run.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_input_error, assert_stopped, bin, uri};
use natural_key::bson::{self, doc, oid::ObjectId, spec::ElementType, Bson, Document};
use natural_key::mongodb::{Client, Database};
use natural_key::prelude::*;
use serde_json::Value;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Reading {
    #[key]
    station: String,
    #[key(timestamp)]
    at: bson::DateTime,
    celsius: f64,
    count: i64,
    small: i64,
    source: ObjectId,
    tags: Vec<String>,
    note: Option<String>,
}

fn readings(n: usize) -> Vec<Reading> {
    (0..n)
        .map(|i| Reading {
            station: format!("st-{i}"),
            at: bson::DateTime::from_millis(1_700_000_000_000 + i as i64 * 1000),
            celsius: i as f64 / 8.0 - 3.0,
            count: 5_000_000_000 + i as i64,
            small: i as i64,
            source: ObjectId::from_bytes([i as u8; 12]),
            tags: vec!["t".into(), format!("n{}", i % 3)],
            note: (i % 2 == 0).then(|| format!("note \"{i}\"\nsecond line")),
        })
        .collect()
}

const READING_SPEC: [&str; 4] = ["--key", "station:str", "--timestamp", "at"];

async fn database(name: &str) -> Database {
    let client = Client::with_uri_str(uri()).await.unwrap();
    let db = client.database(name);
    db.drop().await.unwrap();
    db
}

fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nk-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn ingest(db: &str, coll: &str, input: &Path, spec: &[&str], extra: &[&str]) -> Output {
    bin()
        .arg("ingest")
        .arg(input)
        .args(["--uri", &uri(), "-d", db, "-c", coll])
        .args(spec)
        .args(extra)
        .output()
        .expect("run natural-key ingest")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn summary(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// (inserted, updated, unchanged, rejected) of a `--json` summary.
fn counts(s: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    (n("inserted"), n("updated"), n("unchanged"), n("rejected"))
}

async fn documents(db: &Database, coll: &str) -> Vec<Document> {
    let mut out = Vec::new();
    let c = db.collection::<Document>(coll);
    let mut cursor = c.find(doc! {}).sort(doc! { "_id": 1 }).await.unwrap();
    while cursor.advance().await.unwrap() {
        out.push(cursor.deserialize_current().unwrap());
    }
    out
}

/// `(_id, _nk_identity, _nk_hash)` of every stored document.
async fn keys(db: &Database, coll: &str) -> Vec<(String, String, String)> {
    documents(db, coll)
        .await
        .iter()
        .map(|d| {
            let s = |k| d.get_str(k).unwrap().to_string();
            (s("_id"), s("_nk_identity"), s("_nk_hash"))
        })
        .collect()
}

/// The collection as mongoexport writes it: one document a line, `_id` and `_nk_*` included,
/// in canonical (`--jsonFormat=canonical`) or relaxed (its default, and pymongo's) Extended
/// JSON.
async fn export(db: &Database, coll: &str, canonical: bool) -> Vec<String> {
    documents(db, coll)
        .await
        .into_iter()
        .map(|d| {
            let b = Bson::Document(d);
            let v = match canonical {
                true => b.into_canonical_extjson(),
                false => b.into_relaxed_extjson(),
            };
            v.to_string()
        })
        .collect()
}

/// An export of a natural-key collection, canonical or relaxed, as lines or as an array,
/// ingests into another collection under the same ids, identities and hashes (`_id` accepted,
/// `_nk_*` recomputed), and ingests again as all unchanged; the Rust type reads the copy back
/// as it wrote the original.
#[tokio::test]
async fn an_export_ingests_into_another_collection_and_again_as_unchanged() {
    let name = "nk_cli_files_export";
    let db = database(name).await;
    let all = readings(40);
    let typed = natural_key::Collection::<Reading>::open(&db, "source")
        .await
        .unwrap();
    typed.upsert_many(&all).await.unwrap();
    let canonical = export(&db, "source", true).await;
    assert!(canonical[0].contains("\"_nk_hash\"") && canonical[0].contains("\"_id\""));
    assert!(canonical[0].contains(r#"{"$date":{"$numberLong":"1700000000000"}}"#));
    assert!(canonical[0].contains(r#"{"$numberLong":"5000000000"}"#));
    let relaxed = export(&db, "source", false).await;
    assert!(
        relaxed[0].contains(r#"{"$date":"2023-11-14T22:13:20Z"}"#),
        "{}",
        relaxed[0]
    );
    let lines = |v: &[String]| v.iter().map(|l| l.clone() + "\n").collect::<String>();
    let canonical_file = file("export-canonical.json", &lines(&canonical));
    let relaxed_file = file("export-relaxed.json", &lines(&relaxed));
    let array_file = file(
        "export-array.json",
        &format!("[\n{}\n]\n", canonical.join(",\n")),
    );

    let json = ["--json"];
    let first = summary(&ingest(name, "copy", &canonical_file, &READING_SPEC, &json));
    assert_eq!(counts(&first), (40, 0, 0, 0), "{first}");
    assert_eq!(keys(&db, "copy").await, keys(&db, "source").await);
    for input in [&canonical_file, &relaxed_file] {
        let again = summary(&ingest(name, "copy", input, &READING_SPEC, &json));
        assert_eq!(
            counts(&again),
            (0, 0, 40, 0),
            "{}: {again}",
            input.display()
        );
    }
    let array = ["--json", "--type", "json", "--jsonArray"];
    let again = summary(&ingest(name, "copy", &array_file, &READING_SPEC, &array));
    assert_eq!(counts(&again), (0, 0, 40, 0), "{again}");
    // The source itself: its own export changes nothing there either.
    let own = summary(&ingest(name, "source", &relaxed_file, &READING_SPEC, &json));
    assert_eq!(counts(&own), (0, 0, 40, 0), "{own}");

    let first = summary(&ingest(
        name,
        "relaxed",
        &relaxed_file,
        &READING_SPEC,
        &json,
    ));
    assert_eq!(counts(&first), (40, 0, 0, 0), "{first}");
    let again = summary(&ingest(
        name,
        "relaxed",
        &relaxed_file,
        &READING_SPEC,
        &json,
    ));
    assert_eq!(counts(&again), (0, 0, 40, 0), "{again}");

    for coll in ["copy", "relaxed"] {
        let back = natural_key::Collection::<Reading>::open(&db, coll)
            .await
            .unwrap();
        for r in &all {
            let got = back.get(r.id().unwrap()).await.unwrap();
            assert_eq!(got.as_ref(), Some(r), "{coll}");
        }
        let d = &documents(&db, coll).await[0];
        assert_eq!(d.get("at").unwrap().element_type(), ElementType::DateTime);
        assert_eq!(d.get("count").unwrap().element_type(), ElementType::Int64);
    }
    db.drop().await.unwrap();
}

/// A line whose `_id` is not its derived id (an export of a collection natural-key did not
/// write) is refused, with its line and the reason; `--keep-id FIELD` keeps that `_id` under
/// FIELD, unless the line has FIELD already.
#[tokio::test]
async fn a_foreign_id_is_refused_or_kept_with_keep_id() {
    let name = "nk_cli_files_foreign_id";
    let db = database(name).await;
    let line = |oid: &str, station: &str, extra: &str| {
        format!(
            "{{\"_id\":{{\"$oid\":\"{oid}\"}},\"station\":\"{station}\",\"at\":{{\"$date\":\"2024-01-01T00:00:00Z\"}}{extra}}}\n"
        )
    };
    let text = [
        line("655403a0bd2d1ef3bc3a7f30", "a", ""),
        line("655403a0bd2d1ef3bc3a7f31", "b", ""),
        line("655403a0bd2d1ef3bc3a7f32", "c", ",\"legacy_id\":1"),
    ]
    .concat();
    let input = file("foreign.json", &text);
    let reject = file("foreign-rejects.json", "");
    let reject_arg = ["--json", "--reject", reject.to_str().unwrap()];
    let out = ingest(name, "c", &input, &READING_SPEC, &reject_arg);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(counts(&summary(&out)), (0, 0, 0, 3));
    let rejects: Vec<Value> = std::fs::read_to_string(&reject)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rejects.len(), 3);
    assert_eq!(
        (rejects[0]["line"].as_u64(), rejects[0]["kind"].as_str()),
        (Some(1), Some("foreign_id"))
    );
    let reason = rejects[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("655403a0bd2d1ef3bc3a7f30") && reason.contains("--keep-id"),
        "{reason}"
    );
    assert_eq!(
        db.collection::<Document>("c")
            .count_documents(doc! {})
            .await
            .unwrap(),
        0
    );

    let keep = [
        "--json",
        "--keep-id",
        "legacy_id",
        "--reject",
        reject.to_str().unwrap(),
    ];
    let out = ingest(name, "c", &input, &READING_SPEC, &keep);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(counts(&summary(&out)), (2, 0, 0, 1));
    let rejects = std::fs::read_to_string(&reject).unwrap();
    let r: Value = serde_json::from_str(rejects.lines().next().unwrap()).unwrap();
    assert_eq!(
        (r["line"].as_u64(), r["kind"].as_str()),
        (Some(3), Some("foreign_id")),
        "{r}"
    );
    assert!(r["reason"]
        .as_str()
        .unwrap()
        .contains("has a field `legacy_id` already"));
    let stored = documents(&db, "c").await;
    let a = stored
        .iter()
        .find(|d| d.get_str("station") == Ok("a"))
        .unwrap();
    assert_eq!(
        a.get_object_id("legacy_id").unwrap().to_hex(),
        "655403a0bd2d1ef3bc3a7f30"
    );
    assert_eq!(a.get_str("_id").unwrap().len(), 26, "the derived ULID: {a}");
    db.drop().await.unwrap();
}

/// CSV as spreadsheets write it — a byte-order mark, CRLF, a quoted cell holding a line break
/// and doubled quotes — with mongoimport's typed header: every cell stored as its column's type,
/// a bad cell refuses its record alone under the line the record starts on, and a rerun finds
/// everything unchanged.
#[tokio::test]
async fn csv_with_multi_line_cells_a_bom_and_typed_columns() {
    let name = "nk_cli_files_csv";
    let db = database(name).await;
    let csv = "\u{feff}sku.int64(),region.string(),day.date(2006-01-02),price.decimal(),\
               qty.int32(),ratio.double(),active.boolean(),note.string(),raw.binary(hex),\
               zip.string(),guess.auto()\r\n\
               42,eu,2024-03-01,19.90,3,0.5,true,\"two\r\nlines, \"\"quoted\"\"\",0aff,01234,7\r\n\
               43,eu,2024-03-02,5,1,1.25,0,plain,,00501,x\r\n\
               44,eu,2024-02-30,1,1,1,true,bad day,00,1,1\r\n\
               45,eu,2024-03-04,1,1,1,true,\"last\",01,1,2.5\r\n";
    let input = file("typed.csv", csv);
    let spec = [
        "--key",
        "sku:int",
        "--key",
        "region:str",
        "--timestamp",
        "day",
    ];
    let reject = file("typed-rejects.json", "");
    let extra = [
        "--json",
        "--headerline",
        "--columnsHaveTypes",
        "--reject",
        reject.to_str().unwrap(),
    ];
    let out = ingest(name, "items", &input, &spec, &extra);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(counts(&s), (3, 0, 0, 1), "{s}");
    assert_eq!(s["lines"], 6, "{s}");
    let r: Value = serde_json::from_str(std::fs::read_to_string(&reject).unwrap().trim()).unwrap();
    assert_eq!(
        r["line"], 5,
        "the record's own line, past the two-line cell: {r}"
    );
    assert_eq!(
        r["input"], "44,eu,2024-02-30,1,1,1,true,bad day,00,1,1",
        "{r}"
    );
    assert!(
        r["reason"].as_str().unwrap().contains("`day` is date()"),
        "{r}"
    );

    let coll = db.collection::<Document>("items");
    let d = coll.find_one(doc! { "sku": 42 }).await.unwrap().unwrap();
    let ty = |k: &str| d.get(k).unwrap().element_type();
    assert_eq!(
        [
            ty("sku"),
            ty("region"),
            ty("day"),
            ty("price"),
            ty("qty"),
            ty("ratio"),
            ty("active")
        ],
        [
            ElementType::Int64,
            ElementType::String,
            ElementType::DateTime,
            ElementType::Decimal128,
            ElementType::Int32,
            ElementType::Double,
            ElementType::Boolean,
        ]
    );
    assert_eq!(d.get_str("note").unwrap(), "two\r\nlines, \"quoted\"");
    assert_eq!(d.get_binary_generic("raw").unwrap(), &vec![0x0a, 0xff]);
    assert_eq!(
        d.get_str("zip").unwrap(),
        "01234",
        "string() keeps the leading zero"
    );
    assert_eq!(d.get_i32("guess").unwrap(), 7, "auto() guesses");
    assert_eq!(
        d.get_datetime("day").unwrap().timestamp_millis(),
        bson::DateTime::parse_rfc3339_str("2024-03-01T00:00:00Z")
            .unwrap()
            .timestamp_millis()
    );
    let d43 = coll.find_one(doc! { "sku": 43 }).await.unwrap().unwrap();
    assert!(!d43.get_bool("active").unwrap());
    assert_eq!(d43.get_str("guess").unwrap(), "x");

    let again = summary(&ingest(name, "items", &input, &spec, &extra));
    assert_eq!(counts(&again), (0, 0, 3, 1), "{again}");
    db.drop().await.unwrap();
}

/// Files without a header: `--fields` names the columns (the key fields take the key's
/// type), `--fieldFile` names them typed; the same values either way are the same documents.
#[tokio::test]
async fn fields_and_field_file_name_the_columns_of_a_headerless_file() {
    let name = "nk_cli_files_fields";
    let db = database(name).await;
    let spec = [
        "--key",
        "sku:int",
        "--key",
        "region:str",
        "--timestamp",
        "day:ms",
    ];
    let tsv = file(
        "items.tsv",
        "7\teu\t1700000000000\tBlue, large\n8\teu\t1700000000001\tRed\n",
    );
    let out = ingest(
        name,
        "items",
        &tsv,
        &spec,
        &["--json", "--fields", "sku,region,day,title"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(counts(&summary(&out)), (2, 0, 0, 0));
    let coll = db.collection::<Document>("items");
    let d = coll.find_one(doc! { "sku": 7 }).await.unwrap().unwrap();
    assert_eq!(d.get_i64("sku").unwrap(), 7);
    assert_eq!(d.get_i64("day").unwrap(), 1_700_000_000_000);
    assert_eq!(d.get_str("title").unwrap(), "Blue, large");

    let names = file(
        "fields.txt",
        "sku.int32()\nregion.string()\nday.int64()\ntitle.string()\n",
    );
    let typed = [
        "--json",
        "--type",
        "tsv",
        "--fieldFile",
        names.to_str().unwrap(),
        "--columnsHaveTypes",
    ];
    let out = ingest(name, "items", &tsv, &spec, &typed);
    assert_eq!(
        counts(&summary(&out)),
        (0, 0, 2, 0),
        "an int32 and an int64 of one number hash the same: {}",
        stderr(&out)
    );
    db.drop().await.unwrap();
}

/// Exit status 0 (all stored or unchanged), 1 (a refused line), 2 (bad usage, bad input), 3 (no
/// server to write to), each from a real run; logs on stderr, only the summary on stdout.
#[tokio::test]
async fn each_exit_status_from_a_real_run() {
    let name = "nk_cli_files_exit";
    let db = database(name).await;
    let good = "{\"station\":\"a\",\"at\":{\"$date\":\"2024-01-01T00:00:00Z\"}}\n";
    let input = file("exit-good.json", good);
    let out = ingest(name, "c", &input, &READING_SPEC, &["-v"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "the summary alone: {stdout}");
    assert!(stdout.contains("1 inserted"), "{stdout}");
    assert!(
        stderr(&out).contains("natural-key: ingest of"),
        "--verbose: {}",
        stderr(&out)
    );
    let out = ingest(name, "c", &input, &READING_SPEC, &["--quiet"]);
    assert_eq!(
        (
            out.status.code(),
            out.stdout.is_empty(),
            out.stderr.is_empty()
        ),
        (Some(0), true, true)
    );

    let bad = file("exit-bad.json", &format!("{good}{{\"station\":\"b\"}}\n"));
    let out = ingest(name, "c", &bad, &READING_SPEC, &["-v"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("line 2 refused (key_fields)"),
        "{}",
        stderr(&out)
    );

    // Bad usage: clap's, and options of another format.
    let out = ingest(name, "c", &input, &READING_SPEC, &["--no-such-flag"]);
    assert_input_error(&out, "--no-such-flag");
    let out = ingest(name, "c", &input, &READING_SPEC, &["--fields", "a,b"]);
    assert_input_error(&out, "--fields reads CSV/TSV");
    let csv = file("exit.csv", "station,at\n");
    let out = ingest(
        name,
        "c",
        &csv,
        &READING_SPEC,
        &["--headerline", "--fields", "station,at"],
    );
    assert_input_error(&out, "--headerline");
    // Bad input: a header without the key, an array cut short.
    let csv = file("exit-nokey.csv", "name,at\nx,1\n");
    let out = ingest(name, "c", &csv, &READING_SPEC, &[]);
    assert_input_error(&out, "no column `station`");
    let cut = file(
        "exit-cut.json",
        "[{\"station\":\"a\",\"at\":1},{\"station\":",
    );
    let out = ingest(name, "c", &cut, &READING_SPEC, &["--jsonArray"]);
    assert_input_error(&out, "ends inside the array");

    // No server: nothing listens on port 9.
    let out = bin()
        .arg("ingest")
        .arg(&input)
        .args([
            "--uri",
            "mongodb://127.0.0.1:9/",
            "-d",
            name,
            "-c",
            "c",
            "--timeout",
            "1",
        ])
        .args(READING_SPEC)
        .output()
        .unwrap();
    assert_stopped(&out, "cannot open");
    db.drop().await.unwrap();
}

/// The database comes from the connection string's path when -d is not given.
#[tokio::test]
async fn the_database_comes_from_the_connection_string() {
    let name = "nk_cli_files_uri_db";
    let db = database(name).await;
    let input = file("uri-db.json", "{\"station\":\"a\",\"at\":1}\n");
    let full = uri();
    let (base, query) = full
        .split_once('?')
        .map_or((full.as_str(), ""), |(b, q)| (b, q));
    let with_db = format!("{}/{name}?{query}", base.trim_end_matches('/'));
    let out = bin()
        .arg("ingest")
        .arg(&input)
        .args(["--uri", &with_db, "-c", "c", "--json"])
        .args(READING_SPEC)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(summary(&out)["collection"], format!("{name}.c"));
    assert_eq!(
        db.collection::<Document>("c")
            .count_documents(doc! {})
            .await
            .unwrap(),
        1
    );
    db.drop().await.unwrap();
}

/// A TCP proxy on a port of its own to the test engine, and what cuts it: once cut, it closes
/// every connection and refuses new ones, as a server that went away does.
async fn proxy(target: String) -> (u16, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (cut, mut cut_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        loop {
            let (mut client, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => return,
                },
                _ = cut_rx.changed() => return,
            };
            let target = target.clone();
            let mut cut_rx = cut_rx.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    _ = cut_rx.changed() => {}
                }
            });
        }
    });
    (port, cut)
}

/// The engine's `host:port`, and its connection string with the host replaced by `port` on
/// this machine, connecting to it alone.
fn through(port: u16) -> (String, String) {
    let full = uri();
    let rest = full.split_once("://").unwrap().1;
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let target = hosts.split(',').next().unwrap().to_string();
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut params: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("replicaSet="))
        .collect();
    params.push("directConnection=true");
    let path = if path.is_empty() { "/" } else { path };
    let proxied = format!(
        "mongodb://{userinfo}127.0.0.1:{port}{path}?{}",
        params.join("&")
    );
    (target, proxied)
}

/// A server that goes away mid-run: the batches in flight are retried until --retry-deadline,
/// then the run stops with exit status 3, the summary on stdout says where, and the same
/// command run again finishes it with every line stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_away_stops_the_run_with_3_and_a_rerun_finishes() {
    let name = "nk_cli_files_gone";
    let db = database(name).await;
    let n = 20_000;
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"station\":\"s{i}\",\"at\":{},\"v\":{i}}}\n",
                1_700_000_000_000i64 + i
            )
        })
        .collect();
    let input = file("gone.json", &text);
    let (port, cut) = {
        let (target, _) = through(0);
        proxy(target).await
    };
    let (_, proxied) = through(port);
    let mut child = bin()
        .arg("ingest")
        .arg(&input)
        .args(["--uri", &proxied, "-d", name, "-c", "c", "--json"])
        .args([
            "--batch-size",
            "200",
            "--timeout",
            "1",
            "--retry-deadline",
            "2",
        ])
        .args(READING_SPEC)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let coll = db.collection::<Document>("c");
    let start = Instant::now();
    while coll.count_documents(doc! {}).await.unwrap() < 600 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the run never got going"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the cut"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cut.send(true).unwrap();
    let stopped_at = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let waited = stopped_at.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        waited < Duration::from_secs(30),
        "bounded by the retry deadline: {waited:?}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("natural-key: error: stopped at line "),
        "{err}"
    );
    assert!(err.contains("run the same command again"), "{err}");
    let s = summary(&out);
    let line = s["stopped_at_line"].as_u64().expect("where it stopped");
    assert!(line > 0 && line <= n as u64, "{s}");

    let again = ingest(name, "c", &input, &READING_SPEC, &["--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let (inserted, updated, unchanged, rejected) = counts(&summary(&again));
    assert_eq!(
        (inserted + updated + unchanged, updated, rejected),
        (n as u64, 0, 0),
        "{}",
        summary(&again)
    );
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), n as u64);
    db.drop().await.unwrap();
}
