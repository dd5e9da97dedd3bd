//! CSV/TSV lines as documents: a line's cells, the header's names, and a row typed by the key
//! spec (a cell is text, and a key's type is the spec's).

use natural_key_runtime::bson::{self, Bson, RawDocumentBuf};
use natural_key_runtime::spec::{KeyKind, KeySpec, TimestampForm};

/// The header's names: none empty, none twice.
pub(crate) fn check_header(names: Vec<String>) -> Result<Vec<String>, String> {
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() {
            return Err(format!("the header's column {} has no name", i + 1));
        }
        if names[..i].contains(n) {
            return Err(format!("the header names `{n}` twice"));
        }
    }
    Ok(names)
}

/// A CSV/TSV row as a document: each cell a string under its column's name, but the key and
/// timestamp fields, which take their spec's type (an int key's cell is an integer, a `ms`
/// timestamp's too); an empty cell of an optional key is absent.
pub(crate) fn row(
    header: &[String],
    cells: Vec<String>,
    spec: &KeySpec,
) -> Result<RawDocumentBuf, String> {
    if cells.len() != header.len() {
        return Err(format!(
            "{} cells where the header has {} columns",
            cells.len(),
            header.len()
        ));
    }
    let mut doc = RawDocumentBuf::new();
    for (name, cell) in header.iter().zip(cells) {
        let key = spec.keys().iter().find(|k| k.name() == name);
        let value: Option<Bson> =
            if let Some(k) = key {
                match k.kind() {
                    _ if cell.is_empty() && k.is_optional() => None,
                    KeyKind::Int => Some(cell.parse::<i64>().map(Bson::Int64).map_err(|_| {
                        format!("`{name}` is an int key: `{cell}` is not an integer")
                    })?),
                    KeyKind::Bool => Some(match cell.as_str() {
                        "true" => Bson::Boolean(true),
                        "false" => Bson::Boolean(false),
                        _ => {
                            return Err(format!(
                                "`{name}` is a bool key: `{cell}` is not true or false"
                            ))
                        }
                    }),
                    KeyKind::Str | KeyKind::Uuid => Some(Bson::String(cell)),
                    other => {
                        return Err(format!(
                            "`{name}` is a {other} key, which a CSV cell cannot hold: use NDJSON"
                        ))
                    }
                }
            } else if name == spec.timestamp() && cell.bytes().all(|b| b.is_ascii_digit()) {
                match spec.form() {
                    TimestampForm::Any | TimestampForm::Millis => {
                        Some(Bson::Int64(cell.parse::<i64>().map_err(|_| {
                            format!("`{name}`: `{cell}` is too large for Unix ms")
                        })?))
                    }
                    _ => Some(Bson::String(cell)),
                }
            } else {
                Some(Bson::String(cell))
            };
        if let Some(v) = value {
            doc.append(
                name.as_str(),
                bson::RawBson::try_from(v).map_err(|e| e.to_string())?,
            );
        }
    }
    Ok(doc)
}

/// Splits one CSV/TSV line (RFC 4180 quoting: `"a,b"`, `""` for a quote; no line breaks inside
/// a cell).
pub(crate) fn split_cells(line: &str, delimiter: char) -> Result<Vec<String>, String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cell.push('"');
                } else {
                    quoted = false;
                    match chars.peek() {
                        None => {}
                        Some(&d) if d == delimiter => {}
                        Some(_) => {
                            return Err("a quoted cell goes on after its closing quote".into())
                        }
                    }
                }
            } else {
                cell.push(c);
            }
        } else if c == delimiter {
            cells.push(std::mem::take(&mut cell));
            at_start = true;
            continue;
        } else if c == '"' && at_start {
            quoted = true;
        } else {
            cell.push(c);
        }
        at_start = false;
    }
    if quoted {
        return Err("a quoted cell is not closed (a line break inside a cell is not read)".into());
    }
    cells.push(cell);
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_split_with_rfc4180_quotes() {
        assert_eq!(split_cells("a,b,,c", ',').unwrap(), ["a", "b", "", "c"]);
        assert_eq!(
            split_cells(r#""x,y","say ""hi""",z"#, ',').unwrap(),
            ["x,y", r#"say "hi""#, "z"]
        );
        assert_eq!(split_cells("a\tb", '\t').unwrap(), ["a", "b"]);
        assert!(split_cells(r#""open"#, ',').is_err());
        assert!(split_cells(r#""a"b,c"#, ',').is_err());
    }
}
