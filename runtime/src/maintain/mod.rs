//! The life of a collection after its first write: [`audit`] what is stored, [`adopt`] what
//! other code wrote, [`rekey`] a corrected timestamp key, [`prune`] what the source dropped.
//!
//! All of them stream (one batch of documents in memory at a time, plus one small entry per
//! identity) and are crash-safe by the order of their writes: a document is written under its
//! new id — its old ids recorded in [`LEGACY_IDS_FIELD`] — before the old one is deleted, so a
//! run killed anywhere leaves two copies that the next run merges, never none.

pub(crate) mod adopt;
pub(crate) mod audit;
pub(crate) mod prune;
pub(crate) mod rekey;

use std::collections::HashMap;

use bson::{Bson, Document, RawDocumentBuf};
use serde::de::DeserializeOwned;
use ulid::Ulid;

use crate::content::ContentHash;
use crate::names::{HASH_FIELD, IDENTITY_FIELD};
use crate::stored::same_content;
use crate::traits::NaturalKey;

/// Documents per round trip of a scan: the "O(1) round trips per 10,000 documents".
pub(crate) const SCAN_BATCH: usize = 10_000;

/// How many ids a report keeps per finding.
pub const DEFAULT_SAMPLE: usize = 10;

/// What one stored document is, read as `T`.
pub(crate) enum Seen<T> {
    /// It does not deserialize into `T`.
    Unreadable {
        id: Bson,
        message: String,
    },
    Read(Read<T>),
}

pub(crate) struct Read<T> {
    pub(crate) id: Bson,
    pub(crate) doc: T,
    pub(crate) identity: [u8; 32],
    pub(crate) derived: Ulid,
    pub(crate) hash: ContentHash,
    pub(crate) state: State,
    /// The stored document as read (for adopt, which keeps every field).
    pub(crate) stored: RawDocumentBuf,
}

/// How a readable document stands against the id it derives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// At its derived id, with its identity and content hash.
    Clean,
    /// Clean but for `_nk_hash` (absent or stale): harmless, the next upsert rewrites it. A v1
    /// hash of a type now hashed v2 is not stale: the upsert keeps it too.
    HashDrift,
    /// No `_nk_identity` (written by other code, or released by an unfinished move).
    Legacy,
    /// `_nk_identity` present, but `_id` (or the identity) is not what its fields derive: its
    /// timestamp key (or another key field) was edited by other code.
    IdDrift,
}

impl State {
    /// A natural-key document at its derived id: the one document its identity keeps.
    pub(crate) fn is_at_home(self) -> bool {
        matches!(self, State::Clean | State::HashDrift)
    }
}

/// What a stored document's own fields derive: the one step of a scan that depends on how
/// the key is known. A Rust type ([`Typed`]) reads the document as `T`; a
/// [`KeySpec`](crate::KeySpec) reads the BSON fields it names. Everything after this step —
/// the state, the groups, the report — is shared.
pub(crate) trait Derive {
    /// What adopt hands its policy (`T`, or nothing).
    type Doc;
    /// Whether [`hash_current`](Derive::hash_current) can tell a stale `_nk_hash`: only the
    /// Rust type knows what its content hash covers.
    const CHECKS_HASH: bool;
    /// The document read, its identity digest, the id it derives and a hash of its content
    /// (what tells identical duplicates from differing ones); `Err` says why it cannot be read.
    fn derive(&self, stored: &RawDocumentBuf) -> Result<Derived<Self::Doc>, String>;
    /// Whether the stored `_nk_hash` text is this document's content hash.
    fn hash_current(&self, derived: &Derived<Self::Doc>, stored_hash: &str) -> bool;
}

pub(crate) struct Derived<D> {
    pub(crate) doc: D,
    pub(crate) identity: [u8; 32],
    pub(crate) derived: Ulid,
    pub(crate) hash: ContentHash,
}

/// The key of a `#[derive(NaturalKey)]` type.
pub(crate) struct Typed<T>(std::marker::PhantomData<fn() -> T>);

impl<T> Typed<T> {
    pub(crate) fn new() -> Self {
        Typed(std::marker::PhantomData)
    }
}

impl<T: NaturalKey + DeserializeOwned> Derive for Typed<T> {
    type Doc = T;
    const CHECKS_HASH: bool = true;

    fn derive(&self, stored: &RawDocumentBuf) -> Result<Derived<T>, String> {
        let doc: T = bson::from_slice(stored.as_bytes()).map_err(|e| e.to_string())?;
        let derived = (|| {
            let digest = crate::key::identity_digest(&doc)?;
            let derived = crate::key::ulid_from(doc.__timestamp_ms()?, &digest);
            let hash = doc.content_hash()?;
            Ok::<_, crate::Error>((digest, derived, hash))
        })();
        let (identity, derived, hash) = derived.map_err(|e| e.to_string())?;
        Ok(Derived {
            doc,
            identity,
            derived,
            hash,
        })
    }

    fn hash_current(&self, d: &Derived<T>, stored_hash: &str) -> bool {
        let v1 = || d.doc.__content_hash_v1().map(|h| h.to_string());
        same_content(stored_hash, &d.hash.to_string(), v1)
    }
}

/// Reads one stored document as `T` and derives what it should be.
pub(crate) fn classify<T: NaturalKey + DeserializeOwned>(stored: RawDocumentBuf) -> Seen<T> {
    classify_with(&Typed::<T>::new(), stored)
}

/// Reads one stored document by `key` and derives what it should be.
pub(crate) fn classify_with<K: Derive>(key: &K, stored: RawDocumentBuf) -> Seen<K::Doc> {
    let id = field(&stored, "_id").unwrap_or(Bson::Null);
    let d = match key.derive(&stored) {
        Ok(d) => d,
        Err(message) => return Seen::Unreadable { id, message },
    };
    let identity_text = ContentHash(d.identity).to_string();
    let state = match stored.get(IDENTITY_FIELD).ok().flatten() {
        None => State::Legacy,
        Some(s) if s.as_str() == Some(identity_text.as_str()) && id_is(&id, d.derived) => {
            if !K::CHECKS_HASH {
                State::Clean
            } else {
                match stored.get_str(HASH_FIELD) {
                    Ok(h) if key.hash_current(&d, h) => State::Clean,
                    _ => State::HashDrift,
                }
            }
        }
        Some(_) => State::IdDrift,
    };
    Seen::Read(Read {
        id,
        doc: d.doc,
        identity: d.identity,
        derived: d.derived,
        hash: d.hash,
        state,
        stored,
    })
}

/// A top-level field of a stored document, owned (`None` when absent or unreadable).
pub(crate) fn field(stored: &RawDocumentBuf, name: &str) -> Option<Bson> {
    let value = stored.get(name).ok()??;
    Bson::try_from(value.to_raw_bson()).ok()
}

/// Whether a stored `_id` is this derived id, byte for byte as the upsert compares it (the
/// 26-character uppercase text: a lowercase one is another `_id` to the engine).
pub(crate) fn id_is(id: &Bson, derived: Ulid) -> bool {
    matches!(id, Bson::String(s) if *s == derived.to_string())
}

/// What a scan learned of one identity: enough to tell duplicates apart without keeping the
/// documents. 16 bytes, under a 16-byte key: with the table's own overhead, 1,000,000
/// identities take about 70 MiB.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// The first 8 bytes of the first member's content hash (two contents taken for one need
    /// a 64-bit collision between two documents of one identity).
    pub(crate) first_hash: u64,
    pub(crate) members: u32,
    /// Some member's content differs from the first's.
    pub(crate) differs: bool,
    /// A member sits at the derived id with this identity (clean or hash drift).
    pub(crate) at_home: bool,
}

/// Every identity of a collection, from one scan, keyed by the first 16 bytes of the identity
/// digest (a 128-bit collision would be needed to take two identities for one).
#[derive(Debug, Default)]
pub(crate) struct Groups {
    map: HashMap<u128, Group>,
    /// An `_id` of each duplicated identity (the document that showed the duplicate), for the
    /// report's sample.
    pub(crate) duplicated: HashMap<u128, SmallId>,
}

/// The key of an identity in [`Groups`].
pub(crate) fn key(identity: &[u8; 32]) -> u128 {
    let mut k = [0; 16];
    k.copy_from_slice(&identity[..16]);
    u128::from_be_bytes(k)
}

fn prefix(hash: &ContentHash) -> u64 {
    let mut p = [0; 8];
    p.copy_from_slice(&hash.0[..8]);
    u64::from_be_bytes(p)
}

impl Groups {
    pub(crate) fn add<T>(&mut self, r: &Read<T>) {
        let k = key(&r.identity);
        let (hash, home) = (prefix(&r.hash), r.state.is_at_home());
        match self.map.entry(k) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let g = e.get_mut();
                g.members += 1;
                g.differs |= g.first_hash != hash;
                g.at_home |= home;
                self.duplicated
                    .entry(k)
                    .or_insert_with(|| SmallId::of(&r.id));
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Group {
                    first_hash: hash,
                    members: 1,
                    differs: false,
                    at_home: home,
                });
            }
        }
    }

    pub(crate) fn get_mut(&mut self, identity: &[u8; 32]) -> Option<&mut Group> {
        self.map.get_mut(&key(identity))
    }

    pub(crate) fn get(&self, k: u128) -> Option<&Group> {
        self.map.get(&k)
    }
}

/// An `_id` kept small (a `Bson` is 112 bytes): the ObjectIds and ULID texts most collections
/// hold inline, anything else boxed.
#[derive(Debug, Clone)]
pub(crate) enum SmallId {
    ObjectId([u8; 12]),
    Ulid([u8; 16]),
    Other(Box<Bson>),
}

impl SmallId {
    fn of(id: &Bson) -> Self {
        match id {
            Bson::ObjectId(o) => SmallId::ObjectId(o.bytes()),
            Bson::String(s) => match s.parse::<Ulid>() {
                // Only when the text is the ULID's own form, so it reads back the same.
                Ok(u) if u.to_string() == *s => SmallId::Ulid(u.to_bytes()),
                _ => SmallId::Other(Box::new(id.clone())),
            },
            other => SmallId::Other(Box::new(other.clone())),
        }
    }

    pub(crate) fn to_bson(&self) -> Bson {
        match self {
            SmallId::ObjectId(b) => Bson::ObjectId(bson::oid::ObjectId::from_bytes(*b)),
            SmallId::Ulid(b) => Bson::String(Ulid::from_bytes(*b).to_string()),
            SmallId::Other(b) => (**b).clone(),
        }
    }
}

impl<T> Read<T> {
    /// The document for a policy, and the rest.
    pub(crate) fn split(self) -> (adopt::Candidate<T>, Read<()>) {
        let candidate = adopt::Candidate {
            id: self.id.clone(),
            doc: self.doc,
            at_home: self.state.is_at_home(),
        };
        let rest = Read {
            id: self.id,
            doc: (),
            identity: self.identity,
            derived: self.derived,
            hash: self.hash,
            state: self.state,
            stored: self.stored,
        };
        (candidate, rest)
    }
}

/// The write command a maintenance step sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Insert,
    Update,
    Delete,
}

/// Sends `items` (documents to insert, or `update`/`delete` statements, each for the document
/// with the given id) in commands within the engine's limits. One result per item: `Ok` when
/// it applied to exactly one document. A statement that matched nothing met a document
/// changed since it was read ([`Error::ConcurrentChange`](crate::Error::ConcurrentChange)).
/// Commands whose reply cannot be placed per statement are sent again one statement each.
/// `Err` only for a failure of the whole step (network, ...): every step is safe to repeat.
pub(crate) async fn apply(
    t: &crate::op::Target,
    kind: Kind,
    items: Vec<(Ulid, bson::RawDocumentBuf)>,
) -> Result<Vec<Result<(), crate::Error>>, crate::Error> {
    let limits = t.deployment.limits();
    let max = match kind {
        Kind::Insert => limits.max_documents,
        Kind::Update | Kind::Delete => limits.max_statements,
    };
    let sizes = items.iter().map(|(_, d)| d.as_bytes().len());
    let mut out = Vec::with_capacity(items.len());
    for chunk in crate::op::chunks(sizes, limits.max_command_bytes, max) {
        let part = &items[chunk];
        match send_command(t, kind, part).await? {
            Some(all) => out.extend(all),
            None => {
                for item in part {
                    let one = send_command(t, kind, std::slice::from_ref(item)).await?;
                    out.extend(one.unwrap_or_else(|| vec![Err(changed(t, item.0))]));
                }
            }
        }
    }
    Ok(out)
}

fn changed(t: &crate::op::Target, id: Ulid) -> crate::Error {
    crate::Error::ConcurrentChange {
        collection: t.namespace.clone(),
        id: id.to_string(),
    }
}

/// One command; `None` when its reply does not say what each item did.
async fn send_command(
    t: &crate::op::Target,
    kind: Kind,
    part: &[(Ulid, bson::RawDocumentBuf)],
) -> Result<Option<Vec<Result<(), crate::Error>>>, crate::Error> {
    let docs: Vec<&bson::RawDocumentBuf> = part.iter().map(|(_, d)| d).collect();
    let reply = match kind {
        Kind::Insert => crate::op::insert(t, &docs, None).await,
        Kind::Update => crate::op::update(t, &docs, None).await,
        Kind::Delete => crate::op::delete(t, &docs, None).await,
    };
    let reply = match reply {
        Ok(r) => r,
        Err(e) => {
            let refusal = crate::op::write::command_refusal(e)?;
            return Ok(match part {
                [(id, _)] => Some(vec![Err(refusal_error(t, *id, refusal))]),
                _ => None,
            });
        }
    };
    reply.write_concern(t, part[0].0)?;
    let expected = i64::try_from(part.len()).unwrap_or(i64::MAX);
    if reply.write_errors.is_empty() && (kind == Kind::Insert || reply.n == expected) {
        return Ok(Some(part.iter().map(|_| Ok(())).collect()));
    }
    Ok(match part {
        [(id, _)] => Some(vec![Err(match reply.write_errors.first() {
            Some(e) => refusal_error(t, *id, e.refusal()),
            None => changed(t, *id),
        })]),
        _ if kind == Kind::Insert && reply.write_errors.iter().all(|e| e.index < part.len()) => {
            let mut all: Vec<Result<(), crate::Error>> = part.iter().map(|_| Ok(())).collect();
            for e in &reply.write_errors {
                all[e.index] = Err(refusal_error(t, part[e.index].0, e.refusal()));
            }
            Some(all)
        }
        _ => None,
    })
}

fn refusal_error(t: &crate::op::Target, id: Ulid, refusal: crate::op::Refusal) -> crate::Error {
    refusal.permanent(t, id).unwrap_or_else(|| changed(t, id))
}

/// A command fragment written with `doc!`, as raw BSON.
pub(crate) fn raw(d: &Document) -> Result<bson::RawDocumentBuf, crate::Error> {
    bson::RawDocumentBuf::from_document(d).map_err(crate::Error::serialize::<Document>)
}

/// An `update` statement `{q, u}` (no upsert, one document).
pub(crate) fn statement(q: Document, u: Document) -> Result<bson::RawDocumentBuf, crate::Error> {
    let mut s = bson::RawDocumentBuf::new();
    s.append("q", raw(&q)?);
    s.append("u", raw(&u)?);
    Ok(s)
}

/// A `delete` statement for one document.
pub(crate) fn delete_one(q: Document) -> Result<bson::RawDocumentBuf, crate::Error> {
    let mut s = bson::RawDocumentBuf::new();
    s.append("q", raw(&q)?);
    s.append("limit", 1);
    Ok(s)
}

/// A set-based write over many `_id`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetOp {
    /// Delete them.
    Delete,
    /// Unset `_nk_identity` on them.
    Release,
}

/// Ids per set-based statement (fewer where the engine's command size says so).
const SET_CHUNK: usize = 10_000;

/// One statement per chunk of ids (`{_id: {$in: ids}}`) — FerretDB 1.x scans the collection
/// once per statement whatever its filter, so per-document statements cost a scan each (43 ms
/// apiece at 4,000 documents, measured). There, `$in` is also a linear search per document, so
/// each chunk is one BSON type, sorted, with the range it spans in front (`$gte`/`$lte`,
/// which every id of the chunk satisfies): documents outside the range are rejected before the
/// search. Returns how many documents matched (release) or were deleted.
pub(crate) async fn apply_set(
    t: &crate::op::Target,
    op: SetOp,
    ids: &[Bson],
) -> Result<u64, crate::Error> {
    let mut n = 0;
    for chunk in set_chunks(t, ids) {
        let q = match (t.deployment.scans_every_filter(), &chunk[..]) {
            (true, [lo, .., hi]) if ranged(lo) => {
                bson::doc! {"_id": {"$gte": lo.clone(), "$lte": hi.clone(), "$in": chunk.clone()}}
            }
            _ => bson::doc! {"_id": {"$in": chunk.clone()}},
        };
        let mut s = bson::RawDocumentBuf::new();
        s.append("q", raw(&q)?);
        let reply = match op {
            SetOp::Delete => {
                s.append("limit", 0);
                crate::op::delete(t, &[&s], None).await
            }
            SetOp::Release => {
                let u = bson::doc! {"$unset": {IDENTITY_FIELD: ""}};
                s.append("u", raw(&u)?);
                s.append("multi", true);
                crate::op::update(t, &[&s], None).await
            }
        }
        .map_err(crate::error::classify)?;
        // These documents have no derived id to name: the message names the first of them.
        let failure = |code: i32, message: &str| crate::Error::WriteFailed {
            collection: t.namespace.clone(),
            id: Ulid::nil(),
            code,
            message: format!(
                "{message} (a {op:?} of {} documents from _id {})",
                chunk.len(),
                crate::stored::id_text(&chunk[0])
            ),
        };
        if let Some(w) = &reply.write_concern_error {
            return Err(failure(w.code, &w.errmsg));
        }
        if let Some(e) = reply.write_errors.first() {
            return Err(failure(e.code, &e.errmsg));
        }
        n += u64::try_from(reply.n).unwrap_or(0);
    }
    Ok(n)
}

/// Ids whose type orders by bytes the same way on every engine (ObjectId, string) and so can
/// be bracketed by a range.
fn ranged(id: &Bson) -> bool {
    matches!(id, Bson::ObjectId(_) | Bson::String(_))
}

/// `ids` cut into chunks of at most [`SET_CHUNK`] ids and the engine's command bytes; where
/// ranges are used, each chunk holds one sorted type.
fn set_chunks(t: &crate::op::Target, ids: &[Bson]) -> Vec<Vec<Bson>> {
    let mut groups: [Vec<Bson>; 3] = Default::default();
    for id in ids {
        let g = match id {
            Bson::ObjectId(_) => 0,
            Bson::String(_) => 1,
            _ => 2,
        };
        groups[g].push(id.clone());
    }
    groups[0].sort_by_key(|b| b.as_object_id().map(|o| o.bytes()));
    groups[1].sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    let limit = t.deployment.limits().max_command_bytes / 2;
    let mut out = Vec::new();
    for group in groups {
        let sizes = group.iter().map(|id| 8 + id_bytes(id));
        for r in crate::op::chunks(sizes, limit, SET_CHUNK) {
            out.push(group[r].to_vec());
        }
    }
    out
}

/// The BSON size of an `_id` value (near enough for cutting commands).
fn id_bytes(id: &Bson) -> usize {
    match id {
        Bson::ObjectId(_) => 12,
        Bson::String(s) => s.len() + 5,
        other => bson::to_vec(&bson::doc! {"v": other.clone()}).map_or(64, |v| v.len()),
    }
}
