//! Nodes: a killed primary is seen by the others and a restart heals the cluster; without full
//! coverage the rest keeps serving; a paused node answers once the pause ends; dropping the
//! handle kills every node.

use std::time::{Duration, Instant};

use super::{NODE_TIMEOUT, assert_every_node_ok, cluster_info, field, key_in, key_on};
use crate::common::{Reply, command, process_exists};
use embedded_valkey::{EmbeddedCluster, Error};

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

/// Without full coverage, a primary gone without a replica leaves only its own slots
/// unserved: the others say cluster_state:ok and go on serving theirs, while
/// wait_until_served reports the gap.
#[test]
fn without_full_coverage_the_rest_of_the_cluster_keeps_serving() {
    let mut cluster = EmbeddedCluster::builder()
        .primaries(3)
        .full_coverage(false)
        .node_timeout(NODE_TIMEOUT)
        .start()
        .expect("cluster starts");
    let ports = cluster.ports();
    cluster.stop_node(2).unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = cluster_info(ports[0]);
        if field(&info, "cluster_slots_fail") != "0" {
            assert_eq!(field(&info, "cluster_state"), "ok", "{info}");
            break;
        }
        assert!(Instant::now() < deadline, "never saw node 2 fail: {info}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let key = key_in(&cluster, 0);
    assert_eq!(
        command(ports[0], &["SET", &key, "still"]).unwrap(),
        Reply::Simple("OK".to_owned())
    );
    let err = cluster
        .wait_until_served(Duration::from_millis(500))
        .expect_err("shard 2 is not served");
    assert!(err.to_string().contains("node 2, which is down"), "{err}");

    cluster.restart_node(2).expect("the node comes back");
    assert_every_node_ok(&cluster);
}

/// A paused node holds a command until the pause ends, then answers it; pause_node itself
/// returns at once.
#[test]
fn a_paused_node_answers_once_the_pause_ends() {
    let cluster = EmbeddedCluster::start(1).expect("cluster starts");
    let port = cluster.ports()[0];
    let pause = Duration::from_millis(1500);

    let started = Instant::now();
    cluster.pause_node(0, pause).expect("pauses");
    assert!(started.elapsed() < pause, "pause_node returned at once");
    assert_eq!(
        command(port, &["PING"]).unwrap(),
        Reply::Simple("PONG".to_owned())
    );
    let waited = started.elapsed();
    // The server counts the pause in whole milliseconds from when it got CLIENT PAUSE.
    assert!(
        waited + Duration::from_millis(20) >= pause,
        "answered after {waited:?}"
    );
}

/// Dropping the handle kills every node; bad node and shard indexes are errors, not panics,
/// and so is failing over a shard that has no replica.
#[test]
fn drop_kills_every_node_and_bad_requests_are_errors() {
    let mut cluster = EmbeddedCluster::start(2).expect("cluster starts");
    let err = cluster.stop_node(2).expect_err("there is no node 2");
    assert!(
        matches!(err, Error::NoSuchNode { index: 2, nodes: 2 }),
        "{err:?}"
    );
    assert!(cluster.restart_node(7).is_err());
    assert!(cluster.node(2).is_none());
    assert!(cluster.slots(2).is_none());
    let err = cluster.primary_of(2).expect_err("there is no shard 2");
    assert!(
        matches!(
            err,
            Error::NoSuchShard {
                shard: 2,
                shards: 2
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        cluster.pause_node(2, Duration::from_millis(10)),
        Err(Error::NoSuchNode { .. })
    ));
    assert!(matches!(
        cluster.migrate_slot(0, 2),
        Err(Error::NoSuchNode { .. })
    ));
    assert_eq!(cluster.replicas_of(0).unwrap(), Vec::<usize>::new());
    let err = cluster.failover(0).expect_err("no replica to fail over to");
    assert!(err.to_string().contains("no running replica"), "{err}");

    let pids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 2);
    drop(cluster);
    for pid in pids {
        assert!(!process_exists(pid), "node {pid} still runs");
    }
}
