//! The write engine: everything that decides and sends a natural-key write, working on a
//! [`Target`](crate::op::Target) (never on the user's handle, which sits above it).
//!
//! - [`batch`]: any input cut into batches, each written under the retry policy and counted.
//! - [`keyed`]: how a document becomes what is sent — a type through its derive, a run-time
//!   document through its `KeySpec` — the one place the typed and untyped APIs differ.
//! - [`guard`]: the guarded upsert of a batch, in rounds of read → [`decide`] → write.
//! - [`events`]: insert-once of events. [`by_key`]: deletes by key. [`relative`]: relative
//!   updates, applied once per operation.
//! - [`send`]: the one send loop every write command goes through (the maintenance writes
//!   too): cut into commands, send, map refusals, check the write concern, place errors.
//! - [`rounds`]: what the upsert and insert rounds share (their bound, the contention
//!   fallback, the refusal of an index the engine did not name); [`mode`]: how a changed
//!   document is written.

pub(crate) mod batch;
pub(crate) mod by_key;
pub(crate) mod decide;
pub(crate) mod events;
pub(crate) mod guard;
pub(crate) mod keyed;
pub(crate) mod mode;
pub(crate) mod relative;
pub(crate) mod rounds;
pub(crate) mod send;
