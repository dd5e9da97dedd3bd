//! What an ingest tells: each refused line (counted, and written to --reject), and the summary
//! line or JSON object on stdout.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use natural_key_runtime::{BatchReport, Error};

use crate::args::IngestArgs;
use crate::output::{note, print};

/// A line that did not become a written document.
pub(crate) struct Reject {
    pub(crate) line: u64,
    /// `input` (not a document), or the library's [`Error::kind`].
    pub(crate) kind: &'static str,
    pub(crate) reason: String,
    pub(crate) text: String,
}

/// Where rejects go: counted always, written to `--reject` when given.
pub(crate) struct Rejects {
    pub(crate) count: u64,
    /// The lowest line refused, and why.
    first: Option<(u64, String)>,
    file: Option<std::io::BufWriter<File>>,
    error: Option<String>,
    /// `--verbose`: each reject on stderr too.
    verbose: bool,
}

impl Rejects {
    /// `--reject`'s file created (emptied) when given, before a line is read.
    pub(crate) fn create(path: Option<&Path>, verbose: bool) -> Result<Rejects, String> {
        let file = match path {
            Some(path) => Some(std::io::BufWriter::new(
                File::create(path)
                    .map_err(|e| format!("cannot create --reject {}: {e}", path.display()))?,
            )),
            None => None,
        };
        Ok(Rejects {
            count: 0,
            first: None,
            file,
            error: None,
            verbose,
        })
    }

    pub(crate) fn add(&mut self, r: Reject) {
        self.count += 1;
        if self.verbose {
            note(&format!(
                "line {} refused ({}): {}",
                r.line, r.kind, r.reason
            ));
        }
        if self.first.as_ref().is_none_or(|(line, _)| r.line < *line) {
            self.first = Some((r.line, r.reason.clone()));
        }
        if let Some(f) = &mut self.file {
            let json = serde_json::json!({
                "line": r.line, "kind": r.kind, "reason": r.reason, "input": r.text,
            });
            if let Err(e) = writeln!(f, "{json}") {
                self.error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    /// Once every line is settled: the `--reject` file written out, or the first error writing
    /// it (a reject not written would be a refused line lost).
    pub(crate) fn flush(&mut self) -> Result<(), String> {
        if let Some(f) = &mut self.file {
            if let Err(e) = f.flush() {
                self.error.get_or_insert_with(|| e.to_string());
            }
        }
        match &self.error {
            Some(e) => Err(format!("cannot write --reject: {e}")),
            None => Ok(()),
        }
    }
}

/// What a run did: the library's reports summed, and where it stopped if it did.
pub(crate) struct Outcome {
    pub(crate) report: BatchReport,
    /// Documents a dry run checked and would write.
    pub(crate) checked: u64,
    /// What --prune deleted (or, in a dry run, would delete); `None` when not asked or skipped.
    pub(crate) pruned: Option<u64>,
    /// The line of the first document not settled, and the error that stopped the run.
    pub(crate) stopped: Option<(u64, Error)>,
    /// Lines read.
    pub(crate) lines: u64,
}

/// The summary line (or JSON object) on stdout; with `--quiet`, only the JSON object.
pub(crate) fn summarize(
    args: &IngestArgs,
    db: &str,
    source: &str,
    outcome: &Outcome,
    rejects: &Rejects,
    seconds: f64,
) -> Result<(), String> {
    let namespace = format!("{db}.{}", args.connect.collection);
    let r = &outcome.report;
    if args.json {
        let json = serde_json::json!({
            "collection": namespace,
            "input": source,
            "lines": outcome.lines,
            "inserted": r.inserted,
            "updated": r.updated,
            "unchanged": r.unchanged,
            "stale": r.stale,
            "existed": r.existed,
            "missing": r.missing,
            "deleted": r.deleted,
            "not_found": r.not_found,
            "gone": r.gone,
            "rejected": rejects.count,
            "first_rejected": rejects.first.as_ref().map(|(line, reason)| {
                serde_json::json!({ "line": line, "reason": reason })
            }),
            "dry_run": args.dry_run,
            "checked": outcome.checked,
            "pruned": outcome.pruned,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "stopped_at_line": outcome.stopped.as_ref().map(|(line, _)| line),
        });
        return print(&json.to_string());
    }
    if args.quiet {
        return Ok(());
    }
    let mut text = format!(
        "ingest of {source} into {namespace}: {} lines; {} inserted, {} updated, {} unchanged{}",
        outcome.lines,
        r.inserted,
        r.updated,
        r.unchanged,
        left_alone(r)
    );
    if args.delete_when.is_some() {
        text.push_str(&format!(
            ", {} deleted, {} not found, {} gone",
            r.deleted, r.not_found, r.gone
        ));
    }
    if args.dry_run {
        text = format!(
            "dry run of {source} into {namespace}: {} lines; {} documents would be written \
             (not compared with what is stored)",
            outcome.lines, outcome.checked
        );
    }
    if let Some(n) = outcome.pruned {
        let verb = if args.dry_run {
            "would prune"
        } else {
            "pruned"
        };
        text.push_str(&format!(", {verb} {n}"));
    }
    text.push_str(&format!(", {} rejected in {seconds:.1} s", rejects.count));
    if let Some((line, reason)) = &rejects.first {
        text.push_str(&format!("\nfirst rejected: line {line}: {reason}"));
        if let Some(path) = &args.reject {
            text.push_str(&format!(" (all in {})", path.display()));
        }
    }
    print(&text)
}

/// The lines left alone, each count where it is not 0: `, 3 stale, 1 existed, 2 missing`
/// (older than the stored version; stored already, to `--mode insert`; not stored, to
/// `--mode update`). None of them is a refused line.
pub(crate) fn left_alone(r: &BatchReport) -> String {
    [
        (r.stale, "stale"),
        (r.existed, "existed"),
        (r.missing, "missing"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!(", {n} {what}"))
    .collect()
}
