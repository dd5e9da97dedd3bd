//! `adopt`: every legacy or drifted document moved under its derived id, duplicates with
//! identical content collapsed, duplicates with differing content left to a policy.
//!
//! Order of writes, per identity: release the identity a drifted document holds (it is marked
//! [`MOVED_TO_FIELD`]), write the derived-id document with the old ids in
//! [`LEGACY_IDS_FIELD`], delete the old documents. Killed anywhere, the next run finds either
//! the old documents alone (and starts again) or the derived-id document beside old ones that
//! it lists or that hold its content (and deletes them): never none, never two for good.
//! The engine finishes a command a killed run sent: one that lands after the next run has
//! read is a concurrent change to that run, which reports it ([`Error::ConcurrentChange`]) and
//! leaves it to the run after.

use std::collections::{HashMap, HashSet};

use bson::{doc, Bson, Document, RawDocumentBuf};
use serde::de::DeserializeOwned;
use ulid::Ulid;

use super::findings::{self, AuditReport, Finding};
use super::scan::{field, id_is, inspect, Read, Seen, State};
use super::statements::{apply, apply_set, fragment, statement, SetOp};
use super::{DEFAULT_SAMPLE, SCAN_BATCH};
use crate::collection::Collection;
use crate::content::ContentHash;
use crate::error::Error;
use crate::names::{
    HASH_FIELD, IDENTITY_FIELD, LEGACY_IDS_FIELD, MOVED_TO_FIELD, RECORD_FIELDS, RESERVED_PREFIX,
};
use crate::op::answer::classify;
use crate::op::Command;
use crate::op::{Scan, ShardKey, Target};
use crate::traits::NaturalKey;
use crate::write::batch::Progress;

/// Old documents held for one sorted delete (about 60 bytes each): the more ids a sort sees,
/// the narrower each delete statement's range.
const DELETE_FLUSH: usize = 100_000;

pub(crate) type Policy<'a, T> = Box<dyn FnMut(&[Candidate<T>]) -> Option<usize> + Send + 'a>;

/// One of the documents that hold an identity with differing content, offered to the
/// [`Adopt::on_conflict`](crate::Adopt::on_conflict) policy.
#[derive(Debug)]
#[non_exhaustive]
pub struct Candidate<T> {
    /// Its stored `_id`.
    pub id: Bson,
    /// The document.
    pub doc: T,
    /// It is the natural-key document at the derived id (others are legacy or drifted).
    pub at_home: bool,
}

/// What [`Collection::adopt`] did (or, in a dry run, would do).
///
/// ```
/// let report = natural_key::AdoptReport::default();
/// assert_eq!(report.adopted + report.merged, 0);
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct AdoptReport {
    /// What the first scan found.
    pub audit: AuditReport,
    /// Legacy or drifted documents now stored under their derived id.
    pub adopted: u64,
    /// Surplus documents deleted because the derived-id document holds their content (or the
    /// policy chose another).
    pub merged: u64,
    /// Identities with differing content resolved by the policy.
    pub resolved: u64,
    /// Identities with differing content left untouched (no policy, or it chose none): the
    /// first `_id` of each, as in the audit.
    pub conflicts: Finding,
    /// Documents a write was refused for, by stored `_id`; they are as they were (run adopt
    /// again for those that changed concurrently).
    pub failures: Vec<(Bson, Error)>,
    /// Each old `_id` with the derived id that now holds its content, when asked for with
    /// [`Adopt::mapping`](crate::Adopt::mapping).
    pub mapping: Vec<(Bson, Ulid)>,
    /// Nothing was written: the counts say what a run would do.
    pub dry_run: bool,
}

/// What an adopt run is asked to do: its builder's options.
pub(crate) struct AdoptOptions<'a, T> {
    pub(crate) dry_run: bool,
    pub(crate) mapping: bool,
    pub(crate) sample: usize,
    pub(crate) policy: Option<Policy<'a, T>>,
    pub(crate) progress: Option<Progress<'a, AdoptReport>>,
}

impl<T> Default for AdoptOptions<'_, T> {
    fn default() -> Self {
        AdoptOptions {
            dry_run: false,
            mapping: false,
            sample: DEFAULT_SAMPLE,
            policy: None,
            progress: None,
        }
    }
}

/// Adopts `coll`'s legacy and drifted documents (see [`Collection::adopt`]): one scan to
/// group identities, one to move documents home, then the identities with differing content.
pub(crate) async fn adopt<T>(
    coll: &Collection<T>,
    mut opts: AdoptOptions<'_, T>,
) -> Result<AdoptReport, Error>
where
    T: NaturalKey + DeserializeOwned + Send + Sync,
{
    let mut report = AdoptReport {
        dry_run: opts.dry_run,
        ..AdoptReport::default()
    };
    let mut groups = findings::scan(coll, opts.sample, &mut report.audit, |_| {}).await?;
    findings::finish(&groups, opts.sample, &mut report.audit);
    if report.audit.is_clean() {
        return Ok(report);
    }
    let target = &coll.target;
    let mut conflicted: HashMap<[u8; 32], Vec<Read<T>>> = HashMap::new();
    let mut doomed = Vec::new();
    let mut scan = Scan::open(target, RawDocumentBuf::new(), None, SCAN_BATCH)
        .await
        .map_err(classify)?;
    loop {
        let batch = scan.next_batch(SCAN_BATCH).await.map_err(classify)?;
        if batch.is_empty() {
            break;
        }
        let mut plan = Plan::on(target);
        for stored in batch {
            let Seen::Read(r) = inspect::<T>(stored) else {
                continue;
            };
            let Some(g) = groups.get_mut(&r.identity) else {
                continue;
            };
            if g.differs {
                conflicted.entry(r.identity).or_default().push(r);
            } else if !r.state.is_at_home() {
                plan.streamed(g, r)?;
            }
        }
        doomed.extend(plan.run(target, opts.dry_run, &mut report).await?);
        if doomed.len() >= DELETE_FLUSH {
            let all = std::mem::take(&mut doomed);
            delete_all(target, opts.dry_run, opts.mapping, all, &mut report).await?;
        }
        if let Some(p) = opts.progress.as_mut() {
            p(&report);
        }
    }
    let mut plan = Plan::on(target);
    for (_, members) in conflicted {
        plan.conflicted(members, &mut opts, &mut report)?;
    }
    doomed.extend(plan.run(target, opts.dry_run, &mut report).await?);
    delete_all(target, opts.dry_run, opts.mapping, doomed, &mut report).await?;
    if let Some(p) = opts.progress.as_mut() {
        p(&report);
    }
    Ok(report)
}

/// The writes of one step, in the order they must land.
#[derive(Default)]
struct Plan {
    /// The field the collection is sharded on (see [`Plan::at`]).
    shard_key: Option<ShardKey>,
    /// Documents releasing the identity they hold, with the id they move to and the filter
    /// that finds them.
    releases: Vec<(Bson, Ulid, Document)>,
    /// Derived-id documents to insert.
    homes: Vec<Home>,
    /// Where each derived id of `homes` is, so the copies of one batch join its insert.
    pending: HashMap<Ulid, usize>,
    /// `update` statements that settle a derived-id document in place (identity set, a
    /// policy's winner written: `true`) or add old ids to it (`false`), with the id.
    updates: Vec<(Ulid, RawDocumentBuf, bool)>,
    /// Old documents to delete once their home holds them, with that home.
    deletes: Vec<(Bson, Ulid)>,
}

/// A derived-id document to insert: the stored fields of the document whose content it
/// takes, and every old id it stands for.
struct Home {
    to: Ulid,
    stored: RawDocumentBuf,
    identity: String,
    hash: ContentHash,
    ids: Vec<Bson>,
}

impl Plan {
    fn on(target: &Target) -> Plan {
        Plan {
            shard_key: target.shard_key.clone(),
            ..Plan::default()
        }
    }

    /// The filter of a statement on the document `id` as `stored`: with the stored value of
    /// the shard key, or `null` where there is none. On a collection sharded on `_nk_identity`
    /// a statement that changes it moves the document to another shard, and DocumentDB on
    /// Citus takes that only from a filter with the current shard key (1088 "shard key value
    /// update is only supported when filtering by the full shard key and specifying
    /// multi:false"); sharded on a key field, the filter goes to the document's shard alone.
    fn at(&self, id: Bson, stored: &RawDocumentBuf) -> Document {
        let mut q = doc! {"_id": id};
        if let Some(key) = &self.shard_key {
            q.insert(
                key.field(),
                field(stored, key.field()).unwrap_or(Bson::Null),
            );
        }
        q
    }

    /// A non-home document of an identity whose documents all hold one content (so one
    /// derived id).
    fn streamed<T>(&mut self, g: &mut super::scan::Group, r: Read<T>) -> Result<(), Error> {
        let identity = ContentHash(r.identity).to_string();
        let to = r.derived;
        if let Some(&k) = self.pending.get(&to) {
            self.homes[k].ids.push(r.id.clone());
            self.deletes.push((r.id, to));
        } else if g.at_home {
            // The home holds this identity, so the value of a key field sharded on too.
            let mut q = doc! {"_id": to.to_string(), IDENTITY_FIELD: &identity};
            if let Some(ShardKey::KeyField(f)) = &self.shard_key {
                q.insert(*f, field(&r.stored, f).unwrap_or(Bson::Null));
            }
            let s = statement(q, doc! {"$addToSet": {LEGACY_IDS_FIELD: r.id.clone()}})?;
            self.updates.push((to, s, false));
            self.deletes.push((r.id, to));
        } else if id_is(&r.id, to) {
            // At its derived id already, without (or with a stale) identity.
            let s = statement(
                self.at(Bson::String(to.to_string()), &r.stored),
                doc! {
                    "$set": {IDENTITY_FIELD: &identity, HASH_FIELD: r.hash.to_string()},
                    "$unset": {MOVED_TO_FIELD: ""},
                },
            )?;
            self.updates.push((to, s, true));
        } else {
            if r.state == State::IdDrift {
                let q = self.at(r.id.clone(), &r.stored);
                self.releases.push((r.id.clone(), to, q));
            }
            self.deletes.push((r.id.clone(), to));
            self.home(Home {
                to,
                stored: r.stored,
                identity,
                hash: r.hash,
                ids: vec![r.id],
            });
        }
        g.at_home = true;
        Ok(())
    }

    fn home(&mut self, h: Home) {
        self.pending.insert(h.to, self.homes.len());
        self.homes.push(h);
    }

    /// All documents of one identity whose content differs.
    fn conflicted<T: Send + Sync>(
        &mut self,
        members: Vec<Read<T>>,
        adopt: &mut AdoptOptions<'_, T>,
        report: &mut AdoptReport,
    ) -> Result<(), Error> {
        let (candidates, mut members): (Vec<Candidate<T>>, Vec<Read<()>>) =
            members.into_iter().map(Read::split).unzip();
        // Old documents the home lists were settled by an earlier run: delete them unasked.
        let listed: Vec<Bson> = members
            .iter()
            .find(|m| m.state.is_at_home())
            .and_then(|h| match field(&h.stored, LEGACY_IDS_FIELD) {
                Some(Bson::Array(ids)) => Some(ids),
                _ => None,
            })
            .unwrap_or_default();
        let settled = |m: &Read<()>| !m.state.is_at_home() && listed.contains(&m.id);
        let candidates: Vec<Candidate<T>> = candidates
            .into_iter()
            .zip(&members)
            .filter(|(_, m)| !settled(m))
            .map(|(c, _)| c)
            .collect();
        for m in members.iter().filter(|m| settled(m)) {
            self.deletes.push((m.id.clone(), m.derived));
        }
        members.retain(|m| !settled(m));
        let same = members.windows(2).all(|w| w[0].hash == w[1].hash);
        let winner = if same {
            members
                .iter()
                .position(|m| m.state.is_at_home())
                .or(Some(0))
        } else {
            adopt
                .policy
                .as_mut()
                .and_then(|policy| policy(&candidates))
                .filter(|&w| w < members.len())
        };
        let Some(w) = winner else {
            report.conflicts.count += 1;
            if report.conflicts.sample.len() < adopt.sample {
                report.conflicts.sample.push(members[0].id.clone());
            }
            return Ok(());
        };
        if !same {
            report.resolved += 1;
        }
        self.resolve(&members, w, listed)
    }

    /// The writes that make member `w`'s content the identity's one document, under its
    /// derived id, listing every other member's id (and the ones `listed` already).
    fn resolve(&mut self, members: &[Read<()>], w: usize, listed: Vec<Bson>) -> Result<(), Error> {
        let to = members[w].derived;
        let identity = ContentHash(members[w].identity).to_string();
        let occupant = members.iter().position(|m| id_is(&m.id, to));
        let mut ids = listed;
        ids.extend(
            members
                .iter()
                .filter(|m| !id_is(&m.id, to))
                .map(|m| m.id.clone()),
        );
        for m in members {
            if !id_is(&m.id, to) {
                if m.state != State::Legacy {
                    let q = self.at(m.id.clone(), &m.stored);
                    self.releases.push((m.id.clone(), to, q));
                }
                self.deletes.push((m.id.clone(), to));
            }
        }
        match occupant {
            // Replaced only while it is as the scan read it.
            Some(o) => {
                let mut q = self.at(Bson::String(to.to_string()), &members[o].stored);
                match field(&members[o].stored, HASH_FIELD) {
                    Some(h) => q.insert(HASH_FIELD, h),
                    None => q.insert(HASH_FIELD, doc! {"$exists": false}),
                };
                let mut s = RawDocumentBuf::new();
                s.append("q", fragment(&q)?);
                s.append(
                    "u",
                    home(&members[w].stored, &identity, &members[w].hash, &ids)?,
                );
                self.updates.push((to, s, true));
            }
            None => self.home(Home {
                to,
                stored: members[w].stored.clone(),
                identity,
                hash: members[w].hash,
                ids,
            }),
        }
        Ok(())
    }

    /// Sends the plan (or, in a dry run, counts it): each step only for the homes whose
    /// previous step landed. Returns the old documents to delete now that their homes hold
    /// them (deleted together, later: see [`delete_all`]).
    async fn run(
        self,
        target: &Target,
        dry: bool,
        report: &mut AdoptReport,
    ) -> Result<Vec<(Bson, Ulid)>, Error> {
        let mut failed: HashSet<Ulid> = HashSet::new();
        for (id, to, e) in release(target, dry, &self.releases).await? {
            failed.insert(to);
            report.failures.push((id, e));
        }
        let homes: Vec<(Ulid, RawDocumentBuf)> = self
            .homes
            .into_iter()
            .filter(|h| !failed.contains(&h.to))
            .map(|h| {
                let mut d = RawDocumentBuf::new();
                d.append("_id", h.to.to_string());
                let body = home(&h.stored, &h.identity, &h.hash, &h.ids)?;
                crate::stored::append_fields(&mut d, &body, &[])
                    .map_err(Error::serialize::<Document>)?;
                Ok((h.to, d))
            })
            .collect::<Result<_, Error>>()?;
        let (homes_count, updates): (Vec<bool>, Vec<(Ulid, RawDocumentBuf)>) = self
            .updates
            .into_iter()
            .filter(|(to, _, _)| !failed.contains(to))
            .map(|(to, s, home)| (home, (to, s)))
            .unzip();
        let counts = [vec![true; homes.len()], homes_count];
        for ((kind, items), counts) in [(Command::Insert, homes), (Command::Update, updates)]
            .into_iter()
            .zip(counts)
        {
            let tos: Vec<Ulid> = items.iter().map(|(to, _)| *to).collect();
            let results = send(target, dry, kind, items).await?;
            for ((r, to), home) in results.into_iter().zip(tos).zip(counts) {
                match r {
                    Ok(()) => report.adopted += u64::from(home),
                    Err(e) => {
                        failed.insert(to);
                        report.failures.push((Bson::String(to.to_string()), e));
                    }
                }
            }
        }
        let deletes: Vec<(Bson, Ulid)> = self
            .deletes
            .into_iter()
            .filter(|(_, to)| !failed.contains(to))
            .collect();
        Ok(deletes)
    }
}

/// Deletes the old documents whose homes hold them, sorted so that each delete statement
/// brackets a narrow range of ids (see `apply_set`). A document already gone (deleted by the
/// run a kill interrupted) is what was wanted.
async fn delete_all(
    target: &Target,
    dry: bool,
    mapping: bool,
    doomed: Vec<(Bson, Ulid)>,
    report: &mut AdoptReport,
) -> Result<(), Error> {
    let ids: Vec<Bson> = doomed.iter().map(|(id, _)| id.clone()).collect();
    report.merged += if dry {
        ids.len() as u64
    } else {
        apply_set(target, SetOp::Delete, &ids).await?
    };
    if mapping {
        report.mapping.extend(doomed);
    }
    Ok(())
}

/// Releases the identities drifted documents hold, so their homes can take them: one
/// statement for all; where it does not match each one, one per document, to tell which
/// vanished. Returns the documents that could not be released.
async fn release(
    target: &Target,
    dry: bool,
    releases: &[(Bson, Ulid, Document)],
) -> Result<Vec<(Bson, Ulid, Error)>, Error> {
    if dry {
        return Ok(Vec::new());
    }
    // A sharded engine moves a document whose shard key an update changes only in a
    // single-document update: DocumentDB on Citus refuses the set-based one (`multi`) with
    // 11000 "Invalid write detected. Please validate the collection and/or shard key being
    // written to". Where `_nk_identity` is the shard key, each release is a statement of its own.
    if target.shard_key != Some(ShardKey::Identity) {
        let ids: Vec<Bson> = releases.iter().map(|(id, ..)| id.clone()).collect();
        if apply_set(target, SetOp::Release, &ids).await? == ids.len() as u64 {
            return Ok(Vec::new());
        }
    }
    let mut statements = Vec::new();
    for (_, to, q) in releases {
        let s = statement(q.clone(), doc! {"$unset": {IDENTITY_FIELD: ""}})?;
        statements.push((*to, s));
    }
    let results = apply(target, Command::Update, statements).await?;
    Ok(releases
        .iter()
        .zip(results)
        .filter_map(|((id, to, _), r)| r.err().map(|e| (id.clone(), *to, e)))
        .collect())
}

/// `apply`, or in a dry run the success it would have.
async fn send(
    target: &Target,
    dry: bool,
    kind: Command,
    docs: Vec<(Ulid, RawDocumentBuf)>,
) -> Result<Vec<Result<(), Error>>, Error> {
    if dry {
        return Ok(docs.iter().map(|_| Ok(())).collect());
    }
    apply(target, kind, docs).await
}

/// The derived-id document for a stored one: every stored field but `_id` and natural-key's
/// own (other code's fields are kept) except the record of applied relative updates, which
/// moves with it, then identity, hash and the old ids.
fn home(
    stored: &RawDocumentBuf,
    identity: &str,
    hash: &ContentHash,
    ids: &[Bson],
) -> Result<RawDocumentBuf, Error> {
    let mut d = RawDocumentBuf::new();
    for element in stored {
        let (k, v) = element.map_err(Error::serialize::<Document>)?;
        if k != "_id" && (!k.starts_with(RESERVED_PREFIX) || RECORD_FIELDS.contains(&k)) {
            d.append_ref(k, v);
        }
    }
    d.append(IDENTITY_FIELD, identity);
    d.append(HASH_FIELD, hash.to_string());
    let mut legacy = bson::RawArrayBuf::new();
    for id in ids {
        legacy.push(bson::RawBson::try_from(id.clone()).map_err(Error::serialize::<Document>)?);
    }
    d.append(LEGACY_IDS_FIELD, legacy);
    Ok(d)
}

impl<T> Read<T> {
    /// The document for a policy, and the rest.
    pub(crate) fn split(self) -> (Candidate<T>, Read<()>) {
        let candidate = Candidate {
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
            version: self.version,
            version_stored: self.version_stored,
        };
        (candidate, rest)
    }
}
