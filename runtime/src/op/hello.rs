//! `hello` and `buildInfo`: what the deployment is, asked once per handle.

use bson::doc;
use mongodb::Database;
use serde::Deserialize;

use super::{parse, primary, raw};

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Hello {
    /// `"isdbgrid"` from a mongos.
    #[serde(default)]
    pub(crate) msg: Option<String>,
    #[serde(rename = "maxBsonObjectSize", default)]
    pub(crate) max_bson_object_size: Option<i64>,
    #[serde(rename = "maxWriteBatchSize", default)]
    pub(crate) max_write_batch_size: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BuildInfo {
    #[serde(default)]
    pub(crate) version: Option<String>,
    #[serde(rename = "ferretdbVersion", default)]
    pub(crate) ferretdb_version: Option<String>,
}

async fn run(db: &Database, name: &str) -> Result<bson::Document, mongodb::error::Error> {
    db.run_raw_command(raw(&doc! { name: 1 })?)
        .selection_criteria(primary())
        .await
}

pub(crate) async fn hello(db: &Database) -> Result<Hello, mongodb::error::Error> {
    parse(run(db, "hello").await?, "hello")
}

pub(crate) async fn build_info(db: &Database) -> Result<BuildInfo, mongodb::error::Error> {
    parse(run(db, "buildInfo").await?, "buildInfo")
}
