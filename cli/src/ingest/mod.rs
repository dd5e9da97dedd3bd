//! `natural-key ingest`: documents from a file or stdin through the library's guarded batch
//! path ([`SpecCollection`](natural_key_runtime::spec::SpecCollection)). These modules read
//! records, turn each into BSON, refuse the ones that cannot be, and report; the ids, hashes,
//! guard and outcomes are the library's. `input` reads (NDJSON by `json`, arrays by `array`,
//! CSV/TSV by `csv` with `columns` and `layout`; `tombstone` and `own` settle what a record
//! holds besides its data), `run` writes, `report` tells; this one opens what they need and
//! gives the exit status.

mod array;
mod columns;
mod csv;
mod input;
mod json;
mod layout;
mod own;
mod record;
mod report;
mod run;
mod tombstone;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use input::Source;
use report::Rejects;

use crate::args::IngestArgs;
use crate::output::{chain, note, Failure};
use crate::server::database;

pub(crate) fn ingest(args: IngestArgs) -> Result<ExitCode, Failure> {
    let spec = args.key_spec()?;
    let db = database(&args.connect)?;
    let source = Source::open(&args, &spec)?;
    let rejects = Arc::new(Mutex::new(Rejects::create(
        args.reject.as_deref(),
        args.verbose,
    )?));
    if args.verbose {
        note(&format!(
            "ingest of {} into {db}.{}: batches of {} ({} at once), retry deadline {} s, \
             server timeout {} s where the connection string sets none",
            name(&args),
            args.connect.collection,
            args.batch_size,
            args.parallel,
            args.retry_deadline,
            args.connect.timeout
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let started = Instant::now();
    let outcome = runtime.block_on(run::run(&args, &db, spec, source, rejects.clone()))?;
    let seconds = started.elapsed().as_secs_f64();
    let mut rejects = Arc::try_unwrap(rejects)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .ok_or("the reader did not finish")?;
    rejects.flush()?;
    report::summarize(&args, &db, &name(&args), &outcome, &rejects, seconds)?;
    if let Some((line, e)) = &outcome.stopped {
        let message = format!(
            "stopped at line {line}: {}. Every line before it is settled; run the same command \
             again to finish (what is stored already costs no write)",
            chain(e)
        );
        return Err(Failure::from_error(message, e));
    }
    Ok(match rejects.count {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// The input as the summary names it.
fn name(args: &IngestArgs) -> String {
    match args.path().as_os_str() == "-" {
        true => "stdin".to_string(),
        false => args.path().display().to_string(),
    }
}
