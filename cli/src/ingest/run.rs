//! The write: the reader's documents through the library, in input order — each run of
//! consecutive upserts through one `upsert_stream`, each run of deletions through one
//! `delete_stream` (in a dry run, each line checked instead) — the library's failures turned
//! into rejects on their lines, then `--prune`, with a progress bar on a terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use natural_key_runtime::spec::{KeySpec, SpecCollection};
use natural_key_runtime::{BatchReport, ContentHash, Error, RetryPolicy};
use tokio::sync::mpsc::Receiver;

use super::input::{read, Parsed, Source};
use super::report::{left_alone, Outcome, Reject, Rejects};
use crate::args::IngestArgs;
use crate::output::{chain, note, Failure};
use crate::server::connect;

/// Parsed documents waiting for the writer: the reader runs this far ahead.
const READ_AHEAD: usize = 4096;

/// Reads the input on a thread of its own while this task writes it, in order: each run of
/// consecutive upserts through one `upsert_stream`, each run of deletions through one
/// `delete_stream`.
pub(crate) async fn run(
    args: &IngestArgs,
    db: &str,
    spec: KeySpec,
    source: Source,
    rejects: Arc<Mutex<Rejects>>,
) -> Result<Outcome, Failure> {
    let coll = open(args, db, spec).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Parsed>(READ_AHEAD);
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
        let counts = format!(
            "{} inserted, {} updated, {} unchanged, {} deleted{}",
            r.inserted,
            r.updated,
            r.unchanged,
            r.deleted,
            left_alone(r)
        );
        if let Some(bar) = &bar {
            bar.set_position(bytes_read.load(Ordering::Relaxed));
            bar.set_message(counts);
        } else if args.verbose {
            let lines = lines_read.load(Ordering::Relaxed);
            note(&format!("{lines} lines read: {counts}"));
        }
    };
    let (report, checked, stopped) = write_all(&coll, args, rx, &rejects, &show).await;
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
        (Err(e), None) => return Err(Failure::from(e)),
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

/// The collection of `--db` and `--collection`, opened through the spec: a server that does
/// not answer stops the run (exit status 3), anything else is a usage error.
async fn open(args: &IngestArgs, db: &str, spec: KeySpec) -> Result<SpecCollection, Failure> {
    let client = connect(&args.connect).await?;
    let coll = &args.connect.collection;
    spec.open(&client.database(db), coll).await.map_err(|e| {
        let message = format!("cannot open {db}.{coll}: {}", chain(&e));
        match e.is_transient() {
            true => Failure::stopped(format!(
                "{message}. Nothing was written: run the same command again once the server \
                 answers"
            )),
            false => Failure::from(message),
        }
    })
}

/// Every run of lines from the reader written (in a dry run, checked) until the input ends or
/// a write stops: the counts, the documents a dry run would write, and where it stopped. `rx`
/// is dropped on return, which ends a reader still reading.
async fn write_all(
    coll: &SpecCollection,
    args: &IngestArgs,
    mut rx: Receiver<Parsed>,
    rejects: &Mutex<Rejects>,
    show: &(dyn Fn(&BatchReport) + Sync),
) -> (BatchReport, u64, Option<(u64, Error)>) {
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
            false => write_run(coll, args, lines, &mut report, rejects, show).await,
            true => {
                checked += check_run(coll, lines, rejects).await;
                None
            }
        };
        show(&report);
    }
    (report, checked, stopped)
}

/// A progress bar on a terminal, unless the summary is JSON or stderr is to be quiet (or, with
/// `--verbose`, holds a line per batch instead).
fn progress_bar(args: &IngestArgs, size: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() || args.json || args.quiet || args.verbose {
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
    rx: &'r mut Receiver<Parsed>,
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
                    reason: chain(e),
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
    let parallel = usize::from(args.parallel);
    let retry = RetryPolicy::default().deadline(Duration::from_secs(args.retry_deadline));
    let result = match delete {
        false => {
            let call = coll.upsert_stream(docs).mode(args.mode);
            let call = call.batch_size(batch).in_flight(parallel);
            call.on_progress(progress).retry(retry).await
        }
        true => {
            let call = coll.delete_stream(docs).batch_size(batch);
            let call = call.in_flight(parallel).on_progress(progress);
            call.retry(retry).await
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
                        reason: chain(&e),
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
) -> Result<Option<u64>, Failure> {
    let refused = rejects.lock().map(|r| r.count).unwrap_or(1);
    if refused > 0 {
        if !args.quiet {
            note(&format!(
                "--prune skipped: {refused} lines were refused; fix them and run again"
            ));
        }
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
        }) => Err(Failure::from(format!(
            "--prune would delete {would_delete} of {stored} stored documents, more than \
             --max-prune-fraction {}; is the input the whole source? Nothing was deleted",
            args.max_prune_fraction
        ))),
        Err(e) => Err(Failure::from_error(format!("--prune: {}", chain(&e)), &e)),
    }
}

/// `part`'s counts added to `total` (its failures are rejects).
fn add(total: &mut BatchReport, part: &BatchReport) {
    total.inserted += part.inserted;
    total.updated += part.updated;
    total.unchanged += part.unchanged;
    total.stale += part.stale;
    total.existed += part.existed;
    total.missing += part.missing;
    total.deleted += part.deleted;
    total.not_found += part.not_found;
    total.gone += part.gone;
    total.batches += part.batches;
}
