//! `prune`: a sync from a full snapshot — an ingest, then the deletion of what the snapshot no
//! longer holds ([`Prune`]); or, for an input written in several calls, the deletion alone
//! ([`SpecPrune`]). `maintain::pruning` deletes. And the pruning of tombstones by age
//! ([`PruneTombstones`], `maintain::tombstones`).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};

use futures_util::Stream;

use super::{dry_run_option, BoxFuture};
use crate::collection::{Collection, SpecCollection};
use crate::content::ContentHash;
use crate::error::Error;
use crate::maintain::pruning::{prune, sync, PruneReport, SyncReport, DEFAULT_MAX_PRUNE_FRACTION};
use crate::maintain::tombstones::{self, TombstoneReport};
use crate::op::Target;
use crate::outcome::BatchError;
use crate::traits::NaturalKey;
use crate::UpsertStream;

/// `dry_run`, `max_fraction` and `force`, the options of both prunes.
macro_rules! prune_options {
    ($dry_run:literal) => {
        dry_run_option!($dry_run);

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
    };
}

/// Builder returned by [`UpsertStream::prune`]; `.await` it.
#[must_use = "a pruning ingest does nothing until awaited"]
pub struct Prune<'a, T: NaturalKey + Send + Sync, S> {
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

impl<T: NaturalKey + Send + Sync, S> Prune<'_, T, S> {
    prune_options!(
        "Writes the input as usual, then lists what would be deleted and deletes nothing."
    );
}

impl<'a, T, S> IntoFuture for Prune<'a, T, S>
where
    T: NaturalKey + Send + Sync + 'a,
    S: Stream + Send + 'a,
    S::Item: Borrow<T> + Send + Sync,
{
    type Output = Result<SyncReport, BatchError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let target = self.upserts.on().target;
        // Every identity of the input, written or not: a document that failed keeps its
        // stored copy (and fails the prune).
        let seen: Arc<Mutex<HashSet<[u8; 32]>>> = Arc::default();
        let record = seen.clone();
        let written = self.upserts.inspecting(move |d: &S::Item| {
            if let Ok(identity) = d.borrow().identity() {
                record.lock().expect("identity set").insert(identity.0);
            }
        });
        Box::pin(async move {
            sync(
                target,
                written.into_future(),
                &seen,
                self.dry_run,
                self.max_fraction,
            )
            .await
        })
    }
}

impl SpecCollection {
    /// For an ingest of a full snapshot, once it is written: deletes the natural-key documents
    /// whose identity is not among `identities` (the snapshot's, each as
    /// [`KeySpec::derive`](crate::spec::KeySpec::derive) gives it), guarded as
    /// [`UpsertStream::prune`] is — never a document without `_nk_identity`, never more than
    /// [`max_fraction`](SpecPrune::max_fraction) of them.
    pub fn prune_except(&self, identities: impl IntoIterator<Item = ContentHash>) -> SpecPrune<'_> {
        SpecPrune {
            coll: self,
            seen: identities.into_iter().map(|h| h.0).collect(),
            dry_run: false,
            max_fraction: DEFAULT_MAX_PRUNE_FRACTION,
        }
    }
}

/// Builder returned by [`SpecCollection::prune_except`]; `.await` it.
#[must_use = "a prune does nothing until awaited"]
pub struct SpecPrune<'a> {
    coll: &'a SpecCollection,
    seen: HashSet<[u8; 32]>,
    dry_run: bool,
    max_fraction: f64,
}

impl SpecPrune<'_> {
    prune_options!("Lists what would be deleted, deletes nothing.");
}

impl<'a> IntoFuture for SpecPrune<'a> {
    type Output = Result<PruneReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let target = &self.coll.target;
        Box::pin(async move { prune(target, &self.seen, self.dry_run, self.max_fraction).await })
    }
}

/// Builder returned by [`Collection::prune_tombstones`],
/// [`SpecCollection::prune_tombstones`] and [`spec::prune_tombstones`](crate::spec::prune_tombstones);
/// `.await` it.
#[must_use = "a prune does nothing until awaited"]
pub struct PruneTombstones<'a> {
    at: Where<'a>,
    older_than: std::time::Duration,
    dry_run: bool,
}

/// The collection: an opened handle's, or a driver collection's, learnt when awaited.
enum Where<'a> {
    Opened(&'a Target),
    Driver {
        client: mongodb::Client,
        db: String,
        name: String,
    },
}

impl PruneTombstones<'_> {
    dry_run_option!("Counts the tombstones that would be deleted, deletes nothing.");
}

impl<'a> IntoFuture for PruneTombstones<'a> {
    type Output = Result<TombstoneReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let detected;
            let target = match self.at {
                Where::Opened(t) => t,
                Where::Driver { client, db, name } => {
                    detected = Target::detect(&client, &db, name).await?;
                    &detected
                }
            };
            tombstones::prune_tombstones(target, self.older_than, self.dry_run).await
        })
    }
}

impl<T: Send + Sync> Collection<T> {
    /// Deletes the tombstones that versioned deletes left more than `older_than` ago (by the
    /// deleting client's clock). A tombstone keeps a late write of an older version from
    /// bringing a deleted document back; keep them for longer than your pipeline can deliver
    /// a write late (its longest replay or redelivery window). Each costs one small document
    /// (its `_id`, identity, version and time of deletion: 208 bytes of BSON; docs/id-scheme.md,
    /// "Versions and tombstones"). A tombstone changed since it was read (a newer version
    /// brought the document back) is left alone.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, #[natural_key(version)] rev: u64 }
    /// # async fn f(posts: natural_key::Collection<Post>) -> Result<(), natural_key::Error> {
    /// let week = std::time::Duration::from_secs(7 * 24 * 3600);
    /// let plan = posts.prune_tombstones(week).dry_run().await?;
    /// println!("{} tombstones older than a week", plan.pruned);
    /// posts.prune_tombstones(week).await?;
    /// # Ok(()) }
    /// ```
    pub fn prune_tombstones(&self, older_than: std::time::Duration) -> PruneTombstones<'_> {
        PruneTombstones {
            at: Where::Opened(&self.target),
            older_than,
            dry_run: false,
        }
    }
}

impl SpecCollection {
    /// [`Collection::prune_tombstones`] for documents described at run time.
    pub fn prune_tombstones(&self, older_than: std::time::Duration) -> PruneTombstones<'_> {
        PruneTombstones {
            at: Where::Opened(&self.target),
            older_than,
            dry_run: false,
        }
    }
}

/// [`Collection::prune_tombstones`] on a driver collection, without a type or a
/// [`KeySpec`](crate::spec::KeySpec): tombstones carry no key fields to read
/// (`natural-key prune-tombstones` uses it).
///
/// ```no_run
/// # async fn f(db: mongodb::Database) -> Result<(), natural_key_runtime::Error> {
/// let posts = db.collection::<bson::Document>("posts");
/// let month = std::time::Duration::from_secs(30 * 24 * 3600);
/// let report = natural_key_runtime::spec::prune_tombstones(&posts, month).await?;
/// println!("{} pruned", report.pruned);
/// # Ok(()) }
/// ```
pub fn prune_tombstones<C: Send + Sync>(
    coll: &mongodb::Collection<C>,
    older_than: std::time::Duration,
) -> PruneTombstones<'static> {
    let ns = coll.namespace();
    PruneTombstones {
        at: Where::Driver {
            client: coll.client().clone(),
            db: ns.db,
            name: ns.coll,
        },
        older_than,
        dry_run: false,
    }
}
