//! What the commands print on stdout, and errors as message text.

use std::io::Write;

/// Writes to stdout without the panic `println!` gives on a closed pipe.
pub(crate) fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the result: {e}"))
}

/// An error and its sources, `outer: inner`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    natural_key_runtime::ErrorChain(e).to_string()
}
