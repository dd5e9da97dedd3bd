//! One argument's value read into what the library takes: TYPE:VALUE keys, NAME:TYPE[:OPTION]
//! key fields, NAME[:FORM] timestamps and FINDING[=N] allowances. They are clap's
//! `value_parser`s, so that a bad value is a usage error that names its flag.

use natural_key_runtime::spec::{KeyField, KeyKind, TimestampForm};
use natural_key_runtime::KeyValue;

const KEY_VALUE_FORMS: &str = "str:TEXT, int:DECIMAL, bool:true|false, bytes:HEX, \
                               uuid:8-4-4-4-12, objectid:24HEX or none";

pub(crate) fn parse_key_value(arg: &str) -> Result<KeyValue<'static>, String> {
    if arg == "none" || arg == "none:" {
        return Ok(KeyValue::None);
    }
    let Some((kind, value)) = arg.split_once(':') else {
        return Err(format!("a key is TYPE:VALUE: {KEY_VALUE_FORMS}"));
    };
    let bad = |what: &str| format!("`{value}` is not {what}");
    let kind: KeyKind = kind.parse().map_err(|e| {
        if kind == "none" {
            "none takes no value".to_string()
        } else {
            format!("{e} (or none)")
        }
    })?;
    Ok(match kind {
        KeyKind::Str => KeyValue::Str(value.to_string().into()),
        KeyKind::Int => KeyValue::Int(
            value
                .parse::<i128>()
                .ok()
                .filter(|_| !value.starts_with('+'))
                .ok_or_else(|| bad("a decimal integer"))?,
        ),
        KeyKind::Bool => match value {
            "true" => KeyValue::Bool(true),
            "false" => KeyValue::Bool(false),
            _ => return Err(bad("true or false")),
        },
        KeyKind::Bytes => KeyValue::Bytes(hex(value).ok_or_else(|| bad("hex digits"))?.into()),
        KeyKind::Uuid => {
            let b = value.as_bytes();
            let hyphens = b.len() == 36 && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-');
            let bytes = hex(&value.replace('-', ""))
                .filter(|_| hyphens)
                .and_then(|v| <[u8; 16]>::try_from(v).ok())
                .ok_or_else(|| bad("a hyphenated UUID (8-4-4-4-12 hex digits)"))?;
            KeyValue::Uuid(bytes)
        }
        KeyKind::ObjectId => KeyValue::ObjectId(
            hex(value)
                .and_then(|v| <[u8; 12]>::try_from(v).ok())
                .ok_or_else(|| bad("an ObjectId (24 hex digits)"))?,
        ),
        _ => return Err(format!("key type {kind} is not supported here")),
    })
}

/// Hex digits as bytes (`bytes:` keys and `binary(hex)` columns).
pub(crate) fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn check_field_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the field name is empty".into());
    }
    if name == "_id" || name.starts_with(natural_key_runtime::RESERVED_PREFIX) {
        return Err(format!(
            "`{name}` is natural-key's own field, not a key of the document"
        ));
    }
    Ok(())
}

/// `--keep-id FIELD`: a name a document can hold at its top level, and not natural-key's own.
pub(crate) fn parse_keep_id(arg: &str) -> Result<String, String> {
    check_field_name(arg)?;
    if arg.starts_with('$') || arg.contains('.') {
        return Err(format!(
            "`{arg}` cannot be a top-level field: no `$` in front, no `.`"
        ));
    }
    Ok(arg.to_string())
}

pub(crate) fn parse_key_field(arg: &str) -> Result<KeyField, String> {
    let usage = "want NAME:TYPE[:OPTION]..., e.g. slug:str or lang:str:lowercase";
    let mut parts: Vec<&str> = arg.split(':').collect();
    let mut options = Vec::new();
    while let Some(&last) = parts.last() {
        if ["lowercase", "nfc", "optional"].contains(&last) && parts.len() > 2 {
            options.push(last);
            parts.pop();
        } else {
            break;
        }
    }
    if parts.len() < 2 {
        return Err(format!("no type: {usage}"));
    }
    let kind: KeyKind = parts
        .pop()
        .unwrap_or_default()
        .parse::<KeyKind>()
        .map_err(|e| e.to_string())?;
    let name = parts.join(":");
    check_field_name(&name)?;
    let mut field = KeyField::new(name, kind);
    for option in options.into_iter().rev() {
        field = match option {
            "lowercase" | "nfc" if kind != KeyKind::Str => {
                return Err(format!("{option} applies to str keys only"))
            }
            "lowercase" => field.lowercase(),
            "nfc" => field.nfc(),
            _ => field.optional(),
        };
    }
    Ok(field)
}

pub(crate) fn parse_timestamp_field(arg: &str) -> Result<(String, TimestampForm), String> {
    match arg.rsplit_once(':') {
        Some((name, form)) if form.parse::<TimestampForm>().is_ok() => {
            check_field_name(name)?;
            Ok((
                name.to_string(),
                form.parse::<TimestampForm>().map_err(|e| e.to_string())?,
            ))
        }
        _ => {
            check_field_name(arg)?;
            Ok((arg.to_string(), TimestampForm::Any))
        }
    }
}

/// The findings `--allow` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Unreadable,
    Legacy,
    IdDrift,
    DuplicatesIdentical,
    DuplicatesDiffering,
    /// Both duplicate kinds.
    Duplicates,
}

pub(crate) const KINDS: [(&str, Kind); 5] = [
    ("unreadable", Kind::Unreadable),
    ("legacy", Kind::Legacy),
    ("id-drift", Kind::IdDrift),
    ("duplicates-identical", Kind::DuplicatesIdentical),
    ("duplicates-differing", Kind::DuplicatesDiffering),
];

pub(crate) fn parse_allow(arg: &str) -> Result<(Kind, Option<u64>), String> {
    let (name, limit) = match arg.split_once('=') {
        Some((name, n)) => {
            let n = n
                .parse::<u64>()
                .map_err(|_| format!("`{n}` is not a count (in {arg})"))?;
            (name, Some(n))
        }
        None => (arg, None),
    };
    if name == "duplicates" {
        return Ok((Kind::Duplicates, limit));
    }
    KINDS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| (*k, limit))
        .ok_or_else(|| {
            format!(
                "unknown finding `{name}`: use unreadable, legacy, id-drift, \
                 duplicates-identical, duplicates-differing or duplicates"
            )
        })
}
