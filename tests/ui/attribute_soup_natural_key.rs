use natural_key::prelude::*;

// Malformed `#[natural_key(...)]` attributes on the type and on fields, one per type.

#[derive(NaturalKey, Serialize)]
#[natural_key(scheme = 5)]
struct SchemeNotAString {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(scheme = "nope")]
struct UnknownScheme {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(namespace)]
struct NamespaceWithoutValue {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(scheme = "joined")]
#[natural_key(scheme = "joined")]
struct SchemeRepeated {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(namespace = "a", namespace = "b")]
struct NamespaceTwice {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(bogus(x), namespace = 5, separator)]
struct EveryOptionWrong {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(crate = 1)]
struct CrateNotAString {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(separator = ":")]
struct SeparatorWithoutJoined {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(namespace = b"blog")]
struct ByteStringNamespace {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key]
struct BarePath {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key = "joined"]
struct NameValueContainer {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
#[natural_key(skip_hash)]
struct SkipHashOnTheType {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

// An empty list says nothing and is accepted, like `#[serde()]`: no error for this one.
#[derive(NaturalKey, Serialize)]
#[natural_key()]
struct EmptyList {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize)]
struct SkipHashWithValue {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
    #[natural_key(skip_hash = true)]
    fetched_at: i64,
}

#[derive(NaturalKey, Serialize)]
struct SkipHashWithArguments {
    #[key]
    slug: String,
    #[key(timestamp)]
    at: i64,
    #[natural_key(skip_hash(always))]
    fetched_at: i64,
}

#[derive(NaturalKey, Serialize)]
struct NamespaceOnAField {
    #[key]
    #[natural_key(namespace = "x")]
    slug: String,
    #[key(timestamp)]
    at: i64,
}

fn main() {}
