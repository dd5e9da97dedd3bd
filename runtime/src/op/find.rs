//! `find` + `getMore`, to the primary, in the caller's session.

use bson::{doc, Bson, RawDocumentBuf};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{parse, raw, Session, Target};

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
        &["_id", "_nk_identity", "_nk_hash", "_nk_write"];
}

/// What the already-applied check reads of a stored event.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StoredEvent {
    #[serde(rename = "_id")]
    pub(crate) id: Bson,
    #[serde(rename = "_nk_idempotency", default)]
    pub(crate) idempotency_key: Option<Bson>,
}

impl StoredEvent {
    pub(crate) const PROJECTION: &'static [&'static str] = &["_id", "_nk_idempotency"];
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
    t: &Target,
    filter: RawDocumentBuf,
    fields: Option<&[&str]>,
    session: Session<'_>,
) -> Result<Vec<T>, mongodb::error::Error> {
    let mut cmd = RawDocumentBuf::new();
    cmd.append("find", t.name.as_str());
    cmd.append("filter", filter);
    if let Some(fields) = fields {
        let mut projection = RawDocumentBuf::new();
        for f in fields {
            projection.append(*f, 1);
        }
        cmd.append("projection", projection);
    }
    cursor(t, cmd, session).await
}

/// Runs a command that answers with a cursor and reads it to the end with `getMore`.
pub(crate) async fn cursor<T: DeserializeOwned>(
    t: &Target,
    cmd: RawDocumentBuf,
    mut session: Session<'_>,
) -> Result<Vec<T>, mongodb::error::Error> {
    let reply: CursorReply<T> = parse(t.run(cmd, session.as_deref_mut()).await?, "cursor")?;
    let (mut id, mut out) = (reply.cursor.id, reply.cursor.batch);
    while id != 0 {
        let more = doc! { "getMore": id, "collection": t.name.as_str() };
        let reply: CursorReply<T> =
            parse(t.run(raw(&more)?, session.as_deref_mut()).await?, "getMore")?;
        id = reply.cursor.id;
        out.extend(reply.cursor.batch);
    }
    Ok(out)
}
