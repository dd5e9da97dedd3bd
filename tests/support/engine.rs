//! An engine of a test's own, started by `scripts/db up --data DIR` (the engine of the pass:
//! `NK_DB_ENGINE`), on a kept, durable data dir: killed (SIGKILL, a crash with writes in
//! flight) and started again on the same data and address while clients keep their URI.
//! Stopped and its files removed on drop. On the cluster engine (`NK_DB_ENGINE=cluster`) the
//! storage is Citus: the coordinator, and a worker that holds half of every sharded collection.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Which process of the engine a kill takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The process clients talk to: FerretDB (1.x with its embedded SQLite, or 2.x).
    Front,
    /// The storage under FerretDB 2: PostgreSQL's postmaster (its backends follow it); on the
    /// cluster, the coordinator's.
    Storage,
    /// On the cluster, the first worker's postmaster: half of every sharded collection's shards.
    Worker,
}

pub struct PrivateEngine {
    state: PathBuf,
    data: String,
    pub uri: String,
    port: String,
}

impl PrivateEngine {
    pub fn start(name: &str) -> PrivateEngine {
        let state = std::env::temp_dir().join(format!("nk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        let data = state.join("data").to_string_lossy().to_string();
        let state_s = state.to_string_lossy().to_string();
        let uri = super::db_up(&["--data", &data], &[("NK_DB_STATE", &state_s)]);
        let port = uri
            .rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        PrivateEngine {
            state,
            data,
            uri,
            port,
        }
    }

    fn state(&self) -> String {
        self.state.to_string_lossy().to_string()
    }

    /// Whether the engine has a storage process of its own to kill (FerretDB 2 on DocumentDB).
    pub fn has_storage(&self) -> bool {
        self.state.join("pg.pid").exists()
    }

    /// Whether the engine is a cluster, with workers under its storage (DocumentDB on Citus).
    pub fn has_workers(&self) -> bool {
        self.state.join("worker1.pid").exists()
    }

    /// Hash-shards `db.coll` on `field` (`scripts/db shard`; the cluster engine only).
    pub fn shard(&self, db: &str, coll: &str, field: &str) {
        if let Err(said) = super::db_shard_with(db, coll, field, &[("NK_DB_STATE", &self.state())])
        {
            panic!("scripts/db shard {db} {coll} {field}: {said}");
        }
    }

    /// On a cluster, settles now the transactions a killed worker left prepared (`scripts/db
    /// recover`): Citus does it by itself within a minute, and until then writes it acknowledged
    /// on that worker are not visible to a read. A final check of what is stored waits for it.
    pub fn recover(&self) {
        if !self.has_workers() {
            return;
        }
        let args = ["recover", "--engine", "cluster"];
        if let Err(e) = super::db(&args, &[("NK_DB_STATE", &self.state())]) {
            panic!("scripts/db recover: {e}");
        }
    }

    /// Commits the engine acknowledged although a node failed them: on the cluster, the
    /// coordinator's `WARNING:  failed to commit transaction on HOST:PORT` lines; 0 elsewhere.
    ///
    /// DocumentDB runs a single-shard write on its worker as a `SELECT` of its
    /// `update_worker`/`delete_worker` function, and Citus commits it there in one phase (a
    /// COMMIT sent as the coordinator commits). Citus turns a failed COMMIT into an error only for the
    /// placements it saw modified (`HasModificationFailedForShard`, placement_connection.c),
    /// which a `SELECT` is not: when the worker dies between the statement and its COMMIT, the
    /// client is told the write applied, and the worker never committed it (nothing is left
    /// prepared to recover). An upper bound on such writes: a read's failed COMMIT logs the
    /// same line.
    pub fn acknowledged_failed_commits(&self) -> usize {
        if !self.has_workers() {
            return 0;
        }
        let log = std::path::Path::new(&self.data).join("coord.log");
        std::fs::read_to_string(&log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
            .matches("failed to commit transaction on")
            .count()
    }

    /// The pid of `part`.
    pub fn pid(&self, part: Part) -> String {
        let file = match part {
            Part::Front => "pid",
            Part::Storage => "pg.pid",
            Part::Worker => "worker1.pid",
        };
        let pid = std::fs::read_to_string(self.state.join(file)).expect("the engine's pid");
        pid.trim().to_string()
    }

    /// SIGKILLs `part` and waits until it is gone.
    pub fn kill(&self, part: Part) {
        let pid = self.pid(part);
        signal("-KILL", &pid);
        while alive(&pid) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A SIGKILL of `part` ready to go (see [`ArmedKill`]).
    pub fn arm_kill(&self, part: Part) -> ArmedKill {
        let pid = self.pid(part);
        let child = Command::new("bash")
            .args(["-c", &format!("read -r _ && kill -KILL {pid}")])
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bash");
        ArmedKill { child }
    }

    /// Pauses `part` (SIGSTOP): its connections stay open and nothing is answered, as with a
    /// stalled process or a black-holed network. The storage is PostgreSQL's postmaster and
    /// every backend it forked (each serves a connection of FerretDB's pool).
    pub fn pause(&self, part: Part) {
        for pid in self.processes(part) {
            signal("-STOP", &pid);
        }
    }

    /// Lets a paused `part` go on (SIGCONT).
    pub fn resume(&self, part: Part) {
        for pid in self.processes(part).into_iter().rev() {
            signal("-CONT", &pid);
        }
    }

    /// `part`'s process, then (for a postmaster) its children.
    fn processes(&self, part: Part) -> Vec<String> {
        let pid = self.pid(part);
        let mut all = vec![pid.clone()];
        if part != Part::Front {
            let children = Command::new("ps")
                .args(["-o", "pid=", "--ppid", &pid])
                .output()
                .expect("ps lists the postmaster's backends");
            let children = String::from_utf8_lossy(&children.stdout).to_string();
            all.extend(children.split_whitespace().map(str::to_string));
        }
        all
    }

    /// Kills the front and clears the state files, so that [`restart`](Self::restart) starts
    /// everything again. (`scripts/db down` sends SIGTERM, on which FerretDB 1.x closes its
    /// listener but goes on serving open connections for 3 s: busy writers would barely
    /// notice.)
    pub fn kill_all(&self) {
        self.kill(Part::Front);
        super::db_down(&[("NK_DB_STATE", &self.state())]);
    }

    /// Whatever is down starts again on the same data dir and port (the other part of
    /// FerretDB 2 on DocumentDB goes on running); clients holding the URI reconnect.
    pub fn restart(&self) {
        let uri = super::db_up(
            &["--data", &self.data],
            &[("NK_DB_STATE", &self.state()), ("NK_DB_PORT", &self.port)],
        );
        assert_eq!(uri, self.uri, "restarted on the same address");
    }
}

/// A SIGKILL ready to go: a shell already waiting on its stdin, so that firing costs a pipe
/// write, not a process start (which takes longer than FerretDB 2 takes to answer a batch:
/// kills aimed at a write in flight landed after it). Dropped unfired, it kills nothing.
pub struct ArmedKill {
    child: std::process::Child,
}

impl ArmedKill {
    /// Sends the SIGKILL now, and waits for the shell that sent it.
    pub fn fire(mut self) {
        use std::io::Write;
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for ArmedKill {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn signal(signal: &str, pid: &str) {
    let _ = Command::new("kill")
        .args([signal, pid])
        .stderr(Stdio::null())
        .status();
}

/// Whether process `pid` runs: a killed process nobody reaped yet (a zombie) does not.
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => Command::new("kill")
            .args(["-0", pid])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

impl Drop for PrivateEngine {
    fn drop(&mut self) {
        let _ = super::db(&["down"], &[("NK_DB_STATE", &self.state())]);
        // A failing test keeps the engine's data and logs to look at.
        if std::thread::panicking() {
            eprintln!(
                "the engine's data and logs are kept in {}",
                self.state.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.state);
        }
    }
}
