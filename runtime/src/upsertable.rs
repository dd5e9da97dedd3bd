//! The design card's call shape, `doc.upsert(&coll)`: [`Upsertable`], which both derives
//! implement (the guarded upsert for a `NaturalKey` type, the insert-once for a `RandomId`
//! event), with the two small traits generic code needs to configure the call
//! ([`UpsertBuilder`]) and read its outcome ([`WriteOutcome`]). The writes themselves are the
//! collection handle's: this module only names them.

use std::fmt::{Debug, Display};
use std::future::IntoFuture;

use mongodb::ClientSession;
use ulid::Ulid;

// Through the crate root's re-exports: this module names the public API, nothing internal.
use crate::{
    Collection, Error, Insert, InsertOutcome, NaturalKey, RandomId, RetryPolicy, Upsert,
    UpsertOutcome,
};

/// A document that writes itself through its collection handle: `doc.upsert(&coll).await`.
///
/// Both derives implement it, and the call is the handle's own write under another spelling:
///
/// | the type derives | `doc.upsert(&coll)` is | its builder | its outcome |
/// |---|---|---|---|
/// | `NaturalKey` | `coll.upsert(&doc)`, the guarded upsert | [`Upsert`] (`.retry`, `.session`, `.mode`) | [`UpsertOutcome`] |
/// | `RandomId` | `coll.insert(&doc)`, the insert-once | [`Insert`] (`.retry`, `.session`) | [`InsertOutcome`] |
///
/// So an event keeps the verb: a retry, or the same value written again, reports
/// [`InsertOutcome::AlreadyApplied`] and never stores a second document.
///
/// Generic code saves either kind through this one bound; [`UpsertBuilder`] lets it choose the
/// retry policy (and a session), [`WriteOutcome`] lets it read the outcome:
///
/// ```no_run
/// use natural_key::prelude::*;
/// use natural_key::{Collection, Error, RetryPolicy};
///
/// /// Stores `doc` (a post or an event alike), retrying transient failures under `policy`.
/// async fn save<T: Upsertable>(
///     doc: &T,
///     coll: &Collection<T>,
///     policy: RetryPolicy,
/// ) -> Result<T::Outcome, Error> {
///     let outcome = doc.upsert(coll).retry(policy).await?;
///     println!("{outcome}"); // "inserted 01HF7YAT00…", "unchanged …", "already_applied …"
///     Ok(outcome)
/// }
///
/// #[derive(NaturalKey, Serialize, Deserialize)]
/// struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, body: String }
///
/// #[derive(RandomId, Serialize, Deserialize)]
/// struct Click { #[id] #[serde(rename = "_id")] id: Ulid, page: String }
///
/// # async fn f(posts: Collection<Post>, clicks: Collection<Click>) -> Result<(), Error> {
/// let post = Post { slug: "hello".into(), published_at: 1_700_000_000_000, body: "Hi".into() };
/// let click = Click { id: Ulid::new(), page: "/hello".into() };
/// assert_eq!(save(&post, &posts, RetryPolicy::default()).await?.id(), post.id()?);
/// assert_eq!(save(&click, &clicks, RetryPolicy::default()).await?.id(), click.id);
///
/// // Or directly, with the options of the kind's own builder:
/// post.upsert(&posts).mode(WriteMode::Replace).await?;
/// click.upsert(&clicks).await?; // AlreadyApplied: the event is stored once
/// # Ok(()) }
/// ```
///
/// A document can only be written into a collection of its own type, and an event's builder
/// has no `.mode` (an event is never updated): both are compile errors.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no `doc.upsert(&coll)`: it derives neither `NaturalKey` nor `RandomId`",
    label = "not `Upsertable`",
    note = "`#[derive(NaturalKey)]` and `#[derive(RandomId)]` implement `Upsertable` for a type that is `Send + Sync`"
)]
pub trait Upsertable: Send + Sync + Sized {
    /// [`UpsertOutcome`] for a `NaturalKey` type, [`InsertOutcome`] for a `RandomId` type.
    type Outcome: WriteOutcome;

    /// The builder `upsert` returns: [`Upsert`] or [`Insert`]; configure it, then `.await` it.
    type Upsert<'a>: UpsertBuilder<'a> + IntoFuture<Output = Result<Self::Outcome, Error>>
    where
        Self: 'a;

    /// Writes this document into `coll`: the same call as `coll.upsert(self)` (a `NaturalKey`
    /// type) or `coll.insert(self)` (a `RandomId` type), builder options included.
    ///
    /// ```no_run
    /// # use natural_key::prelude::*;
    /// # #[derive(NaturalKey, Serialize, Deserialize)]
    /// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64, body: String }
    /// # async fn f(posts: natural_key::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
    /// match post.upsert(&posts).await? {
    ///     UpsertOutcome::Inserted(id) => println!("new post {id}"),
    ///     UpsertOutcome::Updated(id) => println!("edited {id}"),
    ///     UpsertOutcome::Unchanged(_) => {} // no write was sent
    ///     other => println!("{other}"),     // stale, existed, missing: versions and modes
    /// }
    /// # Ok(()) }
    /// ```
    fn upsert<'a>(&'a self, coll: &'a Collection<Self>) -> Self::Upsert<'a>;
}

/// The options every single write takes, for code generic over [`Upsertable`]:
/// implemented by [`Upsert`] and [`Insert`] (whose own methods of the same names these are).
///
/// ```no_run
/// # use natural_key::prelude::*;
/// use natural_key::{Collection, Error, RetryPolicy};
///
/// /// Stores `doc` with every command in `session`.
/// async fn save_in<T: Upsertable>(
///     doc: &T,
///     coll: &Collection<T>,
///     session: &mut natural_key::mongodb::ClientSession,
/// ) -> Result<T::Outcome, Error> {
///     doc.upsert(coll)
///         .retry(RetryPolicy::default().max_attempts(3))
///         .session(session)
///         .await
/// }
/// ```
pub trait UpsertBuilder<'a>: IntoFuture<IntoFuture: Send> + Send + Sized + sealed::Sealed {
    /// Retries transient failures under `policy` (see [`Upsert::retry`]).
    fn retry(self, policy: RetryPolicy) -> Self;

    /// Runs every command of the call in `session` (see [`Upsert::session`]).
    fn session(self, session: &'a mut ClientSession) -> Self;
}

/// What a single write reports, for code generic over [`Upsertable`]: implemented by
/// [`UpsertOutcome`] and [`InsertOutcome`] (whose own methods of the same names these are).
///
/// ```
/// use natural_key::{InsertOutcome, Ulid, UpsertOutcome, WriteOutcome};
///
/// fn log<O: WriteOutcome>(outcome: O) -> String {
///     format!("{} ({})", outcome.id(), outcome.as_str())
/// }
/// let id = Ulid::nil();
/// assert_eq!(log(UpsertOutcome::Unchanged(id)), format!("{id} (unchanged)"));
/// assert_eq!(log(InsertOutcome::AlreadyApplied(id)), format!("{id} (already_applied)"));
/// ```
pub trait WriteOutcome:
    Copy + Eq + Debug + Display + Send + Sync + 'static + sealed::Sealed
{
    /// The document's id (see [`UpsertOutcome::id`], [`InsertOutcome::id`]).
    fn id(&self) -> Ulid;

    /// The outcome's name: `"inserted"`, `"updated"`, `"unchanged"` or `"already_applied"`.
    fn as_str(&self) -> &'static str;
}

impl<'a, T: NaturalKey + Send + Sync> UpsertBuilder<'a> for Upsert<'a, T> {
    fn retry(self, policy: RetryPolicy) -> Self {
        Upsert::retry(self, policy)
    }

    fn session(self, session: &'a mut ClientSession) -> Self {
        Upsert::session(self, session)
    }
}

impl<'a, T: RandomId + Send + Sync> UpsertBuilder<'a> for Insert<'a, T> {
    fn retry(self, policy: RetryPolicy) -> Self {
        Insert::retry(self, policy)
    }

    fn session(self, session: &'a mut ClientSession) -> Self {
        Insert::session(self, session)
    }
}

impl WriteOutcome for UpsertOutcome {
    fn id(&self) -> Ulid {
        UpsertOutcome::id(self)
    }

    fn as_str(&self) -> &'static str {
        UpsertOutcome::as_str(self)
    }
}

impl WriteOutcome for InsertOutcome {
    fn id(&self) -> Ulid {
        InsertOutcome::id(self)
    }

    fn as_str(&self) -> &'static str {
        InsertOutcome::as_str(self)
    }
}

/// Only the runtime's builders and outcomes implement [`UpsertBuilder`] and [`WriteOutcome`],
/// so either can gain a method without breaking anyone.
mod sealed {
    pub trait Sealed {}
    impl<T: Send + Sync> Sealed for super::Upsert<'_, T> {}
    impl<T: Send + Sync> Sealed for super::Insert<'_, T> {}
    impl Sealed for super::UpsertOutcome {}
    impl Sealed for super::InsertOutcome {}
}
