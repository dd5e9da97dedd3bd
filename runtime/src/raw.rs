//! BSON documents written as bytes, for the documents and commands a write sends: each is
//! built in one allocation of its exact size, and the stored body is copied in whole, not
//! element by element. The bytes are those `RawDocumentBuf::append` would write.

use bson::RawDocumentBuf;

const STRING: u8 = 0x02;
const DOCUMENT: u8 = 0x03;
const ARRAY: u8 = 0x04;
const BOOLEAN: u8 = 0x08;

/// A value [`doc`] can write.
#[derive(Clone, Copy)]
pub(crate) enum Value<'a> {
    Str(&'a str),
    /// A whole document's bytes.
    Doc(&'a [u8]),
    /// The elements of a document (its bytes without the length and the final NUL), spliced
    /// in at the top level: a stored body's fields.
    Fields(&'a [u8]),
    /// An array of documents.
    Docs(&'a [Embedded<'a>]),
    Bool(bool),
}

/// A document in an array [`doc`] writes: whole bytes, or elements written in place. An
/// insert's document goes into its command as elements (`_id`, a stored body's fields, the
/// write token), so the body is copied once per write, into the command.
#[derive(Clone, Copy)]
pub(crate) enum Embedded<'a> {
    Bytes(&'a [u8]),
    Elements(&'a [(&'a str, Value<'a>)]),
}

impl Embedded<'_> {
    /// Its bytes' length once written.
    pub(crate) fn len(&self) -> usize {
        match self {
            Embedded::Bytes(b) => b.len(),
            Embedded::Elements(e) => doc_len(e),
        }
    }
}

/// What a command can carry as one of its documents.
pub(crate) trait ToEmbedded {
    fn embedded(&self) -> Embedded<'_>;
}

impl ToEmbedded for RawDocumentBuf {
    fn embedded(&self) -> Embedded<'_> {
        Embedded::Bytes(self.as_bytes())
    }
}

impl<const N: usize> ToEmbedded for [(&str, Value<'_>); N] {
    fn embedded(&self) -> Embedded<'_> {
        Embedded::Elements(self)
    }
}

impl<T: ToEmbedded + ?Sized> ToEmbedded for &T {
    fn embedded(&self) -> Embedded<'_> {
        (**self).embedded()
    }
}

/// The elements of `doc`: its bytes without the 4-byte length and the final NUL.
pub(crate) fn fields(doc: &RawDocumentBuf) -> &[u8] {
    let b = doc.as_bytes();
    &b[4..b.len() - 1]
}

/// The decimal digits of an array index, right-aligned in the buffer, and where they start
/// (BSON arrays are documents keyed "0", "1", ...).
fn digits(mut i: usize) -> ([u8; 20], usize) {
    let mut d = [0u8; 20];
    let mut k = d.len();
    loop {
        k -= 1;
        d[k] = b'0' + (i % 10) as u8;
        i /= 10;
        if i == 0 {
            return (d, k);
        }
    }
}

fn index_len(i: usize) -> usize {
    let (d, k) = digits(i);
    d.len() - k
}

fn element_len(key: &str, v: &Value<'_>) -> usize {
    let head = 1 + key.len() + 1;
    match v {
        Value::Str(s) => head + 4 + s.len() + 1,
        Value::Doc(d) => head + d.len(),
        Value::Fields(f) => f.len(),
        Value::Docs(ds) => {
            let items: usize = ds
                .iter()
                .enumerate()
                .map(|(i, d)| 1 + index_len(i) + 1 + d.len())
                .sum();
            head + 4 + items + 1
        }
        Value::Bool(_) => head + 1,
    }
}

/// A document that BSON cannot hold (over 2 GiB); the size checks before any write keep
/// documents and commands far below that.
#[derive(Debug)]
pub(crate) struct Unwritable(String);

impl std::fmt::Display for Unwritable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn length(n: usize) -> Result<[u8; 4], Unwritable> {
    i32::try_from(n)
        .map(i32::to_le_bytes)
        .map_err(|_| Unwritable(format!("a BSON document of {n} bytes")))
}

fn key(out: &mut Vec<u8>, tag: u8, key: &str) {
    out.push(tag);
    out.extend_from_slice(key.as_bytes());
    out.push(0);
}

fn index_key(out: &mut Vec<u8>, i: usize) {
    let (d, k) = digits(i);
    out.push(DOCUMENT);
    out.extend_from_slice(&d[k..]);
    out.push(0);
}

/// The length of the document of these elements.
fn doc_len(elements: &[(&str, Value<'_>)]) -> usize {
    4 + elements
        .iter()
        .map(|(k, v)| element_len(k, v))
        .sum::<usize>()
        + 1
}

/// Writes the document of these elements. Keys are the library's own names or a body's
/// already-checked names: none holds a NUL.
pub(crate) fn doc(elements: &[(&str, Value<'_>)]) -> Result<RawDocumentBuf, Unwritable> {
    let total = doc_len(elements);
    let mut out = Vec::with_capacity(total);
    write_doc(&mut out, elements)?;
    debug_assert_eq!(out.len(), total);
    RawDocumentBuf::from_bytes(out).map_err(|e| Unwritable(e.to_string()))
}

/// Appends the document of `elements`, its length written once it is known.
fn write_doc(out: &mut Vec<u8>, elements: &[(&str, Value<'_>)]) -> Result<(), Unwritable> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    for (k, v) in elements {
        match v {
            Value::Str(s) => {
                key(out, STRING, k);
                out.extend_from_slice(&length(s.len() + 1)?);
                out.extend_from_slice(s.as_bytes());
                out.push(0);
            }
            Value::Doc(d) => {
                key(out, DOCUMENT, k);
                out.extend_from_slice(d);
            }
            Value::Fields(f) => out.extend_from_slice(f),
            Value::Docs(ds) => {
                key(out, ARRAY, k);
                let start = out.len();
                out.extend_from_slice(&[0; 4]);
                for (i, d) in ds.iter().enumerate() {
                    index_key(out, i);
                    match d {
                        Embedded::Bytes(b) => out.extend_from_slice(b),
                        Embedded::Elements(e) => write_doc(out, e)?,
                    }
                }
                out.push(0);
                let len = length(out.len() - start)?;
                out[start..start + 4].copy_from_slice(&len);
            }
            Value::Bool(b) => {
                key(out, BOOLEAN, k);
                out.push(*b as u8);
            }
        }
    }
    out.push(0);
    let len = length(out.len() - start)?;
    out[start..start + 4].copy_from_slice(&len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{rawdoc, RawArrayBuf};

    /// The bytes are `RawDocumentBuf::append`'s, for every kind of value, arrays long enough
    /// for two- and three-digit keys, and documents given as bytes or as elements.
    #[test]
    fn writes_what_append_writes() {
        let body = rawdoc! { "a": 1, "b": "two", "c": { "d": [1, 2] } };
        let items: Vec<RawDocumentBuf> = (0..120)
            .map(|i| rawdoc! { "i": i, "s": "x".repeat(i as usize) })
            .collect();
        for n in [0, 1, 10, 11, 120] {
            // Every other document as its elements (its fields spliced in), written in place.
            let parts: Vec<[(&str, Value<'_>); 1]> = items[..n]
                .iter()
                .map(|d| [("", Value::Fields(fields(d)))])
                .collect();
            let refs: Vec<Embedded<'_>> = (0..n)
                .map(|i| match i % 2 {
                    0 => items[i].embedded(),
                    _ => parts[i].embedded(),
                })
                .collect();
            let wc = rawdoc! { "w": "majority" };
            let ours = doc(&[
                ("insert", Value::Str("coll\u{e9}")),
                ("", Value::Fields(fields(&body))),
                ("documents", Value::Docs(&refs)),
                ("ordered", Value::Bool(false)),
                ("writeConcern", Value::Doc(wc.as_bytes())),
                ("last", Value::Str("")),
            ])
            .unwrap();
            let mut theirs = RawDocumentBuf::new();
            theirs.append("insert", "coll\u{e9}");
            for e in &body {
                let (k, v) = e.unwrap();
                theirs.append_ref(k, v);
            }
            let mut array = RawArrayBuf::new();
            for d in &items[..n] {
                array.push(d.clone());
            }
            theirs.append("documents", array);
            theirs.append("ordered", false);
            theirs.append("writeConcern", wc.clone());
            theirs.append("last", "");
            assert_eq!(ours.as_bytes(), theirs.as_bytes(), "{n} items");
        }
    }
}
