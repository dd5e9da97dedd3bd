//! `find` + `getMore`, to the primary, in the caller's session.

use bson::{doc, Bson, RawDocument, RawDocumentBuf};
use mongodb::error::ErrorKind;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::answer::{classify, overloaded, server_code, throttle, CURSOR_NOT_FOUND};
use super::{encode, parse, Session, Target};
use crate::error::Error;
use crate::names::{DELETED_FIELD, HASH_FIELD, IDENTITY_FIELD, VERSION_FIELD, WRITE_FIELD};
use crate::retry::Attempts;

/// What the guard reads of a stored [`NaturalKey`](crate::NaturalKey) document, under the
/// frozen stored names (`IDENTITY_FIELD`, `HASH_FIELD`, `WRITE_FIELD`).
#[derive(Debug, Clone)]
pub(crate) struct StoredIdentity {
    pub(crate) id: Bson,
    pub(crate) identity: Option<Bson>,
    pub(crate) hash: Option<Bson>,
    pub(crate) token: Option<Bson>,
    /// `_nk_version`, for a versioned document.
    pub(crate) version: Option<Bson>,
    /// A tombstone (`_nk_deleted` set).
    pub(crate) deleted: bool,
}

impl StoredIdentity {
    pub(crate) const PROJECTION: &'static [&'static str] = &[
        "_id",
        IDENTITY_FIELD,
        HASH_FIELD,
        WRITE_FIELD,
        VERSION_FIELD,
        DELETED_FIELD,
    ];

    /// Read off a row as the engine sent it: four fields, no `Document` tree in between.
    /// `Err` for a row that is not BSON or has no `_id`; a field of ours that is `null` is
    /// taken as absent.
    pub(crate) fn of_row(row: &RawDocument) -> Result<Self, String> {
        let (mut id, mut identity, mut hash, mut token) = (None, None, None, None);
        let (mut version, mut deleted) = (None, None);
        // One pass over the row (a lookup by name walks it from the start each time); the
        // first of a repeated name counts, as for a lookup.
        for element in row {
            let (name, value) = element.map_err(|e| e.to_string())?;
            let slot = match name {
                "_id" => &mut id,
                IDENTITY_FIELD => &mut identity,
                HASH_FIELD => &mut hash,
                WRITE_FIELD => &mut token,
                VERSION_FIELD => &mut version,
                DELETED_FIELD => &mut deleted,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(Bson::try_from(value.to_raw_bson()).map_err(|e| e.to_string())?);
            }
        }
        let ours = |v: Option<Bson>| v.filter(|v| *v != Bson::Null);
        Ok(StoredIdentity {
            id: id.ok_or("a stored document without `_id`")?,
            identity: ours(identity),
            hash: ours(hash),
            token: ours(token),
            version: ours(version),
            deleted: ours(deleted).is_some(),
        })
    }
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
    let mut cmd = command(target, filter, fields);
    cmd.append("batchSize", read_batch(target));
    cursor(target, cmd, tries, session).await
}

/// The guard's read: what is stored of the documents matching `filter` (at most `limit`).
///
/// Read through the driver's cursor, which hands each row over as the bytes the engine sent;
/// [`cursor`] gets every reply as a `Document` tree and parses that again into rows, which
/// was a third of the client's time in an unchanged re-ingest (measured with `perf`,
/// docs/performance.md). The guard reads every document a batch writes, so it takes the
/// cheaper path.
///
/// A `find` refused as busy is sent again, as by [`cursor`]. A guard read asks for its whole
/// result in one batch ([`Limits::read_batch`](crate::Limits)); where it needs `getMore`s
/// (a reply over 16 MiB, or a smaller `read_batch`), the driver sends them, and after one that
/// fails transiently (dropped cursor, overload, throttle) the read is done again by
/// [`cursor`], whose throttled `getMore`s are sent again in place: restarting a read of many
/// batches at each throttle would never end on an engine that keeps throttling.
pub(crate) async fn find_identities(
    target: &Target,
    filter: RawDocumentBuf,
    limit: Option<i64>,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Vec<StoredIdentity>, Error> {
    let mut cmd = command(target, filter, Some(StoredIdentity::PROJECTION));
    if let Some(limit) = limit {
        cmd.append("limit", limit);
    }
    let batch = read_batch(target);
    cmd.append("batchSize", batch);
    let batch = u32::try_from(batch).unwrap_or(u32::MAX);
    let mut streak = 0;
    loop {
        let read = match session.as_deref_mut() {
            Some(s) => rows_in(target, &cmd, batch, s).await,
            None => rows(target, &cmd, batch).await,
        };
        let (e, opened) = match read {
            Ok(rows) => return Ok(rows),
            Err(failure) => failure,
        };
        // Refused before a cursor was opened: the `find` ran or not as the error says. Lost
        // after: the driver's `getMore` may have moved the cursor, so the read starts over.
        let again = match opened {
            false => throttle(&target.namespace, &e, true),
            true if server_code(&e) == Some(CURSOR_NOT_FOUND) || overloaded(&e) => {
                Some(classify(e.clone()))
            }
            true => throttle(&target.namespace, &e, false),
        };
        let Some(again) = again else {
            return Err(classify(e));
        };
        streak += 1;
        tries.resend(again, streak).await?;
        if opened {
            let found: Vec<bson::Document> = cursor(target, cmd, tries, session).await?;
            let of = |d: &bson::Document| {
                row(&RawDocumentBuf::from_document(d).map_err(mongodb::error::Error::custom)?)
            };
            return found.iter().map(|d| of(d).map_err(classify)).collect();
        }
    }
}

/// Every row of a guard read, without a caller's session: the driver's cursor keeps its
/// `getMore`s in the session of its `find`. `Err` with whether the cursor was opened.
async fn rows(
    target: &Target,
    cmd: &RawDocumentBuf,
    batch: u32,
) -> Result<Vec<StoredIdentity>, (mongodb::error::Error, bool)> {
    let mut cursor = open(target, cmd, batch).await.map_err(|e| (e, false))?;
    let mut out = Vec::new();
    while cursor.advance().await.map_err(|e| (e, true))? {
        out.push(row(cursor.current()).map_err(|e| (e, true))?);
    }
    Ok(out)
}

/// [`rows`] in the caller's session.
async fn rows_in(
    target: &Target,
    cmd: &RawDocumentBuf,
    batch: u32,
    session: &mut mongodb::ClientSession,
) -> Result<Vec<StoredIdentity>, (mongodb::error::Error, bool)> {
    let mut cursor = open(target, cmd, batch)
        .session(&mut *session)
        .await
        .map_err(|e| (e, false))?;
    let mut out = Vec::new();
    while cursor.advance(session).await.map_err(|e| (e, true))? {
        out.push(row(cursor.current()).map_err(|e| (e, true))?);
    }
    Ok(out)
}

/// The driver's cursor command of a guard read, to the primary.
fn open<'a>(
    target: &'a Target,
    cmd: &RawDocumentBuf,
    batch: u32,
) -> mongodb::action::RunCursorCommand<'a> {
    target
        .db
        .run_raw_cursor_command(cmd.clone())
        .selection_criteria(super::primary())
        .batch_size(batch)
}

/// A guard read's row; one that does not parse is a driver-level error (the engine answered
/// something natural-key cannot read).
fn row(raw: &RawDocument) -> Result<StoredIdentity, mongodb::error::Error> {
    StoredIdentity::of_row(raw).map_err(|e| {
        mongodb::error::Error::custom(format!("unexpected `find` reply from the server: {e}"))
    })
}

/// The batch size of a read natural-key keeps whole ([`Limits::read_batch`](crate::Limits)).
fn read_batch(target: &Target) -> i64 {
    i64::try_from(target.deployment.limits().read_batch.max(1)).unwrap_or(i64::MAX)
}

/// A `find` of `filter`, with only `fields` projected (`None`: whole documents): every read
/// natural-key sends starts here.
pub(crate) fn command(
    target: &Target,
    filter: RawDocumentBuf,
    fields: Option<&[&str]>,
) -> RawDocumentBuf {
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
/// A command the engine refuses as busy (`op::answer::THROTTLE_CODES`) is sent again where it
/// failed — the same `find`, the same `getMore` on its cursor — after the wait it names, within
/// `tries` ([`Attempts::resend`]): the read goes on, and a large one finishes on an engine
/// that refuses some of its commands. A cursor the engine drops (CursorNotFound) is read
/// again from the start, within the same budget.
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
    // Cursors the engine dropped in a row: the read starts over, without what it had read.
    let mut dropped = 0;
    'read: loop {
        let reply = send(target, &cmd, true, tries, session.as_deref_mut()).await?;
        let reply: CursorReply<T> = parse(reply, "cursor").map_err(classify)?;
        let (mut id, mut out) = (reply.cursor.id, reply.cursor.batch);
        while id != 0 {
            // With its batch size: mongo-java-server refuses a `getMore` without one
            // ("Illegal number to return: 0").
            let more = encode(&doc! {
                "getMore": id,
                "collection": target.name.as_str(),
                "batchSize": read_batch(target),
            })
            .map_err(classify)?;
            // A `getMore` that may have run moved its cursor on: sent again, it would skip a
            // batch. Refused unrun, it is sent again; dropped, or overloaded without saying it
            // did not run, the read starts over.
            let reply = match send(target, &more, false, tries, session.as_deref_mut()).await {
                Err(Error::Transient(e))
                    if server_code(&e) == Some(CURSOR_NOT_FOUND) || overloaded(&e) =>
                {
                    dropped += 1;
                    tries.resend(Error::Transient(e), dropped).await?;
                    continue 'read;
                }
                reply => reply?,
            };
            let reply: CursorReply<T> = parse(reply, "getMore").map_err(classify)?;
            id = reply.cursor.id;
            out.extend(reply.cursor.batch);
        }
        return Ok(out);
    }
}

/// One command of a read, sent until it is answered: again after each throttle, as long as
/// `tries` allow. `rerunnable`: the command changes nothing if it ran (a `find`; not a
/// `getMore`, which moves its cursor), so any overload error sends it again.
async fn send(
    target: &Target,
    cmd: &RawDocumentBuf,
    rerunnable: bool,
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<bson::Document, Error> {
    let mut streak = 0;
    loop {
        match target.run(cmd.clone(), session.as_deref_mut()).await {
            Ok(reply) => return Ok(reply),
            Err(e) => match throttle(&target.namespace, &e, rerunnable) {
                Some(busy) => {
                    streak += 1;
                    tries.resend(busy, streak).await?;
                }
                None => return Err(classify(e)),
            },
        }
    }
}

/// A streaming read of a whole result through the driver's cursor (`find`, then `getMore` as
/// batches run out), to the primary, in `_id` order: documents are handed out raw, as the
/// server sent them, so memory holds the driver's current batch and the caller's, never the
/// result.
///
/// A cursor lost to a transient error (CursorNotFound after an engine restarted or an idle
/// timeout, a connection cut, an overloaded `getMore`) is read on from where it was: the scan
/// opens again after the last `_id` it handed out, so no document is skipped or handed out
/// twice. `_id` order costs nothing on the engines measured (100,000 documents: 0.7 s sorted
/// against 2.1 s unsorted on FerretDB 2 / DocumentDB, which reads it off the primary key; the
/// same either way on FerretDB 1.24).
pub(crate) struct Scan {
    target: Target,
    filter: RawDocumentBuf,
    fields: Option<Vec<String>>,
    batch_size: u32,
    cursor: mongodb::Cursor<bson::Document>,
    /// Where the scan is: after the `_id` of the last document handed out.
    last: Position,
    /// Cursors lost in a row (dropped, cut off, overloaded), with no document read in
    /// between.
    dropped: u32,
}

/// Cursors dropped in a row before a scan gives up: an engine that drops every cursor.
const MAX_DROPPED: u32 = 10;

impl Scan {
    /// `filter`, with only `fields` projected (`None`: whole documents), `batch_size`
    /// documents per round trip.
    pub(crate) async fn open(
        target: &Target,
        filter: RawDocumentBuf,
        fields: Option<&[&str]>,
        batch_size: usize,
    ) -> Result<Self, mongodb::error::Error> {
        let batch_size = u32::try_from(batch_size.max(1)).unwrap_or(u32::MAX);
        let fields: Option<Vec<String>> = fields.map(|f| f.iter().map(|f| f.to_string()).collect());
        let cursor = Self::cursor(target, filter.clone(), fields.as_deref(), batch_size).await?;
        Ok(Scan {
            target: target.clone(),
            filter,
            fields,
            batch_size,
            cursor,
            last: Position::Start,
            dropped: 0,
        })
    }

    async fn cursor(
        target: &Target,
        filter: RawDocumentBuf,
        fields: Option<&[String]>,
        batch_size: u32,
    ) -> Result<mongodb::Cursor<bson::Document>, mongodb::error::Error> {
        let fields: Option<Vec<&str>> = fields.map(|f| f.iter().map(String::as_str).collect());
        let mut cmd = command(target, filter, fields.as_deref());
        let mut sort = RawDocumentBuf::new();
        sort.append("_id", 1);
        cmd.append("sort", sort);
        cmd.append("batchSize", i64::from(batch_size));
        target
            .db
            .run_raw_cursor_command(cmd)
            .selection_criteria(super::primary())
            .batch_size(batch_size)
            .await
    }

    /// Up to `n` more documents; empty at the end.
    pub(crate) async fn next_batch(
        &mut self,
        n: usize,
    ) -> Result<Vec<RawDocumentBuf>, mongodb::error::Error> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.cursor.advance().await {
                Ok(true) => {
                    let doc = self.cursor.current().to_raw_document_buf();
                    let id = doc.get("_id").ok().flatten();
                    self.last = match id.and_then(|id| id.to_raw_bson().try_into().ok()) {
                        Some(id) => Position::After(id),
                        None => Position::Unknown,
                    };
                    self.dropped = 0;
                    out.push(doc);
                }
                Ok(false) => break,
                // Dropped (CursorNotFound), cut off, or overloaded with the cursor maybe moved
                // on: read on from the last `_id` handed out, which is exact whatever the
                // cursor did.
                Err(e) if classify(e.clone()).is_transient() && self.dropped < MAX_DROPPED => {
                    self.dropped += 1;
                    let Some(filter) = self.after_last()? else {
                        return Err(e);
                    };
                    self.cursor = Self::cursor(
                        &self.target,
                        filter,
                        self.fields.as_deref(),
                        self.batch_size,
                    )
                    .await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The scan's filter, narrowed to what sorts after the last `_id` handed out: greater
    /// within its type (the engine compares within one type only), or of a type that does
    /// not sort at or before it — said as "not of these types", so that a type none of the
    /// engines can name (MaxKey, JavaScript, ...) is still included. `None` when the last
    /// `_id` leaves no such filter (see [`types_through`]) or was not read.
    fn after_last(&self) -> Result<Option<RawDocumentBuf>, mongodb::error::Error> {
        let last = match &self.last {
            Position::Start => return Ok(Some(self.filter.clone())),
            Position::Unknown => return Ok(None),
            Position::After(last) => last,
        };
        let Some(through) = types_through(last) else {
            return Ok(None);
        };
        // NaN sorts first among numbers and is greater than nothing: every other number
        // comes after it.
        let within = match last {
            Bson::Double(x) if x.is_nan() => doc! {"$gte": f64::NEG_INFINITY},
            Bson::Decimal128(d) if d.to_string().contains("NaN") => {
                doc! {"$gte": f64::NEG_INFINITY}
            }
            _ => doc! {"$gt": last.clone()},
        };
        let after = doc! {"$or": [
            {"_id": within},
            {"_id": {"$not": {"$type": through}}},
        ]};
        let mut and = bson::RawArrayBuf::new();
        and.push(self.filter.clone());
        and.push(encode(&after)?);
        let mut filter = RawDocumentBuf::new();
        filter.append("$and", and);
        Ok(Some(filter))
    }
}

/// Where a scan is: at its start, after an `_id`, or lost (an `_id` it could not read).
enum Position {
    Start,
    After(Bson),
    Unknown,
}

/// The `$type` names of `id`'s type and of every type that sorts before it, in MongoDB's
/// comparison order (null, numbers, strings, objects, binary data, ObjectId, booleans,
/// dates, timestamps, regular expressions), as FerretDB 1.24 and 2.5 and mongo-java-server
/// all name them; `None` for a type outside that list (a symbol, MinKey, ...), which a scan
/// cannot resume after.
fn types_through(id: &Bson) -> Option<Vec<&'static str>> {
    const ORDER: [&str; 10] = [
        "null",
        "number",
        "string",
        "object",
        "binData",
        "objectId",
        "bool",
        "date",
        "timestamp",
        "regex",
    ];
    let at = match id {
        Bson::Null => 0,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 1,
        Bson::String(_) => 2,
        Bson::Document(_) => 3,
        Bson::Binary(_) => 4,
        Bson::ObjectId(_) => 5,
        Bson::Boolean(_) => 6,
        Bson::DateTime(_) => 7,
        Bson::Timestamp(_) => 8,
        Bson::RegularExpression(_) => 9,
        _ => return None,
    };
    Some(ORDER[..=at].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a resumed scan excludes: the last `_id`'s type and the ones sorting before it;
    /// an `_id` of a type the engines cannot all name is no place to resume from.
    #[test]
    fn a_scan_resumes_past_the_types_at_or_before_its_last_id() {
        assert_eq!(
            types_through(&Bson::String("a".into())),
            Some(vec!["null", "number", "string"])
        );
        assert_eq!(types_through(&Bson::Int64(5)), Some(vec!["null", "number"]));
        assert_eq!(
            types_through(&Bson::ObjectId(bson::oid::ObjectId::new())).map(|t| t.len()),
            Some(6)
        );
        assert_eq!(types_through(&Bson::MaxKey), None);
        assert_eq!(types_through(&Bson::Symbol("s".into())), None);
    }

    /// A guard read's row, read off the raw reply: what serde read before (a `null` of ours is
    /// absent, `_id` is required, other fields are ignored).
    #[test]
    fn a_row_reads_its_four_fields_off_the_raw_reply() {
        let raw = |d: bson::Document| RawDocumentBuf::from_document(&d).unwrap();
        let row =
            raw(doc! {"x": 1, "_id": "a", "_nk_identity": "i", "_nk_hash": "h", "_nk_write": "t"});
        let s = StoredIdentity::of_row(&row).unwrap();
        assert_eq!(s.id, Bson::String("a".into()));
        assert_eq!(s.identity, Some(Bson::String("i".into())));
        assert_eq!(s.hash, Some(Bson::String("h".into())));
        assert_eq!(s.token, Some(Bson::String("t".into())));
        let s = StoredIdentity::of_row(&raw(doc! {"_id": 7, "_nk_hash": null})).unwrap();
        assert_eq!(
            (s.id, s.identity, s.hash, s.token),
            (Bson::Int32(7), None, None, None)
        );
        assert!(StoredIdentity::of_row(&raw(doc! {"_nk_identity": "i"})).is_err());
    }
}
