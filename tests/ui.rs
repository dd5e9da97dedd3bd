/// Compile-fail cases of the derives and of `doc.upsert(&coll)`. Every case runs in the
/// README's `cargo test --workspace`, where the command line's `chrono` feature is on, but two:
/// the expected outputs of `natural_key_timestamp_wrong_type` and
/// `natural_key_version_wrong_type` list the implementors of `KeyTimestamp` and `KeyVersion`,
/// which the optional time-crate features extend, so they run on the default features only
/// (`cargo test -p natural-key --test ui`, which `.ci/run` also runs).
#[test]
fn ui() {
    const LISTS_TIME_IMPLEMENTORS: [&str; 2] = [
        "natural_key_timestamp_wrong_type.rs",
        "natural_key_version_wrong_type.rs",
    ];
    let time_features = cfg!(any(feature = "chrono", feature = "time", feature = "jiff"));
    let t = trybuild::TestCases::new();
    let mut cases: Vec<_> = std::fs::read_dir("tests/ui")
        .expect("tests/ui")
        .map(|e| e.expect("a tests/ui entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    cases.sort();
    assert!(cases.len() > 20, "the cases are found: {cases:?}");
    for case in cases {
        if time_features && LISTS_TIME_IMPLEMENTORS.iter().any(|f| case.ends_with(f)) {
            continue;
        }
        t.compile_fail(case);
    }
}
