//! The input read into documents, on a thread of its own: lines of at most
//! [`MAX_LINE_BYTES`], each an NDJSON object or a CSV/TSV row, a `--delete-when` line marked a
//! deletion; a line that is none of these is a reject, and the rest go to the writer in order.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use natural_key_runtime::bson::{self, Bson, RawDocumentBuf};
use natural_key_runtime::spec::KeySpec;
use natural_key_runtime::ContentHash;

use super::csv::{check_header, row, split_cells};
use super::report::{Reject, Rejects};
use crate::args::{Format, IngestArgs};

/// A line longer than this is refused unread: twice the largest document any engine stores
/// (16 MiB of BSON), so that every line an engine could take is read whole.
const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

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
    input: Box<dyn Read + Send>,
    format: Format,
    tombstone: Option<Tombstone>,
    pub(crate) size: Option<u64>,
    /// Keep every upserted line's identity (for --prune).
    identities: bool,
}

impl Source {
    /// The input `args` name, opened, and how to read it.
    pub(crate) fn open(args: &IngestArgs) -> Result<Source, String> {
        let tombstone = args
            .delete_when
            .as_deref()
            .map(Tombstone::parse)
            .transpose()?;
        let format = match args.format {
            Some(f) => f,
            None => match args.input.extension().and_then(|e| e.to_str()) {
                Some(e) if e.eq_ignore_ascii_case("csv") => Format::Csv,
                Some(e) if e.eq_ignore_ascii_case("tsv") => Format::Tsv,
                _ => Format::Ndjson,
            },
        };
        let stdin = args.input.as_os_str() == "-";
        let input: Box<dyn Read + Send> = if stdin {
            Box::new(std::io::stdin())
        } else {
            Box::new(
                File::open(&args.input)
                    .map_err(|e| format!("cannot read {}: {e}", args.input.display()))?,
            )
        };
        let size = match stdin {
            true => None,
            false => std::fs::metadata(&args.input).ok().map(|m| m.len()),
        };
        Ok(Source {
            input,
            format,
            tombstone,
            size,
            identities: args.prune,
        })
    }
}

/// Which lines are deletions: `--delete-when FIELD[=VALUE]`.
struct Tombstone {
    field: String,
    /// The value that marks a deletion, as text; `None`: `true` or `"true"`.
    value: Option<String>,
}

impl Tombstone {
    fn parse(arg: &str) -> Result<Tombstone, String> {
        let (field, value) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg, None),
        };
        if field.is_empty() {
            return Err("--delete-when needs a field name: FIELD or FIELD=VALUE".into());
        }
        Ok(Tombstone {
            field: field.to_string(),
            value,
        })
    }

    /// Whether `doc` is a deletion; the marker field is taken out of every document (it says
    /// what to do with the line, it is not data).
    fn take(&self, doc: RawDocumentBuf) -> Result<(RawDocumentBuf, bool), String> {
        let Some(marker) = doc.get(&self.field).map_err(|e| e.to_string())? else {
            return Ok((doc, false));
        };
        let delete = match (&self.value, marker) {
            (None, bson::RawBsonRef::Boolean(b)) => b,
            (None, bson::RawBsonRef::String(s)) => s == "true",
            (Some(v), bson::RawBsonRef::String(s)) => s == v,
            (Some(v), other) => Bson::try_from(other.to_raw_bson())
                .map(|b| {
                    let text = b.into_relaxed_extjson().to_string();
                    text == *v
                })
                .unwrap_or(false),
            (None, _) => false,
        };
        let mut rest = RawDocumentBuf::new();
        for element in &doc {
            let (name, value) = element.map_err(|e| e.to_string())?;
            if name != self.field {
                rest.append_ref(name, value);
            }
        }
        Ok((rest, delete))
    }
}

/// Reads `input` line by line on its own thread, turning each into a document for the writer
/// or a reject. Ends at the end of the input or when the writer has stopped.
pub(crate) fn read(
    source: Source,
    spec: &KeySpec,
    tx: tokio::sync::mpsc::Sender<Parsed>,
    rejects: &Mutex<Rejects>,
    bytes_read: &AtomicU64,
    lines_read: &AtomicU64,
) -> Result<Vec<ContentHash>, String> {
    let Source {
        input,
        format,
        tombstone,
        identities: keep,
        ..
    } = source;
    let mut decoder = Decoder {
        format,
        tombstone,
        header: None,
        spec,
    };
    let mut identities = Vec::new();
    let mut lines = Lines {
        inner: BufReader::with_capacity(1 << 20, input),
        buf: Vec::new(),
    };
    let mut number = 0u64;
    loop {
        let line = match lines.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(identities),
            Err(e) => return Err(format!("cannot read the input after line {number}: {e}")),
        };
        number += 1;
        lines_read.store(number, Ordering::Relaxed);
        bytes_read.fetch_add(line.bytes, Ordering::Relaxed);
        let text = match line.content.text() {
            Ok(t) => t,
            Err((reason, text)) => {
                refuse(rejects, number, reason, text);
                continue;
            }
        };
        let (doc, delete) = match decoder.decode(text)? {
            Decoded::Nothing => continue,
            Decoded::Refused(reason) => {
                refuse(rejects, number, reason, text.to_string());
                continue;
            }
            Decoded::Document(doc, delete) => (doc, delete),
        };
        if keep && !delete {
            if let Ok((_, identity)) = spec.derive(&doc) {
                identities.push(identity);
            }
        }
        let p = Parsed {
            doc,
            delete,
            line: number,
            text: text.to_string(),
        };
        if tx.blocking_send(p).is_err() {
            // The writer stopped; it reports why.
            return Ok(identities);
        }
    }
}

/// A line refused before the library sees it: not a document.
fn refuse(rejects: &Mutex<Rejects>, line: u64, reason: String, text: String) {
    if let Ok(mut r) = rejects.lock() {
        r.add(Reject {
            line,
            kind: "input",
            reason,
            text,
        });
    }
}

/// One line's text into a document, the CSV/TSV header kept from the first line that has one.
struct Decoder<'s> {
    format: Format,
    tombstone: Option<Tombstone>,
    header: Option<Vec<String>>,
    spec: &'s KeySpec,
}

/// What a line's text holds.
enum Decoded {
    /// No document: a blank line, or the header.
    Nothing,
    /// A document, and whether the line is a deletion.
    Document(RawDocumentBuf, bool),
    /// Why the line is a reject.
    Refused(String),
}

impl Decoder<'_> {
    /// The line's document; an error (a bad header) ends the whole input, as no row after it
    /// could be read.
    fn decode(&mut self, text: &str) -> Result<Decoded, String> {
        if text.trim().is_empty() {
            return Ok(Decoded::Nothing);
        }
        let parsed = match self.format {
            Format::Ndjson => ndjson(text),
            Format::Csv | Format::Tsv => {
                let delimiter = if self.format == Format::Csv {
                    ','
                } else {
                    '\t'
                };
                let cells = match split_cells(text, delimiter) {
                    Ok(c) => c,
                    Err(e) => return Ok(Decoded::Refused(e)),
                };
                match &self.header {
                    None => {
                        self.header = Some(check_header(cells)?);
                        return Ok(Decoded::Nothing);
                    }
                    Some(h) => row(h, cells, self.spec),
                }
            }
        };
        let parsed = match (parsed, &self.tombstone) {
            (Ok(doc), Some(t)) => t.take(doc),
            (Ok(doc), None) => Ok((doc, false)),
            (Err(e), _) => Err(e),
        };
        Ok(match parsed {
            Ok((doc, delete)) => Decoded::Document(doc, delete),
            Err(reason) => Decoded::Refused(reason),
        })
    }
}

/// One JSON object (Extended JSON for the types JSON lacks) as a document, its fields in the
/// line's order.
fn ndjson(text: &str) -> Result<RawDocumentBuf, String> {
    // Straight into a document: bson's visitor reads Extended JSON's wrappers and keeps the
    // fields in the line's order, with no JSON tree in between.
    let doc: bson::Document = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            format!("not a document: {e}")
        } else {
            format!("not JSON: {e}")
        }
    })?;
    RawDocumentBuf::from_document(&doc).map_err(|e| format!("not a BSON document: {e}"))
}

/// Lines of at most [`MAX_LINE_BYTES`], the rest of a longer one skipped unread.
struct Lines<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
}

struct Line<'a> {
    content: Content<'a>,
    /// Bytes consumed, line break included.
    bytes: u64,
}

enum Content<'a> {
    Bytes(&'a [u8]),
    TooLong(u64),
}

impl<R: Read> Lines<R> {
    fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let mut total = 0u64;
        let mut too_long = false;
        loop {
            let available = self.inner.fill_buf()?;
            if available.is_empty() {
                break;
            }
            let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..=i], true),
                None => (available, false),
            };
            let n = chunk.len();
            total += n as u64;
            if !too_long && self.buf.len() + n <= MAX_LINE_BYTES + 1 {
                self.buf.extend_from_slice(chunk);
            } else {
                too_long = true;
                self.buf.clear();
            }
            self.inner.consume(n);
            if done {
                break;
            }
        }
        if total == 0 {
            return Ok(None);
        }
        if too_long {
            return Ok(Some(Line {
                content: Content::TooLong(total),
                bytes: total,
            }));
        }
        let content = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
        Ok(Some(Line {
            content: Content::Bytes(content),
            bytes: total,
        }))
    }
}

impl<'a> Content<'a> {
    /// The line's text without its `\r`; or why it has none, and what of it a reject shows.
    fn text(self) -> Result<&'a str, (String, String)> {
        let bytes = match self {
            Content::Bytes(b) => b,
            Content::TooLong(len) => {
                return Err((
                    format!("the line is {len} bytes long, more than any document can be"),
                    String::new(),
                ))
            }
        };
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.strip_suffix('\r').unwrap_or(text)),
            Err(e) => Err((
                format!("not UTF-8 (byte {})", e.valid_up_to()),
                String::from_utf8_lossy(bytes).into_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_skipped_unread_and_the_next_one_is_read() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let mut lines = Lines {
            inner: BufReader::new(&input[..]),
            buf: Vec::new(),
        };
        let first = lines.next_line().unwrap().unwrap();
        assert!(matches!(first.content, Content::TooLong(n) if n == MAX_LINE_BYTES as u64 + 11));
        let second = lines.next_line().unwrap().unwrap();
        assert!(matches!(second.content, Content::Bytes(b) if b == b"{\"a\":1}"));
        assert!(lines.next_line().unwrap().is_none());
    }

    #[test]
    fn ndjson_keeps_the_lines_field_order_and_reads_extended_json() {
        let d = ndjson(
            r#"{"b":1,"a":{"$date":"2023-11-14T22:13:20Z"},"c":{"$numberLong":"5"},"d":{"$oid":"655403a0bd2d1ef3bc3a7f30"},"e":{"$numberInt":"7"},"f":{"$numberDouble":"-Infinity"},"g":{"$binary":{"base64":"AAE=","subType":"00"}}}"#,
        )
        .unwrap();
        let names: Vec<&str> = d.iter().map(|e| e.unwrap().0).collect();
        assert_eq!(names, ["b", "a", "c", "d", "e", "f", "g"]);
        assert_eq!(d.get_i32("e").unwrap(), 7);
        assert_eq!(d.get_f64("f").unwrap(), f64::NEG_INFINITY);
        assert_eq!(d.get_binary("g").unwrap().bytes, [0, 1]);
        assert!(matches!(
            d.get("d").unwrap(),
            Some(bson::RawBsonRef::ObjectId(_))
        ));
        assert!(matches!(
            d.get("a").unwrap(),
            Some(bson::RawBsonRef::DateTime(_))
        ));
        assert_eq!(d.get_i64("c").unwrap(), 5);
        assert!(ndjson("[1]").is_err());
        assert!(ndjson("{").unwrap_err().starts_with("not JSON"));
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(200),
            "1".to_string() + &"}".repeat(200)
        );
        assert!(ndjson(&deep).unwrap_err().contains("recursion limit"));
    }
}
