//! The one send loop: what a write sends, cut into commands within the engine's limits; each
//! command sent, a whole-command refusal mapped, the write concern checked, and the reply's
//! errors placed on their statements. Upserts, event inserts and the maintenance writes all
//! send through here; what a verdict means for their documents is theirs to decide.

use std::ops::Range;

use ulid::Ulid;

use crate::error::Error;
use crate::op::write::{command_refusal, WriteReply};
use crate::op::{self, Command, Refusal, Session, Target};
use crate::raw::ToEmbedded;

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
}

/// Sends `items` as `kind` commands (one item each when `one_by_one`), calling `settle` with
/// each command's range of `items` and its verdict. `id(k)` names item `k` in a write concern
/// error. `Err` for a failure of the whole call (network, an unacknowledged write concern, a
/// command error other than a refusal): what was settled before it stays settled.
pub(crate) async fn send<D: ToEmbedded>(
    target: &Target,
    kind: Command,
    items: &[D],
    one_by_one: bool,
    id: impl Fn(usize) -> Ulid,
    mut session: Session<'_>,
    mut settle: impl FnMut(Range<usize>, Verdict),
) -> Result<(), Error> {
    let limits = target.deployment.limits();
    let max = if one_by_one {
        1
    } else {
        kind.max_items(limits)
    };
    let sizes = items.iter().map(|d| d.embedded().len());
    for range in op::chunks(sizes, limits.max_command_bytes, max) {
        let part = &items[range.clone()];
        let verdict = match op::write::run(target, kind, part, session.as_deref_mut()).await {
            Ok(reply) => {
                reply.write_concern(target, id(range.start))?;
                place(reply, part.len())
            }
            Err(e) => Verdict::Refused(command_refusal(e)?),
        };
        settle(range, verdict);
    }
    Ok(())
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
    use crate::op::write::WriteErrorEntry;

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
