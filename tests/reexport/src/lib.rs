//! A crate that depends on natural-key under another name (`nk`), as a crate re-exporting it
//! would; its tests derive with `#[natural_key(crate = "nk")]`.
