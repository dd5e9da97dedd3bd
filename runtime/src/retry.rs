//! Manual retries for engines without retryable writes: safe here because every natural-key
//! write converges (derived ids, guarded upserts, insert-once events).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::Error;

/// How a write is retried after a transient error: bounded by attempts and an overall deadline,
/// exponential backoff with jitter. Only [`Error::is_transient`] errors are retried — never
/// [`Error::ImmutableKeyChanged`], key or serialization errors.
///
/// Two things are retried. An **attempt** — one call, or one batch of a batch call — starts
/// over after a lost reply, a network error or an attempt timeout: it reads again what is
/// stored and sends what is still missing; at most [`max_attempts`](RetryPolicy::max_attempts)
/// of them. A **command the engine refuses as busy** ([`Error::Throttled`]: a read's `find` or
/// `getMore`, a write, some statements of one) is sent again where it failed, inside the
/// attempt, after the wait the engine names; the attempts bound the throttles of one command
/// in a row, not of a call that is making progress. The [`deadline`](RetryPolicy::deadline)
/// bounds both, per call (per batch of a batch call).
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

    /// The call ends within this much time since its first attempt began (a batch call: each
    /// batch): no attempt starts after it, and one in progress is abandoned at it as
    /// [`Error::Timeout`], so a call on an engine that stopped answering ends by then.
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

    /// The backoff after the `n`th consecutive failure: the initial delay doubled `n - 1`
    /// times, at most [`max_backoff`](RetryPolicy::max_backoff), and with jitter up to as much
    /// again.
    fn backoff(&self, n: u32) -> Duration {
        let doubled = self
            .initial_backoff
            .saturating_mul(1u32 << n.saturating_sub(1).min(31));
        let d = doubled.min(self.max_backoff);
        if self.jitter {
            d + jitter(d)
        } else {
            d
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
            start: tokio::time::Instant::now(),
            attempt: 1,
            spent: false,
            limit: self.attempt_timeout,
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
    /// tokio's clock, which tests pause.
    start: tokio::time::Instant,
    attempt: u32,
    /// A throttled command used up the policy: no further attempt of the call.
    spent: bool,
    /// The last [`attempt_timeout`](Attempts::attempt_timeout) handed out.
    limit: Duration,
}

impl Attempts {
    /// One attempt, abandoned as [`Error::Timeout`] after the policy's attempt timeout.
    #[cfg(test)]
    async fn timed<T>(
        &mut self,
        attempt: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        within(self.attempt_timeout(), attempt)
            .await
            .map_err(|e| e.unwrap_or_else(|| self.timed_out()))
    }

    /// How long the attempt (or step) starting now may take: the policy's attempt timeout, or
    /// what is left of its deadline when that is less — a call on an engine that stopped
    /// answering ends at its deadline, not an attempt timeout past it.
    pub(crate) fn attempt_timeout(&mut self) -> Duration {
        let left = self.policy.deadline.saturating_sub(self.start.elapsed());
        self.limit = self.policy.attempt_timeout.min(left);
        self.limit
    }

    /// The error of an attempt abandoned after [`attempt_timeout`](Attempts::attempt_timeout).
    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            collection: self.collection.clone(),
            operation: self.operation,
            after: self.limit,
        }
    }

    /// [`failed`](Attempts::failed) for a step that failed (`Some`) or was abandoned at the
    /// attempt timeout (`None`, reported as [`Error::Timeout`]).
    pub(crate) async fn failed_or_timed_out(&mut self, err: Option<Error>) -> Result<(), Error> {
        let err = err.unwrap_or_else(|| self.timed_out());
        self.failed(err).await
    }

    /// After a failed attempt: `Ok(())` once the backoff (or the wait the engine named,
    /// [`Error::retry_after`], with jitter on top) has been slept and another attempt may
    /// start; the error itself when it is permanent, ended the transaction the call ran in, or
    /// the policy is exhausted. Each retry is logged (tracing, WARN) with the attempt and the
    /// error.
    pub(crate) async fn failed(&mut self, err: Error) -> Result<(), Error> {
        if !err.is_transient()
            || err.ends_transaction()
            || self.spent
            || self.attempt >= self.policy.max_attempts
        {
            return Err(err);
        }
        self.wait(err, self.attempt).await?;
        self.attempt += 1;
        Ok(())
    }

    /// After the engine refused one command as busy ([`Error::Throttled`]), or dropped the
    /// cursor of a read, for the `streak`th time in a row: `Ok(())` once the wait has been
    /// slept and the same command (the read) may be sent again, where it failed, inside the
    /// current attempt. The budget is the policy's
    /// attempts counted per command, not per call: a call that keeps making progress on a
    /// throttled engine is bounded by the deadline alone. The error when this command has
    /// used up the attempts or the wait would pass the deadline; the call is then spent, and
    /// [`failed`](Attempts::failed) starts no new attempt.
    pub(crate) async fn resend(&mut self, err: Error, streak: u32) -> Result<(), Error> {
        if streak >= self.policy.max_attempts {
            self.spent = true;
            return Err(err);
        }
        let waited = self.wait(err, streak).await;
        self.spent = waited.is_err();
        waited
    }

    /// Sleeps what the `n`th consecutive failure `err` asks for, unless that would pass the
    /// deadline (then `err`).
    async fn wait(&mut self, err: Error, n: u32) -> Result<(), Error> {
        let p = &self.policy;
        // An engine that names its wait knows its load better than our backoff: that wait,
        // with up to a quarter more (when jitter is on) so that writers throttled together do
        // not come back together.
        let delay = match err.retry_after() {
            Some(wait) if p.jitter => wait + jitter(wait / 4),
            Some(wait) => wait,
            None => p.backoff(n),
        };
        // An attempt that would have almost nothing of the deadline left would end as a
        // timeout and hide this error: none starts then.
        let window = (p.deadline / 10).min(Duration::from_secs(1));
        if self.start.elapsed() + delay + window >= p.deadline {
            return Err(err);
        }
        tracing::warn!(
            attempt = n,
            max_attempts = p.max_attempts,
            ?delay,
            error = %crate::error::ErrorChain(&err),
            "{}: transient error, retrying",
            self.operation
        );
        crate::metrics::retry(&self.collection, self.operation, &err);
        tokio::time::sleep(delay).await;
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

    /// A throttled command waits inside the attempt, counted per command: below the policy's
    /// attempts it spends none of the call's; at them, the call is spent and no new attempt
    /// starts. On tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn throttles_are_counted_per_command_not_per_call() {
        let throttled = || Error::Throttled {
            collection: "db.c".into(),
            code: 16500,
            message: "RetryAfterMs=10".into(),
        };
        let mut tries = RetryPolicy::default().max_attempts(3).begin("t", "db.c");
        for _ in 0..100 {
            // A hundred commands, each throttled twice and then answered: progress.
            tries.resend(throttled(), 1).await.unwrap();
            tries.resend(throttled(), 2).await.unwrap();
        }
        assert!(!tries.is_retry(), "no attempt was spent");
        let e = tries.resend(throttled(), 3).await.unwrap_err();
        assert_eq!(e.kind(), "throttled");
        let e = tries.failed(transient()).await.unwrap_err();
        assert_eq!(e.kind(), "contention", "the call is spent: no new attempt");
    }

    /// The deadline bounds a call whose commands keep being throttled.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_command_stops_at_the_deadline() {
        let throttled = || Error::Throttled {
            collection: "db.c".into(),
            code: 16500,
            message: "RetryAfterMs=400".into(),
        };
        let mut tries = RetryPolicy::default()
            .deadline(Duration::from_millis(1000))
            .jitter(false)
            .begin("t", "db.c");
        tries.resend(throttled(), 1).await.unwrap();
        tries.resend(throttled(), 1).await.unwrap();
        assert!(
            tries.resend(throttled(), 1).await.is_err(),
            "1,200 ms > 1 s"
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

    /// An engine that never answers: the call ends at its deadline, not an attempt timeout
    /// past it. On tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn a_silent_engine_ends_the_call_at_its_deadline() {
        let p = RetryPolicy::default()
            .deadline(Duration::from_secs(5))
            .attempt_timeout(Duration::from_secs(300));
        let start = tokio::time::Instant::now();
        let r: Result<(), _> = p.run("t", std::future::pending).await;
        let took = start.elapsed();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(took <= Duration::from_secs(5), "{took:?}");
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
