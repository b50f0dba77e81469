//! The handles, on the caller's task: the typed [`Table`](table::Table) and its builder, the
//! [`Store`](store::Store), and every call a user makes (`get`, `get_many`, `peek`, `put`,
//! `delete`, tags, per-call options). A read answers from L1 here; a miss joins a flight listed on
//! the board, reads Valkey itself, or asks the id's shard.

pub(crate) mod at_least;
pub(crate) mod batch;
pub(crate) mod config;
pub(crate) mod delete;
pub(crate) mod lookup;
pub(crate) mod miss;
pub(crate) mod peek;
pub(crate) mod read_options;
pub(crate) mod store;
pub(crate) mod table;
pub(crate) mod tags;
