//! Code generation: implementations that call into `::natural_key::__private` (or the
//! `crate = "..."` path given instead of `::natural_key`), and `Upsertable`, which names the
//! public builders.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;

use crate::ast::{Container, ContentVersion, Scheme};

/// The implementations of a valid NaturalKey container.
pub fn natural_key(input: &Container) -> TokenStream {
    let ident = input.ident;
    let (impl_g, ty_g, where_clause) = input.generics.split_for_impl();
    let krate = krate(input);
    let p = quote!(#krate::__private);

    let scheme = match input.scheme() {
        Scheme::Default { namespace } => {
            quote!(#krate::Scheme::Default { namespace: #namespace })
        }
        Scheme::Joined { separator } => {
            quote!(#krate::Scheme::Joined { separator: #separator })
        }
    };

    let key_parts = key_parts(input, &p);
    let shard_key_fields = shard_key_fields(input);
    let (ts_name, ts_millis) = timestamp_millis(input, &krate);

    let content = content_hash(input, &p, &krate);
    let upsertable = upsertable(
        input,
        &krate,
        quote!(upsert),
        quote!(Upsert),
        quote!(UpsertOutcome),
    );

    let relative = relative_fields(input);
    let version = version(input, &p, &krate);
    let changed_at = input.attrs.changed_at.as_ref().map(|name| {
        quote! {
            fn __changed_at_field() -> #p::Option<&'static str> {
                #p::Option::Some(#name)
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #impl_g #p::WriteKey for #ident #ty_g #where_clause {
            const SCHEME: #krate::Scheme = #scheme;
            fn write_key(
                &self,
                __sink: &mut #p::KeySink,
            ) -> #p::Result<(), #krate::KeyError> {
                #(#key_parts)*
                #p::Result::Ok(())
            }
        }

        #[automatically_derived]
        impl #impl_g #krate::NaturalKey for #ident #ty_g #where_clause {
            fn __timestamp_ms(&self) -> #p::Result<u64, #krate::KeyError> {
                #p::check_timestamp(#ts_name, #ts_millis)
            }
            #relative
            #version
            #changed_at
            #content
        }

        #[automatically_derived]
        impl #impl_g #p::Indexes for #ident #ty_g #where_clause {
            fn index_models() -> #p::Vec<#p::IndexModel> {
                ::std::vec![#p::identity_index()]
            }
            fn __shard_key_fields() -> &'static [&'static str] {
                &[#(#shard_key_fields),*]
            }
        }

        #upsertable
    }
}

/// One `KeySink::part` call per identity key field, in declaration order.
fn key_parts(input: &Container, p: &TokenStream) -> Vec<TokenStream> {
    let parts = input.fields().iter().filter_map(|f| {
        let k = f.identity_key()?;
        let (member, ty) = (f.ident, f.ty);
        let name = member.to_string();
        let (lowercase, nfc) = (k.lowercase, k.nfc);
        // The field type as the explicit type argument, so "cannot be a `#[key]` field" points
        // at the whole type (a `quote_spanned!` span is only its first token on stable).
        Some(quote_spanned! {ty.span()=>
            #p::KeySink::part::<#ty>(
                __sink,
                #name,
                &self.#member,
                #p::Normalize { lowercase: #lowercase, nfc: #nfc },
            )?;
        })
    });
    parts.collect()
}

/// The stored names of the identity key fields whose stored value the identity determines, which
/// a collection may be sharded on (a tenant id): no normalization (`lowercase` and `nfc` map
/// several stored values to one key), stored as serde stores the field by itself (not skipped,
/// flattened, conditional or written by custom code), under the default scheme (the joined one
/// makes key values ambiguous across its separator).
fn shard_key_fields(input: &Container) -> Vec<String> {
    if !matches!(input.scheme(), Scheme::Default { .. }) {
        return Vec::new();
    }
    input
        .fields()
        .iter()
        .filter(|f| {
            let serde = &f.attrs.serde;
            f.identity_key()
                .is_some_and(|k| !k.lowercase && !k.nfc && serde.stored_if.is_none())
                && !serde.custom
        })
        .filter_map(|f| input.stored_name(f))
        .collect()
}

/// The timestamp key's name, and the expression of its Unix milliseconds (spanned at its
/// type, so a type that is no timestamp is reported there).
fn timestamp_millis(input: &Container, krate: &TokenStream) -> (String, TokenStream) {
    let ts = input
        .fields()
        .iter()
        .find(|f| f.is_timestamp())
        .expect("validated: one timestamp field");
    let (ts_member, ts_ty) = (ts.ident, ts.ty);
    let ts_krate = respan(krate.clone(), ts_ty.span());
    let millis = quote_spanned! {ts_ty.span()=>
        <#ts_ty as #ts_krate::KeyTimestamp>::unix_millis(&self.#ts_member)
    };
    (ts_member.to_string(), millis)
}

/// `__version`, where a field is `#[natural_key(version)]`: its `KeyVersion` value, range-checked
/// under its Rust name. The trait call is spanned at the field's type, so a type that is no
/// version is reported there, as for the timestamp.
fn version(input: &Container, p: &TokenStream, krate: &TokenStream) -> Option<TokenStream> {
    let field = input.fields().iter().find(|f| f.attrs.version.is_some())?;
    let (member, ty) = (field.ident, field.ty);
    let name = member.to_string();
    let ty_krate = respan(krate.clone(), ty.span());
    let value = quote_spanned! {ty.span()=>
        <#ty as #ty_krate::KeyVersion>::version(&self.#member)
    };
    Some(quote! {
        fn __version(&self) -> #p::Result<#p::Option<i64>, #krate::KeyError> {
            #p::Result::Ok(#p::Option::Some(#p::check_version(#name, #value)?))
        }
    })
}

/// The content hash methods of a NaturalKey impl. Every type has the v1 walk (its hashed
/// fields by Rust name); a v2 type hashes its serialization instead and keeps the walk for
/// the hashes stored before the upgrade.
fn content_hash(input: &Container, p: &TokenStream, krate: &TokenStream) -> TokenStream {
    // A field that reads the engine's changed-at stamp back is the engine's, not content.
    let changed_at = input.attrs.changed_at.as_ref().map(|l| l.value());
    let stamp = |f: &&crate::ast::Field| changed_at.is_some() && input.serde_name(f) == changed_at;
    let hashed = input
        .fields()
        .iter()
        .filter(|f| f.attrs.skip_hash.is_none())
        .filter(|f| !stamp(f));
    let walk = |f: &crate::ast::Field| {
        let member = f.ident;
        // v1 hashed the identifier as the derive sees it, `r#` included.
        let name = member.to_string();
        // The name's encoding, built at compile time: `n` bytes, 9 of head.
        let n = proc_macro2::Literal::usize_unsuffixed(9 + name.len());
        let head = quote!(&const { #p::name_head::<#n>(#name) });
        match input.content_version() {
            ContentVersion::V1 => quote!(__hasher.field::<Self, _, #n>(#head, &self.#member)?;),
            ContentVersion::V2 => {
                quote!((&#p::V1Field(&self.#member)).v1_field::<Self, #n>(__hasher, #head)?;)
            }
        }
    };
    let walk = hashed.map(walk);
    let probes = (input.content_version() == ContentVersion::V2).then(|| {
        quote! {
            #[allow(unused_imports)]
            use #p::{V1Hashable as _, V1Unhashable as _};
        }
    });
    let write_content = quote! {
        fn __write_content(
            &self,
            __hasher: &mut #p::ContentHasher,
        ) -> #p::Result<(), #krate::Error> {
            #probes
            #(#walk)*
            #p::Result::Ok(())
        }
    };
    match input.content_version() {
        ContentVersion::V1 => write_content,
        ContentVersion::V2 => {
            let skip = input
                .fields()
                .iter()
                .filter(|f| f.attrs.skip_hash.is_some())
                .map(|f| {
                    input
                        .stored_name(f)
                        .expect("validated: a stored skip_hash field")
                });
            quote! {
                #write_content
                fn content_hash(&self) -> #p::Result<#krate::ContentHash, #krate::Error> {
                    #p::content_hash_v2(self, &[#(#skip),*])
                }
                fn __content_hash_v1(&self) -> #p::Option<#krate::ContentHash> {
                    #p::content_hash_v1(self)
                }
            }
        }
    }
}

/// The stored names of the `#[natural_key(relative)]` fields, where there are any.
fn relative_fields(input: &Container) -> Option<TokenStream> {
    let names: Vec<String> = input
        .fields()
        .iter()
        .filter(|f| f.attrs.relative.is_some())
        .map(|f| {
            input
                .stored_name(f)
                .expect("validated: a stored relative field")
        })
        .collect();
    (!names.is_empty()).then(|| {
        quote! {
            fn __relative_fields() -> &'static [&'static str] {
                &[#(#names),*]
            }
        }
    })
}

/// The implementations of a valid RandomId container.
pub fn random_id(input: &Container) -> TokenStream {
    let ident = input.ident;
    let (impl_g, ty_g, where_clause) = input.generics.split_for_impl();
    let krate = krate(input);
    let p = quote!(#krate::__private);

    let id = input
        .fields()
        .iter()
        .find(|f| f.attrs.id)
        .expect("validated: one #[id] field");
    let (id_member, id_ty) = (id.ident, id.ty);
    // Spanned on the field type: a non-Ulid `#[id]` field is reported there. The argument
    // `&self.<member>` runs from the type's first token (`quote_spanned!`) to the member ident,
    // respanned to the type's last token, so the error covers the whole type on stable too.
    let id_last = id_ty
        .to_token_stream()
        .into_iter()
        .last()
        .map_or(id_ty.span(), |t| t.span());
    let mut id_member = id_member.clone();
    id_member.set_span(id_last);
    let id_expr = quote_spanned! {id_ty.span()=>
        #p::ulid_of(&self.#id_member)
    };

    let (idem_fn, indexes) = match input.fields().iter().find(|f| f.attrs.idempotency_key) {
        Some(f) => {
            let (member, ty) = (f.ident, f.ty);
            let name = member.to_string();
            let text =
                quote_spanned! {ty.span()=> #p::idempotency_text::<#ty>(#name, &self.#member) };
            (
                quote! {
                    fn __idempotency_key(
                        &self,
                    ) -> #p::Result<#p::Option<#p::String>, #krate::KeyError> {
                        #text
                    }
                },
                quote!(::std::vec![#p::idempotency_index()]),
            )
        }
        None => (quote!(), quote!(#p::Vec::new())),
    };
    let upsertable = upsertable(
        input,
        &krate,
        quote!(insert),
        quote!(Insert),
        quote!(InsertOutcome),
    );
    let payload_skip = payload_skip(input);

    quote! {
        #[automatically_derived]
        impl #impl_g #krate::RandomId for #ident #ty_g #where_clause {
            fn id(&self) -> #krate::Ulid {
                #id_expr
            }
            #idem_fn
            fn __payload_skip() -> &'static [&'static str] {
                &[#(#payload_skip),*]
            }
        }

        #[automatically_derived]
        impl #impl_g #p::Indexes for #ident #ty_g #where_clause {
            fn index_models() -> #p::Vec<#p::IndexModel> {
                #indexes
            }
        }

        #upsertable
    }
}

/// The stored names of an event's fields that are not its payload: the `#[id]` and
/// `#[idempotency_key]` fields and the `skip_hash` ones. Where the stored document is not this
/// struct's fields under their names (`transparent`, `into`, `remote`), the derive cannot know
/// them, and names none (`skip_hash` is refused there).
fn payload_skip(input: &Container) -> Vec<String> {
    if input.attrs.serde.foreign.is_some() {
        return Vec::new();
    }
    input
        .fields()
        .iter()
        .filter(|f| f.attrs.id || f.attrs.idempotency_key || f.attrs.skip_hash.is_some())
        .filter_map(|f| input.stored_name(f))
        .collect()
}

/// The `Upsertable` impl, `doc.upsert(&coll)`: the handle's `method` (`upsert` or `insert`),
/// which returns the runtime's `builder` and `outcome`. The generics are the type's, as in the
/// other impls, with one more bound: the type is `Send + Sync` (`Upsertable` requires it, as a
/// `Collection` holds only such documents). Bounded so, the impl exists where it can be used,
/// and the derive still compiles for a type that is not `Send + Sync` (whose `id()` and
/// content hash work as before). The bound is higher-ranked over an unused lifetime so that,
/// on a type without generics, the compiler checks it where the impl is used rather than
/// rejecting the impl (a plain bound on a concrete type that does not hold is an error).
fn upsertable(
    input: &Container,
    krate: &TokenStream,
    method: TokenStream,
    builder: TokenStream,
    outcome: TokenStream,
) -> TokenStream {
    let ident = input.ident;
    let (_, ty_g, _) = input.generics.split_for_impl();
    let mut generics = input.generics.clone();
    generics
        .make_where_clause()
        .predicates
        .push(syn::parse_quote! {
            for<'__nk_any> #ident #ty_g: ::core::marker::Send + ::core::marker::Sync
        });
    let (impl_g, _, where_clause) = generics.split_for_impl();
    // `'__nk`, not `'a`: the type's own lifetimes are in scope and must not be shadowed.
    quote! {
        #[automatically_derived]
        impl #impl_g #krate::Upsertable for #ident #ty_g #where_clause {
            type Outcome = #krate::#outcome;
            type Upsert<'__nk> = #krate::#builder<'__nk, Self> where Self: '__nk;
            fn upsert<'__nk>(
                &'__nk self,
                coll: &'__nk #krate::Collection<Self>,
            ) -> Self::Upsert<'__nk> {
                #krate::Collection::<Self>::#method(coll, self)
            }
        }
    }
}

/// The path of natural-key in the emitted code: `crate = "..."`, else `::natural_key`.
fn krate(input: &Container) -> TokenStream {
    match &input.attrs.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::natural_key),
    }
}

/// `tokens` with every span set to `span`, as if written inside `quote_spanned!(span=> ...)`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = group.into();
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
