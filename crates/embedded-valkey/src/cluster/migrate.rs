//! Moving one hash slot, keys included, from its primary to another, the way
//! `valkey-cli --cluster reshard` does: `CLUSTER SETSLOT <slot> IMPORTING` on
//! the target, `MIGRATING` on the source, the slot's keys moved in batches
//! (`CLUSTER GETKEYSINSLOT`, then `MIGRATE ... KEYS`), and `SETSLOT <slot>
//! NODE` on the target, the source and every other primary.
//!
//! While it runs, clients of the source meet `ASK` redirects for keys already
//! moved and `TRYAGAIN` for multi-key commands over keys on both sides.

use super::{EmbeddedCluster, READY_TIMEOUT};
use crate::error::Error;
use crate::resp::Reply;

/// How many keys one `MIGRATE` moves.
const BATCH: usize = 100;
/// `MIGRATE`'s timeout for one batch, in milliseconds.
const MIGRATE_TIMEOUT_MS: &[u8] = b"5000";

impl EmbeddedCluster {
    /// Moves hash slot `slot`, with its keys, from the primary serving it now
    /// to the primary `to_node`, and waits (at most about 30 s) until every
    /// running node lists `to_node` as serving it and the cluster is up
    /// again. Does nothing if `to_node` serves it already. Synchronous: the
    /// slot is migrating only while this runs.
    ///
    /// Fails with [`Error::NoSuchNode`], or with [`Error::Cluster`] if
    /// `to_node` is not a running primary, a step is refused (for example
    /// `MIGRATE` finding a key of the slot on the target already), or the
    /// wait times out. A failure part way leaves the slot migrating, as
    /// `valkey-cli --cluster fix` would find it.
    pub fn migrate_slot(&self, slot: u16, to_node: usize) -> Result<(), Error> {
        if to_node >= self.nodes.len() {
            return Err(Error::NoSuchNode {
                index: to_node,
                nodes: self.nodes.len(),
            });
        }
        let from = self.primary_of_slot(slot)?;
        if from == to_node {
            return Ok(());
        }
        let action = format!("migrate slot {slot} from node {from} to node {to_node}");
        let fail = |reason: String| Error::Cluster {
            action: action.clone(),
            reason,
        };
        let topology = self.ask(&action)?;
        let (from_id, to_id) = (self.ids[from].as_str(), self.ids[to_node].as_str());
        let target_is_primary = topology.node(to_id).is_some_and(|node| node.primary);
        if !target_is_primary || self.nodes[to_node].pid().is_none() {
            return Err(fail(format!("node {to_node} is not a running primary")));
        }
        self.set_slot(to_node, slot, &["IMPORTING", from_id])
            .and_then(|()| self.set_slot(from, slot, &["MIGRATING", to_id]))
            .and_then(|()| self.move_keys(slot, from, to_node))
            .map_err(fail)?;
        // The target first, so the source's MOVED replies already point at an owner.
        let others = topology
            .nodes
            .iter()
            .filter(|node| node.primary && !node.failing && node.id != from_id && node.id != to_id)
            .filter_map(|node| self.ids.iter().position(|id| *id == node.id))
            .filter(|&index| self.nodes[index].pid().is_some());
        for index in [to_node, from].into_iter().chain(others) {
            self.set_slot(index, slot, &["NODE", to_id]).map_err(fail)?;
        }
        self.wait_for(
            &action,
            READY_TIMEOUT,
            self.health(),
            |topology| match topology.serving(slot) {
                Some(node) if node.id == to_id => Ok(()),
                _ => Err(format!(
                    "it does not list node {to_node} with slot {slot} yet"
                )),
            },
        )
    }

    /// `CLUSTER SETSLOT <slot> <how...>` on node `index`.
    fn set_slot(&self, index: usize, slot: u16, how: &[&str]) -> Result<(), String> {
        let slot = slot.to_string();
        let mut args = vec!["CLUSTER", "SETSLOT", &slot];
        args.extend_from_slice(how);
        self.conn(index)
            .and_then(|mut conn| conn.ok_command(&args))
            .map(drop)
            .map_err(|why| format!("node {index}: {why}"))
    }

    /// Moves every key of `slot` from node `from` to node `to`, [`BATCH`] at a time.
    fn move_keys(&self, slot: u16, from: usize, to: usize) -> Result<(), String> {
        let mut conn = self
            .conn(from)
            .map_err(|why| format!("node {from}: {why}"))?;
        let (slot, batch) = (slot.to_string(), BATCH.to_string());
        let port = self.nodes[to].port().to_string();
        loop {
            let keys = match conn.ok_command(&["CLUSTER", "GETKEYSINSLOT", &slot, &batch])? {
                Reply::Array(Some(keys)) => keys,
                other => return Err(format!("CLUSTER GETKEYSINSLOT answered {other:?}")),
            };
            if keys.is_empty() {
                return Ok(());
            }
            let mut args: Vec<&[u8]> = vec![b"MIGRATE", b"127.0.0.1", port.as_bytes()];
            args.extend_from_slice(&[b"", b"0", MIGRATE_TIMEOUT_MS, b"KEYS"]);
            for key in &keys {
                match key {
                    Reply::Bulk(Some(key)) => args.push(key),
                    other => return Err(format!("CLUSTER GETKEYSINSLOT listed {other:?}")),
                }
            }
            conn.ok_command(&args)
                .map_err(|why| format!("node {from}: {why}"))?;
        }
    }
}
