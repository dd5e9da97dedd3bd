//! `apply`: a relative update of one document, applied at most once per operation
//! (`write::relative`, one statement).

use std::future::IntoFuture;

use mongodb::ClientSession;
use tracing::Instrument;
use ulid::Ulid;

use super::{common_options, record, BoxFuture};
use crate::change::{Change, OpId, DEFAULT_RETAINED_OPERATIONS};
use crate::collection::Collection;
use crate::error::Error;
use crate::outcome::ApplyOutcome;
use crate::retry::RetryPolicy;
use crate::traits::NaturalKey;

/// A relative update of one document, applied at most once per [`OpId`]; from
/// [`Collection::apply`], `.await` it.
#[must_use = "an apply does nothing until awaited"]
pub struct Apply<'a, T: Send + Sync> {
    coll: &'a Collection<T>,
    id: Ulid,
    op: OpId,
    change: Change,
    retain: usize,
    retry: RetryPolicy,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T: NaturalKey + Send + Sync> Apply<'a, T> {
    common_options!(retry);

    /// Keep at least `n` operations in the document's record (default
    /// [`DEFAULT_RETAINED_OPERATIONS`]; at least 1). The record holds up to twice as many
    /// before it is cut back to the `n` latest by operation time.
    pub fn retain(mut self, n: usize) -> Self {
        self.retain = n.max(1);
        self
    }
}

impl<T: NaturalKey + Send + Sync> Collection<T> {
    /// Applies `change` to the stored document `id` unless the document records `op` as
    /// applied: the change and the operation's record are written in one single-document
    /// update, so a retry after a lost reply, another writer with the same operation, or a
    /// rerun after a crash finds it applied. See docs/crate.md, "Relative updates".
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// use natural_key::{Change, OpId};
    /// #[derive(NaturalKey, Serialize, Deserialize)]
    /// struct Item {
    ///     #[key] sku: String,
    ///     #[key(timestamp)] listed_at: i64,
    ///     #[natural_key(relative)] stock: i64,
    /// }
    /// # async fn f(items: natural_key::Collection<Item>, item: Item) -> Result<(), natural_key::Error> {
    /// let outcome = items
    ///     .apply(item.id()?, OpId::new("order-1042", 1_764_000_000_000_i64), Change::new().inc("stock", -1))
    ///     .await?;
    /// println!("{outcome}"); // applied, or already_applied on a retry
    /// # Ok(()) }
    /// ```
    pub fn apply(&self, id: Ulid, op: impl Into<OpId>, change: Change) -> Apply<'_, T> {
        Apply {
            coll: self,
            id,
            op: op.into(),
            change,
            retain: DEFAULT_RETAINED_OPERATIONS,
            retry: self.retry,
            session: None,
        }
    }
}

impl<'a, T: NaturalKey + Send + Sync> IntoFuture for Apply<'a, T> {
    type Output = Result<ApplyOutcome, Error>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::info_span!(
            "natural_key.apply",
            collection = %self.coll.target.namespace,
            id = %self.id,
            op = %self.op.key(),
            outcome = tracing::field::Empty,
        );
        Box::pin(
            async move {
                let target = &self.coll.target;
                let result = async {
                    let update = crate::write::relative::Update::of(
                        target,
                        T::__relative_fields(),
                        (&self.op, &self.change, self.retain),
                    )?;
                    let mut tries = self.retry.begin("apply", &target.namespace);
                    crate::write::relative::apply(
                        target,
                        self.id,
                        &update,
                        &mut tries,
                        self.session,
                    )
                    .await
                }
                .await;
                record(&target.namespace, "apply", &result);
                result
            }
            .instrument(span),
        )
    }
}
