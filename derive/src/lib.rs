//! Derive macros of [natural-key](https://docs.rs/natural-key). Use them through the
//! `natural-key` crate: `use natural_key::prelude::*;`.
//!
//! This crate only parses, validates and emits calls into `natural_key::__private`; the id
//! scheme, hashing and database logic live once, in the runtime crate.

mod ast;
mod attr;
mod case;
mod ctxt;
mod expand;
mod valid;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

use crate::attr::Derive;

/// Derives `natural_key::NaturalKey`: a deterministic ULID from `#[key]` fields and a
/// `#[key(timestamp)]` field, a canonical content hash, and the guarded upsert —
/// `natural_key::Upsertable` too, so `doc.upsert(&coll)` is `coll.upsert(&doc)`.
///
/// Field attributes: `#[key]`, `#[key(timestamp)]`, `#[key(nfc)]`, `#[key(lowercase)]`,
/// `#[natural_key(skip_hash)]`, `#[natural_key(relative)]`, `#[natural_key(version)]`.
/// Container attributes: `#[natural_key(namespace = "...")]`,
/// `#[natural_key(scheme = "joined", separator = ":")]`,
/// `#[natural_key(changed_at = "...")]`, `#[natural_key(crate = "...")]`.
///
/// The content hash covers what serde stores: a type whose `#[serde(...)]` attributes (or raw
/// identifiers) make the stored document differ from its Rust fields hashes its serialization
/// (content hash v2), and `skip_hash` leaves a field out under the name serde stores it with
/// (docs/id-scheme.md, "Content hash").
///
/// `#[natural_key(version)]` marks the document's version (an integer, or an instant of any
/// type `#[key(timestamp)]` takes, compared in Unix milliseconds), for writes that arrive out of
/// order: a write whose version is lower than the stored one is stale and changes nothing, so an
/// older version never overwrites a newer one, and a delete leaves a tombstone with its version,
/// so a stale write does not bring the document back. The same version with other content is
/// `Error::VersionConflict`. The version is not part of the id or the identity; it is content
/// (hashed) unless also `skip_hash`. One field at most, not a key nor `relative`, and stored by
/// serde (no `skip`, `skip_serializing` or `skip_serializing_if`).
///
/// `changed_at = "updated_at"` names a top-level field the engine sets to its own clock
/// (`$currentDate`) when a write changes the stored content, and only then. It must not be a
/// name the struct stores: to read the time back, give the field
/// `#[serde(default, skip_serializing)]`.
///
/// ```
/// use natural_key::prelude::*;
///
/// #[derive(NaturalKey, Serialize, Deserialize)]
/// #[natural_key(changed_at = "changed_at")]
/// struct Price {
///     #[key] sku: String,
///     #[key(timestamp)] listed_at: i64,
///     cents: i64,
///     #[natural_key(version)] revision: u64,
///     #[serde(default, skip_serializing)] changed_at: Option<natural_key::bson::DateTime>,
/// }
/// ```
///
/// `crate = "path"` is for a crate that uses natural-key under another name (renamed in
/// `Cargo.toml`, or re-exported): the generated code names `path` instead of `::natural_key`,
/// as serde's `#[serde(crate = "...")]` does for serde. RandomId takes it too.
///
/// ```
/// // `my_crate` re-exports natural-key; its users need not depend on natural-key themselves.
/// mod my_crate {
///     pub use natural_key as nk;
/// }
/// use my_crate::nk::prelude::*;
///
/// #[derive(NaturalKey, Serialize)]
/// #[natural_key(crate = "my_crate::nk")]
/// #[serde(crate = "my_crate::nk::serde")]
/// struct Post {
///     #[key] slug: String,
///     #[key(timestamp)] published_at: i64,
/// }
///
/// let post = Post { slug: "hello-world".into(), published_at: 1_700_000_000_000 };
/// assert_eq!(post.id()?.timestamp_ms(), 1_700_000_000_000);
/// # Ok::<(), my_crate::nk::KeyError>(())
/// ```
#[proc_macro_derive(NaturalKey, attributes(key, natural_key))]
pub fn derive_natural_key(input: TokenStream) -> TokenStream {
    derive(input, Derive::NaturalKey, expand::natural_key)
}

/// Derives `natural_key::RandomId` for event types: the id is the `#[id]` field (a `Ulid`
/// created once with the value); optionally an `#[idempotency_key]` field with its own unique
/// index. It implements `natural_key::Upsertable` too: `event.upsert(&coll)` is
/// `coll.insert(&event)`, which stores the event once.
///
/// An event whose id or key is already stored with the same payload is already applied; with
/// another payload it is refused (`natural_key::Error::IdempotencyKeyReused`). The payload is
/// what serde stores but the `#[id]` and `#[idempotency_key]` fields and the fields marked
/// `#[natural_key(skip_hash)]` (a `received_at` that each retry sets anew, say), which is
/// checked as for [`NaturalKey`](derive@NaturalKey): refused on a field serde never stores or
/// flattens, and in a `transparent`, `into` or `remote` type.
///
/// Container attribute: `#[natural_key(crate = "...")]`, as for [`NaturalKey`](derive@NaturalKey).
#[proc_macro_derive(RandomId, attributes(id, idempotency_key, natural_key))]
pub fn derive_random_id(input: TokenStream) -> TokenStream {
    derive(input, Derive::RandomId, expand::random_id)
}

/// Model (`ast`), check (`valid`), then emit (`expand`) or report every error collected.
fn derive(
    input: TokenStream,
    derive: Derive,
    emit: fn(&ast::Container) -> proc_macro2::TokenStream,
) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let mut cx = ctxt::Ctxt::default();
    let cont = ast::Container::from_ast(&mut cx, &input, derive);
    valid::check(&mut cx, &cont);
    match cx.check() {
        Ok(()) => emit(&cont),
        Err(errors) => {
            let errors = errors.iter().map(syn::Error::to_compile_error);
            quote::quote!(#(#errors)*)
        }
    }
    .into()
}
