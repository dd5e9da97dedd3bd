//! Cursors and sessions: a cursor belongs to the session that opened it. MongoDB and FerretDB 2
//! (DocumentDB) refuse a `getMore` sent in any other session (code 13, "Cursor session id ...
//! is not the same as the operation context's session id"), so every cursor natural-key reads
//! must be read to its end in one session, whether the caller gave one or not.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use natural_key::bson::{Bson, Document};
use natural_key::mongodb::event::command::CommandEvent;
use natural_key::mongodb::event::EventHandler;
use natural_key::mongodb::options::ClientOptions;
use natural_key::mongodb::Client;
use natural_key::prelude::*;
use natural_key::Collection;

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Post {
    #[key]
    writer: u32,
    #[key]
    slug: String,
    #[key(timestamp)]
    published_at: i64,
    body: String,
}

fn corpus(writer: u32, n: u64) -> Vec<Post> {
    (0..n)
        .map(|i| Post {
            writer,
            slug: format!("post-{i:05}"),
            published_at: 1_700_000_000_000 + i as i64 * 60_000,
            body: format!("body of post {i} by {writer}"),
        })
        .collect()
}

/// What went on the wire, paired by request: each `find`'s session and the cursor its reply
/// opened, each `getMore`'s session and the cursor it asked for.
#[derive(Default)]
struct Wire {
    started: HashMap<i32, (String, Option<Bson>, Option<i64>)>,
    /// Cursor id -> the session of the command that opened it.
    opened: HashMap<i64, Option<Bson>>,
    /// (cursor id, session) of every `getMore`.
    get_mores: Vec<(i64, Option<Bson>)>,
}

async fn recording_client(uri: &str, wire: Arc<Mutex<Wire>>) -> Client {
    let mut opts = ClientOptions::parse(uri).await.unwrap();
    opts.retry_writes = Some(false);
    opts.command_event_handler = Some(EventHandler::callback(move |ev: CommandEvent| {
        let mut w = wire.lock().unwrap();
        match ev {
            CommandEvent::Started(s) => {
                let lsid = s.command.get("lsid").cloned();
                let cursor = (s.command_name == "getMore")
                    .then(|| s.command.get_i64("getMore").ok())
                    .flatten();
                if let Some(id) = cursor {
                    w.get_mores.push((id, lsid.clone()));
                }
                w.started
                    .insert(s.request_id, (s.command_name, lsid, cursor));
            }
            CommandEvent::Succeeded(s) => {
                let Some((name, lsid, _)) = w.started.get(&s.request_id).cloned() else {
                    return;
                };
                let id = s
                    .reply
                    .get_document("cursor")
                    .ok()
                    .and_then(|c: &Document| c.get_i64("id").ok());
                if let (Some(id), true) = (id, name != "getMore") {
                    if id != 0 {
                        w.opened.insert(id, lsid);
                    }
                }
            }
            _ => {}
        }
    }));
    Client::with_options(opts).unwrap()
}

/// Eight writers re-ingest their posts at once through one client, without sessions of their
/// own. Before each guard read ran in one session of its own, the driver handed every command
/// an implicit session from its pool, and a `getMore` landed in another writer's session:
/// DocumentDB refused it ("database error", code 13) and 7 of 8 re-ingests failed.
#[tokio::test]
async fn concurrent_reingests_read_each_cursor_in_the_session_that_opened_it() {
    const WRITERS: u32 = 8;
    let n: u64 = support::env_or("NK_SESSIONS_POSTS", 600);
    let (db, _) = support::database("cursor_sessions").await;
    let wire = Arc::new(Mutex::new(Wire::default()));
    let client = recording_client(&support::uri(), wire.clone()).await;
    let db = client.database(db.name());
    // Guard reads of all of a writer's posts at once, by identity, in replies of 50 documents
    // (by default a read asks for its whole result at once): every read needs `getMore`s,
    // whatever the engine's read costs would make the handle choose.
    let deployment = natural_key::Deployment::detect(db.client()).await.unwrap();
    let limits = deployment.limits();
    let deployment = deployment.with_limits(natural_key::Limits {
        min_read_identities: n as usize,
        max_read_identities: n as usize,
        span_reads: false,
        read_batch: 50,
        ..limits
    });
    let posts = Collection::new(db.collection::<Post>("posts"))
        .deployment(deployment)
        .await
        .unwrap();
    for w in 0..WRITERS {
        let r = posts.upsert_many(&corpus(w, n)).await.unwrap();
        assert_eq!(r.inserted, n);
    }

    // Every writer edits 1%: its guard reads find the rest unchanged.
    let runs = (0..WRITERS).map(|w| {
        let posts = posts.clone();
        async move {
            let mut docs = corpus(w, n);
            for d in docs.iter_mut().step_by(100) {
                d.body.push_str(" (edited)");
            }
            posts.upsert_many(&docs).await
        }
    });
    let results = futures::future::join_all(runs).await;
    for (w, r) in results.into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("writer {w}: {e}"));
        assert_eq!(
            (r.inserted, r.updated, r.unchanged, r.failures.len()),
            (0, n.div_ceil(100), n - n.div_ceil(100), 0),
            "writer {w}"
        );
    }

    let w = wire.lock().unwrap();
    if w.opened.is_empty() {
        // An engine that answers a whole result in its first batch, whatever the batch size,
        // leaves no cursor open.
        let expected = std::env::var("NK_EXPECT_ENGINE").unwrap_or_default();
        assert!(
            !["documentdb", "ferretdb1"].contains(&expected.as_str()),
            "{expected} left no cursor open: the test would prove nothing there"
        );
        println!("the engine answered every read in its first batch: no cursor to check");
        return;
    }
    assert!(!w.get_mores.is_empty(), "cursors opened, none read on");
    for (cursor, lsid) in &w.get_mores {
        let opened = w
            .opened
            .get(cursor)
            .unwrap_or_else(|| panic!("getMore of cursor {cursor} that no command opened"));
        assert!(lsid.is_some() || opened.is_none(), "getMore {cursor}");
        assert_eq!(
            lsid, opened,
            "the getMore of cursor {cursor} went in another session than its find"
        );
    }
}
