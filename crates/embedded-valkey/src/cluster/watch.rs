//! Asking the running nodes how the cluster is, and waiting until they agree
//! it is up: the one way this crate waits on a cluster. Starting, restarting,
//! failing over and migrating all end in [`EmbeddedCluster::wait_for`], a poll
//! of every running node (`CLUSTER INFO`, `CLUSTER NODES`, and for a replica
//! `INFO replication`) until each passes the [`Health`] asked for and the
//! caller's own condition, or the deadline passes.
//!
//! Agreement is part of being up: a node that still has an old view would
//! redirect a client to the wrong node, so every running node must list the
//! same primaries for the same slots (and, for [`Health::Whole`], the same
//! replicas) as the first running node does.

use std::ops::RangeInclusive;
use std::thread;
use std::time::{Duration, Instant};

use super::topology::Topology;
use super::{EmbeddedCluster, POLL_EVERY};
use crate::error::Error;
use crate::resp::Conn;
use crate::slot::CLUSTER_SLOTS;

/// What [`EmbeddedCluster::wait_for`] asks of every node besides the caller's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Health {
    /// Every node runs, says `cluster_state:ok`, knows every node, lists every
    /// slot served and flags no node as failing; every replica's link to its
    /// primary is up; all agree on every role and slot.
    Whole,
    /// Every running node says `cluster_state:ok`, knows every node and lists
    /// every slot served by a running primary not flagged as failing; all
    /// agree on who serves each slot.
    Served,
}

/// What one running node says now.
#[derive(Debug)]
pub(super) struct NodeView {
    index: usize,
    info: String,
    topology: Topology,
    /// For a replica, its `master_link_status`.
    link: Option<String>,
}

impl EmbeddedCluster {
    /// Waits until every node answers `CLUSTER INFO` with `cluster_state:ok`,
    /// knows every node, lists all 16384 slots served and flags no node as
    /// failing; every replica says `master_link_status:up`; and all nodes
    /// agree on which node is primary or replica of which, and on who serves
    /// each slot.
    ///
    /// Fails at once with [`Error::Cluster`] if a node is stopped (see
    /// [`wait_until_served`](Self::wait_until_served) for a cluster missing a
    /// node), and with what each node said last if `timeout` passes.
    pub fn wait_until_ok(&self, timeout: Duration) -> Result<(), Error> {
        let action = format!("reach cluster_state:ok within {} s", timeout.as_secs_f32());
        if let Some(stopped) = self.stopped().next() {
            return Err(Error::Cluster {
                action,
                reason: format!("node {stopped} is stopped"),
            });
        }
        self.wait_for(&action, timeout, Health::Whole, |_| Ok(()))
    }

    /// Waits until every running node answers `CLUSTER INFO` with
    /// `cluster_state:ok` and knows every node (stopped ones included), all
    /// 16384 slots are served by running primaries that no node flags as
    /// failing, and the running nodes agree on who serves each slot. Stopped
    /// nodes are left out, and replicas' links are not waited for.
    ///
    /// After [`kill_primary`](Self::kill_primary) this is the wait for a
    /// replica to take over. Fails with [`Error::Cluster`], saying what each
    /// node said last, if `timeout` passes.
    pub fn wait_until_served(&self, timeout: Duration) -> Result<(), Error> {
        let action = format!(
            "serve every slot from running primaries within {} s",
            timeout.as_secs_f32()
        );
        self.wait_for(&action, timeout, Health::Served, |_| Ok(()))
    }

    /// The index of the node serving shard `shard`'s slots now, asked of the
    /// first running node that answers: the primary listed with most of
    /// [`slots(shard)`](Self::slots). After a failover that is the promoted
    /// replica; after [`kill_primary`](Self::kill_primary) and before a
    /// replica takes over, the stopped node.
    ///
    /// Fails with [`Error::NoSuchShard`], or [`Error::Cluster`] if no running
    /// node answers or none lists a primary for those slots.
    pub fn primary_of(&self, shard: usize) -> Result<usize, Error> {
        let range = self.shard_range(shard)?;
        let action = format!("say which node serves shard {shard}");
        let topology = self.ask(&action)?;
        let id = topology
            .serving_most(&range)
            .map(|node| node.id.clone())
            .ok_or_else(|| Error::Cluster {
                action: action.clone(),
                reason: format!("no primary is listed with slots {range:?}"),
            })?;
        self.index_of(&id, &action)
    }

    /// The indexes of the replicas of shard `shard`'s current
    /// [primary](Self::primary_of), in ascending order, as the first running
    /// node that answers lists them: stopped ones included (see
    /// [`EmbeddedValkey::pid`](crate::EmbeddedValkey::pid)).
    ///
    /// Fails as [`primary_of`](Self::primary_of) does.
    pub fn replicas_of(&self, shard: usize) -> Result<Vec<usize>, Error> {
        let primary = self.primary_of(shard)?;
        let action = format!("list the replicas of shard {shard}");
        let topology = self.ask(&action)?;
        let mut replicas = topology
            .replicas_of(&self.ids[primary])
            .map(|node| self.index_of(&node.id, &action))
            .collect::<Result<Vec<_>, _>>()?;
        replicas.sort_unstable();
        Ok(replicas)
    }

    /// The index of the primary serving `slot` now (it may have moved with
    /// [`migrate_slot`](Self::migrate_slot) or a failover), asked of the first
    /// running node that answers. [`node_for_slot`](Self::node_for_slot) says
    /// who served it at start.
    ///
    /// Fails with [`Error::Cluster`] if `slot` is not below [`CLUSTER_SLOTS`],
    /// no running node answers, or none lists a primary for `slot`.
    pub fn primary_of_slot(&self, slot: u16) -> Result<usize, Error> {
        let action = format!("say which node serves slot {slot}");
        if slot >= CLUSTER_SLOTS {
            return Err(Error::Cluster {
                action,
                reason: format!("slots are 0..{CLUSTER_SLOTS}"),
            });
        }
        let topology = self.ask(&action)?;
        let id = topology
            .serving(slot)
            .map(|node| node.id.clone())
            .ok_or_else(|| Error::Cluster {
                action: action.clone(),
                reason: "no primary is listed with it".to_owned(),
            })?;
        self.index_of(&id, &action)
    }

    /// [`Health::Whole`] when every node runs, else [`Health::Served`].
    pub(super) fn health(&self) -> Health {
        match self.stopped().next() {
            None => Health::Whole,
            Some(_) => Health::Served,
        }
    }

    /// Polls every running node until each passes `health` and `also` (a
    /// condition on its view of the cluster), or fails with [`Error::Cluster`]
    /// saying `action` and what each node said last once `timeout` passes.
    pub(super) fn wait_for(
        &self,
        action: &str,
        timeout: Duration,
        health: Health,
        also: impl Fn(&Topology) -> Result<(), String>,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let verdicts = self.judge(health, &also);
            if verdicts.iter().all(|(_, verdict)| verdict.is_ok()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let reason = verdicts
                    .iter()
                    .map(|(index, verdict)| match verdict {
                        Ok(()) => format!("node {index}: ok"),
                        Err(why) => format!("node {index}: {why}"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Error::Cluster {
                    action: action.to_owned(),
                    reason,
                });
            }
            thread::sleep(POLL_EVERY);
        }
    }

    /// One round of [`wait_for`](Self::wait_for): each running node's verdict.
    fn judge(
        &self,
        health: Health,
        also: &impl Fn(&Topology) -> Result<(), String>,
    ) -> Vec<(usize, Result<(), String>)> {
        let views: Vec<(usize, Result<NodeView, String>)> = self
            .running()
            .map(|index| (index, self.view(index)))
            .collect();
        let first = views.iter().find_map(|(_, view)| view.as_ref().ok());
        views
            .iter()
            .map(|(index, view)| {
                let verdict = view.as_ref().map_err(Clone::clone).and_then(|view| {
                    self.check(view, health)?;
                    first.map_or(Ok(()), |first| agrees(view, first, health))?;
                    also(&view.topology)
                });
                (*index, verdict)
            })
            .collect()
    }

    /// `Ok` if `view` passes `health` on its own (agreement is checked apart).
    fn check(&self, view: &NodeView, health: Health) -> Result<(), String> {
        let field = |name: &str| info_field(&view.info, name).unwrap_or("?");
        let (state, known) = (field("cluster_state"), field("cluster_known_nodes"));
        let mut problems = Vec::new();
        if state != "ok" || known != self.nodes.len().to_string() {
            problems.push(format!(
                "cluster_state:{state} cluster_known_nodes:{known} cluster_slots_assigned:{}",
                field("cluster_slots_assigned")
            ));
        }
        if let Err(gap) = self.check_served(&view.topology, health) {
            problems.push(gap);
        }
        let failing = view.topology.nodes.iter().find(|node| node.failing);
        if let Some(node) = failing.filter(|_| health == Health::Whole) {
            let who = self.ids.iter().position(|id| *id == node.id);
            problems.push(format!(
                "it flags node {} as failing",
                who.map_or(node.id.clone(), |i| i.to_string())
            ));
        }
        if let Some(link) = view.link.as_deref().filter(|_| health == Health::Whole)
            && link != "up"
        {
            problems.push(format!("master_link_status:{link}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join(", "))
        }
    }

    /// `Ok` if `topology` lists every slot served once, and (for
    /// [`Health::Served`]) each by a running primary not flagged as failing.
    fn check_served(&self, topology: &Topology, health: Health) -> Result<(), String> {
        let mut next: u32 = 0;
        for (first, last, id) in topology.layout() {
            if u32::from(first) != next {
                return Err(format!("slot {next} is not served"));
            }
            next = u32::from(last) + 1;
            let index = self.ids.iter().position(|known| known == id);
            let running = index.is_some_and(|index| self.nodes[index].pid().is_some());
            let failing = topology.node(id).is_some_and(|node| node.failing);
            if health == Health::Served && (!running || failing) {
                let who = index.map_or(id.to_owned(), |index| format!("node {index}"));
                return Err(format!(
                    "slots {first}-{last} are served by {who}, which is down"
                ));
            }
        }
        if next == u32::from(CLUSTER_SLOTS) {
            Ok(())
        } else {
            Err(format!("slot {next} is not served"))
        }
    }

    /// What node `index` says now.
    fn view(&self, index: usize) -> Result<NodeView, String> {
        let mut conn = Conn::connect(&self.nodes[index].endpoint())?;
        let info = conn.text_command(&["CLUSTER", "INFO"])?;
        let topology = Topology::parse(&conn.text_command(&["CLUSTER", "NODES"])?)?;
        let link = if topology.myself().is_some_and(|me| !me.primary) {
            let replication = conn.text_command(&["INFO", "replication"])?;
            Some(
                info_field(&replication, "master_link_status")
                    .unwrap_or("?")
                    .to_owned(),
            )
        } else {
            None
        };
        Ok(NodeView {
            index,
            info,
            topology,
            link,
        })
    }

    /// `CLUSTER NODES` of the first running node that answers.
    pub(super) fn ask(&self, action: &str) -> Result<Topology, Error> {
        let mut tried = Vec::new();
        for index in self.running() {
            let answer = Conn::connect(&self.nodes[index].endpoint())
                .and_then(|mut conn| conn.text_command(&["CLUSTER", "NODES"]))
                .and_then(|text| Topology::parse(&text));
            match answer {
                Ok(topology) => return Ok(topology),
                Err(why) => tried.push(format!("node {index}: {why}")),
            }
        }
        if tried.is_empty() {
            tried.push("no node is running".to_owned());
        }
        Err(Error::Cluster {
            action: action.to_owned(),
            reason: tried.join("; "),
        })
    }

    /// The index of the node with cluster id `id`.
    pub(super) fn index_of(&self, id: &str, action: &str) -> Result<usize, Error> {
        self.ids
            .iter()
            .position(|known| known == id)
            .ok_or_else(|| Error::Cluster {
                action: action.to_owned(),
                reason: format!("node id {id} is not one of this cluster's nodes"),
            })
    }

    /// Shard `shard`'s slots, or [`Error::NoSuchShard`].
    pub(super) fn shard_range(&self, shard: usize) -> Result<RangeInclusive<u16>, Error> {
        self.slots.get(shard).cloned().ok_or(Error::NoSuchShard {
            shard,
            shards: self.slots.len(),
        })
    }

    /// The indexes of the nodes that run.
    pub(super) fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&index| self.nodes[index].pid().is_some())
    }

    /// The indexes of the nodes that are stopped.
    pub(super) fn stopped(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&index| self.nodes[index].pid().is_none())
    }
}

/// `Ok` if `view` lists the same as `first` does: who serves which slots,
/// and for [`Health::Whole`] also every node's role.
fn agrees(view: &NodeView, first: &NodeView, health: Health) -> Result<(), String> {
    let same = match health {
        Health::Whole => view.topology.shape() == first.topology.shape(),
        Health::Served => view.topology.layout() == first.topology.layout(),
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "its CLUSTER NODES differs from node {}'s: {}",
            first.index,
            view.topology.differences(&first.topology)
        ))
    }
}

/// The value of `name:value` in an `INFO`-style reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}
