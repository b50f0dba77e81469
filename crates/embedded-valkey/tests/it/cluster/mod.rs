//! A local cluster against real servers, and the helpers its tests share: [`slots`] (every slot
//! served, keys on the node owning their slot, MOVED from the others, a slot migrated), [`nodes`]
//! (a node stopped, restarted, paused, dropped) and [`replicas`] (they follow their primaries, a
//! manual failover swaps roles, a killed primary is replaced by its replica and rejoins as one).

mod nodes;
mod replicas;
mod slots;

use std::io::BufReader;
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use crate::common::{Reply, command, command_over};
use embedded_valkey::{EmbeddedCluster, slot_of};

/// The node timeout of the fault tests: short, so a dead primary is replaced within seconds.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// `primaries` primaries with one replica each, on the fault tests' [`NODE_TIMEOUT`].
fn with_replicas(primaries: usize) -> EmbeddedCluster {
    EmbeddedCluster::builder()
        .primaries(primaries)
        .replicas(1)
        .node_timeout(NODE_TIMEOUT)
        .start()
        .expect("cluster starts")
}

fn cluster_info(port: u16) -> String {
    match command(port, &["CLUSTER", "INFO"]).expect("CLUSTER INFO") {
        Reply::Bulk(Some(info)) => info,
        other => panic!("CLUSTER INFO answered {other:?}"),
    }
}

fn field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name} in {info}"))
        .trim()
        .to_owned()
}

fn replication(port: u16, name: &str) -> String {
    match command(port, &["INFO", "replication"]).expect("INFO replication") {
        Reply::Bulk(Some(info)) => field(&info, name),
        other => panic!("INFO replication answered {other:?}"),
    }
}

fn connect(port: u16) -> BufReader<TcpStream> {
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a timeout");
    BufReader::new(stream)
}

/// Sets `key` on the primary at `port` and waits until one replica has it (`WAIT 1 1000`,
/// on the same connection: WAIT counts replicas that have this connection's writes).
fn set_replicated(port: u16, key: &str, value: &str) {
    let mut conn = connect(port);
    assert_eq!(
        command_over(&mut conn, &["SET", key, value]).unwrap(),
        Reply::Simple("OK".to_owned())
    );
    assert_eq!(
        command_over(&mut conn, &["WAIT", "1", "1000"]).unwrap(),
        Reply::Integer(1),
        "a replica acknowledges {key}"
    );
}

/// `GET key` on the replica at `port`, after `READONLY` (else it redirects to its primary).
fn get_on_replica(port: u16, key: &str) -> Reply {
    let mut conn = connect(port);
    assert_eq!(
        command_over(&mut conn, &["READONLY"]).unwrap(),
        Reply::Simple("OK".to_owned())
    );
    command_over(&mut conn, &["GET", key]).unwrap()
}

fn assert_every_node_ok(cluster: &EmbeddedCluster) {
    let nodes = cluster.nodes().len().to_string();
    for port in cluster.ports() {
        let info = cluster_info(port);
        assert_eq!(field(&info, "cluster_state"), "ok", "{port}: {info}");
        assert_eq!(field(&info, "cluster_known_nodes"), nodes, "{port}: {info}");
    }
}

/// A key in shard `shard`'s slots, found without asking a server.
fn key_in(cluster: &EmbeddedCluster, shard: usize) -> String {
    let slots = cluster.slots(shard).expect("a shard");
    (0..10_000)
        .map(|n| format!("key:{n}"))
        .find(|key| slots.contains(&slot_of(key.as_bytes())))
        .expect("some key hashes to every shard")
}

fn key_slot(port: u16, key: &str) -> u16 {
    match command(port, &["CLUSTER", "KEYSLOT", key]).expect("CLUSTER KEYSLOT") {
        Reply::Integer(slot) => u16::try_from(slot).expect("a slot"),
        other => panic!("CLUSTER KEYSLOT answered {other:?}"),
    }
}

/// A key whose slot node `index` owns.
fn key_on(cluster: &EmbeddedCluster, index: usize) -> (String, u16) {
    let any = cluster.ports()[0];
    (0..10_000)
        .map(|n| format!("key:{n}"))
        .map(|key| {
            let slot = key_slot(any, &key);
            (key, slot)
        })
        .find(|(_, slot)| cluster.node_for_slot(*slot) == Some(index))
        .expect("some key hashes to every node")
}
