//! Helpers shared by the integration tests' modules.
//! The mechanisms the benches and tools share too come from `echostore-testkit` and are
//! re-exported here under the names the tests know: [`Proxy`] (a forwarder in front of Valkey
//! that can hold one store's requests), [`Source`] (the counting, gated test double on the source
//! side) and the herds ([`herd`], [`herd_across`], [`spawn_fetch`], [`answers`], [`on_task`]).
//! Here:
//!
//! - `tables` — stores and tables over a `Source`, in-process or on a real Valkey; [`hold_lock`];
//! - `envelopes` — envelopes read from and planted on Valkey;
//! - `info` — figures read from Valkey's `INFO`; `monitor` — round trips, as `MONITOR` shows them;
//! - `nodes` — example binaries run as OS processes, and their JSON lines; `process` — a test
//!   that changes something process-wide, run alone in a process of its own;
//! - `touchy` — [`Touchy`], an id whose `Eq` panics: the way to crash an owner;
//! - `wait` — waits on a condition with a deadline, never on a fixed time; [`settled`].
// A test run with fewer features uses a part of it.
#![allow(dead_code, unused_imports, unreachable_pub)]

mod envelopes;
mod info;
mod monitor;
mod nodes;
mod process;
mod tables;
mod target;
mod touchy;
mod wait;

pub use echostore_testkit::{
    Caller, Proxy, Source, SourceLoader, answers, herd, herd_across, on_task, spawn_fetch,
};
pub use envelopes::{
    OnValkey, envelope, envelope_header, read_envelope, unix_ms, versioned_envelope,
};
pub use info::{command_calls, info_count};
pub use monitor::round_trips_of;
pub use nodes::{example, node_lines, spawn_node};
pub use process::{heavy, in_a_process_of_its_own};
pub use tables::{
    BACKENDS, SET_ID, SET_LOCK, SET_VALUE, builder_on, coherent_store, coherent_table, hold_lock,
    local_table, long_lived, patient_store, set_table, stale_on_valkey, store_on, table_on,
    valkey_table, warm,
};
pub(crate) use target::{RawConn, raw};
pub use target::{
    TARGET_ENV, Valkey, acl_setuser, cluster_seeds, config_set, exists, kill_tracking_connections,
    pause_writes, unpause, valkey,
};
pub use touchy::{POISON, Touchy, touchy};
pub use wait::{settled, until, until_async, until_stats};
