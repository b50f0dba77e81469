//! What EchoStore is tested and measured with, in one place: the integration tests
//! (`crates/echostore/tests`), the criterion benches and the storm and scale binaries (`benches/`)
//! and the `echostore` readouts and check (`crates/echostore-cli`) all call these modules instead
//! of keeping copies.
//!
//! - [`source`]: the counting source, gated or timed, and the loaders built from it.
//! - [`herd`](mod@herd): many concurrent misses on one id: tasks released by one barrier, or a timed herd
//!   through tables, the baseline or moka.
//! - [`proxy`]: a TCP forwarder in front of Valkey that can hold one store's requests or replies,
//!   or slow and silence the whole link (`echostore check`'s `proxy` fault).
//! - [`fixtures`]: sizes that shrink under `CI`, the two-worker runtime, ids, a filled table.
//! - [`measure`]: latency histograms, the one quantile helper, the polled L1 hit, timed `GET`s,
//!   criterion samples for in-run ratios, the peak RSS.
//! - [`info`]: fields of one server's `INFO` text, and its commands processed.
//! - [`single_flight`]: the bare mutex + oneshot single-flight, the owner's baseline.
//! - [`duration`]: `50ms`, `1.5s` on the command line, parsed and rendered.
//!
//! Figures measured with these live in `docs/benchmarks.md`, each with its command.

pub mod duration;
pub mod fixtures;
pub mod herd;
pub mod info;
pub mod measure;
pub mod proxy;
pub mod single_flight;
pub mod source;

pub use fixtures::{
    filled_table, measurement_time, random_ids, runtime, size, under_ci, warm_up_time,
};
pub use herd::{Caller, answers, herd, herd_across, on_task, spawn_fetch, together};
pub use measure::{Samples, Summary, human, print_ratio, print_summary};
pub use proxy::{Link, Proxy};
pub use source::{Source, SourceLoader};

/// The error the shared measurements return: a message for the user, never a panic.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
