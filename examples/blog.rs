//! The seed scenario end to end: a multilingual blog (en, zh-TW, ja, ko) ingested into MongoDB
//! with derived ids. Run it twice: the second run reports every post unchanged.
//!
//! ```text
//! cargo run --example blog                    # the posts in examples/blog/posts
//! cargo run --example blog -- --synthetic 50000   # plus 50,000 generated posts, with a progress bar
//! cargo run --example blog -- --reset         # start from an empty database
//! cargo run --example blog -- --export posts.ndjson   # the posts as NDJSON for `natural-key ingest`
//! ```
//!
//! The exported posts ingested from the shell are stored under the same ids and content hashes
//! as this program stores them (README, "From the shell"): run it after the ingest and every
//! post reports `unchanged`.
//!
//! Uses `MONGODB_URI`, or starts the test engine (`scripts/db up`: FerretDB 2 on DocumentDB) when it is unset.

#[path = "common/mod.rs"]
mod common;

use std::path::Path;

use natural_key::bson::{doc, DateTime};
use natural_key::mongodb::{options::ClientOptions, Client};
use natural_key::prelude::*;
use natural_key::{Collection, Error};

/// A blog post: identified by slug and language, ordered by its publication instant.
#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug)]
struct Post {
    #[key(nfc)]
    slug: String,
    #[key(lowercase)]
    lang: String,
    #[key(timestamp)]
    published_at: DateTime,
    title: String,
    body: String,
}

fn load_posts(dir: &Path) -> Result<Vec<Post>, Box<dyn std::error::Error>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| parse_post(p))
        .collect()
}

/// A post file: a `---` header of `key: value` lines, then the body.
fn parse_post(path: &Path) -> Result<Post, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)?;
    let rest = text
        .strip_prefix("---\n")
        .ok_or_else(|| format!("{}: no header", path.display()))?;
    let (header, body) = rest
        .split_once("\n---\n")
        .ok_or_else(|| format!("{}: unterminated header", path.display()))?;
    let field = |name: &str| -> Result<String, String> {
        header
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')
                    .map(|v| v.trim().to_string())
            })
            .ok_or_else(|| format!("{}: missing `{name}`", path.display()))
    };
    let published = field("published_at")?;
    Ok(Post {
        slug: field("slug")?,
        lang: field("lang")?,
        published_at: DateTime::parse_rfc3339_str(&published)
            .map_err(|e| format!("{}: published_at {published:?}: {e}", path.display()))?,
        title: field("title")?,
        body: body.trim().to_string(),
    })
}

fn synthetic(i: u64) -> Post {
    let langs = ["en", "zh-TW", "ja", "ko"];
    Post {
        slug: format!("synthetic-{i:07}"),
        lang: langs[(i % 4) as usize].to_string(),
        published_at: DateTime::from_millis(1_600_000_000_000 + i as i64 * 1000),
        title: format!("Synthetic post {i}"),
        body: "Lorem ipsum dolor sit amet. ".repeat(20),
    }
}

fn print_table(rows: &[(String, String, String, String)]) {
    use unicode_width::UnicodeWidthStr;
    // Display width, not chars: CJK characters take two terminal columns.
    let width = |f: fn(&(String, String, String, String)) -> &String, head: &str| {
        rows.iter()
            .map(|r| f(r).width())
            .max()
            .unwrap_or(0)
            .max(head.len())
    };
    let (w0, w1, w2) = (
        width(|r| &r.0, "outcome"),
        width(|r| &r.1, "lang"),
        width(|r| &r.2, "slug"),
    );
    let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.width())));
    println!(
        "  {}  {}  {}  title",
        pad("outcome", w0),
        pad("lang", w1),
        pad("slug", w2)
    );
    for (o, l, s, t) in rows {
        println!("  {}  {}  {}  {t}", pad(o, w0), pad(l, w1), pad(s, w2));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let synthetic_n: u64 = match args.iter().position(|a| a == "--synthetic") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--synthetic needs a number")?
            .parse()?,
        None => 0,
    };

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/blog/posts");
    let corpus = load_posts(&dir)?;
    if let Some(i) = args.iter().position(|a| a == "--export") {
        // One JSON object per post, fields in declaration order: what the type stores, in the
        // canonical Extended JSON serde_json writes for a bson::DateTime.
        let path = args.get(i + 1).ok_or("--export needs a file name")?;
        let lines: Vec<String> = corpus
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()?;
        std::fs::write(path, lines.join("\n") + "\n")?;
        println!("wrote {} posts to {path}", corpus.len());
        return Ok(());
    }

    let mut opts = ClientOptions::parse(common::mongodb_uri()?).await?;
    // Engines without retryable writes (FerretDB, DocumentDB, Cosmos DB) need this; natural-key
    // makes our own retries safe instead.
    opts.retry_writes = Some(false);
    let client = Client::with_options(opts)?;
    // NK_BLOG_DB: another database, for CI (which ingests into a database of its own).
    let db_name = std::env::var("NK_BLOG_DB").unwrap_or_else(|_| "natural_key_blog".into());
    let db = client.database(&db_name);
    if args.iter().any(|a| a == "--reset") {
        db.drop().await?;
        println!("dropped database {db_name}");
    }
    // Opening the handle creates the indexes and learns the deployment, once.
    let posts = Collection::<Post>::open(&db, "posts").await?;

    // 1. Ingest the shipped corpus, post by post, with retries.
    println!("\n== ingest {} posts from {}", corpus.len(), dir.display());
    let mut rows = Vec::new();
    let (mut inserted, mut updated, mut unchanged) = (0, 0, 0);
    for post in &corpus {
        let outcome = posts.upsert(post).await?;
        match outcome {
            UpsertOutcome::Inserted(_) => inserted += 1,
            UpsertOutcome::Updated(_) => updated += 1,
            // `Stale` needs a `#[natural_key(version)]` field, which `Post` has not.
            _ => unchanged += 1,
        }
        rows.push((
            outcome.as_str().to_string(),
            post.lang.clone(),
            post.slug.clone(),
            post.title.clone(),
        ));
    }
    print_table(&rows);
    println!("  {inserted} inserted, {updated} updated, {unchanged} unchanged");
    if inserted + updated == 0 {
        println!("  (every post unchanged: no write command was sent)");
    }

    // 2. A large corpus streams through in batches, with a progress bar.
    if synthetic_n > 0 {
        println!("\n== ingest {synthetic_n} synthetic posts (upsert_stream, batches of 1000)");
        let bar = indicatif::ProgressBar::new(synthetic_n);
        bar.set_style(indicatif::ProgressStyle::with_template(
            "  [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
        )?);
        let stream = futures::stream::iter((0..synthetic_n).map(synthetic));
        let progress = bar.clone();
        let report = posts
            .upsert_stream(stream)
            .batch_size(1000)
            .on_progress(move |r| progress.set_position(r.processed()))
            .await?;
        bar.finish();
        println!(
            "  {} inserted, {} updated, {} unchanged, {} failed, in {} batches",
            report.inserted,
            report.updated,
            report.unchanged,
            report.failures.len(),
            report.batches
        );
    }

    // 3. On a scratch copy: a body edit is an update; a published_at edit is refused.
    println!("\n== edits, on a scratch copy (posts_scratch)");
    common::drop_collection(&db.collection::<Post>("posts_scratch")).await?;
    // Same client: reuse the deployment the first handle detected.
    let scratch = Collection::<Post>::open(&db, "posts_scratch")
        .deployment(posts.deployment().clone())
        .await?;
    scratch.upsert_many(&corpus).await?;

    let mut edited = corpus[0].clone();
    edited.body.push_str("\n\n(Edited: a typo fixed.)");
    println!(
        "  body edit of {}/{}: {}",
        edited.lang,
        edited.slug,
        scratch.upsert(&edited).await?
    );

    let mut moved = corpus[1].clone();
    moved.published_at = DateTime::from_millis(moved.published_at.timestamp_millis() + 86_400_000);
    match scratch.upsert(&moved).await {
        Err(e @ Error::ImmutableKeyChanged { .. }) => println!(
            "  published_at edit of {}/{}: refused:\n    {e}",
            moved.lang, moved.slug
        ),
        other => {
            return Err(
                format!("expected the published_at edit to be refused, got {other:?}").into(),
            )
        }
    }
    let stored = scratch.get(corpus[1].id()?).await?.ok_or("post vanished")?;
    assert_eq!(stored.published_at, corpus[1].published_at);
    println!(
        "  the stored post still has published_at {}; documents in posts_scratch: {}",
        stored.published_at.try_to_rfc3339_string()?,
        scratch.inner().count_documents(doc! {}).await?
    );
    println!("\nRun it again: every post reports `unchanged`.");
    Ok(())
}
