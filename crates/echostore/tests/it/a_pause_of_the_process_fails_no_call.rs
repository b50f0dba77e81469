//! A pause of this process (stopped, descheduled, its runtime starved) with a Valkey call in
//! flight fails no call: a timer that fired late timed the pause, not Valkey, and the reply Valkey
//! sends is taken. Taken for a timeout, a miss's lock call would load in-process and a fill's write
//! would fail (docs/failure-semantics.md): source reads Valkey would have spared, and under key
//! tracking values no push retires. On a cluster as on one server (`on_a_cluster` runs this suite
//! there): the cluster client's own timer over a whole call was such a timer, and its timer per
//! node, which it keeps, sends a call again when it fires late: a write run twice is still written.

use crate::common;

use std::time::Duration;

use common::{
    RawConn, Source, cluster_seeds, patient_store, pause_writes, raw, table_on, unpause, until,
    until_async, valkey,
};
use echostore::{Origin, Table};

/// Each call's limit (`valkey_timeout`); the pause is twice as long.
const LIMIT: Duration = Duration::from_secs(1);

/// The loaded value's size: the fill's write carries it, and so is told from every other call.
const BIG: usize = 64 * 1024;

/// A connection of its own to each node (the one server, or every node of the cluster).
async fn nodes(url: &str) -> Vec<RawConn> {
    let mut nodes = Vec::new();
    for node in cluster_seeds(url).unwrap_or_else(|| vec![url.to_owned()]) {
        nodes.push(raw(&node).await);
    }
    nodes
}

/// The clients a node holds waiting on paused writes (`CLIENT LIST`'s `flags=b`): for each, the
/// bytes of its parsed command (`argv-mem`) and of its input not yet read (`qbuf`).
async fn blocked_clients(node: &mut RawConn) -> Vec<(usize, usize)> {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(node)
        .await
        .expect("CLIENT LIST");
    let field = |client: &str, name: &str| {
        client
            .split(' ')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
    };
    let bytes = |client: &str, name| field(client, name).and_then(|n| n.parse().ok());
    clients
        .lines()
        .filter(|client| field(client, "flags").is_some_and(|flags| flags.contains('b')))
        .map(|client| {
            let argv = bytes(client, "argv-mem").unwrap_or(0);
            (argv, bytes(client, "qbuf").unwrap_or(0))
        })
        .collect()
}

/// Whether a node holds a client waiting on a paused write whose arguments take `BIG` bytes or
/// more: the fill's write, sent.
async fn big_write_waits(nodes: &mut [RawConn]) -> bool {
    for node in nodes {
        let clients = blocked_clients(node).await;
        if clients.iter().any(|&(argv, _)| argv >= BIG) {
            return true;
        }
    }
    false
}

/// Whether a node holds the fill's write twice behind the paused writes (its blocked clients'
/// parsed commands and unread input make two `BIG` writes or more): the second is the write the
/// cluster client sent again once its node's timer fired, on the same connection or a new one.
async fn big_write_sent_again(nodes: &mut [RawConn]) -> bool {
    for node in nodes {
        let clients = blocked_clients(node).await;
        let waiting: usize = clients.iter().map(|(argv, unread)| argv + unread).sum();
        if waiting >= 2 * BIG {
            return true;
        }
    }
    false
}

/// Starts a read of id 1 on `table` (a miss) and holds its write at Valkey: once the miss reads
/// the gated `source`, every node holds writes and the source answers. Returns the read's task
/// once its write waits at a node.
async fn a_miss_whose_write_waits(
    table: &Table<u64, String>,
    source: &Source,
    nodes: &mut [RawConn],
) -> tokio::task::JoinHandle<echostore::Result<std::sync::Arc<String>>> {
    let reads = source.calls();
    let miss = tokio::spawn({
        let table = table.clone();
        async move { table.get(&1).await }
    });
    until("the miss reads the source", || source.calls() > reads).await;
    for node in nodes.iter_mut() {
        pause_writes(node, 60_000).await;
    }
    source.release();
    until_async("the miss's write waits at Valkey", async || {
        big_write_waits(nodes).await
    })
    .await;
    miss
}

/// On a cluster, the client sends a call again when its node's timer fires past the call's
/// limit (`response_timeout`), and a pause of the process fires it late: a fill's fenced write
/// then runs twice at Valkey, the second run finding the lock its first released. The fill must
/// still take its write for written: before, it counted `fenced_write_skipped` and read its own
/// copy back as another writer's. One server's connection sets no such timer: the test is the
/// cluster's.
#[tokio::test(flavor = "current_thread")]
async fn a_write_sent_again_after_a_pause_is_still_written() {
    let valkey = valkey();
    let url = valkey.url();
    if cluster_seeds(&url).is_none() {
        return;
    }
    let mut nodes = nodes(&url).await;
    let store = patient_store(&url, LIMIT).await;
    let source = Source::open();
    let loader = source.answering(|_, _| Ok("x".repeat(BIG)));
    let table = table_on(&store, "paused", &source, |t| t.loader(loader)).await;
    // A first fill and an invalidate: the id's node now holds the fenced write's script, so
    // both sends of the next write run it (a node without it answers both `NOSCRIPT`, and the
    // one `EVAL` after them runs once).
    table.get(&1).await.expect("the first read");
    table.invalidate(&1).await.expect("the invalidate");
    source.hold();

    let miss = a_miss_whose_write_waits(&table, &source, &mut nodes).await;
    // The pause: the runtime's one thread stops past the node's timer, which then fires.
    std::thread::sleep(LIMIT * 2);
    until_async("the write is sent again", async || {
        big_write_sent_again(&mut nodes).await
    })
    .await;
    for node in &mut nodes {
        unpause(node).await;
    }

    let read = miss.await.expect("the miss's task").expect("the read");
    assert_eq!(read.len(), BIG);
    let stats = table.stats();
    assert_eq!(
        (stats.fenced_write_skipped, stats.l2_errors, source.calls()),
        (0, 0, 2),
        "the write sent again was taken for another's"
    );
}

/// A miss's write of what it loaded waits at Valkey (writes held there) while this process is
/// paused past the call's limit; Valkey answers once the process runs again. No call failed: the
/// miss took the lock, read the source once and wrote its value, which another store then reads
/// from Valkey. (Before, on a cluster, the write failed as it woke: `l2_errors` 1.)
#[tokio::test(flavor = "current_thread")]
async fn a_write_in_flight_at_a_pause_is_answered() {
    let valkey = valkey();
    let url = valkey.url();
    let mut nodes = nodes(&url).await;
    let store = patient_store(&url, LIMIT).await;
    let source = Source::gated();
    let loader = source.answering(|_, _| Ok("x".repeat(BIG)));
    let table = table_on(&store, "paused", &source, |t| t.loader(loader)).await;

    let miss = a_miss_whose_write_waits(&table, &source, &mut nodes).await;
    // The pause: the runtime's one thread, which every task of the store runs on, stops.
    std::thread::sleep(LIMIT * 2);
    for node in &mut nodes {
        unpause(node).await;
    }

    let read = miss.await.expect("the miss's task").expect("the read");
    assert_eq!(read.len(), BIG);
    let stats = table.stats();
    assert_eq!(stats.l2_errors, 0, "a call in flight at the pause failed");
    assert_eq!((stats.lock_won, source.calls()), (1, 1));
    // The write landed: another store (another process) reads it from Valkey, no second load.
    let elsewhere = patient_store(&url, LIMIT).await;
    let there = table_on(&elsewhere, "paused", &source, |t| t).await;
    let read = there.fetch(&1).await.expect("the read elsewhere");
    assert_eq!((read.origin, read.value.len()), (Origin::L2, BIG));
    assert_eq!(source.calls(), 1, "the value was loaded again");
}
