//! `natural-key`: the id scheme, the audit and ingest from a shell, for the people who run the
//! collections. Everything it computes comes from `natural-key-runtime` (`compute_id`,
//! `KeySpec`, the audit's scan and report, `SpecCollection`'s guarded writes); this crate only
//! reads arguments and input, and prints.

mod ingest;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use natural_key_runtime::bson::{self, Bson};
use natural_key_runtime::mongodb::{self, options::ClientOptions};
use natural_key_runtime::spec::{rfc3339_millis, KeyField, KeyKind, KeySpec, TimestampForm};
use natural_key_runtime::{compute_id, compute_identity, AuditReport, Finding, KeyValue, Scheme};

const ALLOW_HELP: &str = "Findings tolerated before the exit status turns 1: a comma-separated \
list (or the flag repeated) of FINDING or FINDING=N. FINDING is unreadable, legacy, id-drift, \
duplicates-identical, duplicates-differing, or duplicates (both duplicate kinds); FINDING alone \
allows any number of it, FINDING=N at most N (documents; for duplicates, identities). Findings \
not named are allowed 0. Example: --allow legacy,duplicates-identical=5. Hash drift is never \
counted: it is not checked without the Rust type.";

/// Ids from natural keys, audits of stored collections, and idempotent ingest of files
/// (docs/id-scheme.md).
///
/// Exit status: 0 success (for audit: no finding beyond --allow; for ingest: every line
/// stored or unchanged), 1 audit findings beyond --allow or ingest lines refused, 2 a usage,
/// input or connection error, or an ingest stopped by the server (one line on stderr).
#[derive(Parser)]
#[command(name = "natural-key", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the id (or, with --identity, the identity) that typed key values derive.
    ///
    /// Keys are TYPE:VALUE, in the type's declaration order: str:TEXT, int:DECIMAL,
    /// bool:true|false, bytes:HEX, uuid:8-4-4-4-12 (hyphenated), objectid:24HEX, none.
    /// Values are hashed as given: type a `#[key(lowercase)]` key in lowercase.
    ///
    /// Example: natural-key id --ts 2023-11-14T22:13:20Z str:hello-world str:en
    Id(IdArgs),
    /// Audit a stored collection against a key spec: legacy documents, duplicates, id drift.
    ///
    /// Reads every document once (nothing is written) and derives each one's id and identity
    /// from its fields by --key and --timestamp, as `#[derive(NaturalKey)]` would. Hash drift
    /// needs the Rust type and is reported as not checked.
    ///
    /// Example: natural-key audit --uri mongodb://localhost/ --db blog --collection posts
    /// --key slug:str --key lang:str:lowercase --timestamp published_at
    Audit(AuditArgs),
    /// Upsert documents from a file (or stdin) by their natural key: derived ids, unchanged
    /// documents cost no write, a changed timestamp key is refused, reruns are free.
    ///
    /// NDJSON (one JSON object per line; Extended JSON such as {"$date": ...} for the types
    /// JSON lacks) or CSV/TSV with a header. Lines that cannot be written are refused one by
    /// one, with their line number and reason, into --reject; the rest is written.
    ///
    /// Example: natural-key ingest posts.ndjson --db blog --collection posts --key slug:str
    /// --key lang:str:lowercase --timestamp published_at --reject rejects.ndjson
    Ingest(ingest::IngestArgs),
}

/// Where the collection is: the connection string from --uri or MONGODB_URI.
#[derive(Args)]
struct ConnectArgs {
    /// The connection string (with retryWrites=false where the engine needs it). Default: the
    /// MONGODB_URI environment variable, which keeps a password out of the process list and
    /// the shell's history.
    #[arg(long, env = "MONGODB_URI", hide_env_values = true)]
    uri: String,
    /// The database.
    #[arg(long)]
    db: String,
    /// The collection.
    #[arg(long)]
    collection: String,
    /// Seconds to wait for the server (server selection and connecting).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    timeout: u64,
}

/// The natural key of the stored documents, as `#[derive(NaturalKey)]` declares it.
#[derive(Args)]
struct SpecArgs {
    /// An identity key field, NAME:TYPE[:OPTION]... in declaration order. TYPE: str, int,
    /// bool, bytes, uuid, objectid. OPTION: lowercase, nfc (str only, as #[key(lowercase)],
    /// #[key(nfc)]), optional (an Option field: absent or null is None). The type and options
    /// are read from the right, so NAME may hold ':'.
    #[arg(long = "key", required = true, value_name = "NAME:TYPE[:OPTION]", value_parser = parse_key_field)]
    keys: Vec<KeyField>,
    /// The timestamp key field, NAME[:FORM]. FORM: ms (int32/int64 Unix ms), date (BSON
    /// date), rfc3339 (text, as chrono and jiff store it), systemtime ({secs_since_epoch,
    /// nanos_since_epoch}), or any (default: each by its BSON type).
    #[arg(long, value_name = "NAME[:FORM]", value_parser = parse_timestamp_field)]
    timestamp: (String, TimestampForm),
    #[command(flatten)]
    scheme: SchemeArgs,
    /// A `#[natural_key(skip_hash)]` field: left out of the content hash (and, in an audit,
    /// when telling identical duplicates from differing ones).
    #[arg(long, value_name = "FIELD")]
    skip_hash: Vec<String>,
}

impl SpecArgs {
    fn spec(&self) -> Result<KeySpec, String> {
        let scheme = self.scheme.scheme()?;
        let (ts_name, form) = self.timestamp.clone();
        let mut names: Vec<&str> = self.keys.iter().map(KeyField::name).collect();
        names.push(&ts_name);
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(format!("field `{n}` is named twice in --key/--timestamp"));
            }
        }
        let mut spec = KeySpec::new(scheme, leak(ts_name.clone())).timestamp_form(form);
        for k in &self.keys {
            spec = spec.key(k.clone());
        }
        for f in &self.skip_hash {
            spec = spec.skip_hash(leak(f.clone()));
        }
        Ok(spec)
    }
}

/// A client for --uri, waiting at most --timeout for the server; the messages never carry the
/// connection string.
async fn connect(args: &ConnectArgs) -> Result<mongodb::Client, String> {
    let mut options = ClientOptions::parse(&args.uri)
        .await
        .map_err(|e| format!("bad --uri: {}", short(&e)))?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    options.server_selection_timeout = Some(timeout);
    options.connect_timeout = Some(timeout);
    options
        .app_name
        .get_or_insert_with(|| "natural-key-cli".into());
    mongodb::Client::with_options(options).map_err(|e| format!("bad --uri: {}", short(&e)))
}

/// An error and its sources, `outer: inner`.
fn chain(e: &dyn std::error::Error) -> String {
    natural_key_runtime::ErrorChain(e).to_string()
}

/// The password of a `mongodb://user:password@host` connection string, to keep out of every
/// message.
fn password(uri: &str) -> Option<&str> {
    let rest = uri.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then_some(password)
}

#[derive(Args)]
struct SchemeArgs {
    /// The id scheme (`#[natural_key(scheme = ...)]`).
    #[arg(long, value_enum, default_value_t = SchemeName::Default)]
    scheme: SchemeName,
    /// The default scheme's namespace (`#[natural_key(namespace = ...)]`); empty when absent.
    #[arg(long, conflicts_with = "separator")]
    namespace: Option<String>,
    /// The joined scheme's separator (`#[natural_key(separator = ...)]`); ":" when absent.
    #[arg(long)]
    separator: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SchemeName {
    /// Scheme v1: typed, length-prefixed keys after a namespace.
    Default,
    /// The seed recipe: SHA-256 over the keys' text joined by a separator.
    Joined,
}

#[derive(Args)]
struct IdArgs {
    #[command(flatten)]
    scheme: SchemeArgs,
    /// The timestamp key: Unix milliseconds, or RFC 3339 (floored to the millisecond).
    #[arg(
        long,
        value_name = "MS|RFC3339",
        required_unless_present = "identity",
        allow_hyphen_values = true
    )]
    ts: Option<String>,
    /// Print the identity (what `_nk_identity` stores, 64 hex digits) instead of the id; it
    /// does not depend on the timestamp.
    #[arg(long)]
    identity: bool,
    /// The identity key values, in declaration order.
    #[arg(required = true, value_name = "TYPE:VALUE", value_parser = parse_key_value)]
    keys: Vec<KeyValue<'static>>,
}

#[derive(Args)]
struct AuditArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    spec: SpecArgs,
    #[arg(long, value_name = "FINDING[=N],...", value_delimiter = ',', value_parser = parse_allow, long_help = ALLOW_HELP, help = "Findings tolerated before the exit status turns 1 (see --help)")]
    allow: Vec<(Kind, Option<u64>)>,
    /// Print the report as one JSON object instead of a table (and no progress bar).
    #[arg(long)]
    json: bool,
    /// How many `_id`s to show per finding.
    #[arg(long, default_value_t = 10)]
    sample: usize,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message up to its usage block, on one line.
            let text = e.render().to_string();
            let message = text.split("\n\n").next().unwrap_or("invalid arguments");
            let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            return fail(&format!("{message} (see --help)"));
        }
    };
    let secret = match &cli.command {
        Command::Audit(a) => password(&a.connect.uri).map(str::to_string),
        Command::Ingest(a) => password(&a.connect.uri).map(str::to_string),
        Command::Id(_) => None,
    };
    let result = match cli.command {
        Command::Id(args) => id(args),
        Command::Audit(args) => audit(args),
        Command::Ingest(args) => ingest::ingest(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => match secret {
            Some(p) => fail(&message.replace(&p, "****")),
            None => fail(&message),
        },
    }
}

/// One line on stderr, exit status 2.
fn fail(message: &str) -> ExitCode {
    let one_line = message.replace('\n', " ");
    let _ = writeln!(std::io::stderr(), "natural-key: error: {one_line}");
    ExitCode::from(2)
}

/// Writes to stdout without the panic `println!` gives on a closed pipe.
fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the result: {e}"))
}

/// `Scheme` holds `&'static str`, as a derive's literals are; the few strings of one run are
/// leaked once, which ends with the process.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl SchemeArgs {
    fn scheme(&self) -> Result<Scheme, String> {
        match self.scheme {
            SchemeName::Default => {
                if self.separator.is_some() {
                    return Err(
                        "--separator belongs to the joined scheme: add --scheme joined, \
                                or leave it out"
                            .into(),
                    );
                }
                Ok(Scheme::Default {
                    namespace: leak(self.namespace.clone().unwrap_or_default()),
                })
            }
            SchemeName::Joined => {
                if self.namespace.is_some() {
                    return Err("the joined scheme has no namespace (it reproduces \
                                sha256(a + \":\" + b) byte for byte): leave --namespace out"
                        .into());
                }
                // No NUL check: an argument cannot hold one.
                let separator = self.separator.clone().unwrap_or_else(|| ":".into());
                Ok(Scheme::Joined {
                    separator: leak(separator),
                })
            }
        }
    }
}

fn id(args: IdArgs) -> Result<ExitCode, String> {
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

const KEY_VALUE_FORMS: &str = "str:TEXT, int:DECIMAL, bool:true|false, bytes:HEX, \
                               uuid:8-4-4-4-12, objectid:24HEX or none";

fn parse_key_value(arg: &str) -> Result<KeyValue<'static>, String> {
    if arg == "none" || arg == "none:" {
        return Ok(KeyValue::None);
    }
    let Some((kind, value)) = arg.split_once(':') else {
        return Err(format!("a key is TYPE:VALUE: {KEY_VALUE_FORMS}"));
    };
    let bad = |what: &str| format!("`{value}` is not {what}");
    let kind: KeyKind = kind.parse().map_err(|e| {
        if kind == "none" {
            "none takes no value".to_string()
        } else {
            format!("{e} (or none)")
        }
    })?;
    Ok(match kind {
        KeyKind::Str => KeyValue::Str(value.to_string().into()),
        KeyKind::Int => KeyValue::Int(
            value
                .parse::<i128>()
                .ok()
                .filter(|_| !value.starts_with('+'))
                .ok_or_else(|| bad("a decimal integer"))?,
        ),
        KeyKind::Bool => match value {
            "true" => KeyValue::Bool(true),
            "false" => KeyValue::Bool(false),
            _ => return Err(bad("true or false")),
        },
        KeyKind::Bytes => KeyValue::Bytes(hex(value).ok_or_else(|| bad("hex digits"))?.into()),
        KeyKind::Uuid => {
            let b = value.as_bytes();
            let hyphens = b.len() == 36 && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-');
            let bytes = hex(&value.replace('-', ""))
                .filter(|_| hyphens)
                .and_then(|v| <[u8; 16]>::try_from(v).ok())
                .ok_or_else(|| bad("a hyphenated UUID (8-4-4-4-12 hex digits)"))?;
            KeyValue::Uuid(bytes)
        }
        KeyKind::ObjectId => KeyValue::ObjectId(
            hex(value)
                .and_then(|v| <[u8; 12]>::try_from(v).ok())
                .ok_or_else(|| bad("an ObjectId (24 hex digits)"))?,
        ),
        _ => return Err(format!("key type {kind} is not supported here")),
    })
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn check_field_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the field name is empty".into());
    }
    if name == "_id" || name.starts_with(natural_key_runtime::RESERVED_PREFIX) {
        return Err(format!(
            "`{name}` is natural-key's own field, not a key of the document"
        ));
    }
    Ok(())
}

fn parse_key_field(arg: &str) -> Result<KeyField, String> {
    let usage = "want NAME:TYPE[:OPTION]..., e.g. slug:str or lang:str:lowercase";
    let mut parts: Vec<&str> = arg.split(':').collect();
    let mut options = Vec::new();
    while let Some(&last) = parts.last() {
        if ["lowercase", "nfc", "optional"].contains(&last) && parts.len() > 2 {
            options.push(last);
            parts.pop();
        } else {
            break;
        }
    }
    if parts.len() < 2 {
        return Err(format!("no type: {usage}"));
    }
    let kind: KeyKind = parts
        .pop()
        .unwrap_or_default()
        .parse::<KeyKind>()
        .map_err(|e| e.to_string())?;
    let name = parts.join(":");
    check_field_name(&name)?;
    let mut field = KeyField::new(leak(name), kind);
    for option in options.into_iter().rev() {
        field = match option {
            "lowercase" | "nfc" if kind != KeyKind::Str => {
                return Err(format!("{option} applies to str keys only"))
            }
            "lowercase" => field.lowercase(),
            "nfc" => field.nfc(),
            _ => field.optional(),
        };
    }
    Ok(field)
}

fn parse_timestamp_field(arg: &str) -> Result<(String, TimestampForm), String> {
    match arg.rsplit_once(':') {
        Some((name, form)) if form.parse::<TimestampForm>().is_ok() => {
            check_field_name(name)?;
            Ok((
                name.to_string(),
                form.parse::<TimestampForm>().map_err(|e| e.to_string())?,
            ))
        }
        _ => {
            check_field_name(arg)?;
            Ok((arg.to_string(), TimestampForm::Any))
        }
    }
}

/// The findings `--allow` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unreadable,
    Legacy,
    IdDrift,
    DuplicatesIdentical,
    DuplicatesDiffering,
    /// Both duplicate kinds.
    Duplicates,
}

const KINDS: [(&str, Kind); 5] = [
    ("unreadable", Kind::Unreadable),
    ("legacy", Kind::Legacy),
    ("id-drift", Kind::IdDrift),
    ("duplicates-identical", Kind::DuplicatesIdentical),
    ("duplicates-differing", Kind::DuplicatesDiffering),
];

fn parse_allow(arg: &str) -> Result<(Kind, Option<u64>), String> {
    let (name, limit) = match arg.split_once('=') {
        Some((name, n)) => {
            let n = n
                .parse::<u64>()
                .map_err(|_| format!("`{n}` is not a count (in {arg})"))?;
            (name, Some(n))
        }
        None => (arg, None),
    };
    if name == "duplicates" {
        return Ok((Kind::Duplicates, limit));
    }
    KINDS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| (*k, limit))
        .ok_or_else(|| {
            format!(
                "unknown finding `{name}`: use unreadable, legacy, id-drift, \
                 duplicates-identical, duplicates-differing or duplicates"
            )
        })
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

fn audit(args: AuditArgs) -> Result<ExitCode, String> {
    let spec = args.spec.spec()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let report = runtime.block_on(run_audit(&args, &spec))?;
    let over = exceeded(&report, &args.allow);
    let namespace = format!("{}.{}", args.connect.db, args.connect.collection);
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

async fn run_audit(args: &AuditArgs, spec: &KeySpec) -> Result<AuditReport, String> {
    let client = connect(&args.connect).await?;
    let (db_name, collection) = (&args.connect.db, &args.connect.collection);
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

/// The driver's message without its debug dump of labels and source.
fn short(e: &mongodb::error::Error) -> String {
    let text = e.kind.to_string();
    text.split(", labels:").next().unwrap_or(&text).to_string()
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
