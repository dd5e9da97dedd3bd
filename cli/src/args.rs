//! The command line as clap reads it: every subcommand, flag and their --help text (the doc
//! comments below are that text), and the key spec and scheme the flags make.

use std::path::PathBuf;

use clap::builder::{EnumValueParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use natural_key_runtime::spec::{KeyField, KeySpec, TimestampForm};
use natural_key_runtime::{KeyValue, Scheme, WriteMode};

use crate::values::{
    parse_allow, parse_keep_id, parse_key_field, parse_key_value, parse_timestamp_field, Kind,
};

const ALLOW_HELP: &str = "Findings tolerated before the exit status turns 1: a comma-separated \
list (or the flag repeated) of FINDING or FINDING=N. FINDING is unreadable, legacy, id-drift, \
duplicates-identical, duplicates-differing, or duplicates (both duplicate kinds); FINDING alone \
allows any number of it, FINDING=N at most N (documents; for duplicates, identities). Findings \
not named are allowed 0. Example: --allow legacy,duplicates-identical=5. Hash drift is never \
counted: it is not checked without the Rust type.";

/// Ids from natural keys, audits of stored collections, and idempotent ingest of files
/// (docs/id-scheme.md).
///
/// Exit status: 0 success (for audit: no finding beyond --allow; for ingest: no line
/// refused), 1 audit findings beyond --allow or ingest lines refused, 2 a usage
/// or input error, or an audit that cannot reach its server (one line on stderr), 3 an ingest
/// the server stopped: run it again (see ingest --help).
#[derive(Parser)]
#[command(name = "natural-key", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// NDJSON (one JSON object per line; canonical or relaxed Extended JSON such as
    /// {"$date": ...} for the types JSON lacks), a JSON array (--jsonArray), or CSV/TSV
    /// (RFC 4180, typed columns as mongoimport's). Lines that cannot be written are refused one
    /// by one, with their line number and reason, into --reject; the rest is written. Logs and
    /// progress go to stderr, the summary to stdout.
    ///
    /// Example: natural-key ingest posts.ndjson --db blog --collection posts --key slug:str
    /// --key lang:str:lowercase --timestamp published_at --reject rejects.ndjson
    #[command(after_help = INGEST_SHORT_HELP, after_long_help = INGEST_AFTER_HELP)]
    Ingest(Box<IngestArgs>),
    /// Delete the tombstones that versioned deletes (ingest --version-field with
    /// --delete-when) left longer ago than --older-than.
    ///
    /// A tombstone (_id, identity, version, time of deletion: 208 bytes of BSON) keeps a late
    /// replay of an older version from bringing a deleted document back. Keep tombstones for
    /// longer than anything can be replayed or delivered late; once pruned, such a write
    /// creates the document again. A tombstone brought back or raised since it was read is left
    /// alone. No key spec is needed: tombstones hold no key fields.
    ///
    /// Example: natural-key prune-tombstones --db blog --collection posts --older-than 30d
    PruneTombstones(PruneTombstonesArgs),
}

/// `natural-key prune-tombstones`.
#[derive(Args)]
pub(crate) struct PruneTombstonesArgs {
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Prune tombstones older than this: a number with a unit, s, m, h or d (30d, 12h).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub(crate) older_than: std::time::Duration,
    /// Count what would be pruned; delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `30d`, `12h`, `90m`, `3600s`: an age with its unit.
fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("`{s}` is no age: a whole number with a unit s, m, h or d (30d, 12h)");
    let unit = match s.chars().last() {
        Some('s') => 1,
        Some('m') => 60,
        Some('h') => 3_600,
        Some('d') => 86_400,
        _ => return Err(bad()),
    };
    let n: u64 = s[..s.len() - 1].parse().map_err(|_| bad())?;
    n.checked_mul(unit)
        .map(std::time::Duration::from_secs)
        .ok_or_else(bad)
}

/// Where the collection is: the connection string from --uri or MONGODB_URI.
#[derive(Args)]
pub(crate) struct ConnectArgs {
    /// The connection string (with retryWrites=false where the engine needs it). Default: the
    /// MONGODB_URI environment variable, which keeps a password out of the process list and
    /// the shell's history.
    #[arg(long, env = "MONGODB_URI", hide_env_values = true)]
    pub(crate) uri: String,
    /// The database. Default: the one the connection string names (mongodb://host/DB).
    #[arg(short = 'd', long)]
    pub(crate) db: Option<String>,
    /// The collection.
    #[arg(short = 'c', long)]
    pub(crate) collection: String,
    /// Seconds to wait for the server (server selection and connecting), where the connection
    /// string sets no serverSelectionTimeoutMS or connectTimeoutMS.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub(crate) timeout: u64,
}

/// The natural key of the stored documents, as `#[derive(NaturalKey)]` declares it.
#[derive(Args)]
pub(crate) struct SpecArgs {
    /// An identity key field, NAME:TYPE[:OPTION]... in declaration order. TYPE: str, int,
    /// bool, bytes, uuid, objectid. OPTION: lowercase, nfc (str only, as #[key(lowercase)],
    /// #[key(nfc)]), optional (an Option field: absent or null is None). The type and options
    /// are read from the right, so NAME may hold ':'.
    #[arg(long = "key", required = true, value_name = "NAME:TYPE[:OPTION]", value_parser = parse_key_field)]
    pub(crate) keys: Vec<KeyField>,
    /// The timestamp key field, NAME[:FORM]. FORM: ms (int32/int64 Unix ms), date (BSON
    /// date), rfc3339 (text, as chrono and jiff store it), systemtime ({secs_since_epoch,
    /// nanos_since_epoch}), or any (default: each by its BSON type).
    #[arg(long, value_name = "NAME[:FORM]", value_parser = parse_timestamp_field)]
    pub(crate) timestamp: (String, TimestampForm),
    #[command(flatten)]
    pub(crate) scheme: SchemeArgs,
    /// A `#[natural_key(skip_hash)]` field: left out of the content hash (and, in an audit,
    /// when telling identical duplicates from differing ones).
    #[arg(long, value_name = "FIELD")]
    pub(crate) skip_hash: Vec<String>,
}

impl SpecArgs {
    pub(crate) fn spec(&self) -> Result<KeySpec, String> {
        self.versioned(None)
    }

    /// The spec, with the version field `--version-field` gives (ingest's) where one does.
    pub(crate) fn versioned(
        &self,
        version: Option<&(String, TimestampForm)>,
    ) -> Result<KeySpec, String> {
        let scheme = self.scheme.scheme()?;
        let (ts_name, form) = self.timestamp.clone();
        let mut names: Vec<&str> = self.keys.iter().map(KeyField::name).collect();
        names.push(&ts_name);
        names.extend(version.map(|(name, _)| name.as_str()));
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(match version {
                    Some((v, _)) if v == n => format!(
                        "field `{n}` is named twice in --key/--timestamp/--version-field: the \
                         version is a field of its own, neither a key nor the timestamp"
                    ),
                    _ => format!("field `{n}` is named twice in --key/--timestamp"),
                });
            }
        }
        let mut spec = KeySpec::new(scheme, ts_name).timestamp_form(form);
        if let Some((name, form)) = version {
            spec = spec.version(name, *form);
        }
        for k in &self.keys {
            spec = spec.key(k.clone());
        }
        for f in &self.skip_hash {
            spec = spec.skip_hash(f);
        }
        Ok(spec)
    }
}

#[derive(Args)]
pub(crate) struct SchemeArgs {
    /// The id scheme (`#[natural_key(scheme = ...)]`).
    #[arg(long, value_enum, default_value_t = SchemeName::Default)]
    pub(crate) scheme: SchemeName,
    /// The default scheme's namespace (`#[natural_key(namespace = ...)]`); empty when absent.
    #[arg(long, conflicts_with = "separator")]
    pub(crate) namespace: Option<String>,
    /// The joined scheme's separator (`#[natural_key(separator = ...)]`); ":" when absent.
    #[arg(long)]
    pub(crate) separator: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SchemeName {
    /// Scheme v1: typed, length-prefixed keys after a namespace.
    Default,
    /// The seed recipe: SHA-256 over the keys' text joined by a separator.
    Joined,
}

impl SchemeArgs {
    pub(crate) fn scheme(&self) -> Result<Scheme, String> {
        match self.scheme {
            SchemeName::Default => {
                if self.separator.is_some() {
                    return Err(
                        "--separator belongs to the joined scheme: add --scheme joined, \
                                or leave it out"
                            .into(),
                    );
                }
                Ok(Scheme::with_namespace(
                    self.namespace.as_deref().unwrap_or_default(),
                ))
            }
            SchemeName::Joined => {
                if self.namespace.is_some() {
                    return Err("the joined scheme has no namespace (it reproduces \
                                sha256(a + \":\" + b) byte for byte): leave --namespace out"
                        .into());
                }
                // No NUL check: an argument cannot hold one.
                Ok(Scheme::joined_by(self.separator.as_deref().unwrap_or(":")))
            }
        }
    }
}

#[derive(Args)]
pub(crate) struct IdArgs {
    #[command(flatten)]
    pub(crate) scheme: SchemeArgs,
    /// The timestamp key: Unix milliseconds, or RFC 3339 (floored to the millisecond).
    #[arg(
        long,
        value_name = "MS|RFC3339",
        required_unless_present = "identity",
        allow_hyphen_values = true
    )]
    pub(crate) ts: Option<String>,
    /// Print the identity (what `_nk_identity` stores, 64 hex digits) instead of the id; it
    /// does not depend on the timestamp.
    #[arg(long)]
    pub(crate) identity: bool,
    /// The identity key values, in declaration order.
    #[arg(required = true, value_name = "TYPE:VALUE", value_parser = parse_key_value)]
    pub(crate) keys: Vec<KeyValue<'static>>,
}

#[derive(Args)]
pub(crate) struct AuditArgs {
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    #[command(flatten)]
    pub(crate) spec: SpecArgs,
    #[arg(long, value_name = "FINDING[=N],...", value_delimiter = ',', value_parser = parse_allow, long_help = ALLOW_HELP, help = "Findings tolerated before the exit status turns 1 (see --help)")]
    pub(crate) allow: Vec<(Kind, Option<u64>)>,
    /// Print the report as one JSON object instead of a table (and no progress bar).
    #[arg(long)]
    pub(crate) json: bool,
    /// How many `_id`s to show per finding.
    #[arg(long, default_value_t = 10)]
    pub(crate) sample: usize,
}

const INGEST_SHORT_HELP: &str = "Exit status: 0 no line refused (stale, existed and missing \
lines are not), 1 lines refused, 2 bad usage or input, 3 the server stopped the run (run it \
again). --help says more, and what differs from mongoimport.";

const INGEST_AFTER_HELP: &str = "\
Exit status:
  0  every line stored, found unchanged, or left alone as its mode or version says
     (stale, existed, missing: counted, never an error)
  1  lines refused (each into --reject with its line and reason); the others are written
  2  bad usage, or input that cannot be read (no such file, a bad header, a broken array)
  3  the server stopped the run: unreachable, the connection lost, or transient errors past
     --retry-deadline. What was written stays written: run the same command again to finish.

An export of a natural-key collection (mongoexport, or pymongo's json_util; canonical or
relaxed Extended JSON) ingests into another collection: an _id equal to the id the line's key
derives is accepted; _nk_identity, _nk_hash and _nk_write are dropped and recomputed, and so is
_nk_version with --version-field (without it, _nk_version refuses the line); another _id
refuses the line (kind foreign_id) unless --keep-id FIELD keeps it under FIELD; the other _nk_
fields (_nk_legacy_ids, _nk_ops, ...) cannot be recomputed and refuse the line, as does a
tombstone (_nk_deleted).

Unlike mongoimport:
  - Documents are upserted by their natural key (--key, --timestamp), under derived ids: a
    rerun writes nothing, an edited line is one update. --mode takes mongoimport's merge,
    upsert (as replace) and insert (a stored document is counted `existed`, not an error),
    and replace and update (stored documents only: others are counted `missing`); its delete
    mode is refused (--delete-when marks the lines that delete), and there is no
    --upsertFields (the natural key is what a line is matched by).
  - A line that cannot be written is refused alone, into --reject, and the run goes on: no
    --stopOnError, no --parseGrace (a cell its column's type cannot read refuses its line).
  - CSV/TSV cells are strings unless typed (--columnsHaveTypes), or a key's, the
    timestamp's or the version's (they take the key's type, or their form's): numbers are
    not guessed but where auto() asks.
  - Without --fields or --fieldFile the first CSV/TSV line is the header, --headerline or
    not (mongoimport asks for one of the three).
  - A dotted column name (a.b) is refused, not made a nested document: names are data.
  - date(LAYOUT) reads Go layouts of 2006 01 02 15 04 05, a fraction (.000), a zone (Z07:00,
    -07:00, Z0700, -0700), T and punctuation; date() alone reads RFC 3339. date_ms(),
    date_oracle() and binary(base32) are refused.
  - TSV cells may be quoted as CSV cells are (RFC 4180).
  - The format defaults from the file's extension (.csv, .tsv), else JSON lines.
  - Extended JSON v2 (canonical or relaxed) and v1's {\"$date\": MS}; no --legacy: v1's
    {\"$binary\": .., \"$type\": ..} refuses its line, and {\"$regex\": .., \"$options\": ..}
    is read as a document, not a regular expression.
  - Exit status 1 for refused lines and 3 for a run the server stopped (mongoimport: 1 for
    any failure). Not read: --drop, --stopOnError, --maintainInsertionOrder,
    --numInsertionWorkers, --writeConcern, --bypassDocumentValidation, --legacy.";

#[derive(Args)]
pub(crate) struct IngestArgs {
    /// The input: a file, or - (the default) for stdin.
    #[arg(value_name = "FILE")]
    pub(crate) input: Option<PathBuf>,
    /// The input, as mongoimport names it (instead of FILE).
    #[arg(long = "file", value_name = "FILE", conflicts_with = "input")]
    pub(crate) file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    #[command(flatten)]
    pub(crate) spec: SpecArgs,
    /// The input's format: ndjson (or json: one JSON object per line, Extended JSON for the
    /// types JSON lacks), csv or tsv (a header line of field names, or --fields, then one
    /// document per record). By default, from the file's extension (.csv, .tsv), else ndjson.
    #[arg(long, visible_alias = "type", value_enum)]
    pub(crate) format: Option<Format>,
    /// The input is one JSON array of documents (read element by element, not whole), as
    /// mongoexport --jsonArray writes it.
    #[arg(long = "json-array", visible_alias = "jsonArray")]
    pub(crate) json_array: bool,
    /// CSV/TSV without a header line: the field names, comma-separated (typed as
    /// NAME.TYPE() with --columnsHaveTypes).
    #[arg(short = 'f', long, value_name = "NAME,...", value_delimiter = ',', conflicts_with_all = ["field_file", "headerline"])]
    pub(crate) fields: Option<Vec<String>>,
    /// CSV/TSV without a header line: the field names, one a line, in this file.
    #[arg(
        long = "field-file",
        visible_alias = "fieldFile",
        value_name = "FILE",
        conflicts_with = "headerline"
    )]
    pub(crate) field_file: Option<PathBuf>,
    /// The first CSV/TSV line is the header (so it is without --fields or --fieldFile).
    #[arg(long, visible_alias = "header-line")]
    pub(crate) headerline: bool,
    /// The CSV/TSV field names carry their types, NAME.TYPE(ARG): string(), int32(), int64(),
    /// double(), decimal(), boolean() (true/false/1/0), binary(hex|base64), date() (RFC
    /// 3339), date(GO LAYOUT) such as date(2006-01-02 15:04:05), auto() (int32, int64,
    /// double, else string).
    #[arg(long = "columns-have-types", visible_alias = "columnsHaveTypes")]
    pub(crate) columns_have_types: bool,
    /// Leave an empty CSV/TSV cell out of its document (instead of an empty string, or a
    /// refused line where its column's type cannot be empty).
    #[arg(long = "ignore-blanks", visible_alias = "ignoreBlanks")]
    pub(crate) ignore_blanks: bool,
    /// Keep a line's `_id` that is not its derived id under this field (by default such a
    /// line is refused: the document is stored under the derived id). A line that already
    /// has the field is refused.
    #[arg(long, value_name = "FIELD", value_parser = parse_keep_id)]
    pub(crate) keep_id: Option<String>,
    /// The documents' version field, NAME[:FORM]: order-safe writes, an older version than
    /// the stored one writes nothing (counted `stale`). FORM as --timestamp's; ms: an integer.
    ///
    /// FORM: ms reads an integer version (int32/int64, e.g. a revision counter), date,
    /// rfc3339 and systemtime an instant (compared in Unix ms), any (the default) each by its
    /// BSON type. What a version buys: a replayed older export, or lines delivered out of
    /// order, never overwrite newer data. A line whose version is lower than the stored
    /// document's writes nothing and is counted `stale`, never an error (within one file too:
    /// the highest version wins); an equal version with the same content is `unchanged`; an
    /// equal version with other content is refused, that line alone, into --reject (kind
    /// version_conflict: two contents cannot share a version; give the new one a higher
    /// version); a line without the field, or with a value of another form, is refused as a
    /// missing key is. The version is stored in `_nk_version` too (an export's `_nk_version`
    /// is recomputed from the field). With --delete-when, a deletion leaves a tombstone
    /// (_id, identity, version, time: 208 bytes) so that a replayed older line is stale
    /// instead of bringing the document back; `natural-key prune-tombstones` deletes old ones.
    #[arg(long, value_name = "NAME[:FORM]", value_parser = parse_timestamp_field)]
    pub(crate) version_field: Option<(String, TimestampForm)>,
    /// A field the engine sets to its own clock whenever a line changes the stored content
    /// (never when it is unchanged or stale), for jobs that read what changed since a time:
    /// `{FIELD: {$gt: T}}`. A line's own value of the field (an export's) is not stored.
    #[arg(long, value_name = "FIELD")]
    pub(crate) changed_at: Option<String>,
    /// How a line is written, by mongoimport's names where the meaning matches (its delete
    /// mode is refused: mark deletions with --delete-when).
    #[arg(
        long,
        default_value = "merge",
        value_parser = EnumValueParser::<Mode>::new().try_map(Mode::write_mode)
    )]
    pub(crate) mode: WriteMode,
    /// Write every refused line here as one JSON object (NDJSON: line, kind, reason, input),
    /// a dead-letter file to fix and ingest again.
    #[arg(long, value_name = "FILE")]
    pub(crate) reject: Option<PathBuf>,
    /// Lines that are deletions: those whose FIELD is true (or "true"), or equals VALUE
    /// (compared as text), as change-data-capture streams mark them (Debezium's `__deleted`,
    /// `op=d`). Such a line deletes the document its keys derive, if it is stored; FIELD is
    /// never stored, on any line.
    #[arg(long, value_name = "FIELD[=VALUE]")]
    pub(crate) delete_when: Option<String>,
    /// The input is the whole source: once every line is written, delete the collection's
    /// natural-key documents whose key no line holds (never a document natural-key did not
    /// write). Skipped when any line was refused; refused beyond --max-prune-fraction.
    #[arg(long)]
    pub(crate) prune: bool,
    /// The largest fraction of the stored natural-key documents --prune deletes; beyond it,
    /// nothing is deleted and the run fails (is the input the whole source?).
    #[arg(long, value_name = "F", default_value_t = natural_key_runtime::DEFAULT_MAX_PRUNE_FRACTION, requires = "prune")]
    pub(crate) max_prune_fraction: f64,
    /// Write nothing: read and check every line as the write would (keys, field names,
    /// size), and with --prune list how many documents it would delete.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Lines per batch: each batch of a run of upserts costs one read, at most one insert and
    /// one update (none for an unchanged batch, no read for one the collection has never
    /// seen), and is prepared while the one before is written; runs of upserts and of
    /// deletions are written in input order.
    #[arg(long, value_name = "N", default_value_t = natural_key_runtime::DEFAULT_BATCH_SIZE)]
    pub(crate) batch_size: usize,
    /// Batches written at once: the server works on one while the client waits for
    /// another's reply (with 2, a first ingest 1.5-1.8x faster in docs/performance.md's
    /// figures). Lines of one document still land in input order.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) parallel: u16,
    /// How long one batch may go on retrying after transient errors (a lost connection, a busy
    /// or unreachable server) before the run stops with exit status 3.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub(crate) retry_deadline: u64,
    /// Print the summary as one JSON object (and no progress bar).
    #[arg(long)]
    pub(crate) json: bool,
    /// More on stderr: the settings, a line per batch instead of the progress bar, each
    /// refused line.
    #[arg(short, long, conflicts_with = "quiet")]
    pub(crate) verbose: bool,
    /// Nothing but errors on stderr and no summary line (--json still prints its object).
    #[arg(long)]
    pub(crate) quiet: bool,
}

impl IngestArgs {
    /// The key spec of --key, --timestamp, --version-field and --changed-at.
    pub(crate) fn key_spec(&self) -> Result<KeySpec, String> {
        let spec = self.spec.versioned(self.version_field.as_ref())?;
        let Some(field) = &self.changed_at else {
            return Ok(spec);
        };
        let named = spec.keys().iter().any(|k| k.name() == field)
            || spec.timestamp() == field
            || spec.version_field() == Some(field.as_str());
        let reserved = field.is_empty()
            || field == "_id"
            || field.starts_with('$')
            || field.starts_with("_nk_")
            || field.contains('.');
        if named || reserved {
            return Err(format!(
                "--changed-at `{field}` cannot be the engine's: it is {}; name a field of its own",
                match named {
                    true => "a key, the timestamp or the version",
                    false => "empty, _id, or begins with $ or _nk_, or holds a '.'",
                }
            ));
        }
        Ok(spec.changed_at(field))
    }

    /// The input's path; `-` is stdin.
    pub(crate) fn path(&self) -> &std::path::Path {
        let given = self.file.as_deref().or(self.input.as_deref());
        given.unwrap_or(std::path::Path::new("-"))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// mongoimport's `json`: one document per line (or, with --jsonArray, one array).
    #[value(alias = "json")]
    Ndjson,
    Csv,
    Tsv,
}

/// `--mode`, by mongoimport's names where the meaning matches.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// Set the line's fields, keep the stored fields it lacks.
    Merge,
    /// The stored document becomes the line's.
    Replace,
    /// mongoimport's name for replace.
    Upsert,
    /// Create new documents only: a line whose document is stored leaves it alone, counted
    /// `existed`.
    Insert,
    /// Change stored documents only, as merge does: a line whose document is not stored
    /// creates nothing, counted `missing`.
    Update,
    /// mongoimport's delete mode: refused, with what to use instead.
    #[value(hide = true)]
    Delete,
}

impl Mode {
    /// The library's write mode; mongoimport's `delete` is refused.
    fn write_mode(self) -> Result<WriteMode, String> {
        Ok(match self {
            Mode::Merge => WriteMode::Merge,
            Mode::Replace | Mode::Upsert => WriteMode::Replace,
            Mode::Insert => WriteMode::InsertOnly,
            Mode::Update => WriteMode::UpdateOnly,
            Mode::Delete => {
                return Err(
                    "mongoimport's delete mode is not an ingest mode here: mark the \
                            lines that delete with --delete-when FIELD[=VALUE] (each deletes \
                            the document its key derives), or delete what the input no longer \
                            holds with --prune"
                        .into(),
                )
            }
        })
    }
}
