//! Events that must never overwrite each other: click events with random ids created once,
//! written with retries. A retry of a write that landed is recognised (`AlreadyApplied`), so
//! every click is stored exactly once.
//!
//! ```text
//! cargo run --example events
//! ```
//!
//! Uses `MONGODB_URI`, or starts the embedded FerretDB (`scripts/db up`) when it is unset.

#[path = "common/mod.rs"]
mod common;

use natural_key::bson::doc;
use natural_key::mongodb::{options::ClientOptions, Client, Collection};
use natural_key::prelude::*;
use natural_key::{ensure_indexes, insert_many, RetryPolicy};

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
    let clicks: Collection<Click> = client.database("natural_key_events").collection("clicks");
    clicks.drop().await?;
    ensure_indexes(&clicks).await?;

    let pages = ["/", "/pricing", "/docs", "/blog/hello-world"];
    let batch: Vec<Click> = (0..1000)
        .map(|i| Click {
            id: Ulid::new(),
            page: pages[i % pages.len()].into(),
            at_ms: 1_700_000_000_000 + i as i64,
        })
        .collect();

    let first = insert_many(&clicks, &batch)
        .retry(RetryPolicy::default())
        .await?;
    println!(
        "first send:  {} inserted, {} already applied",
        first.inserted, first.already_applied
    );

    // The acknowledgement was lost; the client sends the same events again.
    let again = insert_many(&clicks, &batch)
        .retry(RetryPolicy::default())
        .await?;
    println!(
        "resend:      {} inserted, {} already applied",
        again.inserted, again.already_applied
    );

    let one = &batch[0];
    println!(
        "single retry of one click: {}",
        one.insert(&clicks).retry(RetryPolicy::default()).await?
    );

    // An identical-looking click is a new event: it sits beside the others.
    let twin = Click {
        id: Ulid::new(),
        ..one.clone()
    };
    println!("identical content, new id: {}", twin.insert(&clicks).await?);

    let stored = clicks.count_documents(doc! {}).await?;
    println!("stored clicks: {stored} (1000 sent twice, plus one new event)");
    assert_eq!(stored, 1001);
    Ok(())
}
