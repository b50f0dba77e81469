//! Replicas: they follow their primaries, a manual failover swaps roles, and a killed primary
//! is replaced by its replica and rejoins as one.

use std::time::Duration;

use super::{
    assert_every_node_ok, get_on_replica, key_in, replication, set_replicated, with_replicas,
};
use crate::common::{Reply, command};
use embedded_valkey::slot_of;

/// With one replica per primary, the replicas come after the primaries, follow their own
/// primary with the link up, and have a key written to it once WAIT says one replica got it.
#[test]
fn replicas_follow_their_primaries_and_receive_their_writes() {
    let cluster = with_replicas(2);
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
    let cluster = with_replicas(2);
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
    let mut cluster = with_replicas(3);
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
