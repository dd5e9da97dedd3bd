use natural_key::prelude::*;

// Every field below would be refused at each write: a name natural-key stores itself, a
// derived `_id`, a path, an operator, the empty name. Each is reported, at its name.
#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    _nk_hash: String,
    #[serde(rename = "_nk_identity")]
    identity: String,
    #[serde(rename(serialize = "_id", deserialize = "id"))]
    id: String,
    #[serde(rename = "meta.author")]
    author: String,
    #[serde(default, rename = "$set")]
    set: String,
    #[serde(rename = "")]
    empty: String,
    // serde's other options are serde's: not ours to report.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "fine")]
    ok: Option<String>,
}

fn main() {}
