//! Parsing the attributes into plain data: `#[natural_key(...)]` on the container, `#[key]`,
//! `#[key(timestamp | nfc | lowercase)]`, `#[natural_key(skip_hash)]`, `#[id]` and
//! `#[idempotency_key]` on fields. Only syntax is checked here (unknown or repeated options,
//! values of the wrong form); the rules that relate attributes live in `valid.rs`.

use syn::meta::ParseNestedMeta;
use syn::{Attribute, LitStr, Path};

use crate::ctxt::Ctxt;

/// The derive being expanded: it decides which attributes are its own.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Derive {
    NaturalKey,
    RandomId,
}

impl Derive {
    pub fn name(self) -> &'static str {
        match self {
            Derive::NaturalKey => "NaturalKey",
            Derive::RandomId => "RandomId",
        }
    }
}

/// `#[natural_key(...)]` on the type, as written.
#[derive(Default)]
pub struct Container {
    pub namespace: Option<LitStr>,
    pub scheme: Option<LitStr>,
    pub separator: Option<LitStr>,
    /// `crate = "..."`: the path under which natural-key is reachable.
    pub krate: Option<Path>,
}

impl Container {
    pub fn from_ast(cx: &mut Ctxt, attrs: &[Attribute], derive: Derive) -> Self {
        let mut out = Container::default();
        for attr in attrs.iter().filter(|a| a.path().is_ident("natural_key")) {
            let r = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("crate") {
                    let path = crate_path(cx, &meta)?;
                    if out.krate.is_some() {
                        cx.error_spanned_by(
                            &meta.path,
                            "`crate` is given twice; keep one `crate = \"...\"`",
                        );
                    }
                    out.krate = path.or(out.krate.take());
                    return Ok(());
                }
                let slot = if derive == Derive::RandomId {
                    return unknown(
                        cx,
                        &meta,
                        "RandomId's only `natural_key` container option is `crate = \"...\"`",
                    );
                } else if meta.path.is_ident("namespace") {
                    &mut out.namespace
                } else if meta.path.is_ident("scheme") {
                    &mut out.scheme
                } else if meta.path.is_ident("separator") {
                    &mut out.separator
                } else {
                    return unknown(
                        cx,
                        &meta,
                        "unknown `natural_key` option; expected `namespace = \"...\"`, \
                         `scheme = \"default\" | \"joined\"`, `separator = \"...\"` or \
                         `crate = \"...\"`",
                    );
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
        out
    }
}

/// The value of `crate = "..."`. A string that is not a path is reported and gives `None`;
/// a value that is not a string ends the attribute, as for the other options.
fn crate_path(cx: &mut Ctxt, meta: &ParseNestedMeta) -> syn::Result<Option<Path>> {
    const HELP: &str = "`crate` takes the path under which natural-key is re-exported, \
                        as a string: `crate = \"my_crate::natural_key\"`";
    let lit: LitStr = meta
        .value()?
        .parse()
        .map_err(|e| syn::Error::new(e.span(), HELP))?;
    match lit.parse::<Path>() {
        Ok(path) => Ok(Some(path)),
        Err(_) => {
            cx.error_spanned_by(&lit, HELP);
            Ok(None)
        }
    }
}

/// Reports an unknown option, skipping its value (if any) so that parsing goes on.
fn unknown(cx: &mut Ctxt, meta: &ParseNestedMeta, msg: &str) -> syn::Result<()> {
    let _ = meta.value().and_then(|v| v.parse::<syn::Expr>());
    cx.error_spanned_by(&meta.path, msg);
    Ok(())
}

/// `#[key]` or `#[key(...)]` on a field.
pub struct Key {
    pub timestamp: bool,
    pub nfc: bool,
    pub lowercase: bool,
    /// `nfc`/`lowercase` as written, to point at them if the field is the timestamp.
    pub normalize_paths: Vec<Path>,
}

/// The attributes of one field, as written.
pub struct Field<'a> {
    pub key: Option<Key>,
    pub skip_hash: bool,
    pub id: bool,
    pub idempotency_key: bool,
    /// Attributes of the other derive (`#[key]` under RandomId, `#[id]` and
    /// `#[idempotency_key]` under NaturalKey), not parsed.
    pub other_derive: Vec<&'a Attribute>,
    /// The name serde serializes the field under, where `#[serde(rename ...)]` gives one.
    pub serde_rename: Option<LitStr>,
}

impl<'a> Field<'a> {
    pub fn from_ast(cx: &mut Ctxt, attrs: &'a [Attribute], derive: Derive) -> Self {
        let mut out = Field {
            key: None,
            skip_hash: false,
            id: false,
            idempotency_key: false,
            other_derive: Vec::new(),
            serde_rename: None,
        };
        for attr in attrs {
            let path = attr.path();
            if path.is_ident("key") {
                if derive == Derive::RandomId {
                    out.other_derive.push(attr);
                    continue;
                }
                if out.key.is_some() {
                    cx.error_spanned_by(attr, "duplicate `#[key]` attribute on one field; combine them: `#[key(nfc, lowercase)]`");
                    continue;
                }
                out.key = Some(key(cx, attr));
            } else if path.is_ident("id") || path.is_ident("idempotency_key") {
                if derive == Derive::NaturalKey {
                    out.other_derive.push(attr);
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
            } else if path.is_ident("serde") {
                out.serde_rename = serde_rename(attr).or(out.serde_rename.take());
            } else if path.is_ident("natural_key") {
                let r = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("skip_hash") && derive == Derive::NaturalKey {
                        out.skip_hash = true;
                        return Ok(());
                    }
                    unknown(
                        cx,
                        &meta,
                        match derive {
                            Derive::NaturalKey => {
                                "unknown `natural_key` field option; expected `skip_hash`"
                            }
                            Derive::RandomId => "RandomId takes no `natural_key` field options",
                        },
                    )
                });
                if let Err(e) = r {
                    cx.syn_error(e);
                }
            }
        }
        out
    }
}

fn key(cx: &mut Ctxt, attr: &Attribute) -> Key {
    let mut k = Key {
        timestamp: false,
        nfc: false,
        lowercase: false,
        normalize_paths: Vec::new(),
    };
    if let syn::Meta::Path(_) = attr.meta {
        return k;
    }
    let r = attr.parse_nested_meta(|meta| {
        let flag = if meta.path.is_ident("timestamp") {
            &mut k.timestamp
        } else if meta.path.is_ident("nfc") {
            &mut k.nfc
        } else if meta.path.is_ident("lowercase") {
            &mut k.lowercase
        } else {
            return unknown(
                cx,
                &meta,
                "unknown `key` option; expected `timestamp`, `nfc` or `lowercase`",
            );
        };
        if *flag {
            cx.error_spanned_by(&meta.path, "this option is given twice");
        } else if !meta.path.is_ident("timestamp") {
            k.normalize_paths.push(meta.path.clone());
        }
        *flag = true;
        Ok(())
    });
    if let Err(e) = r {
        cx.syn_error(e);
    }
    k
}

/// The serialized name of `#[serde(rename = "...")]` or `#[serde(rename(serialize = "..."))]`.
/// Anything else in a serde attribute is serde's to parse and report: a malformed one gives
/// `None` here, never an error of ours.
fn serde_rename(attr: &Attribute) -> Option<LitStr> {
    let mut rename = None;
    let _ = attr.parse_nested_meta(|meta| {
        if !meta.path.is_ident("rename") {
            return skip(&meta);
        }
        if meta.input.peek(syn::Token![=]) {
            rename = Some(meta.value()?.parse()?);
            return Ok(());
        }
        meta.parse_nested_meta(|inner| {
            if inner.path.is_ident("serialize") {
                rename = Some(inner.value()?.parse()?);
                Ok(())
            } else {
                skip(&inner)
            }
        })
    });
    rename
}

/// Consumes the value or the parenthesized list of an option we do not read.
fn skip(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<proc_macro2::Group>()?;
    }
    Ok(())
}
