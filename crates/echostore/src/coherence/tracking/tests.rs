//! The URLs of a cluster's primaries, what key tracking's registry makes of a push, and when a
//! lost connection caps L1 from.

use std::sync::Arc;
use std::time::Duration;

use embedded_valkey::EmbeddedValkey;
use redis::{AsyncCommands, PushKind};

use super::cluster::with_host;
use super::keys::{self, Read};
use super::{Tracker, connect};
use crate::Tracking;
use crate::valkey::envelope::fingerprint;
use crate::wire::connect::{Endpoint, Kind};

/// A primary's URL keeps the seed's scheme and login.
#[test]
fn node_urls_keep_scheme_and_login() {
    assert_eq!(
        with_host("redis://127.0.0.1:7000", "10.0.0.2", 7001),
        "redis://10.0.0.2:7001"
    );
    assert_eq!(
        with_host("rediss://app:secret@seed:7000/", "h", 7002),
        "rediss://app:secret@h:7002"
    );
}

/// Under key tracking, a push takes its key out of the held ones as the connection reads it,
/// before the tracking task routes it: an entry made meanwhile from the bytes read before the
/// change would otherwise be confirmed without a read, and answer until the push is routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_unholds_its_key_before_the_tracking_task_takes_it() {
    let valkey = EmbeddedValkey::start().expect("valkey");
    let endpoint = Endpoint {
        kind: Kind::Single(valkey.url()),
        ca: None,
        timeout: Duration::from_secs(5),
    };
    let tracker = Tracker::new("", Tracking::Keys);
    let registry = tracker.keys().expect("key tracking");
    let arrivals = Some(Arc::downgrade(&tracker));
    let (mut conn, mut pushes) = connect(&endpoint, &valkey.url(), arrivals)
        .await
        .expect("a tracking connection");
    redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .query_async::<()>(&mut conn)
        .await
        .expect("tracking on");
    let client = redis::Client::open(valkey.url()).expect("a client");
    let mut writer = client
        .get_multiplexed_async_connection()
        .await
        .expect("a writer");
    let (key, old) = (b"users:{1}".to_vec(), b"old".to_vec());
    let _: () = writer.set(&key, &old).await.expect("SET old");

    // The tracking connection reads the key: held, with the old bytes.
    let read = Read {
        key: key.clone(),
        expect: None,
    };
    registry.sent(std::slice::from_ref(&read));
    let (reads, answers) = keys::query(conn.clone(), vec![read]).await;
    keys::answered(&tracker, reads, answers);
    assert!(
        registry.holds(&key, fingerprint(&old)),
        "the read held the key"
    );

    let _: () = writer.set(&key, b"new").await.expect("SET new");
    let push = pushes.recv().await.expect("the change's push");
    assert_eq!(push.kind, PushKind::Invalidate);
    // Taken off the channel and not routed: nothing has told the tracker of it.
    assert!(
        !registry.holds(&key, fingerprint(&old)),
        "the old bytes were still held once their change's push had arrived"
    );
}

/// A connection's loss caps L1 from when the last round trip it answered was sent, not from the
/// last push it took: a push says only that it came. Here a health PING is answered, a change's
/// push arrives, and the connection is killed before the next PING; the loop takes the push,
/// then the disconnection. Before, taking the push set the moment to cap from to then, though it
/// could have been sent long before (read after a pause, or behind a backlog) with the pushes
/// after it lost: the cap kept entries those pushes retired.
#[tokio::test(flavor = "current_thread")]
async fn a_push_taken_is_no_sign_the_link_delivered_everything() {
    let valkey = EmbeddedValkey::start().expect("valkey");
    let url = valkey.url();
    let endpoint = Endpoint {
        kind: Kind::Single(url.clone()),
        ca: None,
        timeout: Duration::from_secs(5),
    };
    let tracker = Tracker::new("", Tracking::Broadcast);
    let weak = Arc::downgrade(&tracker);
    let (conn, pushes) = connect(&endpoint, &url, None).await.expect("connect");
    let mut session = super::Session {
        tracker: &weak,
        endpoint: &endpoint,
        conn,
        pushes,
        reads: None,
        reading: futures::stream::FuturesOrdered::new(),
        namespace: String::new(),
        by_keys: false,
        subscribed: std::collections::HashSet::new(),
    };
    redis::cmd("CLIENT")
        .arg(&["TRACKING", "ON", "BCAST", "PREFIX", "users:"][..])
        .query_async::<()>(&mut session.conn)
        .await
        .expect("tracking on");
    let (mut established, mut healthy_at) = (true, std::time::Instant::now());
    let mut life = super::Life {
        url: &url,
        slots: &[],
        established: &mut established,
        healthy_at: &mut healthy_at,
    };
    assert_eq!(session.health(&mut life).await, Some(None), "PING");
    let answered = *life.healthy_at;

    let client = redis::Client::open(url.as_str()).expect("a client");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = admin.set("users:{1}", "new").await.expect("SET");
    let _: () = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"][..])
        .query_async(&mut admin)
        .await
        .expect("CLIENT KILL");
    // The change's push, then the disconnection, wait on the channel.
    let waiting = async {
        while session.pushes.len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the push and the disconnection");
    let (_tables_tx, mut tables) = tokio::sync::watch::channel(Vec::new());
    // Taken as a disconnection (or, were the loop held past the next tick, a failed PING).
    let lost = session.serve(&mut tables, life).await;
    assert!(lost.is_some(), "the loss was noticed");
    assert_eq!(
        healthy_at, answered,
        "the loss caps from the push taken, not from the PING answered"
    );
}
