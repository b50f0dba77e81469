//! What `echostore check` records: every operation a worker made, with its start and end on the
//! host's monotonic clock ([`Recorder`]: one JSON line each), and every fault the controller
//! injected. The workers are separate OS processes; `CLOCK_MONOTONIC` is one clock for every
//! process of a host, so their timestamps merge into one history without any synchronisation.

use std::io::{LineWriter, Write};
use std::sync::{Arc, Mutex};

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
    /// `Table::fetch`, or one id of a `Table::fetch_many` ([`Op::batch`]): `version` is what it
    /// returned (`GONE` for `None`: `rows::GONE`).
    Read,
    /// `Table::put` of `version`, after the source was moved to it.
    Put,
    /// `Table::invalidate`, after the source was moved to `version`.
    Invalidate,
    /// `Table::delete`, after the source was moved to `version`: a put of `None` on the table of
    /// `Option` values (`version` is then a row gone at the source), an invalidation on the
    /// others; a write either way.
    Delete,
    /// One call of the loader (a source read): `version` is what the source held.
    Load,
}

/// One operation, as a worker records it (one JSON line each).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Op {
    /// The worker process (0-based).
    #[serde(rename = "p")]
    pub(crate) process: u32,
    /// Which table: an index into [`TABLES`](super::tables::TABLES).
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
    /// Where a read's answer came from (`Origin`'s name); for a call that failed, its error;
    /// empty for the others.
    #[serde(rename = "o", default, skip_serializing_if = "String::is_empty")]
    pub(crate) origin: String,
    /// A read answered as one id of a `fetch_many` (its start and end are the batch call's), or
    /// a load made by the batch loader.
    #[serde(rename = "b", default, skip_serializing_if = "is_false")]
    pub(crate) batch: bool,
    /// For a read made with `ReadOptions::at_least`: the version it had to see (the source's
    /// when it began); 0 for the others.
    #[serde(rename = "l", default, skip_serializing_if = "is_zero")]
    pub(crate) at_least: u64,
    /// The call's start and end, [`now_ns`].
    #[serde(rename = "s")]
    pub(crate) start: u64,
    #[serde(rename = "e")]
    pub(crate) end: u64,
}

impl Op {
    /// A write: it moves the source to a new version (a put also stores it).
    pub(crate) fn is_write(&self) -> bool {
        matches!(
            self.action,
            Action::Put | Action::Invalidate | Action::Delete
        )
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a worker's operations go: its history file, one JSON line each, each written as it is
/// recorded, so that a worker killed mid-run (`kill-worker`) leaves every call it finished on
/// disk. A cheap `Clone`: clones share the file.
#[derive(Clone)]
pub(crate) struct Recorder {
    process: u32,
    out: Arc<Mutex<LineWriter<std::fs::File>>>,
}

impl Recorder {
    /// Records worker `process`'s operations into `file`.
    pub(crate) fn new(process: u32, file: std::fs::File) -> Recorder {
        Recorder {
            process,
            out: Arc::new(Mutex::new(LineWriter::new(file))),
        }
    }

    pub(crate) fn record(&self, mut op: Op) {
        op.process = self.process;
        if let (Ok(line), Ok(mut out)) = (serde_json::to_string(&op), self.out.lock()) {
            let _ = writeln!(out, "{line}");
        }
    }

    pub(crate) fn flush(&self) -> std::io::Result<()> {
        match self.out.lock() {
            Ok(mut out) => out.flush(),
            Err(_) => Ok(()),
        }
    }
}

/// The `freeze` fault's name: the model judges the frozen process's reads after it woke.
pub(crate) const FREEZE: &str = "freeze";

/// What a write records as its origin before it is made, beside the write as it ended, recorded
/// after: a write whose process was killed on the way ([`settle_begun`]) moved the source on and
/// may have reached Valkey, and the model must know its version was written.
pub(crate) const BEGUN: &str = "begun";

/// What a write cut off by its process's death ends as: failed, ending when the fault done to
/// that process was over (it may have landed on Valkey at any time until the process died).
pub(crate) const KILLED: &str = "cut off: its process was killed";

/// The history as the model takes it: each begun write ([`BEGUN`]) dropped where the write's
/// end was recorded, and otherwise kept as a failed write ([`KILLED`]) that ended when the
/// fault done to its process (the span naming it) was over, or at the run's last end.
pub(crate) fn settle_begun(ops: Vec<Op>, spans: &[FaultSpan]) -> Vec<Op> {
    use std::collections::HashSet;
    let key = |o: &Op| (o.process, o.table, o.id, o.version, o.start);
    let ended: HashSet<_> = (ops.iter())
        .filter(|o| o.is_write() && o.origin != BEGUN)
        .map(key)
        .collect();
    let last = ops.iter().map(|o| o.end).max().unwrap_or(0);
    let ended_by = |o: &Op| {
        (spans.iter())
            .filter(|f| f.processes.contains(&o.process) && f.start >= o.start)
            .map(|f| f.end)
            .min()
            .unwrap_or(last)
    };
    (ops.into_iter())
        .filter(|o| o.origin != BEGUN || !ended.contains(&key(o)))
        .map(|o| match o.origin == BEGUN {
            true => Op {
                ok: false,
                origin: KILLED.to_owned(),
                end: ended_by(&o),
                ..o
            },
            false => o,
        })
        .collect()
}

/// What a batch read records for an id its answer left out where no id can be absent (every
/// table but the optional one, or a worker whose batch loader answers `None` for a gone row):
/// every id asked for must be answered (a value or an error).
pub(crate) const LEFT_OUT: &str = "left out of the batch's answer";

/// The origin of a load whose row the batch loader left out, gone at the source
/// ([`rows::leaves_out`](super::rows::leaves_out)): nothing is cached of it, so it covers no
/// later load. And of a read that answered `Error::Absent`, or that a `fetch_many` left out
/// where the batch loader leaves gone rows out: recorded as a read of
/// [`GONE`](super::rows::GONE).
pub(crate) const ABSENT: &str = "absent";

/// One fault the controller injected, from the moment it began to the moment it was over (the
/// server answering again, the proxy healed, the crashed owner restarted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FaultSpan {
    /// The fault's name, as on the command line.
    pub(crate) name: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// When the harm itself was over, where the injection went on tidying up after it: after
    /// `kill-primary`, the cluster serving every slot again (the killed node's restart as a
    /// replica came after). The recovery time is measured from here; the model excuses up to
    /// `end`. `None`: at `end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) healed: Option<u64>,
    /// What the model excuses around the fault.
    #[serde(default)]
    pub(crate) excuses: Excuses,
    /// The processes the fault was done to, when it was done to some only (a freeze, a
    /// replacement, the proxied link): the staleness it excuses is a read by one of them, or a
    /// read that missed a write by one of them. Empty: every process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) processes: Vec<u32>,
}

/// What a fault excuses, within its span and grace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Excuses {
    /// Whatever losing Valkey, a connection or a process may cause: staleness, extra source
    /// reads, divergence, and calls that fail.
    #[default]
    Effects,
    /// Calls that fail, only: a slow or failing source makes reads wait past their bounds or
    /// fail, and changes nothing that an answer or a source read must obey.
    FailedCalls,
    /// Nothing: a skewed clock causes nothing.
    Nothing,
}

impl Excuses {
    /// Whether staleness, extra source reads and divergence are excused.
    pub(crate) fn effects(self) -> bool {
        self == Excuses::Effects
    }

    /// Whether a call that failed is excused.
    pub(crate) fn failed_calls(self) -> bool {
        self != Excuses::Nothing
    }
}

impl FaultSpan {
    /// A span from `start` to `end`, healed at its end, that excuses what it may cause.
    pub(crate) fn new(name: &str, start: u64, end: u64) -> FaultSpan {
        FaultSpan {
            name: name.to_owned(),
            start,
            end,
            healed: None,
            excuses: Excuses::Effects,
            processes: Vec::new(),
        }
    }

    /// The same span, done to `processes` only.
    pub(crate) fn on(self, processes: Vec<u32>) -> FaultSpan {
        FaultSpan { processes, ..self }
    }

    /// When the fault was over, for the recovery time: [`FaultSpan::healed`], or the end.
    pub(crate) fn over(&self) -> u64 {
        self.healed.unwrap_or(self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(process: u32, version: u64, origin: &str, (start, end): (u64, u64)) -> Op {
        Op {
            process,
            table: 0,
            id: 1,
            action: Action::Put,
            version,
            ok: true,
            origin: origin.to_owned(),
            batch: false,
            at_least: 0,
            start,
            end,
        }
    }

    /// A begun write whose end was recorded leaves no trace; one cut off by its process's kill
    /// is a failed write ending when the kill was over; one with no fault naming its process
    /// ends at the run's last end.
    #[test]
    fn begun_writes_settle_as_ended_or_cut_off() {
        let kill = FaultSpan::new("kill-worker", 50, 80).on(vec![1, 3]);
        let ops = vec![
            write(0, 1, BEGUN, (10, 10)),
            write(0, 1, "", (10, 20)),
            write(1, 2, BEGUN, (40, 40)),
            write(2, 3, BEGUN, (60, 60)),
            write(2, 4, "", (90, 100)),
        ];
        let settled = settle_begun(ops, &[kill]);
        let seen: Vec<(u32, u64, bool, &str, u64)> = (settled.iter())
            .map(|o| (o.process, o.version, o.ok, o.origin.as_str(), o.end))
            .collect();
        assert_eq!(
            seen,
            [
                (0, 1, true, "", 20),
                (1, 2, false, KILLED, 80),
                (2, 3, false, KILLED, 100),
                (2, 4, true, "", 100),
            ]
        );
    }
}
