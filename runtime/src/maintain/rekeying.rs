//! `rekey`: the sanctioned way to correct a timestamp key. The stored document is found by
//! identity and moved to the id the corrected document derives, crash-safe in adopt's order:
//! release the identity (marking the old document [`MOVED_TO_FIELD`]), write the new
//! document (old id in [`LEGACY_IDS_FIELD`]), delete the old one. A rerun — after a crash or a
//! lost acknowledgement — finds the marked document or the written one and finishes the same
//! move.

use std::fmt;

use bson::{doc, Bson, Document, RawDocumentBuf};
use serde::de::DeserializeOwned;
use ulid::Ulid;

use super::statements::{apply, delete_one, fragment, statement};
use crate::collection::Collection;
use crate::error::Error;
use crate::names::{
    DELETED_FIELD, IDENTITY_FIELD, LEGACY_IDS_FIELD, MOVED_TO_FIELD, RECORD_FIELDS, RESERVED_PREFIX,
};
use crate::op;
use crate::op::Command;
use crate::stored::{id_text, Prepared};
use crate::traits::NaturalKey;

/// What [`Collection::rekey`] did.
///
/// ```
/// use natural_key::RekeyOutcome;
/// let to = natural_key::Ulid::nil();
/// let moved = RekeyOutcome::Moved { from: "01HF7YAT00EGYGDZ2RBKJ019EA".into(), to };
/// assert!(moved.to_string().starts_with("moved"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RekeyOutcome {
    /// The document now lives under `to`; `from` (its old `_id`, as text) is gone and kept in
    /// its `_nk_legacy_ids`. A retry of a finished move reports the same move.
    Moved {
        /// The old `_id`.
        from: String,
        /// The new, derived id.
        to: Ulid,
    },
    /// The stored document is already at the derived id and was never moved: nothing to do
    /// (upsert it to change its content).
    AlreadyThere(Ulid),
    /// No stored document has this identity.
    NotFound,
}

impl fmt::Display for RekeyOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RekeyOutcome::Moved { from, to } => write!(f, "moved {from} -> {to}"),
            RekeyOutcome::AlreadyThere(id) => write!(f, "already at {id}"),
            RekeyOutcome::NotFound => f.write_str("not found"),
        }
    }
}

/// Moves the stored document with `corrected`'s identity to the id it derives (see
/// [`Collection::rekey`]); with `dry_run`, finds and checks everything and writes nothing.
pub(crate) async fn rekey<T>(
    coll: &Collection<T>,
    corrected: &T,
    dry_run: bool,
) -> Result<RekeyOutcome, Error>
where
    T: NaturalKey + DeserializeOwned + Send + Sync,
{
    let target = &coll.target;
    let p = Prepared::of(corrected, target)?;
    let to = p.id;
    // One read: the holder of the identity, a document a half-done move released,
    // and whatever sits at the new id.
    let filter = doc! {"$or": [
        {IDENTITY_FIELD: &p.identity},
        {MOVED_TO_FIELD: &p.id_text},
        {"_id": &p.id_text},
    ]};
    let mut once = target.once("rekey");
    let found: Vec<Document> = op::find(target, fragment(&filter)?, None, &mut once, None).await?;
    let holds = |d: &&Document| d.get_str(IDENTITY_FIELD) == Ok(p.identity.as_str());
    let holder = found.iter().find(holds);
    if holder.is_some_and(is_tombstone) {
        return Ok(RekeyOutcome::NotFound);
    }
    let released: Vec<&Document> = found
        .iter()
        .filter(|d| d.get_str(MOVED_TO_FIELD) == Ok(p.id_text.as_str()) && !holds(d))
        .collect();
    let at_target = found
        .iter()
        .find(|d| d.get_str("_id") == Ok(p.id_text.as_str()));
    if let Some(other) = at_target.filter(|d| !holds(d)) {
        return Err(Error::RekeyTargetTaken {
            collection: target.namespace.clone(),
            id: to,
            identity: other.get_str(IDENTITY_FIELD).unwrap_or("none").to_string(),
        });
    }
    let old = match (holder, released.first()) {
        // Moved already (by this call's lost attempt, or long ago): finish deleting.
        (Some(h), _) if at_target.is_some() => {
            let from = released
                .iter()
                .map(|d| id_text(d.get("_id").unwrap_or(&Bson::Null)))
                .next()
                .or_else(|| last_legacy_id(h));
            if !dry_run {
                delete_released(coll, &released, to).await?;
            }
            return Ok(match from {
                Some(from) => RekeyOutcome::Moved { from, to },
                None => RekeyOutcome::AlreadyThere(to),
            });
        }
        (Some(h), _) => h,
        (None, Some(r)) => *r,
        (None, None) => return Ok(RekeyOutcome::NotFound),
    };
    let old_id = old.get("_id").cloned().unwrap_or(Bson::Null);
    let outcome = RekeyOutcome::Moved {
        from: id_text(&old_id),
        to,
    };
    if dry_run {
        return Ok(outcome);
    }
    if holder.is_some() {
        let release = statement(
            doc! {"_id": old_id.clone(), IDENTITY_FIELD: &p.identity},
            doc! {"$unset": {IDENTITY_FIELD: ""}, "$set": {MOVED_TO_FIELD: &p.id_text}},
        )?;
        one(apply(target, Command::Update, vec![(to, release)]).await?)?;
    }
    let home = home(coll, &p, old, &old_id)?;
    one(apply(target, Command::Insert, vec![(to, home)]).await?)?;
    delete_released(coll, &[old], to).await?;
    Ok(outcome)
}

/// The new document: the corrected one's stored fields, then the fields of the old one that
/// the type does not have (other code's), then the old ids. What relative updates own moves
/// with the document as stored: its `#[natural_key(relative)]` fields and the record of the
/// operations applied (`_nk_ops`, `_nk_ops_pruned_to`), without which a replay of an applied
/// operation at the new id would be applied again.
fn home<T: Send + Sync>(
    coll: &Collection<T>,
    p: &Prepared,
    old: &Document,
    old_id: &Bson,
) -> Result<RawDocumentBuf, Error> {
    let mut d = RawDocumentBuf::new();
    d.append("_id", p.id_text.as_str());
    let stored: Vec<&str> = p
        .relative
        .iter()
        .copied()
        .filter(|f| old.contains_key(*f))
        .collect();
    crate::stored::append_fields(&mut d, &p.body, &stored).map_err(Error::serialize::<T>)?;
    let known = coll.fields.unwrap_or_default();
    let mut extra = Document::new();
    for (k, v) in old {
        let relative = stored.contains(&k.as_str()) || RECORD_FIELDS.contains(&k.as_str());
        let theirs = k != "_id" && !k.starts_with(RESERVED_PREFIX) && !known.contains(&k.as_str());
        if relative || theirs && coll.fields.is_some() && !matches!(p.body.get(k), Ok(Some(_))) {
            extra.insert(k.clone(), v.clone());
        }
    }
    let mut ids = old.get_array(LEGACY_IDS_FIELD).cloned().unwrap_or_default();
    ids.push(old_id.clone());
    extra.insert(LEGACY_IDS_FIELD, ids);
    crate::stored::append_fields(&mut d, &fragment(&extra)?, &[]).map_err(Error::serialize::<T>)?;
    Ok(d)
}

async fn delete_released<T: Send + Sync>(
    coll: &Collection<T>,
    released: &[&Document],
    to: Ulid,
) -> Result<(), Error> {
    let mut statements = Vec::new();
    for d in released {
        let q = doc! {"_id": d.get("_id").cloned().unwrap_or(Bson::Null), MOVED_TO_FIELD: to.to_string()};
        statements.push((to, delete_one(q)?));
    }
    if statements.is_empty() {
        return Ok(());
    }
    for r in apply(&coll.target, Command::Delete, statements).await? {
        r?;
    }
    Ok(())
}

fn last_legacy_id(d: &Document) -> Option<String> {
    d.get_array(LEGACY_IDS_FIELD).ok()?.last().map(id_text)
}

fn one(mut results: Vec<Result<(), Error>>) -> Result<(), Error> {
    results.pop().unwrap_or(Ok(()))
}

/// A versioned delete's tombstone: a deleted document, which a move would bring back.
fn is_tombstone(d: &Document) -> bool {
    !matches!(d.get(DELETED_FIELD), None | Some(Bson::Null))
}
