//! A local cluster against real servers: it comes up with every slot served,
//! keys live on the node owning their slot (others answer MOVED), a killed
//! primary is seen by the others, and a restart heals the cluster. With
//! replicas: they follow their primaries, a manual failover swaps roles, a
//! killed primary is replaced by its replica and rejoins as one. A migrated
//! slot's keys move with it, and a paused node answers once the pause ends.

use crate::common;

use std::io::BufReader;
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use common::{Reply, command, command_over, process_exists};
use embedded_valkey::{CLUSTER_SLOTS, EmbeddedCluster, Error, slot_of};

/// The node timeout of the fault tests: short, so a dead primary is replaced within seconds.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

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

/// slot_of hashes keys as the server's CLUSTER KEYSLOT does, hash tags included.
#[test]
fn slot_of_agrees_with_the_servers_keyslot() {
    let cluster = EmbeddedCluster::start(1).expect("cluster starts");
    let port = cluster.ports()[0];
    let tagged = ["{user:1}.name", "x{}{y}", "a{{b}}c", "{}", "{", "}{", "été"];
    let plain = (0..200).map(|n| format!("key:{n}"));
    for key in tagged.into_iter().map(str::to_owned).chain(plain) {
        assert_eq!(slot_of(key.as_bytes()), key_slot(port, &key), "{key:?}");
    }
}

/// With one replica per primary, the replicas come after the primaries, follow their own
/// primary with the link up, and have a key written to it once WAIT says one replica got it.
#[test]
fn replicas_follow_their_primaries_and_receive_their_writes() {
    let cluster = EmbeddedCluster::builder()
        .primaries(2)
        .replicas(1)
        .node_timeout(NODE_TIMEOUT)
        .start()
        .expect("cluster starts");
    let ports = cluster.ports();
    assert_eq!((cluster.primaries(), cluster.replicas()), (2, 1));
    assert_eq!(ports.len(), 4);
    assert_every_node_ok(&cluster);

    for shard in 0..2 {
        let replica = 2 + shard;
        assert_eq!(cluster.primary_of(shard).unwrap(), shard);
        assert_eq!(cluster.replicas_of(shard).unwrap(), [replica]);
        assert_eq!(replication(ports[replica], "role"), "slave");
        assert_eq!(
            replication(ports[replica], "master_port"),
            ports[shard].to_string()
        );
        assert_eq!(replication(ports[replica], "master_link_status"), "up");

        let key = key_in(&cluster, shard);
        set_replicated(ports[shard], &key, "replicated");
        assert_eq!(
            get_on_replica(ports[replica], &key),
            Reply::Bulk(Some("replicated".to_owned()))
        );
    }
}

/// A manual failover makes the replica the primary of the shard's slots and the old primary
/// its replica; the cluster stays ok and the key written before is read from both.
#[test]
fn a_manual_failover_swaps_roles_and_keeps_the_data() {
    let cluster = EmbeddedCluster::builder()
        .primaries(2)
        .replicas(1)
        .node_timeout(NODE_TIMEOUT)
        .start()
        .expect("cluster starts");
    let ports = cluster.ports();
    let key = key_in(&cluster, 0);
    set_replicated(ports[0], &key, "before");

    assert_eq!(cluster.failover(0).expect("fails over"), 2);
    assert_eq!(cluster.primary_of(0).unwrap(), 2);
    assert_eq!(cluster.replicas_of(0).unwrap(), [0]);
    assert_eq!(
        cluster.primary_of(1).unwrap(),
        1,
        "the other shard is untouched"
    );
    assert_eq!(replication(ports[2], "role"), "master");
    assert_eq!(replication(ports[0], "role"), "slave");
    assert_eq!(replication(ports[0], "master_port"), ports[2].to_string());
    assert_eq!(replication(ports[0], "master_link_status"), "up");
    assert_every_node_ok(&cluster);

    let value = Reply::Bulk(Some("before".to_owned()));
    assert_eq!(command(ports[2], &["GET", &key]).unwrap(), value);
    assert_eq!(get_on_replica(ports[0], &key), value);
    let slot = slot_of(key.as_bytes());
    assert_eq!(
        command(ports[0], &["GET", &key]).unwrap(),
        Reply::Error(format!("MOVED {slot} 127.0.0.1:{}", ports[2]))
    );
}

/// A killed primary is replaced by its replica, which serves the key written before; the old
/// primary, restarted, rejoins as the new primary's replica and is resynced.
#[test]
fn a_killed_primary_is_replaced_by_its_replica_and_rejoins_as_one() {
    let mut cluster = EmbeddedCluster::builder()
        .primaries(3)
        .replicas(1)
        .node_timeout(NODE_TIMEOUT)
        .start()
        .expect("cluster starts");
    let ports = cluster.ports();
    let key = key_in(&cluster, 1);
    set_replicated(ports[1], &key, "kept");
    let value = Reply::Bulk(Some("kept".to_owned()));

    assert_eq!(cluster.kill_primary(1).unwrap(), 1);
    let promoted = cluster
        .wait_for_new_primary(1, Duration::from_secs(30))
        .expect("the replica takes over");
    assert_eq!(promoted, 4);
    assert_eq!(command(ports[4], &["GET", &key]).unwrap(), value);
    let err = cluster
        .wait_until_ok(Duration::from_secs(1))
        .expect_err("a stopped node is not ok");
    assert!(err.to_string().contains("node 1 is stopped"), "{err}");

    cluster.restart_node(1).expect("the old primary rejoins");
    assert_eq!(cluster.primary_of(1).unwrap(), 4);
    assert_eq!(cluster.replicas_of(1).unwrap(), [1]);
    assert_eq!(replication(ports[1], "role"), "slave");
    assert_eq!(replication(ports[1], "master_port"), ports[4].to_string());
    assert_eq!(get_on_replica(ports[1], &key), value, "resynced");
    assert_every_node_ok(&cluster);
}

/// A migrated slot's keys, more than one MIGRATE batch of them, are served by the new
/// primary; the old one redirects there, and keeps the rest of its shard.
#[test]
fn a_migrated_slots_keys_are_served_by_the_new_primary() {
    let cluster = EmbeddedCluster::builder()
        .primaries(2)
        .replicas(1)
        .node_timeout(NODE_TIMEOUT)
        .start()
        .expect("cluster starts");
    let ports = cluster.ports();
    let slot = slot_of(b"moved");
    let from = cluster.node_for_slot(slot).expect("an owner");
    let to = 1 - from;
    let keys: Vec<String> = (0..250).map(|n| format!("{{moved}}:{n}")).collect();
    let mut conn = connect(ports[from]);
    for key in &keys {
        assert_eq!(
            command_over(&mut conn, &["SET", key, key]).unwrap(),
            Reply::Simple("OK".to_owned())
        );
    }

    cluster.migrate_slot(slot, to).expect("the slot moves");
    assert_eq!(cluster.primary_of_slot(slot).unwrap(), to);
    assert_eq!(cluster.node_for_slot(slot), Some(from), "the start layout");
    assert_eq!(cluster.primary_of(from).unwrap(), from, "the rest stays");
    let count = |port: u16| command(port, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
    assert_eq!(count(ports[to]).unwrap(), Reply::Integer(250));
    assert_eq!(count(ports[from]).unwrap(), Reply::Integer(0));
    for key in &keys {
        assert_eq!(
            command(ports[to], &["GET", key]).unwrap(),
            Reply::Bulk(Some(key.clone()))
        );
    }
    assert_eq!(
        command(ports[from], &["GET", &keys[0]]).unwrap(),
        Reply::Error(format!("MOVED {slot} 127.0.0.1:{}", ports[to]))
    );
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
