//! Pruning tombstones by age: what versioned deletes leave behind (docs/id-scheme.md,
//! "Versions and tombstones") costs one small document per deleted identity, kept until
//! pruned. A tombstone protects a deleted document from a late write of an older version; once
//! no such write can arrive any more (the pipeline's longest redelivery window), it can go.

use std::time::Duration;

use bson::{doc, Bson, RawDocumentBuf};
use serde::Deserialize;
use ulid::Ulid;

use super::statements::{apply, delete_one};
use crate::error::Error;
use crate::names::{DELETED_FIELD, IDENTITY_FIELD};
use crate::op::{self, Command, Target};
use crate::retry::RetryPolicy;

/// Tombstones per page: read, then deleted, one page at a time.
const PAGE: usize = 1_000;

/// What [`prune_tombstones`](crate::Collection::prune_tombstones) did.
///
/// ```
/// let r = natural_key::TombstoneReport::default();
/// assert_eq!(r.pruned, 0);
/// ```
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TombstoneReport {
    /// Tombstones deleted (in a dry run: that would be).
    pub pruned: u64,
    /// Tombstones that were older than the cutoff when read but changed before their delete (a
    /// newer version brought the document back, or a newer delete raised them): left alone.
    pub changed: u64,
    /// Nothing was deleted: the report says what would be.
    pub dry_run: bool,
}

#[derive(Deserialize)]
struct Row {
    #[serde(rename = "_id")]
    id: Bson,
    #[serde(rename = "_nk_identity", default)]
    identity: Option<Bson>,
}

/// Deletes the tombstones of `target` deleted more than `older_than` ago (by `_nk_deleted`,
/// the deleting client's clock), in `_id` order, a page at a time. Each delete is guarded by
/// the cutoff again, so a tombstone that changed since it was read stays.
pub(crate) async fn prune_tombstones(
    target: &Target,
    older_than: Duration,
    dry_run: bool,
) -> Result<TombstoneReport, Error> {
    let now = bson::DateTime::now().timestamp_millis();
    let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    let cutoff = bson::DateTime::from_millis(now.saturating_sub(age));
    let mut report = TombstoneReport {
        dry_run,
        ..TombstoneReport::default()
    };
    let mut tries = RetryPolicy::default().begin("prune_tombstones", &target.namespace);
    let mut after: Option<Bson> = None;
    loop {
        let mut filter = doc! { DELETED_FIELD: { "$lt": cutoff } };
        if let Some(last) = &after {
            filter.insert("_id", doc! { "$gt": last.clone() });
        }
        let filter = RawDocumentBuf::from_document(&filter).map_err(serialize)?;
        let mut cmd = op::find_command(target, filter, Some(&["_id", IDENTITY_FIELD]));
        cmd.append("sort", bson::rawdoc! { "_id": 1 });
        cmd.append("limit", PAGE as i64);
        let rows: Vec<Row> = op::cursor(target, cmd, &mut tries, None).await?;
        let Some(last) = rows.last() else { break };
        after = Some(last.id.clone());
        let full = rows.len() == PAGE;
        if dry_run {
            report.pruned += rows.len() as u64;
        } else {
            delete(target, rows, cutoff, &mut report).await?;
        }
        if !full {
            break;
        }
    }
    Ok(report)
}

/// Deletes one page of tombstones, each still older than `cutoff`.
async fn delete(
    target: &Target,
    rows: Vec<Row>,
    cutoff: bson::DateTime,
    report: &mut TombstoneReport,
) -> Result<(), Error> {
    let statements = rows
        .into_iter()
        .map(|r| {
            let id =
                r.id.as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(Ulid::nil());
            // `_nk_identity` routes the delete to one shard on a sharded collection.
            let q = doc! {
                "_id": r.id,
                IDENTITY_FIELD: r.identity.unwrap_or(Bson::Null),
                DELETED_FIELD: { "$lt": cutoff },
            };
            Ok((id, delete_one(q)?))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    for result in apply(target, Command::Delete, statements).await? {
        match result {
            Ok(()) => report.pruned += 1,
            Err(Error::ConcurrentChange { .. }) => report.changed += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serialize(e: impl std::fmt::Display) -> Error {
    Error::serialize::<RawDocumentBuf>(e)
}
