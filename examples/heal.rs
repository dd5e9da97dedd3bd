//! The seed's story, reproduced and healed. Posts are written the naive way — a fresh random
//! `_id` per attempt, retried when the acknowledgement is lost — through the project's
//! fault-injection proxy, so lost acknowledgements leave duplicates. Then natural-key audits
//! the collection (duplicates shown), adopts it, audits again (clean), and upserts the same
//! posts: every one `unchanged`, no write sent.
//!
//! ```text
//! cargo run --example heal
//! ```
//!
//! Uses `MONGODB_URI`, or starts the test engine (`scripts/db up`: FerretDB 2 on DocumentDB) when it is unset.

#[path = "common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/support/proxy.rs"]
mod proxy;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use natural_key::bson::{doc, Document};
use natural_key::mongodb::event::command::CommandEvent;
use natural_key::mongodb::event::EventHandler;
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::Client;
use natural_key::prelude::*;
use natural_key::Collection;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
    title: String,
}

fn posts() -> Vec<Post> {
    (0..200)
        .map(|i| Post {
            slug: format!("post-{i:03}"),
            lang: ["en", "zh-TW", "ja", "ko"][i % 4].into(),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            title: format!("Post number {i}"),
        })
        .collect()
}

/// The recipe of the seed text: a random id per attempt, and retry until acknowledged.
async fn naive_insert(
    coll: &natural_key::mongodb::Collection<Document>,
    post: &Post,
) -> Result<u32, Box<dyn std::error::Error>> {
    for attempt in 1..=20 {
        let mut d = natural_key::bson::to_document(post)?;
        d.insert("_id", Ulid::new().to_string());
        match coll.insert_one(d).await {
            Ok(_) => return Ok(attempt),
            // The acknowledgement was lost, or the request: try again, under a new id.
            Err(_) => continue,
        }
    }
    Err(format!("{}: no acknowledgement in 20 attempts", post.slug).into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let uri = common::mongodb_uri()?;
    // natural-key's own client counts the write commands it sends.
    let writes = Arc::new(AtomicUsize::new(0));
    let mut opts = ClientOptions::parse(&uri).await?;
    let counter = writes.clone();
    opts.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
        if let CommandEvent::Started(s) = ev {
            if ["insert", "update", "delete"].contains(&s.command_name.as_str()) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }));
    let client = Client::with_options(opts)?;
    let db = client.database("natural_key_heal");
    common::drop_collection(&db.collection::<Document>("posts")).await?;

    // 1. The naive writer, through a proxy that loses 30% of the acknowledgements.
    let faults = proxy::Faults {
        drop_reply_after_apply: 0.3,
        ..proxy::Faults::none()
    };
    let proxy = proxy::Proxy::start(proxy::upstream_addr(&uri), faults, 7).await;
    let mut naive_opts = ClientOptions::parse(proxy.uri()).await?;
    naive_opts.server_selection_timeout = Some(Duration::from_secs(5));
    let naive = Client::with_options(naive_opts)?;
    let legacy = naive
        .database("natural_key_heal")
        .collection::<Document>("posts");
    let all = posts();
    let mut attempts = 0;
    for post in &all {
        attempts += naive_insert(&legacy, post).await?;
    }
    let stored = db
        .collection::<Document>("posts")
        .count_documents(doc! {})
        .await?;
    println!(
        "naive writer: {} posts, {attempts} attempts, {stored} documents stored ({} duplicates)\n",
        all.len(),
        stored - all.len() as u64
    );

    // 2. Audit: what the collection holds.
    let posts = Collection::<Post>::open(&db, "posts").await?;
    let report = posts.audit().await?;
    println!("audit before:\n{report}\n");

    // 3. Adopt: every post under its derived id, duplicates collapsed.
    let adopted = posts.adopt().await?;
    println!(
        "adopt: {} documents under their derived id, {} old copies merged, {} conflicts, {} failures\n",
        adopted.adopted,
        adopted.merged,
        adopted.conflicts.count,
        adopted.failures.len()
    );
    let after = posts.audit().await?;
    println!("audit after:\n{after}\n");
    if !after.is_clean() || after.clean != all.len() as u64 {
        return Err("the collection is not clean after adopt".into());
    }

    // 4. The same posts, upserted: nothing changed, nothing sent.
    writes.store(0, Ordering::Relaxed);
    let r = posts.upsert_many(&all).await?;
    let sent = writes.load(Ordering::Relaxed);
    println!(
        "upsert of the same {} posts: {} unchanged, {sent} write commands sent",
        all.len(),
        r.unchanged
    );
    if r.unchanged != all.len() as u64 || sent != 0 {
        return Err("the re-ingest was not a no-op".into());
    }
    Ok(())
}
