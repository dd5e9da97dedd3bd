//! Running the built `natural-key` binary, and the test engine's URI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_natural-key"))
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run natural-key")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `MONGODB_URI`, or the FerretDB that `scripts/db up` starts (as the root crate's tests do).
pub fn uri() -> String {
    if let Ok(u) = std::env::var("MONGODB_URI") {
        if !u.is_empty() {
            return u;
        }
    }
    let out = Command::new("bash")
        .arg(repo().join("scripts/db"))
        .arg("up")
        .output()
        .expect("run scripts/db up");
    assert!(out.status.success(), "scripts/db up failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .expect("scripts/db up prints the URI last")
        .trim()
        .to_string()
}

/// Exit status 2 and one line on stderr, `natural-key: error: ...`, no panic or backtrace.
pub fn assert_input_error(out: &Output, says: &str) {
    assert_one_error_line(out, 2, says);
}

/// Exit status 3, the server stopped the run, and one line on stderr that says to run it
/// again.
pub fn assert_stopped(out: &Output, says: &str) {
    assert_one_error_line(out, 3, says);
    assert!(String::from_utf8_lossy(&out.stderr).contains("run the same command again"));
}

fn assert_one_error_line(out: &Output, status: i32, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "stderr: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("natural-key: error: "), "{stderr}");
    assert!(stderr.contains(says), "`{says}` not in: {stderr}");
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!stderr.contains(bad), "{stderr}");
    }
}
