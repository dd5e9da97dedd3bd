//! Manual retries for engines without retryable writes: safe here because every natural-key
//! write converges (derived ids, guarded upserts, insert-once events).

use std::future::Future;
use std::time::{Duration, Instant};

use backon::BackoffBuilder;

use crate::error::Error;

/// How a write is retried after a transient error: bounded by attempts and an overall deadline,
/// exponential backoff with jitter. Only [`Error::is_transient`] errors are retried — never
/// [`Error::ImmutableKeyChanged`], key or serialization errors.
///
/// ```
/// use std::time::Duration;
/// use natural_key_runtime::RetryPolicy;
/// let p = RetryPolicy::default()
///     .max_attempts(5)
///     .deadline(Duration::from_secs(10));
/// assert_eq!(p.attempts(), 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    deadline: Duration,
    attempt_timeout: Duration,
    jitter: bool,
}

/// Default [`RetryPolicy::attempt_timeout`]: generous for a default batch (10,000 documents,
/// up to 32 MiB) on a slow engine, short enough that a stalled connection surfaces.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for RetryPolicy {
    /// 10 attempts within 60 s, backoff 25 ms doubling to at most 2 s, with jitter. With 20% of
    /// write replies lost, ten failures in a row have a probability of about 1e-7 per call.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(2),
            deadline: Duration::from_secs(60),
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// Total attempts including the first (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Delay before the first retry; doubles after each failure.
    pub fn initial_backoff(mut self, delay: Duration) -> Self {
        self.initial_backoff = delay;
        self
    }

    /// Upper bound of one delay.
    pub fn max_backoff(mut self, delay: Duration) -> Self {
        self.max_backoff = delay;
        self
    }

    /// No new attempt starts after this much time since the first one began.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long one attempt may take before it is abandoned as [`Error::Timeout`] (transient,
    /// so a further attempt follows if the policy allows one). Applies to
    /// [`RetryPolicy::none`] too: no call waits forever on an engine that stopped answering.
    /// Default [`DEFAULT_ATTEMPT_TIMEOUT`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = natural_key_runtime::RetryPolicy::none().attempt_timeout(Duration::from_secs(5));
    /// assert_eq!(p.attempt_timeout_duration(), Duration::from_secs(5));
    /// ```
    pub fn attempt_timeout(mut self, limit: Duration) -> Self {
        self.attempt_timeout = limit;
        self
    }

    /// The configured attempt timeout.
    pub fn attempt_timeout_duration(&self) -> Duration {
        self.attempt_timeout
    }

    /// Random jitter on each delay (default on), so writers that failed together do not retry
    /// in lockstep.
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// The configured number of attempts.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    fn delays(&self) -> impl Iterator<Item = Duration> + Send + Sync {
        let b = backon::ExponentialBuilder::new()
            .with_min_delay(self.initial_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(2.0)
            .without_max_times();
        if self.jitter {
            b.with_jitter().build()
        } else {
            b.build()
        }
    }

    /// Starts counting attempts of one call. The caller loops:
    /// `match timeout(tries.attempt_timeout(), op(&mut tries)).await { .. Err(e) => tries.failed(e).await? }` — a
    /// loop rather than a closure, so each attempt may borrow the caller's session mutably.
    pub(crate) fn begin(&self, operation: &'static str, collection: &str) -> Attempts {
        Attempts {
            policy: *self,
            operation,
            collection: collection.to_string(),
            start: Instant::now(),
            delays: Box::new(self.delays()),
            attempt: 1,
        }
    }

    /// Runs `op` until it succeeds, fails permanently, or the policy is exhausted; the last
    /// error is returned.
    #[cfg(test)]
    pub(crate) async fn run<T, F, Fut>(&self, what: &'static str, mut op: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut tries = self.begin(what, "test");
        loop {
            match tries.timed(op()).await {
                Ok(v) => return Ok(v),
                Err(e) => tries.failed(e).await?,
            }
        }
    }
}

/// A random duration in `[0, up_to]` (at least a millisecond's range): std's per-process
/// random hash keys, over the clock, are random enough to spread writers apart.
fn jitter(up_to: Duration) -> Duration {
    use std::hash::BuildHasher;
    let range = up_to.max(Duration::from_millis(1)).as_nanos() as u64;
    let r = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    Duration::from_nanos(r % (range + 1))
}

/// One step of an attempt (a command, and the throttle waits inside it), abandoned after
/// `limit`, the policy's attempt timeout: `Err(None)`, for the caller to turn into
/// [`Error::Timeout`] ([`Attempts::failed_or_timed_out`]) once the step, which may borrow the
/// attempts itself, is done.
pub(crate) async fn within<T>(
    limit: Duration,
    step: impl Future<Output = Result<T, Error>>,
) -> Result<T, Option<Error>> {
    match tokio::time::timeout(limit, step).await {
        Ok(result) => result.map_err(Some),
        Err(_) => Err(None),
    }
}

/// The attempts of one call under a [`RetryPolicy`].
pub(crate) struct Attempts {
    policy: RetryPolicy,
    operation: &'static str,
    collection: String,
    start: Instant,
    delays: Box<dyn Iterator<Item = Duration> + Send + Sync>,
    attempt: u32,
}

impl Attempts {
    /// One attempt, abandoned as [`Error::Timeout`] after the policy's attempt timeout.
    #[cfg(test)]
    async fn timed<T>(&self, attempt: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        within(self.policy.attempt_timeout, attempt)
            .await
            .map_err(|e| e.unwrap_or_else(|| self.timed_out()))
    }

    /// How long one attempt may take.
    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.policy.attempt_timeout
    }

    /// The error of an attempt abandoned after [`attempt_timeout`](Attempts::attempt_timeout).
    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            collection: self.collection.clone(),
            operation: self.operation,
            after: self.policy.attempt_timeout,
        }
    }

    /// [`failed`](Attempts::failed) for a step that failed (`Some`) or was abandoned at the
    /// attempt timeout (`None`, reported as [`Error::Timeout`]).
    pub(crate) async fn failed_or_timed_out(&mut self, err: Option<Error>) -> Result<(), Error> {
        let err = err.unwrap_or_else(|| self.timed_out());
        self.failed(err).await
    }

    /// After a failed attempt — or a throttled command inside one — `Ok(())` once the backoff
    /// (or the wait the engine named, [`Error::retry_after`], with jitter on top) has been
    /// slept and another attempt may start; the error itself when it is permanent or the
    /// policy is exhausted. Each retry is
    /// logged (tracing, WARN) with the attempt and the error.
    pub(crate) async fn failed(&mut self, err: Error) -> Result<(), Error> {
        let p = &self.policy;
        if !err.is_transient() || self.attempt >= p.max_attempts {
            return Err(err);
        }
        let backoff = self.delays.next().unwrap_or(p.max_backoff);
        // An engine that names its wait knows its load better than our backoff: that wait,
        // with up to a quarter more (when jitter is on) so that writers throttled together do
        // not come back together.
        let delay = match err.retry_after() {
            Some(wait) if p.jitter => wait + jitter(wait / 4),
            Some(wait) => wait,
            None => backoff,
        };
        if self.start.elapsed() + delay >= p.deadline {
            return Err(err);
        }
        tracing::warn!(
            attempt = self.attempt,
            max_attempts = p.max_attempts,
            ?delay,
            error = %crate::error::Chain(&err),
            "{}: transient error, retrying",
            self.operation
        );
        crate::metrics::retry(&self.collection, self.operation, &err);
        tokio::time::sleep(delay).await;
        self.attempt += 1;
        Ok(())
    }

    /// `true` from the second attempt on.
    pub(crate) fn is_retry(&self) -> bool {
        self.attempt > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyError;
    use std::cell::Cell;

    fn transient() -> Error {
        Error::Contention {
            collection: "db.c".into(),
            id: ulid::Ulid::nil(),
            attempts: 1,
        }
    }

    /// The engine's wait, not the policy's backoff: at least `RetryAfterMs`, at most a quarter
    /// more. On tokio's paused clock, so the bounds are exact, not timed on the machine.
    #[tokio::test(start_paused = true)]
    async fn a_named_wait_is_waited_with_jitter_on_top() {
        let throttled = || Error::Throttled {
            collection: "db.c".into(),
            code: 16500,
            message: "RetryAfterMs=400".into(),
        };
        for jitter in [true, false] {
            let policy = RetryPolicy::default().jitter(jitter);
            let mut tries = policy.begin("t", "db.c");
            let start = tokio::time::Instant::now();
            tries.failed(throttled()).await.unwrap();
            let waited = start.elapsed();
            assert!(waited >= Duration::from_millis(400), "{waited:?}");
            assert!(
                waited <= Duration::from_millis(if jitter { 500 } else { 400 }),
                "{waited:?}"
            );
        }
        let mut tries = RetryPolicy::none().begin("t", "db.c");
        assert!(
            tries.failed(throttled()).await.is_err(),
            "no policy: no wait, the error"
        );
    }

    #[tokio::test]
    async fn retries_transient_errors_until_success() {
        let calls = Cell::new(0);
        let p = RetryPolicy::default().initial_backoff(Duration::from_millis(1));
        let r = p
            .run("t", || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move {
                    if n < 4 {
                        Err(transient())
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(r.unwrap(), 4);
    }

    #[tokio::test]
    async fn stops_at_max_attempts() {
        let calls = Cell::new(0);
        let p = RetryPolicy::default()
            .max_attempts(3)
            .initial_backoff(Duration::from_millis(1));
        let r: Result<(), _> = p
            .run("t", || {
                calls.set(calls.get() + 1);
                async { Err(transient()) }
            })
            .await;
        assert!(r.unwrap_err().is_transient());
        assert_eq!(calls.get(), 3);
    }

    #[tokio::test]
    async fn never_retries_permanent_errors() {
        let calls = Cell::new(0);
        let r: Result<(), _> = RetryPolicy::default()
            .run("t", || {
                calls.set(calls.get() + 1);
                async { Err(KeyError::Missing { field: "k" }.into()) }
            })
            .await;
        assert!(matches!(r, Err(Error::Key(_))));
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test]
    async fn respects_the_deadline() {
        let calls = Cell::new(0);
        let p = RetryPolicy::default()
            .max_attempts(1000)
            .initial_backoff(Duration::from_millis(20))
            .jitter(false)
            .deadline(Duration::from_millis(100));
        let start = Instant::now();
        let r: Result<(), _> = p
            .run("t", || {
                calls.set(calls.get() + 1);
                async { Err(transient()) }
            })
            .await;
        assert!(r.is_err());
        assert!(start.elapsed() < Duration::from_millis(100));
        // 20 + 40 = 60 ms of sleep fits, the next 80 ms would not: three attempts.
        assert_eq!(calls.get(), 3);
    }

    #[tokio::test]
    async fn an_attempt_that_never_finishes_times_out_and_is_retried() {
        let calls = Cell::new(0);
        let p = RetryPolicy::default()
            .max_attempts(2)
            .initial_backoff(Duration::from_millis(1))
            .attempt_timeout(Duration::from_millis(20));
        let r: Result<(), _> = p
            .run("t", || {
                calls.set(calls.get() + 1);
                std::future::pending()
            })
            .await;
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(r.unwrap_err().is_transient());
        assert_eq!(calls.get(), 2);
    }
}
