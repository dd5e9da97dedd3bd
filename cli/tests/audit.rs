//! `natural-key audit` end to end on the test engine: the same data audited by the Rust type
//! (`Collection::audit`) and by the binary's key spec must give the same counts, hash drift
//! aside; `--json`, `--allow` and bad input.

mod common;

use common::{assert_input_error, bin, uri};
use natural_key::bson::{doc, oid::ObjectId, Document};
use natural_key::mongodb::{Client, Database};
use natural_key::prelude::*;
use serde_json::Value;

#[derive(NaturalKey, Serialize, Deserialize, Clone)]
struct Post {
    #[key]
    slug: String,
    #[key(lowercase)]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

const TS: i64 = 1_700_000_000_000;

fn post(slug: &str, lang: &str, body: &str) -> Post {
    Post {
        slug: slug.into(),
        lang: lang.into(),
        published_at: TS,
        body: body.into(),
        fetched_at: 1,
    }
}

fn legacy(slug: &str, lang: &str, body: &str, fetched_at: i64) -> Document {
    doc! { "_id": ObjectId::new(), "slug": slug, "lang": lang, "published_at": TS, "body": body, "fetched_at": fetched_at }
}

/// Clean, hash-drifted, id-drifted, legacy, duplicated (identical, differing, identical but for
/// a skip_hash field, differing only in the case of a lowercase key) and unreadable posts.
async fn seed(name: &str) -> (Database, natural_key::Collection<Post>) {
    let client = Client::with_uri_str(uri()).await.unwrap();
    let db = client.database(name);
    db.drop().await.unwrap();
    let posts = natural_key::Collection::<Post>::open(&db, "posts")
        .await
        .unwrap();
    for p in [
        post("a", "en", "A"),
        post("b", "en", "B"),
        post("c", "EN", "C"),
        post("d", "en", "D"),
    ] {
        posts.upsert(&p).await.unwrap();
    }
    let raw = db.collection::<Document>("posts");
    let d = post("d", "en", "D").id().unwrap().to_string();
    raw.update_one(doc! {"_id": &d}, doc! {"$set": {"body": "edited"}})
        .await
        .unwrap();
    let b = post("b", "en", "B").id().unwrap().to_string();
    raw.update_one(doc! {"_id": &b}, doc! {"$set": {"published_at": TS + 1}})
        .await
        .unwrap();
    raw.insert_many([
        legacy("e", "en", "E", 1),
        legacy("a", "en", "A", 1),
        legacy("f", "en", "F", 1),
        legacy("f", "en", "F", 1),
        legacy("g", "en", "G1", 1),
        legacy("g", "en", "G2", 1),
        legacy("h", "en", "H", 1),
        legacy("h", "en", "H", 2),
        legacy("i", "EN", "I", 1),
        legacy("i", "en", "I", 1),
        doc! { "_id": ObjectId::new(), "slug": "j", "published_at": TS, "body": "J", "fetched_at": 1 },
        doc! { "_id": ObjectId::new(), "slug": "k", "lang": 5, "published_at": TS, "body": "K", "fetched_at": 1 },
    ])
    .await
    .unwrap();
    (db, posts)
}

fn audit_args<'a>(uri: &'a str, db: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "audit",
        "--uri",
        uri,
        "--db",
        db,
        "--collection",
        "posts",
        "--key",
        "slug:str",
        "--key",
        "lang:str:lowercase",
        "--timestamp",
        "published_at:ms",
        "--skip-hash",
        "fetched_at",
    ];
    args.extend_from_slice(extra);
    args
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

#[tokio::test(flavor = "current_thread")]
async fn the_binary_counts_what_the_typed_audit_counts() {
    const DB: &str = "nk_cli_audit_counts";
    let (_db, posts) = seed(DB).await;
    let typed = posts.audit().await.unwrap();
    let uri = uri();

    let out = bin()
        .args(audit_args(&uri, DB, &["--json"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "findings and no --allow");
    let j = json_of(&out);
    let count = |name: &str| j[name]["count"].as_u64().unwrap();
    assert_eq!(j["scanned"], typed.scanned);
    assert_eq!(count("unreadable"), typed.unreadable.count);
    assert_eq!(count("legacy"), typed.legacy.count);
    assert_eq!(count("id_drift"), typed.id_drift.count);
    assert_eq!(
        count("duplicates_identical"),
        typed.duplicates_identical.count
    );
    assert_eq!(
        count("duplicates_differing"),
        typed.duplicates_differing.count
    );
    assert_eq!(j["surplus_documents"], typed.surplus_documents);
    // Without the type, a document at home is clean whatever its hash.
    assert_eq!(j["clean"], typed.clean + typed.hash_drift.count);
    assert_eq!(j["hash_drift"]["checked"], false);
    assert!(j["hash_drift"]["count"].is_null());
    // The seed, counted by hand: the comparison above is not between two empty reports.
    assert_eq!(
        (
            typed.scanned,
            typed.clean,
            typed.hash_drift.count,
            typed.id_drift.count
        ),
        (16, 2, 1, 1)
    );
    assert_eq!((typed.legacy.count, typed.unreadable.count), (10, 2));
    assert_eq!(
        (
            typed.duplicates_identical.count,
            typed.duplicates_differing.count
        ),
        (3, 2)
    );
    assert_eq!(typed.surplus_documents, 5);
    // Samples are the stored `_id`s, as extended JSON.
    assert!(
        j["legacy"]["sample"][0]["$oid"].is_string(),
        "{}",
        j["legacy"]
    );
    assert_eq!(
        j["id_drift"]["sample"][0],
        post("b", "en", "B").id().unwrap().to_string()
    );
    assert!(j["first_unreadable"]
        .as_str()
        .unwrap()
        .contains("field `lang`"));
    let exceeded: Vec<&str> = j["exceeded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["finding"].as_str().unwrap())
        .collect();
    assert_eq!(
        exceeded,
        [
            "unreadable",
            "legacy",
            "id-drift",
            "duplicates-identical",
            "duplicates-differing"
        ]
    );

    // The table says what it did not check.
    let out = bin().args(audit_args(&uri, DB, &[])).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("hash drift") && table.contains("not checked"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("legacy") && l.contains(" 10 ")),
        "{table}"
    );
    assert!(
        table.contains("beyond --allow: unreadable 2 > 0, legacy 10 > 0"),
        "{table}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn allow_sets_the_exit_status() {
    const DB: &str = "nk_cli_audit_allow";
    seed(DB).await;
    let uri = uri();
    let status = |allow: &[&str]| {
        let mut extra = vec!["--json"];
        for a in allow {
            extra.extend(["--allow", a]);
        }
        let out = bin().args(audit_args(&uri, DB, &extra)).output().unwrap();
        let j = json_of(&out);
        assert_eq!(j["within_allow"], out.status.code() == Some(0));
        (out.status.code(), j["exceeded"].clone())
    };
    assert_eq!(
        status(&["unreadable,legacy,id-drift,duplicates"]).0,
        Some(0)
    );
    assert_eq!(
        status(&[
            "unreadable=2,legacy=10,id-drift=1",
            "duplicates-identical=3,duplicates-differing=2"
        ])
        .0,
        Some(0)
    );
    let (code, exceeded) = status(&["unreadable,legacy=9,id-drift,duplicates"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        exceeded,
        serde_json::json!([{"finding": "legacy", "count": 10, "allowed": 9}])
    );
    // `duplicates` covers both kinds; the last word on a finding wins.
    let (code, exceeded) = status(&[
        "unreadable,legacy,id-drift,duplicates=2",
        "duplicates-differing",
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(
        exceeded,
        serde_json::json!([{"finding": "duplicates-identical", "count": 3, "allowed": 2}])
    );
}

#[tokio::test(flavor = "current_thread")]
async fn bad_input_is_one_line_and_status_2() {
    const DB: &str = "nk_cli_audit_bad";
    seed(DB).await;
    let uri = uri();
    let with_key = |key: &'static str| -> Vec<String> {
        [
            "audit",
            "--uri",
            &uri,
            "--db",
            DB,
            "--collection",
            "posts",
            "--key",
            key,
            "--timestamp",
            "published_at",
        ]
        .map(String::from)
        .to_vec()
    };
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!(
        "mongodb://{}/?retryWrites=false",
        nobody.local_addr().unwrap()
    );
    drop(nobody);
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        (with_key("slug"), "no type"),
        (with_key("slug:float"), "unknown key type `float`"),
        (with_key("lang:int:lowercase"), "str keys only"),
        (with_key("_nk_identity:str"), "natural-key's own field"),
        (
            with_key("slugg:str"),
            "no document of nk_cli_audit_bad.posts has the field `slugg`",
        ),
        (with_key("published_at:int"), "named twice"),
    ];
    let mut more = |extra: &[&str], says: &'static str| {
        let mut args = with_key("slug:str");
        args.extend(extra.iter().map(|s| s.to_string()));
        cases.push((args, says));
    };
    more(&["--scheme", "fancy"], "possible values: default, joined");
    more(&["--allow", "legacy=many"], "not a count");
    more(&["--allow", "everything"], "unknown finding `everything`");
    more(&["--namespace", "n", "--scheme", "joined"], "no namespace");
    for (args, says) in &cases {
        assert_input_error(&bin().args(args).output().unwrap(), says);
    }
    let base = |uri: &str| -> Vec<String> {
        [
            "audit",
            "--uri",
            uri,
            "--db",
            DB,
            "--collection",
            "posts",
            "--key",
            "slug:str",
            "--timestamp",
            "published_at",
            "--timeout",
            "1",
        ]
        .map(String::from)
        .to_vec()
    };
    let mut other = base(&uri);
    other[6] = "postz".into();
    assert_input_error(
        &bin().args(other).output().unwrap(),
        "has no collection `postz`",
    );
    assert_input_error(&bin().args(base("notauri")).output().unwrap(), "bad --uri");
    assert_input_error(
        &bin()
            .args(base("mongodb://127.0.0.1:99999/"))
            .output()
            .unwrap(),
        "bad --uri",
    );
    assert_input_error(
        &bin().args(base(&down)).output().unwrap(),
        "cannot reach the server",
    );
}
