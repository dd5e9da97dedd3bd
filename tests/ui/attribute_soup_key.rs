use natural_key::prelude::*;

// Malformed `#[key(...)]` attributes, one per type: every one is reported, at its tokens, by
// one compile (never a proc-macro panic).

#[derive(NaturalKey, Serialize)]
struct TimestampTwice {
    #[key]
    slug: String,
    #[key(timestamp, timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct NfcTwice {
    #[key(nfc, lowercase, nfc)]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct NameValue {
    #[key = "x"]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct Literal {
    #[key("x")]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct FlagWithValue {
    #[key(lowercase = 3)]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct FlagWithArguments {
    #[key]
    slug: String,
    #[key(timestamp(x))]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct PathOption {
    #[key(natural_key::nfc)]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct StrayComma {
    #[key(, nfc)]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct TwoKeyAttributes {
    #[key]
    #[key(lowercase)]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct UnknownWithArguments {
    #[key(foo(bar), lowercase = "yes")]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

fn main() {}
