//! The model of the derive input: the container and its fields, with their attributes parsed
//! (`attr.rs`). Building it reports only what stops a model from being built (an input that
//! is not a struct with named fields, malformed attributes); `valid.rs` checks the rest.

use syn::ext::IdentExt;
use syn::{Data, DeriveInput, Fields, Generics, Ident, LitStr, Type};

use crate::attr::{self, Derive};
use crate::ctxt::Ctxt;

pub struct Container<'a> {
    pub ident: &'a Ident,
    pub generics: &'a Generics,
    pub derive: Derive,
    pub attrs: attr::Container,
    /// `None` when the input is not a struct with named fields (already reported).
    pub fields: Option<Vec<Field<'a>>>,
}

pub struct Field<'a> {
    pub ident: &'a Ident,
    pub ty: &'a Type,
    pub attrs: attr::Field<'a>,
}

/// The `scheme` option, named: absent means the default scheme.
pub enum SchemeName<'a> {
    Default,
    Joined,
    /// Not a scheme; reported by `valid.rs`.
    Unknown(&'a LitStr),
}

/// Which content hash a NaturalKey type gets (docs/id-scheme.md, "Content hash").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentVersion {
    /// The Rust fields are the stored fields: the derive's field walk, as always.
    V1,
    /// A serde attribute or a raw identifier makes the stored document differ from the Rust
    /// fields: the hash of the document's serialization.
    V2,
}

/// The id scheme to emit, with its defaults filled in.
pub enum Scheme {
    Default { namespace: String },
    Joined { separator: String },
}

impl<'a> Container<'a> {
    pub fn from_ast(cx: &mut Ctxt, input: &'a DeriveInput, derive: Derive) -> Self {
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
        let attrs = attr::Container::from_ast(cx, &input.attrs, derive);
        let fields = named.map(|n| {
            n.named
                .iter()
                .map(|f| Field {
                    ident: f.ident.as_ref().expect("named field"),
                    ty: &f.ty,
                    attrs: attr::Field::from_ast(cx, &f.attrs, derive),
                })
                .collect()
        });
        Container {
            ident: &input.ident,
            generics: &input.generics,
            derive,
            attrs,
            fields,
        }
    }

    /// The fields of a valid container.
    pub fn fields(&self) -> &[Field<'a>] {
        self.fields
            .as_deref()
            .expect("validated: a struct with named fields")
    }

    pub fn scheme_name(&self) -> SchemeName<'_> {
        match &self.attrs.scheme {
            None => SchemeName::Default,
            Some(lit) => match lit.value().as_str() {
                "default" => SchemeName::Default,
                "joined" => SchemeName::Joined,
                _ => SchemeName::Unknown(lit),
            },
        }
    }

    /// Decided from the attributes as written, not from their effect: a `rename` to the
    /// field's own name still makes the type v2. One rule that a reader of the struct can
    /// apply beats one that depends on what the renames happen to produce.
    pub fn content_version(&self) -> ContentVersion {
        let reshaped = self.attrs.serde.reshapes
            || self
                .fields()
                .iter()
                .any(|f| f.attrs.serde.reshapes || f.ident.to_string().starts_with("r#"));
        if reshaped {
            ContentVersion::V2
        } else {
            ContentVersion::V1
        }
    }

    /// The name serde stores `field` under, as serde_derive computes it: `rename`, else the
    /// container's `rename_all` rule applied to the identifier without `r#`, else that
    /// identifier. `None` for a field not stored under a name of its own (skipped, flattened).
    pub fn stored_name(&self, field: &Field) -> Option<String> {
        if field.attrs.serde.not_stored.is_some() {
            return None;
        }
        self.serde_name(field)
    }

    /// The name serde reads and writes `field` under, stored or not (a `skip_serializing`
    /// field is still read under it). `None` for a flattened field.
    pub fn serde_name(&self, field: &Field) -> Option<String> {
        let serde = &field.attrs.serde;
        if serde.flatten.is_some() {
            return None;
        }
        if let Some(lit) = &serde.rename {
            return Some(lit.value());
        }
        let ident = field.ident.unraw().to_string();
        Some(match self.attrs.serde.rename_all {
            Some(rule) => rule.apply_to_field(&ident),
            None => ident,
        })
    }

    /// The scheme of a valid container.
    pub fn scheme(&self) -> Scheme {
        match self.scheme_name() {
            SchemeName::Joined => Scheme::Joined {
                separator: self
                    .attrs
                    .separator
                    .as_ref()
                    .map_or_else(|| ":".to_string(), LitStr::value),
            },
            SchemeName::Default | SchemeName::Unknown(_) => Scheme::Default {
                namespace: self
                    .attrs
                    .namespace
                    .as_ref()
                    .map(LitStr::value)
                    .unwrap_or_default(),
            },
        }
    }
}

impl Field<'_> {
    /// `#[key(timestamp)]`: the ULID's time prefix.
    pub fn is_timestamp(&self) -> bool {
        self.attrs.key.as_ref().is_some_and(|k| k.timestamp)
    }

    /// A `#[key]` other than the timestamp: part of the identity hash.
    pub fn identity_key(&self) -> Option<&attr::Key> {
        self.attrs.key.as_ref().filter(|k| !k.timestamp)
    }
}
