//! The guarded upsert of a batch — one document or ten thousand — in bounded rounds: read what
//! is stored under the pending identities, [`decide`] each, send one `insert` for the new and
//! one `update` for the changed (cut to the engine's limits), and decide again for whatever
//! the engine refused.
//!
//! Engines differ in what a multi-statement `update` reply says: MongoDB reports each failed
//! statement by index and carries on; FerretDB 1.x stops at the first failure with a command
//! error and numbers `upserted` entries by their order rather than their statement. So every
//! statement also stamps the document with the command's write token (`_nk_write`): after a
//! failed command, the next read tells "we applied it" from "another writer did" exactly.

use std::collections::HashMap;

use bson::{Bson, RawBson, RawDocumentBuf};
use ulid::Ulid;

use crate::action::WriteMode;
use crate::decide::{decide, Action, Sent, Stored};
use crate::error::{classify, Error};
use crate::op::{self, Refusal, Session, StoredIdentity, Target};
use crate::outcome::UpsertOutcome;
use crate::stored::{Prepared, HASH_FIELD, IDENTITY_FIELD, WRITE_FIELD};

/// How many read-decide-write rounds a document gets before [`Error::Contention`].
pub(crate) const MAX_ROUNDS: u32 = 8;

/// What every batch of one upsert call shares.
pub(crate) struct Job<'a> {
    pub(crate) t: &'a Target,
    pub(crate) mode: WriteMode,
    /// The type's stored field names, unset in Merge mode when a document lacks them.
    pub(crate) fields: Option<&'static [&'static str]>,
    /// Describes document `i`'s key, for a fork error (built only when needed).
    pub(crate) describe: &'a (dyn Fn(usize) -> String + Sync),
}

type Outcomes = Vec<Result<UpsertOutcome, Error>>;

/// Per-document state across rounds.
struct Rounds<'p> {
    items: &'p [&'p Prepared],
    results: Vec<Option<Result<UpsertOutcome, Error>>>,
    sent: Vec<Option<Sent>>,
    pending: Vec<usize>,
    /// An engine refused a statement of a multi-statement command without saying which:
    /// from now on each statement travels alone.
    one_by_one: bool,
    /// What the read showed when each item's `update` statement was planned.
    planned: Vec<Option<View>>,
    /// An item's statement was refused as a duplicate of an unnamed index, planned from this
    /// view, with this message. If the next read shows the same view, nothing of ours was in
    /// the way: it is one of the user's unique indexes.
    suspect: Vec<Option<(View, String)>>,
}

/// The stored `_id` and hash under an identity (`None`: nothing stored).
type View = Option<(Bson, Option<Bson>)>;

/// One statement or document to send for item `item`.
struct Outgoing {
    item: usize,
    insert: bool,
    doc: RawDocumentBuf,
}

/// Decides and writes one batch; one result per item. `Err` only for a failure of the whole
/// batch (network, ...), which the caller may retry: the batch is idempotent.
pub(crate) async fn upsert_batch(
    job: &Job<'_>,
    items: &[&Prepared],
    insert_first: bool,
    mut session: Session<'_>,
) -> Result<Outcomes, Error> {
    let mut r = Rounds {
        items,
        results: (0..items.len()).map(|_| None).collect(),
        sent: vec![None; items.len()],
        pending: (0..items.len()).collect(),
        one_by_one: false,
        planned: vec![None; items.len()],
        suspect: vec![None; items.len()],
    };
    for round in 0..MAX_ROUNDS {
        if r.pending.is_empty() {
            break;
        }
        // Skipped when the batch starts with the insert: every document is taken as new and
        // the unique indexes refuse what is not, for the next round to decide.
        let stored = if round == 0 && insert_first {
            HashMap::new()
        } else {
            read(job.t, &r, session.as_deref_mut()).await?
        };
        let token = Ulid::new().to_string();
        let (inserts, updates) = plan(job, &mut r, &stored, &token)?;
        r.pending.clear();
        send_inserts(job.t, &mut r, inserts, session.as_deref_mut()).await?;
        send_updates(job.t, &mut r, updates, &token, session.as_deref_mut()).await?;
    }
    Ok(or_contention(r.results, job.t, |i| items[i].id))
}

/// The results, with what is still unsettled after [`MAX_ROUNDS`] as [`Error::Contention`].
pub(crate) fn or_contention<O>(
    results: Vec<Option<Result<O, Error>>>,
    t: &Target,
    id: impl Fn(usize) -> Ulid,
) -> Vec<Result<O, Error>> {
    results
        .into_iter()
        .enumerate()
        .map(|(i, result)| {
            result.unwrap_or_else(|| {
                Err(Error::Contention {
                    collection: t.namespace.clone(),
                    id: id(i),
                    attempts: MAX_ROUNDS,
                })
            })
        })
        .collect()
}

/// The stored `_id`, hash and write token of every pending identity, keyed by identity.
async fn read(
    t: &Target,
    r: &Rounds<'_>,
    session: Session<'_>,
) -> Result<HashMap<String, StoredIdentity>, Error> {
    let mut wanted = bson::RawArrayBuf::new();
    for &i in &r.pending {
        wanted.push(r.items[i].identity.as_str());
    }
    let mut condition = RawDocumentBuf::new();
    condition.append("$in", wanted);
    let mut filter = RawDocumentBuf::new();
    filter.append(IDENTITY_FIELD, condition);
    let found: Vec<StoredIdentity> = op::find(t, filter, Some(StoredIdentity::PROJECTION), session)
        .await
        .map_err(classify)?;
    Ok(found
        .into_iter()
        .filter_map(|d| Some((d.identity.as_ref()?.as_str()?.to_string(), d)))
        .collect())
}

/// Decides every pending item: settles what needs no write, and returns the `insert`
/// documents and `update` statements for the rest.
fn plan(
    job: &Job<'_>,
    r: &mut Rounds<'_>,
    stored: &HashMap<String, StoredIdentity>,
    token: &str,
) -> Result<(Vec<Outgoing>, Vec<Outgoing>), Error> {
    let (mut inserts, mut updates) = (Vec::new(), Vec::new());
    for &i in &r.pending {
        let p = r.items[i];
        let found = stored.get(&p.identity);
        let seen: View = found.map(|d| (d.id.clone(), d.hash.clone()));
        if let Some((_, message)) = r.suspect[i].take().filter(|(v, _)| *v == seen) {
            r.results[i] = Some(Err(Error::UniqueIndexViolation {
                collection: job.t.namespace.clone(),
                id: p.id,
                index: "(an index the engine did not name)".into(),
                key: message,
            }));
            continue;
        }
        let view = found.map(|d| Stored {
            id: &d.id,
            hash: d.hash.as_ref(),
            token: d.token.as_ref().and_then(Bson::as_str),
        });
        let (insert, stored_hash) =
            match decide(p.id, &p.id_text, &p.hash, view, r.sent[i].as_ref()) {
                Action::Done(o) => {
                    r.results[i] = Some(Ok(o));
                    continue;
                }
                Action::Fork => {
                    r.results[i] = Some(Err(Error::ImmutableKeyChanged {
                        collection: job.t.namespace.clone(),
                        stored_id: crate::stored::id_text(&found.expect("a fork was read").id),
                        derived_id: p.id,
                        key: (job.describe)(i),
                    }));
                    continue;
                }
                Action::Insert => {
                    let mut doc = RawDocumentBuf::new();
                    doc.append("_id", p.id_text.as_str());
                    crate::stored::append_fields(&mut doc, &p.body, None).map_err(serialize)?;
                    inserts.push(Outgoing {
                        item: i,
                        insert: true,
                        doc,
                    });
                    continue;
                }
                Action::UpsertById => (true, None),
                Action::Update { stored_hash } => {
                    (false, Some(stored_hash.cloned().unwrap_or(Bson::Null)))
                }
            };
        let doc = statement(job, p, stored_hash, token)?;
        r.planned[i] = Some(seen);
        updates.push(Outgoing {
            item: i,
            insert,
            doc,
        });
    }
    Ok((inserts, updates))
}

/// One `update` statement: by `_id` (and `_nk_identity` on a sharded collection, whose shard
/// key an upsert filter must carry), only while the stored hash is still `stored_hash` (none:
/// by `_id` alone, which adopts a same-`_id` document written without identity); upserting,
/// so a changed hash makes the upsert collide on `_id` — the signal to decide again.
fn statement(
    job: &Job<'_>,
    p: &Prepared,
    stored_hash: Option<Bson>,
    token: &str,
) -> Result<RawDocumentBuf, Error> {
    let mut filter = RawDocumentBuf::new();
    filter.append("_id", p.id_text.as_str());
    if job.t.sharded {
        filter.append(IDENTITY_FIELD, p.identity.as_str());
    }
    if let Some(hash) = stored_hash {
        filter.append(HASH_FIELD, RawBson::try_from(hash).map_err(serialize)?);
    }
    let mut body = RawDocumentBuf::new();
    crate::stored::append_fields(&mut body, &p.body, None).map_err(serialize)?;
    body.append(WRITE_FIELD, token);
    let update = match job.mode {
        WriteMode::Merge => {
            let mut u = RawDocumentBuf::new();
            u.append("$set", body);
            // Fields of the type that this value does not serialize (a skipped `None`) must
            // not keep an old value: reading the document back must give what was written.
            let mut unset = RawDocumentBuf::new();
            for f in job.fields.unwrap_or_default() {
                if *f != "_id" && !matches!(p.body.get(f), Ok(Some(_))) {
                    unset.append(*f, "");
                }
            }
            if !unset.is_empty() {
                u.append("$unset", unset);
            }
            u
        }
        WriteMode::Replace => body,
    };
    let mut s = RawDocumentBuf::new();
    s.append("q", filter);
    s.append("u", update);
    s.append("upsert", true);
    s.append("multi", false);
    Ok(s)
}

fn serialize(e: impl std::fmt::Display) -> Error {
    Error::serialize::<RawDocumentBuf>(e)
}

impl Rounds<'_> {
    /// Settles item `i` after the server refused its document or statement.
    fn refused(&mut self, t: &Target, i: usize, refusal: Refusal, sent: Sent) {
        if let Some(e) = refusal.permanent(t, self.items[i].id) {
            self.results[i] = Some(Err(e));
            return;
        }
        // An insert refused by an unnamed index may have met a same-`_id` document without
        // identity: the next round's upsert by `_id` adopts it. A refused statement is suspect.
        if let (Refusal::Unnamed { message }, Sent::Uncertain { .. }) = (refusal, &sent) {
            if let Some(view) = self.planned[i].take() {
                self.suspect[i] = Some((view, message));
            }
        }
        self.sent[i] = Some(sent);
        self.pending.push(i);
    }

    /// Items of a command whose outcome the reply did not settle: the next round decides.
    fn uncertain(&mut self, sent: &[Outgoing], make: impl Fn(&Outgoing) -> Sent) {
        for s in sent {
            self.sent[s.item] = Some(make(s));
            self.pending.push(s.item);
        }
    }
}

/// Cuts what to send into commands within the engine's limits (at most `max` each; one each
/// once `one_by_one`), with each command's documents.
fn commands<'o>(
    t: &Target,
    out: &'o [Outgoing],
    one_by_one: bool,
    max: usize,
) -> impl Iterator<Item = (&'o [Outgoing], Vec<&'o RawDocumentBuf>)> {
    let max = if one_by_one { 1 } else { max };
    let sizes = out.iter().map(|s| s.doc.as_bytes().len());
    op::chunks(sizes, t.deployment.limits().max_command_bytes, max)
        .into_iter()
        .map(move |chunk| {
            let sent = &out[chunk];
            (sent, sent.iter().map(|s| &s.doc).collect())
        })
}

async fn send_inserts(
    t: &Target,
    r: &mut Rounds<'_>,
    inserts: Vec<Outgoing>,
    mut session: Session<'_>,
) -> Result<(), Error> {
    let max = t.deployment.limits().max_documents;
    for (sent, docs) in commands(t, &inserts, r.one_by_one, max) {
        let reply = match op::insert(t, &docs, session.as_deref_mut()).await {
            Ok(reply) => reply,
            Err(e) => {
                let refusal = op::write::command_refusal(e)?;
                match (refusal, sent) {
                    (refusal, [one]) => r.refused(t, one.item, refusal, Sent::Refused),
                    (refusal, _) => {
                        r.one_by_one |= refusal != Refusal::Ours;
                        r.uncertain(sent, |_| Sent::Refused);
                    }
                }
                continue;
            }
        };
        reply.write_concern(t, r.items[sent[0].item].id)?;
        if reply.write_errors.iter().any(|e| e.index >= sent.len()) {
            // Refusals that cannot be placed: the next read decides every document.
            r.uncertain(sent, |_| Sent::Refused);
            continue;
        }
        let mut refusals: HashMap<usize, Refusal> = reply
            .write_errors
            .iter()
            .map(|e| (e.index, e.refusal()))
            .collect();
        for (k, s) in sent.iter().enumerate() {
            match refusals.remove(&k) {
                None => r.results[s.item] = Some(Ok(UpsertOutcome::Inserted(r.items[s.item].id))),
                Some(refusal) => r.refused(t, s.item, refusal, Sent::Refused),
            }
        }
    }
    Ok(())
}

async fn send_updates(
    t: &Target,
    r: &mut Rounds<'_>,
    updates: Vec<Outgoing>,
    token: &str,
    mut session: Session<'_>,
) -> Result<(), Error> {
    let max = t.deployment.limits().max_statements;
    let uncertain = |s: &Outgoing| Sent::Uncertain {
        token: token.to_string(),
        insert: s.insert,
    };
    for (sent, statements) in commands(t, &updates, r.one_by_one, max) {
        let reply = match op::update(t, &statements, session.as_deref_mut()).await {
            Ok(reply) => reply,
            Err(e) => {
                // Stopped without saying where: every statement is uncertain until the next
                // read shows whose token is stored.
                let refusal = op::write::command_refusal(e)?;
                match sent {
                    [one] => r.refused(t, one.item, refusal, uncertain(one)),
                    _ => {
                        r.one_by_one |= refusal != Refusal::Ours;
                        r.uncertain(sent, uncertain);
                    }
                }
                continue;
            }
        };
        reply.write_concern(t, r.items[sent[0].item].id)?;
        match (sent, reply.write_errors.as_slice()) {
            (_, []) => {
                let inserts = sent.iter().filter(|s| s.insert).count();
                let upserted: Vec<usize> = reply.upserted.iter().map(|u| u.index).collect();
                for (k, s) in sent.iter().enumerate() {
                    let id = r.items[s.item].id;
                    // FerretDB numbers `upserted` by order, MongoDB by statement: all inserts
                    // upserted means each did. An insert that matched adopted a document
                    // written by other code (or by a concurrent writer since our read).
                    let inserted = s.insert && (upserted.len() == inserts || upserted.contains(&k));
                    r.results[s.item] = Some(Ok(if inserted {
                        UpsertOutcome::Inserted(id)
                    } else {
                        UpsertOutcome::Updated(id)
                    }));
                }
            }
            ([one], [e]) => r.refused(t, one.item, e.refusal(), uncertain(one)),
            (_, errors) => {
                // Which statements applied is not reliably reported (FerretDB 1.x stops at
                // the first failure and reports it at index 0): the next read decides, and
                // a refusal other than ours is pinned down one statement at a time.
                r.one_by_one |= errors.iter().any(|e| e.refusal() != Refusal::Ours);
                r.uncertain(sent, uncertain);
            }
        }
    }
    Ok(())
}
