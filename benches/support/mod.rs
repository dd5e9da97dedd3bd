//! Shared by the database benches: the engine's URI, clients, and a wire-level write counter.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use natural_key::bson::Bson;
use natural_key::mongodb::event::command::CommandEvent;
use natural_key::mongodb::event::EventHandler;
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::{Client, Collection};

pub mod blog;
pub mod posts;
pub mod recipe;

#[path = "../../examples/common/mod.rs"]
mod examples;

/// `cargo bench` passes `--bench`; anything else (`cargo test --benches`, a bare run) gets a
/// quick exit instead of a multi-minute database run.
pub fn invoked_by_cargo_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// `MONGODB_URI`, or the URI printed last by `scripts/db up` (which starts the engine if
/// needed): its default engine (FerretDB 2.5 on DocumentDB where it builds), or the one
/// `NK_BENCH_ENGINE` names (`documentdb`, `ferretdb1`, `java`).
pub fn uri() -> String {
    if let Ok(u) = std::env::var("MONGODB_URI") {
        if !u.is_empty() {
            return u;
        }
    }
    let engine = match std::env::var("NK_BENCH_ENGINE").as_deref() {
        Err(_) | Ok("") => Vec::new(),
        Ok(e @ ("documentdb" | "ferretdb1" | "java")) => vec!["--engine".to_string(), e.into()],
        Ok(other) => panic!("NK_BENCH_ENGINE={other:?}: use documentdb, ferretdb1 or java"),
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db");
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .args(&engine)
        .output()
        .expect("run scripts/db up");
    assert!(
        out.status.success(),
        "scripts/db up failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .expect("scripts/db up prints the URI last")
        .trim()
        .to_string()
}

pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        _ => default,
    }
}

async fn options(uri: &str) -> ClientOptions {
    let mut opts = ClientOptions::parse(uri).await.expect("parse MONGODB_URI");
    opts.retry_writes = Some(false);
    opts.server_selection_timeout = Some(Duration::from_secs(5));
    opts
}

/// The examples' `drop_collection` (a missing collection is not an error on any engine),
/// failing the bench on a real error.
pub async fn drop_collection<T: Send + Sync>(coll: &Collection<T>) {
    if let Err(e) = examples::drop_collection(coll).await {
        panic!("drop {} failed: {e}", coll.namespace());
    }
}

/// A client without command monitoring: what the timed runs use.
pub async fn plain_client(uri: &str) -> Client {
    Client::with_options(options(uri).await).expect("client")
}

/// What went over the wire: commands by name, and the documents/statements carried by the
/// write commands (`insert.documents`, `update.updates`, `delete.deletes`).
#[derive(Clone, Default)]
pub struct Wire(Arc<Mutex<WireCounts>>);

#[derive(Clone, Default, Debug)]
pub struct WireCounts {
    pub commands: HashMap<String, usize>,
    /// Server round-trip time per command name, from the succeeded/failed events.
    pub durations: HashMap<String, Duration>,
    pub inserted_docs: usize,
    pub update_statements: usize,
    pub delete_statements: usize,
}

impl WireCounts {
    pub fn count(&self, name: &str) -> usize {
        self.commands.get(name).copied().unwrap_or(0)
    }
    /// Write commands sent.
    pub fn write_commands(&self) -> usize {
        ["insert", "update", "delete", "findAndModify"]
            .iter()
            .map(|n| self.count(n))
            .sum()
    }
    /// Documents written or statements sent by write commands.
    pub fn written(&self) -> usize {
        self.inserted_docs + self.update_statements + self.delete_statements
    }
    /// Total round-trip time of the commands with this name.
    pub fn time(&self, name: &str) -> Duration {
        self.durations.get(name).copied().unwrap_or_default()
    }
    /// One line: `find 20 [1.2 s], insert 0 (0 docs), update 20 (100 stmts) [3.4 s]`.
    pub fn summary(&self) -> String {
        let t = |name: &str| {
            if self.count(name) > 0 {
                format!(" [{:.1} s]", self.time(name).as_secs_f64())
            } else {
                String::new()
            }
        };
        let mut reads: Vec<_> = self
            .commands
            .iter()
            .filter(|(k, _)| !["insert", "update", "delete"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k} {v}{}", t(k)))
            .collect();
        reads.sort();
        let mut parts = reads;
        parts.push(format!(
            "insert {} ({} docs){}",
            self.count("insert"),
            self.inserted_docs,
            t("insert")
        ));
        parts.push(format!(
            "update {} ({} stmts){}",
            self.count("update"),
            self.update_statements,
            t("update")
        ));
        if self.count("delete") > 0 {
            parts.push(format!(
                "delete {} ({} stmts){}",
                self.count("delete"),
                self.delete_statements,
                t("delete")
            ));
        }
        parts.join(", ")
    }
}

impl Wire {
    pub fn take(&self) -> WireCounts {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A client whose every started command is counted into `wire` (array lengths read from
/// `CommandStartedEvent.command`), with the round-trip time the driver measured for it
/// (`CommandSucceededEvent.duration`). Monitoring converts each command to a `Document`, which
/// costs time on large inserts, so timed runs use [`plain_client`] instead.
pub async fn counting_client(uri: &str, wire: &Wire) -> Client {
    let mut opts = options(uri).await;
    let counts = wire.0.clone();
    opts.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
        let mut c = counts.lock().unwrap();
        match ev {
            CommandEvent::Started(s) => {
                let len = |field: &str| match s.command.get(field) {
                    Some(Bson::Array(a)) => a.len(),
                    _ => 0,
                };
                match s.command_name.as_str() {
                    "insert" => c.inserted_docs += len("documents"),
                    "update" => c.update_statements += len("updates"),
                    "delete" => c.delete_statements += len("deletes"),
                    _ => {}
                }
                *c.commands.entry(s.command_name).or_default() += 1;
            }
            CommandEvent::Succeeded(s) => {
                *c.durations.entry(s.command_name).or_default() += s.duration;
            }
            CommandEvent::Failed(f) => {
                *c.durations.entry(f.command_name).or_default() += f.duration;
            }
            _ => {}
        }
    }));
    Client::with_options(opts).expect("client")
}

/// Peak resident set size of this process so far (`VmHWM` in /proc/self/status), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    proc_status_kib("VmHWM:")
}

/// Current resident set size (`VmRSS`), in KiB.
pub fn rss_kib() -> Option<u64> {
    proc_status_kib("VmRSS:")
}

fn proc_status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A load-robust ratio for a shared machine: alternates `rounds` times between `inner` calls
/// of `a` and `inner` calls of `b`, and returns the 10th, 50th and 90th percentile of the
/// per-round ratio time(a)/time(b). Both sides see the same background load, which drifts
/// too much on a shared machine for two separately measured criterion results to compare
/// reliably.
pub fn paired_ratio(
    rounds: usize,
    inner: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (f64, f64, f64) {
    use std::time::Instant;
    let mut ratios = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..inner {
            a();
        }
        let ta = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..inner {
            b();
        }
        let tb = t.elapsed().as_secs_f64();
        ratios.push(ta / tb);
    }
    ratios.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
    (q(0.1), q(0.5), q(0.9))
}
