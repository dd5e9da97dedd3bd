//! Shared by the examples: where the database is.

use std::path::Path;
use std::process::Command;

/// `MONGODB_URI` if set; otherwise start (building once) the embedded FerretDB with
/// `scripts/db up` and use the URI it prints last.
pub fn mongodb_uri() -> Result<String, Box<dyn std::error::Error>> {
    if let Ok(uri) = std::env::var("MONGODB_URI") {
        if !uri.is_empty() {
            return Ok(uri);
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/db");
    eprintln!("MONGODB_URI is not set: starting the embedded FerretDB with scripts/db up ...");
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
