//! What engines answer, and what each answer means for a write: the server codes, labels,
//! PostgreSQL SQLSTATEs and messages of MongoDB, FerretDB, DocumentDB (and Citus under it),
//! Cosmos DB and Amazon DocumentDB, sorted into transient, busy (nothing applied), unknown
//! outcome and permanent. The public error type ([`Error`]) says what happened; this module is
//! the one place that knows how each engine says it.

use crate::error::Error;

impl Error {
    /// How long the engine asked to wait before the next attempt (`RetryAfterMs=N` in Azure
    /// Cosmos DB's throttling message), if it did. A [`RetryPolicy`](crate::RetryPolicy) waits
    /// at least this long before retrying.
    ///
    /// ```
    /// use natural_key_runtime::Error;
    /// let e = Error::Throttled {
    ///     collection: "db.posts".into(),
    ///     code: 16500,
    ///     message: "Request rate is large. RetryAfterMs=120, Details='...'".into(),
    /// };
    /// assert_eq!(e.retry_after(), Some(std::time::Duration::from_millis(120)));
    /// assert!(e.is_transient());
    /// ```
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Throttled { message, .. } => retry_after_in(message),
            Error::Transient(e) => retry_after_in(&e.to_string()),
            _ => None,
        }
    }

    /// Whether the engine aborted the transaction this call ran in (the driver's
    /// `TransientTransactionError` label, which it sets only inside a transaction). Transient
    /// for the caller — the whole transaction may succeed when run again — but no attempt of
    /// this call can: its transaction is gone. So a retry policy returns it at once, and the
    /// caller's transaction loop runs the transaction again.
    pub(crate) fn ends_transaction(&self) -> bool {
        match self {
            Error::Transient(e) | Error::Database(e) => e.contains_label(TRANSACTION_ABORTED),
            _ => false,
        }
    }
}

/// The label of an error that ended the transaction it ran in (transactions specification).
const TRANSACTION_ABORTED: &str = "TransientTransactionError";

/// Server error codes after which the same command may succeed, as the retryable-reads/writes
/// specifications list them: not primary, node recovering or shutting down, host unreachable,
/// network timeout, socket exception, exceeded time limit. The engines' own transient answers
/// are their tables: [`THROTTLE_CODES`], [`UNKNOWN_OUTCOME_CODES`] and [`CURSOR_NOT_FOUND`]
/// ([`transient_code`]).
const RETRYABLE_CODES: &[i32] = &[
    11600, 11602, 10107, 13435, 13436, 10058, 189, 91, 7, 6, 89, 9001, 134, 262, 147,
];

/// Whether the same command may succeed after an answer with `code`.
fn transient_code(code: i32) -> bool {
    RETRYABLE_CODES.contains(&code)
        || THROTTLE_CODES.contains(&code)
        || UNKNOWN_OUTCOME_CODES.contains(&code)
        || code == CURSOR_NOT_FOUND
}

/// A PostgreSQL SQLSTATE as DocumentDB passes it through as an error code: PostgreSQL's own
/// encoding of the five characters, six bits each (`MAKE_SQLSTATE` in its `elog.h`).
const fn sqlstate(s: &[u8; 5]) -> i32 {
    let mut code = 0;
    let mut i = 0;
    while i < 5 {
        code |= ((s[i].wrapping_sub(b'0') & 0x3f) as i32) << (6 * i);
        i += 1;
    }
    code
}

/// `40P01` deadlock_detected: PostgreSQL aborted one of two transactions waiting on each
/// other (concurrent inserts into one unique index can), rolling its statement back.
const PG_DEADLOCK_DETECTED: i32 = sqlstate(b"40P01");
/// `40001` serialization_failure: the statement's transaction was rolled back.
const PG_SERIALIZATION_FAILURE: i32 = sqlstate(b"40001");
/// `57014` query_canceled: on Citus, one side of a distributed lock wait cancelled ("canceling
/// statement due to user request", `while checking exclusion constraint`), as racing writers
/// on one unique index meet across shards; the statement was rolled back.
const PG_QUERY_CANCELED: i32 = sqlstate(b"57014");
/// `08006` connection_failure: Citus lost the connection to a worker under a statement (the
/// worker killed or gone); whether a commit reached it is not known.
const PG_CONNECTION_FAILURE: i32 = sqlstate(b"08006");
/// `57P01` admin_shutdown, `57P02` crash_shutdown, `57P03` cannot_connect_now: the server
/// under the statement is stopping, crashed or not up yet. Seen per document of a relative
/// update as 16908741 (`57P01`) "terminating connection due to unexpected postmaster exit", a
/// Citus node killed mid-call (tests/engine_faults.rs); never a refusal of the data.
const PG_SERVER_GOING_DOWN: [i32; 3] = [sqlstate(b"57P01"), sqlstate(b"57P02"), sqlstate(b"57P03")];

/// DocumentDB on Citus refuses an `{upsert: true}` or `{multi: false}` update (and a delete)
/// whose filter lacks the shard key with `22023` invalid_parameter_value, a code it uses for
/// many other refusals too: its message tells.
const PG_INVALID_PARAMETER: i32 = sqlstate(b"22023");
/// MongoDB's 61 `ShardKeyNotFound` (a `findAndModify` on DocumentDB/Citus without the shard
/// key, and MongoDB's own for such writes).
const SHARD_KEY_NOT_FOUND: i32 = 61;

/// Whether the engine refused a write because its filter lacks the shard key
/// ([`Error::ShardKeyMissing`]).
pub(crate) fn shard_key_missing(code: i32, message: &str) -> bool {
    code == SHARD_KEY_NOT_FOUND
        || code == PG_INVALID_PARAMETER && message.contains("target a single shard")
}

/// Codes with which a managed engine refuses a command, or some statements of one, because it
/// is busy, having applied none of them: the send loop waits as asked and sends them again.
/// - 16500 `TooManyRequests` (`RequestRateTooLarge`): Azure Cosmos DB for MongoDB (RU), request
///   units exhausted; the message carries `RetryAfterMs=N` and says no changes were made. Its
///   bulk writes may apply some statements and refuse the rest with 16500 (Microsoft Learn,
///   "Troubleshoot common errors in Azure Cosmos DB for MongoDB", "Prevent rate-limiting
///   errors").
/// - 112 `WriteConflict` and 148 "Insufficient resources to run query": Amazon DocumentDB 8.0
///   (developer guide, "Error codes").
/// - PostgreSQL's transaction rollbacks under FerretDB 2 / DocumentDB (and so Azure
///   DocumentDB), which passes their SQLSTATE through as the code of a write error:
///   16908292 "deadlock detected" (`40P01`; seen with 4 event writers through one unique index)
///   and 16777220 (`40001`); on Citus also 67371461 (`57014`, a distributed lock wait
///   cancelled: seen with 16 writers racing one identity). Nothing of the statement stayed; no
///   wait is named.
pub(crate) const THROTTLE_CODES: &[i32] = &[
    16500,
    112,
    148,
    PG_DEADLOCK_DETECTED,
    PG_SERIALIZATION_FAILURE,
    PG_QUERY_CANCELED,
];

/// Citus' distributed deadlock detection cancelling one of two transactions that wait on each
/// other across nodes, as a whole command's code 1: "canceling the transaction since it was
/// involved in a distributed deadlock" (the cluster pass of tests/convergence.rs, events from
/// 4 writers). The transaction was rolled back, like PostgreSQL's own `40P01`.
const DISTRIBUTED_DEADLOCK: &str = "involved in a distributed deadlock";

/// Whether the engine refused a command or statement as busy, having applied none of it: a
/// [`THROTTLE_CODES`] code, or Citus' distributed deadlock ([`DISTRIBUTED_DEADLOCK`]).
pub(crate) fn refused_as_busy(code: i32, message: &str) -> bool {
    THROTTLE_CODES.contains(&code)
        || code == INTERNAL_ERROR && message.contains(DISTRIBUTED_DEADLOCK)
}

/// The label with which MongoDB 8.2+ (its ingress request rate limiter) and Atlas (load
/// shedding) reject a command under overload, e.g. 463 `IngressOperationRateLimitExceeded`
/// (MongoDB's client-backpressure specification; Atlas, "Handle Overload Errors from Load
/// Shedding"). Alone it does not say whether the command ran.
const OVERLOADED: &str = "SystemOverloadedError";
/// Whether the engine answered `e` under overload ([`OVERLOADED`]), run or not.
pub(crate) fn overloaded(e: &mongodb::error::Error) -> bool {
    server_code(e).is_some() && e.contains_label(OVERLOADED)
}

/// Labels beside [`OVERLOADED`] that say the command was not run: `RetryableError` ("the
/// operation was not executed") and `NoWritesPerformed` ("rejected before performing any
/// writes").
const NOT_RUN: [&str; 2] = ["RetryableError", "NoWritesPerformed"];

/// The engine refused a command on `namespace` as busy, having run none of it: a throttle
/// code ([`THROTTLE_CODES`]) or an overload error labelled not run; for a `rerunnable`
/// command (a `find`, which changes nothing if it ran), any overload error. The
/// [`Error::Throttled`] to wait on and, if the policy gives up, to report. Only the engine's
/// answer counts: the driver puts the same labels on a connection it could not open (one to a
/// silent engine, say), which is a network error, transient, not the engine asking to wait.
pub(crate) fn throttle(
    namespace: &str,
    e: &mongodb::error::Error,
    rerunnable: bool,
) -> Option<Error> {
    let code = server_code(e)?;
    let busy = refused_as_busy(code, &e.to_string())
        || e.contains_label(OVERLOADED)
            && (rerunnable || NOT_RUN.iter().any(|l| e.contains_label(l)));
    busy.then(|| Error::throttled(namespace, code, e.to_string()))
}

/// Codes after which a write may or may not have been applied: its writer decides from the
/// next read, as after a lost reply (every natural-key write stamps its token).
/// - 50 `ExceededTimeLimit`: Cosmos DB's server-side retry of a throttled request gave up after
///   60 s; "retrying may result in a duplicate write" (same pages) — not with natural-key.
/// - 11601 "The operation was interrupted": Amazon DocumentDB 8.0 (developer guide, "Error
///   codes"), after a failover or a killed operation.
/// - 100663808 (`08006`, connection failure): DocumentDB on Citus, per document of a write,
///   when a worker is killed under it; a multi-shard write is a two-phase commit, and what
///   the coordinator had prepared on the worker may yet commit (Citus recovers prepared
///   transactions after the worker is back).
/// - 16908741 and its neighbours (`57P01`..`57P03`, [`PG_SERVER_GOING_DOWN`]): the server
///   stopped under the statement; whether its transaction committed is not known.
pub(crate) const UNKNOWN_OUTCOME_CODES: &[i32] = &[
    50,
    11601,
    PG_CONNECTION_FAILURE,
    PG_SERVER_GOING_DOWN[0],
    PG_SERVER_GOING_DOWN[1],
    PG_SERVER_GOING_DOWN[2],
];

/// What FerretDB says, as code 1 `InternalError`, when the storage under it fails, restarts
/// or is not up yet: it passes PostgreSQL's (or its connection pool's) failure through and
/// does not retry. Observed on FerretDB 2.5 / DocumentDB with PostgreSQL SIGKILLed and
/// restarted (../shared/engines/documentdb, "How it answered", and a probe of 4,600 inserts
/// across a kill: "terminating connection ...", then "failed to connect to ..." until it was
/// back); the others are PostgreSQL's
/// own messages for a server starting, stopping or recovering. Code 1 alone decides nothing:
/// the same engines answer it for a unique index built over duplicates, which is permanent.
const ENGINE_FAILURES: &[&str] = &[
    "terminating connection due to unexpected postmaster exit",
    "unexpected EOF",
    "the database system is not yet accepting connections",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "terminating connection due to administrator command",
    // FerretDB's pool, while PostgreSQL is down: "failed to connect to `user=postgres
    // database=postgres`: ... dial tcp 127.0.0.1:PORT: connect: connection refused".
    "failed to connect to",
    // Citus, on the coordinator, when a worker is killed, restarting or gone ("connection to
    // the remote node postgres@127.0.0.1:PORT failed with the following error: Connection
    // refused"; "failure on connection marked as essential: 127.0.0.1:PORT"; "server closed
    // the connection unexpectedly"): ../shared/engines/documentdb-cluster, "Seen under faults";
    // or cut off and its connections reset ("... failed with the following error: connection
    // not open", tests/partitions.rs).
    "connection to the remote node",
    "failure on connection marked as essential",
    "server closed the connection unexpectedly",
    // A backend whose postmaster died under it (Citus' coordinator SIGKILLed mid-batch), per
    // document as `XX000` (tests/engine_faults.rs on the cluster).
    "postmaster was shut down",
    // PostgreSQL's PANIC when reporting an error fails again and again (elog.c): seen from the
    // coordinator's backends as it was SIGKILLed mid-call; a PANIC restarts the server. The
    // same PANIC follows an error message that cannot be converted to the client's encoding,
    // which would come back on every attempt: a RetryPolicy's deadline still ends the call.
    "ERRORDATA_STACK_SIZE exceeded",
    // FerretDB's pool on a connection the coordinator's death closed: "failed to deallocate
    // cached statement(s): read tcp ...: use of closed network connection" (tests/engine_faults.rs,
    // 1,000 `apply` across a coordinator kill); Go's other words for a connection gone under a
    // read or write.
    "use of closed network connection",
    // Citus' two-phase commit when a worker dies between PREPARE and COMMIT PREPARED ("could
    // not commit transaction for shard 102044 on at least one active node"; tests/
    // engine_faults.rs, events across a worker kill): the prepared transaction commits when
    // Citus recovers it, so the write's outcome is unknown, not refused.
    "could not commit transaction",
    // A backend of Citus' coordinator SIGKILLed between its local commit and the end of the
    // commit (its postmaster gone, "postmaster was shut down" while in COMMIT state) PANICs
    // with "cannot abort transaction N, it was already committed" (xact.c), and the client
    // gets that line: the transaction committed, and the prepared transactions on the workers
    // commit when Citus recovers them (tests/engine_faults.rs, events across a coordinator
    // kill, 1 run in 6). Applied, then; the next read, by the write's token, says so.
    "it was already committed",
    "connection reset by peer",
    "broken pipe",
];

/// `XX000` internal_error: how DocumentDB passes a per-document failure of its storage through
/// (code 2600); like FerretDB's code 1, its message tells a failure from a refusal.
const PG_INTERNAL_ERROR: i32 = sqlstate(b"XX000");

/// Whether `message`, answered with code 1 or `XX000`, says the storage failed under the
/// command rather than refused it (see [`ENGINE_FAILURES`]).
pub(crate) fn storage_failed(code: i32, message: &str) -> bool {
    (code == INTERNAL_ERROR || code == PG_INTERNAL_ERROR)
        && ENGINE_FAILURES.iter().any(|m| message.contains(m))
}

/// Whether the engine answered that its storage failed under the command (see
/// [`ENGINE_FAILURES`]): transient, and a write's outcome unknown — it may have committed.
fn engine_failed(e: &mongodb::error::Error) -> bool {
    server_code(e).is_some_and(|code| storage_failed(code, &e.to_string()))
}

/// CursorNotFound: the engine dropped a cursor (restarted, timed it out). The read is done
/// again: from its start for a guard read, from the last `_id` handed out for a scan.
pub(crate) const CURSOR_NOT_FOUND: i32 = 43;

/// A duplicate key, in a write error or as a command's refusal.
pub(crate) const DUPLICATE_KEY_CODE: i32 = 11000;

/// FerretDB's code for what its storage reports: a failure of the storage, or a refusal of
/// the data (an index over duplicates); the message tells them apart.
pub(crate) const INTERNAL_ERROR: i32 = 1;

/// Whether a unique index was refused because stored documents already share a value:
/// MongoDB answers 11000; FerretDB answers [`INTERNAL_ERROR`] with its storage's words,
/// "could not create exclusion constraint" (2.x, DocumentDB) or "UNIQUE constraint failed"
/// (1.x, SQLite).
pub(crate) fn index_over_duplicates(e: &mongodb::error::Error) -> bool {
    const DUPLICATES: [&str; 2] = [
        "could not create exclusion constraint",
        "UNIQUE constraint failed",
    ];
    match server_code(e) {
        Some(DUPLICATE_KEY_CODE) => true,
        Some(INTERNAL_ERROR) => {
            let message = e.to_string();
            DUPLICATES.iter().any(|d| message.contains(d))
        }
        _ => false,
    }
}

/// Whether a write command that failed with `e` may or may not have been applied: the codes
/// of [`UNKNOWN_OUTCOME_CODES`], an engine whose storage failed under it, and an overload
/// error that does not say the command was not run ([`throttle`] takes those).
pub(crate) fn outcome_unknown(e: &mongodb::error::Error) -> bool {
    server_code(e).is_some_and(|c| UNKNOWN_OUTCOME_CODES.contains(&c))
        || engine_failed(e)
        || e.contains_label(OVERLOADED)
}

/// The wait named in a throttling message: `RetryAfterMs=N` (Cosmos DB).
pub(crate) fn retry_after_in(message: &str) -> Option<std::time::Duration> {
    let (_, rest) = message.split_once("RetryAfterMs=")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok().map(std::time::Duration::from_millis)
}

/// The server error code carried by a driver error, if any.
pub(crate) fn server_code(e: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .and_then(|w| w.first().map(|w| w.code))
            .or_else(|| m.write_concern_error.as_ref().map(|w| w.code)),
        _ => None,
    }
}

/// Sorts a driver error into [`Error::Transient`] or [`Error::Database`], or
/// [`Error::ShardKeyMissing`] for a write refused for lack of the shard key.
pub fn classify(e: mongodb::error::Error) -> Error {
    use mongodb::error::ErrorKind;
    if let ErrorKind::Command(c) = e.kind.as_ref() {
        if shard_key_missing(c.code, &c.message) {
            return Error::ShardKeyMissing {
                code: c.code,
                message: c.message.clone(),
            };
        }
    }
    let transient = match e.kind.as_ref() {
        ErrorKind::Io(_)
        | ErrorKind::ConnectionPoolCleared { .. }
        | ErrorKind::ServerSelection { .. } => true,
        _ => {
            e.contains_label("RetryableWriteError")
                || e.contains_label(TRANSACTION_ABORTED)
                || e.contains_label(OVERLOADED)
                || e.contains_label(NOT_RUN[0])
                || server_code(&e).is_some_and(transient_code)
                || server_code(&e).is_some_and(|c| refused_as_busy(c, &e.to_string()))
                || engine_failed(&e)
        }
    };
    if transient {
        Error::Transient(e)
    } else {
        Error::Database(e)
    }
}

impl From<mongodb::error::Error> for Error {
    fn from(e: mongodb::error::Error) -> Self {
        classify(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::error::ErrorKind;

    #[test]
    fn network_failures_are_transient() {
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e: mongodb::error::Error = ErrorKind::from(std::io::Error::from(kind)).into();
            let classified = classify(e);
            assert!(classified.is_transient(), "{kind:?} -> {classified:?}");
        }
    }

    #[test]
    fn other_driver_errors_are_permanent() {
        let e: mongodb::error::Error = ErrorKind::from(std::io::Error::other("x")).into();
        assert!(
            classify(e).is_transient(),
            "any I/O error is a network error"
        );
        let e = mongodb::error::Error::custom("not a network problem");
        assert!(!classify(e).is_transient());
    }

    fn command_error(code: i32, message: &str) -> mongodb::error::Error {
        let reply = bson::doc! { "ok": 0, "code": code, "codeName": "X", "errmsg": message };
        let failure: mongodb::error::CommandError = bson::from_document(reply).unwrap();
        ErrorKind::Command(failure).into()
    }

    /// Azure Cosmos DB for MongoDB (RU): 16500 when request units run out, with the wait in the
    /// message; 50 when its server-side retries of a throttled request run out (Microsoft
    /// Learn, "Troubleshoot common errors in Azure Cosmos DB for MongoDB" and "Prevent
    /// rate-limiting errors"). Both are transient; the wait is read.
    #[test]
    fn cosmos_throttling_and_unknown_outcomes_are_transient() {
        let msg = "Error=16500, RetryAfterMs=42, Details='Response status code does not indicate \
                   success: TooManyRequests (429); Substatus: 3200'";
        let throttled = classify(command_error(16500, msg));
        assert!(throttled.is_transient(), "{throttled:?}");
        assert_eq!(
            throttled.retry_after(),
            Some(std::time::Duration::from_millis(42))
        );
        let timed_out = classify(command_error(
            50,
            "Request timed out. Retries due to rate limiting: True.",
        ));
        assert!(timed_out.is_transient());
        assert_eq!(timed_out.retry_after(), None);
        assert!(THROTTLE_CODES.contains(&16500) && UNKNOWN_OUTCOME_CODES.contains(&50));
        assert_eq!(
            retry_after_in("RetryAfterMs=7"),
            Some(std::time::Duration::from_millis(7))
        );
        assert_eq!(retry_after_in("RetryAfterMs=x"), None);
        // A bad value is not transient.
        assert!(!classify(command_error(2, "BadValue")).is_transient());
    }

    /// An engine restarting, stepping down or shutting down under a command (the retryable
    /// writes specification's codes): transient, and a write cut short so is sent again only
    /// after the next attempt's read has decided it.
    #[test]
    fn failover_and_shutdown_codes_are_transient() {
        for (code, name) in [
            (10107, "NotWritablePrimary"),
            (13435, "NotPrimaryNoSecondaryOk"),
            (11602, "InterruptedDueToReplStateChange"),
            (189, "PrimarySteppedDown"),
            (91, "ShutdownInProgress"),
            (11600, "InterruptedAtShutdown"),
            (CURSOR_NOT_FOUND, "CursorNotFound"),
        ] {
            assert!(classify(command_error(code, name)).is_transient(), "{name}");
        }
    }

    /// Amazon DocumentDB 8.0 (developer guide, "Error codes"): 112 "Write Conflict" and 148
    /// "Insufficient resources to run query" (busy, nothing applied), 147 "not master"
    /// (failover), 11601 "The operation was interrupted" (outcome unknown) are transient.
    #[test]
    fn documentdb_busy_failover_and_interrupted_are_transient() {
        for code in [112, 148, 147, 11601] {
            assert!(classify(command_error(code, "x")).is_transient(), "{code}");
        }
        assert!(THROTTLE_CODES.contains(&112) && THROTTLE_CODES.contains(&148));
        assert!(UNKNOWN_OUTCOME_CODES.contains(&11601));
        // FerretDB 2 / DocumentDB pass PostgreSQL's rollbacks through as SQLSTATE codes.
        assert_eq!(
            (PG_DEADLOCK_DETECTED, PG_SERIALIZATION_FAILURE),
            (16908292, 16777220)
        );
        assert!(THROTTLE_CODES.contains(&16908292) && THROTTLE_CODES.contains(&16777220));
        assert!(classify(command_error(16908292, "deadlock detected")).is_transient());
        // FerretDB passes its storage's failures through as code 1: transient, a write's
        // outcome unknown; the same code for an index over duplicates stays permanent.
        for m in [
            "terminating connection due to unexpected postmaster exit",
            "unexpected EOF",
            "FATAL: the database system is not yet accepting connections (SQLSTATE 57P03)",
            "the database system is starting up",
            "the database system is shutting down",
            "the database system is in recovery mode",
            "[pool.go:86 documentdb.(*Pool).Acquire] failed to connect to `user=postgres \
             database=postgres`: dial tcp 127.0.0.1:51957: connect: connection refused",
        ] {
            let e = command_error(1, m);
            assert!(outcome_unknown(&e), "{m}");
            assert!(classify(command_error(1, m)).is_transient(), "{m}");
        }
        let duplicates = command_error(1, "could not create exclusion constraint \"x\"");
        assert!(!outcome_unknown(&duplicates));
        assert!(!classify(duplicates).is_transient());
        assert!(!classify(command_error(2, "unexpected EOF")).is_transient());
        // DocumentDB's 225 TransactionTooOld is a stale retry, not a transient failure.
        assert!(!classify(command_error(225, "x")).is_transient());
    }

    /// DocumentDB on Citus (../shared/engines/documentdb-cluster): a worker gone under a write
    /// is a transient failure whose outcome the next read decides; racing writers cancelled by
    /// its distributed deadlock detection are sent again; a write without the shard key is a
    /// typed error naming the remedy, not the engine's bare code.
    #[test]
    fn citus_faults_and_refusals_are_classified() {
        assert_eq!(
            (
                PG_QUERY_CANCELED,
                PG_CONNECTION_FAILURE,
                PG_INVALID_PARAMETER
            ),
            (67371461, 100663808, 50856066)
        );
        for m in [
            "connection to the remote node postgres@127.0.0.1:40111 failed with the following \
             error: Connection refused",
            "connection to the remote node postgres@127.0.0.1:41531 failed with the following \
             error: connection not open",
            "failure on connection marked as essential: 127.0.0.1:40111",
            "server closed the connection unexpectedly\n\tThis probably means the server \
             terminated abnormally",
            "ERRORDATA_STACK_SIZE exceeded",
            "failed to deallocate cached statement(s): read tcp 127.0.0.1:54522->127.0.0.1:56579: \
             use of closed network connection",
            "could not commit transaction for shard 102044 on at least one active node",
            "cannot abort transaction 780, it was already committed",
        ] {
            assert!(outcome_unknown(&command_error(1, m)), "{m}");
            assert!(classify(command_error(1, m)).is_transient(), "{m}");
        }
        assert!(THROTTLE_CODES.contains(&67371461));
        assert!(UNKNOWN_OUTCOME_CODES.contains(&100663808));
        assert_eq!(PG_SERVER_GOING_DOWN[0], 16908741);
        let gone = command_error(
            16908741,
            "terminating connection due to unexpected postmaster exit",
        );
        assert!(outcome_unknown(&gone));
        assert!(classify(gone).is_transient());
        let canceled = command_error(67371461, "canceling statement due to user request");
        assert!(classify(canceled).is_transient());
        let deadlock = command_error(
            1,
            "canceling the transaction since it was involved in a distributed deadlock",
        );
        assert!(throttle("db.c", &deadlock, false).is_some());
        assert!(classify(deadlock).is_transient());
        assert!(refused_as_busy(
            1,
            "canceling the transaction since it was involved in a distributed deadlock"
        ));
        assert!(!refused_as_busy(1, "could not create exclusion constraint"));
        for (code, m) in [
            (
                50856066,
                "An {upsert:true} update on a sharded collection must target a single shard",
            ),
            (
                50856066,
                "A {multi:false} update on a sharded collection must contain an exact match \
                 on _id or target a single shard",
            ),
            (
                61,
                "Query for sharded findAndModify must contain the shard key",
            ),
        ] {
            let e = classify(command_error(code, m));
            assert_eq!(e.kind(), "shard_key_missing", "{m}");
            assert!(!e.is_transient());
            assert!(e.to_string().contains(".sharded(true)"), "{e}");
        }
        // 22023 is DocumentDB's code for many refusals: only this one is about the shard key.
        let other = classify(command_error(50856066, "$size needs a number"));
        assert_eq!(other.kind(), "database");
    }
}
