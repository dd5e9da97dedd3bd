//! The server of --uri: the database it names, a client that waits at most --timeout where the
//! connection string says nothing, and messages that never carry the connection string (it may
//! hold a password).

use std::time::Duration;

use natural_key_runtime::mongodb::{
    self,
    options::{ClientOptions, ConnectionString},
};

use crate::args::ConnectArgs;

/// The database: --db, else the connection string's (`mongodb://host/DB`), as mongoimport
/// takes it.
pub(crate) fn database(args: &ConnectArgs) -> Result<String, String> {
    if let Some(db) = &args.db {
        return Ok(db.clone());
    }
    let parsed =
        ConnectionString::parse(&args.uri).map_err(|e| format!("bad --uri: {}", short(&e)))?;
    parsed
        .default_database
        .filter(|d| !d.is_empty())
        .ok_or_else(|| {
            "no database: give -d/--db, or name it in the connection string's path \
         (mongodb://host/DB)"
                .to_string()
        })
}

/// A client for --uri; --timeout bounds server selection and connecting where the connection
/// string sets no `serverSelectionTimeoutMS` or `connectTimeoutMS` (the string is the more
/// deliberate of the two). The messages never carry the connection string.
pub(crate) async fn connect(args: &ConnectArgs) -> Result<mongodb::Client, String> {
    let mut options = ClientOptions::parse(&args.uri)
        .await
        .map_err(|e| format!("bad --uri: {}", short(&e)))?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    options.server_selection_timeout.get_or_insert(timeout);
    options.connect_timeout.get_or_insert(timeout);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn connect_args(uri: &str, db: Option<&str>) -> ConnectArgs {
        ConnectArgs {
            uri: uri.into(),
            db: db.map(str::to_string),
            collection: "c".into(),
            timeout: 10,
        }
    }

    #[test]
    fn the_database_is_the_flag_else_the_connection_strings_path() {
        let db = |uri, flag| database(&connect_args(uri, flag));
        assert_eq!(db("mongodb://h/shop?w=1", None).unwrap(), "shop");
        assert_eq!(db("mongodb://h/shop", Some("blog")).unwrap(), "blog");
        assert!(db("mongodb://h/?w=1", None)
            .unwrap_err()
            .contains("-d/--db"));
        assert!(db("mongodb://h", None).unwrap_err().contains("-d/--db"));
        assert!(db("nonsense", None).unwrap_err().starts_with("bad --uri"));
    }

    #[tokio::test]
    async fn timeout_fills_in_only_what_the_connection_string_leaves_out() {
        let args = connect_args("mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=1500", None);
        let options = ClientOptions::parse(&args.uri).await.unwrap();
        assert_eq!(
            options.server_selection_timeout,
            Some(Duration::from_millis(1500))
        );
        let started = std::time::Instant::now();
        let client = connect(&args).await.unwrap();
        let e = client.list_database_names().await.unwrap_err();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(1400) && waited < Duration::from_secs(8),
            "the string's 1.5 s, not --timeout's 10 s: {waited:?} ({e})"
        );
    }
}
