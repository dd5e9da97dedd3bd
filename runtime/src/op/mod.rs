//! Wire operations: every command natural-key sends is built in exactly one place here, sent
//! with the handle's settings — primary read preference, the collection's write concern, the
//! caller's session — and its reply parsed into serde structs (the guard's read, which reads
//! every document a batch writes, off the driver's raw rows: `find::find_identities`).
//!
//! Reads that decide a write go to the primary whatever the client, database or collection is
//! configured with: a lagging secondary would show an old hash and turn an edit into a lost
//! `Unchanged`.

pub(crate) mod answer;
pub(crate) mod command;
mod find;
mod hello;
mod indexes;
mod shard;

pub(crate) use command::{chunks, Command, Refusal};
pub(crate) use find::{
    command as find_command, cursor, find, find_identities, is_empty, Scan, StoredEvent,
    StoredIdentity,
};
#[cfg(test)]
pub(crate) use hello::Hello;
pub(crate) use indexes::{create_index, list_indexes, IndexInfo};
pub(crate) use shard::{placement, Placement};

use bson::{Document, RawDocumentBuf};
use mongodb::action::Action;
use mongodb::options::{ReadPreference, SelectionCriteria};
use mongodb::{ClientSession, Database};

use std::sync::Arc;

use crate::deployment::Deployment;
use crate::sizing::ReadSizer;

/// The caller's session, if it gave one; reborrowed for each command.
pub(crate) type Session<'s> = Option<&'s mut ClientSession>;

/// The field a sharded collection is distributed by, as natural-key's write filters carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShardKey {
    /// `_nk_identity`: a filter carries the document's identity.
    Identity,
    /// One of the type's identity key fields (a tenant id), under its stored name: a filter
    /// carries the document's stored value of it. Every document of one identity holds the
    /// same value (`Indexes::__shard_key_fields`), so the engine's unique indexes, enforced
    /// per shard-key value, hold globally.
    KeyField(&'static str),
}

impl ShardKey {
    /// The stored field's name.
    pub(crate) fn field(&self) -> &'static str {
        match self {
            ShardKey::Identity => crate::names::IDENTITY_FIELD,
            ShardKey::KeyField(f) => f,
        }
    }
}

/// Where a handle's commands go and how they are sent.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) db: Database,
    pub(crate) name: String,
    /// `database.collection`, for errors.
    pub(crate) namespace: String,
    /// The collection's write concern as a command field, serialized once.
    pub(crate) write_concern: Option<RawDocumentBuf>,
    pub(crate) deployment: Deployment,
    /// What every write filter carries so that the engine routes it to the document's shard;
    /// `None` on an unsharded collection.
    pub(crate) shard_key: Option<ShardKey>,
    /// The guard reads' size, measured; shared by the handle's clones.
    pub(crate) reads: Arc<ReadSizer>,
}

impl Target {
    /// The shard-key condition of a write filter on one document, so that the engine routes
    /// the write to its shard: `identity` on a collection sharded on `_nk_identity`, else the
    /// key field's value in `stored` (the document's stored fields). `null` for a value the
    /// document lacks: where the engine places such a document. `None` when unsharded.
    pub(crate) fn shard_condition(
        &self,
        identity: Option<&str>,
        stored: &bson::RawDocument,
    ) -> Option<(&'static str, bson::RawBson)> {
        let key = self.shard_key.as_ref()?;
        let value = match key {
            ShardKey::Identity => identity.map(|i| bson::RawBson::String(i.to_string())),
            ShardKey::KeyField(f) => stored.get(f).ok().flatten().map(|v| v.to_raw_bson()),
        };
        Some((key.field(), value.unwrap_or(bson::RawBson::Null)))
    }

    /// The key field this collection is sharded on and its value in `stored` (a delete by key
    /// carries it); `None` unless sharded on a key field. `stored` is asked only then.
    pub(crate) fn key_field_condition(
        &self,
        stored: impl FnOnce() -> Result<bson::RawDocumentBuf, crate::error::Error>,
    ) -> Result<Option<(&'static str, bson::RawBson)>, crate::error::Error> {
        let Some(ShardKey::KeyField(_)) = &self.shard_key else {
            return Ok(None);
        };
        let stored = stored()?;
        Ok(self.shard_condition(None, &stored))
    }

    pub(crate) fn new(
        db: Database,
        name: String,
        write_concern: Option<RawDocumentBuf>,
        deployment: Deployment,
        shard_key: Option<ShardKey>,
    ) -> Self {
        let limits = deployment.limits();
        Target {
            namespace: format!("{}.{name}", db.name()),
            db,
            name,
            write_concern,
            shard_key,
            reads: Arc::new(ReadSizer::new(
                limits.min_read_identities,
                limits.max_read_identities,
                limits.span_reads,
            )),
            deployment,
        }
    }

    /// The target of a read-only scan of `db.name` (no write concern): the deployment as the
    /// server describes it.
    pub(crate) async fn detect(
        client: &mongodb::Client,
        db: &str,
        name: String,
    ) -> Result<Target, crate::error::Error> {
        let deployment = Deployment::detect(client).await?;
        let shard_key = deployment.is_sharded().then_some(ShardKey::Identity);
        Ok(Target::new(
            client.database(db),
            name,
            None,
            deployment,
            shard_key,
        ))
    }

    /// The attempts of a read that has no retry policy of its own: a throttle ends it as
    /// [`Error::Throttled`](crate::Error::Throttled).
    pub(crate) fn once(&self, operation: &'static str) -> crate::retry::Attempts {
        crate::retry::RetryPolicy::none().begin(operation, &self.namespace)
    }

    /// Runs one command on the primary, in the caller's session if any.
    pub(crate) async fn run(
        &self,
        command: RawDocumentBuf,
        session: Session<'_>,
    ) -> Result<Document, mongodb::error::Error> {
        self.db
            .run_raw_command(command)
            .selection_criteria(primary())
            .optional(session, |a, s| a.session(s))
            .await
    }
}

/// A command written with `doc!`, as the raw BSON the commands are sent as.
pub(crate) fn encode(command: &Document) -> Result<RawDocumentBuf, mongodb::error::Error> {
    RawDocumentBuf::from_document(command).map_err(mongodb::error::Error::custom)
}

pub(crate) fn primary() -> SelectionCriteria {
    SelectionCriteria::ReadPreference(ReadPreference::Primary)
}

/// A reply field into a serde struct; a reply that does not parse is a driver-level error
/// (the engine answered something natural-key cannot read).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    reply: Document,
    what: &str,
) -> Result<T, mongodb::error::Error> {
    bson::from_document(reply).map_err(|e| {
        mongodb::error::Error::custom(format!("unexpected `{what}` reply from the server: {e}"))
    })
}
