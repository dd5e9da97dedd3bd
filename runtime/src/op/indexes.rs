//! `listIndexes` and `createIndexes`.

use bson::{doc, Bson, Document};
use serde::Deserialize;

use super::answer::{classify, server_code};
use super::find::cursor;
use super::{encode, Target};
use crate::error::Error;

/// An existing index, as `listIndexes` describes it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct IndexInfo {
    pub(crate) name: String,
    pub(crate) key: Document,
    #[serde(default)]
    pub(crate) unique: Option<Bson>,
    #[serde(default)]
    pub(crate) sparse: Option<Bson>,
    #[serde(rename = "partialFilterExpression", default)]
    pub(crate) partial: Option<Document>,
}

const NAMESPACE_NOT_FOUND: i32 = 26;

/// The collection's indexes; none when the collection does not exist yet.
pub(crate) async fn list_indexes(target: &Target) -> Result<Vec<IndexInfo>, Error> {
    let cmd = encode(&doc! { "listIndexes": target.name.as_str() }).map_err(classify)?;
    match cursor(target, cmd, &mut target.once("listIndexes"), None).await {
        Err(Error::Database(e)) if server_code(&e) == Some(NAMESPACE_NOT_FOUND) => Ok(Vec::new()),
        other => other,
    }
}

/// Creates one index from its full specification (`{key, name, unique, ...}`).
pub(crate) async fn create_index(
    target: &Target,
    spec: Document,
) -> Result<(), mongodb::error::Error> {
    let cmd = doc! { "createIndexes": target.name.as_str(), "indexes": [spec] };
    target.run(encode(&cmd)?, None).await.map(|_| ())
}
