//! A test run in a child process of its own binary, killed (SIGKILL) at a chosen moment: a
//! writer process that dies. Kill points come from a seeded splitmix64, so a run can be
//! repeated from its seed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// splitmix64: the next value of `state`.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// When to kill the child.
#[derive(Clone, Copy, Debug)]
pub enum Kill {
    /// Let it finish; it must succeed.
    Never,
    /// This long after it prints `CHILD-READY`.
    After(Duration),
    /// As soon as it prints `CMD started <name>` for the `nth` time (1-based): a kill while that
    /// command is on the wire. A child that never gets there is let finish.
    OnCommand(&'static str, usize),
}

/// Runs this binary's `test` in a child with `var` set and kills it as `kill` says. Returns
/// whether it was still running when killed, and every line it printed.
pub fn run(test: &str, var: &str, kill: Kill) -> (bool, Vec<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, "1")
        .env("MONGODB_URI", super::uri())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let trigger = match kill {
        Kill::OnCommand(name, nth) => Some((format!("CMD started {name} "), nth)),
        _ => None,
    };
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut seen = 0;
        for l in BufReader::new(stdout).lines() {
            let l = l.unwrap_or_default();
            if l.contains("CHILD-READY") {
                let _ = tx.send(());
            }
            if let Some((prefix, nth)) = &trigger {
                if l.starts_with(prefix.as_str()) {
                    seen += 1;
                    if seen == *nth {
                        let _ = tx.send(());
                    }
                }
            }
            lines.push(l);
        }
        lines
    });
    rx.recv().expect("the child ended before it was ready");
    let killed = match kill {
        Kill::Never => false,
        Kill::After(d) => {
            std::thread::sleep(d);
            let running = child.try_wait().unwrap().is_none();
            child.kill().unwrap(); // SIGKILL
            running
        }
        Kill::OnCommand(..) => match rx.recv() {
            Ok(()) => {
                child.kill().unwrap(); // SIGKILL
                true
            }
            // The reader ended: the child finished before its nth such command.
            Err(_) => false,
        },
    };
    let status = child.wait().unwrap();
    if matches!(kill, Kill::Never) {
        assert!(status.success(), "child failed: {status}");
    }
    (killed, reader.join().unwrap())
}
