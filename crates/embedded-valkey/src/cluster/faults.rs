//! The faults a test inflicts on a cluster: a manual failover, a primary
//! killed (and a replica promoted by the others' votes), a node paused.
//! Restarting a node is [`EmbeddedCluster::restart_node`].

use std::time::Duration;

use super::{EmbeddedCluster, READY_TIMEOUT};
use crate::error::Error;

impl EmbeddedCluster {
    /// A manual failover of shard `shard`: sends `CLUSTER FAILOVER` to the
    /// first running replica of its current primary, and waits (at most about
    /// 30 s) until every running node lists that replica as the primary of
    /// the shard's slots and the old primary as its replica, and the cluster
    /// is up again: whole, with the old primary resynced, if every node runs.
    /// Returns the new primary's index.
    ///
    /// The old primary must be running: it stops its clients while the
    /// replica catches up, so no acknowledged write is lost. Fails with
    /// [`Error::NoSuchShard`], or [`Error::Cluster`] if the primary is stopped,
    /// the shard has no running replica, the replica refuses, or the wait
    /// times out.
    pub fn failover(&self, shard: usize) -> Result<usize, Error> {
        let action = format!("fail shard {shard} over to a replica");
        let old = self.primary_of(shard)?;
        if self.nodes[old].pid().is_none() {
            return Err(Error::Cluster {
                action,
                reason: format!(
                    "its primary, node {old}, is stopped: wait_for_new_primary waits for a \
                     replica to take over"
                ),
            });
        }
        let replica = self
            .replicas_of(shard)?
            .into_iter()
            .find(|&index| self.nodes[index].pid().is_some())
            .ok_or_else(|| Error::Cluster {
                action: action.clone(),
                reason: format!("shard {shard} has no running replica"),
            })?;
        self.conn(replica)
            .and_then(|mut conn| conn.ok_command(&["CLUSTER", "FAILOVER"]))
            .map_err(|reason| Error::Cluster {
                action: action.clone(),
                reason: format!("node {replica}: {reason}"),
            })?;
        let range = self.shard_range(shard)?;
        let (old_id, new_id) = (self.ids[old].as_str(), self.ids[replica].as_str());
        let action = format!("fail shard {shard} over from node {old} to node {replica}");
        self.wait_for(&action, READY_TIMEOUT, self.health(), |topology| {
            let serving = topology.serving_most(&range).map(|node| node.id.as_str());
            let old_primary = topology.node(old_id).and_then(|n| n.primary_id.as_deref());
            if serving == Some(new_id) && old_primary == Some(new_id) {
                Ok(())
            } else {
                Err(format!(
                    "it does not list node {replica} as primary of node {old} yet"
                ))
            }
        })?;
        Ok(replica)
    }

    /// Kills (SIGKILL) the node now serving shard `shard`, as
    /// [`stop_node`](Self::stop_node) does, and returns its index.
    ///
    /// Returns at once. Once the other primaries have not heard from it for
    /// the node timeout, they agree it has failed and vote one of its
    /// replicas in, about a second later;
    /// [`wait_for_new_primary`](Self::wait_for_new_primary) or
    /// [`wait_until_served`](Self::wait_until_served) waits for that. A vote
    /// needs a majority of the primaries, so with fewer than 3 primaries, or
    /// no replicas, the shard's slots stay unserved until
    /// [`restart_node`](Self::restart_node).
    ///
    /// Fails as [`primary_of`](Self::primary_of) does.
    pub fn kill_primary(&mut self, shard: usize) -> Result<usize, Error> {
        let primary = self.primary_of(shard)?;
        self.stop_node(primary)?;
        Ok(primary)
    }

    /// Waits until every slot is served by a running primary, as
    /// [`wait_until_served`](Self::wait_until_served) does, and returns the
    /// index of the node then serving shard `shard`: after
    /// [`kill_primary`](Self::kill_primary), the promoted replica.
    ///
    /// Fails as those two do; with [`Error::Cluster`] if no replica has taken
    /// over within `timeout`.
    pub fn wait_for_new_primary(&self, shard: usize, timeout: Duration) -> Result<usize, Error> {
        self.shard_range(shard)?;
        self.wait_until_served(timeout)?;
        self.primary_of(shard)
    }

    /// Pauses node `index` for `duration`: `CLIENT PAUSE <ms> ALL`, so it
    /// answers no client command (writes and reads alike) until the pause
    /// ends, while it keeps talking to the other nodes on the cluster bus (so
    /// it is not failed over). Returns at once; the commands clients sent
    /// meanwhile are answered when the pause ends.
    ///
    /// This crate's own waits ask every running node, so they wait out the
    /// pause too. Fails with [`Error::NoSuchNode`], or [`Error::Cluster`] if
    /// the node is stopped or refuses.
    pub fn pause_node(&self, index: usize, duration: Duration) -> Result<(), Error> {
        if index >= self.nodes.len() {
            return Err(Error::NoSuchNode {
                index,
                nodes: self.nodes.len(),
            });
        }
        let millis = duration.as_millis().to_string();
        self.conn(index)
            .and_then(|mut conn| conn.ok_command(&["CLIENT", "PAUSE", &millis, "ALL"]))
            .map(drop)
            .map_err(|reason| Error::Cluster {
                action: format!("pause node {index}"),
                reason,
            })
    }
}
