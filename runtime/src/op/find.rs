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

/// A streaming read of a whole result: one `find`, then a `getMore` per batch, each batch
/// handed out before the next is asked for, so memory holds one batch at most.
pub(crate) struct Scan<'t> {
    t: &'t Target,
    batch_size: i32,
    state: ScanState,
}

enum ScanState {
    Start(RawDocumentBuf),
    More(i64),
    Done,
}

impl<'t> Scan<'t> {
    /// `filter`, with only `fields` projected (`None`: whole documents), `batch_size`
    /// documents per round trip; in `_id` order, which every engine can give from its index.
    pub(crate) fn new(
        t: &'t Target,
        filter: RawDocumentBuf,
        fields: Option<&[&str]>,
        batch_size: usize,
    ) -> Self {
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
        let batch_size = i32::try_from(batch_size.max(1)).unwrap_or(i32::MAX);
        cmd.append("batchSize", batch_size);
        Scan {
            t,
            batch_size,
            state: ScanState::Start(cmd),
        }
    }

    /// The next batch, or `None` at the end.
    pub(crate) async fn next<T: DeserializeOwned>(
        &mut self,
    ) -> Result<Option<Vec<T>>, mongodb::error::Error> {
        let reply: CursorReply<T> = match std::mem::replace(&mut self.state, ScanState::Done) {
            ScanState::Done => return Ok(None),
            ScanState::Start(cmd) => parse(self.t.run(cmd, None).await?, "find")?,
            ScanState::More(id) => {
                let more = doc! {
                    "getMore": id,
                    "collection": self.t.name.as_str(),
                    "batchSize": self.batch_size,
                };
                parse(self.t.run(raw(&more)?, None).await?, "getMore")?
            }
        };
        if reply.cursor.id != 0 {
            self.state = ScanState::More(reply.cursor.id);
        }
        Ok(Some(reply.cursor.batch))
    }
}
