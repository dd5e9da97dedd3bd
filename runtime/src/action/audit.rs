//! `audit`: what a collection holds against the ids its documents derive, for a type's
//! collection or, keyed by a [`KeySpec`], for any collection. Writes nothing; the scan is
//! `maintain::findings`'.

use std::future::IntoFuture;

use serde::de::DeserializeOwned;

use super::{scan_options, BoxFuture};
use crate::collection::Collection;
use crate::error::Error;
use crate::keyspec::KeySpec;
use crate::maintain::findings::{audit, AuditReport};
use crate::maintain::scan::Typed;
use crate::maintain::DEFAULT_SAMPLE;
use crate::op::Target;
use crate::traits::NaturalKey;
use crate::write::batch::Progress;

/// Builder returned by [`Collection::audit`]; `.await` it.
#[must_use = "an audit does nothing until awaited"]
pub struct Audit<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    sample: usize,
    progress: Option<Progress<'a, AuditReport>>,
}

impl<'a, T: Send + Sync> Audit<'a, T> {
    scan_options!(AuditReport);
}

impl<T: NaturalKey + DeserializeOwned + Send + Sync> Collection<T> {
    /// Reads the collection once and reports what it holds against the ids the documents'
    /// own fields derive: legacy documents, duplicates, drifted ids and hashes, documents
    /// that are not `T`. Writes nothing. Memory: one batch of documents and about 70 bytes per
    /// identity.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
    /// # async fn f(posts: natural_key::Collection<Post>) -> Result<(), natural_key::Error> {
    /// let report = posts.audit().await?;
    /// println!("{report}");
    /// if !report.is_clean() {
    ///     posts.adopt().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn audit(&self) -> Audit<'_, T> {
        Audit {
            coll: self,
            sample: DEFAULT_SAMPLE,
            progress: None,
        }
    }
}

impl<'a, T> IntoFuture for Audit<'a, T>
where
    T: NaturalKey + DeserializeOwned + Send + Sync,
{
    type Output = Result<AuditReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let Audit {
            coll,
            sample,
            mut progress,
        } = self;
        let progress = move |r: &AuditReport| progress.as_mut().map_or((), |p| p(r));
        Box::pin(async move { audit(&coll.target, &Typed::<T>::new(), sample, progress).await })
    }
}

impl KeySpec {
    /// Audits the collection (`coll`'s namespace, on its client) with this spec: the same
    /// scan and report as [`Collection::audit`](crate::Collection::audit), but with
    /// [`AuditReport::hash_checked`] false. Writes nothing.
    ///
    /// ```no_run
    /// # use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec};
    /// # use natural_key_runtime::Scheme;
    /// # async fn f(db: mongodb::Database) -> Result<(), natural_key_runtime::Error> {
    /// let spec = KeySpec::new(Scheme::Joined { separator: ":" }, "published_at")
    ///     .key(KeyField::new("slug", KeyKind::Str))
    ///     .key(KeyField::new("lang", KeyKind::Str).lowercase());
    /// let report = spec.audit(&db.collection::<bson::Document>("posts")).sample(3).await?;
    /// println!("{report}");
    /// # Ok(()) }
    /// ```
    pub fn audit<C: Send + Sync>(&self, coll: &mongodb::Collection<C>) -> SpecAudit<'_> {
        let ns = coll.namespace();
        SpecAudit {
            spec: self,
            client: coll.client().clone(),
            db: ns.db,
            name: ns.coll,
            sample: DEFAULT_SAMPLE,
            progress: None,
        }
    }
}

/// Builder returned by [`KeySpec::audit`]; `.await` it.
#[must_use = "an audit does nothing until awaited"]
pub struct SpecAudit<'a> {
    spec: &'a KeySpec,
    client: mongodb::Client,
    db: String,
    name: String,
    sample: usize,
    progress: Option<Progress<'a, AuditReport>>,
}

impl<'a> SpecAudit<'a> {
    scan_options!(AuditReport);
}

impl<'a> IntoFuture for SpecAudit<'a> {
    type Output = Result<AuditReport, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(mut self) -> Self::IntoFuture {
        Box::pin(async move {
            let target = Target::detect(&self.client, &self.db, self.name).await?;
            let progress = |r: &AuditReport| self.progress.as_mut().map_or((), |p| p(r));
            audit(&target, self.spec, self.sample, progress).await
        })
    }
}
