//! How many identities one guard read asks for: measured per handle, within the
//! [`Limits`](crate::Limits)' bounds.
//!
//! What a read of `n` values costs differs from engine to engine, and no one size suits all:
//! MongoDB answers an `$in` from its index, so larger reads only save round trips;
//! mongo-java-server's `$in` costs more per value as it grows (17 µs per value at 100 values,
//! 516 µs at 10,000); FerretDB 1.x scans the collection for every read, so only one read per
//! batch is cheap there. The handle times every full-sized read and moves along a ladder of
//! sizes, doubling or halving, toward the lowest cost per identity — the quantity a batch's
//! read time is proportional to.

use std::sync::Mutex;
use std::time::Duration;

/// How many reads at one size before the neighbours' costs are forgotten and measured again:
/// what an engine charges changes as the collection grows.
const RELEARN_AFTER: u32 = 32;

/// Weight of a new measurement in a size's running cost.
const WEIGHT: f64 = 0.5;

/// Shared by the clones of one handle.
#[derive(Debug)]
pub(crate) struct ReadSizer {
    /// The sizes tried, doubling from the least to the most allowed; the last is the most.
    ladder: Vec<usize>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Index into `ladder` of the size in use.
    at: usize,
    /// Running cost per identity, in seconds, of each size measured.
    cost: Vec<Option<f64>>,
    /// Reads measured since `at` last moved or relearned.
    stayed: u32,
}

impl ReadSizer {
    /// Sizes from `least` to `most` (both at least 1); starts at the ladder's middle, the
    /// geometric middle of the range, so that both directions are a few steps away.
    pub(crate) fn new(least: usize, most: usize) -> Self {
        let most = most.max(1);
        let least = least.clamp(1, most);
        let mut ladder = Vec::new();
        let mut size = least;
        while size < most {
            ladder.push(size);
            size = size.saturating_mul(2);
        }
        ladder.push(most);
        let state = State {
            at: ladder.len() / 2,
            cost: vec![None; ladder.len()],
            stayed: 0,
        };
        ReadSizer {
            ladder,
            state: Mutex::new(state),
        }
    }

    /// The number of identities the next read asks for.
    pub(crate) fn size(&self) -> usize {
        self.ladder[self.lock().at]
    }

    /// Records a read of `asked` identities that took `took`. Only a read of the size in use
    /// counts: a batch's last, smaller read would charge its round trip to fewer identities.
    pub(crate) fn record(&self, asked: usize, took: Duration) {
        let mut s = self.lock();
        let at = s.at;
        if asked != self.ladder[at] || self.ladder.len() == 1 {
            return;
        }
        let per = took.as_secs_f64() / asked as f64;
        let here = match s.cost[at] {
            Some(old) => old + WEIGHT * (per - old),
            None => per,
        };
        s.cost[at] = Some(here);
        s.stayed += 1;
        let below = at.checked_sub(1).map(|i| (i, s.cost[i]));
        let above = (at + 1 < self.ladder.len()).then(|| (at + 1, s.cost[at + 1]));
        // Back down a step known to be cheaper; else up while up is unknown or cheaper; else
        // look below once. Stay where both neighbours are known to cost more.
        let next = match (below, above) {
            (Some((i, Some(c))), _) if c < here => Some(i),
            (_, Some((i, None))) => Some(i),
            (_, Some((i, Some(c)))) if c < here => Some(i),
            (Some((i, None)), _) => Some(i),
            _ => None,
        };
        match next {
            Some(i) => {
                s.at = i;
                s.stayed = 0;
            }
            None if s.stayed >= RELEARN_AFTER => {
                for (i, c) in s.cost.iter_mut().enumerate() {
                    if i != at {
                        *c = None;
                    }
                }
                s.stayed = 0;
            }
            None => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves numbers, never a broken invariant.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds the sizer an engine whose read of `n` values costs `cost(n)` seconds for `reads`
    /// reads; returns the size of most of the second half's reads (it leaves the best size
    /// for one read in [`RELEARN_AFTER`], to measure a neighbour again).
    fn settle(sizer: &ReadSizer, reads: usize, cost: impl Fn(usize) -> f64) -> usize {
        let mut counts = std::collections::BTreeMap::<usize, usize>::new();
        for r in 0..reads {
            let n = sizer.size();
            if r >= reads / 2 {
                *counts.entry(n).or_default() += 1;
            }
            sizer.record(n, Duration::from_secs_f64(cost(n)));
        }
        let (size, count) = counts.into_iter().max_by_key(|&(_, c)| c).unwrap();
        assert!(
            count * 10 >= (reads - reads / 2) * 8,
            "settled on {size} for {count} of {reads}"
        );
        size
    }

    #[test]
    fn an_engine_charging_per_round_trip_gets_the_largest_reads() {
        let sizer = ReadSizer::new(16, 4096);
        let size = settle(&sizer, 100, |n| 0.001 + 1e-6 * n as f64);
        assert_eq!(size, 4096);
    }

    #[test]
    fn an_engine_whose_in_grows_quadratically_gets_the_cheapest_middle() {
        // Per read a + b·n²: per identity a/n + b·n, lowest at n = √(a/b) = 64.
        let sizer = ReadSizer::new(16, 4096);
        let size = settle(&sizer, 100, |n| 2e-4 + 2e-4 / 4096.0 * (n * n) as f64);
        assert_eq!(size, 64);
    }

    #[test]
    fn the_size_moves_when_the_engine_changes() {
        let sizer = ReadSizer::new(16, 4096);
        settle(&sizer, 100, |n| 0.001 + 1e-6 * n as f64);
        let size = settle(&sizer, 200, |n| 2e-4 + 2e-4 / 4096.0 * (n * n) as f64);
        assert_eq!(size, 64);
    }

    #[test]
    fn equal_bounds_fix_the_size_and_a_smaller_read_is_not_measured() {
        let fixed = ReadSizer::new(500, 500);
        settle(&fixed, 10, |n| n as f64 * 1e-6);
        assert_eq!(fixed.size(), 500);
        let sizer = ReadSizer::new(16, 4096);
        let before = sizer.size();
        sizer.record(before - 1, Duration::from_secs(1));
        assert_eq!(sizer.size(), before);
        assert!(sizer.lock().cost.iter().all(Option::is_none));
    }

    #[test]
    fn a_range_of_one_or_inverted_bounds_still_reads_something() {
        assert_eq!(ReadSizer::new(0, 0).size(), 1);
        assert_eq!(ReadSizer::new(900, 100).size(), 100);
        assert_eq!(ReadSizer::new(usize::MAX, usize::MAX).size(), usize::MAX);
    }
}
