//! Error collection, after serde_derive: report every problem of an input in one compile.

use std::fmt::Display;

use quote::ToTokens;

#[derive(Default)]
pub struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    pub fn error_spanned_by<T: ToTokens, M: Display>(&mut self, obj: T, msg: M) {
        self.errors.push(syn::Error::new_spanned(obj, msg));
    }

    pub fn syn_error(&mut self, err: syn::Error) {
        self.errors.push(err);
    }

    pub fn check(self) -> Result<(), Vec<syn::Error>> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}
