//! The server of --uri: a client that waits at most --timeout, and messages that never carry
//! the connection string (it may hold a password).

use std::time::Duration;

use natural_key_runtime::mongodb::{self, options::ClientOptions};

use crate::args::ConnectArgs;

/// A client for --uri, waiting at most --timeout for the server; the messages never carry the
/// connection string.
pub(crate) async fn connect(args: &ConnectArgs) -> Result<mongodb::Client, String> {
    let mut options = ClientOptions::parse(&args.uri)
        .await
        .map_err(|e| format!("bad --uri: {}", short(&e)))?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    options.server_selection_timeout = Some(timeout);
    options.connect_timeout = Some(timeout);
    options
        .app_name
        .get_or_insert_with(|| "natural-key-cli".into());
    mongodb::Client::with_options(options).map_err(|e| format!("bad --uri: {}", short(&e)))
}

/// The password of a `mongodb://user:password@host` connection string, to keep out of every
/// message.
pub(crate) fn password(uri: &str) -> Option<&str> {
    let rest = uri.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then_some(password)
}

/// The driver's message without its debug dump of labels and source.
pub(crate) fn short(e: &mongodb::error::Error) -> String {
    let text = e.kind.to_string();
    text.split(", labels:").next().unwrap_or(&text).to_string()
}
