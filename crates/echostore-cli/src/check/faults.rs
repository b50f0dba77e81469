//! The faults `echostore check` injects, each named as on the command line, and how each is
//! done to a real Valkey, a worker or the link between them. Each injection returns the span
//! the model excuses around it (from the first harm to the moment it was over).

use std::time::Duration;

use echostore_testkit::proxy::{Link, Proxy};
use redis::aio::MultiplexedConnection;

use super::history::{FaultSpan, now_ns};
use super::workers::Workers;
use crate::CliResult;

/// How long a `CLIENT PAUSE` lasts.
const PAUSE: Duration = Duration::from_millis(500);

/// How long the proxied link is slow, then silent.
const SLOW_FOR: Duration = Duration::from_millis(500);
const SLOW_BY: Duration = Duration::from_millis(100);
const SILENT_FOR: Duration = Duration::from_millis(1500);
/// How far the `skew` fault moves a worker's clock (far past any ttl and stale window), and
/// how long it keeps it there each way.
const SKEW_MS: i64 = 3_600_000;
const SKEWED_FOR: Duration = Duration::from_secs(2);
/// How long the `outage` fault keeps Valkey down.
pub(crate) const OUTAGE: Duration = Duration::from_secs(5);

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
    /// Valkey killed and started again, empty, on the same port.
    Restart,
    /// Valkey killed, kept down for [`OUTAGE`], then started again empty: an outage.
    Outage,
    /// A table's owner crashes in one worker (a key whose `Eq` panics).
    Crash,
    /// One worker's link to Valkey turns slow, then silent, then heals.
    Proxy,
    /// One worker's wall clock, as EchoStore reads it, an hour ahead, then an hour behind, then
    /// right again. It excuses nothing: neither order nor life may rest on a wall clock.
    Skew,
}

impl Fault {
    /// Every fault, in the order `all` injects them.
    pub(crate) const ALL: [Fault; 9] = [
        Fault::KillTracking,
        Fault::KillAll,
        Fault::PauseWrite,
        Fault::PauseAll,
        Fault::Restart,
        Fault::Outage,
        Fault::Crash,
        Fault::Proxy,
        Fault::Skew,
    ];

    /// The fault's name on the command line and in the output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::KillTracking => "kill-tracking",
            Fault::KillAll => "kill-all",
            Fault::PauseWrite => "pause-write",
            Fault::PauseAll => "pause-all",
            Fault::Restart => "restart",
            Fault::Outage => "outage",
            Fault::Crash => "crash",
            Fault::Proxy => "proxy",
            Fault::Skew => "skew",
        }
    }

    /// `none`, `all`, or a comma-separated list of names; `kill` and `pause` name both of theirs.
    pub(crate) fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        let mut faults = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let named: &[Fault] = match word {
                "none" => &[],
                "all" => &Fault::ALL,
                "kill" => &[Fault::KillTracking, Fault::KillAll],
                "pause" => &[Fault::PauseWrite, Fault::PauseAll],
                _ => match Fault::ALL.iter().find(|f| f.name() == word) {
                    Some(f) => std::slice::from_ref(f),
                    None => {
                        return Err(format!(
                            "unknown fault `{word}`: use none, all, kill, pause, or any of {}",
                            Fault::ALL.map(Fault::name).join(", ")
                        ));
                    }
                },
            };
            for f in named {
                if !faults.contains(f) {
                    faults.push(*f);
                }
            }
        }
        Ok(faults)
    }
}

/// The faults named by `--faults`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FaultList(pub(crate) Vec<Fault>);

impl FaultList {
    pub(crate) fn parse(text: &str) -> Result<FaultList, String> {
        Fault::parse_list(text).map(FaultList)
    }
}

/// What a fault needs to reach: the server (its control connection, and the embedded server to
/// restart), the workers, and the proxied link.
pub(crate) struct Reach<'a> {
    pub(crate) url: &'a str,
    pub(crate) embedded: Option<&'a mut embedded_valkey::EmbeddedValkey>,
    pub(crate) workers: &'a mut Workers,
    pub(crate) proxy: Option<&'a Proxy>,
    /// The worker the next crash goes to.
    pub(crate) next_crash: usize,
    /// The worker whose clock the next skew moves.
    pub(crate) next_skew: usize,
}

/// Injects `fault` and returns its span.
pub(crate) async fn inject(fault: Fault, reach: &mut Reach<'_>) -> CliResult<FaultSpan> {
    let start = now_ns();
    let mut end = None;
    match fault {
        Fault::KillTracking => {
            let mut conn = control(reach.url).await?;
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
        Fault::KillAll => {
            let mut conn = control(reach.url).await?;
            let _: u64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query_async(&mut conn)
                .await?;
        }
        Fault::PauseWrite | Fault::PauseAll => {
            let mut conn = control(reach.url).await?;
            let mode = if fault == Fault::PauseAll {
                "ALL"
            } else {
                "WRITE"
            };
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(PAUSE.as_millis() as u64)
                .arg(mode)
                .query_async(&mut conn)
                .await?;
            tokio::time::sleep(PAUSE).await;
        }
        Fault::Restart => {
            let server = reach
                .embedded
                .as_deref_mut()
                .ok_or("restart needs the embedded Valkey")?;
            tokio::task::block_in_place(|| server.restart())?;
        }
        Fault::Outage => {
            let server = reach
                .embedded
                .as_deref_mut()
                .ok_or("an outage needs the embedded Valkey")?;
            tokio::task::block_in_place(|| server.stop());
            tokio::time::sleep(OUTAGE).await;
            tokio::task::block_in_place(|| server.restart())?;
        }
        Fault::Crash => {
            let worker = reach.next_crash % reach.workers.len();
            reach.next_crash += 1;
            let (crash_start, crash_end) = reach.workers.crash(worker).await?;
            return Ok(FaultSpan {
                name: fault.name().to_owned(),
                start: crash_start,
                end: crash_end,
                excuses: true,
            });
        }
        Fault::Skew => {
            let worker = reach.next_skew % reach.workers.len();
            reach.next_skew += 1;
            for by_ms in [SKEW_MS, -SKEW_MS, 0] {
                reach.workers.skew(worker, by_ms).await?;
                if by_ms != 0 {
                    tokio::time::sleep(SKEWED_FOR).await;
                }
            }
            return Ok(FaultSpan {
                name: fault.name().to_owned(),
                start,
                end: now_ns(),
                excuses: false,
            });
        }
        Fault::Proxy => {
            let proxy = reach.proxy.ok_or("the proxy fault needs its proxy")?;
            proxy.set(Link::Slow(SLOW_BY));
            tokio::time::sleep(SLOW_FOR).await;
            proxy.set(Link::Silent);
            tokio::time::sleep(SILENT_FOR).await;
            end = Some(now_ns());
            proxy.set(Link::Healthy);
        }
    }
    Ok(FaultSpan {
        name: fault.name().to_owned(),
        start,
        end: end.unwrap_or_else(now_ns),
        excuses: true,
    })
}

/// Why a fault cannot be injected on this target, if it cannot.
pub(crate) fn unavailable(fault: Fault, embedded: bool) -> Option<&'static str> {
    match fault {
        Fault::Restart | Fault::Outage if !embedded => {
            Some("stopping the server needs control of it: only with the embedded Valkey")
        }
        _ => None,
    }
}

/// A fresh connection for one injection (the last one may have been killed with the server).
async fn control(url: &str) -> CliResult<MultiplexedConnection> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
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

    /// Lists name faults once each, in the order given; groups and unknown names.
    #[test]
    fn fault_lists_parse() {
        assert_eq!(Fault::parse_list("none"), Ok(vec![]));
        assert_eq!(Fault::parse_list("all").map(|f| f.len()), Ok(9));
        assert_eq!(Fault::parse_list("skew"), Ok(vec![Fault::Skew]));
        assert!(unavailable(Fault::Skew, true).is_none());
        assert!(unavailable(Fault::Restart, false).is_some());
        assert!(unavailable(Fault::Restart, true).is_none());
        assert!(unavailable(Fault::Outage, false).is_some());
        assert!(unavailable(Fault::Outage, true).is_none());
        assert_eq!(
            Fault::parse_list("crash,kill,crash"),
            Ok(vec![Fault::Crash, Fault::KillTracking, Fault::KillAll])
        );
        let err = Fault::parse_list("reboot").expect_err("unknown");
        assert!(err.contains("unknown fault `reboot`"), "{err}");
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
