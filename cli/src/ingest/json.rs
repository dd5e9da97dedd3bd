//! NDJSON: one JSON object a line, Extended JSON (canonical or relaxed, as mongoexport and
//! pymongo write it) for the types JSON lacks. Lines of at most [`MAX_RECORD_BYTES`]; a longer
//! one is refused and skipped unread, and the next is read.

use std::io::{BufRead, BufReader, Read};

use natural_key_runtime::bson::{self, RawDocumentBuf};

use super::record::{strip_bom, Record, Records, MAX_RECORD_BYTES};

/// One JSON object (Extended JSON for the types JSON lacks) as a document, its fields in the
/// text's order: the content hash is over the fields in stored order.
pub(crate) fn document(text: &str) -> Result<RawDocumentBuf, String> {
    // Straight into a document: bson's visitor reads Extended JSON's wrappers and keeps the
    // fields in the text's order, with no JSON tree in between.
    let doc: bson::Document = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            format!("not a document: {e}")
        } else {
            format!("not JSON: {e}")
        }
    })?;
    RawDocumentBuf::from_document(&doc).map_err(|e| format!("not a BSON document: {e}"))
}

/// The lines of an NDJSON input as records; blank lines are none.
pub(crate) struct JsonLines<R> {
    lines: Lines<R>,
    number: u64,
    bytes: u64,
}

impl<R: Read> JsonLines<R> {
    pub(crate) fn new(input: R) -> Self {
        JsonLines {
            lines: Lines {
                inner: BufReader::with_capacity(1 << 20, input),
                buf: Vec::new(),
            },
            number: 0,
            bytes: 0,
        }
    }
}

impl<R: Read> Records for JsonLines<R> {
    fn next_record(&mut self) -> Result<Option<Record>, String> {
        loop {
            let line = match self.lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(None),
                Err(e) => {
                    return Err(format!(
                        "cannot read the input after line {}: {e}",
                        self.number
                    ))
                }
            };
            self.number += 1;
            self.bytes += line.bytes;
            let text = match line.content.text() {
                Ok(t) => t,
                Err((reason, text)) => {
                    return Ok(Some(Record {
                        line: self.number,
                        text,
                        doc: Err(reason),
                    }))
                }
            };
            let text = if self.number == 1 {
                strip_bom(text)
            } else {
                text
            };
            if text.trim().is_empty() {
                continue;
            }
            return Ok(Some(Record {
                line: self.number,
                text: text.to_string(),
                doc: document(text),
            }));
        }
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn lines(&self) -> u64 {
        self.number
    }
}

/// Lines of at most [`MAX_RECORD_BYTES`], the rest of a longer one skipped unread.
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
            if !too_long && self.buf.len() + n <= MAX_RECORD_BYTES + 1 {
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

impl Content<'_> {
    /// The line's text without its `\r`; or why it has none, and what of it a reject shows.
    fn text(&self) -> Result<&str, (String, String)> {
        let bytes = match self {
            Content::Bytes(b) => *b,
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
        let mut input = vec![b'x'; MAX_RECORD_BYTES + 10];
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let mut lines = Lines {
            inner: BufReader::new(&input[..]),
            buf: Vec::new(),
        };
        let first = lines.next_line().unwrap().unwrap();
        assert!(matches!(first.content, Content::TooLong(n) if n == MAX_RECORD_BYTES as u64 + 11));
        let second = lines.next_line().unwrap().unwrap();
        assert!(matches!(second.content, Content::Bytes(b) if b == b"{\"a\":1}"));
        assert!(lines.next_line().unwrap().is_none());
    }

    #[test]
    fn records_skip_blank_lines_and_a_byte_order_mark_and_keep_line_numbers() {
        let input = "\u{feff}{\"a\":1}\r\n\n  \n{\"b\":2}\n{oops\n";
        let mut r = JsonLines::new(input.as_bytes());
        let first = r.next_record().unwrap().unwrap();
        assert_eq!((first.line, first.text.as_str()), (1, "{\"a\":1}"));
        assert_eq!(first.doc.unwrap().get_i32("a").unwrap(), 1);
        let second = r.next_record().unwrap().unwrap();
        assert_eq!(second.line, 4);
        let third = r.next_record().unwrap().unwrap();
        assert_eq!(third.line, 5);
        assert!(third.doc.unwrap_err().starts_with("not JSON"));
        assert!(r.next_record().unwrap().is_none());
        assert_eq!((r.lines(), r.bytes()), (5, input.len() as u64));
    }

    #[test]
    fn documents_keep_the_lines_field_order_and_read_extended_json() {
        let d = document(
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
        assert!(document("[1]").is_err());
        assert!(document("{").unwrap_err().starts_with("not JSON"));
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(200),
            "1".to_string() + &"}".repeat(200)
        );
        assert!(document(&deep).unwrap_err().contains("recursion limit"));
    }

    /// What mongoexport and pymongo write: canonical ({"$date": {"$numberLong": ..}}) and
    /// relaxed ({"$date": "...Z"}) dates read as the same BSON date, every other wrapper as
    /// its type; a wrapper with a stray key is refused, not half read.
    #[test]
    fn canonical_and_relaxed_extended_json_read_as_their_bson_types() {
        let canonical = document(
            r#"{"at":{"$date":{"$numberLong":"1700000000000"}},"n":{"$numberLong":"9007199254740993"},"x":{"$numberDecimal":"1.10"},"t":{"$timestamp":{"t":1,"i":2}},"r":{"$regularExpression":{"pattern":"^a","options":"i"}},"u":{"$binary":{"base64":"AAECAwQFBgcICQoLDA0ODw==","subType":"04"}},"k":{"$minKey":1}}"#,
        )
        .unwrap();
        let relaxed = document(r#"{"at":{"$date":"2023-11-14T22:13:20Z"},"n":5}"#).unwrap();
        let ms = |d: &RawDocumentBuf| d.get_datetime("at").unwrap().timestamp_millis();
        assert_eq!(ms(&canonical), 1_700_000_000_000);
        assert_eq!(ms(&relaxed), 1_700_000_000_000);
        assert_eq!(canonical.get_i64("n").unwrap(), 9_007_199_254_740_993);
        assert_eq!(relaxed.get_i32("n").unwrap(), 5);
        let ty = |name| canonical.get(name).unwrap().unwrap().element_type();
        use bson::spec::ElementType as T;
        assert_eq!(ty("x"), T::Decimal128);
        assert_eq!(ty("t"), T::Timestamp);
        assert_eq!(ty("r"), T::RegularExpression);
        assert_eq!(ty("k"), T::MinKey);
        let uuid = canonical.get_binary("u").unwrap();
        assert_eq!(uuid.subtype, bson::spec::BinarySubtype::Uuid);
        assert!(document(r#"{"at":{"$date":"2023-11-14T22:13:20Z","x":1}}"#).is_err());
        assert!(document(r#"{"b":{"$binary":"AAE=","$type":"00"}}"#).is_err());
        let legacy =
            document(r#"{"at":{"$date":1700000000000},"r":{"$regex":"a","$options":"i"}}"#);
        let legacy = legacy.unwrap();
        assert_eq!(ms(&legacy), 1_700_000_000_000);
        assert_eq!(
            legacy.get("r").unwrap().unwrap().element_type(),
            T::EmbeddedDocument
        );
        assert!(document(r#"{"at":{"$date":"yesterday"}}"#).is_err());
    }
}
