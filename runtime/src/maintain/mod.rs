//! The life of a collection after its first write: audit what is stored ([`findings`]), adopt
//! what other code wrote ([`adoption`]), rekey a corrected timestamp key ([`rekeying`]), prune
//! what the source dropped ([`pruning`]), prune tombstones by age ([`tombstones`]). Their builders are `action/`'s.
//!
//! All of them stream (one batch of documents in memory at a time, plus one small entry per
//! identity) and are crash-safe by the order of their writes: a document is written under its
//! new id — its old ids recorded in `_nk_legacy_ids` — before the old one is deleted, so a
//! run killed anywhere leaves two copies that the next run merges, never none.
//!
//! Each step is a [`scan`] (what is stored, against what it derives) and its writes
//! ([`statements`], through the write engine's send loop).

pub(crate) mod adoption;
pub(crate) mod findings;
pub(crate) mod pruning;
pub(crate) mod rekeying;
pub(crate) mod scan;
pub(crate) mod statements;
pub(crate) mod tombstones;

/// Documents per round trip of a scan: the "O(1) round trips per 10,000 documents".
pub(crate) const SCAN_BATCH: usize = 10_000;

/// How many ids a report keeps per finding.
pub const DEFAULT_SAMPLE: usize = 10;
