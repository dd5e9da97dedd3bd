//! `natural-key ingest`: documents from a file or stdin through the library's guarded batch
//! path ([`SpecCollection`](natural_key_runtime::spec::SpecCollection)). These modules read
//! lines, turn each into BSON, refuse the ones that cannot be, and report; the ids, hashes,
//! guard and outcomes are the library's. `input` (with `csv`) reads, `run` writes, `report`
//! tells; this one opens what they need and gives the exit status.

mod csv;
mod input;
mod report;
mod run;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use input::Source;
use report::Rejects;

use crate::args::IngestArgs;
use crate::output::chain;

pub(crate) fn ingest(args: IngestArgs) -> Result<ExitCode, String> {
    let spec = args.spec.spec()?;
    let source = Source::open(&args)?;
    let rejects = Arc::new(Mutex::new(Rejects::create(args.reject.as_deref())?));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let started = Instant::now();
    let outcome = runtime.block_on(run::run(&args, spec, source, rejects.clone()))?;
    let seconds = started.elapsed().as_secs_f64();
    let mut rejects = Arc::try_unwrap(rejects)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .ok_or("the reader did not finish")?;
    rejects.flush()?;
    let name = match args.input.as_os_str() == "-" {
        true => "stdin".to_string(),
        false => args.input.display().to_string(),
    };
    report::summarize(&args, &name, &outcome, &rejects, seconds)?;
    if let Some((line, e)) = &outcome.stopped {
        return Err(format!(
            "stopped at line {line}: {}. Every line before it is settled; run the same command \
             again to finish (what is stored already costs no write)",
            chain(e)
        ));
    }
    Ok(match rejects.count {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}
