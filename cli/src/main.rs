//! `natural-key`: the id scheme, the audit and ingest from a shell, for the people who run the
//! collections. Everything it computes comes from `natural-key-runtime` (`compute_id`,
//! `KeySpec`, the audit's scan and report, `SpecCollection`'s guarded writes); this crate only
//! reads arguments and input, and prints.

mod args;
mod audit;
mod id;
mod ingest;
mod output;
mod server;
mod tombstones;
mod values;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use output::{Failure, EXIT_USAGE};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message up to its usage block, on one line.
            let text = e.render().to_string();
            let message = text.split("\n\n").next().unwrap_or("invalid arguments");
            let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            return fail(&format!("{message} (see --help)"), EXIT_USAGE);
        }
    };
    let secret = match &cli.command {
        Command::Audit(a) => server::password(&a.connect.uri).map(str::to_string),
        Command::Ingest(a) => server::password(&a.connect.uri).map(str::to_string),
        Command::PruneTombstones(a) => server::password(&a.connect.uri).map(str::to_string),
        Command::Id(_) => None,
    };
    let result = match cli.command {
        Command::Id(args) => id::id(args).map_err(Failure::from),
        Command::Audit(args) => audit::audit(args).map_err(Failure::from),
        Command::Ingest(args) => ingest::ingest(*args),
        Command::PruneTombstones(args) => tombstones::prune(args),
    };
    match result {
        Ok(code) => code,
        Err(f) => match secret {
            Some(p) => fail(&f.message.replace(&p, "****"), f.status),
            None => fail(&f.message, f.status),
        },
    }
}

/// One line on stderr, and the exit status.
fn fail(message: &str, status: u8) -> ExitCode {
    let one_line = message.replace('\n', " ");
    let _ = writeln!(std::io::stderr(), "natural-key: error: {one_line}");
    ExitCode::from(status)
}
