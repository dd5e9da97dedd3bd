//! `--delete-when FIELD[=VALUE]`: which lines are deletions, as change-data-capture streams
//! mark them.

use natural_key_runtime::bson::{self, Bson, RawDocumentBuf};

/// Which lines are deletions.
pub(crate) struct Tombstone {
    field: String,
    /// The value that marks a deletion, as text; `None`: `true` or `"true"`.
    value: Option<String>,
}

impl Tombstone {
    pub(crate) fn parse(arg: &str) -> Result<Tombstone, String> {
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
    pub(crate) fn take(&self, doc: RawDocumentBuf) -> Result<(RawDocumentBuf, bool), String> {
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
