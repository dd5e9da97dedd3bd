//! Deletes by key: each document deleted only where both its derived `_id` and its identity
//! match what is stored, in bounded rounds — read which identities are stored and under which
//! `_id`, send one unordered `delete` for the ones stored under their derived id, read again
//! for whatever a reply left open.
//!
//! A delete leaves nothing behind to tell who deleted a document, so its outcome is exact only
//! where a reply says so. A reply whose `n` equals the statements it applied deleted each of
//! them; an `n` of 0 deleted none; any other `n` deleted that many of them, and the next read
//! tells which exactly when the documents gone number `n`. A document gone after a lost reply
//! (or an `n` that does not tell) is [`DeleteOutcome::Gone`], never a false `NotFound`.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};

use bson::RawDocumentBuf;
use mongodb::ClientSession;

use super::batch::{Item, Outcomes, Writer};
use super::guard::{upsert_batch, Ledger, UpsertCall};
use super::keyed::{Keyed, On};
use super::mode::WriteMode;
use super::rounds::{or_contention, MAX_ROUNDS};
use super::send::{send, Verdict};
use crate::error::Error;
use crate::names::IDENTITY_FIELD;
use crate::op::{self, Command, Session, Target};
use crate::outcome::{DeleteOutcome, UpsertOutcome};
use crate::retry::Attempts;
use crate::stored::{id_text, Prepared, PreparedDelete};

/// The batch runner's writer for deletes: the call's session, and what the attempts of the
/// current batch left unsettled (a retry after a lost reply must not call `NotFound` what the
/// lost attempt may have deleted).
pub(crate) struct DeleteWriter<'a, T: Keyed> {
    on: On<'a, T>,
    session: Option<&'a mut ClientSession>,
    /// Per item of the current batch: a delete of it went out and no reply settled it.
    unsettled: Option<Vec<bool>>,
    /// A versioned batch's token and what its attempts sent (its tombstones go through the
    /// guarded upsert).
    ledger: Option<Ledger>,
}

impl<'a, T: Keyed> DeleteWriter<'a, T> {
    pub(crate) fn new(on: On<'a, T>, session: Option<&'a mut ClientSession>) -> Self {
        DeleteWriter {
            on,
            session,
            unsettled: None,
            ledger: None,
        }
    }
}

impl<T, D> Writer<D> for DeleteWriter<'_, T>
where
    T: Keyed,
    D: Borrow<T> + Send + Sync,
{
    type Prepared = PreparedDelete;
    type Outcome = DeleteOutcome;

    fn fork(&self) -> Option<Self> {
        self.session
            .is_none()
            .then(|| DeleteWriter::new(self.on, None))
    }

    async fn write(
        &mut self,
        batch: &[Item<PreparedDelete, D>],
        tries: &mut Attempts,
    ) -> Result<Outcomes<DeleteOutcome>, Error> {
        let spec = self.on.spec;
        let describe = |k: usize| batch[k].doc.borrow().describe(spec);
        // A type is versioned or not as a whole: so is each of its batches.
        let tombstones: Option<Vec<&Prepared>> = batch
            .iter()
            .map(|i| i.prepared.tombstone.as_ref())
            .collect();
        if let Some(tombstones) = tombstones.filter(|t| !t.is_empty()) {
            let ledger = match &mut self.ledger {
                Some(l) if tries.is_retry() => l,
                slot => slot.insert(Ledger::new(batch.len())),
            };
            let call = UpsertCall {
                target: self.on.target,
                mode: WriteMode::Replace,
                fields: None,
                describe: &describe,
                other_hash: &|_| None,
                changed_at: None,
            };
            let session = self.session.as_deref_mut();
            let results = upsert_batch(&call, &tombstones, false, ledger, tries, session).await?;
            return Ok(results.into_iter().map(|r| r.map(deleted)).collect());
        }
        let unsettled = match &mut self.unsettled {
            Some(u) if tries.is_retry() => u,
            slot => slot.insert(vec![false; batch.len()]),
        };
        let items: Vec<&PreparedDelete> = batch.iter().map(|i| &i.prepared).collect();
        let session = self.session.as_deref_mut();
        delete_batch(self.on.target, &items, &describe, unsettled, tries, session).await
    }
}

/// What a tombstone's write was, as a delete: replacing a stored document deletes it; one
/// inserted where nothing was stored, or raising an older tombstone, found nothing to delete.
fn deleted(tombstone: UpsertOutcome) -> DeleteOutcome {
    match tombstone {
        UpsertOutcome::Updated(id) => DeleteOutcome::Deleted(id),
        UpsertOutcome::Stale(id) => DeleteOutcome::Stale(id),
        other => DeleteOutcome::NotFound(other.id()),
    }
}

/// A command's reply that deleted `n` of `members` without saying which.
struct Claim {
    members: Vec<usize>,
    n: usize,
}

/// Per-document state across rounds.
struct Rounds<'m> {
    results: Vec<Option<Result<DeleteOutcome, Error>>>,
    unsettled: &'m mut [bool],
    claims: Vec<Claim>,
    /// Items to read again next round.
    next: Vec<usize>,
}

async fn delete_batch(
    target: &Target,
    items: &[&PreparedDelete],
    describe: &(dyn Fn(usize) -> String + Sync),
    unsettled: &mut [bool],
    tries: &mut Attempts,
    mut session: Session<'_>,
) -> Result<Outcomes<DeleteOutcome>, Error> {
    let mut r = Rounds {
        results: (0..items.len()).map(|_| None).collect(),
        unsettled,
        claims: Vec::new(),
        next: (0..items.len()).collect(),
    };
    for _ in 0..MAX_ROUNDS {
        if r.next.is_empty() {
            break;
        }
        let pending = std::mem::take(&mut r.next);
        let stored = read(target, items, &pending, tries, session.as_deref_mut()).await?;
        let present = r.settle_read(target, items, describe, &pending, &stored);
        if present.is_empty() {
            continue;
        }
        // Sent and not yet settled: if the reply is lost (and the attempt with it), the next
        // attempt must not call a document it finds gone `NotFound`.
        for &k in &present {
            r.unsettled[k] = true;
        }
        let statements: Vec<&RawDocumentBuf> =
            present.iter().map(|&k| &items[k].statement).collect();
        let id = |i: usize| items[present[i]].id;
        let settle = |carried: &[usize], verdict| {
            let ks: Vec<usize> = carried.iter().map(|&i| present[i]).collect();
            r.settle_reply(target, items, &ks, verdict);
        };
        let s = session.as_deref_mut();
        send(
            target,
            Command::Delete,
            &statements,
            false,
            id,
            tries,
            s,
            settle,
        )
        .await?;
    }
    Ok(or_contention(r.results, target, |k| items[k].id))
}

impl Rounds<'_> {
    /// What a read of the pending items shows: the ones stored under another `_id` refused as
    /// a fork, the ones gone settled (by the claims that may have deleted them, or as never
    /// deleted by this call), and the ones stored under their derived id, returned to delete.
    fn settle_read(
        &mut self,
        target: &Target,
        items: &[&PreparedDelete],
        describe: &(dyn Fn(usize) -> String + Sync),
        pending: &[usize],
        stored: &HashMap<String, String>,
    ) -> Vec<usize> {
        let mut present = Vec::new();
        let mut absent = HashSet::new();
        for &k in pending {
            match stored.get(&items[k].identity) {
                Some(id) if *id == items[k].id_text => {
                    // Stored: no earlier attempt of this call deleted it.
                    self.unsettled[k] = false;
                    present.push(k);
                }
                Some(other) => {
                    self.results[k] = Some(Err(Error::ImmutableKeyChanged {
                        collection: target.namespace.clone(),
                        stored_id: other.clone(),
                        derived_id: items[k].id,
                        key: describe(k),
                    }))
                }
                None => {
                    absent.insert(k);
                }
            }
        }
        for claim in std::mem::take(&mut self.claims) {
            let gone: Vec<usize> = claim
                .members
                .into_iter()
                .filter(|k| absent.remove(k))
                .collect();
            // The command deleted `n` of its members and nothing else: if exactly `n` are
            // gone, those are the ones it deleted.
            let ours = gone.len() == claim.n;
            for k in gone {
                let id = items[k].id;
                let outcome = match ours {
                    true => DeleteOutcome::Deleted(id),
                    false => DeleteOutcome::Gone(id),
                };
                self.results[k] = Some(Ok(outcome));
            }
        }
        for k in absent {
            let id = items[k].id;
            self.results[k] = Some(Ok(match self.unsettled[k] {
                true => DeleteOutcome::Gone(id),
                false => DeleteOutcome::NotFound(id),
            }));
        }
        present
    }

    /// What a `delete` command's reply says of the items `ks` it carried.
    fn settle_reply(
        &mut self,
        target: &Target,
        items: &[&PreparedDelete],
        ks: &[usize],
        verdict: Verdict,
    ) {
        // Every item stays unsettled (marked before the send) until a reply says otherwise.
        let Verdict::Replied { refusals, n } = verdict else {
            // Maybe applied, or refused without saying which: the next read decides.
            self.next.extend_from_slice(ks);
            return;
        };
        let mut applied = Vec::new();
        for (&k, refusal) in ks.iter().zip(refusals) {
            match refusal.map(|r| r.permanent(target, items[k].id)) {
                None => applied.push(k),
                Some(Some(e)) => {
                    self.unsettled[k] = false;
                    self.results[k] = Some(Err(e));
                }
                Some(None) => self.next.push(k),
            }
        }
        let n = usize::try_from(n).unwrap_or(0);
        if n == applied.len() {
            for k in applied {
                self.results[k] = Some(Ok(DeleteOutcome::Deleted(items[k].id)));
            }
        } else if n == 0 {
            // None matched: deleted by another writer since the read (or moved), not by us.
            for &k in &applied {
                self.unsettled[k] = false;
            }
            self.next.extend(applied);
        } else {
            self.next.extend_from_slice(&applied);
            self.claims.push(Claim {
                members: applied,
                n,
            });
        }
    }
}

/// The stored `_id` of each pending identity, by identity: one read by the shard key.
async fn read(
    target: &Target,
    items: &[&PreparedDelete],
    pending: &[usize],
    tries: &mut Attempts,
    session: Session<'_>,
) -> Result<HashMap<String, String>, Error> {
    let mut identities = bson::RawArrayBuf::new();
    for &k in pending {
        identities.push(items[k].identity.as_str());
    }
    let mut cond = RawDocumentBuf::new();
    cond.append("$in", identities);
    let mut filter = RawDocumentBuf::new();
    filter.append(IDENTITY_FIELD, cond);
    let found = op::find_identities(target, filter, None, tries, session).await?;
    Ok(found
        .into_iter()
        .filter_map(|s| {
            let identity = s.identity?.as_str()?.to_string();
            Some((identity, id_text(&s.id)))
        })
        .collect())
}
