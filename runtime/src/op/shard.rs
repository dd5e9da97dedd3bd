//! Which field a collection's documents are distributed by, asked of the engine with
//! `explain`. On DocumentDB's distributed engine (Citus, the core of Azure DocumentDB's
//! multi-shard clusters) this is the only way: FerretDB presents the cluster as one server
//! (`hello` says standalone, `collStats` has no `sharded`, there is no `shardCollection`), but
//! the plan of a `find` is Citus' own, and its "Task Count" says how many shards the read goes
//! to: one for an equality on the shard key, every shard for any other filter.
//!
//! Engines whose plans have no task count (MongoDB, a single DocumentDB, FerretDB 1.x,
//! mongo-java-server) or that refuse `explain` tell nothing; the handle then keeps what it was
//! told (`OpenCollection::sharded`) and what `hello` says.

use bson::{doc, Bson, Document};

use super::answer::classify;
use super::{encode, Target};
use crate::error::Error;

/// How a collection's documents are placed, as far as the engine's plans tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// The plans say nothing of shards: not a distributed engine, or one that does not say.
    Unknown,
    /// Every document in one place: an unsharded collection (on Citus, a single shard).
    Single,
    /// Spread over several shards; `by` is the one of the fields asked about whose equality
    /// goes to one shard (the shard key), if any of them does.
    Sharded {
        shards: u32,
        by: Option<&'static str>,
    },
}

/// The value the probing filters compare with: no document needs to hold it, since only the
/// plan is asked for.
const PROBE: &str = "natural-key shard probe";

/// How `target`'s documents are placed, and which of `fields` (if any) is the shard key.
pub(crate) async fn placement(
    target: &Target,
    fields: &[&'static str],
) -> Result<Placement, Error> {
    let Some(shards) = task_count(target, doc! {}).await? else {
        return Ok(Placement::Unknown);
    };
    if shards <= 1 {
        return Ok(Placement::Single);
    }
    for &field in fields {
        if task_count(target, doc! { field: PROBE }).await? == Some(1) {
            return Ok(Placement::Sharded {
                shards,
                by: Some(field),
            });
        }
    }
    Ok(Placement::Sharded { shards, by: None })
}

/// The number of shards a `find` with `filter` would read, from its plan; `None` when the plan
/// does not say or the engine does not explain. A failure to reach the engine is an error.
async fn task_count(target: &Target, filter: Document) -> Result<Option<u32>, Error> {
    let cmd = doc! {
        "explain": { "find": target.name.as_str(), "filter": filter },
        "verbosity": "queryPlanner",
    };
    match target.run(encode(&cmd).map_err(classify)?, None).await {
        Ok(reply) => Ok(find_task_count(&Bson::Document(reply))),
        Err(e) => match classify(e) {
            transient @ Error::Transient(_) => Err(transient),
            // An engine without `explain`, or one that cannot explain this: it tells nothing.
            _ => Ok(None),
        },
    }
}

/// Citus' `"Task Count"`, wherever the plan nests it (`queryPlanner.Plan."Distributed
/// Query".Job`).
fn find_task_count(plan: &Bson) -> Option<u32> {
    match plan {
        Bson::Document(d) => {
            let count = match d.get("Task Count") {
                Some(Bson::Double(n)) => Some(*n),
                Some(Bson::Int32(n)) => Some(f64::from(*n)),
                Some(Bson::Int64(n)) => Some(*n as f64),
                _ => None,
            };
            match count {
                Some(n) if (0.0..=f64::from(u32::MAX)).contains(&n) => Some(n as u32),
                Some(_) => None,
                None => d.values().find_map(find_task_count),
            }
        }
        Bson::Array(a) => a.iter().find_map(find_task_count),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape FerretDB 2.5 returns from DocumentDB on Citus 12.1 (trimmed from a real reply).
    #[test]
    fn the_task_count_is_read_wherever_the_plan_nests_it() {
        let plan = doc! { "queryPlanner": { "Plan": {
        "Node Type": "Custom Scan", "Custom Plan Provider": "Citus Adaptive",
        "Distributed Query": { "Job": {
            "Tasks": [{ "Node": "host=127.0.0.1", "Remote Plan": [[{ "Plan": { "Node Type": "Seq Scan" } }]] }],
            "Task Count": 8.0, "Tasks Shown": "One of 8" } } } }, "ok": 1.0 };
        assert_eq!(find_task_count(&Bson::Document(plan)), Some(8));
        let one = doc! { "a": [{ "b": { "Task Count": 1_i32 } }] };
        assert_eq!(find_task_count(&Bson::Document(one)), Some(1));
        // MongoDB's and a single DocumentDB's plans have none.
        let mongo = doc! { "queryPlanner": { "winningPlan": { "stage": "COLLSCAN" } }, "ok": 1 };
        assert_eq!(find_task_count(&Bson::Document(mongo)), None);
        let odd = doc! { "Task Count": "eight" };
        assert_eq!(find_task_count(&Bson::Document(odd)), None);
        let negative = doc! { "Task Count": -1.0 };
        assert_eq!(find_task_count(&Bson::Document(negative)), None);
    }
}
