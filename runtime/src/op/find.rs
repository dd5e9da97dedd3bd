//! `find` + `getMore`, to the primary, in the caller's session.

use bson::{doc, Bson, RawDocumentBuf};
use mongodb::error::ErrorKind;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{encode, parse, Session, Target};
use crate::error::{classify, throttle, Error};
use crate::names::{HASH_FIELD, IDENTITY_FIELD, WRITE_FIELD};
use crate::retry::Attempts;

/// What the guard reads of a stored [`NaturalKey`](crate::NaturalKey) document. Field names
/// are the frozen stored names (`IDENTITY_FIELD`, `HASH_FIELD`, `WRITE_FIELD`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StoredIdentity {
    #[serde(rename = "_id")]
    pub(crate) id: Bson,
    #[serde(rename = "_nk_identity", default)]
    pub(crate) identity: Option<Bson>,
    #[serde(rename = "_nk_hash", default)]
    pub(crate) hash: Option<Bson>,
    #[serde(rename = "_nk_write", default)]
    pub(crate) token: Option<Bson>,
}

impl StoredIdentity {
    pub(crate) const PROJECTION: &'static [&'static str] =
        &["_id", IDENTITY_FIELD, HASH_FIELD, WRITE_FIELD];
}

/// What the already-applied check reads first of a stored event (it reads the whole document,
/// whose payload it compares).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StoredEvent {
    #[serde(rename = "_id")]
    pub(crate) id: Bson,
    #[serde(rename = "_nk_idempotency", default)]
    pub(crate) idempotency_key: Option<Bson>,
    #[serde(rename = "_nk_write", default)]
    pub(crate) token: Option<Bson>,
}

#[derive(Deserialize)]
struct CursorReply<T> {
    cursor: CursorBody<T>,
}

#[derive(Deserialize)]
struct CursorBody<T> {
    id: i64,
    #[serde(rename = "firstBatch", alias = "nextBatch")]
    batch: Vec<T>,
}

/// Every document matching `filter`, with only `fields` projected (`None`: whole documents).
pub(crate) async fn find<T: DeserializeOwned>(
    target: &Target,
    filter: RawDocumentBuf,
    fields: Option<&[&str]>,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Vec<T>, Error> {
    cursor(target, command(target, filter, fields), tries, session).await
}

/// At most `limit` documents matching `filter`, with only `fields` projected.
pub(crate) async fn find_limited<T: DeserializeOwned>(
    target: &Target,
    filter: RawDocumentBuf,
    fields: &[&str],
    limit: i64,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Vec<T>, Error> {
    let mut cmd = command(target, filter, Some(fields));
    cmd.append("limit", limit);
    cursor(target, cmd, tries, session).await
}

/// A `find` of `filter`, with only `fields` projected (`None`: whole documents): every read
/// natural-key sends starts here.
fn command(target: &Target, filter: RawDocumentBuf, fields: Option<&[&str]>) -> RawDocumentBuf {
    let mut cmd = RawDocumentBuf::new();
    cmd.append("find", target.name.as_str());
    cmd.append("filter", filter);
    if let Some(fields) = fields {
        let mut projection = RawDocumentBuf::new();
        for f in fields {
            projection.append(*f, 1);
        }
        cmd.append("projection", projection);
    }
    cmd
}

/// Whether the collection holds no document at all: one document's `_id` asked for, in a
/// single batch.
pub(crate) async fn is_empty(
    target: &Target,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<bool, Error> {
    let mut cmd = command(target, RawDocumentBuf::new(), Some(&["_id"]));
    cmd.append("limit", 1i64);
    cmd.append("singleBatch", true);
    let found: Vec<serde::de::IgnoredAny> = cursor(target, cmd, tries, session).await?;
    Ok(found.is_empty())
}

/// Runs a command that answers with a cursor and reads it to the end with `getMore`.
///
/// A cursor belongs to the session that opened it: MongoDB and DocumentDB refuse a `getMore`
/// from any other (code 13, "Cursor session id ... is not the same as the operation context's
/// session id"). Each command sent without a session gets an implicit one of its own from the
/// driver's pool, which is the same as the `find`'s only by luck, so without the caller's
/// session the whole read runs in one session started here. A deployment without sessions
/// refuses an explicit one before anything is sent; there the read goes without (the driver
/// attaches none either).
///
/// A command the engine refuses as busy (`error::THROTTLE_CODES`) is sent again where it
/// failed — the same `find`, the same `getMore` on its cursor — after the wait it names, within
/// `tries` ([`Attempts::throttled`]): the read goes on, and a large one finishes on an engine
/// that refuses some of its commands.
pub(crate) async fn cursor<T: DeserializeOwned>(
    target: &Target,
    cmd: RawDocumentBuf,
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<Vec<T>, Error> {
    if session.is_some() {
        return read_to_end(target, cmd, tries, session).await;
    }
    let mut own = target.db.client().start_session().await.map_err(classify)?;
    match read_to_end(target, cmd.clone(), tries, Some(&mut own)).await {
        Err(Error::Database(e)) if matches!(*e.kind, ErrorKind::SessionsNotSupported) => {
            read_to_end(target, cmd, tries, None).await
        }
        other => other,
    }
}

async fn read_to_end<T: DeserializeOwned>(
    target: &Target,
    cmd: RawDocumentBuf,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Vec<T>, Error> {
    let reply = send(target, &cmd, tries, session.as_deref_mut()).await?;
    let reply: CursorReply<T> = parse(reply, "cursor").map_err(classify)?;
    let (mut id, mut out) = (reply.cursor.id, reply.cursor.batch);
    while id != 0 {
        let more = encode(&doc! { "getMore": id, "collection": target.name.as_str() })
            .map_err(classify)?;
        let reply = send(target, &more, tries, session.as_deref_mut()).await?;
        let reply: CursorReply<T> = parse(reply, "getMore").map_err(classify)?;
        id = reply.cursor.id;
        out.extend(reply.cursor.batch);
    }
    Ok(out)
}

/// One command of a read, sent until it is answered: again after each throttle, as long as
/// `tries` allow.
async fn send(
    target: &Target,
    cmd: &RawDocumentBuf,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<bson::Document, Error> {
    let mut streak = 0;
    loop {
        match target.run(cmd.clone(), session.as_deref_mut()).await {
            Ok(reply) => return Ok(reply),
            Err(e) => match throttle(&target.namespace, &e, true) {
                Some(busy) => {
                    streak += 1;
                    tries.throttled(busy, streak).await?;
                }
                None => return Err(classify(e)),
            },
        }
    }
}

/// A streaming read of a whole result through the driver's cursor (`find`, then `getMore` as
/// batches run out), to the primary: documents are handed out raw, as the server sent them,
/// so memory holds the driver's current batch and the caller's, never the result.
pub(crate) struct Scan {
    cursor: mongodb::Cursor<bson::Document>,
}

impl Scan {
    /// `filter`, with only `fields` projected (`None`: whole documents), `batch_size`
    /// documents per round trip.
    pub(crate) async fn open(
        target: &Target,
        filter: RawDocumentBuf,
        fields: Option<&[&str]>,
        batch_size: usize,
    ) -> Result<Self, mongodb::error::Error> {
        let mut cmd = command(target, filter, fields);
        let batch_size = u32::try_from(batch_size.max(1)).unwrap_or(u32::MAX);
        cmd.append("batchSize", i64::from(batch_size));
        let cursor = target
            .db
            .run_raw_cursor_command(cmd)
            .selection_criteria(super::primary())
            .batch_size(batch_size)
            .await?;
        Ok(Scan { cursor })
    }

    /// Up to `n` more documents; empty at the end.
    pub(crate) async fn next_batch(
        &mut self,
        n: usize,
    ) -> Result<Vec<RawDocumentBuf>, mongodb::error::Error> {
        let mut out = Vec::new();
        while out.len() < n && self.cursor.advance().await? {
            out.push(self.cursor.current().to_raw_document_buf());
        }
        Ok(out)
    }
}
