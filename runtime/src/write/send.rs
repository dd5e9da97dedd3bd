//! The one send loop: what a write sends, cut into commands within the engine's limits; each
//! command sent, a whole-command refusal mapped, the write concern checked, and the reply's
//! errors placed on their statements. Upserts, event inserts and the maintenance writes all
//! send through here; what a verdict means for their documents is theirs to decide.
//!
//! Throttling lands here too, once. A command the engine refuses whole because it is busy
//! (`op::answer::THROTTLE_CODES`: Cosmos DB's 16500), and the statements of a command that it refused
//! so while applying the others, are sent again — only those — after the wait the engine
//! names, within the call's retry policy; the writers never
//! see them (a throttled statement was not applied). A command whose outcome the engine cannot
//! tell is not sent again here: its writer decides from the next read, as after a lost reply.

use ulid::Ulid;

use crate::error::Error;
use crate::op::answer;
use crate::op::answer::outcome_unknown;
use crate::op::command::{command_refusal, WriteReply};
use crate::op::{self, Command, Refusal, Session, Target};
use crate::raw::ToEmbedded;
use crate::retry::Attempts;

/// What one command's reply says of its statements.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The command failed as a whole with a refusal of its statements, without saying which
    /// (FerretDB 1.x reports a duplicate so).
    Refused(Refusal),
    /// Each statement's refusal at its index (`None`: not refused), and the reply's `n`
    /// (documents inserted, matched or deleted).
    Replied {
        refusals: Vec<Option<Refusal>>,
        n: i64,
    },
    /// The reply's errors name statements the command did not hold: none can be placed.
    Unplaced(Vec<Refusal>),
    /// The engine cannot tell whether it applied the command (`op::answer::outcome_unknown`):
    /// any of its statements may have been.
    Unknown,
}

/// Sends `items` as `kind` commands (one item each when `one_by_one`), calling `settle` with
/// the indexes of `items` each command carried (in the order of their ids `id(k)`, the order
/// they are sent in) and its verdict; throttled items
/// are sent again, and settled once. `id(k)` names item `k` in an error. `Err` for a failure
/// of the whole call (network, an unacknowledged write concern, a command error other than a
/// refusal, throttling beyond the retry policy): what was settled before it stays settled.
#[allow(clippy::too_many_arguments)] // the call's parts, each used once: no struct would read better
pub(crate) async fn send<D: ToEmbedded>(
    target: &Target,
    kind: Command,
    items: &[D],
    one_by_one: bool,
    id: impl Fn(usize) -> Ulid,
    tries: &mut Attempts,
    mut session: Session<'_>,
    mut settle: impl FnMut(&[usize], Verdict),
) -> Result<(), Error> {
    let limits = target.deployment.limits();
    // In `_id` order, whatever the caller's: two writers whose commands share documents then
    // take the engine's row and index locks in the same order and cannot wait on each other.
    // FerretDB 2 / DocumentDB runs a command as one PostgreSQL transaction; two unordered
    // inserts of the same 2,000 documents in opposite orders waited on each other for minutes.
    let mut queue: Vec<usize> = (0..items.len()).collect();
    queue.sort_by_key(|&k| id(k));
    // Rounds in a row in which the engine applied nothing: the policy's attempts bound this,
    // not the throttles of a call that is making progress.
    let mut streak = 0;
    while !queue.is_empty() {
        let mut again = Vec::new();
        let mut throttle = None;
        let mut progress = false;
        let sizes = queue.iter().map(|&k| items[k].embedded().len());
        for range in kind.cut(limits, one_by_one, sizes) {
            let carried = &queue[range];
            let part: Vec<&D> = carried.iter().map(|&k| &items[k]).collect();
            let reply = op::command::run(target, kind, &part, session.as_deref_mut()).await;
            let verdict = match reply {
                Ok(reply) => {
                    reply.write_concern(target, id(carried[0]))?;
                    place(reply, part.len())
                }
                Err(e) => match answer::throttle(&target.namespace, &e, false) {
                    Some(busy) => {
                        throttle = Some(busy);
                        again.extend_from_slice(carried);
                        continue;
                    }
                    None if outcome_unknown(&e) => Verdict::Unknown,
                    None => Verdict::Refused(command_refusal(e)?),
                },
            };
            let (rest, verdict) =
                take_throttled(carried, verdict, &mut again, &mut throttle, target);
            if !rest.is_empty() {
                progress = true;
                settle(&rest, verdict);
            }
        }
        if let Some(error) = throttle {
            streak = if progress { 1 } else { streak + 1 };
            tries.resend(error, streak).await?;
        }
        queue = again;
    }
    Ok(())
}

/// The verdict without its throttled statements, which go into `again`; `throttle` keeps the
/// last of their errors (the wait to honour).
fn take_throttled(
    carried: &[usize],
    verdict: Verdict,
    again: &mut Vec<usize>,
    throttle: &mut Option<Error>,
    target: &Target,
) -> (Vec<usize>, Verdict) {
    let Verdict::Replied { refusals, n } = verdict else {
        return (carried.to_vec(), verdict);
    };
    if !refusals
        .iter()
        .flatten()
        .any(|r| matches!(r, Refusal::Throttled { .. }))
    {
        return (carried.to_vec(), Verdict::Replied { refusals, n });
    }
    let mut rest = Vec::with_capacity(carried.len());
    let mut kept = Vec::with_capacity(carried.len());
    for (&k, refusal) in carried.iter().zip(refusals) {
        match refusal {
            Some(Refusal::Throttled { code, message }) => {
                *throttle = Some(Error::throttled(&target.namespace, code, message));
                again.push(k);
            }
            other => {
                rest.push(k);
                kept.push(other);
            }
        }
    }
    (rest, Verdict::Replied { refusals: kept, n })
}

/// The reply's errors on their statements. A command of one statement owns every error.
fn place(reply: WriteReply, len: usize) -> Verdict {
    let refusals = reply.write_errors.iter().map(|e| (e.index, e.refusal()));
    if len > 1 && reply.write_errors.iter().any(|e| e.index >= len) {
        return Verdict::Unplaced(refusals.map(|(_, r)| r).collect());
    }
    let mut placed = vec![None; len];
    for (index, refusal) in refusals {
        let slot = &mut placed[if len == 1 { 0 } else { index }];
        slot.get_or_insert(refusal);
    }
    Verdict::Replied {
        refusals: placed,
        n: reply.n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::command::WriteErrorEntry;

    fn error(index: usize, code: i32) -> WriteErrorEntry {
        WriteErrorEntry {
            index,
            code,
            errmsg: format!("e{index}"),
            key_pattern: None,
            key_value: None,
        }
    }

    fn reply(n: i64, errors: Vec<WriteErrorEntry>) -> WriteReply {
        WriteReply {
            n,
            write_errors: errors,
            write_concern_error: None,
        }
    }

    #[test]
    fn errors_are_placed_on_their_statements() {
        match place(reply(2, vec![error(1, 2)]), 3) {
            Verdict::Replied { refusals, n } => {
                assert_eq!(n, 2);
                assert!(refusals[0].is_none() && refusals[2].is_none());
                assert!(matches!(refusals[1], Some(Refusal::Other { code: 2, .. })));
            }
            other => panic!("{other:?}"),
        }
        // An index the command does not hold: nothing is placed.
        assert!(matches!(
            place(reply(0, vec![error(0, 2), error(3, 2)]), 3),
            Verdict::Unplaced(r) if r.len() == 2
        ));
        // One statement owns whatever the reply says, at any index.
        match place(reply(0, vec![error(5, 2)]), 1) {
            Verdict::Replied { refusals, .. } => assert!(refusals[0].is_some()),
            other => panic!("{other:?}"),
        }
    }
}
