//! The posts of the peer and cluster benches: ~0.5 KB each (slug, lang, timestamp, a 60-byte
//! title, a 400-byte body), generated deterministically.

use natural_key::prelude::*;

use super::posts::prose;

#[derive(NaturalKey, Serialize, Deserialize, Clone)]
pub struct Post {
    #[key]
    pub slug: String,
    #[key]
    pub lang: String,
    #[key(timestamp)]
    pub published_at: i64,
    pub title: String,
    pub body: String,
}

/// `n` posts, the same on every run.
pub fn corpus(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("post-{i:07}"),
            lang: ["en", "zh-TW", "ja", "ko"][i % 4].into(),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            title: prose(i, 60),
            body: prose(i * 7 + 1, 400),
        })
        .collect()
}

/// `docs` with every hundredth post edited.
pub fn one_percent_changed(docs: &[Post]) -> Vec<Post> {
    let mut out = docs.to_vec();
    for p in out.iter_mut().step_by(100) {
        p.body.push_str(" (edited)");
    }
    out
}
