//! `adopt`: every legacy or drifted document moved under its derived id
//! (`maintain::adoption` does it).

use std::future::IntoFuture;

use serde::de::DeserializeOwned;

use super::{dry_run_option, scan_options, BoxFuture};
use crate::collection::Collection;
use crate::error::Error;
use crate::maintain::adoption::{adopt, AdoptOptions, AdoptReport, Candidate};
use crate::traits::NaturalKey;

/// Builder returned by [`Collection::adopt`]; `.await` it.
#[must_use = "adopt does nothing until awaited"]
pub struct Adopt<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    opts: AdoptOptions<'a, T>,
}

impl<'a, T: Send + Sync> Adopt<'a, T> {
    dry_run_option!("Computes everything and writes nothing.", opts);
    scan_options!(AdoptReport, opts);

    /// Lists each old `_id` with its new id in [`AdoptReport::mapping`] (unbounded: one
    /// entry per adopted or merged document).
    pub fn mapping(mut self) -> Self {
        self.opts.mapping = true;
        self
    }

    /// Resolves an identity held by documents with differing content: return the index of
    /// the candidate to keep (its content goes under the derived id, the others are deleted
    /// and their ids recorded), or `None` to leave them all. Without a policy they are left.
    /// A policy must choose the same on a rerun (say, the newest by a field), which is what
    /// makes a killed run converge.
    pub fn on_conflict(
        mut self,
        f: impl FnMut(&[Candidate<T>]) -> Option<usize> + Send + 'a,
    ) -> Self {
        self.opts.policy = Some(Box::new(f));
        self
    }
}

impl<T: NaturalKey + DeserializeOwned + Send + Sync> Collection<T> {
    /// Turns every legacy document (no `_nk_identity`: random ids, ObjectIds, ids of another
    /// scheme) and every drifted one into a natural-key document under its derived id, its
    /// old `_id` kept in `_nk_legacy_ids`; duplicates with identical content collapse into
    /// one. Clean documents are never touched; a second run sends no write. Two scans; memory
    /// is one batch plus about 70 bytes per identity (and the documents of identities with
    /// differing content, which are resolved at the end).
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, edited_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>) -> Result<(), natural_key::Error> {
    /// let plan = posts.adopt().dry_run().await?;
    /// println!("would adopt {} and merge {}", plan.adopted, plan.merged);
    /// let done = posts
    ///     .adopt()
    ///     .on_conflict(|c| (0..c.len()).max_by_key(|&i| c[i].doc.edited_at))
    ///     .await?;
    /// assert!(done.failures.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn adopt(&self) -> Adopt<'_, T> {
        Adopt {
            coll: self,
            opts: AdoptOptions::default(),
        }
    }
}

impl<'a, T> IntoFuture for Adopt<'a, T>
where
    T: NaturalKey + DeserializeOwned + Send + Sync,
{
    type Output = Result<AdoptReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(adopt(self.coll, self.opts))
    }
}
