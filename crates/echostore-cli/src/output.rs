//! What the readouts share for showing results: the skeleton of every readout's `run`
//! ([`readout`]), a spinner on stderr for runs that take over a second (never in `--json` mode,
//! never when stderr is not a terminal), latency summaries of the shared HDR histogram
//! ([`Latencies`]), number formatting, and the one-object JSON print.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use echostore_testkit::measure::Latencies;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::{CliResult, Outcome};

/// How long a run goes before its spinner appears.
const SPINNER_DELAY: Duration = Duration::from_secs(1);

/// A spinner on stderr that shows itself only once the run has taken a second.
pub(crate) struct Spinner {
    bar: ProgressBar,
    done: Arc<AtomicBool>,
}

impl Spinner {
    /// Starts a hidden spinner; it appears after a second if `wanted` and stderr is a terminal.
    pub(crate) fn start(wanted: bool, message: &str) -> Spinner {
        let bar = ProgressBar::hidden();
        bar.set_message(message.to_owned());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        let done = Arc::new(AtomicBool::new(false));
        if wanted && std::io::stderr().is_terminal() {
            let bar = bar.clone();
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                tokio::time::sleep(SPINNER_DELAY).await;
                if !done.load(Ordering::SeqCst) {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(100));
                }
            });
        }
        Spinner { bar, done }
    }

    /// Says what the run is doing now.
    pub(crate) fn say(&self, message: &str) {
        self.bar.set_message(message.to_owned());
    }

    /// Removes the spinner from the terminal.
    pub(crate) fn finish(self) {
        self.done.store(true, Ordering::SeqCst);
        self.bar.finish_and_clear();
    }
}

/// p50, p99 and max of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Latency {
    /// Requests counted.
    pub(crate) count: u64,
    /// Median, ms.
    pub(crate) p50: f64,
    /// 99th percentile, ms.
    pub(crate) p99: f64,
    /// Slowest, ms.
    pub(crate) max: f64,
}

impl Latency {
    /// Summarises a latency histogram; an empty one is all zeros.
    pub(crate) fn of(h: &Latencies) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |d: Duration| round3(d.as_secs_f64() * 1000.0);
        Latency {
            count: h.len(),
            p50: ms(h.quantile(0.50)),
            p99: ms(h.quantile(0.99)),
            max: ms(h.max()),
        }
    }

    /// `p50 1.2 ms · p99 3.4 ms · max 5.6 ms`.
    pub(crate) fn line(&self) -> String {
        if self.count == 0 {
            return "no requests".to_owned();
        }
        format!(
            "p50 {} ms · p99 {} ms · max {} ms",
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )
    }
}

/// A millisecond figure with as many decimals as it deserves.
pub(crate) fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// Rounds to three decimals, for JSON figures that should not look more precise than they are.
pub(crate) fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `1311621` as `1 311 621`.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// What every readout's `run` does around its measurement: a spinner saying `starting` while
/// `measure` runs, then the report as one JSON object (`json`) or as text (`print_human`), and
/// whether the invariant it checks held (`held`).
pub(crate) async fn readout<R: Serialize>(
    json: bool,
    starting: &str,
    measure: impl AsyncFnOnce(&Spinner) -> CliResult<R>,
    print_human: impl FnOnce(&R),
    held: impl FnOnce(&R) -> bool,
) -> CliResult<Outcome> {
    let spinner = Spinner::start(!json, starting);
    let report = measure(&spinner).await;
    spinner.finish();
    let report = report?;
    if json {
        print_json(&report)?;
    } else {
        print_human(&report);
    }
    Ok(if held(&report) {
        Outcome::Held
    } else {
        Outcome::Failed
    })
}

/// Prints `value` as one line of JSON on stdout.
pub(crate) fn print_json(value: &impl Serialize) -> CliResult<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Thousands are grouped with spaces, as on the course page.
    #[test]
    fn groups_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1 000");
        assert_eq!(grouped(1_311_621), "1 311 621");
    }

    /// A latency summary reads the histogram's quantiles in milliseconds.
    #[test]
    fn summarises_latency() {
        let mut h = Latencies::default();
        for us in [1000, 2000, 3000] {
            h.record(Duration::from_micros(us));
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 3);
        assert!((l.p50 - 2.0).abs() < 0.01);
        assert!((l.max - 3.0).abs() < 0.01);
    }
}
