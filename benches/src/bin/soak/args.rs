//! The soak's command line (clap): the load it runs. The library's settings and the faults are
//! fixed in [`crate::settings`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use echostore_testkit::duration;

/// Random faults over several stores sharing one embedded Valkey; exits 0 only if every check
/// held (see docs/soak.md).
#[derive(Debug, Clone, Parser)]
#[command(name = "soak")]
pub(crate) struct Args {
    /// How long the faults run, in seconds (fractions allowed).
    #[arg(long = "seconds", value_name = "N", default_value = "60", value_parser = seconds)]
    pub(crate) run_for: Duration,

    /// Keys in the table; the hottest tenth gets 80% of the gets.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) keys: u64,

    /// Independent stores (as processes) sharing the Valkey.
    #[arg(long, default_value_t = 4, value_parser = at_least_one)]
    pub(crate) stores: usize,

    /// The table's ttl, no jitter (250us, 200ms, 1.5s, 2m); at least 10ms (the check's slack
    /// is 5ms).
    #[arg(long, default_value = "200ms", value_parser = ttl)]
    pub(crate) ttl: Duration,

    /// Tasks per store, each looping get after get.
    #[arg(long, default_value_t = 64, value_parser = at_least_one)]
    pub(crate) workers: usize,

    /// Seeds the faults, the chaos and the key choice (default: random, printed).
    #[arg(long, default_value_t = rand::random(), hide_default_value = true)]
    pub(crate) seed: u64,

    /// Each worker's pause between two gets (0: only yield).
    #[arg(long, default_value = "1ms", value_parser = duration::parse)]
    pub(crate) pause: Duration,

    /// Also write every source read to FILE as CSV, for a closer look.
    #[arg(long, value_name = "FILE")]
    pub(crate) dump: Option<PathBuf>,
}

/// `--seconds`: a number of seconds, fractions allowed.
fn seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?}: {e}"))
}

/// A count of at least one.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse() {
        Ok(0) | Err(_) => Err(format!("{text:?} is not a count of at least 1")),
        Ok(n) => Ok(n),
    }
}

/// `--ttl`: a duration of at least 10ms.
fn ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration::parse(text)?;
    if ttl < Duration::from_millis(10) {
        return Err(format!("{text:?} is under 10ms (the check's slack is 5ms)"));
    }
    Ok(ttl)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no flags the soak runs its documented defaults.
    #[test]
    fn defaults_are_the_documented_run() {
        let args = Args::try_parse_from(["soak"]).expect("no flags parse");
        assert_eq!(args.run_for, Duration::from_secs(60));
        assert_eq!((args.keys, args.stores, args.workers), (1000, 4, 64));
        assert_eq!(args.ttl, Duration::from_millis(200));
        assert_eq!(args.pause, Duration::from_millis(1));
        assert!(args.dump.is_none());
    }

    /// Fractions of seconds, `--pause 0` and an explicit seed parse.
    #[test]
    fn reads_fractions_zero_pause_and_seed() {
        let args =
            Args::try_parse_from(["soak", "--seconds", "1.5", "--pause", "0", "--seed", "7"])
                .expect("flags parse");
        assert_eq!(args.run_for, Duration::from_millis(1500));
        assert_eq!(args.pause, Duration::ZERO);
        assert_eq!(args.seed, 7);
    }

    /// A ttl under the check's slack, zero stores or a ttl without unit are usage errors.
    #[test]
    fn refuses_what_the_check_cannot_use() {
        assert!(Args::try_parse_from(["soak", "--ttl", "5ms"]).is_err());
        assert!(Args::try_parse_from(["soak", "--ttl", "200"]).is_err());
        assert!(Args::try_parse_from(["soak", "--stores", "0"]).is_err());
        assert!(Args::try_parse_from(["soak", "--workers", "0"]).is_err());
        assert!(Args::try_parse_from(["soak", "--keys", "0"]).is_err());
    }
}
