//! What a relative update is made of: its operation's identity ([`OpId`]) and its change
//! ([`Change`], paths as data: [`FieldPath`]). The builder is `action::Apply`; the write is
//! `write::relative`'s.

use bson::{Bson, Document};
use ulid::Ulid;

use crate::key::KeyTimestamp;

/// How many operations a document's record keeps at least (it holds between this many and
/// twice as many): an operation older than every one kept is refused as
/// [`Error::OperationExpired`](crate::Error::OperationExpired). Override per call with
/// [`Apply::retain`](crate::Apply::retain).
pub const DEFAULT_RETAINED_OPERATIONS: usize = 256;

/// The identity of one relative update, which the caller carries across retries, restarts and
/// writers: a key (an order id, a message id) and the operation's time, which orders it
/// against the others on the same document when the record is pruned.
///
/// ```
/// use natural_key::{OpId, Ulid};
/// let order = OpId::new("order-1042", 1_764_000_000_000_i64);
/// assert_eq!(order.key(), "order-1042");
/// // An event's random ULID is both: its text, and the time in it.
/// let id = Ulid::from_parts(1_764_000_000_000, 7);
/// assert_eq!(OpId::from(id).at_millis(), 1_764_000_000_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpId {
    key: String,
    at: i128,
}

impl OpId {
    /// The operation `key`, at `at` (any [`KeyTimestamp`]: milliseconds as `i64`, or a
    /// `chrono`/`time`/`jiff` time with their features). Checked when applied: a key that is
    /// empty, longer than 512 bytes or holds a NUL, and a time outside
    /// 1970..=[`MAX_TIMESTAMP_MS`](crate::MAX_TIMESTAMP_MS), are refused with
    /// [`Error::InvalidChange`](crate::Error::InvalidChange).
    pub fn new(key: impl Into<String>, at: impl KeyTimestamp) -> Self {
        OpId {
            key: key.into(),
            at: at.unix_millis(),
        }
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The time, in milliseconds since 1970 (as given; checked when applied).
    pub fn at_millis(&self) -> i128 {
        self.at
    }
}

impl From<Ulid> for OpId {
    fn from(id: Ulid) -> Self {
        OpId {
            key: id.to_string(),
            at: i128::from(id.timestamp_ms()),
        }
    }
}

/// A field path of a [`Change`]: its segments, each a field name (or an array index) taken as
/// data — a `.` or a leading `$` in a segment is refused, never read as a path or an operator.
///
/// ```
/// use natural_key::FieldPath;
/// let warehouse = "north";
/// let p = FieldPath::from(["stock_by_warehouse", warehouse]);
/// assert_eq!(p.segments(), ["stock_by_warehouse", "north"]);
/// assert_eq!(FieldPath::from("stock").segments(), ["stock"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath(Vec<String>);

impl FieldPath {
    /// The segments.
    pub fn segments(&self) -> &[String] {
        &self.0
    }
}

impl From<&str> for FieldPath {
    /// One field name (not split at `.`).
    fn from(name: &str) -> Self {
        FieldPath(vec![name.to_string()])
    }
}

impl From<String> for FieldPath {
    fn from(name: String) -> Self {
        FieldPath(vec![name])
    }
}

impl<const N: usize> From<[&str; N]> for FieldPath {
    fn from(segments: [&str; N]) -> Self {
        FieldPath(segments.iter().map(|s| s.to_string()).collect())
    }
}

impl From<Vec<String>> for FieldPath {
    fn from(segments: Vec<String>) -> Self {
        FieldPath(segments)
    }
}

/// A relative change to one document, as the driver's update operators. Every path must start
/// at a field marked `#[natural_key(relative)]`: upserts never write such a field once the
/// document exists, so they cannot undo or repeat the change.
///
/// ```
/// use natural_key::{bson::doc, Change};
/// let change = Change::new()
///     .inc("stock", -1)
///     .push("reserved", doc! {"order": "order-1042", "qty": 1});
/// assert_eq!(change.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    pub(crate) parts: Vec<(&'static str, FieldPath, Bson)>,
}

macro_rules! operators {
    ($($(#[$doc:meta])* $name:ident => $op:literal),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(mut self, path: impl Into<FieldPath>, value: impl Into<Bson>) -> Self {
            self.parts.push(($op, path.into(), value.into()));
            self
        }
    )*};
}

impl Change {
    /// No change yet.
    pub fn new() -> Self {
        Change::default()
    }

    operators! {
        /// `$inc`: adds `value` (negative to subtract).
        inc => "$inc",
        /// `$mul`: multiplies by `value`.
        mul => "$mul",
        /// `$min`: keeps the smaller of the stored value and `value`.
        min => "$min",
        /// `$max`: keeps the larger of the stored value and `value`.
        max => "$max",
        /// `$set`: a value computed by the caller.
        set => "$set",
        /// `$push`: appends `value` to an array.
        push => "$push",
        /// `$addToSet`: appends `value` unless the array holds it.
        add_to_set => "$addToSet",
        /// `$pull`: removes every element equal to `value`.
        pull => "$pull",
    }

    /// `$unset`: removes the field.
    pub fn unset(mut self, path: impl Into<FieldPath>) -> Self {
        self.parts
            .push(("$unset", path.into(), Bson::String(String::new())));
        self
    }

    /// How many operators the change holds.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether it holds none (applying it only records the operation).
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
}

/// The change as one update document: an operator per kind, in the order first used.
pub(crate) fn operators(change: &Change) -> Document {
    let mut by_op: Vec<(&str, Document)> = Vec::new();
    for (op, path, value) in &change.parts {
        let at = match by_op.iter().position(|(o, _)| o == op) {
            Some(at) => at,
            None => {
                by_op.push((op, Document::new()));
                by_op.len() - 1
            }
        };
        by_op[at].1.insert(path.0.join("."), value.clone());
    }
    by_op
        .into_iter()
        .map(|(op, fields)| (op.to_string(), Bson::Document(fields)))
        .collect()
}
