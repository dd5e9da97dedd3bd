//! The posts of the ingest benches: ~2 KB each (slug, lang, timestamp, title, author, a
//! 1.8 KB body, 5 tags, views), generated deterministically.

use natural_key::prelude::*;

#[derive(NaturalKey, Serialize, Deserialize, Clone)]
pub struct Post {
    #[key]
    pub slug: String,
    #[key]
    pub lang: String,
    #[key(timestamp)]
    pub published_at: i64,
    pub title: String,
    pub author: String,
    pub body: String,
    pub tags: Vec<String>,
    pub views: u64,
}

#[rustfmt::skip]
pub const WORDS: &[&str] = &[
    "ingest", "idempotent", "natural", "key", "mongodb", "document", "batch", "stream", "hash",
    "content", "identity", "timestamp", "writer", "reader", "collection", "index", "the", "a",
    "of", "and", "to", "in", "is", "that", "with", "for", "on", "by",
];

pub fn prose(seed: usize, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    let mut i = seed;
    while s.len() < bytes {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[i % WORDS.len()]);
        i = i.wrapping_mul(2_654_435_761).wrapping_add(12_345) % 1_000_003;
    }
    s.truncate(bytes);
    s
}

pub fn corpus(n: usize) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            slug: format!("post-{i:07}"),
            lang: ["en", "zh-TW", "ja", "ko"][i % 4].into(),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            title: prose(i, 60),
            author: format!("author-{}", i % 97),
            body: prose(i * 7 + 1, 1800),
            tags: (0..5)
                .map(|t| WORDS[(i + t * 3) % WORDS.len()].to_string())
                .collect(),
            views: (i as u64).wrapping_mul(7919) % 100_000,
        })
        .collect()
}
