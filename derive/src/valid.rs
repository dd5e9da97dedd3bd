//! The rules of a model (`ast.rs`) that no single attribute can break on its own: the scheme's
//! options, attributes of the other derive, stored names, `skip_hash` against serde's view of
//! the field, one timestamp, at least one identity key, one version field and the `changed_at`
//! name (NaturalKey), one `#[id]` (RandomId). Every problem is reported into the one `Ctxt`.

use crate::ast::{Container, Field, SchemeName};
use crate::attr::Derive;
use crate::ctxt::Ctxt;

pub fn check(cx: &mut Ctxt, cont: &Container) {
    check_scheme(cx, cont);
    let Some(fields) = &cont.fields else {
        return;
    };
    for field in fields {
        check_field(cx, field);
        check_stored_name(cx, cont, field);
        check_skip_hash(cx, cont, field);
    }
    match cont.derive {
        Derive::NaturalKey => {
            check_keys(cx, cont, fields);
            check_version(cx, fields);
            check_changed_at(cx, cont, fields);
        }
        Derive::RandomId => check_ids(cx, cont, fields),
    }
}

fn check_scheme(cx: &mut Ctxt, cont: &Container) {
    let attrs = &cont.attrs;
    match cont.scheme_name() {
        SchemeName::Default => {
            if let Some(sep) = &attrs.separator {
                cx.error_spanned_by(sep, "`separator` belongs to `scheme = \"joined\"`");
            }
        }
        SchemeName::Joined => {
            if let Some(sep) = attrs
                .separator
                .as_ref()
                .filter(|s| s.value().contains('\0'))
            {
                cx.error_spanned_by(
                    sep,
                    "a separator with a NUL byte can make a joined id equal a default-scheme id \
                     (whose message separates fields with NUL); choose another separator",
                );
            }
            if let Some(ns) = &attrs.namespace {
                cx.error_spanned_by(
                    ns,
                    "the joined scheme has no namespace (it reproduces `sha256(a + \":\" + b)` \
                     byte for byte); use the default scheme for a namespace",
                );
            }
        }
        SchemeName::Unknown(lit) => {
            cx.error_spanned_by(lit, "unknown scheme; expected \"default\" or \"joined\"");
        }
    }
}

fn check_field(cx: &mut Ctxt, field: &Field) {
    let attrs = &field.attrs;
    for attr in &attrs.other_derive {
        cx.error_spanned_by(
            attr,
            "a type derives either NaturalKey (id derived from its key: replace on retry) or \
             RandomId (id created once: events that sit beside each other), not both",
        );
    }
    if let Some(key) = attrs.key.as_ref().filter(|k| k.timestamp) {
        for path in &key.normalize_paths {
            cx.error_spanned_by(
                path,
                "`nfc`/`lowercase` normalize text keys; they do not apply to the timestamp key",
            );
        }
    }
    if let (Some(relative), Some(_)) = (&attrs.relative, &attrs.key) {
        cx.error_spanned_by(
            relative,
            "a `#[key]` field identifies the document and never changes; `relative` marks a \
             field that relative updates change",
        );
    }
    if attrs.id && attrs.idempotency_key {
        cx.error_spanned_by(
            field.ident,
            "`#[id]` and `#[idempotency_key]` must be different fields",
        );
    }
}

/// The compile-time half of the runtime's rule for top-level names (`check_names` in the
/// runtime's `stored.rs`, the one home of the rule; a proc-macro crate cannot import it): a field
/// serialized under one of natural-key's names, a path, an operator or the empty name would be
/// refused at every write, so it is refused here, where the name is written. Flattened maps
/// are left to the runtime, and a field serde does not store is not checked.
fn check_stored_name(cx: &mut Ctxt, cont: &Container, field: &Field) {
    let derive = cont.derive;
    let Some(name) = cont.stored_name(field) else {
        return;
    };
    let span: &dyn quote::ToTokens = match &field.attrs.serde.rename {
        Some(lit) => lit,
        None => field.ident,
    };
    let problem = if name.starts_with("_nk_") {
        "is reserved: natural-key stores its own fields under `_nk_` names"
    } else if name == "_id" && derive == Derive::NaturalKey {
        "is the id natural-key derives from the key fields; a NaturalKey type does not store \
         an `_id` of its own (read it with `id()`)"
    } else if name == "_id" && !field.attrs.id {
        "is the event's id: only the `#[id]` field is stored as `_id`"
    } else if name.is_empty() {
        "is empty; updates cannot address it"
    } else if name.starts_with('$') {
        "starts with `$`, which engines read as an operator"
    } else if name.contains('.') {
        "contains `.`, which an update reads as a path into another field"
    } else {
        return;
    };
    cx.error_spanned_by(span, format!("the stored field name {name:?} {problem}"));
}

/// `skip_hash` leaves a field's stored name out of what is compared — a NaturalKey type's
/// content hash, an event's payload — which covers what is stored; where the derive cannot
/// know that name, or the field is never stored or never compared, it refuses rather than
/// compare something other than the rule says.
fn check_skip_hash(cx: &mut Ctxt, cont: &Container, field: &Field) {
    let Some(skip_hash) = &field.attrs.skip_hash else {
        return;
    };
    // `relative` implies `skip_hash`: name the option the user wrote.
    let opt = path_text(skip_hash);
    let compared = match cont.derive {
        Derive::NaturalKey => "the content hash",
        Derive::RandomId => "an event's payload",
    };
    let serde = &field.attrs.serde;
    if let Some(flatten) = &serde.flatten {
        cx.error_spanned_by(
            skip_hash,
            format!(
                "`{opt}` cannot leave out a `#[serde({})]` field: serde stores its \
                 entries under their own names, which the derive cannot know, and \
                 {compared} covers what is stored",
                path_text(flatten)
            ),
        );
    }
    if let Some(skip) = &serde.not_stored {
        cx.error_spanned_by(
            skip_hash,
            format!(
                "`{opt}` is pointless on a `#[serde({})]` field: serde never stores it, \
                 and {compared} covers only what is stored; remove `{opt}`",
                path_text(skip)
            ),
        );
    }
    let naming = if field.attrs.id {
        Some("#[id]")
    } else if field.attrs.idempotency_key {
        Some("#[idempotency_key]")
    } else {
        None
    };
    if let Some(which) = naming {
        cx.error_spanned_by(
            skip_hash,
            format!(
                "`skip_hash` is pointless on the `{which}` field: it names the event and is \
                 never part of its payload; remove `skip_hash`"
            ),
        );
    }
    if let Some(foreign) = &cont.attrs.serde.foreign {
        let (written, why) = match path_text(foreign).as_str() {
            "transparent" => (
                "transparent",
                "the stored document is its one field's value, with no field of this struct \
                 to leave out",
            ),
            "into" => (
                "into = \"...\"",
                "the stored document is the serialization of the `into` type, whose field \
                 names the derive cannot know",
            ),
            _ => (
                "remote = \"...\"",
                "its `Serialize` is written by hand, so the derive cannot know the stored \
                 field names",
            ),
        };
        cx.error_spanned_by(
            skip_hash,
            format!("`{opt}` cannot apply in a `#[serde({written})]` type: {why}"),
        );
    }
}

fn path_text(path: &syn::Path) -> String {
    quote::ToTokens::to_token_stream(path).to_string()
}

fn check_keys(cx: &mut Ctxt, cont: &Container, fields: &[Field]) {
    let mut timestamps = fields.iter().filter(|f| f.is_timestamp());
    if timestamps.next().is_none() {
        cx.error_spanned_by(
            cont.ident,
            "no `#[key(timestamp)]` field: mark the field holding the document's \
             domain instant (e.g. `published_at`); it becomes the ULID's time prefix",
        );
    }
    for extra in timestamps {
        cx.error_spanned_by(
            extra.ident,
            "a second `#[key(timestamp)]` field: an id has exactly one timestamp",
        );
    }
    if !fields.iter().any(|f| f.identity_key().is_some()) {
        cx.error_spanned_by(
            cont.ident,
            "no identity `#[key]` field: mark the fields that say which document this \
             is (e.g. `slug`, `lang`); without them every document with the same \
             timestamp would share one id",
        );
    }
}

/// `#[natural_key(version)]`: one field, stored, and not a key or a relative field. It may be
/// `skip_hash` (a version that changes with nothing else then writes nothing).
fn check_version(cx: &mut Ctxt, fields: &[Field]) {
    let versions = fields.iter().filter_map(|f| f.attrs.version.as_ref());
    for extra in versions.skip(1) {
        cx.error_spanned_by(
            extra,
            "a second `#[natural_key(version)]` field: a document has one version; keep \
             `version` on one field",
        );
    }
    for field in fields {
        let Some(version) = &field.attrs.version else {
            continue;
        };
        if let Some(key) = &field.attrs.key {
            let which = if key.timestamp {
                "the `#[key(timestamp)]` field is part of the id"
            } else {
                "a `#[key]` field identifies the document"
            };
            cx.error_spanned_by(
                version,
                format!(
                    "the version cannot be a key: {which} and never changes, while the version \
                     grows with each change; keep the version in a field of its own"
                ),
            );
        }
        if field.attrs.relative.is_some() {
            cx.error_spanned_by(
                version,
                "the version cannot be a `relative` field: upserts, which the version orders, \
                 leave relative fields alone; remove `relative`",
            );
        }
        let serde = &field.attrs.serde;
        let unstored = match (&serde.not_stored, &serde.stored_if) {
            (Some(skip), _) => Some((path_text(skip), "", "never stores it")),
            (None, Some(skip_if)) => Some((
                path_text(skip_if),
                " = \"...\"",
                "leaves it out for some values",
            )),
            (None, None) => None,
        };
        if let Some((skip, value, what)) = unstored {
            cx.error_spanned_by(
                version,
                format!(
                    "the version field must be stored, so that a document read back carries \
                     its version; `#[serde({skip}{value})]` {what}: remove `{skip}`"
                ),
            );
        }
    }
}

/// `changed_at = "..."`: a top-level name the engine can set (the rule of
/// `check_stored_name`), and not one the struct itself stores, which the engine would overwrite.
/// Where the stored names are unknown (`transparent`, `into`, `remote`, flattened entries) the
/// runtime's check of the document is left to find a clash.
fn check_changed_at(cx: &mut Ctxt, cont: &Container, fields: &[Field]) {
    let Some(lit) = &cont.attrs.changed_at else {
        return;
    };
    let name = lit.value();
    let problem = if name.is_empty() {
        "is empty; name the field the engine sets: `changed_at = \"updated_at\"`"
    } else if name.starts_with("_nk_") {
        "is reserved: natural-key stores its own fields under `_nk_` names; choose another name"
    } else if name == "_id" {
        "is the document's id; choose another name"
    } else if name.starts_with('$') {
        "starts with `$`, which engines read as an operator; choose another name"
    } else if name.contains('.') {
        "contains `.`, which an update reads as a path into another field; choose another name"
    } else if name.contains('\0') {
        "contains a NUL byte, which a BSON field name cannot hold; choose another name"
    } else {
        ""
    };
    if !problem.is_empty() {
        cx.error_spanned_by(lit, format!("`changed_at` {name:?} {problem}"));
        return;
    }
    if cont.attrs.serde.foreign.is_some() {
        return;
    }
    if let Some(field) = fields
        .iter()
        .find(|f| cont.stored_name(f).as_deref() == Some(name.as_str()))
    {
        let field = field.ident;
        cx.error_spanned_by(
            lit,
            format!(
                "`changed_at` {name:?} is where the struct stores its field `{field}`; the engine \
                 sets this field itself, so it must not be one the struct writes: choose \
                 another name or, to read the time back into `{field}`, mark it \
                 `#[serde(skip_serializing)]`",
            ),
        );
    }
}

fn check_ids(cx: &mut Ctxt, cont: &Container, fields: &[Field]) {
    let mut ids = fields.iter().filter(|f| f.attrs.id);
    if ids.next().is_none() {
        cx.error_spanned_by(
            cont.ident,
            "no `#[id]` field: a RandomId type carries its id, a `natural_key::Ulid` \
             created once with the value (`Ulid::new()`), so a retried write reuses it",
        );
    }
    for extra in ids {
        cx.error_spanned_by(
            extra.ident,
            "a second `#[id]` field: a RandomId type has one id",
        );
    }
    for extra in fields.iter().filter(|f| f.attrs.idempotency_key).skip(1) {
        cx.error_spanned_by(extra.ident, "a second `#[idempotency_key]` field");
    }
}
