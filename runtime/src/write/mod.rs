//! The write engine: everything that decides and sends a natural-key write, working on a
//! [`Target`](crate::op::Target) (never on the user's handle, which sits above it).
//!
//! - [`batch`]: any input cut into batches, each written under the retry policy and counted.
//! - [`upsert`]: the guarded upsert of a batch, in rounds of read → [`decide`] → write.
//! - [`insert`]: insert-once of events.
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
