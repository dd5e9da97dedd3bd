//! Parsing and validating the derive input into a small model; every error is collected.

use syn::{Attribute, Data, DeriveInput, Fields, Ident, LitStr, Type};

use crate::ctxt::Ctxt;

pub enum Scheme {
    Default { namespace: String },
    Joined { separator: String },
}

pub struct KeyAttr {
    pub timestamp: bool,
    pub nfc: bool,
    pub lowercase: bool,
}

pub struct Field<'a> {
    pub ident: &'a Ident,
    pub ty: &'a Type,
    pub key: Option<KeyAttr>,
    pub skip_hash: bool,
    pub id: bool,
    pub idempotency_key: bool,
}

pub struct Input<'a> {
    pub ident: &'a Ident,
    pub generics: &'a syn::Generics,
    pub scheme: Scheme,
    pub fields: Vec<Field<'a>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Derive {
    NaturalKey,
    RandomId,
}

impl Derive {
    fn name(self) -> &'static str {
        match self {
            Derive::NaturalKey => "NaturalKey",
            Derive::RandomId => "RandomId",
        }
    }
}

impl<'a> Input<'a> {
    pub fn parse(cx: &mut Ctxt, input: &'a DeriveInput, derive: Derive) -> Option<Self> {
        let name = derive.name();
        let named = match &input.data {
            Data::Struct(s) => match &s.fields {
                Fields::Named(named) => Some(named),
                Fields::Unnamed(_) | Fields::Unit => {
                    cx.error_spanned_by(
                        &input.ident,
                        format!(
                            "#[derive({name})] needs a struct with named fields; \
                             tuple and unit structs have no field names to store"
                        ),
                    );
                    None
                }
            },
            Data::Enum(e) => {
                cx.error_spanned_by(
                    e.enum_token,
                    format!("#[derive({name})] supports structs with named fields, not enums"),
                );
                None
            }
            Data::Union(u) => {
                cx.error_spanned_by(
                    u.union_token,
                    format!("#[derive({name})] supports structs with named fields, not unions"),
                );
                None
            }
        };

        let scheme = container_attrs(cx, &input.attrs, derive);
        let fields: Vec<Field> = named
            .map(|n| n.named.iter().map(|f| field(cx, f, derive)).collect())
            .unwrap_or_default();
        let named = named?;

        match derive {
            Derive::NaturalKey => {
                let timestamps: Vec<_> = fields
                    .iter()
                    .filter(|f| f.key.as_ref().is_some_and(|k| k.timestamp))
                    .collect();
                if timestamps.is_empty() {
                    cx.error_spanned_by(
                        &input.ident,
                        "no `#[key(timestamp)]` field: mark the field holding the document's \
                         domain instant (e.g. `published_at`); it becomes the ULID's time prefix",
                    );
                }
                for extra in timestamps.iter().skip(1) {
                    cx.error_spanned_by(
                        extra.ident,
                        "a second `#[key(timestamp)]` field: an id has exactly one timestamp",
                    );
                }
                if !fields
                    .iter()
                    .any(|f| f.key.as_ref().is_some_and(|k| !k.timestamp))
                {
                    cx.error_spanned_by(
                        &input.ident,
                        "no identity `#[key]` field: mark the fields that say which document this \
                         is (e.g. `slug`, `lang`); without them every document with the same \
                         timestamp would share one id",
                    );
                }
            }
            Derive::RandomId => {
                let ids: Vec<_> = fields.iter().filter(|f| f.id).collect();
                if ids.is_empty() {
                    cx.error_spanned_by(
                        &input.ident,
                        "no `#[id]` field: a RandomId type carries its id, a `natural_key::Ulid` \
                         created once with the value (`Ulid::new()`), so a retried write reuses it",
                    );
                }
                for extra in ids.iter().skip(1) {
                    cx.error_spanned_by(
                        extra.ident,
                        "a second `#[id]` field: a RandomId type has one id",
                    );
                }
                for extra in fields.iter().filter(|f| f.idempotency_key).skip(1) {
                    cx.error_spanned_by(extra.ident, "a second `#[idempotency_key]` field");
                }
            }
        }
        let _ = named;
        Some(Input {
            ident: &input.ident,
            generics: &input.generics,
            scheme,
            fields,
        })
    }
}

fn both_derives(cx: &mut Ctxt, attr: &Attribute) {
    cx.error_spanned_by(
        attr,
        "a type derives either NaturalKey (id derived from its key: replace on retry) or \
         RandomId (id created once: events that sit beside each other), not both",
    );
}

fn container_attrs(cx: &mut Ctxt, attrs: &[Attribute], derive: Derive) -> Scheme {
    let mut namespace: Option<LitStr> = None;
    let mut scheme: Option<LitStr> = None;
    let mut separator: Option<LitStr> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("natural_key")) {
        if derive == Derive::RandomId {
            cx.error_spanned_by(
                attr,
                "RandomId takes no `#[natural_key(...)]` container options",
            );
            continue;
        }
        let r = attr.parse_nested_meta(|meta| {
            let slot = if meta.path.is_ident("namespace") {
                &mut namespace
            } else if meta.path.is_ident("scheme") {
                &mut scheme
            } else if meta.path.is_ident("separator") {
                &mut separator
            } else {
                let _ = meta.value().and_then(|v| v.parse::<syn::Expr>());
                cx.error_spanned_by(
                    &meta.path,
                    "unknown `natural_key` option; expected `namespace = \"...\"`, \
                     `scheme = \"default\" | \"joined\"` or `separator = \"...\"`",
                );
                return Ok(());
            };
            let lit: LitStr = meta.value()?.parse()?;
            if slot.is_some() {
                cx.error_spanned_by(&meta.path, "this option is given twice");
            }
            *slot = Some(lit);
            Ok(())
        });
        if let Err(e) = r {
            cx.syn_error(e);
        }
    }
    match scheme.as_ref().map(|s| s.value()).as_deref() {
        None | Some("default") => {
            if let Some(sep) = &separator {
                cx.error_spanned_by(sep, "`separator` belongs to `scheme = \"joined\"`");
            }
            let namespace = namespace.map(|n| n.value()).unwrap_or_default();
            Scheme::Default { namespace }
        }
        Some("joined") => {
            if let Some(ns) = &namespace {
                cx.error_spanned_by(
                    ns,
                    "the joined scheme has no namespace (it reproduces `sha256(a + \":\" + b)` \
                     byte for byte); use the default scheme for a namespace",
                );
            }
            let separator = separator
                .map(|s| s.value())
                .unwrap_or_else(|| ":".to_string());
            Scheme::Joined { separator }
        }
        Some(_) => {
            cx.error_spanned_by(
                scheme.as_ref().unwrap(),
                "unknown scheme; expected \"default\" or \"joined\"",
            );
            Scheme::Default {
                namespace: String::new(),
            }
        }
    }
}

fn field<'a>(cx: &mut Ctxt, f: &'a syn::Field, derive: Derive) -> Field<'a> {
    let ident = f.ident.as_ref().expect("named field");
    let mut out = Field {
        ident,
        ty: &f.ty,
        key: None,
        skip_hash: false,
        id: false,
        idempotency_key: false,
    };
    for attr in &f.attrs {
        let path = attr.path();
        if path.is_ident("key") {
            if derive == Derive::RandomId {
                both_derives(cx, attr);
                continue;
            }
            if out.key.is_some() {
                cx.error_spanned_by(attr, "duplicate `#[key]` attribute on one field; combine them: `#[key(nfc, lowercase)]`");
                continue;
            }
            out.key = Some(key_attr(cx, attr));
        } else if path.is_ident("id") || path.is_ident("idempotency_key") {
            if derive == Derive::NaturalKey {
                both_derives(cx, attr);
                continue;
            }
            if let Err(e) = attr.meta.require_path_only() {
                cx.syn_error(syn::Error::new(
                    e.span(),
                    format!("`#[{}]` takes no arguments", path.get_ident().unwrap()),
                ));
            }
            if path.is_ident("id") {
                out.id = true;
            } else {
                out.idempotency_key = true;
            }
        } else if path.is_ident("natural_key") {
            let r = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("skip_hash") && derive == Derive::NaturalKey {
                    out.skip_hash = true;
                } else {
                    let _ = meta.value().and_then(|v| v.parse::<syn::Expr>());
                    cx.error_spanned_by(
                        &meta.path,
                        match derive {
                            Derive::NaturalKey => {
                                "unknown `natural_key` field option; expected `skip_hash`"
                            }
                            Derive::RandomId => "RandomId takes no `natural_key` field options",
                        },
                    );
                }
                Ok(())
            });
            if let Err(e) = r {
                cx.syn_error(e);
            }
        }
    }
    if out.id && out.idempotency_key {
        cx.error_spanned_by(
            ident,
            "`#[id]` and `#[idempotency_key]` must be different fields",
        );
    }
    out
}

fn key_attr(cx: &mut Ctxt, attr: &Attribute) -> KeyAttr {
    let mut k = KeyAttr {
        timestamp: false,
        nfc: false,
        lowercase: false,
    };
    if let syn::Meta::Path(_) = attr.meta {
        return k;
    }
    // `nfc`/`lowercase` as written, to point at them if the field is the timestamp.
    let mut normalize_paths: Vec<syn::Path> = Vec::new();
    let r = attr.parse_nested_meta(|meta| {
        let flag = if meta.path.is_ident("timestamp") {
            &mut k.timestamp
        } else if meta.path.is_ident("nfc") {
            &mut k.nfc
        } else if meta.path.is_ident("lowercase") {
            &mut k.lowercase
        } else {
            let _ = meta.value().and_then(|v| v.parse::<syn::Expr>());
            cx.error_spanned_by(
                &meta.path,
                "unknown `key` option; expected `timestamp`, `nfc` or `lowercase`",
            );
            return Ok(());
        };
        if *flag {
            cx.error_spanned_by(&meta.path, "this option is given twice");
        } else if !meta.path.is_ident("timestamp") {
            normalize_paths.push(meta.path.clone());
        }
        *flag = true;
        Ok(())
    });
    if let Err(e) = r {
        cx.syn_error(e);
    }
    if k.timestamp {
        for path in &normalize_paths {
            cx.error_spanned_by(
                path,
                "`nfc`/`lowercase` normalize text keys; they do not apply to the timestamp key",
            );
        }
    }
    k
}
