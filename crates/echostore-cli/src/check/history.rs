//! What `echostore check` records: every operation a worker made, with its start and end on the
//! host's monotonic clock, and every fault the controller injected. The workers are separate OS
//! processes; `CLOCK_MONOTONIC` is one clock for every process of a host, so their timestamps
//! merge into one history without any synchronisation.

use serde::{Deserialize, Serialize};

/// Nanoseconds on the host's `CLOCK_MONOTONIC`: comparable across the processes of one host.
pub(crate) fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // A monotonic clock never reads negative; the casts only change the type.
    (t.tv_sec.max(0) as u64) * 1_000_000_000 + t.tv_nsec.max(0) as u64
}

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    /// `Table::fetch`: `version` is what it returned.
    Read,
    /// `Table::put` of `version`, after the source was moved to it.
    Put,
    /// `Table::invalidate`, after the source was moved to `version`.
    Invalidate,
    /// One call of the loader (a source read): `version` is what the source held.
    Load,
}

/// One operation, as a worker records it (one JSON line each).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Op {
    /// The worker process (0-based).
    #[serde(rename = "p")]
    pub(crate) process: u32,
    /// Which table: an index into [`TABLES`](super::worker::TABLES).
    #[serde(rename = "t")]
    pub(crate) table: u8,
    /// The id within the table's hot set.
    pub(crate) id: u32,
    #[serde(rename = "a")]
    pub(crate) action: Action,
    /// The version read, written, or that the source was moved to (a failed write still moved it).
    #[serde(rename = "v")]
    pub(crate) version: u64,
    /// Whether the call returned `Ok`.
    pub(crate) ok: bool,
    /// Where a read's answer came from (`Origin`'s name); empty for the others.
    #[serde(rename = "o", default, skip_serializing_if = "String::is_empty")]
    pub(crate) origin: String,
    /// The call's start and end, [`now_ns`].
    #[serde(rename = "s")]
    pub(crate) start: u64,
    #[serde(rename = "e")]
    pub(crate) end: u64,
}

impl Op {
    /// A write: it moves the source to a new version (a put also stores it).
    pub(crate) fn is_write(&self) -> bool {
        matches!(self.action, Action::Put | Action::Invalidate)
    }
}

/// One fault the controller injected, from the moment it began to the moment it was over (the
/// server answering again, the proxy healed, the crashed owner restarted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FaultSpan {
    /// The fault's name, as on the command line.
    pub(crate) name: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Whether the model excuses what the fault may cause; a skewed clock causes nothing.
    #[serde(default = "excuses")]
    pub(crate) excuses: bool,
}

fn excuses() -> bool {
    true
}
