//! Events that must never overwrite each other: click events with random ids created once,
//! written with retries. A retry of a write that landed is recognised (`AlreadyApplied`), so
//! every click is stored exactly once.
//!
//! ```text
//! cargo run --example events
//! ```
//!
//! Uses `MONGODB_URI`, or starts the test engine (`scripts/db up`: FerretDB 2 on DocumentDB) when it is unset.

#[path = "common/mod.rs"]
mod common;

use natural_key::bson::doc;
use natural_key::mongodb::{options::ClientOptions, Client};
use natural_key::prelude::*;

/// Two identical clicks are two clicks: the id is random, created once with the value.
#[derive(RandomId, Serialize, Deserialize, Clone, Debug)]
struct Click {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
    at_ms: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut opts = ClientOptions::parse(common::mongodb_uri()?).await?;
    opts.retry_writes = Some(false);
    let client = Client::with_options(opts)?;
    let db = client.database("natural_key_events");
    common::drop_collection(&db.collection::<Click>("clicks")).await?;
    // Opening the handle creates the indexes and learns the deployment, once.
    let clicks = natural_key::Collection::<Click>::open(&db, "clicks").await?;

    let pages = ["/", "/pricing", "/docs", "/blog/hello-world"];
    let batch: Vec<Click> = (0..1000)
        .map(|i| Click {
            id: Ulid::new(),
            page: pages[i % pages.len()].into(),
            at_ms: 1_700_000_000_000 + i as i64,
        })
        .collect();

    let first = clicks.insert_many(&batch).await?;
    println!(
        "first send:  {} inserted, {} already applied",
        first.inserted, first.already_applied
    );

    // The acknowledgement was lost; the client sends the same events again.
    let again = clicks.insert_many(&batch).await?;
    println!(
        "resend:      {} inserted, {} already applied",
        again.inserted, again.already_applied
    );

    let one = &batch[0];
    println!("single retry of one click: {}", clicks.insert(one).await?);

    // An identical-looking click is a new event: it sits beside the others.
    let twin = Click {
        id: Ulid::new(),
        ..one.clone()
    };
    println!("identical content, new id: {}", clicks.insert(&twin).await?);

    let stored = clicks.inner().count_documents(doc! {}).await?;
    println!("stored clicks: {stored} (1000 sent twice, plus one new event)");
    assert_eq!(stored, 1001);
    Ok(())
}
