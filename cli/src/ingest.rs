//! `natural-key ingest`: documents from a file or stdin through the library's guarded batch
//! path ([`SpecCollection`]). This file reads lines, turns each into BSON, refuses the ones that
//! cannot be, and reports; the ids, hashes, guard and outcomes are the library's.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::{Args, ValueEnum};
use natural_key_runtime::bson::{self, Bson, RawDocumentBuf};
use natural_key_runtime::spec::{KeyKind, KeySpec, SpecCollection, TimestampForm};
use natural_key_runtime::{BatchReport, ContentHash, Error, RetryPolicy, WriteMode};

use crate::{connect, print, ConnectArgs, SpecArgs};

/// A line longer than this is refused unread: twice the largest document any engine stores
/// (16 MiB of BSON), so that every line an engine could take is read whole.
const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// Parsed documents waiting for the writer: the reader runs this far ahead.
const READ_AHEAD: usize = 4096;

#[derive(Args)]
pub(crate) struct IngestArgs {
    /// The input: a file, or - (the default) for stdin.
    #[arg(value_name = "FILE", default_value = "-")]
    input: PathBuf,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    #[command(flatten)]
    spec: SpecArgs,
    /// The input's format: ndjson (one JSON object per line, Extended JSON for the types JSON
    /// lacks), csv or tsv (a header line of field names, then one document per line). By
    /// default, from the file's extension (.csv, .tsv), else ndjson.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// merge: set the document's fields, keep the stored fields it lacks; replace: the stored
    /// document becomes the line's.
    #[arg(long, value_enum, default_value_t = Mode::Merge)]
    mode: Mode,
    /// Write every refused line here as one JSON object (NDJSON: line, kind, reason, input),
    /// a dead-letter file to fix and ingest again.
    #[arg(long, value_name = "FILE")]
    reject: Option<PathBuf>,
    /// Lines that are deletions: those whose FIELD is true (or "true"), or equals VALUE
    /// (compared as text), as change-data-capture streams mark them (Debezium's `__deleted`,
    /// `op=d`). Such a line deletes the document its keys derive, if it is stored; FIELD is
    /// never stored, on any line.
    #[arg(long, value_name = "FIELD[=VALUE]")]
    delete_when: Option<String>,
    /// The input is the whole source: once every line is written, delete the collection's
    /// natural-key documents whose key no line holds (never a document natural-key did not
    /// write). Skipped when any line was refused; refused beyond --max-prune-fraction.
    #[arg(long)]
    prune: bool,
    /// The largest fraction of the stored natural-key documents --prune deletes; beyond it,
    /// nothing is deleted and the run fails (is the input the whole source?).
    #[arg(long, value_name = "F", default_value_t = natural_key_runtime::DEFAULT_MAX_PRUNE_FRACTION, requires = "prune")]
    max_prune_fraction: f64,
    /// Write nothing: read and check every line as the write would (keys, field names,
    /// size), and with --prune list how many documents it would delete.
    #[arg(long)]
    dry_run: bool,
    /// Lines per batch: each batch of a run of upserts costs one read, at most one insert and
    /// one update (none for an unchanged batch, no read for one the collection has never
    /// seen), and is prepared while the one before is written; runs of upserts and of
    /// deletions are written in input order.
    #[arg(long, value_name = "N", default_value_t = natural_key_runtime::DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Print the summary as one JSON object (and no progress bar).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Ndjson,
    Csv,
    Tsv,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Merge,
    Replace,
}

impl From<Mode> for WriteMode {
    fn from(mode: Mode) -> WriteMode {
        match mode {
            Mode::Merge => WriteMode::Merge,
            Mode::Replace => WriteMode::Replace,
        }
    }
}

/// A line that did not become a written document.
struct Reject {
    line: u64,
    /// `input` (not a document), or the library's [`Error::kind`].
    kind: &'static str,
    reason: String,
    text: String,
}

/// Where rejects go: counted always, written to `--reject` when given.
struct Rejects {
    count: u64,
    /// The lowest line refused, and why.
    first: Option<(u64, String)>,
    file: Option<std::io::BufWriter<File>>,
    error: Option<String>,
}

impl Rejects {
    fn add(&mut self, r: Reject) {
        self.count += 1;
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
}

/// What the reader hands the writer: a document, whether the line is a deletion, its line
/// number and its text (kept until the library has settled it, for a reject).
struct Parsed {
    doc: RawDocumentBuf,
    delete: bool,
    line: u64,
    text: String,
}

pub(crate) fn ingest(args: IngestArgs) -> Result<ExitCode, String> {
    let spec = args.spec.spec()?;
    let tombstone = args
        .delete_when
        .as_deref()
        .map(Tombstone::parse)
        .transpose()?;
    let format = match args.format {
        Some(f) => f,
        None => match args.input.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("csv") => Format::Csv,
            Some(e) if e.eq_ignore_ascii_case("tsv") => Format::Tsv,
            _ => Format::Ndjson,
        },
    };
    let stdin = args.input.as_os_str() == "-";
    let input: Box<dyn Read + Send> = if stdin {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            File::open(&args.input)
                .map_err(|e| format!("cannot read {}: {e}", args.input.display()))?,
        )
    };
    let size = match stdin {
        true => None,
        false => std::fs::metadata(&args.input).ok().map(|m| m.len()),
    };
    let file = match &args.reject {
        Some(path) => Some(std::io::BufWriter::new(
            File::create(path)
                .map_err(|e| format!("cannot create --reject {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let rejects = Arc::new(Mutex::new(Rejects {
        count: 0,
        first: None,
        file,
        error: None,
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let started = Instant::now();
    let source = Source {
        input,
        format,
        tombstone,
        size,
        identities: args.prune,
    };
    let outcome = runtime.block_on(run(&args, spec, source, rejects.clone()))?;
    let seconds = started.elapsed().as_secs_f64();
    let mut rejects = Arc::try_unwrap(rejects)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .ok_or("the reader did not finish")?;
    if let Some(f) = &mut rejects.file {
        if let Err(e) = f.flush() {
            rejects.error.get_or_insert_with(|| e.to_string());
        }
    }
    if let Some(e) = &rejects.error {
        return Err(format!("cannot write --reject: {e}"));
    }
    let name = match stdin {
        true => "stdin".to_string(),
        false => args.input.display().to_string(),
    };
    summarize(&args, &name, &outcome, &rejects, seconds)?;
    if let Some((line, e)) = &outcome.stopped {
        return Err(format!(
            "stopped at line {line}: {}. Every line before it is settled; run the same command \
             again to finish (what is stored already costs no write)",
            crate::chain(e)
        ));
    }
    Ok(match rejects.count {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// The summary line (or JSON object) on stdout.
fn summarize(
    args: &IngestArgs,
    source: &str,
    outcome: &Outcome,
    rejects: &Rejects,
    seconds: f64,
) -> Result<(), String> {
    let namespace = format!("{}.{}", args.connect.db, args.connect.collection);
    let r = &outcome.report;
    if args.json {
        let json = serde_json::json!({
            "collection": namespace,
            "input": source,
            "lines": outcome.lines,
            "inserted": r.inserted,
            "updated": r.updated,
            "unchanged": r.unchanged,
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
    let mut text = format!(
        "ingest of {source} into {namespace}: {} lines; {} inserted, {} updated, {} unchanged",
        outcome.lines, r.inserted, r.updated, r.unchanged
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

/// Which lines are deletions: `--delete-when FIELD[=VALUE]`.
struct Tombstone {
    field: String,
    /// The value that marks a deletion, as text; `None`: `true` or `"true"`.
    value: Option<String>,
}

impl Tombstone {
    fn parse(arg: &str) -> Result<Tombstone, String> {
        let (field, value) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg, None),
        };
        if field.is_empty() {
            return Err("--delete-when needs a field name: FIELD or FIELD=VALUE".into());
        }
        Ok(Tombstone {
            field: field.to_string(),
            value,
        })
    }

    /// Whether `doc` is a deletion; the marker field is taken out of every document (it says
    /// what to do with the line, it is not data).
    fn take(&self, doc: RawDocumentBuf) -> Result<(RawDocumentBuf, bool), String> {
        let Some(marker) = doc.get(&self.field).map_err(|e| e.to_string())? else {
            return Ok((doc, false));
        };
        let delete = match (&self.value, marker) {
            (None, bson::RawBsonRef::Boolean(b)) => b,
            (None, bson::RawBsonRef::String(s)) => s == "true",
            (Some(v), bson::RawBsonRef::String(s)) => s == v,
            (Some(v), other) => Bson::try_from(other.to_raw_bson())
                .map(|b| {
                    let text = b.into_relaxed_extjson().to_string();
                    text == *v
                })
                .unwrap_or(false),
            (None, _) => false,
        };
        let mut rest = RawDocumentBuf::new();
        for element in &doc {
            let (name, value) = element.map_err(|e| e.to_string())?;
            if name != self.field {
                rest.append_ref(name, value);
            }
        }
        Ok((rest, delete))
    }
}

/// The input and how to read it.
struct Source {
    input: Box<dyn Read + Send>,
    format: Format,
    tombstone: Option<Tombstone>,
    size: Option<u64>,
    /// Keep every upserted line's identity (for --prune).
    identities: bool,
}

/// What a run did: the library's reports summed, and where it stopped if it did.
struct Outcome {
    report: BatchReport,
    /// Documents a dry run checked and would write.
    checked: u64,
    /// What --prune deleted (or, in a dry run, would delete); `None` when not asked or skipped.
    pruned: Option<u64>,
    /// The line of the first document not settled, and the error that stopped the run.
    stopped: Option<(u64, Error)>,
    /// Lines read.
    lines: u64,
}

/// Reads the input on a thread of its own while this task writes it, in order: each run of
/// consecutive upserts through one `upsert_stream`, each run of deletions through one
/// `delete_stream`.
async fn run(
    args: &IngestArgs,
    spec: KeySpec,
    source: Source,
    rejects: Arc<Mutex<Rejects>>,
) -> Result<Outcome, String> {
    let client = connect(&args.connect).await?;
    let db = client.database(&args.connect.db);
    let coll: SpecCollection = spec
        .open(&db, &args.connect.collection)
        .await
        .map_err(|e| {
            format!(
                "cannot open {}.{}: {}",
                args.connect.db,
                args.connect.collection,
                crate::chain(&e)
            )
        })?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Parsed>(READ_AHEAD);
    let bytes_read = Arc::new(AtomicU64::new(0));
    let lines_read = Arc::new(AtomicU64::new(0));
    let size = source.size;
    let reader = {
        let (rejects, bytes_read, lines_read) =
            (rejects.clone(), bytes_read.clone(), lines_read.clone());
        let spec = coll.spec().clone();
        std::thread::spawn(move || read(source, &spec, tx, &rejects, &bytes_read, &lines_read))
    };
    let bar = progress_bar(args, size);
    let show = |r: &BatchReport| {
        if let Some(bar) = &bar {
            bar.set_position(bytes_read.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{} inserted, {} updated, {} unchanged, {} deleted",
                r.inserted, r.updated, r.unchanged, r.deleted
            ));
        }
    };
    let mut report = BatchReport::default();
    let mut stopped = None;
    let mut checked = 0;
    let mut next = None;
    while stopped.is_none() {
        let first = match next.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => break,
            },
        };
        let lines = Run {
            first: Some(first),
            rx: &mut rx,
            next: &mut next,
        };
        stopped = match args.dry_run {
            false => write_run(&coll, args, lines, &mut report, &rejects, &show).await,
            true => {
                checked += check_run(&coll, lines, &rejects).await;
                None
            }
        };
        show(&report);
    }
    drop(rx);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    // The reader ends at the end of the input, or when the channel closes.
    let read = reader
        .join()
        .map_err(|_| "the reader panicked".to_string())?;
    let identities = match (read, &stopped) {
        (Ok(identities), _) => identities,
        (Err(_), Some(_)) => Vec::new(),
        (Err(e), None) => return Err(e),
    };
    let pruned = match (args.prune, &stopped) {
        (true, None) => prune(&coll, args, identities, &rejects).await?,
        _ => None,
    };
    Ok(Outcome {
        report,
        checked,
        pruned,
        stopped,
        lines: lines_read.load(Ordering::Relaxed),
    })
}

fn progress_bar(args: &IngestArgs, size: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() || args.json {
        return None;
    }
    let (bar, template) = match size {
        Some(n) => (
            indicatif::ProgressBar::new(n),
            "{spinner} {bytes}/{total_bytes} read, {msg} [{elapsed}, {eta} left] {wide_bar}",
        ),
        None => (
            indicatif::ProgressBar::new_spinner(),
            "{spinner} {bytes} read, {msg} [{elapsed}]",
        ),
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}

/// The lines of one run: consecutive lines of one kind (upserts, or deletions) from the
/// reader's channel. The first line of the other kind is left in `next`, for the next run.
struct Run<'r> {
    first: Option<Parsed>,
    rx: &'r mut tokio::sync::mpsc::Receiver<Parsed>,
    next: &'r mut Option<Parsed>,
}

/// A run also ends when no line comes for this long, so that a slow producer's lines are
/// written without waiting for a full batch.
const IDLE: std::time::Duration = std::time::Duration::from_secs(1);

impl Run<'_> {
    fn deletes(&self) -> bool {
        self.first.as_ref().is_some_and(|p| p.delete)
    }

    /// The run's next line; `None` at its end. `delete`: the run's kind.
    async fn next(&mut self, delete: bool) -> Option<Parsed> {
        let p = match self.first.take() {
            Some(p) => p,
            None => tokio::time::timeout(IDLE, self.rx.recv()).await.ok()??,
        };
        if p.delete != delete {
            *self.next = Some(p);
            return None;
        }
        Some(p)
    }
}

/// The lines a call has been handed and has not settled, from its input index `base`: each
/// line's number and text, for a reject. A batch is settled when the call reports progress,
/// and its lines are let go.
#[derive(Default)]
struct Unsettled {
    base: usize,
    lines: std::collections::VecDeque<(u64, String)>,
    /// The call's failures already turned into rejects.
    seen: usize,
}

impl Unsettled {
    fn line(&self, index: usize) -> u64 {
        let at = index.checked_sub(self.base);
        at.and_then(|k| self.lines.get(k))
            .map_or(0, |(line, _)| *line)
    }

    /// Turns the failures of `r` not seen yet into rejects, and lets go of the lines of the
    /// batches `r` has settled.
    fn settle(&mut self, r: &BatchReport, rejects: &Mutex<Rejects>) {
        if let Ok(mut out) = rejects.lock() {
            for (index, e) in r.failures.iter().skip(self.seen) {
                let at = index.checked_sub(self.base);
                let (line, text) = at
                    .and_then(|k| self.lines.get_mut(k))
                    .map(|(line, text)| (*line, std::mem::take(text)))
                    .unwrap_or_default();
                out.add(Reject {
                    line,
                    kind: e.kind(),
                    reason: crate::chain(e),
                    text,
                });
            }
        }
        self.seen = r.failures.len();
        let settled = usize::try_from(r.processed()).unwrap_or(usize::MAX);
        while self.base < settled && self.lines.pop_front().is_some() {
            self.base += 1;
        }
    }
}

/// Writes one run through one call of the library — batches of `--batch-size`, each prepared
/// while the one before is written, and a batch that is all new inserted without a read — and
/// turns its failures into rejects as each batch settles. The line and the error where it
/// stopped (nothing after it is written).
async fn write_run(
    coll: &SpecCollection,
    args: &IngestArgs,
    lines: Run<'_>,
    total: &mut BatchReport,
    rejects: &Mutex<Rejects>,
    show: &(dyn Fn(&BatchReport) + Sync),
) -> Option<(u64, Error)> {
    let delete = lines.deletes();
    let unsettled = Mutex::new(Unsettled::default());
    let docs = futures_util::stream::unfold(lines, |mut lines| {
        let unsettled = &unsettled;
        async move {
            let p = lines.next(delete).await?;
            if let Ok(mut u) = unsettled.lock() {
                u.lines.push_back((p.line, p.text));
            }
            Some((p.doc, lines))
        }
    });
    let mut before = BatchReport::default();
    add(&mut before, total);
    let progress = |r: &BatchReport| {
        if let Ok(mut u) = unsettled.lock() {
            u.settle(r, rejects);
        }
        let mut sum = BatchReport::default();
        add(&mut sum, &before);
        add(&mut sum, r);
        show(&sum);
    };
    let batch = args.batch_size.max(1);
    let result = match delete {
        false => {
            let call = coll.upsert_stream(docs).mode(args.mode.into());
            let call = call.batch_size(batch).on_progress(progress);
            call.retry(RetryPolicy::default()).await
        }
        true => {
            let call = coll.delete_stream(docs).batch_size(batch);
            let call = call.on_progress(progress);
            call.retry(RetryPolicy::default()).await
        }
    };
    let (part, stop) = match result {
        Ok(r) => (r, None),
        Err(e) => (e.report, Some((e.settled, e.error))),
    };
    let mut u = unsettled.lock().unwrap_or_else(|e| e.into_inner());
    let stop = stop.map(|(settled, error)| (u.line(settled), error));
    u.settle(&part, rejects);
    add(total, &part);
    stop
}

/// A dry run's run: each line checked as its write would check it, nothing sent. The number
/// that would be written.
async fn check_run(coll: &SpecCollection, mut lines: Run<'_>, rejects: &Mutex<Rejects>) -> u64 {
    let delete = lines.deletes();
    let mut ok = 0;
    while let Some(p) = lines.next(delete).await {
        match coll.check(&p.doc) {
            Ok(_) => ok += 1,
            Err(e) => {
                if let Ok(mut out) = rejects.lock() {
                    out.add(Reject {
                        line: p.line,
                        kind: e.kind(),
                        reason: crate::chain(&e),
                        text: p.text,
                    });
                }
            }
        }
    }
    ok
}

/// `--prune` once every line is written: what it deleted (in a dry run, would delete), or
/// `None` when lines were refused (a refused line's document would be deleted for a line that
/// holds it); refused beyond `--max-prune-fraction`.
async fn prune(
    coll: &SpecCollection,
    args: &IngestArgs,
    identities: Vec<ContentHash>,
    rejects: &Mutex<Rejects>,
) -> Result<Option<u64>, String> {
    let refused = rejects.lock().map(|r| r.count).unwrap_or(1);
    if refused > 0 {
        eprintln!(
            "natural-key: --prune skipped: {refused} lines were refused; fix them and run again"
        );
        return Ok(None);
    }
    let call = coll
        .prune_except(identities)
        .max_fraction(args.max_prune_fraction);
    let call = match args.dry_run {
        true => call.dry_run(),
        false => call,
    };
    match call.await {
        Ok(r) => Ok(Some(r.deleted)),
        Err(Error::PruneRefused {
            would_delete,
            stored,
            ..
        }) => Err(format!(
            "--prune would delete {would_delete} of {stored} stored documents, more than \
             --max-prune-fraction {}; is the input the whole source? Nothing was deleted",
            args.max_prune_fraction
        )),
        Err(e) => Err(format!("--prune: {}", crate::chain(&e))),
    }
}

/// `part`'s counts added to `total` (its failures are rejects).
fn add(total: &mut BatchReport, part: &BatchReport) {
    total.inserted += part.inserted;
    total.updated += part.updated;
    total.unchanged += part.unchanged;
    total.deleted += part.deleted;
    total.not_found += part.not_found;
    total.gone += part.gone;
    total.batches += part.batches;
}

/// Reads `input` line by line on its own thread, turning each into a document for the writer
/// or a reject. Ends at the end of the input or when the writer has stopped.
fn read(
    source: Source,
    spec: &KeySpec,
    tx: tokio::sync::mpsc::Sender<Parsed>,
    rejects: &Mutex<Rejects>,
    bytes_read: &AtomicU64,
    lines_read: &AtomicU64,
) -> Result<Vec<ContentHash>, String> {
    let Source {
        input,
        format,
        tombstone,
        identities: keep,
        ..
    } = source;
    let mut identities = Vec::new();
    let mut lines = Lines {
        inner: BufReader::with_capacity(1 << 20, input),
        buf: Vec::new(),
    };
    let mut header: Option<Vec<String>> = None;
    let mut number = 0u64;
    loop {
        let line = match lines.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(identities),
            Err(e) => return Err(format!("cannot read the input after line {number}: {e}")),
        };
        number += 1;
        lines_read.store(number, Ordering::Relaxed);
        bytes_read.fetch_add(line.bytes, Ordering::Relaxed);
        let reject = |kind: &'static str, reason: String, text: String| {
            if let Ok(mut r) = rejects.lock() {
                r.add(Reject {
                    line: number,
                    kind,
                    reason,
                    text,
                });
            }
        };
        let bytes = match line.content {
            Content::Bytes(b) => b,
            Content::TooLong(len) => {
                reject(
                    "input",
                    format!("the line is {len} bytes long, more than any document can be"),
                    String::new(),
                );
                continue;
            }
        };
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                reject(
                    "input",
                    format!("not UTF-8 (byte {})", e.valid_up_to()),
                    String::from_utf8_lossy(bytes).into_owned(),
                );
                continue;
            }
        };
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim().is_empty() {
            continue;
        }
        let parsed = match format {
            Format::Ndjson => ndjson(text),
            Format::Csv | Format::Tsv => {
                let delimiter = if format == Format::Csv { ',' } else { '\t' };
                let cells = match split_cells(text, delimiter) {
                    Ok(c) => c,
                    Err(e) => {
                        reject("input", e, text.to_string());
                        continue;
                    }
                };
                match &header {
                    None => {
                        header = Some(check_header(cells)?);
                        continue;
                    }
                    Some(h) => row(h, cells, spec),
                }
            }
        };
        let parsed = match (parsed, &tombstone) {
            (Ok(doc), Some(t)) => t.take(doc),
            (Ok(doc), None) => Ok((doc, false)),
            (Err(e), _) => Err(e),
        };
        match parsed {
            Ok((doc, delete)) => {
                if keep && !delete {
                    if let Ok((_, identity)) = spec.derive(&doc) {
                        identities.push(identity);
                    }
                }
                let p = Parsed {
                    doc,
                    delete,
                    line: number,
                    text: text.to_string(),
                };
                if tx.blocking_send(p).is_err() {
                    // The writer stopped; it reports why.
                    return Ok(identities);
                }
            }
            Err(reason) => reject("input", reason, text.to_string()),
        }
    }
}

/// One JSON object (Extended JSON for the types JSON lacks) as a document, its fields in the
/// line's order.
fn ndjson(text: &str) -> Result<RawDocumentBuf, String> {
    // Straight into a document: bson's visitor reads Extended JSON's wrappers and keeps the
    // fields in the line's order, with no JSON tree in between.
    let doc: bson::Document = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            format!("not a document: {e}")
        } else {
            format!("not JSON: {e}")
        }
    })?;
    RawDocumentBuf::from_document(&doc).map_err(|e| format!("not a BSON document: {e}"))
}

/// The header's names: none empty, none twice.
fn check_header(names: Vec<String>) -> Result<Vec<String>, String> {
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() {
            return Err(format!("the header's column {} has no name", i + 1));
        }
        if names[..i].contains(n) {
            return Err(format!("the header names `{n}` twice"));
        }
    }
    Ok(names)
}

/// A CSV/TSV row as a document: each cell a string under its column's name, but the key and
/// timestamp fields, which take their spec's type (an int key's cell is an integer, a `ms`
/// timestamp's too); an empty cell of an optional key is absent.
fn row(header: &[String], cells: Vec<String>, spec: &KeySpec) -> Result<RawDocumentBuf, String> {
    if cells.len() != header.len() {
        return Err(format!(
            "{} cells where the header has {} columns",
            cells.len(),
            header.len()
        ));
    }
    let mut doc = RawDocumentBuf::new();
    for (name, cell) in header.iter().zip(cells) {
        let key = spec.keys().iter().find(|k| k.name() == name);
        let value: Option<Bson> =
            if let Some(k) = key {
                match k.kind() {
                    _ if cell.is_empty() && k.is_optional() => None,
                    KeyKind::Int => Some(cell.parse::<i64>().map(Bson::Int64).map_err(|_| {
                        format!("`{name}` is an int key: `{cell}` is not an integer")
                    })?),
                    KeyKind::Bool => Some(match cell.as_str() {
                        "true" => Bson::Boolean(true),
                        "false" => Bson::Boolean(false),
                        _ => {
                            return Err(format!(
                                "`{name}` is a bool key: `{cell}` is not true or false"
                            ))
                        }
                    }),
                    KeyKind::Str | KeyKind::Uuid => Some(Bson::String(cell)),
                    other => {
                        return Err(format!(
                            "`{name}` is a {other} key, which a CSV cell cannot hold: use NDJSON"
                        ))
                    }
                }
            } else if name == spec.timestamp() && cell.bytes().all(|b| b.is_ascii_digit()) {
                match spec.form() {
                    TimestampForm::Any | TimestampForm::Millis => {
                        Some(Bson::Int64(cell.parse::<i64>().map_err(|_| {
                            format!("`{name}`: `{cell}` is too large for Unix ms")
                        })?))
                    }
                    _ => Some(Bson::String(cell)),
                }
            } else {
                Some(Bson::String(cell))
            };
        if let Some(v) = value {
            doc.append(
                name.as_str(),
                bson::RawBson::try_from(v).map_err(|e| e.to_string())?,
            );
        }
    }
    Ok(doc)
}

/// Splits one CSV/TSV line (RFC 4180 quoting: `"a,b"`, `""` for a quote; no line breaks inside
/// a cell).
fn split_cells(line: &str, delimiter: char) -> Result<Vec<String>, String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cell.push('"');
                } else {
                    quoted = false;
                    match chars.peek() {
                        None => {}
                        Some(&d) if d == delimiter => {}
                        Some(_) => {
                            return Err("a quoted cell goes on after its closing quote".into())
                        }
                    }
                }
            } else {
                cell.push(c);
            }
        } else if c == delimiter {
            cells.push(std::mem::take(&mut cell));
            at_start = true;
            continue;
        } else if c == '"' && at_start {
            quoted = true;
        } else {
            cell.push(c);
        }
        at_start = false;
    }
    if quoted {
        return Err("a quoted cell is not closed (a line break inside a cell is not read)".into());
    }
    cells.push(cell);
    Ok(cells)
}

/// Lines of at most [`MAX_LINE_BYTES`], the rest of a longer one skipped unread.
struct Lines<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
}

struct Line<'a> {
    content: Content<'a>,
    /// Bytes consumed, line break included.
    bytes: u64,
}

enum Content<'a> {
    Bytes(&'a [u8]),
    TooLong(u64),
}

impl<R: Read> Lines<R> {
    fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let mut total = 0u64;
        let mut too_long = false;
        loop {
            let available = self.inner.fill_buf()?;
            if available.is_empty() {
                break;
            }
            let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..=i], true),
                None => (available, false),
            };
            let n = chunk.len();
            total += n as u64;
            if !too_long && self.buf.len() + n <= MAX_LINE_BYTES + 1 {
                self.buf.extend_from_slice(chunk);
            } else {
                too_long = true;
                self.buf.clear();
            }
            self.inner.consume(n);
            if done {
                break;
            }
        }
        if total == 0 {
            return Ok(None);
        }
        if too_long {
            return Ok(Some(Line {
                content: Content::TooLong(total),
                bytes: total,
            }));
        }
        let content = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
        Ok(Some(Line {
            content: Content::Bytes(content),
            bytes: total,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_split_with_rfc4180_quotes() {
        assert_eq!(split_cells("a,b,,c", ',').unwrap(), ["a", "b", "", "c"]);
        assert_eq!(
            split_cells(r#""x,y","say ""hi""",z"#, ',').unwrap(),
            ["x,y", r#"say "hi""#, "z"]
        );
        assert_eq!(split_cells("a\tb", '\t').unwrap(), ["a", "b"]);
        assert!(split_cells(r#""open"#, ',').is_err());
        assert!(split_cells(r#""a"b,c"#, ',').is_err());
    }

    #[test]
    fn long_lines_are_skipped_unread_and_the_next_one_is_read() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let mut lines = Lines {
            inner: BufReader::new(&input[..]),
            buf: Vec::new(),
        };
        let first = lines.next_line().unwrap().unwrap();
        assert!(matches!(first.content, Content::TooLong(n) if n == MAX_LINE_BYTES as u64 + 11));
        let second = lines.next_line().unwrap().unwrap();
        assert!(matches!(second.content, Content::Bytes(b) if b == b"{\"a\":1}"));
        assert!(lines.next_line().unwrap().is_none());
    }

    #[test]
    fn ndjson_keeps_the_lines_field_order_and_reads_extended_json() {
        let d = ndjson(
            r#"{"b":1,"a":{"$date":"2023-11-14T22:13:20Z"},"c":{"$numberLong":"5"},"d":{"$oid":"655403a0bd2d1ef3bc3a7f30"},"e":{"$numberInt":"7"},"f":{"$numberDouble":"-Infinity"},"g":{"$binary":{"base64":"AAE=","subType":"00"}}}"#,
        )
        .unwrap();
        let names: Vec<&str> = d.iter().map(|e| e.unwrap().0).collect();
        assert_eq!(names, ["b", "a", "c", "d", "e", "f", "g"]);
        assert_eq!(d.get_i32("e").unwrap(), 7);
        assert_eq!(d.get_f64("f").unwrap(), f64::NEG_INFINITY);
        assert_eq!(d.get_binary("g").unwrap().bytes, [0, 1]);
        assert!(matches!(
            d.get("d").unwrap(),
            Some(bson::RawBsonRef::ObjectId(_))
        ));
        assert!(matches!(
            d.get("a").unwrap(),
            Some(bson::RawBsonRef::DateTime(_))
        ));
        assert_eq!(d.get_i64("c").unwrap(), 5);
        assert!(ndjson("[1]").is_err());
        assert!(ndjson("{").unwrap_err().starts_with("not JSON"));
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(200),
            "1".to_string() + &"}".repeat(200)
        );
        assert!(ndjson(&deep).unwrap_err().contains("recursion limit"));
    }
}
