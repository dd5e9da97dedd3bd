#![doc = include_str!("../docs/crate.md")]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use natural_key_derive::{NaturalKey, RandomId};
pub use natural_key_runtime::*;

/// Everything a module that defines or writes documents needs:
/// `use natural_key::prelude::*;`.
///
/// Brings in the derives and traits ([`NaturalKey`], [`RandomId`]), [`Upsertable`] (a
/// document's `doc.upsert(&coll)`) with [`UpsertBuilder`] and [`WriteOutcome`] (what code
/// generic over it calls), [`UpsertOutcome`], [`InsertOutcome`], [`Ulid`], [`WriteMode`] and
/// serde's `Serialize`/`Deserialize` (derive them too: the document is stored through serde).
pub mod prelude {
    pub use crate::{
        InsertOutcome, NaturalKey, RandomId, Ulid, UpsertBuilder, UpsertOutcome, Upsertable,
        WriteMode, WriteOutcome,
    };
    pub use serde::{Deserialize, Serialize};
}
