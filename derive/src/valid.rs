//! The rules of a model (`ast.rs`) that no single attribute can break on its own: the scheme's
//! options, attributes of the other derive, one timestamp and at least one identity key
//! (NaturalKey), one `#[id]` (RandomId). Every problem is reported into the one `Ctxt`.

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
    }
    match cont.derive {
        Derive::NaturalKey => check_keys(cx, cont, fields),
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
    if attrs.id && attrs.idempotency_key {
        cx.error_spanned_by(
            field.ident,
            "`#[id]` and `#[idempotency_key]` must be different fields",
        );
    }
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
