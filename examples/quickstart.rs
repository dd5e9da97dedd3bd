use natural_key::prelude::*;
use natural_key::{mongodb::Client, Collection};

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key(lowercase)]
    lang: String,
    #[key(timestamp)]
    published_at: i64, // Unix ms; never the wall clock
    body: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let uri = std::env::var("MONGODB_URI")
        .unwrap_or_else(|_| "mongodb://127.0.0.1:27017/?retryWrites=false".into());
    let db = Client::with_uri_str(&uri).await?.database("quickstart");
    let posts = Collection::<Post>::open(&db, "posts").await?; // ensures the unique indexes

    let post = Post {
        slug: "hello-world".into(),
        lang: "EN".into(),
        published_at: 1_700_000_000_000,
        body: "Hi".into(),
    };
    println!("id {}", post.id()?); // same fields, same id, on every machine
    for _ in 0..2 {
        // First run: inserted, then unchanged (no write sent). Edit `body`: updated.
        // A lost reply or a failover is retried (the handle's RetryPolicy::default()).
        let outcome = post.upsert(&posts).await?;
        println!("{outcome}");
    }
    Ok(())
}
