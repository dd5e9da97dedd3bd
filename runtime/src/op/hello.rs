//! `hello` and `buildInfo`: what the deployment is, asked once per handle, and the
//! [`Deployment`] the replies describe.

use bson::doc;
use mongodb::{Client, Database};
use serde::Deserialize;

use super::answer::{classify, server_code};
use super::{encode, parse, primary};
use crate::deployment::{Deployment, Engine, Limits};
use crate::error::Error;

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
    /// FerretDB 1.x.
    #[serde(rename = "ferretdbVersion", default)]
    pub(crate) ferretdb_version: Option<String>,
    /// FerretDB 2.x: `ferretdb: {version: "v2.5.0", ...}`.
    #[serde(default)]
    pub(crate) ferretdb: Option<FerretDbInfo>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct FerretDbInfo {
    #[serde(default)]
    pub(crate) version: Option<String>,
}

async fn run(db: &Database, name: &str) -> Result<bson::Document, mongodb::error::Error> {
    db.run_raw_command(encode(&doc! { name: 1 })?)
        .selection_criteria(primary())
        .await
}

/// An engine's answer to a command it does not know.
const COMMAND_NOT_FOUND: i32 = 59;

/// `hello`, or on an engine that predates it the legacy `isMaster` (MongoDB before 4.4.2 /
/// 4.2.10, and compatible engines that never added `hello`): both answer the fields natural-key
/// reads. Drivers themselves send `hello` only to a server whose `isMaster` said `helloOk`.
pub(crate) async fn hello(db: &Database) -> Result<Hello, mongodb::error::Error> {
    match run(db, "hello").await {
        Ok(reply) => parse(reply, "hello"),
        Err(e) if server_code(&e) == Some(COMMAND_NOT_FOUND) => {
            parse(run(db, "isMaster").await?, "isMaster")
        }
        Err(e) => Err(e),
    }
}

pub(crate) async fn build_info(db: &Database) -> Result<BuildInfo, mongodb::error::Error> {
    parse(run(db, "buildInfo").await?, "buildInfo")
}

/// The most operations FerretDB 2 accepts in one `insert`, `update` or `delete` (measured on
/// 2.5.0: 25,001 are refused with code 16 `InvalidLength`, whatever `hello` says).
const FERRETDB2_WRITE_BATCH: usize = 25_000;

impl Deployment {
    /// Asks the server once: `hello` (topology, sizes) and `buildInfo` (engine). A server
    /// that does not answer `hello` is an error; a failed `buildInfo` leaves
    /// [`Engine::Unknown`] with [`Limits::SAFE`].
    pub async fn detect(client: &Client) -> Result<Self, Error> {
        let admin = client.database("admin");
        let hello = hello(&admin).await.map_err(classify)?;
        let info = build_info(&admin).await;
        if let Err(e) = &info {
            tracing::warn!(error = %e, "buildInfo failed: natural-key uses its safe limits");
        }
        Ok(Self::from_replies(&hello, info.ok().as_ref()))
    }

    pub(crate) fn from_replies(hello: &Hello, info: Option<&BuildInfo>) -> Self {
        let ferretdb = info.and_then(|i| {
            let v2 = i
                .ferretdb
                .as_ref()
                .map(|f| f.version.clone().unwrap_or_default());
            i.ferretdb_version.clone().or(v2)
        });
        let engine = match (info, ferretdb) {
            (Some(_), Some(version)) => Engine::FerretDb { version },
            (Some(i), None) => Engine::MongoDb {
                version: i.version.clone().unwrap_or_default(),
            },
            (None, _) => Engine::Unknown,
        };
        let mut limits = match engine {
            // Every read scans the collection there: one read per batch.
            _ if engine.is_ferretdb_v1() => Limits {
                max_read_identities: usize::MAX,
                min_read_identities: usize::MAX,
                ..Limits::SAFE
            },
            Engine::MongoDb { .. } | Engine::FerretDb { .. } => Limits::MONGODB,
            Engine::Unknown => Limits::SAFE,
        };
        if let Some(n) = hello
            .max_bson_object_size
            .and_then(|n| usize::try_from(n).ok())
        {
            limits.max_document_bytes = n;
            limits.max_command_bytes = limits.max_command_bytes.min(n / 2).max(1);
        }
        if let Some(n) = hello
            .max_write_batch_size
            .and_then(|n| usize::try_from(n).ok())
        {
            limits.max_statements = limits.max_statements.min(n).max(1);
            // The statement cap is FerretDB 1.x's update stall; inserts only have the batch size.
            limits.max_documents = n.max(1);
        }
        if matches!(engine, Engine::FerretDb { .. }) && !engine.is_ferretdb_v1() {
            // FerretDB 2 says 100,000 in `hello` and refuses a write command of more than
            // 25,000 operations (code 16, "Write batch sizes must be between 1 and 25000").
            limits.max_documents = limits.max_documents.min(FERRETDB2_WRITE_BATCH);
            limits.max_statements = limits.max_statements.min(FERRETDB2_WRITE_BATCH);
        }
        Deployment {
            engine,
            limits,
            sharded: hello.msg.as_deref() == Some("isdbgrid"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployment::MIB;

    fn hello() -> Hello {
        Hello {
            msg: None,
            max_bson_object_size: Some(16 * MIB as i64),
            max_write_batch_size: Some(100_000),
        }
    }

    #[test]
    fn engines_and_their_limits() {
        let ferret = BuildInfo {
            version: Some("7.0.77".into()),
            ferretdb_version: Some("v1.24.2".into()),
            ferretdb: None,
        };
        let d = Deployment::from_replies(&hello(), Some(&ferret));
        assert_eq!(
            d.engine(),
            &Engine::FerretDb {
                version: "v1.24.2".into()
            }
        );
        assert_eq!(d.limits().max_statements, 16);
        assert_eq!(d.limits().max_documents, 100_000);
        // Every FerretDB 1.x read scans: one read per batch.
        assert_eq!(d.limits().max_read_identities, usize::MAX);
        assert!(!d.is_sharded());

        // FerretDB 2 on DocumentDB: none of 1.x's workarounds, MongoDB's limits.
        let ferret2 = BuildInfo {
            version: Some("7.0.77".into()),
            ferretdb_version: None,
            ferretdb: Some(FerretDbInfo {
                version: Some("v2.5.0".into()),
            }),
        };
        let d = Deployment::from_replies(&hello(), Some(&ferret2));
        assert_eq!(
            d.engine(),
            &Engine::FerretDb {
                version: "v2.5.0".into()
            }
        );
        // `hello` says 100,000; the engine takes 25,000 operations per write command.
        assert_eq!(d.limits().max_documents, 25_000);
        assert!(!d.engine().is_ferretdb_v1());
        assert!(d.atomic_update_filters() && !d.scans_every_filter());
        assert!(!d.missing_field_is_absent_in_unique_indexes());
        assert_eq!(d.limits().max_statements, 10_000);
        assert_eq!(d.limits().max_read_identities, 4096);

        let mongo = BuildInfo {
            version: Some("7.0.0".into()),
            ferretdb_version: None,
            ferretdb: None,
        };
        let d = Deployment::from_replies(&hello(), Some(&mongo));
        assert_eq!(d.limits().max_statements, 10_000);
        assert_eq!(d.limits().max_read_identities, 4096);
        assert_eq!(d.limits().min_read_identities, 16);

        // A failed buildInfo falls back to the safe limits, not to 10,000 statements.
        let d = Deployment::from_replies(&hello(), None);
        assert_eq!(d.engine(), &Engine::Unknown);
        assert_eq!(
            d.limits(),
            Limits {
                max_documents: 100_000, // from hello, which did answer
                ..Limits::SAFE
            }
        );

        let mongos = Hello {
            msg: Some("isdbgrid".into()),
            ..hello()
        };
        assert!(Deployment::from_replies(&mongos, Some(&mongo)).is_sharded());

        let small = Hello {
            max_bson_object_size: Some(1000),
            max_write_batch_size: Some(5),
            ..hello()
        };
        let d = Deployment::from_replies(&small, Some(&mongo));
        assert_eq!(d.limits().max_document_bytes, 1000);
        assert_eq!(d.limits().max_command_bytes, 500);
        assert_eq!(d.limits().max_statements, 5);
        assert_eq!(d.limits().max_documents, 5);
    }
}
