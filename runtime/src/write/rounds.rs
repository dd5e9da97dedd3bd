//! What the upsert and insert rounds share: how many rounds a document gets, what is left
//! unsettled after them, and the refusal no round can attribute to an index.

use ulid::Ulid;

use crate::error::Error;
use crate::op::Target;

/// How many read-decide-write rounds a document gets before [`Error::Contention`].
pub(crate) const MAX_ROUNDS: u32 = 8;

/// The results, with what is still unsettled after [`MAX_ROUNDS`] as [`Error::Contention`].
pub(crate) fn or_contention<O>(
    results: Vec<Option<Result<O, Error>>>,
    target: &Target,
    id: impl Fn(usize) -> Ulid,
) -> Vec<Result<O, Error>> {
    results
        .into_iter()
        .enumerate()
        .map(|(i, result)| {
            result.unwrap_or_else(|| {
                Err(Error::Contention {
                    collection: target.namespace.clone(),
                    id: id(i),
                    attempts: MAX_ROUNDS,
                })
            })
        })
        .collect()
}

/// A duplicate the engine did not attribute to an index (FerretDB 1.x names none), shown by
/// the reads not to be natural-key's own: one of the user's unique indexes.
pub(crate) fn unnamed_violation(target: &Target, id: Ulid, message: String) -> Error {
    Error::UniqueIndexViolation {
        collection: target.namespace.clone(),
        id,
        index: "(an index the engine did not name)".into(),
        key: message,
    }
}
