use natural_key::prelude::*;
use natural_key::Collection;

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(RandomId, Serialize, Deserialize)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
}

// A document is written into a collection of its own type only.
#[allow(dead_code)]
fn misfiled(post: &Post, click: &Click, posts: &Collection<Post>, clicks: &Collection<Click>) {
    let _ = post.upsert(clicks);
    let _ = click.upsert(posts);
}

fn main() {}
