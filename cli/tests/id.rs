//! `natural-key id` against the golden vectors and bad input.

mod common;

use common::{assert_input_error, repo, run};
use serde_json::Value;

fn key_arg(k: &Value) -> String {
    let v = &k["value"];
    match k["type"].as_str().unwrap() {
        "none" => "none".into(),
        "str" | "bytes" | "uuid" | "objectid" => {
            format!("{}:{}", k["type"].as_str().unwrap(), v.as_str().unwrap())
        }
        "int" | "bool" => format!("{}:{v}", k["type"].as_str().unwrap()),
        t => panic!("a key type the test does not know: {t}"),
    }
}

fn scheme_args(v: &Value) -> Vec<String> {
    match v["scheme"].as_str().unwrap() {
        "default" => vec![
            "--scheme=default".into(),
            format!("--namespace={}", v["namespace"].as_str().unwrap()),
        ],
        "joined" => vec![
            "--scheme=joined".into(),
            format!("--separator={}", v["separator"].as_str().unwrap()),
        ],
        s => panic!("unknown scheme {s}"),
    }
}

fn stdout_of(args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args);
    assert!(
        out.status.success(),
        "natural-key {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_golden_vector_through_the_binary() {
    let text = std::fs::read_to_string(repo().join("tests/vectors/ids.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 20, "the vector file lost entries");
    for v in vectors {
        let keys: Vec<String> = v["keys"].as_array().unwrap().iter().map(key_arg).collect();
        let mut args = vec!["id".to_string()];
        args.extend(scheme_args(v));
        args.push(format!("--ts={}", v["timestamp_ms"]));
        args.extend(keys.iter().cloned());
        assert_eq!(
            stdout_of(&args),
            format!("{}\n", v["id"].as_str().unwrap()),
            "vector {}",
            v["name"]
        );

        let mut args = vec!["id".to_string(), "--identity".into()];
        args.extend(scheme_args(v));
        args.extend(keys);
        assert_eq!(
            stdout_of(&args),
            format!("{}\n", v["identity"].as_str().unwrap()),
            "vector {} --identity",
            v["name"]
        );
    }
}

#[test]
fn rfc3339_and_milliseconds_give_one_id() {
    let ms = stdout_of(&[
        "id".into(),
        "--ts".into(),
        "1709285400123".into(),
        "--namespace".into(),
        "blog.post".into(),
        "str:retries".into(),
        "str:en".into(),
    ]);
    // docs/id-scheme.md, "Worked example".
    assert_eq!(ms, "01HQWNJQHVYFS02189P4P8M0NY\n");
    for ts in ["2024-03-01T09:30:00.123Z", "2024-03-01T10:30:00.1239+01:00"] {
        let args = [
            "id",
            "--ts",
            ts,
            "--namespace",
            "blog.post",
            "str:retries",
            "str:en",
        ]
        .map(String::from);
        assert_eq!(stdout_of(&args), ms, "{ts}");
    }
}

#[test]
fn bad_input_is_one_line_and_status_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["id", "--ts", "0", "float:1"], "unknown key type `float`"),
        (&["id", "--ts", "0", "slug"], "TYPE:VALUE"),
        (&["id", "--ts", "0", "int:1.5"], "not a decimal integer"),
        (
            &["id", "--ts", "0", "uuid:67e5504410b1426f9247bb680e5fe0c8"],
            "hyphenated UUID",
        ),
        (&["id", "--ts", "0", "objectid:507f"], "24 hex digits"),
        (
            &["id", "--scheme", "fancy", "--ts", "0", "str:a"],
            "possible values: default, joined",
        ),
        (
            &["id", "--ts", "yesterday", "str:a"],
            "not an RFC 3339 date-time",
        ),
        (
            &["id", "--ts", "2024-02-30T00:00:00Z", "str:a"],
            "day out of range",
        ),
        (&["id", "--ts", "-1", "str:a"], "outside the ULID range"),
        (
            &["id", "--ts", "281474976710656", "str:a"],
            "outside the ULID range",
        ),
        (&["id", "str:a"], "--ts"),
        (&["id", "--ts", "0"], "TYPE:VALUE"),
        (
            &[
                "id",
                "--scheme",
                "joined",
                "--namespace",
                "n",
                "--ts",
                "0",
                "str:a",
            ],
            "no namespace",
        ),
        (
            &["id", "--separator", "-", "--ts", "0", "str:a"],
            "joined scheme",
        ),
        (&["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, says) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_natural-key"))
            .args(*args)
            .output()
            .unwrap();
        assert_input_error(&out, says);
    }
}
