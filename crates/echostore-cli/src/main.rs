//! The `echostore` command: the readouts of the cache-stampede course page, measured live.
//!
//! Each subcommand is one readout of the seed page, run for real against a Valkey: `race` (the
//! regeneration-lock race and what its losers do), `release` (the token-checked release of the
//! lock), `coherence` (how long a write in one process takes to reach every other process's L1), `early-refresh`
//! (a hot key rebuilt before it expires, against readers waiting at each expiry), `check` (the
//! consistency model verified across worker processes under faults), and `valkey` (an
//! embedded Valkey kept running for other tools). Without `--valkey URL` the readouts start a
//! private embedded Valkey and stop it when they finish.

mod check;
mod children;
mod coherence;
mod early_refresh;
mod inspect;
mod keyspace;
mod output;
mod prometheus;
mod purge;
mod race;
mod release;
mod valkey;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The error every readout returns: a message for the user, never a panic.
pub(crate) type CliError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of the readouts.
pub(crate) type CliResult<T> = Result<T, CliError>;

/// Live readouts of EchoStore's stampede defence: the lock race, the token-checked release,
/// coherence and early refresh, measured against a real Valkey; and the consistency check.
#[derive(Debug, Parser)]
#[command(name = "echostore", version, about, long_about = None)]
struct Cli {
    /// Use the Valkey at this URL (redis://host:port/) instead of starting an embedded one.
    #[arg(long, global = true, value_name = "URL")]
    valkey: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The lock race: N requests on M nodes miss one hot key at once; one reads the source.
    Race(race::RaceArgs),
    /// The token-checked release: compare-and-delete the lock, owned or re-acquired by another.
    Release(release::ReleaseArgs),
    /// Coherence: writes in one store reach the L1 of reader stores in other processes; the lag.
    Coherence(coherence::CoherenceArgs),
    /// Early refresh (XFetch): steady readers over several expiries of one hot key, off and on.
    EarlyRefresh(early_refresh::EarlyRefreshArgs),
    /// The consistency model checked across worker processes under faults (docs/consistency.md).
    Check(check::CheckArgs),
    /// One worker process of `check` (started by it, with --valkey).
    #[command(hide = true)]
    CheckWorker(check::worker::WorkerArgs),
    /// One reader process of `coherence` (started by it, with --valkey).
    #[command(hide = true)]
    CoherenceReader(coherence::reader::ReaderArgs),
    /// Start an embedded Valkey, print its URL and keep it running until Ctrl-C (or until its
    /// server exits by itself: then this exits too, with an error).
    Valkey {
        /// Listen on this loopback port instead of a free one (fails if it is taken).
        #[arg(long)]
        port: Option<u16>,
    },
    /// What Valkey holds for one id: the value's envelope (format, freshness, sizes, PTTL) and the
    /// lock (held? token, PTTL). --valkey defaults to redis://127.0.0.1:6379.
    Inspect(inspect::InspectArgs),
    /// Invalidate one id: DEL its value and lock, as Table::invalidate does (with coherence, every
    /// store's L1 drops it). --valkey defaults to redis://127.0.0.1:6379.
    Purge(purge::PurgeArgs),
}

/// What a readout tells `main` about how to exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The readout ran and its invariant held.
    Held,
    /// The readout ran and its invariant failed (the readout already said so).
    Failed,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return report(format!("cannot start the async runtime: {e}").into()),
    };
    match runtime.block_on(run(cli)) {
        Ok(Outcome::Held) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::FAILURE,
        Err(e) => report(e),
    }
}

async fn run(cli: Cli) -> CliResult<Outcome> {
    let url = cli.valkey.as_deref();
    let readout = async {
        // Each readout holds its target until it ends: dropping an embedded Valkey stops it.
        match &cli.command {
            Command::Race(args) if args.cluster && url.is_some() => {
                Err("race --cluster starts a local cluster of its own: drop --valkey".into())
            }
            Command::Race(args) if args.cluster => {
                race::run(&valkey::Target::cluster().await?, args).await
            }
            Command::Race(args) => race::run(&valkey::Target::open(url).await?, args).await,
            Command::Release(args) => release::run(&valkey::Target::open(url).await?, args).await,
            Command::Coherence(args) => {
                coherence::run(&valkey::Target::open(url).await?, args).await
            }
            Command::EarlyRefresh(args) => {
                early_refresh::run(&valkey::Target::open(url).await?, args).await
            }
            Command::Check(args) => check::run(url, args).await,
            Command::CheckWorker(args) => match url {
                Some(url) => check::worker::run(url, args).await,
                None => Err("check-worker needs --valkey".into()),
            },
            Command::CoherenceReader(args) => match url {
                Some(url) => coherence::reader::run(url, args).await,
                None => Err("coherence-reader needs --valkey".into()),
            },
            Command::Valkey { .. } if url.is_some() => {
                Err("`echostore valkey` starts its own Valkey; drop --valkey".into())
            }
            Command::Valkey { port } => valkey::serve(*port).await.map(|()| Outcome::Held),
            Command::Inspect(args) => inspect::run(url, args).await,
            Command::Purge(args) => purge::run(url, args).await,
        }
    };
    if let Command::Valkey { .. } = cli.command {
        // `valkey` waits for the signal itself and stops cleanly on it.
        return readout.await;
    }
    // A readout stopped by a signal drops its future, and with it any embedded Valkey.
    tokio::select! {
        outcome = readout => outcome,
        signal = interrupted() => {
            signal?;
            Err("interrupted: the readout was stopped before it finished".into())
        }
    }
}

/// Resolves on Ctrl-C, and on Unix also on SIGTERM and SIGHUP.
pub(crate) async fn interrupted() -> CliResult<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        tokio::select! {
            ctrl_c = tokio::signal::ctrl_c() => ctrl_c?,
            _ = terminate.recv() => {}
            _ = hangup.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// Prints `error: …` with the chain of causes and returns the failure exit code.
fn report(error: CliError) -> ExitCode {
    let mut message = format!("error: {error}");
    let mut source = error.source();
    while let Some(cause) = source {
        // Many errors already quote their cause in their own message.
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(&format!("\n  caused by: {cause_text}"));
        }
        source = cause.source();
    }
    eprintln!("{message}");
    ExitCode::FAILURE
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
