//! The guarded-upsert decision, once, without I/O: from what is being written, what is stored
//! under its identity and what this call already sent for it, to what to do next.
//!
//! Single and batch upserts both run every document through [`decide`] in rounds: read the
//! stored identities, decide, send, and decide again for whatever the engine refused.

use bson::Bson;

use crate::outcome::UpsertOutcome;
use ulid::Ulid;

/// What is stored under the document's identity, as the guard read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stored<'a> {
    pub(crate) id: &'a Bson,
    pub(crate) hash: Option<&'a Bson>,
    pub(crate) token: Option<&'a str>,
}

/// What this call already did with the document in an earlier round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// An `insert` the engine refused as a duplicate of `_id` or of our indexes: certainly not
    /// applied.
    Refused,
    /// An `update` statement whose fate the reply did not settle, stamped with `token`.
    Uncertain { token: String, insert: bool },
}

/// What to do with the document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action<'a> {
    /// Nothing stored: `insert` it (the unique indexes are the check).
    Insert,
    /// Nothing stored, but an earlier round's insert was refused: a document with this `_id`
    /// but no identity exists (written by other code), or the refusing one was deleted since.
    /// Upsert by `_id` alone, which adopts the former and re-creates the latter.
    UpsertById,
    /// Stored with another hash: update, only if the stored hash is still `stored_hash`.
    Update { stored_hash: Option<&'a Bson> },
    /// Settled without a write.
    Done(UpsertOutcome),
    /// Stored under another `_id`: the timestamp key changed. Refuse; write nothing.
    Fork,
}

/// The decision. `id`/`hash` are the document's derived id (as stored text) and content hash.
pub(crate) fn decide<'a>(
    id: Ulid,
    id_text: &str,
    hash: &str,
    stored: Option<Stored<'a>>,
    sent: Option<&Sent>,
) -> Action<'a> {
    let Some(stored) = stored else {
        return match sent {
            None => Action::Insert,
            Some(_) => Action::UpsertById,
        };
    };
    if stored.id.as_str() != Some(id_text) {
        return Action::Fork;
    }
    if stored.hash.and_then(Bson::as_str) == Some(hash) {
        // Our content is stored. Ours if it carries the token of a statement we sent.
        return Action::Done(match sent {
            Some(Sent::Uncertain { token, insert }) if stored.token == Some(token.as_str()) => {
                if *insert {
                    UpsertOutcome::Inserted(id)
                } else {
                    UpsertOutcome::Updated(id)
                }
            }
            _ => UpsertOutcome::Unchanged(id),
        });
    }
    Action::Update {
        stored_hash: stored.hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "01HF7YAT00EGYGDZ2RBKJ019EA";

    fn id() -> Ulid {
        ID.parse().unwrap()
    }

    #[test]
    fn every_case() {
        let our_id = Bson::String(ID.into());
        let other_id = Bson::String("01HF7YAT01EGYGDZ2RBKJ019EA".into());
        let ours = Bson::String("h1".into());
        let theirs = Bson::String("h0".into());
        let uncertain = |insert| Sent::Uncertain {
            token: "t1".into(),
            insert,
        };
        let at = |id, hash, token| Some(Stored { id, hash, token });
        let d = |stored, sent| decide(id(), ID, "h1", stored, sent);

        // Nothing stored.
        assert_eq!(d(None, None), Action::Insert);
        assert_eq!(d(None, Some(&Sent::Refused)), Action::UpsertById);
        assert_eq!(d(None, Some(&uncertain(false))), Action::UpsertById);
        // Stored under another id: a fork, whatever else holds.
        for sent in [None, Some(Sent::Refused), Some(uncertain(true))] {
            assert_eq!(
                d(at(&other_id, Some(&ours), None), sent.as_ref()),
                Action::Fork
            );
            assert_eq!(d(at(&other_id, None, None), sent.as_ref()), Action::Fork);
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
            d(at(&our_id, Some(&ours), Some("t1")), Some(&uncertain(true))),
            Action::Done(UpsertOutcome::Inserted(id()))
        );
        assert_eq!(
            d(
                at(&our_id, Some(&ours), Some("t1")),
                Some(&uncertain(false))
            ),
            Action::Done(UpsertOutcome::Updated(id()))
        );
        // Another writer's token: they stored our content.
        assert_eq!(
            d(
                at(&our_id, Some(&ours), Some("t0")),
                Some(&uncertain(false))
            ),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        assert_eq!(
            d(at(&our_id, Some(&ours), Some("t1")), Some(&Sent::Refused)),
            Action::Done(UpsertOutcome::Unchanged(id()))
        );
        // Other content stored (or none, or a non-string hash): update if still that one.
        assert_eq!(
            d(at(&our_id, Some(&theirs), None), None),
            Action::Update {
                stored_hash: Some(&theirs)
            }
        );
        assert_eq!(
            d(at(&our_id, None, None), Some(&uncertain(true))),
            Action::Update { stored_hash: None }
        );
        let odd = Bson::Int32(5);
        assert_eq!(
            d(at(&our_id, Some(&odd), None), None),
            Action::Update {
                stored_hash: Some(&odd)
            }
        );
    }
}
