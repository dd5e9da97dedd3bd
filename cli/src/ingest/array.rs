//! `--jsonArray`: the input is one JSON array of documents, as `mongoexport --jsonArray`
//! writes it. It is read element by element, each element's text cut out by its brackets and
//! quotes and read as an NDJSON line is, so that a file larger than memory streams and a bad
//! element is refused alone.

use std::io::{BufRead, BufReader, Read};

use super::json::document;
use super::record::{Record, Records, MAX_RECORD_BYTES};

/// The elements of a JSON array as records.
pub(crate) struct JsonArray<R> {
    inner: BufReader<R>,
    state: State,
    /// The line being read, 1-based.
    line: u64,
    bytes: u64,
    /// The last byte read.
    last: u8,
    buf: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the `[`.
    Start,
    /// Between elements.
    Inside,
    /// After the `]`.
    Done,
}

/// Where an element's text ended.
enum End {
    /// At a `,`: another element follows.
    Comma,
    /// At the array's `]`.
    Close,
    /// At the end of the input, inside the array.
    Eof,
}

impl<R: Read> JsonArray<R> {
    pub(crate) fn new(input: R) -> Self {
        JsonArray {
            inner: BufReader::with_capacity(1 << 20, input),
            state: State::Start,
            line: 1,
            bytes: 0,
            last: 0,
            buf: Vec::new(),
        }
    }

    fn peek(&mut self) -> Result<Option<u8>, String> {
        let available = self
            .inner
            .fill_buf()
            .map_err(|e| format!("cannot read the input at line {}: {e}", self.line))?;
        Ok(available.first().copied())
    }

    fn take(&mut self) -> Result<Option<u8>, String> {
        let b = self.peek()?;
        if let Some(b) = b {
            self.inner.consume(1);
            self.bytes += 1;
            self.last = b;
            if b == b'\n' {
                self.line += 1;
            }
        }
        Ok(b)
    }

    /// Past white space (and a byte-order mark before the `[`): the next byte, not taken.
    fn skip_space(&mut self) -> Result<Option<u8>, String> {
        loop {
            match self.peek()? {
                Some(b' ' | b'\t' | b'\r' | b'\n') => {}
                Some(0xEF | 0xBB | 0xBF) if self.state == State::Start && self.bytes < 3 => {}
                other => return Ok(other),
            }
            self.take()?;
        }
    }

    /// Reads one element's bytes into `buf` (all but past [`MAX_RECORD_BYTES`]): up to the
    /// `,` or `]` outside every string and bracket of it. How many bytes it has.
    fn element(&mut self) -> Result<(u64, End), String> {
        self.buf.clear();
        let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
        let mut len = 0u64;
        loop {
            let Some(b) = self.peek()? else {
                return Ok((len, End::Eof));
            };
            if !in_string && depth == 0 && (b == b',' || b == b']') {
                self.take()?;
                return Ok((len, if b == b',' { End::Comma } else { End::Close }));
            }
            self.take()?;
            match b {
                _ if escaped => escaped = false,
                b'\\' if in_string => escaped = true,
                b'"' => in_string = !in_string,
                b'{' | b'[' if !in_string => depth += 1,
                b'}' | b']' if !in_string => depth = depth.saturating_sub(1),
                _ => {}
            }
            len += 1;
            if self.buf.len() < MAX_RECORD_BYTES {
                self.buf.push(b);
            }
        }
    }

    /// The `[`, or why the input is not an array.
    fn open(&mut self) -> Result<(), String> {
        match self.skip_space()? {
            Some(b'[') => {
                self.take()?;
                self.state = State::Inside;
                Ok(())
            }
            Some(_) => Err(format!(
                "--jsonArray: the input does not start with `[` (line {})",
                self.line
            )),
            None => {
                self.state = State::Done;
                Ok(())
            }
        }
    }

    /// After the `]`: nothing but white space.
    fn close(&mut self) -> Result<(), String> {
        self.state = State::Done;
        match self.skip_space()? {
            None => Ok(()),
            Some(_) => Err(format!(
                "--jsonArray: more after the array's closing `]` (line {})",
                self.line
            )),
        }
    }
}

impl<R: Read> Records for JsonArray<R> {
    fn next_record(&mut self) -> Result<Option<Record>, String> {
        if self.state == State::Start {
            self.open()?;
            if self.skip_space()? == Some(b']') {
                self.take()?;
                self.close()?;
            }
        }
        if self.state == State::Done {
            return Ok(None);
        }
        self.skip_space()?;
        let line = self.line;
        let (len, end) = self.element()?;
        match end {
            End::Close => self.close()?,
            End::Comma => {}
            End::Eof => {
                return Err(format!(
                    "--jsonArray: the input ends inside the array (its element at line {line} \
                     is not written): is the file cut short?"
                ))
            }
        }
        let text = String::from_utf8_lossy(&self.buf);
        let text = text.trim_end();
        let doc = if text.is_empty() {
            return Err(format!(
                "--jsonArray: an empty element at line {line} (two commas, or one before `]`)"
            ));
        } else if len > MAX_RECORD_BYTES as u64 {
            Err(format!(
                "the element is {len} bytes long, more than any document can be"
            ))
        } else if std::str::from_utf8(&self.buf).is_err() {
            Err("not UTF-8".to_string())
        } else {
            document(text)
        };
        let text = match len > MAX_RECORD_BYTES as u64 {
            true => String::new(),
            false => text.to_string(),
        };
        Ok(Some(Record { line, text, doc }))
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn lines(&self) -> u64 {
        match (self.bytes, self.last) {
            (0, _) => 0,
            (_, b'\n') => self.line - 1,
            _ => self.line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str) -> Vec<Result<(u64, String, bool), String>> {
        let mut r = JsonArray::new(input.as_bytes());
        let mut out = Vec::new();
        loop {
            match r.next_record() {
                Ok(Some(rec)) => out.push(Ok((rec.line, rec.text, rec.doc.is_ok()))),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    }

    #[test]
    fn elements_are_cut_by_brackets_and_quotes_with_their_first_line() {
        let input =
            "\u{feff}[\n  {\"a\": \"x,]}\\\"\"},\n  {\"b\": [1, {\"c\": 2}]}\n,{\"d\":\n1}\n]\n";
        let got = all(input);
        assert_eq!(
            got,
            [
                Ok((2, "{\"a\": \"x,]}\\\"\"}".to_string(), true)),
                Ok((3, "{\"b\": [1, {\"c\": 2}]}".to_string(), true)),
                Ok((4, "{\"d\":\n1}".to_string(), true)),
            ]
        );
        assert!(all("[]").is_empty());
        assert!(all("  ").is_empty());
    }

    #[test]
    fn a_bad_element_is_refused_alone_and_a_broken_array_ends_the_input() {
        let got = all("[{\"a\":1}, 7, {oops}, {\"b\":2}]");
        let ok: Vec<bool> = got.iter().map(|r| r.as_ref().unwrap().2).collect();
        assert_eq!(ok, [true, false, false, true]);
        for (input, says) in [
            ("{\"a\":1}", "does not start with `[`"),
            ("[{\"a\":1},{\"b\"", "ends inside the array"),
            ("[{\"a\":1}] x", "more after"),
            ("[{\"a\":1},,{\"b\":2}]", "empty element at line 1"),
        ] {
            let last = all(input).pop().unwrap();
            assert!(
                last.as_ref().unwrap_err().contains(says),
                "{input}: {last:?}"
            );
        }
    }
}
