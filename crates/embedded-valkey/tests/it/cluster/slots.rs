//! Slots: the cluster comes up with every slot served, a key lives on the node owning its slot
//! (the others answer MOVED), `slot_of` hashes as the server does, and a migrated slot's keys move
//! with it.

use super::{assert_every_node_ok, cluster_info, connect, field, key_on, key_slot, with_replicas};
use crate::common::{Reply, command, command_over};
use embedded_valkey::{CLUSTER_SLOTS, EmbeddedCluster, slot_of};

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

/// A migrated slot's keys, more than one MIGRATE batch of them, are served by the new
/// primary; the old one redirects there, and keeps the rest of its shard.
#[test]
fn a_migrated_slots_keys_are_served_by_the_new_primary() {
    let cluster = with_replicas(2);
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
