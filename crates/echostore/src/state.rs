//! The table's shared state, below the shards and flights that change it and the handles that
//! read it: [`TableCore`](core::TableCore) (settings, L1, counters, loader), the board callers
//! read flights from (each id's one state), the marks of tags and clear, the repair of ids whose
//! Valkey copy is unsettled, the live schemas, the source budget, and the settings' own types
//! (loser policy, reloader).

pub(crate) mod absence;
pub(crate) mod audit;
pub(crate) mod board;
pub(crate) mod budget;
pub(crate) mod core;
pub(crate) mod flight_id;
pub(crate) mod heard_marks;
pub(crate) mod l1;
pub(crate) mod loser_policy;
pub(crate) mod marks;
pub(crate) mod metrics;
pub(crate) mod pending_write;
pub(crate) mod reload;
pub(crate) mod schemas;
pub(crate) mod stale;
pub(crate) mod stats;
pub(crate) mod unsettled;
