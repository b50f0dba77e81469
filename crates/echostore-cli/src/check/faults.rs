//! The faults `echostore check` injects, each named as on the command line, and how each is
//! done to a real Valkey (every node of a cluster), a worker or the link between them; the
//! cluster's own faults are in [`cluster`]. Each injection returns the span the model excuses
//! around it (from the first harm to the moment it was over).

use std::time::Duration;

use echostore_testkit::proxy::{Link, Proxy};
use redis::aio::MultiplexedConnection;

use super::history::{Excuses, FaultSpan, now_ns};
use super::source::{SLOW_READ, Source, Trouble};
use super::target::Target;
use super::workers::Workers;
use crate::CliResult;

mod cluster;

/// How long a `CLIENT PAUSE` lasts.
const PAUSE: Duration = Duration::from_millis(500);

/// How long the proxied link is slow, then silent.
const SLOW_FOR: Duration = Duration::from_millis(500);
const SLOW_BY: Duration = Duration::from_millis(100);
const SILENT_FOR: Duration = Duration::from_millis(1500);
/// How long the proxy then holds the replies on the data connections, and after them what
/// Valkey sends on the coherence connections: past the store's `valkey_timeout` (1 s) and the
/// tracking link's silence bound (0.75 s).
const HELD_FOR: Duration = Duration::from_millis(1500);
/// How far the `skew` fault moves a worker's clock (far past any ttl and stale window), and
/// how long it keeps it there each way.
const SKEW_MS: i64 = 3_600_000;
const SKEWED_FOR: Duration = Duration::from_secs(2);
/// How long the `outage` fault keeps Valkey down.
pub(crate) const OUTAGE: Duration = Duration::from_secs(5);
/// How long the `freeze` fault keeps a worker stopped: past the tables' `lock_ttl`
/// ([`LOCK_TTL`](super::tables::LOCK_TTL)), so that the leases of its loads lapse and another
/// process may take their locks.
const FROZEN_FOR: Duration = Duration::from_secs(3);
/// How long the `slow-source` fault keeps the source slow (each read then takes
/// [`SLOW_READ`] more).
const SLOW_SOURCE_FOR: Duration = Duration::from_secs(3);
/// How long the `failing-source` fault keeps every source read failing.
const FAILING_SOURCE_FOR: Duration = Duration::from_secs(2);

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// `CLIENT KILL` of every store's tracking connection.
    KillTracking,
    /// `CLIENT KILL TYPE normal`: every client connection, data and tracking.
    KillAll,
    /// `CLIENT PAUSE … WRITE`: writes wait, reads go on.
    PauseWrite,
    /// `CLIENT PAUSE … ALL`: every command waits.
    PauseAll,
    /// Every table's marks key and live-schemas key deleted, as `maxmemory` eviction or a hand's
    /// `DEL` would, while the copies stay on Valkey: the processes that knew the marks must put
    /// them back before anyone takes a copy they retired for current, and the schemas' members
    /// put themselves back keeping their generations. It excuses nothing.
    LoseTableKeys,
    /// `SCRIPT FLUSH` on every node: each script's next call meets `NOSCRIPT` and is sent again
    /// in full (`EVAL`), a write's included, as after a failover to a node that never ran it or
    /// an operator's flush. It excuses nothing.
    ScriptFlush,
    /// Valkey killed and started again, empty, on the same port.
    Restart,
    /// Valkey killed, kept down for [`OUTAGE`], then started again empty: an outage.
    Outage,
    /// A table's owner crashes in one worker (a key whose `Eq` panics).
    Crash,
    /// One worker's link to Valkey turns slow, then silent, then heals; then Valkey's replies
    /// to it are held, then its pushes.
    Proxy,
    /// One worker stopped (`SIGSTOP`) for [`FROZEN_FOR`], then let go on (`SIGCONT`): a long
    /// pause of a whole process (a VM descheduled, a swap storm), whose locks lapse meanwhile
    /// and whose L1, calls and pushes all resume where they were.
    Freeze,
    /// One worker stopped as a deploy stops a process, and a new process started in its place:
    /// a rolling restart, whose newcomer joins (tables, schemas, marks, tracking) a fleet that
    /// never stopped.
    Replace,
    /// One worker killed (`SIGKILL`) in the middle of its calls, and a new process started in
    /// its place: an OOM kill or a lost node, whose locks, leases and half-made writes the
    /// fleet must outlive (a write whose end was never recorded counts as failed: it may have
    /// landed).
    KillWorker,
    /// Every source read, in every worker, slowed past the tables' `lock_ttl` for a while: a
    /// database under load. Loads hold their locks by their leases only; readers wait past
    /// their bounds. It excuses the calls that fail, nothing else.
    SlowSource,
    /// Every source read, in every worker, failing for a while: a database that refuses
    /// queries. It excuses the calls that fail, nothing else.
    FailingSource,
    /// One worker's wall clock, as EchoStore reads it, an hour ahead, then an hour behind, then
    /// right again. It excuses nothing: neither order nor life may rest on a wall clock.
    Skew,
    /// A cluster shard's primary killed; its replica voted in; the old node restarted, a replica.
    KillPrimary,
    /// `CLUSTER FAILOVER` on a shard's replica: the two swap roles, no write lost.
    Failover,
    /// A hot id's hash slot moved, keys and all, to another primary.
    Migrate,
    /// `CLIENT PAUSE … ALL` on one primary: its shard answers nothing for a while.
    PausePrimary,
}

impl Fault {
    /// The faults of one server, in the order `all` injects them.
    pub(crate) const ALL: [Fault; 16] = [
        Fault::KillTracking,
        Fault::KillAll,
        Fault::PauseWrite,
        Fault::PauseAll,
        Fault::LoseTableKeys,
        Fault::ScriptFlush,
        Fault::Restart,
        Fault::Outage,
        Fault::Crash,
        Fault::Proxy,
        Fault::Freeze,
        Fault::Replace,
        Fault::KillWorker,
        Fault::SlowSource,
        Fault::FailingSource,
        Fault::Skew,
    ];

    /// The cluster's faults: what `all` injects under `--cluster`.
    pub(crate) const CLUSTER: [Fault; 10] = [
        Fault::KillPrimary,
        Fault::Failover,
        Fault::Migrate,
        Fault::PausePrimary,
        Fault::LoseTableKeys,
        Fault::ScriptFlush,
        Fault::Replace,
        Fault::KillWorker,
        Fault::SlowSource,
        Fault::FailingSource,
    ];

    /// The fault's name on the command line and in the output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::KillTracking => "kill-tracking",
            Fault::KillAll => "kill-all",
            Fault::PauseWrite => "pause-write",
            Fault::PauseAll => "pause-all",
            Fault::LoseTableKeys => "lose-table-keys",
            Fault::ScriptFlush => "script-flush",
            Fault::Restart => "restart",
            Fault::Outage => "outage",
            Fault::Crash => "crash",
            Fault::Proxy => "proxy",
            Fault::Freeze => super::history::FREEZE,
            Fault::Replace => "replace",
            Fault::KillWorker => "kill-worker",
            Fault::SlowSource => "slow-source",
            Fault::FailingSource => "failing-source",
            Fault::Skew => "skew",
            Fault::KillPrimary => "kill-primary",
            Fault::Failover => "failover",
            Fault::Migrate => "migrate",
            Fault::PausePrimary => "pause-primary",
        }
    }

    /// Why this fault cannot be asked for on a cluster (`cluster`) or on one server, if so.
    pub(crate) fn refused(self, cluster: bool) -> Option<String> {
        let name = self.name();
        match (self, cluster) {
            (Fault::Restart | Fault::Outage, true) => Some(format!(
                "`{name}` stops the one server: under --cluster, kill-primary kills a shard's \
                 primary instead"
            )),
            (Fault::Proxy, true) => Some(format!(
                "`{name}` puts a proxy in front of the one server: under --cluster, a client \
                 reaches every node at the address the cluster gives it, past any proxy"
            )),
            (f, false) if Fault::CLUSTER.contains(&f) && !Fault::ALL.contains(&f) => {
                Some(format!("`{name}` is a cluster fault: it needs --cluster"))
            }
            _ => None,
        }
    }
}

/// The faults named by `--faults`: `none`, `all` (the set of the target: one server's, or with
/// `--cluster` the cluster's), or a comma-separated list of names; `kill` and `pause` name both
/// of theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FaultList {
    /// The faults named one by one (or by a group), once each, in the order given.
    named: Vec<Fault>,
    /// Whether `all` was named.
    all: bool,
}

impl FaultList {
    pub(crate) fn parse(text: &str) -> Result<FaultList, String> {
        let mut list = FaultList {
            named: Vec::new(),
            all: false,
        };
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let named: &[Fault] = match word {
                "none" => &[],
                "all" => {
                    list.all = true;
                    &[]
                }
                "kill" => &[Fault::KillTracking, Fault::KillAll],
                "pause" => &[Fault::PauseWrite, Fault::PauseAll],
                _ => match Fault::ALL
                    .iter()
                    .chain(&Fault::CLUSTER)
                    .find(|f| f.name() == word)
                {
                    Some(f) => std::slice::from_ref(f),
                    None => {
                        let known: Vec<&str> = Fault::ALL
                            .iter()
                            .chain(&Fault::CLUSTER)
                            .map(|f| f.name())
                            .collect();
                        return Err(format!(
                            "unknown fault `{word}`: use none, all, kill, pause, or any of {}",
                            known.join(", ")
                        ));
                    }
                },
            };
            for f in named {
                if !list.named.contains(f) {
                    list.named.push(*f);
                }
            }
        }
        Ok(list)
    }

    /// The faults to inject, `all` being the set of the target (`cluster` or one server); a
    /// fault named that the target cannot take is an error that says why.
    pub(crate) fn resolve(&self, cluster: bool) -> Result<Vec<Fault>, String> {
        if let Some(why) = self.named.iter().find_map(|f| f.refused(cluster)) {
            return Err(why);
        }
        let set: &[Fault] = match (self.all, cluster) {
            (false, _) => &[],
            (true, false) => &Fault::ALL,
            (true, true) => &Fault::CLUSTER,
        };
        let mut faults = set.to_vec();
        faults.extend(self.named.iter().filter(|f| !set.contains(f)));
        Ok(faults)
    }
}

/// What a fault needs to reach: the server or cluster, the workers, the proxied link, and the
/// run's hot ids (`migrate` moves one of their slots).
pub(crate) struct Reach<'a> {
    pub(crate) target: &'a mut Target,
    pub(crate) workers: &'a mut Workers,
    pub(crate) proxy: Option<&'a Proxy>,
    /// The run's source of truth (`slow-source` slows it).
    pub(crate) source: &'a Source,
    /// The run's namespace on Valkey, and ids per table.
    pub(crate) namespace: &'a str,
    pub(crate) keys: u32,
    /// The worker the next crash goes to.
    pub(crate) next_crash: usize,
    /// The worker whose clock the next skew moves.
    pub(crate) next_skew: usize,
    /// The worker the next freeze stops.
    pub(crate) next_freeze: usize,
    /// The worker the next `replace` stops, and the one the next `kill-worker` kills.
    pub(crate) next_replace: usize,
    pub(crate) next_kill: usize,
    /// The process number the next `replace` starts, and the run's schemas (a process runs
    /// schema `process % schemas`).
    pub(crate) next_process: u32,
    pub(crate) schemas: u32,
}

/// Injects `fault` and returns its span.
pub(crate) async fn inject(fault: Fault, reach: &mut Reach<'_>) -> CliResult<FaultSpan> {
    let start = now_ns();
    let name = fault.name();
    match fault {
        Fault::KillTracking => kill_tracking(&reach.target.nodes()).await?,
        Fault::KillAll => on_every_node(&reach.target.nodes(), &kill_all()).await?,
        Fault::PauseWrite | Fault::PauseAll => {
            let mode = if fault == Fault::PauseAll {
                "ALL"
            } else {
                "WRITE"
            };
            on_every_node(&reach.target.nodes(), &pause(PAUSE, mode)).await?;
            tokio::time::sleep(PAUSE).await;
        }
        Fault::LoseTableKeys | Fault::ScriptFlush => {
            let nodes = reach.target.nodes();
            match fault {
                Fault::LoseTableKeys => lose_table_keys(&nodes, reach.namespace).await?,
                _ => on_every_node(&nodes, redis::cmd("SCRIPT").arg("FLUSH")).await?,
            }
            let span = FaultSpan::new(name, start, now_ns());
            return Ok(FaultSpan {
                excuses: Excuses::Nothing,
                ..span
            });
        }
        Fault::Restart | Fault::Outage => stop_server(fault, reach.target).await?,
        Fault::Crash | Fault::Skew | Fault::Freeze | Fault::Replace | Fault::KillWorker => {
            return on_a_worker(fault, reach, start).await;
        }
        Fault::SlowSource | Fault::FailingSource => {
            return troubled_source(fault, reach.source, start).await;
        }
        Fault::Proxy => return proxied(reach, start).await,
        Fault::KillPrimary | Fault::Failover | Fault::Migrate | Fault::PausePrimary => {
            return cluster::inject(fault, reach).await;
        }
    }
    Ok(FaultSpan::new(name, start, now_ns()))
}

/// `proxy`: the proxied worker's link slow, then silent, then healed; then Valkey's replies on
/// its data connections held (its commands ran: writes landed that it takes for failed once
/// they time out), then what Valkey sends on its coherence connections (its pushes and the
/// health checks' replies: a tracking link gone quiet while data flows), each for [`HELD_FOR`].
async fn proxied(reach: &Reach<'_>, start: u64) -> CliResult<FaultSpan> {
    let proxy = reach.proxy.ok_or("the proxy fault needs its proxy")?;
    proxy.set(Link::Slow(SLOW_BY));
    tokio::time::sleep(SLOW_FOR).await;
    proxy.set(Link::Silent);
    tokio::time::sleep(SILENT_FOR).await;
    proxy.set(Link::Healthy);
    proxy.hold_replies();
    tokio::time::sleep(HELD_FOR).await;
    proxy.release_replies();
    proxy.hold_pushes();
    tokio::time::sleep(HELD_FOR).await;
    proxy.release_pushes();
    let proxied = reach.workers.processes_on(&proxy.url());
    Ok(FaultSpan::new(Fault::Proxy.name(), start, now_ns()).on(proxied))
}

/// The faults done to one worker, a different one each time: `crash` (its owner; the held
/// writes stall every process), `skew` (its clock; excuses nothing), `freeze`, `replace` and
/// `kill-worker` (done to it alone, and to its newcomer: [`FaultSpan::on`]).
async fn on_a_worker(fault: Fault, reach: &mut Reach<'_>, start: u64) -> CliResult<FaultSpan> {
    let name = fault.name();
    let next = match fault {
        Fault::Crash => &mut reach.next_crash,
        Fault::Skew => &mut reach.next_skew,
        Fault::Freeze => &mut reach.next_freeze,
        Fault::KillWorker => &mut reach.next_kill,
        _ => &mut reach.next_replace,
    };
    let worker = reach.workers.pick(*next);
    *next += 1;
    let process = reach.workers.process_of(worker);
    match fault {
        Fault::Crash => {
            // An owner that did not restart still had its writes held by every node: the pause
            // stalled every process, and is a fault all the same.
            let (start, end, restarted) = reach.workers.crash(worker).await?;
            let name = match restarted {
                true => name,
                false => "crash (no owner restart)",
            };
            Ok(FaultSpan::new(name, start, end))
        }
        Fault::Skew => {
            for by_ms in [SKEW_MS, -SKEW_MS, 0] {
                reach.workers.skew(worker, by_ms).await?;
                if by_ms != 0 {
                    tokio::time::sleep(SKEWED_FOR).await;
                }
            }
            let span = FaultSpan::new(name, start, now_ns());
            Ok(FaultSpan {
                excuses: Excuses::Nothing,
                ..span
            })
        }
        Fault::Freeze => {
            reach.workers.freeze(worker, FROZEN_FOR).await?;
            Ok(FaultSpan::new(name, start, now_ns()).on(vec![process]))
        }
        _ => {
            let newcomer = reach.next_process;
            reach.next_process += 1;
            let schema = newcomer % reach.schemas.max(1);
            let (start, end) = match fault {
                Fault::KillWorker => reach.workers.kill(worker, (newcomer, schema)).await?,
                _ => reach.workers.replace(worker, (newcomer, schema)).await?,
            };
            Ok(FaultSpan::new(name, start, end).on(vec![process, newcomer]))
        }
    }
}

/// `slow-source` (the source slow for [`SLOW_SOURCE_FOR`], and the fault on until the last read
/// begun meanwhile has answered) or `failing-source` (every read failing for
/// [`FAILING_SOURCE_FOR`]). Either excuses only the calls that fail.
async fn troubled_source(fault: Fault, source: &Source, start: u64) -> CliResult<FaultSpan> {
    let (trouble, lasts, after) = match fault {
        Fault::SlowSource => (Trouble::Slow, SLOW_SOURCE_FOR, SLOW_READ),
        _ => (Trouble::Failing, FAILING_SOURCE_FOR, Duration::ZERO),
    };
    source.set(trouble, true)?;
    tokio::time::sleep(lasts).await;
    source.set(trouble, false)?;
    tokio::time::sleep(after).await;
    let span = FaultSpan::new(fault.name(), start, now_ns());
    Ok(FaultSpan {
        excuses: Excuses::FailedCalls,
        ..span
    })
}

/// `restart` (the server killed and started again, empty) or `outage` (kept down for
/// [`OUTAGE`] first): only the embedded server.
async fn stop_server(fault: Fault, target: &mut Target) -> CliResult<()> {
    let Target::Embedded(server) = target else {
        return Err(format!("`{}` needs the embedded Valkey", fault.name()).into());
    };
    if fault == Fault::Outage {
        tokio::task::block_in_place(|| server.stop());
        tokio::time::sleep(OUTAGE).await;
    }
    tokio::task::block_in_place(|| server.restart())?;
    Ok(())
}

/// Why a fault cannot be injected on this target, if it cannot: it is skipped, and said so.
pub(crate) fn unavailable(fault: Fault, embedded: bool) -> Option<&'static str> {
    match fault {
        Fault::Restart | Fault::Outage if !embedded => {
            Some("stopping the server needs control of it: only with the embedded Valkey")
        }
        _ => None,
    }
}

/// `CLIENT KILL TYPE normal SKIPME yes`: every client connection but the one sending it.
fn kill_all() -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes");
    cmd
}

/// `CLIENT PAUSE <ms> <mode>`.
pub(crate) fn pause(how_long: Duration, mode: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("PAUSE").arg(how_long.as_millis() as u64).arg(mode);
    cmd
}

/// Sends `cmd` to every node; fails only if no node took it (a node down for another reason
/// does not stop the fault on the others).
async fn on_every_node(nodes: &[String], cmd: &redis::Cmd) -> CliResult<()> {
    let mut first_error = None;
    let mut done = 0;
    for node in nodes {
        let sent = match control(node).await {
            Ok(mut conn) => cmd.query_async::<redis::Value>(&mut conn).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(_) => done += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (done, first_error) {
        (0, Some(e)) => Err(e.into()),
        _ => Ok(()),
    }
}

/// `DEL` of every marks key (`<namespace>:<table>:{}marks`) and live-schemas key
/// (`<namespace>:schemas:<table>`) of the run, found with `SCAN` on every node and deleted there
/// (a replica refuses, its primary does it); fails if no node answered.
async fn lose_table_keys(nodes: &[String], namespace: &str) -> CliResult<()> {
    let patterns = [
        format!("{namespace}:*:{{}}marks"),
        format!("{namespace}:schemas:*"),
    ];
    let mut reached = 0;
    for node in nodes {
        let Ok(mut conn) = control(node).await else {
            continue;
        };
        reached += 1;
        for pattern in &patterns {
            delete_matching(&mut conn, pattern).await?;
        }
    }
    match reached {
        0 => Err("no node answered".into()),
        _ => Ok(()),
    }
}

/// `DEL` of every key `SCAN` finds on `conn`'s node under `pattern` (one that is not the node's
/// to delete is left).
async fn delete_matching(conn: &mut MultiplexedConnection, pattern: &str) -> CliResult<()> {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        for key in keys {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query_async(conn).await;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// `CLIENT KILL ID` of every store's tracking connection, on every node that answers (fails if
/// none does).
async fn kill_tracking(nodes: &[String]) -> CliResult<()> {
    let mut reached = 0;
    for node in nodes {
        let Ok(mut conn) = control(node).await else {
            continue;
        };
        reached += 1;
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn)
            .await?;
        for id in tracking_clients(&clients) {
            let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(&mut conn)
                .await;
        }
    }
    match reached {
        0 => Err("no node answered".into()),
        _ => Ok(()),
    }
}

/// A fresh connection for one injection (the last one may have been killed with the server).
async fn control(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// The ids of the stores' tracking connections in `CLIENT LIST`'s answer.
fn tracking_clients(list: &str) -> Vec<u64> {
    list.lines()
        .filter(|line| line.split(' ').any(|f| f == "name=echostore-tracking"))
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .filter_map(|id| id.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(text: &str, cluster: bool) -> Result<Vec<Fault>, String> {
        FaultList::parse(text)?.resolve(cluster)
    }

    /// Lists name faults once each, in the order given; groups and unknown names.
    #[test]
    fn fault_lists_parse() {
        assert_eq!(resolved("none", false), Ok(vec![]));
        assert_eq!(resolved("all", false).map(|f| f.len()), Ok(16));
        assert_eq!(resolved("skew", false), Ok(vec![Fault::Skew]));
        assert!(unavailable(Fault::Skew, true).is_none());
        assert!(unavailable(Fault::Restart, false).is_some());
        assert!(unavailable(Fault::Restart, true).is_none());
        assert!(unavailable(Fault::Outage, false).is_some());
        assert!(unavailable(Fault::Outage, true).is_none());
        assert_eq!(
            resolved("crash,kill,crash", false),
            Ok(vec![Fault::Crash, Fault::KillTracking, Fault::KillAll])
        );
        let err = FaultList::parse("reboot").expect_err("unknown");
        assert!(err.contains("unknown fault `reboot`"), "{err}");
        assert!(err.contains("kill-primary"), "{err}");
    }

    /// Under `--cluster`, `all` is the cluster's set; one server's stops and proxy are refused,
    /// and the cluster's faults are refused without it.
    #[test]
    fn the_cluster_has_its_own_faults() {
        assert_eq!(resolved("all", true), Ok(Fault::CLUSTER.to_vec()));
        assert_eq!(
            resolved("all,crash,skew", true).map(|f| f.len()),
            Ok(Fault::CLUSTER.len() + 2)
        );
        assert_eq!(
            resolved("kill,failover", true),
            Ok(vec![Fault::KillTracking, Fault::KillAll, Fault::Failover])
        );
        for refused in ["restart", "outage", "proxy", "all,proxy"] {
            let err = resolved(refused, true).expect_err("refused under --cluster");
            assert!(err.contains("--cluster"), "{err}");
        }
        for refused in ["kill-primary", "failover", "migrate", "pause-primary"] {
            let err = resolved(refused, false).expect_err("needs --cluster");
            assert!(err.contains("needs --cluster"), "{err}");
        }
    }

    /// Only connections named by the store's tracker are picked from `CLIENT LIST`.
    #[test]
    fn tracking_connections_are_found_by_name() {
        let list = "id=3 addr=127.0.0.1:1 name=echostore-tracking flags=t\n\
                    id=4 addr=127.0.0.1:2 name= flags=N\n\
                    id=9 addr=127.0.0.1:3 name=echostore-tracking flags=t\n";
        assert_eq!(tracking_clients(list), vec![3, 9]);
    }
}
