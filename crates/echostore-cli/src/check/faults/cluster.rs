//! The cluster's faults (`--cluster`): a shard's primary killed, its replica voted in and the old
//! node restarted as a replica; a manual failover; a hot id's hash slot migrated to another
//! primary; a primary paused. Each is done with `EmbeddedCluster`, whose calls block, so each
//! runs in `block_in_place`; the shard hit is picked at random.

use std::time::Duration;

use embedded_valkey::EmbeddedCluster;
use rand::Rng;
use rand::seq::IteratorRandom;

use super::{Fault, Reach};
use crate::CliResult;
use crate::check::history::{FaultSpan, now_ns};
use crate::check::tables::{TABLES, rendered};
use crate::check::target::Target;

/// How long `pause-primary` pauses a primary (`CLIENT PAUSE … ALL`).
const PAUSE_PRIMARY: Duration = Duration::from_secs(1);

/// How long a killed primary's replica has to take over before the fault gives up waiting.
const TAKE_OVER_WITHIN: Duration = Duration::from_secs(30);

/// Injects one of [`Fault::CLUSTER`] and returns its span.
pub(super) async fn inject(fault: Fault, reach: &mut Reach<'_>) -> CliResult<FaultSpan> {
    let Target::Cluster(cluster) = &mut *reach.target else {
        return Err(format!("`{}` needs --cluster", fault.name()).into());
    };
    let name = fault.name();
    let shard = rand::rng().random_range(0..cluster.primaries());
    let start = now_ns();
    match fault {
        Fault::KillPrimary => {
            return tokio::task::block_in_place(|| kill_primary(cluster, shard, start));
        }
        Fault::Failover => {
            tokio::task::block_in_place(|| cluster.failover(shard))?;
        }
        Fault::Migrate => {
            let (namespace, keys) = (reach.namespace, reach.keys);
            tokio::task::block_in_place(|| migrate(cluster, namespace, keys))?;
        }
        _ => {
            tokio::task::block_in_place(|| {
                let node = cluster.primary_of(shard)?;
                cluster.pause_node(node, PAUSE_PRIMARY)
            })?;
            tokio::time::sleep(PAUSE_PRIMARY).await;
        }
    }
    Ok(FaultSpan::new(name, start, now_ns()))
}

/// `kill-primary`: SIGKILL the primary of `shard`, wait until its replica serves the shard
/// (healed: every slot served again), then restart the old node, which rejoins as a replica and
/// resyncs (the span ends once the cluster is whole). A replica that never takes over is
/// reported on stderr; the span is recorded all the same, since the harm was done.
fn kill_primary(cluster: &mut EmbeddedCluster, shard: usize, start: u64) -> CliResult<FaultSpan> {
    let killed = cluster.kill_primary(shard)?;
    let served = cluster.wait_for_new_primary(shard, TAKE_OVER_WITHIN);
    let healed = now_ns();
    let back = cluster.restart_node(killed);
    for problem in [served.err(), back.err()].into_iter().flatten() {
        eprintln!("check: kill-primary of shard {shard} (node {killed}): {problem}");
    }
    Ok(FaultSpan {
        healed: Some(healed),
        ..FaultSpan::new(Fault::KillPrimary.name(), start, now_ns())
    })
}

/// `migrate`: the hash slot of a random hot id (of a random table) moved, with its keys, from
/// the primary serving it to another primary, while the workers go on calling.
fn migrate(cluster: &EmbeddedCluster, namespace: &str, keys: u32) -> CliResult<()> {
    let mut rng = rand::rng();
    let table = rng.random_range(0..TABLES.len() as u8);
    let id = rng.random_range(0..keys);
    let names = echostore::protocol::key_names(
        Some(namespace),
        TABLES[usize::from(table)],
        &rendered(table, id),
    )?;
    let slot = embedded_valkey::slot_of(&names.value);
    let from = cluster.primary_of_slot(slot)?;
    let primaries = (0..cluster.primaries())
        .map(|shard| cluster.primary_of(shard))
        .collect::<Result<Vec<usize>, _>>()?;
    let to = primaries
        .into_iter()
        .filter(|&p| p != from)
        .choose(&mut rng)
        .ok_or("no other primary to migrate to")?;
    cluster.migrate_slot(slot, to)?;
    Ok(())
}
