//! The guarded-upsert decision, once, without I/O: from what is being written, what is stored
//! under its identity and what this call already sent for it, to what to do next.
//!
//! Single and batch upserts both run every document through [`decide`] in rounds: read the
//! stored identities, decide, send, and decide again for whatever the engine refused.

use bson::Bson;

use super::mode::WriteMode;
use crate::outcome::UpsertOutcome;
use crate::stored::same_content;
use ulid::Ulid;

/// What is stored under the document's identity, as the guard read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stored<'a> {
    pub(crate) id: &'a Bson,
    pub(crate) hash: Option<&'a Bson>,
    pub(crate) token: Option<&'a str>,
    /// `_nk_version` as stored (absent: a document written without a version).
    pub(crate) version: Option<&'a Bson>,
    /// A tombstone: the document was deleted at `version`.
    pub(crate) deleted: bool,
}

impl Stored<'_> {
    /// The stored version, if it is one (an integer); anything else is no version.
    fn number(&self) -> Option<i64> {
        match self.version {
            Some(Bson::Int64(v)) => Some(*v),
            Some(Bson::Int32(v)) => Some(i64::from(*v)),
            _ => None,
        }
    }
}

/// What is being written: a document or, for a versioned delete, its tombstone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Incoming<'a> {
    pub(crate) id: Ulid,
    pub(crate) id_text: &'a str,
    pub(crate) hash: &'a str,
    pub(crate) version: Option<i64>,
    pub(crate) tombstone: bool,
    /// Which documents the call may create or change.
    pub(crate) mode: WriteMode,
}

/// What a write makes of the document once it applies: the outcome it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// It creates the document: an insert, or an update that brings a tombstone back.
    Inserted,
    /// It changes the stored content.
    Updated,
    /// It records a newer version of the same content (or raises a tombstone's version).
    Unchanged,
}

impl Effect {
    pub(crate) fn outcome(self, id: Ulid) -> UpsertOutcome {
        match self {
            Effect::Inserted => UpsertOutcome::Inserted(id),
            Effect::Updated => UpsertOutcome::Updated(id),
            Effect::Unchanged => UpsertOutcome::Unchanged(id),
        }
    }
}

/// What this call already did with the document in an earlier round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// An `insert` the engine refused as a duplicate of `_id` or of our indexes: certainly not
    /// applied.
    Refused,
    /// A document or statement whose fate no reply settled (a failed command, a lost reply
    /// the policy retried), stamped with `token`; `effect`: what it makes of the document
    /// (only an insert, or an update of a tombstone, creates one: updates never upsert).
    Uncertain { token: String, effect: Effect },
}

/// What to do with the document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action<'a> {
    /// Nothing stored: `insert` it (the unique indexes are the check). Also after a write of
    /// ours whose fate is unknown: it was not applied, or what it stored is gone. Only an
    /// insert creates, so an `Inserted` is never claimed for a document another writer made.
    Insert,
    /// Nothing stored under the identity, but an earlier round's insert was refused: a
    /// document with this `_id` but no identity exists (written by other code), or the
    /// refusing one was deleted since. Update by `_id` without upserting, which adopts the
    /// former; for the latter the next round inserts.
    AdoptById,
    /// Update (without upserting), only if the stored hash is still `stored_hash` and, for a
    /// versioned write, the stored version still `stored_version` (the filter is what orders
    /// racing versions: a write that finds either changed matches nothing and decides again).
    Update {
        stored_hash: Option<&'a Bson>,
        stored_version: Option<&'a Bson>,
        effect: Effect,
    },
    /// Settled without a write.
    Done(UpsertOutcome),
    /// Stored under another `_id`: the timestamp key changed. Refuse; write nothing.
    Fork,
    /// Stored at this version with other content. Refuse; write nothing.
    Conflict(i64),
}

/// The decision. `hash_v1` gives, for a type hashed v2, its v1 hash, which counts as the same
/// content: asked only when a stored hash is not `hash`, so a type hashed v2 walks its v1
/// encoding for the documents still stored under a v1 hash alone, not for every document it
/// writes.
///
/// With a version (docs/id-scheme.md, "Versions and tombstones"): a stored version above the
/// incoming one is [`Stale`](UpsertOutcome::Stale); the same version is unchanged with the
/// same content and a conflict with other content; a lower one, or none (a document written
/// before the version was declared, or by other code), is overwritten — with the same content
/// only its version is recorded, reported unchanged. A tombstone at or above the version is
/// stale; below it the write brings the document back (`Inserted`).
pub(crate) fn decide<'a>(
    new: Incoming<'_>,
    hash_v1: impl FnOnce() -> Option<String>,
    stored: Option<Stored<'a>>,
    sent: Option<&Sent>,
) -> Action<'a> {
    if new.tombstone {
        return decide_delete(new, stored, sent);
    }
    let missing = Action::Done(UpsertOutcome::Missing(new.id));
    let Some(stored) = stored else {
        if new.mode == WriteMode::UpdateOnly {
            return missing;
        }
        return match sent {
            Some(Sent::Refused) => Action::AdoptById,
            None | Some(Sent::Uncertain { .. }) => Action::Insert,
        };
    };
    match new.mode {
        // A tombstone is no document to update, and bringing it back would create one.
        WriteMode::UpdateOnly if stored.deleted => return missing,
        // Left alone — unless it is this call's own insert, whose reply was lost.
        WriteMode::InsertOnly if !stored.deleted => {
            let existed = UpsertOutcome::Existed(new.id);
            return Action::Done(ours_or(new.id, stored, sent, existed));
        }
        _ => {}
    }
    let (v, s) = (new.version, stored.number());
    let newer_stored = v.is_some_and(|v| s.is_some_and(|s| s >= v));
    if stored.id.as_str() != Some(new.id_text) {
        // A tombstone under another id that is not older: this version is gone already.
        if stored.deleted && newer_stored {
            return Action::Done(UpsertOutcome::Stale(new.id));
        }
        return Action::Fork;
    }
    let update = |effect| Action::Update {
        stored_hash: stored.hash,
        stored_version: stored.version,
        effect,
    };
    if stored.deleted {
        return match newer_stored {
            true => Action::Done(UpsertOutcome::Stale(new.id)),
            false => update(Effect::Inserted),
        };
    }
    if let (Some(v), Some(s)) = (v, s) {
        if s > v {
            return Action::Done(UpsertOutcome::Stale(new.id));
        }
    }
    let stored_hash = stored.hash.and_then(Bson::as_str);
    if stored_hash.is_some_and(|h| same_content(h, new.hash, hash_v1)) {
        if v.is_some() && s != v {
            return update(Effect::Unchanged);
        }
        let unchanged = UpsertOutcome::Unchanged(new.id);
        return Action::Done(ours_or(new.id, stored, sent, unchanged));
    }
    match v {
        Some(v) if s == Some(v) => Action::Conflict(v),
        _ => update(Effect::Updated),
    }
}

/// A versioned delete: its tombstone replaces a stored document at or below its version
/// (`Updated`: the document is deleted), raises an older tombstone (`Unchanged`), or is
/// inserted where nothing is stored (`Inserted`), so that a later write of an older version is
/// stale. A newer stored version makes the delete stale.
fn decide_delete<'a>(
    new: Incoming<'_>,
    stored: Option<Stored<'a>>,
    sent: Option<&Sent>,
) -> Action<'a> {
    let Some(stored) = stored else {
        return Action::Insert;
    };
    if stored.id.as_str() != Some(new.id_text) {
        // The identity is stored under another id: no document of this key to delete.
        return Action::Done(UpsertOutcome::Unchanged(new.id));
    }
    let (v, s) = (new.version, stored.number());
    let update = |effect| Action::Update {
        stored_hash: stored.hash,
        stored_version: stored.version,
        effect,
    };
    match (stored.deleted, s.zip(v)) {
        (_, Some((s, v))) if s > v => Action::Done(UpsertOutcome::Stale(new.id)),
        (true, Some((s, v))) if s == v => {
            let unchanged = UpsertOutcome::Unchanged(new.id);
            Action::Done(ours_or(new.id, stored, sent, unchanged))
        }
        (true, _) => update(Effect::Unchanged),
        (false, _) => update(Effect::Updated),
    }
}

/// The outcome when what this call writes is stored: what its own write made of the document
/// if the stored token is the one it sent, else `otherwise` (another writer stored it).
fn ours_or(
    id: Ulid,
    stored: Stored<'_>,
    sent: Option<&Sent>,
    otherwise: UpsertOutcome,
) -> UpsertOutcome {
    match sent {
        Some(Sent::Uncertain { token, effect }) if stored.token == Some(token.as_str()) => {
            effect.outcome(id)
        }
        _ => otherwise,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "01HF7YAT00EGYGDZ2RBKJ019EA";

    fn id() -> Ulid {
        ID.parse().unwrap()
    }

    fn incoming(version: Option<i64>) -> Incoming<'static> {
        Incoming {
            id: id(),
            id_text: ID,
            hash: "h1",
            version,
            tombstone: false,
            mode: WriteMode::Merge,
        }
    }

    fn unversioned<'a>(id: &'a Bson, hash: Option<&'a Bson>, token: Option<&'a str>) -> Stored<'a> {
        Stored {
            id,
            hash,
            token,
            version: None,
            deleted: false,
        }
    }

    fn update(stored_hash: Option<&Bson>) -> Action<'_> {
        Action::Update {
            stored_hash,
            stored_version: None,
            effect: Effect::Updated,
        }
    }

    #[test]
    fn every_case() {
        let our_id = Bson::String(ID.into());
        let other_id = Bson::String("01HF7YAT01EGYGDZ2RBKJ019EA".into());
        let ours = Bson::String("h1".into());
        let theirs = Bson::String("h0".into());
        let uncertain = |effect| Sent::Uncertain {
            token: "t1".into(),
            effect,
        };
        let (u_ins, u_upd, refused) = (
            uncertain(Effect::Inserted),
            uncertain(Effect::Updated),
            Sent::Refused,
        );
        let at = |id, hash, token| Some(unversioned(id, hash, token));
        let d = |stored, sent| decide(incoming(None), || None, stored, sent);

        // Nothing stored.
        assert_eq!(d(None, None), Action::Insert);
        assert_eq!(d(None, Some(&refused)), Action::AdoptById);
        assert_eq!(d(None, Some(&u_upd)), Action::Insert);
        assert_eq!(d(None, Some(&u_ins)), Action::Insert);
        // Stored under another id: a fork, whatever else holds.
        for sent in [None, Some(&refused), Some(&u_ins)] {
            assert_eq!(d(at(&other_id, Some(&ours), None), sent), Action::Fork);
            assert_eq!(d(at(&other_id, None, None), sent), Action::Fork);
        }
        // A non-string `_id` is not ours.
        assert_eq!(
            d(at(&Bson::Int32(1), Some(&ours), None), None),
            Action::Fork
        );
        // Same content stored.
        assert_eq!(
            d(at(&our_id, Some(&ours), None), None),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        assert_eq!(
            d(at(&our_id, Some(&ours), Some("t1")), Some(&u_ins)),
            Action::Done(UpsertOutcome::Inserted(id()))
        );
        assert_eq!(
            d(at(&our_id, Some(&ours), Some("t1")), Some(&u_upd)),
            Action::Done(UpsertOutcome::Updated(id()))
        );
        // Another writer's token: they stored our content.
        assert_eq!(
            d(at(&our_id, Some(&ours), Some("t0")), Some(&u_upd)),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        assert_eq!(
            d(at(&our_id, Some(&ours), Some("t1")), Some(&refused)),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        // Other content stored (or none, or a non-string hash): update if still that one.
        assert_eq!(
            d(at(&our_id, Some(&theirs), None), None),
            update(Some(&theirs))
        );
        assert_eq!(d(at(&our_id, None, None), Some(&u_ins)), update(None));
        let odd = Bson::Int32(5);
        assert_eq!(d(at(&our_id, Some(&odd), None), None), update(Some(&odd)));

        // A type hashed v2 whose v1 hash is "g1": a stored "g1" is our content, written before
        // the upgrade; it stays (no write). A v1 type does not know "g1".
        let ours_v1 = Bson::String("g1".into());
        let d2 = |stored, sent| decide(incoming(None), || Some("g1".into()), stored, sent);
        assert_eq!(
            d2(at(&our_id, Some(&ours_v1), None), None),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        assert_eq!(
            d2(at(&our_id, Some(&ours_v1), Some("t0")), Some(&u_upd)),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        assert_eq!(
            d(at(&our_id, Some(&ours_v1), None), None),
            update(Some(&ours_v1))
        );
        // Every other case decides as for a v1 type: the v1 hash only ever adds a match.
        let hashes = [None, Some(&ours), Some(&theirs), Some(&odd)];
        let sents = [None, Some(&refused), Some(&u_ins), Some(&u_upd)];
        for stored_id in [&our_id, &other_id] {
            for hash in hashes {
                for token in [None, Some("t0"), Some("t1")] {
                    for sent in sents {
                        let view = at(stored_id, hash, token);
                        assert_eq!(d2(view, sent), d(view, sent), "{view:?} {sent:?}");
                    }
                }
            }
        }
        for sent in sents {
            assert_eq!(d2(None, sent), d(None, sent));
            // Stored under another id, a v1 hash match is still a fork.
            assert_eq!(d2(at(&other_id, Some(&ours_v1), None), sent), Action::Fork);
        }
    }
}

/// The versioned rule, case by case (docs/id-scheme.md, "Versions and tombstones").
#[cfg(test)]
mod versioned {
    use super::*;

    const ID: &str = "01HF7YAT00EGYGDZ2RBKJ019EA";
    const OTHER: &str = "01HF7YAT01EGYGDZ2RBKJ019EA";

    fn id() -> Ulid {
        ID.parse().unwrap()
    }

    fn new(version: i64, tombstone: bool) -> Incoming<'static> {
        Incoming {
            id: id(),
            id_text: ID,
            hash: if tombstone { "" } else { "h1" },
            version: Some(version),
            tombstone,
            mode: WriteMode::Merge,
        }
    }

    /// What is stored: `_id`, hash, version, tombstone.
    struct At(Bson, Option<Bson>, Option<Bson>, bool);

    impl At {
        fn live(hash: &str, version: Option<i64>) -> At {
            At(
                ID.into(),
                Some(hash.into()),
                version.map(Bson::Int64),
                false,
            )
        }
        fn tombstone(version: i64) -> At {
            At(ID.into(), None, Some(Bson::Int64(version)), true)
        }
        fn view(&self, token: Option<&'static str>) -> Stored<'_> {
            Stored {
                id: &self.0,
                hash: self.1.as_ref(),
                token,
                version: self.2.as_ref(),
                deleted: self.3,
            }
        }
    }

    fn d<'a>(new: Incoming<'_>, at: &'a At) -> Action<'a> {
        decide(new, || None, Some(at.view(None)), None)
    }

    fn update(at: &At, effect: Effect) -> Action<'_> {
        Action::Update {
            stored_hash: at.1.as_ref(),
            stored_version: at.2.as_ref(),
            effect,
        }
    }

    #[test]
    fn upserts() {
        let stale = Action::Done(UpsertOutcome::Stale(id()));
        // Nothing stored: insert.
        assert_eq!(decide(new(5, false), || None, None, None), Action::Insert);
        // Higher: write (only the version, when the content is the same).
        let older = At::live("h0", Some(4));
        assert_eq!(d(new(5, false), &older), update(&older, Effect::Updated));
        let same_older = At::live("h1", Some(4));
        assert_eq!(
            d(new(5, false), &same_older),
            update(&same_older, Effect::Unchanged)
        );
        // Equal: unchanged with the same content, a conflict with other content.
        let equal = At::live("h1", Some(5));
        assert_eq!(
            d(new(5, false), &equal),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        assert_eq!(
            d(new(5, false), &At::live("h0", Some(5))),
            Action::Conflict(5)
        );
        // Lower: stale, whatever the content.
        assert_eq!(d(new(5, false), &At::live("h0", Some(6))), stale);
        assert_eq!(d(new(5, false), &At::live("h1", Some(6))), stale);
        // Stored without a version (before it was declared, or by other code): older than
        // any; a non-integer `_nk_version` is none.
        let none = At::live("h0", None);
        assert_eq!(d(new(5, false), &none), update(&none, Effect::Updated));
        let same_none = At::live("h1", None);
        assert_eq!(
            d(new(i64::MIN, false), &same_none),
            update(&same_none, Effect::Unchanged)
        );
        let odd = At(ID.into(), Some("h0".into()), Some("7".into()), false);
        assert_eq!(d(new(5, false), &odd), update(&odd, Effect::Updated));
        // A tombstone at or above: stale; below: the document comes back.
        assert_eq!(d(new(5, false), &At::tombstone(5)), stale);
        assert_eq!(d(new(5, false), &At::tombstone(9)), stale);
        let below = At::tombstone(4);
        assert_eq!(d(new(5, false), &below), update(&below, Effect::Inserted));
        // Under another id: a fork, unless it is a tombstone at or above (stale).
        let moved = At(OTHER.into(), Some("h1".into()), Some(Bson::Int64(1)), false);
        assert_eq!(d(new(5, false), &moved), Action::Fork);
        let moved_dead = At(OTHER.into(), None, Some(Bson::Int64(5)), true);
        assert_eq!(d(new(5, false), &moved_dead), stale);
        let moved_old_dead = At(OTHER.into(), None, Some(Bson::Int64(4)), true);
        assert_eq!(d(new(5, false), &moved_old_dead), Action::Fork);
    }

    #[test]
    fn a_lost_reply_is_decided_by_the_token() {
        let sent = |effect| Sent::Uncertain {
            token: "t1".into(),
            effect,
        };
        let stored = At::live("h1", Some(5));
        for effect in [Effect::Inserted, Effect::Updated, Effect::Unchanged] {
            let ours = decide(
                new(5, false),
                || None,
                Some(stored.view(Some("t1"))),
                Some(&sent(effect)),
            );
            assert_eq!(ours, Action::Done(effect.outcome(id())));
            let theirs = decide(
                new(5, false),
                || None,
                Some(stored.view(Some("t0"))),
                Some(&sent(effect)),
            );
            assert_eq!(theirs, Action::Done(UpsertOutcome::Unchanged(id())));
        }
        // Our delete's tombstone, stored: what it deleted.
        let dead = At::tombstone(5);
        let ours = decide(
            new(5, true),
            || None,
            Some(dead.view(Some("t1"))),
            Some(&sent(Effect::Updated)),
        );
        assert_eq!(ours, Action::Done(UpsertOutcome::Updated(id())));
        let theirs = decide(
            new(5, true),
            || None,
            Some(dead.view(Some("t0"))),
            Some(&sent(Effect::Updated)),
        );
        assert_eq!(theirs, Action::Done(UpsertOutcome::Unchanged(id())));
    }

    #[test]
    fn deletes() {
        let stale = Action::Done(UpsertOutcome::Stale(id()));
        // Nothing stored: a tombstone is inserted all the same.
        assert_eq!(decide(new(5, true), || None, None, None), Action::Insert);
        // A document at or below the version (or without one) is replaced by the tombstone.
        for at in [
            At::live("h0", Some(5)),
            At::live("h0", Some(1)),
            At::live("h0", None),
        ] {
            assert_eq!(d(new(5, true), &at), update(&at, Effect::Updated));
        }
        // Above: stale.
        assert_eq!(d(new(5, true), &At::live("h0", Some(6))), stale);
        assert_eq!(d(new(5, true), &At::tombstone(6)), stale);
        // An older tombstone is raised; an equal one stays.
        let old = At::tombstone(4);
        assert_eq!(d(new(5, true), &old), update(&old, Effect::Unchanged));
        assert_eq!(
            d(new(5, true), &At::tombstone(5)),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        // Stored under another id: nothing of this key to delete.
        let moved = At(OTHER.into(), Some("h1".into()), Some(Bson::Int64(1)), false);
        assert_eq!(
            d(new(5, true), &moved),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
    }

    #[test]
    fn insert_only_and_update_only() {
        let with = |mode, version| Incoming {
            mode,
            version,
            ..new(5, false)
        };
        let (ins, upd) = (WriteMode::InsertOnly, WriteMode::UpdateOnly);
        let existed = Action::Done(UpsertOutcome::Existed(id()));
        let missing = Action::Done(UpsertOutcome::Missing(id()));
        // Nothing stored: insert-only inserts, update-only creates nothing.
        assert_eq!(
            decide(with(ins, Some(5)), || None, None, None),
            Action::Insert
        );
        assert_eq!(decide(with(upd, Some(5)), || None, None, None), missing);
        assert_eq!(decide(with(upd, None), || None, None, None), missing);
        // Stored, whatever its version or id: insert-only leaves it alone.
        for at in [
            At::live("h0", Some(4)),
            At::live("h1", Some(5)),
            At::live("h0", Some(9)),
            At(OTHER.into(), Some("h0".into()), None, false),
        ] {
            assert_eq!(d(with(ins, Some(5)), &at), existed);
            assert_eq!(d(with(ins, None), &at), existed);
        }
        // ... but knows its own insert, whose reply was lost.
        let mine = At::live("h1", Some(5));
        let sent = Sent::Uncertain {
            token: "t1".into(),
            effect: Effect::Inserted,
        };
        let view = Some(mine.view(Some("t1")));
        assert_eq!(
            decide(with(ins, Some(5)), || None, view, Some(&sent)),
            Action::Done(UpsertOutcome::Inserted(id()))
        );
        // A tombstone is no document: insert-only brings a newer version back (or is stale),
        // update-only creates nothing.
        let dead = At::tombstone(4);
        assert_eq!(
            d(with(ins, Some(5)), &dead),
            update(&dead, Effect::Inserted)
        );
        assert_eq!(
            d(with(ins, Some(3)), &dead),
            Action::Done(UpsertOutcome::Stale(id()))
        );
        assert_eq!(d(with(upd, Some(5)), &dead), missing);
        // Stored: update-only decides as merge does.
        for at in [
            At::live("h0", Some(4)),
            At::live("h1", Some(5)),
            At::live("h0", Some(9)),
        ] {
            let merge = d(with(WriteMode::Merge, Some(5)), &at);
            assert_eq!(d(with(upd, Some(5)), &at), merge);
        }
    }

    #[test]
    fn an_unversioned_write_brings_a_tombstone_back() {
        let dead = At::tombstone(5);
        let plain = Incoming {
            version: None,
            ..new(0, false)
        };
        assert_eq!(d(plain, &dead), update(&dead, Effect::Inserted));
    }
}

/// The decision against a reference model: a tiny in-memory engine with a unique `_id` and a
/// unique identity, several writers whose rounds interleave (another writer's write may land
/// between a writer's read and any of its writes), writes whose request or reply is lost, and
/// random sequences of upserts, edits and forks.
/// The model says what each upsert must report and what must be stored at the end: for each
/// identity, the `_id` of its first write and the content of its last successful one.
#[cfg(test)]
mod model {
    use std::collections::HashMap;

    use bson::Bson;
    use proptest::prelude::*;
    use ulid::Ulid;

    use super::{decide, Action, Effect, Incoming, Sent, Stored, WriteMode};
    use crate::outcome::UpsertOutcome;

    #[derive(Debug, Clone)]
    struct Doc {
        id: String,
        identity: u8,
        hash: String,
        token: Option<String>,
    }

    /// The engine: documents by `_id`; inserts refused on a duplicate `_id` or identity.
    #[derive(Default)]
    struct Engine {
        docs: HashMap<String, Doc>,
    }

    impl Engine {
        fn by_identity(&self, identity: u8) -> Option<&Doc> {
            self.docs.values().find(|d| d.identity == identity)
        }
        fn insert(&mut self, d: Doc) -> bool {
            if self.docs.contains_key(&d.id) || self.by_identity(d.identity).is_some() {
                return false;
            }
            self.docs.insert(d.id.clone(), d);
            true
        }
        /// An update by `_id` (and the hash, when given), never upserting: whether it matched.
        fn update(&mut self, d: Doc, expected: Option<Option<&str>>) -> bool {
            let matches = self
                .docs
                .get(&d.id)
                .is_some_and(|s| expected.is_none_or(|h| Some(s.hash.as_str()) == h));
            if matches {
                self.docs.insert(d.id.clone(), d);
            }
            matches
        }
    }

    /// One write: identity, timestamp variant (a different one forks), content, and whether
    /// the writer predates the upgrade to content hash v2 (it knows only the v1 hash).
    #[derive(Debug, Clone)]
    struct Write {
        identity: u8,
        ts: u8,
        content: u8,
        legacy: bool,
        /// Another writer's write (content, legacy) that lands between this one's read and its
        /// `n`th write.
        interleaved: Option<(u8, bool, u8)>,
        /// What becomes of this writer's first writes (later ones go through).
        fates: [Fate; 2],
    }

    /// What becomes of one write.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Fate {
        Answered,
        /// Never reaches the engine; the writer sees an error.
        RequestLost,
        /// Applied; the writer sees an error.
        ReplyLost,
    }

    /// The hashes a writer computes for `content`: a v2 writer's hash and the v1 hash it
    /// accepts, or a legacy writer's v1 hash alone.
    fn hashes(content: u8, legacy: bool) -> (String, Option<String>) {
        let v1 = format!("g{content}");
        if legacy {
            (v1, None)
        } else {
            (format!("h{content}"), Some(v1))
        }
    }

    fn id_of(identity: u8, ts: u8) -> String {
        format!("id-{identity}-{ts}")
    }

    fn ulid(id: &str) -> Ulid {
        // Stable per test id; only equality matters here.
        let n = id
            .bytes()
            .fold(0u128, |a, b| a.wrapping_mul(131).wrapping_add(b as u128));
        Ulid(n)
    }

    /// Runs one upsert through `decide` against the engine, like `guard::upsert_batch` does
    /// for a batch of one (a lost request or reply is a failed attempt, which the retry policy
    /// retries with the same memory), calling `interfere` once before its `at`th write.
    fn upsert(
        e: &mut Engine,
        identity: u8,
        ts: u8,
        (content, legacy): (u8, bool),
        fates: [Fate; 2],
        at: u8,
        mut interfere: impl FnMut(&mut Engine),
    ) -> Result<UpsertOutcome, &'static str> {
        let id = id_of(identity, ts);
        let (hash, hash_v1) = hashes(content, legacy);
        let mut sent: Option<Sent> = None;
        // Unique per call and kept across its attempts, as the real token (a fresh ULID) is.
        static TOKENS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let token = format!(
            "t{}",
            TOKENS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut writes = 0;
        for _ in 0..crate::write::rounds::MAX_ROUNDS + 2 {
            let stored = e.by_identity(identity).cloned();
            let idb = stored.as_ref().map(|d| Bson::String(d.id.clone()));
            let hb = stored.as_ref().map(|d| Bson::String(d.hash.clone()));
            let view = stored.as_ref().map(|d| Stored {
                id: idb.as_ref().unwrap(),
                hash: hb.as_ref(),
                token: d.token.as_deref(),
                version: None,
                deleted: false,
            });
            let new = Incoming {
                id: ulid(&id),
                id_text: &id,
                hash: &hash,
                version: None,
                tombstone: false,
                mode: WriteMode::Merge,
            };
            let action = decide(new, || hash_v1.clone(), view, sent.as_ref());
            // Another writer between this read and this write; a decision that writes nothing
            // takes effect at the read, before it.
            let fate = if matches!(action, Action::Done(_) | Action::Fork) {
                Fate::Answered
            } else {
                if writes == at {
                    interfere(e);
                }
                writes += 1;
                fates
                    .get(writes as usize - 1)
                    .copied()
                    .unwrap_or(Fate::Answered)
            };
            let doc = Doc {
                id: id.clone(),
                identity,
                hash: hash.clone(),
                token: Some(token.clone()),
            };
            let insert = matches!(action, Action::Insert);
            let applied = match (fate, action) {
                (_, Action::Done(o)) => return Ok(o),
                (_, Action::Fork) => return Err("fork"),
                (_, Action::Conflict(_)) => return Err("conflict"),
                (Fate::RequestLost, _) => None,
                (_, Action::Insert) => Some(e.insert(doc)),
                (_, Action::AdoptById) => Some(e.update(doc, None)),
                (_, Action::Update { stored_hash, .. }) => {
                    Some(e.update(doc, Some(stored_hash.and_then(|h| h.as_str()))))
                }
            };
            sent = Some(match (fate, applied) {
                (Fate::Answered, Some(true)) if insert => {
                    return Ok(UpsertOutcome::Inserted(ulid(&id)))
                }
                (Fate::Answered, Some(true)) => return Ok(UpsertOutcome::Updated(ulid(&id))),
                (Fate::Answered, _) if insert => Sent::Refused,
                // An update that matched nothing: the next round decides.
                _ => Sent::Uncertain {
                    token: token.clone(),
                    effect: if insert {
                        Effect::Inserted
                    } else {
                        Effect::Updated
                    },
                },
            });
        }
        Err("contention")
    }

    fn write() -> impl Strategy<Value = Write> {
        (
            0u8..3,
            0u8..2,
            0u8..3,
            any::<bool>(),
            proptest::option::of((0u8..3, any::<bool>(), 0u8..3)),
            [fate(), fate()],
        )
            .prop_map(
                |(identity, ts, content, legacy, interleaved, fates)| Write {
                    identity,
                    ts,
                    content,
                    legacy,
                    interleaved,
                    fates,
                },
            )
    }

    fn fate() -> impl Strategy<Value = Fate> {
        prop_oneof![
            2 => Just(Fate::Answered),
            1 => Just(Fate::RequestLost),
            1 => Just(Fate::ReplyLost),
        ]
    }

    /// Per identity: the timestamp of its first write, its content, and whether the stored
    /// hash is a legacy writer's (v1).
    type Model = HashMap<u8, (u8, u8, bool)>;

    /// What an upsert of `content` must report against the model, and the model after it.
    fn expect(
        model: &mut Model,
        identity: u8,
        ts: u8,
        (content, legacy): (u8, bool),
    ) -> Result<&'static str, &'static str> {
        let expected = match model.get(&identity) {
            None => Ok("inserted"),
            Some((t, _, _)) if *t != ts => Err("fork"),
            // A v2 writer accepts either hash of its content; a legacy one only its own.
            Some((_, c, stored_v1)) if *c == content && (!legacy || *stored_v1) => Ok("unchanged"),
            Some(_) => Ok("updated"),
        };
        if let Ok(outcome) = expected {
            let entry = model.entry(identity).or_insert((ts, content, legacy));
            if outcome != "unchanged" {
                *entry = (entry.0, content, legacy);
            }
        }
        expected
    }

    proptest! {
        #[test]
        fn outcomes_and_final_state_match_the_model(writes in proptest::collection::vec(write(), 1..40)) {
            let mut engine = Engine::default();
            let mut model = Model::new();
            for w in &writes {
                let interleaved = w.interleaved;
                let mut other: Option<Result<UpsertOutcome, &str>> = None;
                let mut other_model = model.clone();
                let ours = (w.content, w.legacy);
                let at = interleaved.map_or(0, |i| i.2);
                let answered = [Fate::Answered; 2];
                let got = upsert(&mut engine, w.identity, w.ts, ours, w.fates, at, |e| {
                    // The other writer writes the same identity under the stored (or our)
                    // timestamp, with its own content.
                    if let Some((content, legacy, _)) = interleaved {
                        let theirs = (content, legacy);
                        let ts = other_model.get(&w.identity).map_or(w.ts, |m| m.0);
                        let r = upsert(e, w.identity, ts, theirs, answered, 0, |_| {});
                        let expected = expect(&mut other_model, w.identity, ts, theirs);
                        other = Some(r.and_then(|o| {
                            (Ok(o.as_str()) == expected).then_some(o).ok_or("unexpected")
                        }));
                    }
                });
                if let Some(r) = other {
                    prop_assert!(r.is_ok(), "the interleaved writer as the model says: {r:?}");
                    model = other_model;
                }
                let expected = expect(&mut model, w.identity, w.ts, ours);
                prop_assert_eq!(got.map(|o| o.as_str()), expected, "{:?}", w);
            }
            // Final state: one document per identity, under its first id, with its last
            // content, under the hash of the writer that last wrote it.
            prop_assert_eq!(engine.docs.len(), model.len());
            for (identity, (ts, content, legacy)) in &model {
                let d = engine.by_identity(*identity).expect("stored");
                prop_assert_eq!(&d.id, &id_of(*identity, *ts));
                prop_assert_eq!(&d.hash, &hashes(*content, *legacy).0);
            }
        }
    }
}
