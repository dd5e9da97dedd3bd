//! `prune`: for an ingest whose input is the whole source, delete the natural-key documents
//! whose identity the input no longer has — only after the whole input was written, never a
//! legacy document, never more than a set fraction unless forced.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

use bson::{doc, Bson, RawDocumentBuf};
use ulid::Ulid;

use super::statements::{apply, delete_one, fragment};
use super::SCAN_BATCH;
use crate::content::ContentHash;
use crate::error::Error;
use crate::names::{DELETED_FIELD, IDENTITY_FIELD};
use crate::op::answer::classify;
use crate::op::Command;
use crate::op::{Scan, StoredIdentity, Target};
use crate::outcome::{BatchError, BatchReport};

/// Default of [`Prune::max_fraction`](crate::Prune::max_fraction): a run that would delete more than a tenth of the
/// collection's natural-key documents is refused unless forced.
pub const DEFAULT_MAX_PRUNE_FRACTION: f64 = 0.1;

/// What a pruning ingest did: the writes, then the deletions.
///
/// ```
/// let r = natural_key::PruneReport::default();
/// assert_eq!(r.deleted, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct PruneReport {
    /// Natural-key documents of the collection (with `_nk_identity`) when pruning began.
    pub stored: u64,
    /// Documents deleted (in a dry run: that would be).
    pub deleted: u64,
    /// The ids deleted (in a dry run: that would go), in `_id` order as scanned.
    pub ids: Vec<String>,
    /// Nothing was deleted: the report says what would be.
    pub dry_run: bool,
}

/// What a pruning ingest reports.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SyncReport {
    /// The writes, as [`UpsertStream`](crate::UpsertStream) reports them.
    pub written: BatchReport,
    /// The deletions.
    pub pruned: PruneReport,
}

/// The pruning half of a sync from a full snapshot: once `written` (the upserts of the whole
/// input, each input identity recorded into `seen` as it was read) ends without a failure,
/// deletes the documents of `target` whose identity the input did not have.
pub(crate) async fn sync(
    target: &Target,
    written: impl Future<Output = Result<BatchReport, BatchError>>,
    seen: &Mutex<HashSet<[u8; 32]>>,
    dry_run: bool,
    max_fraction: f64,
) -> Result<SyncReport, BatchError> {
    let written = written.await?;
    let fail = |written: BatchReport, error: Error| BatchError {
        settled: written.processed() as usize + written.failures.len(),
        report: written,
        error,
    };
    if !written.failures.is_empty() {
        let error = Error::PruneSkipped {
            collection: target.namespace.clone(),
            failed: written.failures.len(),
        };
        return Err(fail(written, error));
    }
    let seen = std::mem::take(&mut *seen.lock().expect("identity set"));
    match prune(target, &seen, dry_run, max_fraction).await {
        Ok(pruned) => Ok(SyncReport { written, pruned }),
        Err(e) => Err(fail(written, e)),
    }
}

/// Deletes (or, in a dry run, lists) the natural-key documents of `target` whose identity is
/// not in `seen`, refused above `max_fraction` of them.
pub(crate) async fn prune(
    target: &Target,
    seen: &HashSet<[u8; 32]>,
    dry_run: bool,
    max_fraction: f64,
) -> Result<PruneReport, Error> {
    let mut report = PruneReport {
        dry_run,
        ..PruneReport::default()
    };
    let mut gone: Vec<(Bson, Bson)> = Vec::new();
    // A tombstone is a deletion already, kept so that a late older write stays stale: a
    // snapshot without its identity agrees with it, and deleting it would lose that.
    let live = doc! {IDENTITY_FIELD: {"$exists": true}, DELETED_FIELD: null};
    let filter: RawDocumentBuf = fragment(&live)?;
    let mut scan = Scan::open(target, filter, Some(&["_id", IDENTITY_FIELD]), SCAN_BATCH)
        .await
        .map_err(classify)?;
    loop {
        let batch = scan.next_batch(SCAN_BATCH).await.map_err(classify)?;
        if batch.is_empty() {
            break;
        }
        for raw in batch {
            let h = StoredIdentity::of_row(&raw).map_err(Error::serialize::<StoredIdentity>)?;
            let Some(identity) = h.identity else { continue };
            report.stored += 1;
            let known = identity
                .as_str()
                .and_then(|s| s.parse::<ContentHash>().ok())
                .is_some_and(|c| seen.contains(&c.0));
            if !known {
                gone.push((h.id, identity));
            }
        }
    }
    report.ids = gone
        .iter()
        .map(|(id, _)| crate::stored::id_text(id))
        .collect();
    report.deleted = gone.len() as u64;
    let fraction = report.deleted as f64 / report.stored.max(1) as f64;
    if fraction > max_fraction {
        return Err(Error::PruneRefused {
            collection: target.namespace.clone(),
            would_delete: report.deleted,
            stored: report.stored,
            max_fraction,
        });
    }
    if dry_run || gone.is_empty() {
        return Ok(report);
    }
    let statements = gone
        .iter()
        .map(|(id, identity)| {
            let q = doc! {"_id": id.clone(), IDENTITY_FIELD: identity.clone()};
            let id = id
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(Ulid::nil());
            Ok((id, delete_one(q)?))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let mut deleted = 0;
    let mut first_error = None;
    for r in apply(target, Command::Delete, statements).await? {
        match r {
            Ok(()) => deleted += 1,
            // Already gone (a concurrent delete, a rerun): what prune wanted.
            Err(Error::ConcurrentChange { .. }) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    report.deleted = deleted;
    match first_error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}
