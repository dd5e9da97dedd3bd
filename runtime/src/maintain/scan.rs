//! The scan half of maintenance: what one stored document is against the id it derives
//! ([`Seen`], [`State`]), read through a [`Derive`] (a Rust type, or a key spec), and every
//! identity of a collection gathered from one scan ([`Groups`]).

use std::collections::HashMap;

use bson::{Bson, RawDocumentBuf};
use serde::de::DeserializeOwned;
use ulid::Ulid;

use crate::content::ContentHash;
use crate::keyspec::KeySpec;
use crate::names::{DELETED_FIELD, HASH_FIELD, IDENTITY_FIELD, VERSION_FIELD};
use crate::stored::same_content;
use crate::traits::NaturalKey;
use bson::RawBsonRef;

/// What one stored document is, read as `T`.
pub(crate) enum Seen<T> {
    /// It does not deserialize into `T`.
    Unreadable {
        id: Bson,
        message: String,
    },
    Read(Read<T>),
    /// A tombstone: what a versioned delete left of a document.
    Tombstone {
        id: Bson,
    },
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
    /// The version its fields give (a versioned type or spec), and whether `_nk_version`
    /// stores exactly it.
    pub(crate) version: Option<i64>,
    pub(crate) version_stored: bool,
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
    pub(crate) version: Option<i64>,
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
            let (derived, digest) = crate::traits::derive_key(&doc)?;
            let hash = doc.content_hash()?;
            let version = doc.__version()?;
            Ok::<_, crate::Error>((digest, derived, hash, version))
        })();
        let (identity, derived, hash, version) = derived.map_err(|e| e.to_string())?;
        Ok(Derived {
            doc,
            identity,
            derived,
            hash,
            version,
        })
    }

    fn hash_current(&self, d: &Derived<T>, stored_hash: &str) -> bool {
        let v1 = || d.doc.__content_hash_v1().map(|h| h.to_string());
        same_content(stored_hash, &d.hash.to_string(), v1)
    }
}

/// A document described at run time: its hash is not compared (it has no type whose hash
/// could have drifted), so [`AuditReport::hash_checked`](crate::AuditReport::hash_checked) is false.
impl Derive for KeySpec {
    type Doc = ();
    const CHECKS_HASH: bool = false;

    fn derive(&self, stored: &RawDocumentBuf) -> Result<Derived<()>, String> {
        let (id, identity) = KeySpec::derive(self, stored).map_err(|e| e.to_string())?;
        Ok(Derived {
            doc: (),
            identity: identity.0,
            derived: id,
            hash: self.content_hash(stored).map_err(|e| e.to_string())?,
            version: self.version_of(stored).map_err(|e| e.to_string())?,
        })
    }

    fn hash_current(&self, _: &Derived<()>, _: &str) -> bool {
        true
    }
}

/// Reads one stored document as `T` and derives what it should be.
pub(crate) fn inspect<T: NaturalKey + DeserializeOwned>(stored: RawDocumentBuf) -> Seen<T> {
    inspect_with(&Typed::<T>::new(), stored)
}

/// Reads one stored document by `key` and derives what it should be.
pub(crate) fn inspect_with<K: Derive>(key: &K, stored: RawDocumentBuf) -> Seen<K::Doc> {
    let id = field(&stored, "_id").unwrap_or(Bson::Null);
    if !matches!(stored.get(DELETED_FIELD), Ok(None | Some(RawBsonRef::Null))) {
        return Seen::Tombstone { id };
    }
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
    let version_stored = match (d.version, stored.get(VERSION_FIELD)) {
        (Some(v), Ok(Some(RawBsonRef::Int64(s)))) => s == v,
        (Some(v), Ok(Some(RawBsonRef::Int32(s)))) => i64::from(s) == v,
        (Some(_), _) => false,
        (None, _) => true,
    };
    Seen::Read(Read {
        id,
        doc: d.doc,
        identity: d.identity,
        derived: d.derived,
        hash: d.hash,
        state,
        stored,
        version: d.version,
        version_stored,
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
