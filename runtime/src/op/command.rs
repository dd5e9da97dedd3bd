//! The write commands (`insert`, `update`, `delete`): built here, their replies parsed, their
//! refusals sorted (ours to decide again, the user's index, anything else); and `chunks`, which
//! cuts what a write sends to the engine's limits.

use std::ops::Range;

use bson::{Document, RawDocumentBuf};
use serde::Deserialize;

use ulid::Ulid;

use super::answer::{
    classify, refused_as_busy, server_code, shard_key_missing, storage_failed, DUPLICATE_KEY_CODE,
    UNKNOWN_OUTCOME_CODES,
};
use super::{parse, Session, Target};
use crate::deployment::Limits;
use crate::error::Error;
use crate::names::{OUR_FIELDS, OUR_INDEXES};
use crate::raw::{Embedded, ToEmbedded, Value};

/// The reply of an `insert`, `update` or `delete` command (the fields natural-key reads).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WriteReply {
    /// Documents matched (update; our statements never upsert) or deleted (delete).
    #[serde(default)]
    pub(crate) n: i64,
    #[serde(rename = "writeErrors", default)]
    pub(crate) write_errors: Vec<WriteErrorEntry>,
    #[serde(rename = "writeConcernError", default)]
    pub(crate) write_concern_error: Option<WriteConcernFailure>,
}

/// One refused statement or document, at its index in the command.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WriteErrorEntry {
    #[serde(default)]
    pub(crate) index: usize,
    pub(crate) code: i32,
    #[serde(default)]
    pub(crate) errmsg: String,
    #[serde(rename = "keyPattern", default)]
    pub(crate) key_pattern: Option<Document>,
    #[serde(rename = "keyValue", default)]
    pub(crate) key_value: Option<Document>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WriteConcernFailure {
    pub(crate) code: i32,
    #[serde(default)]
    pub(crate) errmsg: String,
}

/// Why the server refused a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A duplicate on `_id` or on one of natural-key's own unique indexes: someone else wrote
    /// this document (or its identity) first — read again and decide again.
    Ours,
    /// A duplicate on one of the user's own unique indexes: permanent.
    UserIndex { index: String, key: String },
    /// A duplicate the engine did not attribute to an index (FerretDB 1.x names none): taken
    /// as ours until a read shows that nothing of ours was in the way (see `write::guard`).
    Unnamed { message: String },
    /// The engine is busy and did not apply the statement (`op::answer::THROTTLE_CODES`): the send
    /// loop sends it again after the wait.
    Throttled { code: i32, message: String },
    /// The engine cannot tell whether it applied the statement
    /// (`op::answer::UNKNOWN_OUTCOME_CODES`, or its storage failed under it:
    /// `op::answer::storage_failed`): the next read decides, as after a lost reply.
    Unknown { code: i32, message: String },
    /// Anything else the server refused (a value the engine cannot store, validation, ...).
    Other { code: i32, message: String },
}

impl WriteReply {
    /// A write concern error: the documents were applied but not acknowledged as asked.
    pub(crate) fn write_concern(&self, target: &Target, id: Ulid) -> Result<(), Error> {
        match &self.write_concern_error {
            Some(w) => Err(Error::WriteFailed {
                collection: target.namespace.clone(),
                id,
                code: w.code,
                message: w.errmsg.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Refusal {
    /// The error for a refusal no further round can change (`None`: a duplicate to decide
    /// again).
    pub(crate) fn permanent(&self, target: &Target, id: Ulid) -> Option<Error> {
        match self {
            Refusal::Ours | Refusal::Unnamed { .. } | Refusal::Unknown { .. } => None,
            Refusal::UserIndex { index, key } => Some(Error::UniqueIndexViolation {
                collection: target.namespace.clone(),
                id,
                index: index.clone(),
                key: key.clone(),
            }),
            Refusal::Throttled { code, message } => Some(Error::Throttled {
                collection: target.namespace.clone(),
                code: *code,
                message: message.clone(),
            }),
            Refusal::Other { code, message } if shard_key_missing(*code, message) => {
                Some(Error::ShardKeyMissing {
                    code: *code,
                    message: message.clone(),
                })
            }
            Refusal::Other { code, message } => Some(Error::WriteFailed {
                collection: target.namespace.clone(),
                id,
                code: *code,
                message: message.clone(),
            }),
        }
    }
}

/// A write command that failed as a whole: a duplicate key is a refusal of its documents
/// (FerretDB 1.x reports some that way, without an index); anything else fails the batch.
pub(crate) fn command_refusal(e: mongodb::error::Error) -> Result<Refusal, Error> {
    match server_code(&e) {
        Some(code @ DUPLICATE_KEY_CODE) => Ok(refusal(code, &e.to_string(), None, None)),
        _ => Err(classify(e)),
    }
}

impl WriteErrorEntry {
    pub(crate) fn refusal(&self) -> Refusal {
        refusal(
            self.code,
            &self.errmsg,
            self.key_pattern.as_ref(),
            self.key_value.as_ref(),
        )
    }
}

/// Sorts a server refusal. Duplicates are told apart by the key pattern the server reports
/// (MongoDB 4.2+, mongo-java-server) or, where an engine omits it, by the index named in the
/// message (`... index: email_1 dup key: { email: "a" }`); one that names neither is
/// [`Refusal::Unnamed`].
pub(crate) fn refusal(
    code: i32,
    message: &str,
    key_pattern: Option<&Document>,
    key_value: Option<&Document>,
) -> Refusal {
    if refused_as_busy(code, message) {
        return Refusal::Throttled {
            code,
            message: message.to_string(),
        };
    }
    if UNKNOWN_OUTCOME_CODES.contains(&code) || storage_failed(code, message) {
        return Refusal::Unknown {
            code,
            message: message.to_string(),
        };
    }
    if code != DUPLICATE_KEY_CODE {
        return Refusal::Other {
            code,
            message: message.to_string(),
        };
    }
    let index_in_message = index_named(message);
    let key_in_message = message
        .split_once("dup key: ")
        .map(|(_, rest)| rest.trim().to_string());
    let (ours, index) = match (key_pattern, index_in_message) {
        (Some(p), name) => (
            p.len() == 1 && p.keys().all(|k| OUR_FIELDS.contains(&k.as_str())),
            name.map_or_else(|| p.to_string(), str::to_string),
        ),
        (None, Some(name)) => (OUR_INDEXES.contains(&name), name.to_string()),
        (None, None) => {
            return Refusal::Unnamed {
                message: message.to_string(),
            }
        }
    };
    if ours {
        return Refusal::Ours;
    }
    let key = match (key_value, key_in_message) {
        (Some(v), _) => v.to_string(),
        (None, Some(k)) => k,
        // FerretDB 2 (DocumentDB) names the index only.
        (None, None) if index_in_message.is_some() => Error::UNNAMED_KEY.to_string(),
        (None, None) => message.to_string(),
    };
    Refusal::UserIndex { index, key }
}

/// The index a duplicate-key message names: MongoDB's and mongo-java-server's
/// `... index: email_1 dup key: { ... }`, or FerretDB 2's (DocumentDB's) `Duplicate key
/// violation on the requested collection: Index 'email_1'`, which names no key value.
fn index_named(message: &str) -> Option<&str> {
    if let Some((_, rest)) = message.split_once("index: ") {
        return rest
            .split_whitespace()
            .next()
            .map(|s| s.trim_end_matches(','));
    }
    let (_, rest) = message.split_once("Index '")?;
    rest.split_once('\'').map(|(name, _)| name)
}

/// Cuts items of the given sizes into consecutive commands of at most `max_bytes` and
/// `max_count` items (an item larger than `max_bytes` travels alone).
pub(crate) fn chunks(
    sizes: impl IntoIterator<Item = usize>,
    max_bytes: usize,
    max_count: usize,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes, mut k) = (0, 0, 0);
    for size in sizes {
        if k > start && (bytes + size > max_bytes || k - start >= max_count.max(1)) {
            out.push(start..k);
            (start, bytes) = (k, 0);
        }
        bytes += size;
        k += 1;
    }
    if start < k {
        out.push(start..k);
    }
    out
}

/// The write commands natural-key sends: each unordered, with the collection's write concern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// `insert` of documents.
    Insert,
    /// `update` of `{q, u, upsert, multi}` statements.
    Update,
    /// `delete` of `{q, limit}` statements.
    Delete,
}

impl Command {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Command::Insert => ("insert", "documents"),
            Command::Update => ("update", "updates"),
            Command::Delete => ("delete", "deletes"),
        }
    }

    /// Items of the given sizes cut into commands of this kind within the engine's limits
    /// (one item each when `one_by_one`): the ranges each command carries.
    pub(crate) fn cut(
        self,
        limits: Limits,
        one_by_one: bool,
        sizes: impl IntoIterator<Item = usize>,
    ) -> Vec<Range<usize>> {
        let max = match self {
            _ if one_by_one => 1,
            Command::Insert => limits.max_documents,
            Command::Update | Command::Delete => limits.max_statements,
        };
        chunks(sizes, limits.max_command_bytes, max)
    }
}

/// A `delete` statement for one document.
pub(crate) fn delete_one(q: Document) -> Result<RawDocumentBuf, Error> {
    let mut s = RawDocumentBuf::new();
    s.append("q", fragment(&q)?);
    s.append("limit", 1);
    Ok(s)
}

/// A command fragment written with `doc!`, as raw BSON.
pub(crate) fn fragment(d: &Document) -> Result<RawDocumentBuf, Error> {
    RawDocumentBuf::from_document(d).map_err(Error::serialize::<Document>)
}

/// An `update` statement `{q, u}` (no upsert, one document).
pub(crate) fn statement(q: Document, u: Document) -> Result<RawDocumentBuf, Error> {
    let mut s = RawDocumentBuf::new();
    s.append("q", fragment(&q)?);
    s.append("u", fragment(&u)?);
    Ok(s)
}

/// The command's bytes: built here and only here.
pub(crate) fn command(
    target: &Target,
    command: Command,
    items: &[impl ToEmbedded],
) -> Result<RawDocumentBuf, mongodb::error::Error> {
    let (name, field) = command.names();
    let items: Vec<Embedded<'_>> = items.iter().map(ToEmbedded::embedded).collect();
    let mut elements = vec![
        (name, Value::Str(&target.name)),
        (field, Value::Docs(&items)),
        ("ordered", Value::Bool(false)),
    ];
    if let Some(wc) = &target.write_concern {
        elements.push(("writeConcern", Value::Doc(wc.as_bytes())));
    }
    crate::raw::doc(&elements).map_err(mongodb::error::Error::custom)
}

/// Sends one command of `items` and parses its reply.
pub(crate) async fn run(
    target: &Target,
    kind: Command,
    items: &[impl ToEmbedded],
    session: Session<'_>,
) -> Result<WriteReply, mongodb::error::Error> {
    let cmd = command(target, kind, items)?;
    parse(target.run(cmd, session).await?, kind.names().0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{IDEMPOTENCY_FIELD, IDENTITY_FIELD};
    use bson::doc;

    /// Citus' coordinator SIGKILLed under a batch: each document refused with `XX000` (2600)
    /// by a backend whose postmaster died. It may have committed; the next read decides.
    #[test]
    fn a_storage_failure_per_document_leaves_the_outcome_unknown() {
        let died = "postmaster was shut down, exiting";
        assert!(matches!(
            refusal(2600, died, None, None),
            Refusal::Unknown { code: 2600, .. }
        ));
        assert!(matches!(
            refusal(1, died, None, None),
            Refusal::Unknown { .. }
        ));
        // The same code for a refusal of the data stays a refusal.
        assert!(matches!(
            refusal(2600, "invalid input syntax", None, None),
            Refusal::Other { code: 2600, .. }
        ));
    }

    #[test]
    fn duplicates_are_sorted_by_key_pattern_then_by_index_name() {
        let ours = [
            doc! {"_id": 1},
            doc! {IDENTITY_FIELD: 1},
            doc! {IDEMPOTENCY_FIELD: 1},
        ];
        for p in &ours {
            assert_eq!(refusal(11000, "", Some(p), None), Refusal::Ours);
        }
        let user = refusal(
            11000,
            "E11000 duplicate key error collection: db.c index: email_1 dup key: { email: \"a\" }",
            Some(&doc! {"email": 1}),
            Some(&doc! {"email": "a"}),
        );
        assert_eq!(
            user,
            Refusal::UserIndex {
                index: "email_1".into(),
                key: "{ \"email\": \"a\" }".into()
            }
        );
        // No pattern: the message decides.
        let msg = "E11000 duplicate key error collection: db.c index: nk_identity dup key: { _nk_identity: \"x\" }";
        assert_eq!(refusal(11000, msg, None, None), Refusal::Ours);
        let msg =
            "E11000 duplicate key error collection: db.c index: email_1 dup key: { email: \"a\" }";
        assert_eq!(
            refusal(11000, msg, None, None),
            Refusal::UserIndex {
                index: "email_1".into(),
                key: "{ email: \"a\" }".into()
            }
        );
        // A compound index that merely includes `_id` is the user's.
        assert!(matches!(
            refusal(11000, "", Some(&doc! {"_id": 1, "email": 1}), None),
            Refusal::UserIndex { .. }
        ));
        // FerretDB 2 (DocumentDB) names the index in quotes, with no key pattern or value.
        let msg = "Duplicate key violation on the requested collection: Index '_id_'";
        assert_eq!(refusal(11000, msg, None, None), Refusal::Ours);
        let msg = "Duplicate key violation on the requested collection: Index 'nk_identity'";
        assert_eq!(refusal(11000, msg, None, None), Refusal::Ours);
        let msg = "Duplicate key violation on the requested collection: Index 'email_u'";
        assert_eq!(
            refusal(11000, msg, None, None),
            Refusal::UserIndex {
                index: "email_u".into(),
                key: "its value".into()
            }
        );
        // FerretDB 1.x names no index.
        let msg = "E11000 duplicate key error collection: db.users";
        assert_eq!(
            refusal(11000, msg, None, None),
            Refusal::Unnamed {
                message: msg.into()
            }
        );
        assert_eq!(
            refusal(2, "bad", None, None),
            Refusal::Other {
                code: 2,
                message: "bad".into()
            }
        );
    }

    #[test]
    fn chunks_respect_bytes_and_counts() {
        assert_eq!(chunks([1, 1, 1, 1, 1], 100, 2), vec![0..2, 2..4, 4..5]);
        assert_eq!(chunks([60, 60, 30], 100, 10), vec![0..1, 1..3]);
        assert_eq!(chunks([200, 1], 100, 10), vec![0..1, 1..2]);
        assert!(chunks([], 100, 10).is_empty());
        assert_eq!(chunks([1, 1], 100, 0), vec![0..1, 1..2]);
    }
}
