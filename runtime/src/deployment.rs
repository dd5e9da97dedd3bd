//! What the deployment is — engine, limits, topology — as a plain value carried by the handle,
//! and what natural-key does differently on each engine. Detecting it is the `hello`
//! operation's (`op::hello`).

/// The engine behind a connection, as `buildInfo` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Engine {
    /// MongoDB, or an engine that answers like it (DocumentDB, Cosmos DB, mongo-java-server):
    /// the `buildInfo` version.
    MongoDb {
        /// `buildInfo.version`.
        version: String,
    },
    /// FerretDB: 1.x (`buildInfo.ferretdbVersion`, its own SQLite or PostgreSQL backend) or 2.x
    /// (`buildInfo.ferretdb.version`, on Microsoft's DocumentDB extension for PostgreSQL).
    /// [`Engine::is_ferretdb_v1`] tells them apart: they share a name and little else.
    FerretDb {
        /// The FerretDB release, as it reports it (`v1.24.2`, `v2.5.0`).
        version: String,
    },
    /// `buildInfo` failed: the safe [`Limits`] apply.
    Unknown,
}

impl Engine {
    /// Whether this is FerretDB 1.x, whose quirks natural-key works around: it answers no
    /// filter from an index, its `update` does not re-check its filter as it writes, it counts
    /// a missing field as absent in a unique index, and an `update` of about 100 statements
    /// stalls it. FerretDB 2.x, on DocumentDB, has none of them. A FerretDB whose version does
    /// not parse is taken as 1.x (the workarounds are safe anywhere, only slower).
    ///
    /// ```
    /// use natural_key::Engine;
    /// let v1 = Engine::FerretDb { version: "v1.24.2".into() };
    /// let v2 = Engine::FerretDb { version: "v2.5.0".into() };
    /// assert!(v1.is_ferretdb_v1() && !v2.is_ferretdb_v1());
    /// assert!(!Engine::MongoDb { version: "7.0.77".into() }.is_ferretdb_v1());
    /// ```
    pub fn is_ferretdb_v1(&self) -> bool {
        let Engine::FerretDb { version } = self else {
            return false;
        };
        let major = version.trim_start_matches('v').split('.').next();
        major
            .and_then(|m| m.parse::<u32>().ok())
            .is_none_or(|m| m < 2)
    }
}

/// How large the commands natural-key sends may be. Detected with the [`Deployment`];
/// override with [`Deployment::with_limits`].
///
/// ```
/// let limits = natural_key::Limits::SAFE;
/// assert_eq!(limits.max_statements, 16);
/// let custom = natural_key::Limits { max_statements: 1000, ..limits };
/// assert_eq!(custom.max_document_bytes, 16 * 1024 * 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest document the engine stores (`hello.maxBsonObjectSize`); a larger one is
    /// refused before it is sent, as [`Error::DocumentTooLarge`](crate::Error::DocumentTooLarge).
    pub max_document_bytes: usize,
    /// Most bytes of documents or statements in one `insert`/`update` command.
    pub max_command_bytes: usize,
    /// Most statements in one `update` command.
    pub max_statements: usize,
    /// Most documents in one `insert` command (`hello.maxWriteBatchSize`).
    pub max_documents: usize,
    /// Most identities one guard read asks for (one `$in`); a batch with more pending reads
    /// them in several `find`s.
    pub max_read_identities: usize,
    /// Fewest identities one guard read asks for while a batch has more pending. Between the
    /// two bounds the handle measures what its reads cost and settles on the size cheapest
    /// per identity: an engine whose `$in` costs more per value as it grows
    /// (mongo-java-server's is quadratic: 17 µs per value at 100 values, 516 µs at 10,000)
    /// gets small reads, one that answers from an index (MongoDB) large ones. Equal bounds fix
    /// the size; on FerretDB 1.x, which scans the collection for every filter, both are
    /// `usize::MAX`: one read per batch, whatever its size.
    pub min_read_identities: usize,
    /// Whether a batch's first guard read may be one `_id` range from its least to its
    /// greatest id instead of `$in` reads. The handle measures both shapes and uses the one
    /// cheaper per identity: on mongo-java-server, whose `$in` matches every found document
    /// against the whole list, the span is; where the collection holds many other documents
    /// between a batch's ids, it is not. `false` reads by identity only.
    pub span_reads: bool,
    /// Most documents in one reply to a read natural-key keeps whole (a guard read; the
    /// `find`'s `batchSize`). By default the whole result comes in the first reply, up to the
    /// engine's 16 MiB, rather than 101 documents and then a `getMore` per batch (FerretDB
    /// 1.x's `getMore` batches are 101 documents too): fewer round trips, and fewer cursors
    /// for an engine to drop mid-read.
    pub read_batch: usize,
}

pub(crate) const MIB: usize = 1024 * 1024;

impl Limits {
    /// What every engine natural-key knows accepts: used when detection fails. 16 statements
    /// per `update` because FerretDB 1.x keeps every statement's query open until the command
    /// ends, one pooled SQLite connection each; a command of ~100 statements (or several
    /// writers adding up to that) waits forever for a connection.
    pub const SAFE: Limits = Limits {
        max_document_bytes: 16 * MIB,
        max_command_bytes: 8 * MIB,
        max_statements: 16,
        max_documents: 1000,
        max_read_identities: 4096,
        min_read_identities: 16,
        span_reads: true,
        read_batch: WHOLE_READ,
    };

    /// MongoDB's own: half the 16 MiB command limit for the payload, 10,000 statements
    /// (MongoDB accepts 100,000; smaller commands keep replies and retries small).
    pub(crate) const MONGODB: Limits = Limits {
        max_document_bytes: 16 * MIB,
        max_command_bytes: 8 * MIB,
        max_statements: 10_000,
        max_documents: 100_000,
        max_read_identities: 4096,
        min_read_identities: 16,
        span_reads: true,
        read_batch: WHOLE_READ,
    };
}

/// [`Limits::read_batch`]'s default: more documents than a 16 MiB reply holds.
const WHOLE_READ: usize = 1_000_000;

/// What a connection is connected to: engine, limits, whether it is a sharded cluster.
/// [`Collection::open`](crate::Collection::open) detects it once (`hello`, `buildInfo`); open
/// further handles on the same client with
/// [`OpenCollection::deployment`](crate::OpenCollection::deployment) to skip the detection.
///
/// ```no_run
/// # async fn f(client: natural_key::mongodb::Client) -> Result<(), natural_key::Error> {
/// let deployment = natural_key::Deployment::detect(&client).await?;
/// println!("{:?}, sharded: {}", deployment.engine(), deployment.is_sharded());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub(crate) engine: Engine,
    pub(crate) limits: Limits,
    pub(crate) sharded: bool,
}

impl Deployment {
    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The command limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// `true` when connected to a mongos (`hello.msg == "isdbgrid"`).
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// Overrides the detected limits.
    ///
    /// ```no_run
    /// # async fn f(client: natural_key::mongodb::Client) -> Result<(), natural_key::Error> {
    /// let d = natural_key::Deployment::detect(&client).await?;
    /// let limits = d.limits();
    /// let d = d.with_limits(natural_key::Limits { max_statements: 100, ..limits });
    /// # Ok(()) }
    /// ```
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// FerretDB 1.x answers no filter from an index (SQLite's pushdown of a lone `_id` misses
    /// the index expression): every statement scans the collection.
    pub(crate) fn scans_every_filter(&self) -> bool {
        self.engine.is_ferretdb_v1()
    }

    /// Whether an update statement's filter carries the stored hash, so that a change since the
    /// guard's read makes the statement miss and the batch decide again. FerretDB 1.x checks an
    /// update's filter outside the write (two writers' statements guarded by one hash can both
    /// apply), so there the hash buys no atomicity; and any filter but a lone `_id` makes it
    /// decode the whole collection per statement: 200 statements over 2,000 documents took
    /// 13.7–17.0 s filtered by `{_id, _nk_hash}`, 0.8–1.1 s by `{_id}` (docs/performance.md,
    /// "The update filter's shape").
    pub(crate) fn compares_hash_in_update_filter(&self) -> bool {
        self.atomic_update_filters()
    }

    /// Whether an `update` checks its filter in the same step as its write. FerretDB 1.x reads
    /// the matching documents, then writes each back whole: a concurrent update that read the
    /// same version overwrites this one, filter or not.
    pub(crate) fn atomic_update_filters(&self) -> bool {
        !self.engine.is_ferretdb_v1()
    }

    /// FerretDB 1.x lets any number of documents lack a uniquely indexed field; MongoDB counts a
    /// missing field as null.
    pub(crate) fn missing_field_is_absent_in_unique_indexes(&self) -> bool {
        self.engine.is_ferretdb_v1()
    }
}
