//! Derive macros of [natural-key](https://docs.rs/natural-key). Use them through the
//! `natural-key` crate: `use natural_key::prelude::*;`.
//!
//! This crate only parses, validates and emits calls into `natural_key::__private`; the id
//! scheme, hashing and database logic live once, in the runtime crate.

mod ast;
mod ctxt;
mod expand;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `natural_key::NaturalKey`: a deterministic ULID from `#[key]` fields and a
/// `#[key(timestamp)]` field, a canonical content hash, and the guarded upsert.
///
/// Field attributes: `#[key]`, `#[key(timestamp)]`, `#[key(nfc)]`, `#[key(lowercase)]`,
/// `#[natural_key(skip_hash)]`. Container attributes: `#[natural_key(namespace = "...")]`,
/// `#[natural_key(scheme = "joined", separator = ":")]`.
#[proc_macro_derive(NaturalKey, attributes(key, natural_key))]
pub fn derive_natural_key(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::natural_key(&input)
        .unwrap_or_else(to_compile_errors)
        .into()
}

/// Derives `natural_key::RandomId` for event types: the id is the `#[id]` field (a `Ulid`
/// created once with the value); optionally an `#[idempotency_key]` field with its own unique
/// index.
#[proc_macro_derive(RandomId, attributes(id, idempotency_key, natural_key))]
pub fn derive_random_id(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::random_id(&input)
        .unwrap_or_else(to_compile_errors)
        .into()
}

fn to_compile_errors(errors: Vec<syn::Error>) -> proc_macro2::TokenStream {
    let errors = errors.iter().map(syn::Error::to_compile_error);
    quote::quote!(#(#errors)*)
}
