//! The input read into documents, on a thread of its own: records of the input's format
//! (NDJSON lines, a JSON array's elements, CSV/TSV records), a `--delete-when` record marked a
//! deletion, natural-key's own fields settled; a record that is none of these is a reject, and
//! the rest go to the writer in order.

use std::fs::File;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use natural_key_runtime::bson::RawDocumentBuf;
use natural_key_runtime::spec::{KeySpec, TimestampForm};
use natural_key_runtime::ContentHash;

use super::array::JsonArray;
use super::csv::{CsvRecords, Table};
use super::json::JsonLines;
use super::own::{OwnFields, Refusal};
use super::record::{Record, Records};
use super::report::{Reject, Rejects};
use super::tombstone::Tombstone;
use crate::args::{Format, IngestArgs};

/// What the reader hands the writer: a document, whether the line is a deletion, its line
/// number and its text (kept until the library has settled it, for a reject).
pub(crate) struct Parsed {
    pub(crate) doc: RawDocumentBuf,
    pub(crate) delete: bool,
    pub(crate) line: u64,
    pub(crate) text: String,
}

/// The input and how to read it.
pub(crate) struct Source {
    records: Box<dyn Records + Send>,
    tombstone: Option<Tombstone>,
    own: OwnFields,
    pub(crate) size: Option<u64>,
    /// Keep every upserted line's identity (for --prune).
    identities: bool,
}

impl Source {
    /// The input `args` name, opened, and how to read it; a usage error for options of
    /// another format.
    pub(crate) fn open(args: &IngestArgs, spec: &KeySpec) -> Result<Source, String> {
        let tombstone = args
            .delete_when
            .as_deref()
            .map(Tombstone::parse)
            .transpose()?;
        let format = format(args)?;
        let path = args.path();
        let stdin = path.as_os_str() == "-";
        let input: Box<dyn Read + Send> = if stdin {
            Box::new(std::io::stdin())
        } else {
            Box::new(File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?)
        };
        let size = match stdin {
            true => None,
            false => std::fs::metadata(path).ok().map(|m| m.len()),
        };
        let records: Box<dyn Records + Send> = match format {
            Format::Ndjson if args.json_array => Box::new(JsonArray::new(input)),
            Format::Ndjson => Box::new(JsonLines::new(input)),
            Format::Csv | Format::Tsv => {
                Box::new(CsvRecords::new(input, table(args, format)?, spec)?)
            }
        };
        Ok(Source {
            records,
            tombstone,
            own: OwnFields {
                keep_id: args.keep_id.clone(),
            },
            size,
            identities: args.prune,
        })
    }
}

/// The input's format: `--type`, else the file's extension; the options of another format
/// refused.
fn format(args: &IngestArgs) -> Result<Format, String> {
    let format = match args.format {
        Some(f) => f,
        None => match args.path().extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("csv") => Format::Csv,
            Some(e) if e.eq_ignore_ascii_case("tsv") => Format::Tsv,
            _ => Format::Ndjson,
        },
    };
    let table_options = [
        (args.fields.is_some(), "--fields"),
        (args.field_file.is_some(), "--fieldFile"),
        (args.headerline, "--headerline"),
        (args.columns_have_types, "--columnsHaveTypes"),
        (args.ignore_blanks, "--ignoreBlanks"),
    ];
    match format {
        Format::Ndjson => match table_options.iter().find(|(given, _)| *given) {
            Some((_, flag)) => Err(format!(
                "{flag} reads CSV/TSV, and the input is JSON: add --type csv or --type tsv"
            )),
            None => Ok(format),
        },
        _ if args.json_array => Err("--jsonArray reads JSON, and the input is CSV/TSV: \
                                     add --type json, or leave --jsonArray out"
            .into()),
        _ => Ok(format),
    }
}

/// How to read a CSV/TSV input: its field names from `--fields` or `--fieldFile` (else the
/// first record is the header, with `--headerline` or without it).
fn table(args: &IngestArgs, format: Format) -> Result<Table, String> {
    let fields = match (&args.fields, &args.field_file) {
        (Some(names), _) => Some(names.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --fieldFile {}: {e}", path.display()))?;
            let names = text.lines().map(|l| l.trim_end_matches('\r'));
            Some(
                names
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect(),
            )
        }
        (None, None) => None,
    };
    if fields.as_ref().is_some_and(Vec::is_empty) {
        return Err("--fields/--fieldFile names no field".into());
    }
    Ok(Table {
        delimiter: if format == Format::Tsv { b'\t' } else { b',' },
        fields,
        typed: args.columns_have_types,
        ignore_blanks: args.ignore_blanks,
        version_form: args
            .version_field
            .as_ref()
            .map_or(TimestampForm::Any, |(_, f)| *f),
    })
}

/// Reads the input record by record on its own thread, turning each into a document for the
/// writer or a reject. Ends at the end of the input, or when the writer has stopped.
pub(crate) fn read(
    source: Source,
    spec: &KeySpec,
    tx: tokio::sync::mpsc::Sender<Parsed>,
    rejects: &Mutex<Rejects>,
    bytes_read: &AtomicU64,
    lines_read: &AtomicU64,
) -> Result<Vec<ContentHash>, String> {
    let Source {
        mut records,
        tombstone,
        own,
        identities: keep,
        ..
    } = source;
    let mut identities = Vec::new();
    loop {
        let next = records.next_record();
        bytes_read.store(records.bytes(), Ordering::Relaxed);
        lines_read.store(records.lines(), Ordering::Relaxed);
        let Some(Record { line, text, doc }) = next? else {
            return Ok(identities);
        };
        let (doc, delete) = match settle(doc, tombstone.as_ref(), &own, spec) {
            Ok(d) => d,
            Err((kind, reason)) => {
                refuse(rejects, line, kind, reason, text);
                continue;
            }
        };
        if keep && !delete {
            if let Ok((_, identity)) = spec.derive(&doc) {
                identities.push(identity);
            }
        }
        let p = Parsed {
            doc,
            delete,
            line,
            text,
        };
        if tx.blocking_send(p).is_err() {
            // The writer stopped; it reports why.
            return Ok(identities);
        }
    }
}

/// A record's document as the writer takes it: the `--delete-when` marker taken out, and
/// natural-key's own fields settled.
fn settle(
    doc: Result<RawDocumentBuf, String>,
    tombstone: Option<&Tombstone>,
    own: &OwnFields,
    spec: &KeySpec,
) -> Result<(RawDocumentBuf, bool), Refusal> {
    let doc = doc.map_err(|reason| ("input", reason))?;
    let (doc, delete) = match tombstone {
        Some(t) => t.take(doc).map_err(|reason| ("input", reason))?,
        None => (doc, false),
    };
    Ok((own.apply(doc, spec)?, delete))
}

/// A record refused before the library sees it.
fn refuse(rejects: &Mutex<Rejects>, line: u64, kind: &'static str, reason: String, text: String) {
    if let Ok(mut r) = rejects.lock() {
        r.add(Reject {
            line,
            kind,
            reason,
            text,
        });
    }
}
