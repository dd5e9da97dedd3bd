use natural_key::prelude::*;

// Where the stored document is not this struct's fields under their names, `skip_hash` has no
// stored name to leave out.
#[derive(NaturalKey, Serialize, Clone)]
#[serde(into = "Wire")]
struct Into {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

#[derive(Serialize)]
struct Wire {
    slug: String,
}

impl From<Into> for Wire {
    fn from(p: Into) -> Self {
        Wire { slug: p.slug }
    }
}

#[derive(NaturalKey, Serialize)]
#[serde(transparent)]
struct Transparent {
    #[key]
    #[serde(skip)]
    slug: String,
    #[key(timestamp)]
    #[natural_key(skip_hash)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize)]
#[serde(remote = "Self")]
struct Remote {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    #[natural_key(skip_hash)]
    fetched_at: i64,
}

impl Serialize for Remote {
    fn serialize<S: natural_key::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Remote::serialize(self, s)
    }
}

fn main() {}
