//! Test support: the real engine (never a mock), a database per test, and a command counter.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use natural_key::bson::Document;
use natural_key::mongodb::event::command::CommandEvent;
use natural_key::mongodb::event::EventHandler;
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::{Client, Database};

pub mod child;
pub mod engine;
pub mod proxy;
pub mod relay;
pub mod watch;

/// `MONGODB_URI`, or — when unset — the URI of the FerretDB that `scripts/db up` starts (it is
/// built once and reused), so `cargo test` alone works on a fresh machine.
pub fn uri() -> String {
    static URI: OnceLock<String> = OnceLock::new();
    URI.get_or_init(|| match std::env::var("MONGODB_URI") {
        Ok(u) if !u.is_empty() => u,
        _ => db_up(&[], &[]),
    })
    .clone()
}

/// A test's size or seed from the environment variable `name`, or `default` when it is unset.
/// A value that does not parse stops the test: a typo must not run the default size.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a {}", std::any::type_name::<T>())),
    }
}

/// Runs `scripts/db ARGS` with extra env: what it printed, or `Err` with what it said on
/// stderr.
pub fn db(args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run scripts/db");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// Runs `scripts/db up` with extra args/env and returns the URI (its last line).
pub fn db_up(args: &[&str], env: &[(&str, &str)]) -> String {
    let up: Vec<&str> = ["up"].iter().chain(args).copied().collect();
    let said = db(&up, env).unwrap_or_else(|e| panic!("scripts/db up failed:\n{e}"));
    said.lines()
        .last()
        .expect("scripts/db up prints the URI last")
        .trim()
        .to_string()
}

pub fn db_down(env: &[(&str, &str)]) {
    if let Err(e) = db(&["down"], env) {
        panic!("scripts/db down failed: {e}");
    }
}

/// Runs `scripts/db shard --engine cluster DB COLL FIELD` (the cluster engine of this pass's
/// `NK_DB_STATE`): hash-shards `db.coll` on `field`. `Err` with what it said on stderr.
pub fn db_shard(db: &str, coll: &str, field: &str) -> Result<(), String> {
    db_shard_with(db, coll, field, &[])
}

/// [`db_shard`] with extra env (`NK_DB_STATE` of a cluster of a test's own).
pub fn db_shard_with(
    database: &str,
    coll: &str,
    field: &str,
    env: &[(&str, &str)],
) -> Result<(), String> {
    let args = ["shard", "--engine", "cluster", database, coll, field];
    db(&args, env).map(|_| ())
}

/// Records the commands a client sends, by name (`find`, `update`, `insert`, ...), in order,
/// with each command document as it went on the wire.
///
/// On a sharded collection each batch that inserts first reads the `_id`s it inserts where
/// documents without `_nk_identity` live (`write::guard::take_foreign_ids`): one `find`
/// that one-server suites do not count on. Those reads are counted apart
/// ([`Commands::id_checks`]), so that the suites' command sequences hold on every engine.
#[derive(Clone, Default)]
pub struct Commands(
    Arc<Mutex<Vec<String>>>,
    Arc<Mutex<Vec<Document>>>,
    Arc<Mutex<usize>>,
);

/// Whether `command` is a sharded collection's check of the `_id`s a batch inserts.
fn is_id_check(command: &Document) -> bool {
    command.contains_key("find")
        && command
            .get_document("filter")
            .is_ok_and(|f| f.get("_nk_identity") == Some(&natural_key::bson::Bson::Null))
}

impl Commands {
    /// The `_id` checks of a sharded collection's inserts sent so far.
    pub fn id_checks(&self) -> usize {
        *self.2.lock().unwrap()
    }

    /// The command documents sent so far named `name`, in order.
    pub fn documents(&self, name: &str) -> Vec<Document> {
        self.1
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d.keys().next().map(String::as_str) == Some(name))
            .cloned()
            .collect()
    }
    pub fn count(&self, name: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|n| *n == name).count()
    }
    /// Write commands sent so far.
    pub fn writes(&self) -> usize {
        ["insert", "update", "delete", "findAndModify"]
            .iter()
            .map(|n| self.count(n))
            .sum()
    }
    pub fn total(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    /// The names of the commands sent so far, in order.
    #[allow(dead_code)]
    pub fn sequence(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn reset(&self) {
        self.0.lock().unwrap().clear();
        self.1.lock().unwrap().clear();
        *self.2.lock().unwrap() = 0;
    }
}

pub async fn client_for(uri: &str, commands: &Commands) -> Client {
    let opts = ClientOptions::parse(uri).await.expect("parse MONGODB_URI");
    client_with(opts, commands)
}

/// A client from `opts` (as the tests configure every client) that records its commands.
pub fn client_with(mut opts: ClientOptions, commands: &Commands) -> Client {
    // The engines we target have no retryable writes; a real MongoDB must behave the same here.
    opts.retry_writes = Some(false);
    opts.server_selection_timeout = Some(Duration::from_secs(3));
    opts.connect_timeout = Some(Duration::from_secs(3));
    let (names, docs, checks) = (commands.0.clone(), commands.1.clone(), commands.2.clone());
    opts.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
        if let CommandEvent::Started(s) = ev {
            shard_on_open(&s.command);
            if is_id_check(&s.command) {
                *checks.lock().unwrap() += 1;
                return;
            }
            names.lock().unwrap().push(s.command_name);
            docs.lock().unwrap().push(s.command);
        }
    }));
    Client::with_options(opts).expect("client")
}

/// The cluster pass (`NK_SHARD_KEY=_nk_identity`, CI's Citus engine): every collection a test
/// opens through natural-key is hash-sharded on that field first, with `scripts/db shard`.
/// `Collection::open` begins with an `explain` of the collection (it asks the engine how the
/// collection is placed), and the driver reports a command before sending it: sharding the
/// collection there, once per collection until it is dropped, is what the open then sees.
/// Event types, which do not store `_nk_identity`, so land on one shard. A collection whose name
/// ends in `_plain` stays unsharded: the cluster holds such collections too.
fn shard_on_open(command: &Document) {
    static SHARDED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let Ok(field) = std::env::var("NK_SHARD_KEY") else {
        return;
    };
    let db = command.get_str("$db").unwrap_or_default().to_string();
    let mut sharded = SHARDED.lock().unwrap();
    match command.keys().next().map(String::as_str) {
        Some("dropDatabase") => sharded.retain(|(d, _)| *d != db),
        Some("drop") => {
            let coll = command.get_str("drop").unwrap_or_default();
            sharded.retain(|(d, c)| !(*d == db && c == coll));
        }
        Some("explain") => {
            let Ok(coll) = command
                .get_document("explain")
                .and_then(|e| e.get_str("find"))
            else {
                return;
            };
            let key = (db.clone(), coll.to_string());
            if coll.ends_with("_plain") || sharded.contains(&key) {
                return;
            }
            // Sharded by the test itself (tests/cluster.rs), on a key of its choosing.
            if let Err(said) = db_shard(&db, coll, &field) {
                assert!(
                    said.contains("Sharding already enabled"),
                    "scripts/db shard {db} {coll} {field} failed:\n{said}"
                );
            }
            sharded.push(key);
        }
        _ => {}
    }
}

/// Whether this is the cluster pass, which shards every collection a test opens on
/// `_nk_identity` (`NK_SHARD_KEY`).
pub fn sharded_pass() -> bool {
    std::env::var_os("NK_SHARD_KEY").is_some()
}

/// A collection name the cluster pass leaves unsharded (see `shard_on_open`).
pub const UNSHARDED_ACCOUNTS: &str = "accounts_plain";

/// A fresh database of the test's own (dropped first), and a command counter on its client.
pub async fn database(test: &str) -> (Database, Commands) {
    let (db, commands) = database_existing(test).await;
    // Citus drops a database's distributed tables under a lock that racing tests' DDL can
    // deadlock on ("deadlock detected", code 1): the drop is tried again.
    let mut tries = 0;
    while let Err(e) = db.drop().await {
        tries += 1;
        assert!(
            tries < 5 && e.to_string().contains("deadlock detected"),
            "drop the test database: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    commands.reset();
    (db, commands)
}

/// The test's database without dropping it (for a child process continuing a test).
pub async fn database_existing(test: &str) -> (Database, Commands) {
    let commands = Commands::default();
    let client = client_for(&uri(), &commands).await;
    (client.database(&database_name(test)), commands)
}

/// The database name of a test: latin, short, unique per test binary and test.
pub fn database_name(test: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let stem = exe.file_name().unwrap().to_string_lossy();
    let bin = stem.split('-').next().unwrap();
    format!("nk_{bin}_{test}")
}

/// Every document of `coll`, sorted by `_id` (as text): what a test compares the end state by.
pub async fn all_documents(coll: &natural_key::mongodb::Collection<Document>) -> Vec<Document> {
    use futures::TryStreamExt;
    let mut all: Vec<Document> = coll
        .find(natural_key::bson::doc! {})
        .await
        .expect("find every document")
        .try_collect()
        .await
        .expect("read every document");
    all.sort_by_key(|d| d.get("_id").map(ToString::to_string));
    all
}
