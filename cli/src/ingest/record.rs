//! What every input format is read into: records, each with the line it starts on, its text
//! and its document (or why it has none), from a reader that says how far it has got.

use natural_key_runtime::bson::RawDocumentBuf;

/// A record longer than this is not read whole: twice the largest document any engine stores
/// (16 MiB of BSON), so that every record an engine could take is read.
pub(crate) const MAX_RECORD_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug)]
/// One record of the input: a line of NDJSON, an element of a JSON array, a CSV/TSV record.
pub(crate) struct Record {
    /// The line it starts on, 1-based: a CSV record or an array element may span several.
    pub(crate) line: u64,
    /// Its text, kept for a reject: what to fix and ingest again.
    pub(crate) text: String,
    /// Its document, or why it has none (the record is then refused alone).
    pub(crate) doc: Result<RawDocumentBuf, String>,
}

/// A format's reader.
pub(crate) trait Records {
    /// The next record, `None` at the end of the input. An error ends the input: nothing
    /// after it can be told apart (an array that breaks off, a header that cannot be read).
    fn next_record(&mut self) -> Result<Option<Record>, String>;

    /// Bytes of the input read so far.
    fn bytes(&self) -> u64;

    /// Lines of the input read so far.
    fn lines(&self) -> u64;
}

/// `text` without the UTF-8 byte-order mark an editor may put in front of a file.
pub(crate) fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}
