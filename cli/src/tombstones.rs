//! `natural-key prune-tombstones`: the library's pruning of tombstones by age, on a collection
//! named on the command line, and its report.

use std::process::ExitCode;

use natural_key_runtime::bson;

use crate::args::PruneTombstonesArgs;
use crate::output::{chain, print, Failure};
use crate::server::{connect, database};

pub(crate) fn prune(args: PruneTombstonesArgs) -> Result<ExitCode, Failure> {
    let db = database(&args.connect)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let report = runtime.block_on(async {
        let client = connect(&args.connect).await.map_err(Failure::stopped)?;
        let coll = client
            .database(&db)
            .collection::<bson::Document>(&args.connect.collection);
        let mut prune = natural_key_runtime::spec::prune_tombstones(&coll, args.older_than);
        if args.dry_run {
            prune = prune.dry_run();
        }
        prune
            .await
            .map_err(|e| Failure::from_error(format!("pruning tombstones: {}", chain(&e)), &e))
    })?;
    let namespace = format!("{db}.{}", args.connect.collection);
    let text = if args.json {
        serde_json::json!({
            "namespace": namespace,
            "pruned": report.pruned,
            "changed": report.changed,
            "dry_run": report.dry_run,
        })
        .to_string()
    } else {
        let verb = if report.dry_run {
            "would prune"
        } else {
            "pruned"
        };
        format!(
            "{namespace}: {verb} {} tombstones older than {}s; {} changed since read (left alone)",
            report.pruned,
            args.older_than.as_secs(),
            report.changed
        )
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}
