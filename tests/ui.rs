/// Compile-fail cases of the derives. The expected compiler output lists the implementors of
/// `KeyTimestamp`, which the optional time-crate features extend, so the suite runs on the
/// default features only (`cargo test --workspace`).
#[cfg(not(any(feature = "chrono", feature = "time", feature = "jiff")))]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
