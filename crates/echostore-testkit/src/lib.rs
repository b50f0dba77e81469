//! What EchoStore is measured with, in one place: the criterion benches and the soak and storm
//! binaries (`benches/`) and the `echostore` readouts (`crates/echostore-cli`) all call these
//! modules instead of keeping copies.
//!
//! - [`fixtures`]: sizes that shrink under `CI`, the two-worker runtime, ids, a filled table.
//! - [`measure`]: latency histograms, the one quantile helper, the polled L1 hit, timed `GET`s,
//!   criterion samples for in-run ratios, the peak RSS.
//! - [`single_flight`]: the bare mutex + oneshot single-flight, the owner's baseline.
//! - [`herd`]: many concurrent misses on one id, through tables or through the baseline.
//! - [`duration`]: `50ms`, `1.5s` on the command line, parsed and rendered.
//!
//! Figures measured with these live in `docs/benchmarks.md`, each with its command.

pub mod duration;
pub mod fixtures;
pub mod herd;
pub mod measure;
pub mod single_flight;

pub use fixtures::{filled_table, measurement_time, random_ids, runtime, size, under_ci};
pub use measure::{Samples, Summary, human, print_ratio, print_summary};

/// The error the shared measurements return: a message for the user, never a panic.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
