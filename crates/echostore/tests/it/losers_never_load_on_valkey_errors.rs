//! A flight that lost the lock never reads the source because of what Valkey answers while it
//! polls: another type under the value key reads as "no value yet", a failed poll is retried with
//! backoff, and only an unreachable Valkey (the breaker open) sends it to the in-process load.

use crate::common;

use std::time::Duration;

use common::{
    Caller, Source, hold_lock, raw, settled, spawn_fetch, until_stats, valkey, valkey_table,
};
use echostore::{LoserPolicy, Origin, Table};
use redis::AsyncCommands;

const VALUE: &str = "los:{1}";
const LOCK: &str = "lock:los:{1}";

/// Another process holds the lock (through the connection returned), and a loser that polls
/// for its value is waiting on `t`: the loser's source, its table and its caller.
async fn a_polling_loser(
    url: &str,
) -> (common::RawConn, Source, Table<u64, String>, Caller<String>) {
    let mut conn = raw(url).await;
    hold_lock(&mut conn, LOCK, "another-process").await;
    let source = Source::open();
    let t = valkey_table(url, "los", &source, |t| {
        t.losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        })
    })
    .await;
    let waiting = spawn_fetch(&t, 1);
    until_stats(&t, "the loser polls", |s| s.poll_waits > 0).await;
    (conn, source, t, waiting)
}

/// The winner (another store) puts its value, which drops its lock: the loser `waiting` on `t`
/// answers it from Valkey, having lost the lock and never read `source`; `t`'s stats then.
async fn the_winner_lands(
    url: &str,
    t: &Table<u64, String>,
    waiting: Caller<String>,
    source: &Source,
) {
    let winner = valkey_table(url, "los", &Source::open(), |t| t).await;
    winner.put(&1, "from-the-winner".into()).await.expect("put");
    let answer = waiting.await.expect("task").expect("the winner's value");
    assert_eq!(
        (answer.origin, answer.value.as_str()),
        (Origin::L2, "from-the-winner")
    );
    let s = t.stats();
    assert_eq!((s.source_reads, s.lock_lost, s.lock_won), (0, 1, 0));
    assert_eq!(source.calls(), 0, "the loser never read the source");
    settled(t).await;
}

/// While another process holds the lock, a hash sits under the value key: the loser keeps
/// polling (issue #9: `WRONGTYPE` sent it to the degraded path, a second source read), and takes
/// the winner's value when it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_type_under_the_key_while_polling_is_no_value_yet() {
    let valkey = valkey();
    let (mut conn, source, t, waiting) = a_polling_loser(&valkey.url()).await;
    let _: () = conn.hset(VALUE, "field", "x").await.expect("HSET");
    let polls = t.stats().poll_waits;
    until_stats(&t, "the loser polled the hash", |s| {
        s.poll_waits > polls + 1
    })
    .await;
    // The winner lands: its put replaces the hash and drops its lock.
    the_winner_lands(&valkey.url(), &t, waiting, &source).await;
}

/// While the loser polls, Valkey refuses its poll script (here an ACL denies `EVALSHA`: an error
/// reply from a live server, not a connection failure). The loser counts each failure, retries
/// with backoff, and takes the winner's value once the polls succeed again (issue #9: the first
/// error sent it to the degraded path, a second source read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_polls_are_retried_not_loaded() {
    let valkey = valkey();
    let (mut conn, source, t, waiting) = a_polling_loser(&valkey.url()).await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-evalsha")
        .arg("-eval")
        .query_async(&mut conn)
        .await
        .expect("ACL SETUSER");
    until_stats(&t, "polls fail", |s| s.l2_errors >= 2).await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("+@all")
        .query_async(&mut conn)
        .await
        .expect("ACL SETUSER");
    assert!(!waiting.is_finished(), "still waiting for the winner");
    the_winner_lands(&valkey.url(), &t, waiting, &source).await;
    // Once the flight has landed: its answer may come before the owner stores it.
    assert_eq!(t.stats().l1_len, 1, "the winner's value is in L1");
}
