//! The lock race (the seed's §1 and §2 readout): `--requests` requests spread over `--nodes`
//! independent stores miss one hot key at the same instant. Inside a node they coalesce onto one
//! flight; across nodes the flights race for `SET lock:race:{<key>} <token> NX PX`, one wins and
//! reads the source, the others follow the loser policy (poll, serve stale, default, fail fast).
//! The readout names the source reads (the invariant: exactly one), what the losers did (the
//! nodes' summed [`TableStats`]), the staleness served and the latency, winner's node apart.
//!
//! Each node is its own [`Store`]: its own owner, L1 and Valkey connection, as separate processes
//! would have. A fresh random key per run keeps earlier runs out of the race.
//!
//! The source answers after `--source-latency`, and not before every other node has met the
//! winner's lock (or [`CONTEND_FOR`] after the herd's release; the latencies include this wait):
//! on a loaded machine a node's flight can start later than one source read lasts, and then it
//! would find the value instead of racing for it. The readout is about the race, so the source
//! waits for it.

use std::time::Duration;

use clap::{Args, ValueEnum};
use echostore::{Error, LoserPolicy, Origin, Table, TableStats};
use echostore_testkit::{Source, duration, together};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::output::{self, Spinner};
use crate::valkey::Target;
use crate::{CliResult, Outcome};
use report::RaceReport;

mod report;

/// The table every node of the race opens.
const TABLE: &str = "race";

/// Logical life of the previous copy laid down for `--losers stale`.
const PREFILL_TTL: Duration = Duration::from_millis(20);

/// How long a stale copy stays servable, for the prefill and the race tables alike.
const STALE_FOR: Duration = Duration::from_secs(60);

/// How long, from the herd's release, the source may wait for the other nodes to meet the lock.
/// The lock (at least 5 s, and 4× the source latency) outlasts the latency plus this.
const CONTEND_FOR: Duration = Duration::from_secs(2);

/// Flags of `echostore race`.
#[derive(Debug, Args)]
pub(crate) struct RaceArgs {
    /// Run the race on a local three-primary Valkey Cluster instead of one server (the hot key's
    /// value and lock share a hash slot, so every script runs on one shard).
    #[arg(long)]
    pub(crate) cluster: bool,
    /// What the requests that lose the lock do.
    #[arg(long, value_enum, default_value_t = Losers::Poll)]
    losers: Losers,

    /// Independent stores (like separate processes) sharing the one Valkey.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    nodes: u32,

    /// Requests in the herd, spread evenly over the nodes; all miss the hot key at once.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    requests: u32,

    /// How long one read of the source takes at least, e.g. 50ms or 1s (it also waits until
    /// every other node has met the lock, at most 2 s from the herd's release).
    #[arg(long, default_value = "50ms", value_parser = duration::parse)]
    source_latency: Duration,

    /// Each request reads this many hot keys with one `fetch_many` (a list endpoint), and the
    /// nodes load them with a batch loader: the invariant becomes one source read per key.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) batch: u32,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    json: bool,

    /// Serve the race's metrics for Prometheus on this loopback address (`127.0.0.1:9898`, or
    /// just a port) while it runs: `GET /metrics`.
    #[arg(long, value_name = "ADDR", value_parser = crate::prometheus::parse_addr)]
    prometheus: Option<std::net::SocketAddr>,

    /// With --prometheus, keep serving this long after the readout is printed (e.g. 30s), for a
    /// last scrape of the final figures.
    #[arg(long, value_name = "D", default_value = "0s", value_parser = duration::parse, requires = "prometheus")]
    prometheus_linger: Duration,
}

/// The loser policy, as chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Losers {
    /// Sleep briefly and re-read the cache until the winner's fill lands.
    Poll,
    /// Serve the previous (stale) copy at once while the winner rebuilds.
    Stale,
    /// Serve a placeholder at once; it is cached nowhere.
    Default,
    /// Fail at once with LockBusy.
    FailFast,
}

impl Losers {
    fn name(self) -> &'static str {
        match self {
            Losers::Poll => "poll",
            Losers::Stale => "stale",
            Losers::Default => "default",
            Losers::FailFast => "fail-fast",
        }
    }
}

/// What the race caches: a body, and who produced it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payload {
    /// A recognisable text: the fresh read, the previous copy or the placeholder.
    body: String,
    /// The node whose loader produced it, if a loader did.
    loaded_by: Option<u32>,
}

impl Payload {
    const PLACEHOLDER: &'static str = "placeholder: the default while another node rebuilds";
    const PREVIOUS: &'static str = "previous copy, kept past its ttl";
}

/// How one request of the herd ended.
struct Answer {
    node: u32,
    latency: Duration,
    result: Result<(Origin, Option<Duration>), Error>,
}

/// Runs the race and prints its readout.
pub(crate) async fn run(target: &Target, args: &RaceArgs) -> CliResult<Outcome> {
    if args.requests < args.nodes {
        return Err(format!(
            "--requests {} is fewer than --nodes {}: every node needs at least one request",
            args.requests, args.nodes
        )
        .into());
    }
    if let Some(addr) = args.prometheus {
        crate::prometheus::serve(addr)?;
    }
    let outcome = output::readout(
        args.json,
        "lock race: starting the nodes",
        async |spinner| race(target, args, spinner).await,
        |report| report::print_human(report, args, target),
        |report| report.invariant_held,
    )
    .await;
    if outcome.is_ok() && args.prometheus.is_some() && !args.prometheus_linger.is_zero() {
        tokio::time::sleep(args.prometheus_linger).await;
    }
    outcome
}

async fn race(target: &Target, args: &RaceArgs, spinner: &Spinner) -> CliResult<RaceReport> {
    let key = format!("hot-{:016x}", rand::random::<u64>());
    let keys = hot_keys(&key, args.batch);
    if args.losers == Losers::Stale {
        spinner.say("lock race: laying down a stale copy");
        for key in &keys {
            prefill(target, key).await?;
        }
    }

    // One source behind every node: it counts each read, takes the latency, then waits for the
    // gate that [`open_once_contended`] opens.
    let source = Source::gated().with_latency(args.source_latency);
    let mut nodes = Vec::with_capacity(args.nodes as usize);
    for node in 0..args.nodes {
        nodes.push(start_node(target, node, args, source.clone()).await?);
    }

    spinner.say("lock race: the herd is missing the hot key");
    let (answers, ()) = tokio::join!(
        herd(&nodes, &keys, args.requests),
        open_once_contended(&nodes, args.requests, &source)
    );
    let answers = answers?;

    let stats: Vec<TableStats> = nodes.iter().map(Table::stats).collect();
    if args.prometheus.is_some() {
        // The nodes share the label `table="race"`: publish their sum, which no node's own
        // export can lower (a counter keeps the highest absolute value it is given).
        stats.iter().copied().sum::<TableStats>().export(TABLE);
    }
    // Leave nothing behind on the user's Valkey: the values (the winners released the locks).
    if let Some(first) = nodes.first() {
        for key in &keys {
            first
                .invalidate(key)
                .await
                .map_err(|e| format!("cleaning up the race key: {e}"))?;
        }
    }
    Ok(report::summarise(
        target,
        args,
        key,
        source.calls() as u64,
        &stats,
        &answers,
    ))
}

/// The hot keys of a race: the key itself, or `batch` keys made from it.
fn hot_keys(key: &str, batch: u32) -> Vec<String> {
    if batch == 1 {
        return vec![key.to_owned()];
    }
    (0..batch).map(|i| format!("{key}-{i}")).collect()
}

/// Lays down a copy of the hot key whose logical life has already passed, for serve-stale.
async fn prefill(target: &Target, key: &str) -> CliResult<()> {
    let store = target.store_builder().require_valkey(true).build().await?;
    let table = store
        .table::<String, Payload>(TABLE)
        .ttl(PREFILL_TTL)
        .jitter(0.0)
        .stale_for(STALE_FOR)
        .loader(|_id: String| async {
            Err::<Payload, _>(std::io::Error::other("the prefill table never loads"))
        })
        .build()
        .await?;
    let previous = Payload {
        body: Payload::PREVIOUS.to_owned(),
        loaded_by: None,
    };
    table
        .put(&key.to_owned(), previous)
        .await
        .map_err(|e| format!("laying down the stale copy: {e}"))?;
    // `fresh_until` was stamped before `put` returned: one ttl (and a ms of rounding) from now
    // the copy is stale on Valkey, and stays servable for STALE_FOR.
    tokio::time::sleep(PREFILL_TTL + Duration::from_millis(2)).await;
    Ok(())
}

/// Opens the source's gate once every node with a request, but the winner, has lost the lock,
/// or after [`CONTEND_FOR`].
async fn open_once_contended(nodes: &[Table<String, Payload>], requests: u32, source: &Source) {
    let others = nodes.len().min(requests as usize).saturating_sub(1);
    let give_up = Instant::now() + CONTEND_FOR;
    while Instant::now() < give_up {
        // Nodes, not flights: under stale, default and fail-fast a node's later requests start
        // new flights that lose again, so one node alone can lose the lock several times.
        let lost = nodes.iter().filter(|n| n.stats().lock_lost > 0).count();
        if lost >= others {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    source.release();
}

/// One node: its own store and table, a loader that reads the shared [`Source`].
async fn start_node(
    target: &Target,
    node: u32,
    args: &RaceArgs,
    source: Source,
) -> CliResult<Table<String, Payload>> {
    let store = target
        .store_builder()
        .require_valkey(true)
        .build()
        .await
        .map_err(|e| format!("starting node {node}: {e}"))?;
    // The lock outlives any read of the source, so the winner never loses it mid-rebuild.
    let lock_ttl = (args.source_latency * 4).max(Duration::from_secs(5));
    let policy = match args.losers {
        Losers::Poll => LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: lock_ttl,
        },
        Losers::Stale => LoserPolicy::ServeStale,
        Losers::Default => LoserPolicy::Default(Payload {
            body: Payload::PLACEHOLDER.to_owned(),
            loaded_by: None,
        }),
        Losers::FailFast => LoserPolicy::FailFast,
    };
    let stale_for = match args.losers {
        Losers::Stale => STALE_FOR,
        _ => Duration::ZERO,
    };
    let batch_source = source.clone();
    let table = store
        .table::<String, Payload>(TABLE)
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .stale_for(stale_for)
        .lock_ttl(lock_ttl)
        .losers(policy)
        .batch_loader(move |ids: Vec<String>| {
            let source = batch_source.clone();
            async move {
                source.read_many(ids.len()).await;
                let payload = || Payload {
                    body: "fresh from the source".to_owned(),
                    loaded_by: Some(node),
                };
                Ok::<_, std::io::Error>(
                    ids.into_iter()
                        .map(|id| (id, payload()))
                        .collect::<std::collections::HashMap<_, _>>(),
                )
            }
        })
        .loader(move |_id: String| {
            let source = source.clone();
            async move {
                source.read().await;
                Ok::<_, std::io::Error>(Payload {
                    body: "fresh from the source".to_owned(),
                    loaded_by: Some(node),
                })
            }
        })
        .build()
        .await
        .map_err(|e| format!("starting node {node}'s table: {e}"))?;
    Ok(table)
}

/// Fires `requests` reads of `keys` (a `fetch` of the one key, or a `fetch_many` of them all),
/// round-robin over the nodes, released together by a barrier: one answer per key read.
async fn herd(
    nodes: &[Table<String, Payload>],
    keys: &[String],
    requests: u32,
) -> CliResult<Vec<Answer>> {
    let tasks = together(requests as usize, |i| {
        let node = (i % nodes.len()) as u32;
        let (table, keys) = (nodes[node as usize].clone(), keys.to_vec());
        async move {
            let started = Instant::now();
            let results = match &keys[..] {
                [key] => vec![table.fetch(key).await],
                keys => table
                    .fetch_many(keys)
                    .await
                    .into_iter()
                    .map(|(_, r)| r)
                    .collect(),
            };
            let latency = started.elapsed();
            results
                .into_iter()
                .map(|result| Answer {
                    node,
                    latency,
                    result: result.map(|f| (f.origin, f.stale_by)),
                })
                .collect::<Vec<_>>()
        }
    });
    let mut answers = Vec::with_capacity(tasks.len() * keys.len());
    for joined in futures::future::join_all(tasks).await {
        answers.extend(joined.map_err(|e| format!("a request task failed: {e}"))?);
    }
    Ok(answers)
}
