//! Parsing the attributes into plain data: `#[natural_key(...)]` on the container, `#[key]`,
//! `#[key(timestamp | nfc | lowercase)]`, `#[natural_key(skip_hash | relative | version)]`,
//! `#[id]` and `#[idempotency_key]` on fields, and what `#[serde(...)]` says about the stored form. Only
//! syntax is checked here (unknown or repeated options, values of the wrong form); the rules
//! that relate attributes live in `valid.rs`.

use syn::meta::ParseNestedMeta;
use syn::{Attribute, LitStr, Path};

use crate::case::RenameRule;
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
    /// `changed_at = "..."`: the stored field the engine sets to its clock when a write changes
    /// the content.
    pub changed_at: Option<LitStr>,
    /// `crate = "..."`: the path under which natural-key is reachable.
    pub krate: Option<Path>,
    pub serde: SerdeContainer,
}

/// What the container's `#[serde(...)]` says about how the document is stored. Only the
/// serialize side is read: deserialization-only options do not change what is stored.
#[derive(Default)]
pub struct SerdeContainer {
    /// `rename_all` (for serialization), when it names a rule serde knows.
    pub rename_all: Option<RenameRule>,
    /// `transparent`, `into = ".."` or `remote = ".."`: the stored document is not this
    /// struct's fields under their names.
    pub foreign: Option<Path>,
    /// An option that makes the stored document differ from the Rust fields (`rename_all`,
    /// `rename_all_fields`, `tag` and the three above): the type is hashed v2.
    pub reshapes: bool,
}

impl SerdeContainer {
    fn from_ast(attrs: &[Attribute]) -> Self {
        let mut out = SerdeContainer::default();
        for_serde_options(attrs, |meta| {
            let path = &meta.path;
            if path.is_ident("rename_all") || path.is_ident("rename_all_fields") {
                if let Some(rule) = serialize_side(meta)? {
                    out.reshapes = true;
                    if path.is_ident("rename_all") {
                        out.rename_all = RenameRule::from_name(&rule.value());
                    }
                }
            } else if ["transparent", "into", "remote"]
                .iter()
                .any(|n| path.is_ident(n))
            {
                out.reshapes = true;
                out.foreign = Some(path.clone());
                skip(meta)?;
            } else if path.is_ident("tag") {
                // On a struct, serde writes the tag as a field of its own, first.
                out.reshapes = true;
                skip(meta)?;
            } else {
                skip(meta)?;
            }
            Ok(())
        });
        out
    }
}

impl Container {
    pub fn from_ast(cx: &mut Ctxt, attrs: &[Attribute], derive: Derive) -> Self {
        let mut out = Container {
            serde: SerdeContainer::from_ast(attrs),
            ..Container::default()
        };
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
                let (slot, usage) = if derive == Derive::RandomId {
                    return unknown(
                        cx,
                        &meta,
                        "RandomId's only `natural_key` container option is `crate = \"...\"`",
                    );
                } else if meta.path.is_ident("namespace") {
                    (&mut out.namespace, "`namespace = \"blog.post\"`")
                } else if meta.path.is_ident("scheme") {
                    (
                        &mut out.scheme,
                        "`scheme = \"default\"` or `scheme = \"joined\"`",
                    )
                } else if meta.path.is_ident("separator") {
                    (&mut out.separator, "`separator = \":\"`")
                } else if meta.path.is_ident("changed_at") {
                    (&mut out.changed_at, "`changed_at = \"updated_at\"`")
                } else {
                    return unknown(
                        cx,
                        &meta,
                        "unknown `natural_key` option; expected `namespace = \"...\"`, \
                         `scheme = \"default\" | \"joined\"`, `separator = \"...\"`, \
                         `changed_at = \"...\"` or `crate = \"...\"`",
                    );
                };
                let lit = string_value(cx, &meta, usage)?;
                if slot.is_some() {
                    cx.error_spanned_by(&meta.path, "this option is given twice");
                }
                *slot = lit.or(slot.take());
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

/// Reports an unknown option, skipping its value or arguments (if any) so that parsing goes on.
fn unknown(cx: &mut Ctxt, meta: &ParseNestedMeta, msg: &str) -> syn::Result<()> {
    let _ = skip(meta);
    cx.error_spanned_by(&meta.path, msg);
    Ok(())
}

/// The string value of `option = "..."`. A missing or non-string value is reported (pointing at
/// it, with `usage`) and gives `None`, and parsing goes on with the next option.
fn string_value(cx: &mut Ctxt, meta: &ParseNestedMeta, usage: &str) -> syn::Result<Option<LitStr>> {
    let name = path_name(&meta.path);
    if !meta.input.peek(syn::Token![=]) {
        skip(meta)?;
        cx.error_spanned_by(&meta.path, format!("`{name}` takes a string: {usage}"));
        return Ok(None);
    }
    match meta.value()?.parse::<syn::Expr>()? {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => Ok(Some(lit)),
        other => {
            cx.error_spanned_by(other, format!("`{name}` takes a string: {usage}"));
            Ok(None)
        }
    }
}

/// A flag (`timestamp`, `skip_hash`, ...) written with a value or arguments: reported at the
/// flag, the rest skipped, and parsing goes on.
fn no_value(cx: &mut Ctxt, meta: &ParseNestedMeta, usage: &str) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) || meta.input.peek(syn::token::Paren) {
        skip(meta)?;
        cx.error_spanned_by(
            &meta.path,
            format!(
                "`{}` is a flag and takes no value or arguments; write {usage}",
                path_name(&meta.path)
            ),
        );
    }
    Ok(())
}

fn path_name(path: &Path) -> String {
    quote::ToTokens::to_token_stream(path).to_string()
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
    /// `#[natural_key(skip_hash)]`, as written; `#[natural_key(relative)]` implies it.
    pub skip_hash: Option<Path>,
    /// `#[natural_key(relative)]`, as written.
    pub relative: Option<Path>,
    /// `#[natural_key(version)]`, as written.
    pub version: Option<Path>,
    pub id: bool,
    pub idempotency_key: bool,
    /// Attributes of the other derive (`#[key]` under RandomId, `#[id]` and
    /// `#[idempotency_key]` under NaturalKey), not parsed.
    pub other_derive: Vec<&'a Attribute>,
    pub serde: SerdeField,
}

/// What a field's `#[serde(...)]` says about how it is stored (serialize side only).
#[derive(Default)]
pub struct SerdeField {
    /// The name serde serializes the field under, where `rename` gives one.
    pub rename: Option<LitStr>,
    /// `skip` or `skip_serializing`: never stored.
    pub not_stored: Option<Path>,
    /// `skip_serializing_if`: stored or not, depending on the value.
    pub stored_if: Option<Path>,
    /// `flatten`: stored as the entries of its value, not under a name.
    pub flatten: Option<Path>,
    /// An option that makes the stored field differ from the Rust field (`rename`, `skip`,
    /// `skip_serializing`, `skip_serializing_if`, `serialize_with`, `with`, `flatten`,
    /// `getter`): the type is hashed v2.
    pub reshapes: bool,
    /// `serialize_with`, `with` or `getter`: stored as code of the user's writes it.
    pub custom: bool,
}

impl SerdeField {
    fn from_ast(attrs: &[Attribute]) -> Self {
        let mut out = SerdeField::default();
        for_serde_options(attrs, |meta| {
            let path = &meta.path;
            if path.is_ident("rename") {
                if let Some(name) = serialize_side(meta)? {
                    out.reshapes = true;
                    out.rename = Some(name);
                }
            } else if path.is_ident("skip") || path.is_ident("skip_serializing") {
                out.reshapes = true;
                out.not_stored = Some(path.clone());
            } else if path.is_ident("flatten") {
                out.reshapes = true;
                out.flatten = Some(path.clone());
            } else if path.is_ident("skip_serializing_if") {
                out.reshapes = true;
                out.stored_if = Some(path.clone());
                skip(meta)?;
            } else if ["serialize_with", "with", "getter"]
                .iter()
                .any(|n| path.is_ident(n))
            {
                out.reshapes = true;
                out.custom = true;
                skip(meta)?;
            } else {
                skip(meta)?;
            }
            Ok(())
        });
        out
    }
}

impl<'a> Field<'a> {
    pub fn from_ast(cx: &mut Ctxt, attrs: &'a [Attribute], derive: Derive) -> Self {
        let mut out = Field {
            key: None,
            skip_hash: None,
            relative: None,
            version: None,
            id: false,
            idempotency_key: false,
            other_derive: Vec::new(),
            serde: SerdeField::from_ast(attrs),
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
            } else if path.is_ident("natural_key") {
                let r = attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("skip_hash") {
                        no_value(cx, &meta, "`#[natural_key(skip_hash)]`")?;
                        out.skip_hash = Some(meta.path.clone());
                        return Ok(());
                    }
                    if meta.path.is_ident("relative") && derive == Derive::NaturalKey {
                        no_value(cx, &meta, "`#[natural_key(relative)]`")?;
                        out.relative = Some(meta.path.clone());
                        // Changed by relative updates, not by the content: never hashed.
                        out.skip_hash.get_or_insert_with(|| meta.path.clone());
                        return Ok(());
                    }
                    if meta.path.is_ident("version") && derive == Derive::NaturalKey {
                        no_value(cx, &meta, "`#[natural_key(version)]`")?;
                        out.version = Some(meta.path.clone());
                        return Ok(());
                    }
                    unknown(
                        cx,
                        &meta,
                        match derive {
                            Derive::NaturalKey => {
                                "unknown `natural_key` field option; expected `skip_hash`, \
                                 `relative` or `version`"
                            }
                            Derive::RandomId => {
                                "unknown `natural_key` field option; expected `skip_hash`"
                            }
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
    const FORMS: &str = "`#[key]`, `#[key(timestamp)]` or `#[key(nfc, lowercase)]`";
    match &attr.meta {
        syn::Meta::Path(_) => return k,
        syn::Meta::NameValue(nv) => {
            cx.error_spanned_by(nv, format!("`#[key]` takes no value; write {FORMS}"));
            return k;
        }
        syn::Meta::List(_) => {}
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
        no_value(cx, &meta, &format!("`#[key({})]`", path_name(&meta.path)))?;
        if *flag {
            cx.error_spanned_by(&meta.path, "this option is given twice");
        } else if !meta.path.is_ident("timestamp") {
            k.normalize_paths.push(meta.path.clone());
        }
        *flag = true;
        Ok(())
    });
    if let Err(e) = r {
        cx.syn_error(syn::Error::new(
            e.span(),
            format!("{e}; `#[key]` takes the flags `timestamp`, `nfc` and `lowercase`: {FORMS}"),
        ));
    }
    k
}

/// Runs `f` on every option of every `#[serde(...)]` attribute. A malformed serde attribute
/// is serde's to report: its options from the first one we cannot read are ignored, never an
/// error of ours.
fn for_serde_options(attrs: &[Attribute], mut f: impl FnMut(&ParseNestedMeta) -> syn::Result<()>) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| f(&meta));
    }
}

/// The serialize side of an option serde splits in two: `rename = "x"` (both sides) or
/// `rename(serialize = "x", deserialize = "y")`; `None` when only the deserialize side is given.
fn serialize_side(meta: &ParseNestedMeta) -> syn::Result<Option<LitStr>> {
    if meta.input.peek(syn::Token![=]) {
        return Ok(Some(meta.value()?.parse()?));
    }
    let mut out = None;
    if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| {
            if inner.path.is_ident("serialize") {
                out = Some(inner.value()?.parse()?);
                Ok(())
            } else {
                skip(&inner)
            }
        })?;
    }
    Ok(out)
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
