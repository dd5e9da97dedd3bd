//! Shared by the examples: where the database is.

use std::path::Path;
use std::process::Command;

use natural_key::mongodb::Collection;

/// `MONGODB_URI` if set; otherwise start (building once) the test engine (FerretDB 2 on DocumentDB where it can be built) with
/// `scripts/db up` and use the URI it prints last.
pub fn mongodb_uri() -> Result<String, Box<dyn std::error::Error>> {
    if let Ok(uri) = std::env::var("MONGODB_URI") {
        if !uri.is_empty() {
            return Ok(uri);
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db");
    eprintln!("MONGODB_URI is not set: starting the test engine with scripts/db up ...");
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err("scripts/db up failed (see above); or set MONGODB_URI".into());
    }
    let stdout = String::from_utf8(out.stdout)?;
    let uri = stdout
        .lines()
        .last()
        .ok_or("scripts/db up printed no URI")?
        .trim()
        .to_string();
    eprintln!("using {uri}");
    Ok(uri)
}

/// Drops `coll`, which may not exist yet. MongoDB and FerretDB accept dropping a missing
/// collection; mongo-java-server answers with an error (without a `code`), so a failed drop is
/// ignored when, and only when, the collection is not there.
pub async fn drop_collection<T: Send + Sync>(
    coll: &Collection<T>,
) -> Result<(), Box<dyn std::error::Error>> {
    let Err(e) = coll.drop().await else {
        return Ok(());
    };
    let ns = coll.namespace();
    let names = coll
        .client()
        .database(&ns.db)
        .list_collection_names()
        .await?;
    if names.contains(&ns.coll) {
        return Err(e.into());
    }
    Ok(())
}
