//! `prune`: for an ingest whose input is the whole source, delete the natural-key documents
//! whose identity the input no longer has — only after the whole input was written, never a
//! legacy document, never more than a set fraction unless forced.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};

use bson::{doc, Bson, RawDocumentBuf};
use futures_util::Stream;
use ulid::Ulid;

use super::apply::{apply, delete_one, fragment};
use super::SCAN_BATCH;
use crate::action::UpsertStream;
use crate::content::ContentHash;
use crate::error::Error;
use crate::op::answer::classify;
use crate::names::IDENTITY_FIELD;
use crate::op::Command;
use crate::op::{Scan, StoredIdentity};
use crate::outcome::{BatchError, BatchReport};
use crate::traits::NaturalKey;

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Default of [`Prune::max_fraction`]: a run that would delete more than a tenth of the
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

/// Builder returned by [`UpsertStream::prune`]; `.await` it.
#[must_use = "a pruning ingest does nothing until awaited"]
pub struct Prune<'a, T: Send + Sync, S> {
    upserts: UpsertStream<'a, T, S>,
    dry_run: bool,
    max_fraction: f64,
}

impl<'a, T: NaturalKey + Send + Sync, S> UpsertStream<'a, T, S> {
    /// Makes this ingest a sync from a full snapshot: once every document of the input was
    /// written without failure, the collection's natural-key documents whose identity was not
    /// in the input are deleted. Nothing is deleted when any document failed, the call fails
    /// or is dropped; documents without `_nk_identity` (legacy) are never deleted. Memory: 32
    /// bytes per input identity.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>, all: Vec<Post>) -> Result<(), Box<dyn std::error::Error>> {
    /// let plan = posts.upsert_many(&all).prune().dry_run().await?;
    /// println!("would delete {:?}", plan.pruned.ids);
    /// let done = posts.upsert_many(&all).prune().await?;
    /// println!("{} written, {} deleted", done.written.processed(), done.pruned.deleted);
    /// # Ok(()) }
    /// ```
    pub fn prune(self) -> Prune<'a, T, S> {
        Prune {
            upserts: self,
            dry_run: false,
            max_fraction: DEFAULT_MAX_PRUNE_FRACTION,
        }
    }
}

impl<T: Send + Sync, S> Prune<'_, T, S> {
    /// Writes the input as usual, then lists what would be deleted and deletes nothing.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Refuses ([`Error::PruneRefused`]) to delete more than this fraction of the stored
    /// natural-key documents (default [`DEFAULT_MAX_PRUNE_FRACTION`]).
    pub fn max_fraction(mut self, fraction: f64) -> Self {
        self.max_fraction = fraction;
        self
    }

    /// Deletes however many the input dropped.
    pub fn force(self) -> Self {
        self.max_fraction(1.0)
    }
}

/// What a pruning ingest reports.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SyncReport {
    /// The writes, as [`UpsertStream`] reports them.
    pub written: BatchReport,
    /// The deletions.
    pub pruned: PruneReport,
}

impl<'a, T, S> IntoFuture for Prune<'a, T, S>
where
    T: NaturalKey + Send + Sync,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    type Output = Result<SyncReport, BatchError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let coll = self.upserts.coll();
            let seen: Arc<Mutex<HashSet<[u8; 32]>>> = Arc::default();
            // Every identity of the input, written or not: a document that failed keeps its
            // stored copy (and fails the prune below).
            let record = seen.clone();
            let upserts = self.upserts.inspecting(move |d: &S::Item| {
                if let Ok(identity) = d.borrow().identity() {
                    record.lock().expect("identity set").insert(identity.0);
                }
            });
            let written = upserts.await?;
            let fail = |written: BatchReport, error: Error| BatchError {
                settled: written.processed() as usize + written.failures.len(),
                report: written,
                error,
            };
            if !written.failures.is_empty() {
                let error = Error::PruneSkipped {
                    collection: coll.target.namespace.clone(),
                    failed: written.failures.len(),
                };
                return Err(fail(written, error));
            }
            let seen = std::mem::take(&mut *seen.lock().expect("identity set"));
            let pruned = match prune(&coll.target, &seen, self.dry_run, self.max_fraction).await {
                Ok(p) => p,
                Err(e) => return Err(fail(written, e)),
            };
            Ok(SyncReport { written, pruned })
        })
    }
}

/// Deletes (or, in a dry run, lists) the natural-key documents of `target` whose identity is
/// not in `seen`, refused above `max_fraction` of them.
pub(crate) async fn prune(
    target: &crate::op::Target,
    seen: &HashSet<[u8; 32]>,
    dry_run: bool,
    max_fraction: f64,
) -> Result<PruneReport, Error> {
    let mut report = PruneReport {
        dry_run,
        ..PruneReport::default()
    };
    let mut gone: Vec<(Bson, Bson)> = Vec::new();
    let filter: RawDocumentBuf = fragment(&doc! {IDENTITY_FIELD: {"$exists": true}})?;
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
