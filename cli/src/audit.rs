//! `natural-key audit`: one scan of a stored collection by the library's audit, the findings
//! weighed against --allow, and the report as a table or JSON.

use std::io::IsTerminal;
use std::process::ExitCode;

use natural_key_runtime::bson::{self, Bson};
use natural_key_runtime::mongodb;
use natural_key_runtime::spec::{KeyField, KeySpec};
use natural_key_runtime::{AuditReport, Finding};

use crate::args::AuditArgs;
use crate::output::print;
use crate::server::{connect, database, short};
use crate::values::{Kind, KINDS};

pub(crate) fn audit(args: AuditArgs) -> Result<ExitCode, String> {
    let spec = args.spec.spec()?;
    let db = database(&args.connect)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let report = runtime.block_on(run_audit(&args, &db, &spec))?;
    let over = exceeded(&report, &args.allow);
    let namespace = format!("{db}.{}", args.connect.collection);
    if args.json {
        print(&json(&namespace, &report, &over).to_string())?;
    } else {
        print(&table(&namespace, &spec, &report, &over))?;
    }
    Ok(if over.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn run_audit(args: &AuditArgs, db_name: &str, spec: &KeySpec) -> Result<AuditReport, String> {
    let client = connect(&args.connect).await?;
    let collection = &args.connect.collection;
    let db = client.database(db_name);
    let unreachable =
        |e: mongodb::error::Error| format!("cannot reach the server of --uri: {}", short(&e));
    let names = db.list_collection_names().await.map_err(unreachable)?;
    if !names.contains(collection) {
        return Err(format!(
            "database `{db_name}` has no collection `{collection}` (it has {} others); check \
             --db and --collection",
            names.len()
        ));
    }
    let coll = db.collection::<bson::Document>(collection);
    let bar = if std::io::stderr().is_terminal() && !args.json {
        let total = coll.estimated_document_count().await.map_err(unreachable)?;
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} {pos}/{len} documents read [{elapsed}, {eta} left] {wide_bar}",
        ) {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };
    let audit = spec.audit(&coll).sample(args.sample);
    let audit = match bar.clone() {
        Some(bar) => audit.on_progress(move |r| bar.set_position(r.scanned)),
        None => audit,
    };
    let report = audit.await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report.map_err(|e| format!("audit of {}: {}", coll.namespace(), e))?;
    if report.unreadable.count > 0 {
        // A field that no document holds is a typo in the spec, not a finding.
        let mut fields: Vec<&str> = spec.keys().iter().map(KeyField::name).collect();
        fields.push(spec.timestamp());
        for field in fields {
            let any = coll
                .find_one(bson::doc! { field: { "$exists": true } })
                .await
                .map_err(unreachable)?;
            if any.is_none() {
                return Err(format!(
                    "no document of {} has the field `{field}`: check its spelling in \
                     --key/--timestamp",
                    coll.namespace()
                ));
            }
        }
    }
    Ok(report)
}

fn finding(report: &AuditReport, kind: Kind) -> &Finding {
    match kind {
        Kind::Unreadable => &report.unreadable,
        Kind::Legacy => &report.legacy,
        Kind::IdDrift => &report.id_drift,
        Kind::DuplicatesIdentical | Kind::Duplicates => &report.duplicates_identical,
        Kind::DuplicatesDiffering => &report.duplicates_differing,
    }
}

/// The findings beyond what `--allow` tolerates: (name, count, allowed).
fn exceeded(report: &AuditReport, allow: &[(Kind, Option<u64>)]) -> Vec<(&'static str, u64, u64)> {
    let allowed = |kind: Kind| -> Option<u64> {
        let mut limit = Some(0);
        for (k, n) in allow {
            let applies = *k == kind
                || (*k == Kind::Duplicates
                    && matches!(kind, Kind::DuplicatesIdentical | Kind::DuplicatesDiffering));
            if applies {
                // The last word on a finding wins; no limit means any number.
                limit = *n;
            }
        }
        limit
    };
    KINDS
        .iter()
        .filter_map(|(name, kind)| {
            let count = finding(report, *kind).count;
            match allowed(*kind) {
                Some(max) if count > max => Some((*name, count, max)),
                _ => None,
            }
        })
        .collect()
}

fn describe(spec: &KeySpec) -> String {
    let keys: Vec<&str> = spec.keys().iter().map(KeyField::name).collect();
    format!("key ({}), timestamp {}", keys.join(", "), spec.timestamp())
}

fn table(
    namespace: &str,
    spec: &KeySpec,
    report: &AuditReport,
    over: &[(&str, u64, u64)],
) -> String {
    let mut out = format!("audit of {namespace} by {}\n\n{report}\n", describe(spec));
    if let Some(why) = &report.first_unreadable {
        out.push_str(&format!("\nfirst unreadable: {why}\n"));
    }
    out.push('\n');
    if over.is_empty() {
        out.push_str("within --allow");
    } else {
        let parts: Vec<String> = over
            .iter()
            .map(|(name, count, max)| format!("{name} {count} > {max}"))
            .collect();
        out.push_str(&format!("beyond --allow: {}", parts.join(", ")));
    }
    out
}

fn json(namespace: &str, report: &AuditReport, over: &[(&str, u64, u64)]) -> serde_json::Value {
    use serde_json::json;
    let finding = |f: &Finding| {
        let sample: Vec<serde_json::Value> = f
            .sample
            .iter()
            .map(|id: &Bson| id.clone().into_relaxed_extjson())
            .collect();
        json!({ "count": f.count, "sample": sample })
    };
    let hash_drift = if report.hash_checked {
        let mut v = finding(&report.hash_drift);
        v["checked"] = json!(true);
        v
    } else {
        json!({ "checked": false, "count": null, "sample": [] })
    };
    let exceeded: Vec<serde_json::Value> = over
        .iter()
        .map(|(name, count, max)| json!({ "finding": name, "count": count, "allowed": max }))
        .collect();
    json!({
        "collection": namespace,
        "scanned": report.scanned,
        "clean": report.clean,
        "unreadable": finding(&report.unreadable),
        "first_unreadable": report.first_unreadable,
        "legacy": finding(&report.legacy),
        "id_drift": finding(&report.id_drift),
        "hash_drift": hash_drift,
        "duplicates_identical": finding(&report.duplicates_identical),
        "duplicates_differing": finding(&report.duplicates_differing),
        "surplus_documents": report.surplus_documents,
        "exceeded": exceeded,
        "within_allow": over.is_empty(),
    })
}
