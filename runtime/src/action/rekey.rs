//! `rekey`: the sanctioned way to correct a timestamp key (`maintain::rekeying` moves the
//! document).

use std::future::IntoFuture;

use serde::de::DeserializeOwned;

use super::{dry_run_option, BoxFuture};
use crate::collection::Collection;
use crate::error::Error;
use crate::maintain::rekeying::{rekey, RekeyOutcome};
use crate::traits::NaturalKey;

/// Builder returned by [`Collection::rekey`]; `.await` it.
#[must_use = "rekey does nothing until awaited"]
pub struct Rekey<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    doc: &'a T,
    dry_run: bool,
}

impl<T: Send + Sync> Rekey<'_, T> {
    dry_run_option!("Finds and checks everything, reports the move, and writes nothing.");
}

impl<T: NaturalKey + DeserializeOwned + Send + Sync> Collection<T> {
    /// Moves the stored document with `corrected`'s identity to the id `corrected` derives —
    /// the fix for [`Error::ImmutableKeyChanged`] when the stored timestamp key was wrong.
    /// The new document is `corrected`, plus the fields other code wrote to the old one;
    /// the old `_id` is kept in `_nk_legacy_ids`. Refuses (and writes nothing) when the new id
    /// holds a document of another identity. Idempotent, and crash-safe: run it again.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, body: String }
    /// # async fn f(posts: natural_key::Collection<Post>, corrected: Post) -> Result<(), natural_key::Error> {
    /// match posts.upsert(&corrected).await {
    ///     Err(natural_key::Error::ImmutableKeyChanged { .. }) => {
    ///         let moved = posts.rekey(&corrected).await?;
    ///         println!("{moved}"); // moved <old id> -> <new id>
    ///     }
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn rekey<'a>(&'a self, corrected: &'a T) -> Rekey<'a, T> {
        Rekey {
            coll: self,
            doc: corrected,
            dry_run: false,
        }
    }
}

impl<'a, T> IntoFuture for Rekey<'a, T>
where
    T: NaturalKey + DeserializeOwned + Send + Sync,
{
    type Output = Result<RekeyOutcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(rekey(self.coll, self.doc, self.dry_run))
    }
}
