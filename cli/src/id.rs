//! `natural-key id`: the id, or the identity, that typed key values derive.

use std::process::ExitCode;

use natural_key_runtime::spec::rfc3339_millis;
use natural_key_runtime::{compute_id, compute_identity};

use crate::args::IdArgs;
use crate::output::print;

pub(crate) fn id(args: IdArgs) -> Result<ExitCode, String> {
    let scheme = args.scheme.scheme()?;
    if args.identity {
        let identity = compute_identity(scheme, &args.keys).map_err(|e| e.to_string())?;
        print(&identity.to_string())?;
        return Ok(ExitCode::SUCCESS);
    }
    let ts = args.ts.as_deref().unwrap_or_default();
    let ms = parse_ms(ts)?;
    let id = compute_id(scheme, &args.keys, ms).map_err(|e| e.to_string())?;
    print(&id.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn parse_ms(ts: &str) -> Result<i128, String> {
    let digits = ts.strip_prefix('-').unwrap_or(ts);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return ts
            .parse::<i128>()
            .map_err(|_| format!("--ts {ts}: too many digits for Unix milliseconds"));
    }
    rfc3339_millis(ts).map_err(|e| format!("--ts: {e}, or Unix milliseconds"))
}
