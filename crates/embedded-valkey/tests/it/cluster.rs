//! A local cluster against real servers: it comes up with every slot served,
//! keys live on the node owning their slot (others answer MOVED), a killed
//! primary is seen by the others, and a restart heals the cluster.

use crate::common;

use std::time::{Duration, Instant};

use common::{Reply, command, process_exists};
use embedded_valkey::{CLUSTER_SLOTS, EmbeddedCluster, Error};

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

/// Three primaries reach cluster_state:ok, each knows all three, and
/// CLUSTER SLOTS shows the slot ranges the handle reports, covering all 16384.
#[test]
fn three_primaries_reach_ok_and_cover_every_slot() {
    let cluster = EmbeddedCluster::start(3).expect("cluster starts");
    assert_eq!(cluster.primaries(), 3);
    let ports = cluster.ports();

    for &port in &ports {
        let info = cluster_info(port);
        assert_eq!(field(&info, "cluster_state"), "ok", "{info}");
        assert_eq!(field(&info, "cluster_known_nodes"), "3", "{info}");
        assert_eq!(field(&info, "cluster_slots_assigned"), "16384", "{info}");
        assert_eq!(field(&info, "cluster_size"), "3", "{info}");
    }
    assert_eq!(
        cluster.urls(),
        ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect::<Vec<_>>()
    );

    let Reply::Array(ranges) = command(ports[0], &["CLUSTER", "SLOTS"]).unwrap() else {
        panic!("CLUSTER SLOTS is an array");
    };
    let mut seen: Vec<(i64, i64, i64)> = ranges
        .iter()
        .map(|range| match range {
            Reply::Array(parts) => match (&parts[0], &parts[1], &parts[2]) {
                (Reply::Integer(start), Reply::Integer(end), Reply::Array(primary)) => {
                    let Reply::Integer(port) = primary[1] else {
                        panic!("a port in {primary:?}");
                    };
                    (*start, *end, port)
                }
                other => panic!("a slot range, not {other:?}"),
            },
            other => panic!("a slot range, not {other:?}"),
        })
        .collect();
    seen.sort_unstable();
    let expected: Vec<(i64, i64, i64)> = (0..3)
        .map(|index| {
            let slots = cluster.slots(index).unwrap();
            (
                i64::from(*slots.start()),
                i64::from(*slots.end()),
                i64::from(ports[index]),
            )
        })
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(expected[0].0, 0);
    assert_eq!(expected[2].1, i64::from(CLUSTER_SLOTS) - 1);
    assert_eq!(cluster.node_for_slot(CLUSTER_SLOTS), None);
}

/// A key set on the node that owns its slot is read there; any other node
/// redirects with MOVED to that node, and following it finds the value.
#[test]
fn keys_live_on_the_owner_and_others_redirect_with_moved() {
    let cluster = EmbeddedCluster::start(3).expect("cluster starts");
    let ports = cluster.ports();

    for owner in 0..3 {
        let (key, slot) = key_on(&cluster, owner);
        let value = format!("value-{owner}");
        assert_eq!(
            command(ports[owner], &["SET", &key, &value]).unwrap(),
            Reply::Simple("OK".to_owned())
        );
        let other = (owner + 1) % 3;
        let Reply::Error(moved) = command(ports[other], &["GET", &key]).unwrap() else {
            panic!("node {other} should redirect {key}");
        };
        assert_eq!(
            moved,
            format!("MOVED {slot} 127.0.0.1:{}", ports[owner]),
            "{key}"
        );
        let target: u16 = moved.rsplit(':').next().unwrap().parse().unwrap();
        assert_eq!(
            command(target, &["GET", &key]).unwrap(),
            Reply::Bulk(Some(value))
        );
    }
}

/// Killing a primary is seen: its port goes dead and the other nodes soon
/// report cluster_state:fail. Restarting it brings the cluster back to ok,
/// with the node owning its slots again but holding no data.
#[test]
fn a_killed_primary_fails_the_cluster_and_a_restart_heals_it() {
    let mut cluster = EmbeddedCluster::builder()
        .primaries(3)
        .node_timeout(Duration::from_millis(1000))
        .start()
        .expect("cluster starts");
    let ports = cluster.ports();
    let (key, _) = key_on(&cluster, 2);
    assert_eq!(
        command(ports[2], &["SET", &key, "before"]).unwrap(),
        Reply::Simple("OK".to_owned())
    );

    cluster.stop_node(2).unwrap();
    assert_eq!(cluster.node(2).unwrap().pid(), None);
    assert!(command(ports[2], &["PING"]).is_err());

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = cluster_info(ports[0]);
        if field(&info, "cluster_state") == "fail" {
            assert_ne!(field(&info, "cluster_slots_fail"), "0", "{info}");
            break;
        }
        assert!(Instant::now() < deadline, "never saw the failure: {info}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = cluster
        .wait_until_ok(Duration::from_secs(1))
        .expect_err("a stopped node is not ok");
    assert!(err.to_string().contains("node 2 is stopped"), "{err}");

    cluster.restart_node(2).expect("the node comes back");
    assert_eq!(cluster.ports()[2], ports[2]);
    for &port in &ports {
        assert_eq!(field(&cluster_info(port), "cluster_state"), "ok");
    }
    assert_eq!(
        command(ports[2], &["GET", &key]).unwrap(),
        Reply::Bulk(None),
        "a restarted node comes back empty"
    );
    assert_eq!(
        command(ports[2], &["SET", &key, "after"]).unwrap(),
        Reply::Simple("OK".to_owned())
    );
}

/// Dropping the handle kills every node; bad node indexes are errors, not panics.
#[test]
fn drop_kills_every_node_and_bad_indexes_are_errors() {
    let mut cluster = EmbeddedCluster::start(2).expect("cluster starts");
    let err = cluster.stop_node(2).expect_err("there is no node 2");
    assert!(
        matches!(err, Error::NoSuchNode { index: 2, nodes: 2 }),
        "{err:?}"
    );
    assert!(cluster.restart_node(7).is_err());
    assert!(cluster.node(2).is_none());
    assert!(cluster.slots(2).is_none());

    let pids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 2);
    drop(cluster);
    for pid in pids {
        assert!(!process_exists(pid), "node {pid} still runs");
    }
}

/// A one-node cluster owns every slot and is ok.
#[test]
fn a_single_primary_owns_every_slot() {
    let cluster = EmbeddedCluster::start(1).expect("cluster starts");
    assert_eq!(cluster.slots(0), Some(0..=CLUSTER_SLOTS - 1));
    assert_eq!(
        field(&cluster_info(cluster.ports()[0]), "cluster_state"),
        "ok"
    );
}
