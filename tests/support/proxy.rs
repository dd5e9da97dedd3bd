//! A fault-injecting TCP proxy that speaks just enough of the MongoDB wire protocol to tell one
//! command from another, for tests of what happens when a write's acknowledgement is lost.
//!
//! ```ignore
//! let proxy = Proxy::start(proxy::upstream_addr(&support::uri()), Faults::none(), 7).await;
//! let client = support::client_for(&proxy.uri(), &support::Commands::default()).await;
//! proxy.set_faults(Faults { drop_reply_after_apply: 0.3, ..Faults::none() });
//! // ... writes through `client` ...
//! proxy.set_faults(Faults::none());
//! assert_eq!(proxy.stats().count("update"), 0);
//! ```
//!
//! Every accepted client connection gets a fresh upstream connection. Two pumps run per
//! connection: client→upstream reads whole messages, names the command (the first key of the
//! OP_MSG kind-0 body; the first key of the query of a legacy OP_QUERY) and — for write commands
//! only (`insert`, `update`, `delete`, `findAndModify`) — draws the fault decision from one
//! seeded PRNG shared by all connections, so the sequence of decisions, in the order write
//! commands arrive at the proxy, depends on the seed alone. Upstream→client reads whole replies
//! and finds the decision of their request through `responseTo`. Reads, handshakes and
//! monitoring are never faulted.
//!
//! An [`Engine`] mode imitates what managed engines document (docs/engines.md), drawn from the
//! same PRNG per write command: Azure Cosmos DB's throttle (16500 with `RetryAfterMs`) of a
//! whole command, never forwarded, or of some statements of a batch, which is forwarded with
//! the others only and answered with per-statement 16500 errors for the rest; its unknown
//! outcome (50 `ExceededTimeLimit`), answered after the command was applied; and an engine
//! without `hello` (answered 59 `CommandNotFound`, `helloOk` removed from `isMaster` replies, so
//! the driver keeps to the legacy handshake).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};

use natural_key::bson::{self, doc, Bson, Document, RawDocument};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

const OP_REPLY: i32 = 1;
const OP_QUERY: i32 = 2004;
const OP_COMPRESSED: i32 = 2012;
const OP_MSG: i32 = 2013;
const CHECKSUM_PRESENT: u32 = 1;
const MORE_TO_COME: u32 = 1 << 1;
/// The server's maxMessageSizeBytes (48 MB) with room to spare; anything larger is garbage.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The write commands faults apply to.
pub const WRITE_COMMANDS: [&str; 4] = ["insert", "update", "delete", "findAndModify"];

fn is_write(name: &str) -> bool {
    WRITE_COMMANDS.contains(&name) || name == "findandmodify"
}

/// Probabilities (each in `0.0..=1.0`, their sum at most 1) of the faults injected on a write
/// command. One uniform number is drawn per write command, whatever the probabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Forward the write, wait for its reply, discard it and close both sides: the write is
    /// applied but its acknowledgement is lost.
    pub drop_reply_after_apply: f64,
    /// Do not forward the write and close the connection: the server never sees it.
    pub drop_request: f64,
    /// Forward the write, pass on the first half of its reply and reset the client connection.
    pub reset_mid_reply: f64,
}

impl Faults {
    pub fn none() -> Faults {
        Faults::default()
    }

    fn validate(&self) {
        for (name, p) in [
            ("drop_reply_after_apply", self.drop_reply_after_apply),
            ("drop_request", self.drop_request),
            ("reset_mid_reply", self.reset_mid_reply),
        ] {
            assert!(
                (0.0..=1.0).contains(&p),
                "Faults::{name} = {p} is not a probability"
            );
        }
        let sum = self.drop_reply_after_apply + self.drop_request + self.reset_mid_reply;
        assert!(
            sum <= 1.0 + 1e-9,
            "the fault probabilities sum to {sum} > 1"
        );
    }

    /// The decision for a uniform draw `u` in `[0, 1)`.
    fn decide(&self, u: f64) -> Fault {
        let mut edge = self.drop_request;
        if u < edge {
            return Fault::DropRequest;
        }
        edge += self.drop_reply_after_apply;
        if u < edge {
            return Fault::DropReplyAfterApply;
        }
        edge += self.reset_mid_reply;
        if u < edge {
            return Fault::ResetMidReply;
        }
        Fault::None
    }
}

/// Documented behaviour of managed engines, imitated on write commands (probabilities, each in
/// `0.0..=1.0`, their sum at most 1; drawn once per write command not already faulted).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Engine {
    /// Refuse the whole command with 16500 and `RetryAfterMs`: never forwarded ("no changes were
    /// made").
    pub throttle_command: f64,
    /// Forward the command with only some of its statements (about half; at least one is
    /// refused) and answer the others with per-statement 16500 write errors.
    pub throttle_statements: f64,
    /// Forward the command, let it apply, and answer 50 `ExceededTimeLimit` instead of its reply.
    pub unknown_outcome: f64,
    /// Refuse a `find` or `getMore` whole with 16500 and `RetryAfterMs`: never forwarded, so a
    /// refused `getMore`'s cursor stays open (drawn once per read command).
    pub throttle_reads: f64,
    /// Refuse a read (`find`, `getMore`) or write command whole as MongoDB 8.2+'s ingress rate
    /// limiter and Atlas's load shedding do: 463 with the labels `SystemOverloadedError`,
    /// `RetryableError` and `NoWritesPerformed`; never forwarded.
    pub overload: f64,
    /// Forward a write command or a `getMore`, let it run, and answer 463 with
    /// `SystemOverloadedError` alone (which "does not mean that the operation can be safely
    /// retried": the `getMore` moved its cursor on).
    pub overload_after_apply: f64,
    /// Refuse a write command whole as an engine does inside a transaction it aborted: 251
    /// `NoSuchTransaction` with the label `TransientTransactionError`; never forwarded.
    pub transaction_aborted: f64,
    /// Answer every `n`th `getMore` (0: none) with 43 `CursorNotFound`, as an engine that
    /// dropped the cursor (restarted, timed it out) does; never forwarded.
    pub lose_every_nth_get_more: u64,
    /// The `RetryAfterMs` a throttle names.
    pub retry_after_ms: u64,
    /// Answer `hello` with 59 `CommandNotFound` and take `helloOk` out of `isMaster` replies.
    pub no_hello: bool,
    /// After this many throttles and unknown outcomes, pass everything (0: no limit).
    pub at_most: u64,
}

impl Engine {
    pub fn none() -> Engine {
        Engine::default()
    }
}

/// What the engine mode does with one message, and then with its reply.
#[derive(Clone, Debug, PartialEq)]
enum Rewrite {
    None,
    /// Answered here; nothing forwarded.
    Answered,
    /// Forwarded with the statements at `kept` only; the reply gets 16500 write errors for
    /// `refused` and its error indexes mapped back.
    Statements {
        kept: Vec<usize>,
        refused: Vec<usize>,
    },
    /// The command is applied and its reply replaced by this one.
    AfterApply(Document),
    /// `helloOk` is taken out of the reply.
    NoHelloOk,
}

/// What the proxy did with one write command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Forwarded, and its reply passed on.
    None,
    DropReplyAfterApply,
    DropRequest,
    ResetMidReply,
}

/// A snapshot of the proxy's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Requests received from clients, by command name (`insert`, `find`, `hello`, ...; `op_query`
    /// / `op_compressed` / `op_<code>` when a message carries no readable command name).
    pub commands: HashMap<String, u64>,
    /// Write commands forwarded to the server (including those whose reply was then dropped or
    /// cut).
    pub writes_forwarded: u64,
    pub replies_dropped: u64,
    pub requests_dropped: u64,
    pub resets: u64,
    /// Client connections accepted.
    pub connections: u64,
    /// The decision for each write command, in the order they arrived at the proxy.
    pub decisions: Vec<(String, Fault)>,
    /// Commands forwarded to the server whose connection the server closed before replying
    /// (a crash mid-command), by name.
    pub unanswered: HashMap<String, u64>,
    /// Engine mode: write commands refused whole with 16500.
    pub throttled_commands: u64,
    /// Engine mode: statements refused with 16500 in a command whose others were applied.
    pub throttled_statements: u64,
    /// Engine mode: `find` and `getMore` commands refused with 16500.
    pub throttled_reads: u64,
    /// Engine mode: `getMore` commands answered `CursorNotFound`.
    pub cursors_lost: u64,
    /// Engine mode: commands refused as overloaded (463, nothing written).
    pub overloaded: u64,
    /// Engine mode: write commands and `getMore`s run and answered 463 `SystemOverloadedError`.
    pub overloaded_after_apply: u64,
    /// Engine mode: write commands refused as in an aborted transaction (251).
    pub transactions_aborted: u64,
    /// Engine mode: commands applied and answered with 50.
    pub unknown_outcomes: u64,
    /// Engine mode: `hello` commands refused.
    pub hellos_refused: u64,
    /// Engine mode: write commands throttled (whole or in part) or answered with 50, and read
    /// commands refused.
    pub engine_actions: u64,
}

impl Stats {
    /// Requests named `name` seen from clients.
    pub fn count(&self, name: &str) -> u64 {
        self.commands.get(name).copied().unwrap_or(0)
    }
    /// Write commands seen from clients (faulted or not).
    pub fn writes(&self) -> u64 {
        WRITE_COMMANDS.iter().map(|n| self.count(n)).sum::<u64>() + self.count("findandmodify")
    }
    /// Faults injected, of any kind.
    pub fn faults(&self) -> u64 {
        self.replies_dropped + self.requests_dropped + self.resets
    }
}

struct Shared {
    upstream: SocketAddr,
    faults: Mutex<Faults>,
    engine: Mutex<Engine>,
    /// splitmix64 state.
    rng: Mutex<u64>,
    stats: Mutex<Stats>,
    /// Hold every write command forever: never forwarded, never answered, the connection left
    /// open — what a client sees of a stalled engine or a half-open TCP connection.
    stall: std::sync::atomic::AtomicBool,
    /// Write commands forwarded and not yet answered.
    in_flight: std::sync::atomic::AtomicU64,
    /// While gated, each write command waits for a permit before its fault is drawn: a test
    /// lets writes through one at a time and acts between them.
    gate: Gate,
}

struct Gate {
    on: std::sync::atomic::AtomicBool,
    permits: tokio::sync::Semaphore,
    /// Write commands that reached the gate so far (let through or not).
    arrived: std::sync::atomic::AtomicU64,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            on: Default::default(),
            permits: tokio::sync::Semaphore::new(0),
            arrived: Default::default(),
        }
    }
}

impl Shared {
    /// Counts a request and, for a write command, draws its fault. The draw and the recording of
    /// the decision happen under one lock, so `decisions` is in draw order.
    fn on_request(&self, name: &str) -> Fault {
        let mut stats = self.stats.lock().unwrap();
        *stats.commands.entry(name.to_string()).or_default() += 1;
        if !is_write(name) {
            return Fault::None;
        }
        let u = {
            let mut state = self.rng.lock().unwrap();
            unit(splitmix64(&mut state))
        };
        let fault = self.faults.lock().unwrap().decide(u);
        stats.decisions.push((name.to_string(), fault));
        match fault {
            Fault::DropRequest => stats.requests_dropped += 1,
            _ => stats.writes_forwarded += 1,
        }
        fault
    }

    /// The engine mode's decision for a request that no fault took.
    fn engine_rewrite(&self, name: &str, msg: &[u8]) -> (Rewrite, Option<Vec<u8>>) {
        let engine = *self.engine.lock().unwrap();
        if engine.no_hello && name == "hello" {
            self.bump(|s| s.hellos_refused += 1);
            let reply = doc! { "ok": 0.0, "errmsg": "no such command: 'hello'", "code": 59, "codeName": "CommandNotFound" };
            return (Rewrite::Answered, Some(reply_to(msg, &reply)));
        }
        if engine.no_hello && name.eq_ignore_ascii_case("ismaster") {
            return (Rewrite::NoHelloOk, None);
        }
        let busy = engine.throttle_command
            + engine.throttle_statements
            + engine.unknown_outcome
            + engine.overload
            + engine.overload_after_apply
            + engine.transaction_aborted;
        let spent =
            engine.at_most > 0 && self.stats.lock().unwrap().engine_actions >= engine.at_most;
        if name == "getMore" && engine.lose_every_nth_get_more > 0 && !spent {
            let nth = self.stats.lock().unwrap().count("getMore");
            if nth.is_multiple_of(engine.lose_every_nth_get_more) {
                self.bump(|s| {
                    s.engine_actions += 1;
                    s.cursors_lost += 1;
                });
                let reply = doc! {
                    "ok": 0.0,
                    "errmsg": "cursor id 1 not found",
                    "code": 43,
                    "codeName": "CursorNotFound",
                };
                return (Rewrite::Answered, Some(reply_to(msg, &reply)));
            }
        }
        if name == "getMore" && engine.overload_after_apply > 0.0 && !spent {
            let u = unit(splitmix64(&mut self.rng.lock().unwrap()));
            if u < engine.overload_after_apply {
                self.bump(|s| {
                    s.engine_actions += 1;
                    s.overloaded_after_apply += 1;
                });
                return (Rewrite::AfterApply(overload_reply(false)), None);
            }
        }
        let reads = engine.throttle_reads + engine.overload;
        if matches!(name, "find" | "getMore") && reads > 0.0 && !spent {
            let u = unit(splitmix64(&mut self.rng.lock().unwrap()));
            if u < engine.throttle_reads {
                self.bump(|s| {
                    s.engine_actions += 1;
                    s.throttled_reads += 1;
                });
                let reply = throttle_reply(engine.retry_after_ms);
                return (Rewrite::Answered, Some(reply_to(msg, &reply)));
            }
            if u < reads {
                self.bump(|s| {
                    s.engine_actions += 1;
                    s.overloaded += 1;
                });
                return (
                    Rewrite::Answered,
                    Some(reply_to(msg, &overload_reply(true))),
                );
            }
        }
        if !is_write(name) || busy == 0.0 || spent {
            return (Rewrite::None, None);
        }
        let (u, pick) = {
            let mut state = self.rng.lock().unwrap();
            (unit(splitmix64(&mut state)), splitmix64(&mut state))
        };
        let throttle = throttle_reply(engine.retry_after_ms);
        if u < busy {
            self.bump(|s| s.engine_actions += 1);
        }
        if u < engine.throttle_command {
            self.bump(|s| s.throttled_commands += 1);
            return (Rewrite::Answered, Some(reply_to(msg, &throttle)));
        }
        if u < engine.throttle_command + engine.throttle_statements {
            if let Some((kept, refused, forwarded)) = split_statements(msg, pick) {
                self.bump(|s| s.throttled_statements += refused.len() as u64);
                if kept.is_empty() {
                    let reply = statements_refused(&refused, engine.retry_after_ms);
                    return (Rewrite::Answered, Some(reply_to(msg, &reply)));
                }
                return (Rewrite::Statements { kept, refused }, Some(forwarded));
            }
            return (Rewrite::None, None);
        }
        let unknown = engine.throttle_command + engine.throttle_statements + engine.unknown_outcome;
        if u < unknown {
            self.bump(|s| s.unknown_outcomes += 1);
            let reply = doc! {
                "ok": 0.0,
                "errmsg": "Request timed out. Retries due to rate limiting: True.",
                "code": 50,
                "codeName": "ExceededTimeLimit",
            };
            return (Rewrite::AfterApply(reply), None);
        }
        if u < unknown + engine.overload {
            self.bump(|s| s.overloaded += 1);
            return (
                Rewrite::Answered,
                Some(reply_to(msg, &overload_reply(true))),
            );
        }
        if u < busy - engine.transaction_aborted {
            self.bump(|s| s.overloaded_after_apply += 1);
            return (Rewrite::AfterApply(overload_reply(false)), None);
        }
        if u < busy {
            self.bump(|s| s.transactions_aborted += 1);
            let reply = doc! {
                "ok": 0.0,
                "errmsg": "Transaction with { txnNumber: 1 } has been aborted.",
                "code": 251,
                "codeName": "NoSuchTransaction",
                "errorLabels": ["TransientTransactionError"],
            };
            return (Rewrite::Answered, Some(reply_to(msg, &reply)));
        }
        (Rewrite::None, None)
    }

    fn bump(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap())
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform number in `[0, 1)` from 53 random bits.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A running proxy on 127.0.0.1. Dropping it stops it (and cuts every connection through it).
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Binds 127.0.0.1:0 and forwards every accepted connection to `upstream`.
    pub async fn start(upstream: SocketAddr, faults: Faults, seed: u64) -> Proxy {
        faults.validate();
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::new(faults),
            engine: Mutex::new(Engine::none()),
            rng: Mutex::new(seed),
            stats: Mutex::new(Stats::default()),
            stall: Default::default(),
            in_flight: Default::default(),
            gate: Gate::default(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `mongodb://127.0.0.1:PORT/?retryWrites=false&directConnection=true`.
    pub fn uri(&self) -> String {
        format!(
            "mongodb://{}/?retryWrites=false&directConnection=true",
            self.addr
        )
    }

    /// While on, every write command is held forever (see `Shared::stall`).
    pub fn set_stall(&self, on: bool) {
        self.shared
            .stall
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on, write commands wait at the proxy until [`admit`](Self::admit) lets them
    /// through (reads pass).
    pub fn gate_writes(&self) {
        self.shared
            .gate
            .on
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets `n` waiting (or future) write commands through the gate.
    pub fn admit(&self, n: usize) {
        self.shared.gate.permits.add_permits(n);
    }

    /// Write commands that reached the gate since [`gate_writes`](Self::gate_writes).
    pub fn arrived(&self) -> u64 {
        self.shared
            .gate
            .arrived
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until the `n`th write command since [`gate_writes`](Self::gate_writes) has
    /// reached the gate (at most 30 s).
    pub async fn until_arrived(&self, n: u64) {
        until(
            || self.arrived() >= n,
            || format!("{} of {n} writes reached the gate", self.arrived()),
        )
        .await
    }

    /// Waits until the proxy has decided the fate of `n` write commands (at most 30 s).
    pub async fn until_decided(&self, n: usize) {
        let decided = || self.stats().decisions.len();
        until(
            || decided() >= n,
            || format!("{} of {n} writes decided", decided()),
        )
        .await
    }

    /// Changes the faults for write commands arriving from now on (the PRNG stream goes on).
    pub fn set_faults(&self, faults: Faults) {
        faults.validate();
        *self.shared.faults.lock().unwrap() = faults;
    }

    pub fn faults(&self) -> Faults {
        *self.shared.faults.lock().unwrap()
    }

    /// Imitates a managed engine from now on (see [`Engine`]).
    pub fn set_engine(&self, engine: Engine) {
        let sum = engine.throttle_command
            + engine.throttle_statements
            + engine.unknown_outcome
            + engine.overload
            + engine.overload_after_apply
            + engine.transaction_aborted;
        assert!(
            (0.0..=1.0 + 1e-9).contains(&sum),
            "{engine:?}: not probabilities"
        );
        *self.shared.engine.lock().unwrap() = engine;
    }

    /// Write commands forwarded to the server and not answered yet.
    pub fn writes_in_flight(&self) -> u64 {
        self.shared
            .in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats.lock().unwrap().clone()
    }

    /// Zeroes the counters (not the PRNG).
    pub fn reset_stats(&self) {
        *self.shared.stats.lock().unwrap() = Stats::default();
    }

    /// Stops accepting and aborts every connection. Also done on drop.
    pub fn shutdown(&self) {
        self.accept.abort();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The address of the first host of a `mongodb://` URI (credentials, path and options ignored;
/// port 27017 when absent), resolved, preferring IPv4.
async fn until(done: impl Fn() -> bool, what: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "after 30 s: {}",
            what()
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

pub fn upstream_addr(uri: &str) -> SocketAddr {
    let rest = uri
        .strip_prefix("mongodb://")
        .unwrap_or_else(|| panic!("not a mongodb:// URI (mongodb+srv is not supported): {uri}"));
    let hosts = rest.split(['/', '?']).next().unwrap();
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    let host = hosts.split(',').next().unwrap();
    let with_port = if host.starts_with('[') {
        if host.contains("]:") {
            host.to_string()
        } else {
            format!("{host}:27017")
        }
    } else if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:27017")
    };
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("resolve {with_port}: {e}"))
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .unwrap_or_else(|| panic!("{with_port} resolves to no address"))
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Owned here: aborting this task drops the set, which aborts every connection task.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                shared.bump(|s| s.connections += 1);
                conns.spawn(serve(client, shared.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// How a pump ended.
#[derive(PartialEq)]
enum End {
    /// A side closed or failed: close the other.
    Closed,
    /// A fault: close both sides.
    Fault,
    /// A fault: reset the client connection.
    Reset,
}

type Pending = Mutex<HashMap<i32, (String, Fault, Rewrite)>>;
/// The client's side, written by both pumps (the engine mode answers some requests itself).
type ClientWriter = tokio::sync::Mutex<OwnedWriteHalf>;

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let Ok(upstream) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut client_r, client_w) = client.into_split();
    let client_w: ClientWriter = tokio::sync::Mutex::new(client_w);
    let (mut up_r, mut up_w) = upstream.into_split();
    let pending: Pending = Mutex::new(HashMap::new());
    let (end, server_ended) = tokio::select! {
        end = client_to_upstream(&mut client_r, &mut up_w, &client_w, &pending, &shared) => (end, false),
        end = upstream_to_client(&mut up_r, &client_w, &pending, &shared) => (end, true),
    };
    let mut client_w = client_w.into_inner();
    let left: Vec<(String, Fault)> = pending
        .lock()
        .unwrap()
        .drain()
        .map(|(_, (name, fault, _))| (name, fault))
        .collect();
    for (name, _) in &left {
        if is_write(name) {
            shared
                .in_flight
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    if server_ended && end == End::Closed {
        // The server closed the connection with these commands forwarded and unanswered.
        shared.bump(|s| {
            for (name, fault) in left {
                if fault == Fault::None {
                    *s.unanswered.entry(name).or_default() += 1;
                }
            }
        });
    }
    match end {
        End::Closed => {}
        End::Fault => {
            let _ = client_w.shutdown().await;
        }
        End::Reset => {
            // SO_LINGER 0: closing sends an RST rather than a FIN. `forget` keeps the write half
            // from shutting down (a FIN) on drop; the socket closes with the read half.
            let _ = client_w.as_ref().set_zero_linger();
            client_w.forget();
            drop(client_r);
        }
    }
    // The remaining halves drop here, closing both sockets.
}

async fn client_to_upstream(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    client: &ClientWriter,
    pending: &Pending,
    shared: &Shared,
) -> End {
    loop {
        let Ok(msg) = read_message(from).await else {
            return End::Closed;
        };
        let header = Header::of(&msg);
        let name = command_name(&msg);
        if is_write(&name) && shared.stall.load(std::sync::atomic::Ordering::SeqCst) {
            return std::future::pending().await;
        }
        if is_write(&name) && shared.gate.on.load(std::sync::atomic::Ordering::SeqCst) {
            use std::sync::atomic::Ordering::SeqCst;
            shared.gate.arrived.fetch_add(1, SeqCst);
            shared
                .gate
                .permits
                .acquire()
                .await
                .expect("the gate is never closed")
                .forget();
        }
        let fault = shared.on_request(&name);
        if fault == Fault::DropRequest {
            return End::Fault;
        }
        let fire_and_forget = header.op_code == OP_MSG && flags(&msg) & MORE_TO_COME != 0;
        let (rewrite, bytes) = match fault {
            Fault::None if !fire_and_forget => shared.engine_rewrite(&name, &msg),
            _ => (Rewrite::None, None),
        };
        if rewrite == Rewrite::Answered {
            let reply = bytes.expect("an answered request has its reply");
            if client.lock().await.write_all(&reply).await.is_err() {
                return End::Closed;
            }
            continue;
        }
        let msg = bytes.unwrap_or(msg);
        if !fire_and_forget {
            if is_write(&name) {
                shared
                    .in_flight
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            pending
                .lock()
                .unwrap()
                .insert(header.request_id, (name, fault, rewrite));
        }
        if to.write_all(&msg).await.is_err() {
            return End::Closed;
        }
        if fire_and_forget && fault != Fault::None {
            // An unacknowledged write has no reply to drop or cut: the closest is to close now.
            shared.bump(|s| match fault {
                Fault::ResetMidReply => s.resets += 1,
                _ => s.replies_dropped += 1,
            });
            return if fault == Fault::ResetMidReply {
                End::Reset
            } else {
                End::Fault
            };
        }
    }
}

async fn upstream_to_client(
    from: &mut OwnedReadHalf,
    to: &ClientWriter,
    pending: &Pending,
    shared: &Shared,
) -> End {
    loop {
        let Ok(msg) = read_message(from).await else {
            return End::Closed;
        };
        let header = Header::of(&msg);
        let more = header.op_code == OP_MSG && flags(&msg) & MORE_TO_COME != 0;
        let (fault, rewrite) = {
            let mut pending = pending.lock().unwrap();
            // A streamed (exhaust) reply answers the previous reply, so it is not found: passed on.
            let entry = if more {
                pending.get(&header.response_to).cloned()
            } else {
                let e = pending.remove(&header.response_to);
                if e.as_ref().is_some_and(|(name, _, _)| is_write(name)) {
                    shared
                        .in_flight
                        .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
                e
            };
            entry.map_or((Fault::None, Rewrite::None), |(_, fault, rewrite)| {
                (fault, rewrite)
            })
        };
        let msg = rewrite_reply(msg, &rewrite, shared);
        match fault {
            Fault::DropReplyAfterApply => {
                shared.bump(|s| s.replies_dropped += 1);
                return End::Fault;
            }
            Fault::ResetMidReply => {
                shared.bump(|s| s.resets += 1);
                let mut to = to.lock().await;
                let _ = to.write_all(&msg[..msg.len() / 2]).await;
                let _ = to.flush().await;
                // Let the partial reply reach the client before the reset.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                return End::Reset;
            }
            Fault::None | Fault::DropRequest => {
                if to.lock().await.write_all(&msg).await.is_err() {
                    return End::Closed;
                }
            }
        }
    }
}

struct Header {
    request_id: i32,
    response_to: i32,
    op_code: i32,
}

impl Header {
    fn of(msg: &[u8]) -> Header {
        Header {
            request_id: i32_at(msg, 4),
            response_to: i32_at(msg, 8),
            op_code: i32_at(msg, 12),
        }
    }
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32_get(b, at).expect("a message is at least a header long")
}

fn i32_get(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// OP_MSG flagBits (0 when the message is too short to have them).
fn flags(msg: &[u8]) -> u32 {
    if msg.len() < 20 {
        return 0;
    }
    i32_at(msg, 16) as u32
}

/// Reads one whole message (header included).
async fn read_message(r: &mut OwnedReadHalf) -> io::Result<Vec<u8>> {
    let mut header = [0u8; 16];
    r.read_exact(&mut header).await?;
    let len = i32::from_le_bytes(header[..4].try_into().unwrap());
    if len < 16 || len as usize > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message length {len}"),
        ));
    }
    let mut msg = vec![0u8; len as usize];
    msg[..16].copy_from_slice(&header);
    r.read_exact(&mut msg[16..]).await?;
    Ok(msg)
}

/// The command a request carries: the first key of its body, or a stand-in.
fn command_name(msg: &[u8]) -> String {
    let op_code = i32_at(msg, 12);
    let name = match op_code {
        OP_MSG => op_msg_body(msg).and_then(first_key),
        OP_QUERY => op_query_doc(msg).and_then(first_key),
        OP_COMPRESSED => return "op_compressed".into(),
        _ => None,
    };
    name.unwrap_or_else(|| match op_code {
        OP_MSG => "op_msg".into(),
        OP_QUERY => "op_query".into(),
        OP_REPLY => "op_reply".into(),
        other => format!("op_{other}"),
    })
}

/// The kind-0 (body) section of an OP_MSG.
fn op_msg_body(msg: &[u8]) -> Option<&RawDocument> {
    let flags = flags(msg);
    let end = if flags & CHECKSUM_PRESENT != 0 {
        msg.len().checked_sub(4)?
    } else {
        msg.len()
    };
    let mut at = 20;
    while at < end {
        let kind = msg[at];
        at += 1;
        let size = usize::try_from(i32_get(&msg[..end], at)?).ok()?;
        let section = msg[..end].get(at..at.checked_add(size)?)?;
        if kind == 0 {
            return RawDocument::from_bytes(section).ok();
        }
        at += size; // kind 1: the size covers itself, the identifier and the documents
    }
    None
}

/// The query document of an OP_QUERY.
fn op_query_doc(msg: &[u8]) -> Option<&RawDocument> {
    // flags i32, fullCollectionName cstring, numberToSkip i32, numberToReturn i32, query.
    let name_len = msg.get(20..)?.iter().position(|&b| b == 0)?;
    let at = 20 + name_len + 1 + 8;
    let size = usize::try_from(i32_get(msg, at)?).ok()?;
    RawDocument::from_bytes(msg.get(at..at.checked_add(size)?)?).ok()
}

fn first_key(doc: &RawDocument) -> Option<String> {
    let (key, value) = doc.iter().next()?.ok()?;
    // A legacy wrapped query ({$query: {isMaster: 1}, ...}) is named by its inner document.
    if key == "$query" {
        if let Some(inner) = value.as_document() {
            return first_key(inner);
        }
    }
    Some(key.to_string())
}

/// Cosmos DB's throttle: "no changes were made", with the wait.
/// MongoDB 8.2+'s overload error (Atlas, "Handle Overload Errors from Load Shedding"): with
/// `RetryableError` and `NoWritesPerformed` when the command was not run, without them when
/// it may have been.
fn overload_reply(not_run: bool) -> Document {
    let mut labels = vec!["SystemOverloadedError"];
    if not_run {
        labels.extend(["RetryableError", "NoWritesPerformed"]);
    }
    doc! {
        "ok": 0.0,
        "errmsg": "Request rejected: ingress operation rate limit exceeded",
        "code": 463,
        "codeName": "IngressOperationRateLimitExceeded",
        "errorLabels": labels,
    }
}

fn throttle_reply(retry_after_ms: u64) -> Document {
    doc! {
        "ok": 0.0,
        "errmsg": format!(
            "Error=16500, RetryAfterMs={retry_after_ms}, Details='Response status code does not \
             indicate success: TooManyRequests (429); Substatus: 3200; Request rate is large. \
             More Request Units may be needed, so no changes were made. Please retry this \
             request later.'"
        ),
        "code": 16500,
        "codeName": "TooManyRequests",
    }
}

fn statement_throttled(index: usize, retry_after_ms: u64) -> Document {
    doc! {
        "index": index as i32,
        "code": 16500,
        "errmsg": format!("Error=16500, RetryAfterMs={retry_after_ms}, Details='Request rate is large'"),
    }
}

/// A reply in which every one of `refused` was throttled and nothing applied.
fn statements_refused(refused: &[usize], retry_after_ms: u64) -> Document {
    let errors: Vec<Bson> = refused
        .iter()
        .map(|&i| Bson::Document(statement_throttled(i, retry_after_ms)))
        .collect();
    doc! { "ok": 1.0, "n": 0, "writeErrors": errors }
}

/// The array of statements a write command carries in its body.
fn statements_field(name: &str) -> Option<&'static str> {
    match name {
        "insert" => Some("documents"),
        "update" => Some("updates"),
        "delete" => Some("deletes"),
        _ => None,
    }
}

/// The body of a plain OP_MSG (one kind-0 section, no checksum, no more-to-come), as a document.
fn plain_body(msg: &[u8]) -> Option<Document> {
    if i32_get(msg, 12)? != OP_MSG || flags(msg) != 0 {
        return None;
    }
    let body = op_msg_body(msg)?;
    if 21 + body.as_bytes().len() != msg.len() {
        return None; // other sections: left alone
    }
    Document::try_from(body).ok()
}

/// An OP_MSG with `body`, under `msg`'s header ids (or answering `answers`).
fn op_msg(request_id: i32, response_to: i32, body: &Document) -> Vec<u8> {
    let mut bytes = Vec::new();
    body.to_writer(&mut bytes).expect("a document serializes");
    let len = 16 + 4 + 1 + bytes.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as i32).to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&response_to.to_le_bytes());
    out.extend_from_slice(&OP_MSG.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&bytes);
    out
}

/// A reply to request `msg`, answered by the proxy.
fn reply_to(msg: &[u8], body: &Document) -> Vec<u8> {
    op_msg(
        i32::MAX - Header::of(msg).request_id.rem_euclid(1 << 20),
        Header::of(msg).request_id,
        body,
    )
}

/// A write command cut to some of its statements: (kept, refused, the forwarded message).
/// About half are refused, at least one; `None` when the message is not a plain write command.
fn split_statements(msg: &[u8], mut bits: u64) -> Option<(Vec<usize>, Vec<usize>, Vec<u8>)> {
    let mut body = plain_body(msg)?;
    let field = statements_field(body.keys().next()?)?;
    let statements = body.get_array(field).ok()?.clone();
    let (mut kept, mut refused) = (Vec::new(), Vec::new());
    let mut keep = Vec::new();
    for (i, statement) in statements.into_iter().enumerate() {
        if bits & 1 == 1 {
            kept.push(i);
            keep.push(statement);
        } else {
            refused.push(i);
        }
        bits = bits.rotate_right(1);
    }
    if refused.is_empty() {
        let last = kept.pop()?;
        keep.pop();
        refused.push(last);
    }
    body.insert(field, keep);
    let header = Header::of(msg);
    Some((
        kept,
        refused,
        op_msg(header.request_id, header.response_to, &body),
    ))
}

/// The reply as the engine mode answers it.
fn rewrite_reply(msg: Vec<u8>, rewrite: &Rewrite, shared: &Shared) -> Vec<u8> {
    let header = Header::of(&msg);
    let retry_after_ms = shared.engine.lock().unwrap().retry_after_ms;
    match rewrite {
        Rewrite::None | Rewrite::Answered => msg,
        Rewrite::AfterApply(body) => op_msg(header.request_id, header.response_to, body),
        Rewrite::Statements { kept, refused } => {
            let Some(mut body) = plain_body(&msg) else {
                return msg;
            };
            let mut errors: Vec<Document> = body
                .get_array("writeErrors")
                .map(|a| a.iter().filter_map(|e| e.as_document().cloned()).collect())
                .unwrap_or_default();
            for e in &mut errors {
                let at = e.get_i32("index").unwrap_or(0) as usize;
                e.insert("index", kept.get(at).copied().unwrap_or(at) as i32);
            }
            errors.extend(
                refused
                    .iter()
                    .map(|&i| statement_throttled(i, retry_after_ms)),
            );
            errors.sort_by_key(|e| e.get_i32("index").unwrap_or(0));
            body.insert("writeErrors", errors);
            op_msg(header.request_id, header.response_to, &body)
        }
        Rewrite::NoHelloOk => without_hello_ok(msg),
    }
}

/// An `isMaster` reply without `helloOk` (OP_MSG, or the legacy OP_REPLY).
fn without_hello_ok(msg: Vec<u8>) -> Vec<u8> {
    let header = Header::of(&msg);
    if let Some(mut body) = plain_body(&msg) {
        body.remove("helloOk");
        return op_msg(header.request_id, header.response_to, &body);
    }
    // OP_REPLY: flags i32, cursorId i64, startingFrom i32, numberReturned i32, documents.
    const DOCS: usize = 36;
    if header.op_code != OP_REPLY || msg.len() <= DOCS {
        return msg;
    }
    let Ok(mut doc) = bson::Document::from_reader(&msg[DOCS..]) else {
        return msg;
    };
    doc.remove("helloOk");
    let mut bytes = Vec::new();
    doc.to_writer(&mut bytes).expect("a document serializes");
    let mut out = msg[..DOCS].to_vec();
    out.extend_from_slice(&bytes);
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}
