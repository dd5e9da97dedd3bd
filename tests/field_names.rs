//! Field names are data: a top-level name that comes from a user's document (the keys of a
//! `#[serde(flatten)]` map) is never a path, an operator or one of natural-key's own names.
//! Such a document is refused before anything is sent, single and batch alike; names inside
//! values are stored as they are. Runs unchanged on each engine (`MONGODB_URI`).

mod support;

use std::collections::BTreeMap;

use natural_key::bson::{doc, Bson, Document};
use natural_key::prelude::*;
use natural_key::{Collection, Error, FieldNameProblem};

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Profile {
    #[key]
    handle: String,
    #[key(timestamp)]
    created_at: i64,
    bio: String,
    #[serde(flatten)]
    attrs: BTreeMap<String, String>,
}

fn profile(handle: &str, attrs: &[(&str, &str)]) -> Profile {
    Profile {
        handle: handle.into(),
        created_at: 1_700_000_000_000,
        bio: "hi".into(),
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[derive(RandomId, Serialize, Deserialize, Clone, Debug)]
struct Visit {
    #[id]
    #[serde(rename = "_id")]
    id: Ulid,
    page: String,
    #[serde(flatten)]
    attrs: BTreeMap<String, String>,
}

/// Every refused name, what the library must say about it, and for which kind of document.
const NATURAL_KEY_CASES: &[(&str, FieldNameProblem)] = &[
    ("role.admin", FieldNameProblem::Dotted),
    ("$where", FieldNameProblem::DollarPrefixed),
    ("$set", FieldNameProblem::DollarPrefixed),
    ("", FieldNameProblem::Empty),
    ("_id", FieldNameProblem::Reserved),
    ("_nk_identity", FieldNameProblem::Reserved),
    ("_nk_hash", FieldNameProblem::Reserved),
    ("_nk_write", FieldNameProblem::Reserved),
    ("_nk_idempotency", FieldNameProblem::Reserved),
    ("_nk_future", FieldNameProblem::Reserved),
    ("bio", FieldNameProblem::Repeated),
];

fn assert_refused(e: &Error, name: &str, want: FieldNameProblem, id: Ulid) {
    match e {
        Error::InvalidFieldName {
            field,
            problem,
            id: got,
            ..
        } => {
            assert_eq!((field.as_str(), *problem, *got), (name, want, id), "{e}");
            assert!(!e.is_transient(), "malformed data is not worth a retry");
            assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
        }
        other => panic!("{name:?}: expected InvalidFieldName, got {other:?}"),
    }
}

/// The report: Merge mode turned `{"role.admin": "yes"}` into `role: {admin: "yes"}`,
/// a write into a field other code owns. Now the name is refused before anything is sent.
#[tokio::test]
async fn a_dotted_name_never_writes_into_another_field() {
    let (db, commands) = support::database("dotted").await;
    let profiles = Collection::<Profile>::open(&db, "profiles").await.unwrap();
    // Other code owns `role`.
    let plain = profile("ann", &[("role", "owned by other code")]);
    profiles.upsert(&plain).await.unwrap();
    commands.reset();

    let attack = profile("ann", &[("role.admin", "yes")]);
    let e = profiles.upsert(&attack).await.unwrap_err();
    assert_refused(
        &e,
        "role.admin",
        FieldNameProblem::Dotted,
        plain.id().unwrap(),
    );
    assert_eq!(commands.total(), 0, "refused before anything was sent");

    let stored = profiles.inner().clone_with_type::<Document>();
    let doc = stored.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(doc.get("role"), Some(&Bson::from("owned by other code")));
}

#[tokio::test]
async fn every_refused_name_fails_its_document_alone_single_and_batch() {
    let (db, commands) = support::database("refused").await;
    let profiles = Collection::<Profile>::open(&db, "profiles").await.unwrap();
    for (k, (name, problem)) in NATURAL_KEY_CASES.iter().enumerate() {
        let bad = profile(&format!("bad{k}"), &[(name, "x")]);
        commands.reset();
        let e = profiles.upsert(&bad).await.unwrap_err();
        assert_refused(&e, name, *problem, bad.id().unwrap());
        assert_eq!(commands.total(), 0, "{name:?}: nothing sent");

        // In a batch, the others are written and the command carries no trace of it.
        let good = profile(&format!("good{k}"), &[("colour", "red")]);
        let r = profiles.upsert_many([&good, &bad]).await.unwrap();
        assert_eq!((r.inserted, r.failures.len()), (1, 1), "{name:?}");
        assert_eq!(r.failures[0].0, 1);
        assert_refused(&r.failures[0].1, name, *problem, bad.id().unwrap());
        for cmd in commands.documents("insert") {
            assert!(!format!("{cmd}").contains(&format!("bad{k}")), "{cmd}");
        }
    }
    let count = profiles.inner().count_documents(doc! {}).await.unwrap();
    assert_eq!(
        count as usize,
        NATURAL_KEY_CASES.len(),
        "only the good ones"
    );
}

#[tokio::test]
async fn events_refuse_the_same_names_but_carry_their_own_id() {
    let (db, commands) = support::database("event_names").await;
    let visits = Collection::<Visit>::open(&db, "visits").await.unwrap();
    let visit = |attrs: &[(&str, &str)]| Visit {
        id: Ulid::new(),
        page: "/".into(),
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let cases = [
        ("a.b", FieldNameProblem::Dotted),
        ("$inc", FieldNameProblem::DollarPrefixed),
        ("_nk_idempotency", FieldNameProblem::Reserved),
        ("page", FieldNameProblem::Repeated),
        // The flattened `_id` is not the event's id: it would be replaced by it.
        ("_id", FieldNameProblem::Reserved),
    ];
    for (name, problem) in cases {
        let bad = visit(&[(name, "x")]);
        commands.reset();
        let e = visits.insert(&bad).await.unwrap_err();
        assert_refused(&e, name, problem, bad.id);
        assert_eq!(commands.total(), 0);
        let good = visit(&[]);
        let r = visits.insert_many([&good, &bad]).await.unwrap();
        assert_eq!((r.inserted, r.failures.len()), (1, 1), "{name:?}");
        assert_refused(&r.failures[0].1, name, problem, bad.id);
    }
    // `_id` is the event's own field: once is fine.
    let fine = visit(&[("utm", "x")]);
    assert_eq!(
        visits.insert(&fine).await.unwrap(),
        InsertOutcome::Inserted(fine.id)
    );
}

#[derive(NaturalKey, Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Settings {
    #[key]
    owner: String,
    #[key(timestamp)]
    created_at: i64,
    prefs: BTreeMap<String, BTreeMap<String, String>>,
}

/// Names inside a value are data: stored as they are and read back equal, through the insert
/// and through a Merge update — or, where an engine cannot store such a name, refused with a
/// permanent error and nothing stored. Never rewritten into a path.
#[tokio::test]
async fn nested_names_are_data_and_round_trip() {
    let (db, _commands) = support::database("nested").await;
    let settings = Collection::<Settings>::open(&db, "settings").await.unwrap();
    let plain = ["theme", "a b", "ключ", "_id", "_nk_hash"];
    let special = ["a.b", "$x", "x$", "a.$b"];
    let make = |owner: &str, names: &[&str], v: &str| Settings {
        owner: owner.into(),
        created_at: 1_700_000_000_000,
        prefs: names
            .iter()
            .map(|n| {
                let inner = names.iter().map(|m| (m.to_string(), v.to_string()));
                (n.to_string(), inner.collect())
            })
            .collect(),
    };
    let stored = |id: Ulid| {
        let raw = settings.inner().clone_with_type::<Document>();
        async move { raw.find_one(doc! {"_id": id.to_string()}).await.unwrap() }
    };
    // Plain names every engine stores.
    let s = make("plain", &plain, "1");
    settings.upsert(&s).await.unwrap();
    let edited = make("plain", &plain, "2");
    assert_eq!(
        settings.upsert(&edited).await.unwrap(),
        UpsertOutcome::Updated(s.id().unwrap())
    );
    assert_eq!(settings.get(s.id().unwrap()).await.unwrap(), Some(edited));

    // `.` and `$` inside values: engines differ on storing them.
    for name in special {
        let owner = format!("special {name}");
        let s = make(&owner, &[name], "1");
        let id = s.id().unwrap();
        match settings.upsert(&s).await {
            Ok(o) => {
                assert_eq!(o, UpsertOutcome::Inserted(id));
                assert_eq!(settings.get(id).await.unwrap(), Some(s), "{name:?}");
                let edited = make(&owner, &[name], "2");
                match settings.upsert(&edited).await {
                    Ok(o) => {
                        assert_eq!(o, UpsertOutcome::Updated(id));
                        let back = settings.get(id).await.unwrap();
                        assert_eq!(back, Some(edited), "{name:?} after a Merge update");
                    }
                    Err(e) => {
                        assert!(!e.is_transient(), "{name:?}: {e:?}");
                        eprintln!("{name:?} inside a value: update refused by the engine: {e}");
                    }
                }
                // Either way the stored value is one of the two written, never a path.
                let doc = stored(id).await.unwrap();
                let prefs = doc.get_document("prefs").unwrap();
                assert_eq!(prefs.keys().collect::<Vec<_>>(), [name], "{doc}");
            }
            Err(e) => {
                assert!(!e.is_transient(), "{name:?}: {e:?}");
                assert!(stored(id).await.is_none(), "{name:?}: nothing stored");
                eprintln!("{name:?} inside a value: refused by the engine: {e}");
            }
        }
    }
}
