//! How an upsert writes a changed document, and which documents it may create or change.

/// How an upsert writes a changed document, and which documents it may create or change.
/// `natural-key ingest --mode` takes `merge`, `replace`, `update` (= [`UpdateOnly`](WriteMode::UpdateOnly))
/// and mongoimport's names where the meaning matches: `upsert` (= [`Replace`](WriteMode::Replace))
/// and `insert` (= [`InsertOnly`](WriteMode::InsertOnly)).
///
/// ```no_run
/// # use natural_key::prelude::*;
/// # #[derive(NaturalKey, Serialize, Deserialize)]
/// # struct Post { #[key] slug: String, #[key(timestamp)] published_at: i64 }
/// # async fn f(posts: natural_key::Collection<Post>, post: Post) -> Result<(), natural_key::Error> {
/// // Fields other code wrote to the stored document disappear too.
/// posts.upsert(&post).mode(WriteMode::Replace).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteMode {
    /// `$set` of the document's fields, `$unset` of the type's fields it leaves out (a `None`
    /// skipped by serde): reading it back gives what was written, and fields that other code
    /// wrote to the stored document, unknown to the type, survive.
    #[default]
    Merge,
    /// Replace the stored document: fields unknown to the type are removed too.
    Replace,
    /// Create documents only: a document whose identity is stored is left alone, reported
    /// [`UpsertOutcome::Existed`](crate::UpsertOutcome::Existed) (a tombstone is no document:
    /// a newer version is created over it).
    InsertOnly,
    /// Change stored documents only, as [`Merge`](WriteMode::Merge) does: a document not
    /// stored (or deleted: a tombstone) is not created, reported
    /// [`UpsertOutcome::Missing`](crate::UpsertOutcome::Missing).
    UpdateOnly,
}
