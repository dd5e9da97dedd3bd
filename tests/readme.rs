//! The README's quickstart is `examples/quickstart.rs`, which CI builds and runs against the
//! engine; this keeps the README's copy from drifting away from what is checked.

const README: &str = include_str!("../README.md");
const QUICKSTART: &str = include_str!("../examples/quickstart.rs");
const MARKER: &str = "<!-- examples/quickstart.rs, verbatim";

/// The body of the first ```rust block after the marker.
fn readme_quickstart() -> Option<&'static str> {
    let after = &README[README.find(MARKER)?..];
    let open = "```rust\n";
    let body = &after[after.find(open)? + open.len()..];
    Some(&body[..body.find("```\n")?])
}

#[test]
fn readme_quickstart_is_the_example_verbatim() {
    let block =
        readme_quickstart().expect("README.md: no ```rust block after the quickstart marker");
    if block != QUICKSTART {
        let line = block
            .lines()
            .zip(QUICKSTART.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(block.lines().count().min(QUICKSTART.lines().count()));
        panic!(
            "README.md's quickstart differs from examples/quickstart.rs at line {}; copy the file into the README",
            line + 1
        );
    }
}

#[test]
fn readme_install_line_names_what_the_quickstart_needs() {
    let line = README
        .lines()
        .find(|l| l.starts_with("cargo add natural-key"))
        .expect("README.md: no `cargo add natural-key` line");
    // The quickstart derives serde's traits and runs under #[tokio::main].
    for needed in [
        "serde",
        "serde/derive",
        "tokio",
        "tokio/macros",
        "tokio/rt-multi-thread",
    ] {
        assert!(
            line.split([' ', ',']).any(|w| w == needed),
            "`{line}` lacks {needed}"
        );
    }
}
