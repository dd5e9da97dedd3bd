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
    jitter: bool,
}

impl Default for RetryPolicy {
    /// 10 attempts within 60 s, backoff 25 ms doubling to at most 2 s, with jitter. With 20% of
    /// write replies lost, ten failures in a row have a probability of about 1e-7 per call.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(2),
            deadline: Duration::from_secs(60),
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

    fn delays(&self) -> impl Iterator<Item = Duration> {
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

    /// Runs `op` until it succeeds, fails permanently, or the policy is exhausted; the last
    /// error is returned. Each retry is logged (tracing, WARN) with the attempt and the error.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let start = Instant::now();
        let mut delays = self.delays();
        let mut attempt = 1;
        loop {
            let err = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !err.is_transient() || attempt >= self.max_attempts {
                return Err(err);
            }
            let delay = delays.next().unwrap_or(self.max_backoff);
            if start.elapsed() + delay >= self.deadline {
                return Err(err);
            }
            tracing::warn!(attempt, max_attempts = self.max_attempts, ?delay, error = %err, "{what}: transient error, retrying");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
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
}
