//! CSV/TSV by the `csv` crate (RFC 4180: quoted cells holding delimiters, doubled quotes and
//! line breaks; a UTF-8 byte-order mark), each record kept as it was read for a reject and
//! numbered by the line it starts on; the header (or `--fields`), typed as mongoimport types
//! it with `--columnsHaveTypes`; and a row as a document.

use std::io::Read;

use natural_key_runtime::bson::{self, Bson, RawDocumentBuf};
use natural_key_runtime::spec::{KeyField, KeyKind, KeySpec, TimestampForm};

use super::columns::{Column, ColumnType};
use super::record::{Record, Records, MAX_RECORD_BYTES};

/// How to read the table.
pub(crate) struct Table {
    /// `,` or a tab.
    pub(crate) delimiter: u8,
    /// The field names of `--fields` or `--fieldFile`; `None`: the first record's.
    pub(crate) fields: Option<Vec<String>>,
    /// `--columnsHaveTypes`.
    pub(crate) typed: bool,
    /// `--ignoreBlanks`.
    pub(crate) ignore_blanks: bool,
    /// The form `--version-field` reads the version in (the field is the spec's).
    pub(crate) version_form: TimestampForm,
}

/// A record's first line, its text as read, and its cells (or why it has none).
type Cells = (u64, String, Result<Vec<String>, String>);

/// The records of a CSV/TSV input, the header taken out.
pub(crate) struct CsvRecords<R> {
    reader: csv::Reader<Kept<R>>,
    record: csv::ByteRecord,
    table: Table,
    spec: KeySpec,
    columns: Option<Vec<Column>>,
    /// Where the next record starts: its byte, and the line that byte is on.
    at: u64,
    line: u64,
}

impl<R: Read> CsvRecords<R> {
    /// The reader; with `--fields`, its columns checked against the spec now.
    pub(crate) fn new(input: R, table: Table, spec: &KeySpec) -> Result<Self, String> {
        let reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(table.delimiter)
            .from_reader(Kept {
                inner: input,
                kept: Vec::new(),
                base: 0,
            });
        let columns = match &table.fields {
            Some(names) => Some(columns(names.clone(), table.typed, spec)?),
            None => None,
        };
        Ok(CsvRecords {
            reader,
            record: csv::ByteRecord::new(),
            table,
            spec: spec.clone(),
            columns,
            at: 0,
            line: 1,
        })
    }

    /// The next record's cells, its first line and its text as read; `None` at the end.
    fn next_cells(&mut self) -> Result<Option<Cells>, String> {
        let read = self.reader.read_byte_record(&mut self.record);
        let read = read.map_err(|e| format!("cannot read the input at line {}: {e}", self.line))?;
        let end = self.reader.position().byte();
        let raw = self.reader.get_mut().take(self.at, end);
        if !read {
            // What follows the last record (a line break, blank lines) is read too.
            self.line += count_lines(&raw);
            self.at = end;
            return Ok(None);
        }
        let raw = match self.at {
            0 => raw.strip_prefix("\u{feff}".as_bytes()).unwrap_or(&raw),
            _ => &raw[..],
        };
        self.at = end;
        // A record starts past the line breaks (and blank lines) before it.
        let lead = raw
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        let line = self.line + count_lines(&raw[..lead]);
        self.line += count_lines(raw);
        let text = String::from_utf8_lossy(&raw[lead..]);
        let text = text.trim_end_matches(['\r', '\n']).to_string();
        if let Some(problem) = quoting_problem(&raw[lead..], self.table.delimiter) {
            return Ok(Some((line, text, Err(problem.to_string()))));
        }
        let cells: Result<Vec<String>, String> = self
            .record
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                String::from_utf8(cell.to_vec()).map_err(|_| format!("cell {} is not UTF-8", i + 1))
            })
            .collect();
        Ok(Some((line, text, cells)))
    }
}

impl<R: Read> Records for CsvRecords<R> {
    fn next_record(&mut self) -> Result<Option<Record>, String> {
        loop {
            let Some((line, text, cells)) = self.next_cells()? else {
                return Ok(None);
            };
            let Some(columns) = &self.columns else {
                let names = cells.map_err(|e| format!("the header (line {line}): {e}"))?;
                self.columns = Some(columns(names, self.table.typed, &self.spec)?);
                continue;
            };
            let blank = matches!(&cells, Ok(c) if c.len() == 1 && c[0].trim().is_empty());
            if blank && !text.contains('"') {
                continue;
            }
            let doc = cells.and_then(|c| row(columns, c, &self.spec, &self.table));
            return Ok(Some(Record { line, text, doc }));
        }
    }

    fn bytes(&self) -> u64 {
        self.at
    }

    fn lines(&self) -> u64 {
        self.line - 1
    }
}

fn count_lines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// What RFC 4180 refuses and the parser lets through: a quoted cell that the input ends in,
/// or text after a quoted cell's closing quote (`"a"b`).
fn quoting_problem(raw: &[u8], delimiter: u8) -> Option<&'static str> {
    let (mut quoted, mut at_start, mut closed) = (false, true, false);
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        i += 1;
        if quoted {
            if b == b'"' && raw.get(i) == Some(&b'"') {
                i += 1;
            } else if b == b'"' {
                (quoted, closed) = (false, true);
            }
            continue;
        }
        if b == delimiter || b == b'\n' || b == b'\r' {
            (at_start, closed) = (true, false);
            continue;
        }
        if closed {
            return Some("a quoted cell goes on after its closing quote");
        }
        quoted = b == b'"' && at_start;
        at_start = false;
    }
    quoted.then_some("a quoted cell is not closed: the input ends inside it")
}

/// The columns the names give: none empty, none twice; typed with `--columnsHaveTypes`; every
/// key, the timestamp and the version among them, each key's column able to hold its type.
fn columns(names: Vec<String>, typed: bool, spec: &KeySpec) -> Result<Vec<Column>, String> {
    let columns = names
        .iter()
        .map(|n| match typed {
            true => Column::typed(n),
            false => Ok(Column {
                name: n.clone(),
                ty: None,
            }),
        })
        .collect::<Result<Vec<Column>, String>>()?;
    for (i, c) in columns.iter().enumerate() {
        if c.name.is_empty() {
            return Err(format!("the header's column {} has no name", i + 1));
        }
        if columns[..i].iter().any(|o| o.name == c.name) {
            return Err(format!("the header names `{}` twice", c.name));
        }
    }
    let find = |name: &str| columns.iter().find(|c| c.name == name);
    for key in spec.keys() {
        match find(key.name()) {
            Some(c) => c.check_key(key)?,
            None if key.is_optional() => {}
            None => return Err(no_column(key.name(), "a key")),
        }
    }
    if find(spec.timestamp()).is_none() {
        return Err(no_column(spec.timestamp(), "the timestamp"));
    }
    match spec.version_field() {
        Some(v) if find(v).is_none() => Err(no_column(v, "the version")),
        _ => Ok(columns),
    }
}

fn no_column(name: &str, what: &str) -> String {
    format!(
        "the header has no column `{name}`, {what} every document needs (check --key, \
         --timestamp, --version-field and the header, or --fields)"
    )
}

/// A row as a document: each cell read as its column's type; an untyped (or auto()) key's
/// cell as its key's type, the timestamp's and the version's as an int64 where it is digits
/// and their form takes one, the others as strings; an empty cell of an optional key (or any,
/// with `--ignoreBlanks`) left out.
pub(crate) fn row(
    columns: &[Column],
    cells: Vec<String>,
    spec: &KeySpec,
    table: &Table,
) -> Result<RawDocumentBuf, String> {
    if cells.len() != columns.len() {
        let hint = match cells.iter().any(|c| c.contains('\n')) {
            true => " (a cell holds a line break: is a quote not closed?)",
            false => "",
        };
        return Err(format!(
            "{} cells where the header has {} columns{hint}",
            cells.len(),
            columns.len()
        ));
    }
    let mut doc = RawDocumentBuf::new();
    for (column, cell) in columns.iter().zip(cells) {
        let name = column.name.as_str();
        let key = spec.keys().iter().find(|k| k.name() == name);
        if cell.is_empty() && (table.ignore_blanks || key.is_some_and(KeyField::is_optional)) {
            continue;
        }
        let guess = matches!(column.ty, None | Some(ColumnType::Auto));
        let value = match (key, &column.ty) {
            (Some(k), _) if guess => key_cell(k, cell)?,
            _ if guess && name == spec.timestamp() => timestamp_cell(name, cell, spec.form())?,
            _ if guess && spec.version_field() == Some(name) => {
                timestamp_cell(name, cell, table.version_form)?
            }
            (_, Some(ty)) => ty
                .read(&cell)
                .map_err(|e| format!("`{name}` is {}: {e}", ty.name()))?,
            (_, None) => Bson::String(cell),
        };
        let value = bson::RawBson::try_from(value).map_err(|e| e.to_string())?;
        doc.append(name, value);
    }
    Ok(doc)
}

/// A key's cell as its key's type.
fn key_cell(k: &KeyField, cell: String) -> Result<Bson, String> {
    let name = k.name();
    Ok(match k.kind() {
        KeyKind::Int => Bson::Int64(
            cell.parse::<i64>()
                .map_err(|_| format!("`{name}` is an int key: `{cell}` is not an integer"))?,
        ),
        KeyKind::Bool => match cell.as_str() {
            "true" => Bson::Boolean(true),
            "false" => Bson::Boolean(false),
            _ => {
                return Err(format!(
                    "`{name}` is a bool key: `{cell}` is not true or false"
                ))
            }
        },
        KeyKind::Str | KeyKind::Uuid => Bson::String(cell),
        other => {
            return Err(format!(
                "`{name}` is a {other} key, which an untyped CSV cell cannot hold: type its \
                 column (--columnsHaveTypes) or use NDJSON"
            ))
        }
    })
}

/// The timestamp's (or the version's) cell: an int64 where it is digits and the form takes
/// them, else text (RFC 3339, for the key spec to read).
fn timestamp_cell(name: &str, cell: String, form: TimestampForm) -> Result<Bson, String> {
    let digits = !cell.is_empty() && cell.bytes().all(|b| b.is_ascii_digit());
    Ok(match form {
        TimestampForm::Any | TimestampForm::Millis if digits => Bson::Int64(
            cell.parse::<i64>()
                .map_err(|_| format!("`{name}`: `{cell}` is too large for an int64"))?,
        ),
        _ => Bson::String(cell),
    })
}

/// The input as the parser reads it, its bytes kept from the start of the record being read:
/// for a reject's text, and so that a record that does not end (a quote never closed) stops
/// the read at [`MAX_RECORD_BYTES`] instead of filling memory.
struct Kept<R> {
    inner: R,
    kept: Vec<u8>,
    /// The input's offset of `kept[0]`.
    base: u64,
}

impl<R: Read> Read for Kept<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.kept.len() > MAX_RECORD_BYTES {
            return Err(std::io::Error::other(format!(
                "a record runs over {} MiB, more than any document can be: is a quote not \
                 closed?",
                MAX_RECORD_BYTES >> 20
            )));
        }
        let n = self.inner.read(buf)?;
        self.kept.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl<R> Kept<R> {
    /// The input's bytes `start..end`, let go of with those before them.
    fn take(&mut self, start: u64, end: u64) -> Vec<u8> {
        let offset = |at: u64| usize::try_from(at - self.base).unwrap_or(usize::MAX);
        let (from, to) = (offset(start), offset(end).min(self.kept.len()));
        let bytes = self.kept.get(from..to).unwrap_or_default().to_vec();
        self.kept.drain(..to);
        self.base += to as u64;
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natural_key_runtime::Scheme;

    fn spec() -> KeySpec {
        KeySpec::new(Scheme::Default { namespace: "" }, "day")
            .key(KeyField::new("sku", KeyKind::Int))
            .timestamp_form(TimestampForm::Millis)
    }

    fn table(delimiter: u8, fields: Option<&str>, typed: bool) -> Table {
        Table {
            delimiter,
            fields: fields.map(|f| f.split(',').map(str::to_string).collect()),
            typed,
            ignore_blanks: false,
            version_form: TimestampForm::Any,
        }
    }

    fn records(input: &str, t: Table) -> Vec<(u64, String, Result<RawDocumentBuf, String>)> {
        let mut r = CsvRecords::new(input.as_bytes(), t, &spec()).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            out.push((rec.line, rec.text, rec.doc));
        }
        out
    }

    #[test]
    fn quoted_cells_span_lines_and_records_are_numbered_by_their_first_line() {
        let input =
            "\u{feff}sku,day,note\r\n1,5,\"two\r\nlines, \"\"quoted\"\"\"\r\n\r\n2,6,plain\r\n";
        let got = records(input, table(b',', None, false));
        assert_eq!(got.len(), 2);
        let (line, text, doc) = &got[0];
        assert_eq!(*line, 2);
        assert_eq!(text, "1,5,\"two\r\nlines, \"\"quoted\"\"\"");
        let doc = doc.as_ref().unwrap();
        assert_eq!(doc.get_str("note").unwrap(), "two\r\nlines, \"quoted\"");
        assert_eq!(doc.get_i64("sku").unwrap(), 1);
        assert_eq!(got[1].0, 5);
        assert_eq!(got[1].2.as_ref().unwrap().get_str("note").unwrap(), "plain");
        let mut r = CsvRecords::new(input.as_bytes(), table(b',', None, false), &spec()).unwrap();
        while r.next_record().unwrap().is_some() {}
        assert_eq!((r.lines(), r.bytes()), (5, input.len() as u64));
    }

    #[test]
    fn what_rfc_4180_refuses_refuses_its_record_alone() {
        let input = "sku,day,note\n1,5,\"a\"b\n2,6,ok\n3,7,\"never closed\n";
        let got = records(input, table(b',', None, false));
        let reasons: Vec<Option<String>> = got.iter().map(|r| r.2.clone().err()).collect();
        assert!(reasons[0]
            .as_deref()
            .unwrap()
            .contains("after its closing quote"));
        assert_eq!(reasons[1], None);
        assert!(reasons[2].as_deref().unwrap().contains("not closed"));
        assert_eq!(got.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3, 4]);
        let short = records("sku,day,note\n1,5\n", table(b',', None, false));
        assert!(short[0]
            .2
            .as_ref()
            .unwrap_err()
            .contains("2 cells where the header has 3"));
    }

    #[test]
    fn fields_name_the_columns_of_a_file_without_a_header_and_types_apply() {
        let t = table(
            b'\t',
            Some("sku.int32(),day.int64(),price.double(),ok.boolean()"),
            true,
        );
        let got = records("7\t5\t1.5\ttrue\n", t);
        let doc = got[0].2.as_ref().unwrap();
        assert_eq!(got[0].0, 1);
        assert_eq!(doc.get_i32("sku").unwrap(), 7);
        assert_eq!(doc.get_i64("day").unwrap(), 5);
        assert_eq!(doc.get_f64("price").unwrap(), 1.5);
        assert!(doc.get_bool("ok").unwrap());
        let bad = records(
            "x\t5\t1.5\ttrue\n",
            table(
                b'\t',
                Some("sku.int32(),day.int64(),price.double(),ok.boolean()"),
                true,
            ),
        );
        assert!(bad[0]
            .2
            .as_ref()
            .unwrap_err()
            .contains("`sku` is int32(): `x` is not an int32"));
    }

    #[test]
    fn a_header_without_the_key_or_with_a_key_typed_otherwise_ends_the_input() {
        for (header, typed, says) in [
            ("day,note\n", false, "no column `sku`"),
            ("sku,note\n", false, "no column `day`"),
            ("sku,sku,day\n", false, "`sku` twice"),
            (
                "sku.string(),day.int64()\n",
                true,
                "cannot hold the int key",
            ),
            ("sku,day\n", true, "NAME.TYPE()"),
        ] {
            let mut r =
                CsvRecords::new(header.as_bytes(), table(b',', None, typed), &spec()).unwrap();
            let e = r.next_record().unwrap_err();
            assert!(e.contains(says), "{header}: {e}");
        }
    }

    #[test]
    fn the_version_column_is_required_and_read_as_its_form_reads_it() {
        let versioned = spec().version("rev", TimestampForm::Millis);
        let read = |input: &str, form: TimestampForm| {
            let mut t = table(b',', None, false);
            t.version_form = form;
            let mut r = CsvRecords::new(input.as_bytes(), t, &versioned).unwrap();
            r.next_record().map(|rec| rec.unwrap().doc.unwrap())
        };
        let doc = read("sku,day,rev\n1,5,7\n", TimestampForm::Millis).unwrap();
        assert_eq!(versioned.version_of(&doc).unwrap(), Some(7));
        // Text where the form takes no integer, for the spec to read (or refuse) as it reads it.
        let doc = read("sku,day,rev\n1,5,7\n", TimestampForm::Date).unwrap();
        assert_eq!(doc.get_str("rev").unwrap(), "7");
        let e = read("sku,day\n1,5\n", TimestampForm::Millis).unwrap_err();
        assert!(e.contains("no column `rev`, the version"), "{e}");
    }

    #[test]
    fn a_record_that_never_ends_stops_the_read_instead_of_filling_memory() {
        let mut input = b"sku,day\n1,\"".to_vec();
        input.resize(MAX_RECORD_BYTES + (1 << 20), b'x');
        let mut r = CsvRecords::new(&input[..], table(b',', None, false), &spec()).unwrap();
        let e = r.next_record().unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("quote not closed"),
            "{e}"
        );
    }

    #[test]
    fn blank_cells_are_left_out_with_ignore_blanks() {
        let mut t = table(b',', None, true);
        t.ignore_blanks = true;
        let got = records("sku.int64(),day.int64(),n.int32()\n1,5,\n", t);
        let doc = got[0].2.as_ref().unwrap();
        assert!(doc.get("n").unwrap().is_none());
        let got = records(
            "sku.int64(),day.int64(),n.int32()\n1,5,\n",
            table(b',', None, true),
        );
        assert!(got[0].2.as_ref().unwrap_err().contains("`n` is int32()"));
    }
}
