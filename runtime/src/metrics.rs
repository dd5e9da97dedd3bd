//! The names of the counters natural-key records through the [`metrics`](https://docs.rs/metrics)
//! facade when the `metrics` feature is on, so the recorder a service already installs (a
//! Prometheus exporter, say) sees its writes. Labels and what each counts: the crate
//! documentation's "Metrics" section. Without the feature nothing is recorded.
//!
//! ```
//! use natural_key::metrics::{ERRORS_TOTAL, OUTCOMES_TOTAL, RETRIES_TOTAL};
//! // The `kind` label of errors and retries is `Error::kind`.
//! let e: natural_key::Error = natural_key::KeyError::Missing { field: "id" }.into();
//! assert_eq!((ERRORS_TOTAL, e.kind()), ("natural_key_errors_total", "key"));
//! assert_eq!(OUTCOMES_TOTAL, "natural_key_outcomes_total");
//! assert_eq!(RETRIES_TOTAL, "natural_key_retries_total");
//! ```

// Every counter is emitted from this module; without the feature its functions are empty and
// the crate does not depend on `metrics`.

use crate::error::Error;

/// Documents written or left alone, by `collection`, `operation` (`upsert`, `insert`) and
/// `outcome` (`inserted`, `updated`, `unchanged`, `already_applied`).
pub const OUTCOMES_TOTAL: &str = "natural_key_outcomes_total";
/// Attempts the retry policy started after a transient error, by `collection`, `operation`
/// and `kind` (the error that caused the retry).
pub const RETRIES_TOTAL: &str = "natural_key_retries_total";
/// Errors returned to the caller, by `collection`, `operation` and `kind` ([`Error::kind`]):
/// a single write's error, each failed document of a batch, the error that stopped a batch.
pub const ERRORS_TOTAL: &str = "natural_key_errors_total";

/// The `operation` label: a call and its batch form count as one kind of write, because their
/// outcomes mean the same.
#[cfg(feature = "metrics")]
fn operation_label(operation: &'static str) -> &'static str {
    match operation {
        "upsert" | "upsert_many" => "upsert",
        "insert" | "insert_many" => "insert",
        other => other,
    }
}

#[cfg(feature = "metrics")]
fn add(name: &'static str, labels: [(&'static str, String); 3], n: u64) {
    metrics::counter!(name, &labels).increment(n);
}

/// `n` documents of one outcome (`inserted`, `updated`, `unchanged`, `already_applied`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn outcomes(collection: &str, operation: &'static str, outcome: &'static str, n: u64) {
    // A batch without this outcome registers no series for it.
    #[cfg(feature = "metrics")]
    if n > 0 {
        add(
            OUTCOMES_TOTAL,
            [
                ("collection", collection.to_string()),
                ("operation", operation_label(operation).to_string()),
                ("outcome", outcome.to_string()),
            ],
            n,
        );
    }
}

/// One error returned to the caller, for one document or for a whole call.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn error(collection: &str, operation: &'static str, error: &Error) {
    #[cfg(feature = "metrics")]
    add(
        ERRORS_TOTAL,
        [
            ("collection", collection.to_string()),
            ("operation", operation_label(operation).to_string()),
            ("kind", error.kind().to_string()),
        ],
        1,
    );
}

/// One more attempt, after `cause`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn retry(collection: &str, operation: &'static str, cause: &Error) {
    #[cfg(feature = "metrics")]
    add(
        RETRIES_TOTAL,
        [
            ("collection", collection.to_string()),
            ("operation", operation_label(operation).to_string()),
            ("kind", cause.kind().to_string()),
        ],
        1,
    );
}

/// One batch's outcomes, recorded once per outcome when the batch completes.
#[derive(Default)]
pub(crate) struct Tally {
    #[cfg(feature = "metrics")]
    counts: Vec<(&'static str, u64)>,
}

impl Tally {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn add(&mut self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        match self.counts.iter_mut().find(|(o, _)| *o == outcome) {
            Some((_, n)) => *n += 1,
            None => self.counts.push((outcome, 1)),
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn record(self, collection: &str, operation: &'static str) {
        #[cfg(feature = "metrics")]
        for (outcome, n) in self.counts {
            outcomes(collection, operation, outcome, n);
        }
    }
}
