//! `audit`: one scan of a collection, every document classified against the id its own fields
//! derive, duplicates counted per identity.

use std::fmt;

use bson::Bson;
use serde::de::DeserializeOwned;

use super::scan::{inspect_with, Derive, Groups, Seen, State, Typed};
use super::SCAN_BATCH;
use crate::collection::Collection;
use crate::error::Error;
use crate::op::answer::classify;
use crate::op::{Scan, Target};
use crate::traits::NaturalKey;

/// How many documents showed one finding, and a few of their `_id`s.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Finding {
    /// Documents (or, for duplicates, identities) with this finding.
    pub count: u64,
    /// Up to the report's sample size of their `_id`s, as stored (for duplicates, the document
    /// that showed each duplicated identity, in identity order).
    pub sample: Vec<Bson>,
}

impl Finding {
    fn note(&mut self, id: &Bson, sample: usize) {
        self.count += 1;
        if self.sample.len() < sample {
            self.sample.push(id.clone());
        }
    }
}

/// What [`Collection::audit`] (or [`KeySpec::audit`](crate::spec::KeySpec::audit)) found. `Display`
/// is a table.
///
/// ```
/// let report = natural_key::AuditReport::default();
/// assert!(report.is_clean());
/// assert!(report.hash_checked);
/// assert!(report.to_string().contains("clean"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AuditReport {
    /// Documents read.
    pub scanned: u64,
    /// Documents at their derived id, with identity and hash: nothing to do.
    pub clean: u64,
    /// Documents that do not deserialize into the type (or whose keys give no id).
    pub unreadable: Finding,
    /// Why the first unreadable document could not be read.
    pub first_unreadable: Option<String>,
    /// Documents without `_nk_identity`: written by other code (random ids, ObjectIds), or
    /// released by a move that did not finish.
    pub legacy: Finding,
    /// Documents with `_nk_identity` whose `_id` (or identity) is not what their fields
    /// derive: a key field, usually the timestamp, edited by other code.
    pub id_drift: Finding,
    /// Documents clean but for `_nk_hash` (absent, or edited outside the library): harmless;
    /// the next upsert rewrites it. Always empty when [`hash_checked`](Self::hash_checked) is
    /// false.
    pub hash_drift: Finding,
    /// Whether `_nk_hash` was compared with the content hash. Only a Rust type knows what its
    /// hash covers: an audit by a [`KeySpec`](crate::spec::KeySpec) cannot check it, counts documents
    /// at their derived id with their identity as `clean` whatever their hash, and leaves
    /// `hash_drift` empty (not checked, rather than none found).
    pub hash_checked: bool,
    /// Identities held by two or more documents with identical content (counted once per
    /// identity): the seed's failure, a lost acknowledgement retried under a fresh id.
    pub duplicates_identical: Finding,
    /// Identities held by two or more documents whose content differs: adopt leaves them to
    /// an `on_conflict` policy.
    pub duplicates_differing: Finding,
    /// Documents beyond the first of each duplicated identity.
    pub surplus_documents: u64,
    /// Tombstones: what versioned deletes left of deleted documents (not counted in
    /// `scanned`'s other findings; pruned by age with `prune_tombstones`).
    pub tombstones: Finding,
    /// Documents of a versioned type (or spec) whose `_nk_version` is not the version their
    /// fields hold: stored before the version was declared (the next write records it), or
    /// a version field edited by other code. Until a write records it, any version of the
    /// document is taken as newer.
    pub version_drift: Finding,
}

impl Default for AuditReport {
    /// The report of an empty collection.
    fn default() -> Self {
        AuditReport {
            scanned: 0,
            clean: 0,
            unreadable: Finding::default(),
            first_unreadable: None,
            legacy: Finding::default(),
            id_drift: Finding::default(),
            hash_drift: Finding::default(),
            hash_checked: true,
            duplicates_identical: Finding::default(),
            duplicates_differing: Finding::default(),
            surplus_documents: 0,
            tombstones: Finding::default(),
            version_drift: Finding::default(),
        }
    }
}

impl AuditReport {
    /// Nothing for [`Collection::adopt`] to do: no legacy document, no drifted id, no
    /// duplicate (hash drift is harmless and unreadable documents are not adopt's to fix).
    pub fn is_clean(&self) -> bool {
        self.legacy.count == 0
            && self.id_drift.count == 0
            && self.duplicates_identical.count == 0
            && self.duplicates_differing.count == 0
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: [(&str, u64, &[Bson]); 10] = [
            ("scanned", self.scanned, &[]),
            ("clean", self.clean, &[]),
            ("unreadable", self.unreadable.count, &self.unreadable.sample),
            ("legacy", self.legacy.count, &self.legacy.sample),
            ("id drift", self.id_drift.count, &self.id_drift.sample),
            ("hash drift", self.hash_drift.count, &self.hash_drift.sample),
            (
                "duplicates, identical",
                self.duplicates_identical.count,
                &self.duplicates_identical.sample,
            ),
            (
                "duplicates, differing",
                self.duplicates_differing.count,
                &self.duplicates_differing.sample,
            ),
            (
                "version drift",
                self.version_drift.count,
                &self.version_drift.sample,
            ),
            ("tombstones", self.tombstones.count, &self.tombstones.sample),
        ];
        writeln!(f, "{:<22} {:>10}  sample", "finding", "count")?;
        for (name, count, sample) in rows {
            if name == "hash drift" && !self.hash_checked {
                writeln!(
                    f,
                    "{name:<22} {:>10}  not checked (needs the Rust type; clean counts any hash)",
                    "n/a"
                )?;
                continue;
            }
            let ids: Vec<String> = sample.iter().map(crate::stored::id_text).collect();
            writeln!(f, "{name:<22} {count:>10}  {}", ids.join(" "))?;
        }
        write!(
            f,
            "{:<22} {:>10}",
            "surplus documents", self.surplus_documents
        )
    }
}

/// Reads the collection once, documents keyed by `key`, and reports what it holds.
pub(crate) async fn audit<K: Derive + Sync>(
    target: &Target,
    key: &K,
    sample: usize,
    progress: impl FnMut(&AuditReport) + Send,
) -> Result<AuditReport, Error> {
    let mut report = AuditReport::default();
    let groups = scan_with(target, key, sample, &mut report, progress).await?;
    finish(&groups, sample, &mut report);
    Ok(report)
}

/// One scan of a `T` collection: every document classified into `report`, every identity into
/// the groups.
pub(crate) async fn scan<T: NaturalKey + DeserializeOwned + Send + Sync>(
    coll: &Collection<T>,
    sample: usize,
    report: &mut AuditReport,
    progress: impl FnMut(&AuditReport) + Send,
) -> Result<Groups, Error> {
    scan_with(&coll.target, &Typed::<T>::new(), sample, report, progress).await
}

/// One scan, the documents read by `key`.
pub(crate) async fn scan_with<K: Derive + Sync>(
    target: &Target,
    key: &K,
    sample: usize,
    report: &mut AuditReport,
    mut progress: impl FnMut(&AuditReport) + Send,
) -> Result<Groups, Error> {
    report.hash_checked = K::CHECKS_HASH;
    let mut groups = Groups::default();
    let mut scan = Scan::open(target, bson::RawDocumentBuf::new(), None, SCAN_BATCH)
        .await
        .map_err(classify)?;
    loop {
        let batch = scan.next_batch(SCAN_BATCH).await.map_err(classify)?;
        if batch.is_empty() {
            break;
        }
        for stored in batch {
            report.scanned += 1;
            match inspect_with(key, stored) {
                Seen::Unreadable { id, message } => {
                    report.unreadable.note(&id, sample);
                    report.first_unreadable.get_or_insert(message);
                }
                Seen::Tombstone { id } => report.tombstones.note(&id, sample),
                Seen::Read(r) => {
                    if !r.version_stored {
                        report.version_drift.note(&r.id, sample);
                    }
                    match r.state {
                        State::Clean => report.clean += 1,
                        State::HashDrift => report.hash_drift.note(&r.id, sample),
                        State::Legacy => report.legacy.note(&r.id, sample),
                        State::IdDrift => report.id_drift.note(&r.id, sample),
                    }
                    groups.add(&r);
                }
            }
        }
        progress(report);
    }
    Ok(groups)
}

/// The duplicate findings, once every identity is known.
pub(crate) fn finish(groups: &Groups, sample: usize, report: &mut AuditReport) {
    // Sorted, so the sample is the same on every run.
    let mut duplicated: Vec<(&u128, &super::scan::SmallId)> = groups.duplicated.iter().collect();
    duplicated.sort_by_key(|(k, _)| **k);
    for (k, id) in duplicated {
        let Some(g) = groups.get(*k) else { continue };
        report.surplus_documents += u64::from(g.members - 1);
        let finding = if g.differs {
            &mut report.duplicates_differing
        } else {
            &mut report.duplicates_identical
        };
        finding.note(&id.to_bson(), sample);
    }
}
