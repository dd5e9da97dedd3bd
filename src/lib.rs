#![doc = include_str!("../docs/crate.md")]
#![warn(missing_docs)]

pub use natural_key_derive::{NaturalKey, RandomId};
pub use natural_key_runtime::*;

/// Everything a module that defines or writes documents needs:
/// `use natural_key::prelude::*;`.
///
/// Brings in the derives and traits ([`NaturalKey`], [`RandomId`]), [`UpsertOutcome`], [`InsertOutcome`], [`Ulid`],
/// [`WriteMode`] and serde's `Serialize`/`Deserialize` (derive them too: the document is stored
/// through serde).
pub mod prelude {
    pub use crate::{InsertOutcome, NaturalKey, RandomId, Ulid, UpsertOutcome, WriteMode};
    pub use serde::{Deserialize, Serialize};
}
