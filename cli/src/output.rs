//! What the commands print: results on stdout, notes on stderr, and why a command failed with
//! the exit status that tells it.

use std::io::Write;

/// Writes to stdout without the panic `println!` gives on a closed pipe.
pub(crate) fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the result: {e}"))
}

/// One line on stderr, `natural-key: ...`: stdout holds only the result, so that it can be
/// piped.
pub(crate) fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "natural-key: {text}");
}

/// An error and its sources, `outer: inner`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    natural_key_runtime::ErrorChain(e).to_string()
}

/// Exit status: a usage error, or input that cannot be read.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: the server stopped the run (unreachable, connection lost, transient errors
/// past the retry deadline); the same command run again finishes it.
pub(crate) const EXIT_STOPPED: u8 = 3;

/// Why a command ended before its work was done: the one line it prints, and its exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) status: u8,
}

impl Failure {
    /// The server stopped the run; nothing is wrong with the command or its input.
    pub(crate) fn stopped(message: String) -> Failure {
        Failure {
            message,
            status: EXIT_STOPPED,
        }
    }

    /// [`Failure::stopped`] when `e` is one that passes (the server unreachable, a lost
    /// connection), a usage or input failure otherwise: running again helps only the first.
    pub(crate) fn from_error(message: String, e: &natural_key_runtime::Error) -> Failure {
        match e.is_transient() {
            true => Failure::stopped(message),
            false => Failure::from(message),
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            message,
            status: EXIT_USAGE,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}
