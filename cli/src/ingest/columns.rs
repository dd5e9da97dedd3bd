//! CSV/TSV columns: a field name and, with `--columnsHaveTypes`, its type as mongoimport
//! spells it, `NAME.TYPE(ARG)`; and a cell read as its column's type.

use natural_key_runtime::bson::{spec::BinarySubtype, Binary, Bson, DateTime, Decimal128};
use natural_key_runtime::spec::{KeyField, KeyKind};

use super::layout::Layout;
use crate::values::hex;

/// A column's type: mongoimport's, where it maps onto a BSON type unambiguously.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ColumnType {
    /// int32, int64 or double where the cell reads as one, else a string.
    Auto,
    String,
    Int32,
    Int64,
    Double,
    Decimal,
    /// true/false (any case), 1/0.
    Boolean,
    /// Hex digits, or base64 (`true`).
    Binary {
        base64: bool,
    },
    /// RFC 3339 (`None`), or a Go layout.
    Date(Option<Layout>),
}

const TYPES: &str = "auto(), string(), int32(), int64(), double(), decimal(), boolean(), \
                     binary(hex|base64), date() or date(GO LAYOUT)";

/// A column: its field name, and its type where the header gives one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) ty: Option<ColumnType>,
}

impl Column {
    /// A header cell `NAME.TYPE(ARG)`, as mongoimport reads it: the last `.TYPE(` before a
    /// closing `)` ends the name; `\(`, `\)` and `\\` in ARG are `(`, `)` and `\`.
    pub(crate) fn typed(cell: &str) -> Result<Column, String> {
        let bad = |why: String| format!("header `{cell}`: {why}");
        let inner = cell.strip_suffix(')').ok_or_else(|| {
            bad(format!(
                "--columnsHaveTypes wants NAME.TYPE(), TYPE one of {TYPES}"
            ))
        })?;
        let split = inner.match_indices('(').rev().find_map(|(open, _)| {
            let before = &inner[..open];
            let dot = before.rfind('.')?;
            let ty = &before[dot + 1..];
            let word = !ty.is_empty() && ty.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            word.then(|| (&before[..dot], ty, &inner[open + 1..]))
        });
        let (name, ty, arg) = split.ok_or_else(|| {
            bad(format!(
                "--columnsHaveTypes wants NAME.TYPE(), TYPE one of {TYPES}"
            ))
        })?;
        let arg = unescape(arg);
        let ty = column_type(ty, &arg).map_err(bad)?;
        Ok(Column {
            name: name.to_string(),
            ty: Some(ty),
        })
    }

    /// Whether a key's value can come out of this column: its type must read as the key's
    /// (auto() and an untyped column take the key's type).
    pub(crate) fn check_key(&self, key: &KeyField) -> Result<(), String> {
        let fits = matches!(
            (&self.ty, key.kind()),
            (None | Some(ColumnType::Auto), _)
                | (Some(ColumnType::Int32 | ColumnType::Int64), KeyKind::Int)
                | (Some(ColumnType::String), KeyKind::Str | KeyKind::Uuid)
                | (Some(ColumnType::Boolean), KeyKind::Bool)
                | (Some(ColumnType::Binary { .. }), KeyKind::Bytes)
        );
        match fits {
            true => Ok(()),
            false => Err(format!(
                "column `{}` is typed {}, which cannot hold the {} key --key gives it",
                self.name,
                self.ty.as_ref().map_or("string()", ColumnType::name),
                key.kind()
            )),
        }
    }
}

fn unescape(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut chars = arg.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next().filter(|n| matches!(n, '\\' | '(' | ')'))),
            c => out.push(c),
        }
    }
    out
}

fn column_type(ty: &str, arg: &str) -> Result<ColumnType, String> {
    let plain = |t: ColumnType| match arg.is_empty() {
        true => Ok(t),
        false => Err(format!("{ty}() takes no argument")),
    };
    match ty {
        "auto" => plain(ColumnType::Auto),
        "string" => plain(ColumnType::String),
        "int32" => plain(ColumnType::Int32),
        "int64" => plain(ColumnType::Int64),
        "double" => plain(ColumnType::Double),
        "decimal" => plain(ColumnType::Decimal),
        "boolean" => plain(ColumnType::Boolean),
        "binary" => match arg {
            "hex" => Ok(ColumnType::Binary { base64: false }),
            "base64" => Ok(ColumnType::Binary { base64: true }),
            "base32" => Err("binary(base32) is not read here: use hex or base64".into()),
            _ => Err(format!("binary({arg}): the encoding is hex or base64")),
        },
        "date" | "date_go" if arg.is_empty() => Ok(ColumnType::Date(None)),
        "date" | "date_go" => Ok(ColumnType::Date(Some(Layout::parse(arg)?))),
        "date_ms" | "date_oracle" => Err(format!(
            "{ty}() layouts are not read here: give the layout in Go's form, e.g. \
             date(2006-01-02 15:04:05), or date() for RFC 3339"
        )),
        _ => Err(format!("unknown type {ty}(): use one of {TYPES}")),
    }
}

impl ColumnType {
    /// How a header spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ColumnType::Auto => "auto()",
            ColumnType::String => "string()",
            ColumnType::Int32 => "int32()",
            ColumnType::Int64 => "int64()",
            ColumnType::Double => "double()",
            ColumnType::Decimal => "decimal()",
            ColumnType::Boolean => "boolean()",
            ColumnType::Binary { base64: false } => "binary(hex)",
            ColumnType::Binary { base64: true } => "binary(base64)",
            ColumnType::Date(_) => "date()",
        }
    }

    /// `cell` as this type, or why it is not one.
    pub(crate) fn read(&self, cell: &str) -> Result<Bson, String> {
        let not = |what: &str| format!("`{cell}` is not {what}");
        Ok(match self {
            ColumnType::Auto => auto(cell),
            ColumnType::String => Bson::String(cell.to_string()),
            ColumnType::Int32 => Bson::Int32(cell.parse().map_err(|_| not("an int32"))?),
            ColumnType::Int64 => Bson::Int64(cell.parse().map_err(|_| not("an int64"))?),
            ColumnType::Double => Bson::Double(cell.parse().map_err(|_| not("a number"))?),
            ColumnType::Decimal => {
                Bson::Decimal128(cell.parse::<Decimal128>().map_err(|_| not("a decimal"))?)
            }
            ColumnType::Boolean => match cell.to_ascii_lowercase().as_str() {
                "true" | "1" => Bson::Boolean(true),
                "false" | "0" => Bson::Boolean(false),
                _ => return Err(not("true, false, 1 or 0")),
            },
            ColumnType::Binary { base64: true } => Bson::Binary(
                Binary::from_base64(cell, BinarySubtype::Generic).map_err(|_| not("base64"))?,
            ),
            ColumnType::Binary { base64: false } => Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: hex(cell).ok_or_else(|| not("hex digits"))?,
            }),
            ColumnType::Date(None) => Bson::DateTime(
                DateTime::parse_rfc3339_str(cell).map_err(|_| not("an RFC 3339 date"))?,
            ),
            ColumnType::Date(Some(layout)) => Bson::DateTime(DateTime::from_millis(
                layout
                    .read(cell)
                    .map_err(|e| format!("`{cell}` does not fit the date layout: {e}"))?,
            )),
        })
    }
}

/// mongoimport's auto(): an integer (int32 where it fits), else a double, else the text.
fn auto(cell: &str) -> Bson {
    if let Ok(n) = cell.parse::<i64>() {
        return i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32);
    }
    match cell.parse::<f64>() {
        Ok(x) => Bson::Double(x),
        Err(_) => Bson::String(cell.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_cells_give_a_name_and_a_type() {
        let c = Column::typed("price.decimal()").unwrap();
        assert_eq!(
            (c.name.as_str(), c.ty),
            ("price", Some(ColumnType::Decimal))
        );
        let c = Column::typed("a.b.int32()").unwrap();
        assert_eq!(c.name, "a.b");
        let c = Column::typed("at.date(\\(2006-01-02\\))").unwrap();
        assert!(matches!(c.ty, Some(ColumnType::Date(Some(_)))));
        let c = Column::typed("at.date()").unwrap();
        assert_eq!(c.ty, Some(ColumnType::Date(None)));
        for (cell, says) in [
            ("price", "NAME.TYPE()"),
            ("price.money()", "unknown type money()"),
            ("n.int32(5)", "takes no argument"),
            ("b.binary(base32)", "base32"),
            ("d.date_ms(yyyy-MM-dd)", "Go's form"),
            ("d.date(Jan 2 2006)", "is not read here"),
        ] {
            let e = Column::typed(cell).unwrap_err();
            assert!(e.contains(says) && e.contains(cell), "{cell}: {e}");
        }
    }

    #[test]
    fn cells_read_as_their_types() {
        let read = |ty: ColumnType, cell: &str| ty.read(cell);
        assert_eq!(read(ColumnType::Int32, "-7").unwrap(), Bson::Int32(-7));
        assert!(read(ColumnType::Int32, "3000000000").is_err());
        assert_eq!(
            read(ColumnType::Int64, "3000000000").unwrap(),
            Bson::Int64(3_000_000_000)
        );
        assert_eq!(read(ColumnType::Double, "1.5").unwrap(), Bson::Double(1.5));
        assert!(read(ColumnType::Double, "").is_err());
        assert_eq!(
            read(ColumnType::Boolean, "TRUE").unwrap(),
            Bson::Boolean(true)
        );
        assert_eq!(
            read(ColumnType::Boolean, "0").unwrap(),
            Bson::Boolean(false)
        );
        assert!(read(ColumnType::Boolean, "yes").is_err());
        assert_eq!(
            read(ColumnType::String, "01").unwrap(),
            Bson::String("01".into())
        );
        assert_eq!(read(ColumnType::Auto, "01").unwrap(), Bson::Int32(1));
        assert_eq!(
            read(ColumnType::Auto, "4000000000").unwrap(),
            Bson::Int64(4_000_000_000)
        );
        assert_eq!(read(ColumnType::Auto, "2.5").unwrap(), Bson::Double(2.5));
        assert_eq!(
            read(ColumnType::Auto, "x").unwrap(),
            Bson::String("x".into())
        );
        let hex = read(ColumnType::Binary { base64: false }, "0aff").unwrap();
        let b64 = read(ColumnType::Binary { base64: true }, "Cv8=").unwrap();
        assert_eq!(hex, b64);
        assert!(read(ColumnType::Binary { base64: false }, "0g").is_err());
        let d = read(ColumnType::Date(None), "2023-11-14T22:13:20Z").unwrap();
        assert_eq!(d, Bson::DateTime(DateTime::from_millis(1_700_000_000_000)));
        let x = read(ColumnType::Decimal, "1.10").unwrap();
        assert!(
            matches!(x, Bson::Decimal128(d) if d.to_string() == "1.10"),
            "{x}"
        );
    }

    #[test]
    fn a_typed_key_column_must_hold_the_keys_type() {
        let key = KeyField::new("sku", KeyKind::Int);
        let col = |ty| Column {
            name: "sku".into(),
            ty,
        };
        assert!(col(Some(ColumnType::Int64)).check_key(&key).is_ok());
        assert!(col(Some(ColumnType::Auto)).check_key(&key).is_ok());
        assert!(col(None).check_key(&key).is_ok());
        let e = col(Some(ColumnType::String)).check_key(&key).unwrap_err();
        assert!(e.contains("`sku`") && e.contains("string()"), "{e}");
    }
}
