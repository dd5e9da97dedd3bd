//! How the guard reads a batch's stored identities: the shape and the size, measured per
//! handle, within the [`Limits`](crate::Limits)' bounds.
//!
//! What a read costs differs from engine to engine, and no one shape suits all. MongoDB
//! answers an `$in` from its index, so larger reads only save round trips;
//! mongo-java-server's `$in` costs more per value as it grows (17 µs per value at 100 values,
//! 516 µs at 10,000: it matches every found document against the whole list); FerretDB 1.x
//! scans the collection for every read, so only one read per batch is cheap there. The handle
//! times every full-sized `$in` read and moves along a ladder of sizes, doubling or halving,
//! toward the lowest cost per identity — the quantity a batch's read time is proportional to.
//!
//! A batch's first read may instead be a *span*: one `_id` range from the least to the
//! greatest pending id. Ids lead with their domain timestamp, so a batch from one stretch of
//! time is one stretch of the `_id` order, which every engine can answer without a list to
//! match. It finds nothing stored under another `_id` (a changed timestamp): the unique
//! identity index refuses that insert, and the next round reads by identity. The handle
//! measures a span per pending identity and uses it while it costs less than the `$in` reads'
//! size in use, trying the other shape again every [`RELEARN_AFTER`] batches. While spans
//! are cheaper, the `$in` reads are measured again by one read of their size before the span
//! ([`Shape::Sampled`]), not a batch read their way: on FerretDB 2 / DocumentDB, whose `$in` on
//! the identity index costs several times a span per identity, the batches read by `$in` made a
//! 1,000,000-document re-ingest 1.65× its floor.
use std::sync::Mutex;
use std::time::Duration;

/// How many reads at one size before the neighbours' costs are forgotten and measured again:
/// what an engine charges changes as the collection grows.
const RELEARN_AFTER: u32 = 32;

/// Weight of a new measurement in a size's running cost.
const WEIGHT: f64 = 0.5;

/// Fewest pending identities a span read is tried for: below, one `$in` read is a round trip
/// either way, and a span can only return more.
pub(crate) const SPAN_MIN: usize = 256;

/// How a batch's guard read asks for its identities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `$in` reads of this many identities each.
    Identities(usize),
    /// One `_id` range over the pending ids, of at most this many documents; a reply that
    /// reaches the limit is a span crowded with other documents, and what it did not find is
    /// read by identity.
    Span { limit: usize },
    /// One `$in` read of the first pending identities, as many as the read size in use, then
    /// the span of the rest: how the `$in` reads are measured again while spans are cheaper,
    /// for the price of one read instead of a batch read their way (on FerretDB 2 /
    /// DocumentDB, whose `$in` on the identity index costs several times a span, a batch of
    /// them cost more than the batch's span itself).
    Sampled { limit: usize },
}

/// The documents a span read may return per pending identity before it is cut short: a span
/// holding more than this of other documents costs more than it saves.
const SPAN_SLACK: usize = 2;

/// Shared by the clones of one handle.
#[derive(Debug)]
pub(crate) struct ReadSizer {
    /// The sizes tried, doubling from the least to the most allowed; the last is the most.
    ladder: Vec<usize>,
    /// Whether a span read may be tried (`Limits::span_reads`).
    spans: bool,
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
    /// Running cost per pending identity, in seconds, of a batch that could have been read as
    /// a span, read as one (`.0`) and by `$in` reads (`.1`).
    whole: [Option<f64>; 2],
    /// Batches that could have been read as a span since the shape not in use was last tried.
    turns: u32,
}

impl ReadSizer {
    /// Sizes from `least` to `most` (both at least 1); starts at the ladder's middle, the
    /// geometric middle of the range, so that both directions are a few steps away.
    pub(crate) fn new(least: usize, most: usize, spans: bool) -> Self {
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
            whole: [None; 2],
            turns: 0,
        };
        ReadSizer {
            ladder,
            spans,
            state: Mutex::new(state),
        }
    }

    /// The number of identities the next `$in` read asks for.
    pub(crate) fn size(&self) -> usize {
        self.ladder[self.lock().at]
    }

    /// How to read `pending` identities. Only a batch's first read (`first`) may be a span:
    /// what a round after it reads is what the span could not show.
    pub(crate) fn shape(&self, pending: usize, first: bool) -> Shape {
        let mut s = self.lock();
        let identities = Shape::Identities(self.ladder[s.at]);
        if !self.spans || !first || pending < SPAN_MIN {
            return identities;
        }
        let limit = pending.saturating_mul(SPAN_SLACK);
        let span = Shape::Span { limit };
        let sample = Shape::Sampled { limit };
        s.turns += 1;
        let (cheaper, other) = match s.whole {
            [None, _] => return span,
            [Some(_), None] => return sample,
            [Some(by_span), Some(by_in)] if by_span < by_in => (span, sample),
            _ => (identities, span),
        };
        if s.turns >= RELEARN_AFTER {
            s.turns = 0;
            return other;
        }
        cheaper
    }

    /// Records a batch's first read of `pending` identities, in the `shape` [`shape`](Self::shape)
    /// gave, that took `took` in all: a span's includes the `$in` reads of what it did not
    /// find when it reached its limit. A sample records its `$in` read with
    /// [`record_sample`](Self::record_sample), and the span after it here, as a span.
    pub(crate) fn record_whole(&self, shape: Shape, pending: usize, took: Duration) {
        if !self.spans || pending < SPAN_MIN {
            return;
        }
        let by_in = matches!(shape, Shape::Identities(_));
        self.blend_whole(usize::from(by_in), took.as_secs_f64() / pending as f64);
    }

    /// Records a sample's `$in` read of `asked` identities that took `took`: what the batch
    /// would have cost per identity read by `$in` reads of that size.
    pub(crate) fn record_sample(&self, asked: usize, took: Duration) {
        if self.spans && asked > 0 {
            self.blend_whole(1, took.as_secs_f64() / asked as f64);
        }
    }

    fn blend_whole(&self, slot: usize, per: f64) {
        let mut s = self.lock();
        let slot = &mut s.whole[slot];
        *slot = Some(match *slot {
            Some(old) => old + WEIGHT * (per - old),
            None => per,
        });
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
        let sizer = ReadSizer::new(16, 4096, false);
        let size = settle(&sizer, 100, |n| 0.001 + 1e-6 * n as f64);
        assert_eq!(size, 4096);
    }

    #[test]
    fn an_engine_whose_in_grows_quadratically_gets_the_cheapest_middle() {
        // Per read a + b·n²: per identity a/n + b·n, lowest at n = √(a/b) = 64.
        let sizer = ReadSizer::new(16, 4096, false);
        let size = settle(&sizer, 100, |n| 2e-4 + 2e-4 / 4096.0 * (n * n) as f64);
        assert_eq!(size, 64);
    }

    #[test]
    fn the_size_moves_when_the_engine_changes() {
        let sizer = ReadSizer::new(16, 4096, false);
        settle(&sizer, 100, |n| 0.001 + 1e-6 * n as f64);
        let size = settle(&sizer, 200, |n| 2e-4 + 2e-4 / 4096.0 * (n * n) as f64);
        assert_eq!(size, 64);
    }

    #[test]
    fn equal_bounds_fix_the_size_and_a_smaller_read_is_not_measured() {
        let fixed = ReadSizer::new(500, 500, false);
        settle(&fixed, 10, |n| n as f64 * 1e-6);
        assert_eq!(fixed.size(), 500);
        let sizer = ReadSizer::new(16, 4096, false);
        let before = sizer.size();
        sizer.record(before - 1, Duration::from_secs(1));
        assert_eq!(sizer.size(), before);
        assert!(sizer.lock().cost.iter().all(Option::is_none));
    }

    #[test]
    fn a_range_of_one_or_inverted_bounds_still_reads_something() {
        assert_eq!(ReadSizer::new(0, 0, false).size(), 1);
        assert_eq!(ReadSizer::new(900, 100, false).size(), 100);
        assert_eq!(
            ReadSizer::new(usize::MAX, usize::MAX, false).size(),
            usize::MAX
        );
    }

    /// What [`choose`] saw in the second half of its batches.
    #[derive(Debug, Default)]
    struct Chosen {
        /// Batches read as a span alone.
        spans: usize,
        /// Batches read as a sample and a span.
        samples: usize,
        /// Seconds all the batches' reads took.
        cost: f64,
    }

    /// Feeds `batches` first reads of `pending` identities: a span costs `span` seconds, an
    /// `$in` read of `n` values `by_in(n)`.
    fn choose(
        sizer: &ReadSizer,
        batches: usize,
        pending: usize,
        span: f64,
        by_in: impl Fn(usize) -> f64,
    ) -> Chosen {
        let mut chosen = Chosen::default();
        let second_half = |b: usize| usize::from(b >= batches / 2);
        for b in 0..batches {
            let shape = sizer.shape(pending, true);
            let took = match shape {
                Shape::Span { limit } => {
                    assert_eq!(limit, pending * SPAN_SLACK);
                    chosen.spans += second_half(b);
                    span
                }
                Shape::Sampled { limit } => {
                    assert_eq!(limit, pending * SPAN_SLACK);
                    let size = sizer.size();
                    chosen.samples += second_half(b);
                    let sample = by_in(size);
                    sizer.record(size, Duration::from_secs_f64(sample));
                    sizer.record_sample(size, Duration::from_secs_f64(sample));
                    chosen.cost += sample;
                    let shape = Shape::Span { limit };
                    sizer.record_whole(shape, pending, Duration::from_secs_f64(span));
                    chosen.cost += span;
                    continue;
                }
                Shape::Identities(n) => {
                    let mut total = 0.0;
                    let mut rest = pending;
                    while rest > 0 {
                        let part = n.min(rest);
                        sizer.record(part, Duration::from_secs_f64(by_in(part)));
                        total += by_in(part);
                        rest -= part;
                    }
                    total
                }
            };
            chosen.cost += took;
            sizer.record_whole(shape, pending, Duration::from_secs_f64(took));
        }
        chosen
    }

    #[test]
    fn a_span_cheaper_than_the_in_reads_is_used_and_the_in_reads_measured_again() {
        // mongo-java-server-like: 10,000 pending, a quadratic `$in`, a span of one scan.
        let sizer = ReadSizer::new(16, 4096, true);
        let quadratic = |n: usize| 2e-4 + 2e-4 / 4096.0 * (n * n) as f64;
        let chosen = choose(&sizer, 200, 10_000, 0.02, quadratic);
        // One batch in RELEARN_AFTER measures the `$in` reads again, in case the engine
        // changed: with one read before its span, not a batch of them.
        assert!((90..100).contains(&chosen.spans), "{chosen:?}");
        assert_eq!(chosen.spans + chosen.samples, 100, "{chosen:?}");
    }

    #[test]
    fn measuring_the_in_reads_again_costs_one_read_not_a_batch_of_them() {
        // FerretDB 2 / DocumentDB at 1,000,000 documents: a span of 10,000 ids 0.1 s, an `$in`
        // of n identities on the identity index 2 ms + 40 µs per identity.
        let sizer = ReadSizer::new(16, 4096, true);
        let by_in = |n: usize| 0.002 + 40e-6 * n as f64;
        let chosen = choose(&sizer, 200, 10_000, 0.1, by_in);
        let spans_only = 200.0 * 0.1;
        assert!(
            chosen.cost < spans_only * 1.05,
            "{chosen:?}: {:.2} s against {spans_only:.2} s for spans alone",
            chosen.cost
        );
    }

    #[test]
    fn a_span_costlier_than_the_in_reads_is_tried_again_but_not_used() {
        // A span crowded with other documents: ten times the `$in` reads' cost.
        let sizer = ReadSizer::new(16, 4096, true);
        let per_round_trip = |n: usize| 0.001 + 1e-6 * n as f64;
        let in_cost = (10_000 / 4096 + 1) as f64 * 0.001 + 0.01;
        let chosen = choose(&sizer, 200, 10_000, in_cost * 10.0, per_round_trip);
        assert!((1..=5).contains(&chosen.spans), "{chosen:?}");
        assert_eq!(chosen.samples, 0, "{chosen:?}");
    }

    #[test]
    fn only_a_first_read_of_many_identities_may_be_a_span() {
        let sizer = ReadSizer::new(16, 4096, true);
        assert!(matches!(sizer.shape(SPAN_MIN, true), Shape::Span { .. }));
        assert!(matches!(sizer.shape(SPAN_MIN, false), Shape::Identities(_)));
        assert!(matches!(
            sizer.shape(SPAN_MIN - 1, true),
            Shape::Identities(_)
        ));
        let never = ReadSizer::new(16, 4096, false);
        assert!(matches!(never.shape(10_000, true), Shape::Identities(_)));
    }
}
