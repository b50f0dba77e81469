//! `.schema(n)`: two versions of a service whose cached type changed run side by side, as in a
//! rolling deploy. Each schema keeps its own copies, so neither decodes the other's bytes; every
//! write of either reaches the other's copies and L1; each loads an id once per expiry.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::{coherent_store, example, node_lines, spawn_node, until, until_async, valkey};
use echostore::{Origin, Store, Table};
use serde::{Deserialize, Serialize};

/// The row as the old version caches it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct RowV1 {
    version: u64,
    email: String,
}

/// The row as the new version caches it: the same row, its type changed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct RowV2 {
    version: u64,
    emails: Vec<String>,
    verified: bool,
}

/// The source: one row's version for every id, and how often it was read.
#[derive(Default)]
struct Rows {
    version: AtomicU64,
    reads: AtomicU64,
}

impl Rows {
    fn set(&self, version: u64) {
        self.version.store(version, SeqCst);
    }

    fn reads(&self) -> u64 {
        self.reads.load(SeqCst)
    }
}

/// The table `users` of `store` in `schema`, its values built by `row` from the source's version.
async fn users<V: echostore::Value>(
    store: &Store,
    schema: u32,
    source: &Arc<Rows>,
    row: fn(u64) -> V,
) -> Table<u64, V> {
    let source = Arc::clone(source);
    store
        .table::<u64, V>("users")
        .schema(schema)
        .ttl(Duration::from_secs(600))
        .tags(|_, _| vec!["all".to_owned()])
        .loader(move |_: u64| {
            source.reads.fetch_add(1, SeqCst);
            let version = source.version.load(SeqCst);
            async move { Ok::<_, std::io::Error>(row(version)) }
        })
        .build()
        .await
        .expect("the table starts")
}

/// The members of table `users`' live schemas (`<schema>:<generation>:<token>`), as Valkey holds
/// them.
async fn live_schemas(raw: &mut common::RawConn) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg("schemas:users")
        .arg(0)
        .arg(-1)
        .query_async(raw)
        .await
        .expect("ZRANGE")
}

fn v1(version: u64) -> RowV1 {
    RowV1 {
        version,
        email: format!("v{version}@example.com"),
    }
}

fn v2(version: u64) -> RowV2 {
    RowV2 {
        version,
        emails: vec![format!("v{version}@example.com")],
        verified: true,
    }
}

/// A put, an invalidate, a tag and a clear made under either schema reach the other's L1 and
/// Valkey copy; neither ever decodes the other's bytes; each schema loads an id once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_of_one_schema_reaches_the_other() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Arc::new(Rows::default());
    let old = users(&coherent_store(&url, None).await, 1, &source, v1).await;
    let new = users(&coherent_store(&url, None).await, 2, &source, v2).await;
    assert_eq!(*old.get(&7).await.unwrap(), v1(0));
    assert_eq!(*new.get(&7).await.unwrap(), v2(0));
    assert_eq!(source.reads(), 2, "each schema loads the id once");
    assert_eq!(old.fetch(&7).await.unwrap().origin, Origin::L1);
    assert_eq!(new.fetch(&7).await.unwrap().origin, Origin::L1);

    // A put of the old version: the new one's copies go, and it reloads the row.
    source.set(1);
    old.put(&7, v1(1)).await.unwrap();
    until_async("the new schema reads the old one's put", async || {
        new.get(&7).await.unwrap().version == 1
    })
    .await;
    // An invalidate of the new version: the old one reloads.
    source.set(2);
    new.invalidate(&7).await.unwrap();
    until_async(
        "the old schema reads past the new one's invalidate",
        async || old.get(&7).await.unwrap().version == 2,
    )
    .await;
    // A tag and a clear, each from one schema, reach the other's copies.
    source.set(3);
    new.invalidate_tag("all").await.unwrap();
    until_async("the old schema hears of the new one's tag", async || {
        old.get(&7).await.unwrap().version == 3
    })
    .await;
    source.set(4);
    old.clear().await.unwrap();
    until_async("the new schema hears of the old one's clear", async || {
        new.get(&7).await.unwrap().version == 4
    })
    .await;
    for stats in [old.stats(), new.stats()] {
        assert_eq!(
            stats.decode_errors, 0,
            "no schema decoded the other's bytes"
        );
        assert!(stats.invalidations > 0, "writes reached this L1 by a push");
    }
}

/// A schema that left (its last process gone) and comes back starts a new generation: the copy it
/// wrote before, which the other schema's writes no longer reached, is never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_comes_back_never_reads_its_copies_from_before() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Arc::new(Rows::default());
    let stay = users(&coherent_store(&url, None).await, 1, &source, v1).await;
    let first = coherent_store(&url, None).await;
    let gone = users(&first, 2, &source, v2).await;
    assert_eq!(gone.get(&7).await.unwrap().version, 0);
    drop((gone, first)); // its lease is given back at its next renewal
    let mut raw = common::raw(&url).await;
    until_async("the schema left", async || {
        let members = live_schemas(&mut raw).await;
        members.iter().all(|m| m.starts_with("1:"))
    })
    .await;
    source.set(1);
    stay.put(&7, v1(1)).await.unwrap();

    let back = users(&coherent_store(&url, None).await, 2, &source, v2).await;
    let fetched = back.fetch(&7).await.unwrap();
    assert_eq!(fetched.value.version, 1, "not the copy from before it left");
    assert_eq!(fetched.origin, Origin::Loaded);
}

/// A process that joins its schema's generation while it is younger than two renewals waits until
/// every process of the other schema has heard of it: a write made there as soon as it serves
/// reaches its copy. (Found by `echostore check`: six workers of two schemas starting together.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_a_young_generation_waits_until_the_other_schemas_know_it() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Arc::new(Rows::default());
    let old = users(&coherent_store(&url, None).await, 0, &source, v1).await;
    let first_store = coherent_store(&url, None).await;
    let first = users(&first_store, 1, &source, v2);
    let joiner = async {
        let mut raw = common::raw(&url).await;
        until_async(
            "the first process of schema 1 started its generation",
            async || {
                let members = live_schemas(&mut raw).await;
                members.iter().any(|m| m.starts_with("1:"))
            },
        )
        .await;
        let second = users(&coherent_store(&url, None).await, 1, &source, v2).await;
        assert_eq!(second.get(&7).await.unwrap().version, 0);
        source.set(1);
        old.put(&7, v1(1)).await.unwrap();
        until_async("the joiner reads the other schema's put", async || {
            second.get(&7).await.unwrap().version == 1
        })
        .await;
    };
    // The first process waits two renewals before it serves; the second joins, reads and sees
    // the other schema's put meanwhile.
    tokio::join!(first, joiner);
}

/// A process that could not renew its schema's lease for a whole lease (its requests held at a
/// proxy) while the other schema wrote, unheard of, comes back under a new generation with its L1
/// flushed: it reads the write, not its copy on Valkey, which that write never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_lease_lapsed_reads_what_was_written_meanwhile() {
    let valkey = valkey();
    let url = valkey.url();
    if common::cluster_seeds(&url).is_some() {
        return; // the proxy stands in front of one server; the lease is the same on a cluster
    }
    let proxy = common::Proxy::start(&url).await;
    let source = Arc::new(Rows::default());
    let away = users(&coherent_store(&proxy.url(), None).await, 1, &source, v1).await;
    let here = users(&coherent_store(&url, None).await, 0, &source, v1).await;
    assert_eq!(away.get(&7).await.unwrap().version, 0);
    let mut raw = common::raw(&url).await;
    // On a loaded host the first join can time out: the process then keeps copies of its own
    // until a renewal joins it. Start from a copy under its schema's live generation.
    until_async(
        "the process of schema 1 joined, its copy on Valkey",
        async || {
            let key = away.key_names(&7).unwrap().value;
            let generation = String::from_utf8_lossy(&key)
                .rsplit_once("}#1.")
                .map(|(_, generation)| generation.to_owned())
                .unwrap_or_default();
            let members = live_schemas(&mut raw).await;
            let joined = members
                .iter()
                .any(|m| m.starts_with(&format!("1:{generation}:")));
            joined && away.get(&7).await.is_ok() && common::exists(&mut raw, &key).await
        },
    )
    .await;
    let before = away.key_names(&7).unwrap().value;

    proxy.hold();
    until_async("the held process's lease has ended", async || {
        let members = live_schemas(&mut raw).await;
        members.iter().all(|m| m.starts_with("0:"))
    })
    .await;
    // Dropped by the other process's own renewal: its next put knows schema 1 no more.
    source.set(1);
    here.put(&7, v1(1)).await.unwrap();
    proxy.release();

    // Its keys move to a new generation once it renews again (its lease went on, no process of
    // schema 1 was left): the copy under the old one, which the put never reached, is never read
    // again. (Whether that copy is still there depends on the timing: a read the open breaker
    // sent to the loader meanwhile marks the id unsettled, whose repair deletes it.)
    until(
        "the process that was away moves to a new generation",
        || away.key_names(&7).unwrap().value != before,
    )
    .await;
    until_async("the process that was away reads the write", async || {
        away.get(&7).await.is_ok_and(|row| row.version == 1)
    })
    .await;
    assert_eq!(away.get(&7).await.unwrap().version, 1);
}

/// The generation of `table`'s schema `schema` as its keys carry it (`…}#<schema>.<generation>`).
fn generation_of<V: echostore::Value>(table: &Table<u64, V>, schema: u32) -> String {
    let key = table.key_names(&7).unwrap().value;
    String::from_utf8_lossy(&key)
        .rsplit_once(&format!("}}#{schema}."))
        .map(|(_, generation)| generation.to_owned())
        .unwrap_or_default()
}

/// Valkey's clock, in unix ms.
async fn valkey_ms(raw: &mut common::RawConn) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(raw).await.expect("TIME");
    secs * 1_000 + micros / 1_000
}

/// Both processes of schema 1 are on one generation that the live schemas list, `zeros` members
/// of schema 0 are listed, and every member renewed since `since_ms` (Valkey's clock): its lease
/// ends a whole lease (10 s) after that.
async fn schema_one_settled<V: echostore::Value>(
    raw: &mut common::RawConn,
    (one, two): (&Table<u64, V>, &Table<u64, V>),
    zeros: usize,
    since_ms: u64,
) -> bool {
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("schemas:users")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(raw)
        .await
        .expect("ZRANGE");
    let (a, b) = (generation_of(one, 1), generation_of(two, 1));
    let count = |prefix: &str| {
        members
            .iter()
            .filter(|(m, _)| m.starts_with(prefix))
            .count()
    };
    let renewed = members
        .iter()
        .all(|(_, ends)| *ends as u64 >= since_ms + 10_000);
    a == b && count(&format!("1:{a}:")) == 2 && count("0:") == zeros && renewed
}

/// A process of schema 0 and two of schema 1 on `url`, once both of schema 1 have settled on one
/// generation: the tables, and that generation.
async fn side_by_side(
    url: &str,
    source: &Arc<Rows>,
) -> (Table<u64, RowV1>, [Table<u64, RowV2>; 2], String) {
    let writer = users(&coherent_store(url, None).await, 0, source, v1).await;
    let one = users(&coherent_store(url, None).await, 1, source, v2).await;
    let two = users(&coherent_store(url, None).await, 1, source, v2).await;
    let mut raw = common::raw(url).await;
    until_async(
        "both processes of schema 1 settled on one generation",
        async || schema_one_settled(&mut raw, (&one, &two), 1, 0).await,
    )
    .await;
    let generation = generation_of(&one, 1);
    (writer, [one, two], generation)
}

/// Valkey restarted empty takes the live schemas with it; the first process to renew afterwards
/// puts back what it last heard, so no schema's generation moves: the processes of one schema
/// never read and write apart while they move one at a time (found by `echostore check --faults
/// all`: a write by one process that had moved missed the copy another still read, and that
/// process's reads went back). On the code before, both processes of schema 1 moved to a new
/// generation after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_empties_valkey_moves_no_schemas_generation() {
    let mut valkey = valkey();
    let url = valkey.url();
    if common::cluster_seeds(&url).is_some() {
        return; // one server is restarted empty; a cluster's nodes keep the key on failover
    }
    let source = Arc::new(Rows::default());
    let (writer, [one, two], before) = side_by_side(&url, &source).await;

    valkey.stop();
    valkey.restart().expect("an empty Valkey on the same port");
    let mut raw = common::raw(&url).await;
    let restarted = valkey_ms(&mut raw).await;
    until_async(
        "every process renewed on the restarted Valkey",
        async || schema_one_settled(&mut raw, (&one, &two), 1, restarted).await,
    )
    .await;
    assert_eq!(
        generation_of(&one, 1),
        before,
        "schema 1's generation moved"
    );
    assert_eq!(
        generation_of(&two, 1),
        before,
        "schema 1's generation moved"
    );

    // One copy for both: the writer's put reaches what each of them reads.
    source.set(1);
    until_async("a put goes through on the restarted Valkey", async || {
        writer.put(&7, v1(1)).await.is_ok()
    })
    .await;
    for table in [&one, &two] {
        until_async("the put is read", async || {
            table.get(&7).await.is_ok_and(|row| row.version == 1)
        })
        .await;
    }
}

/// The same when the first process to renew after the loss knows nothing to put back (it just
/// started, a process of schema 0 here): the processes of schema 1, finding their own members
/// gone while their leases surely ran, put their schema back as they last heard it. On the code
/// that put members back only into a missing set, both moved to a new generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_first_renewed_by_a_newcomer_moves_no_schemas_generation() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Arc::new(Rows::default());
    let (_writer, [one, two], before) = side_by_side(&url, &source).await;
    let mut raw = common::raw(&url).await;

    // The set lost, and renewed at once by a process that has heard nothing yet.
    let lost = valkey_ms(&mut raw).await;
    let _: () = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("schemas:users")
        .ignore()
        .cmd("ZADD")
        .arg("schemas:users")
        .arg(lost + 60_000)
        .arg("0:1:newcomer")
        .ignore()
        .query_async(&mut raw)
        .await
        .expect("the set lost, and a newcomer's lease");
    until_async("every process renewed after the loss", async || {
        schema_one_settled(&mut raw, (&one, &two), 2, lost).await
    })
    .await;
    assert_eq!(
        (generation_of(&one, 1), generation_of(&two, 1)),
        (before.clone(), before),
        "schema 1's generation moved"
    );
}

/// A writer that lost its connection hears the live schemas again before it writes: Valkey may
/// have come back empty, and a process of another schema started a generation meanwhile, whose
/// copies the write must drop, or they outlive it for a whole life. (Found by `echostore check
/// --faults all`: after an outage, puts made before their process's next renewal left another
/// schema's copy standing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_lost_its_connection_hears_the_live_schemas_before_it_writes() {
    let valkey = valkey();
    let url = valkey.url();
    if common::cluster_seeds(&url).is_some() {
        return; // one server's connections are killed; a cluster's writers hear the same way
    }
    let store = common::builder_on(&url)
        .require_valkey(true)
        .breaker_cooldown(Duration::from_millis(1))
        .build()
        .await
        .expect("store");
    let source = Arc::new(Rows::default());
    let writer = users(&store, 0, &source, v1).await;
    // A process of schema 1 starts generation 777 with a copy of id 7, unheard of by the writer,
    // whose connection is then lost.
    let copy = [writer.key_names(&7).unwrap().value, b"#1.777".to_vec()].concat();
    let mut raw = common::raw(&url).await;
    let lease_end_ms = 4_102_444_800_000_u64;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("schemas:users")
        .arg(lease_end_ms)
        .arg("1:777:elsewhere")
        .ignore()
        .cmd("SET")
        .arg(&copy)
        .arg("schema 1's copy")
        .ignore()
        .cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .ignore()
        .query_async(&mut raw)
        .await
        .expect("the other schema joins; the writer's connections are killed");

    source.set(1);
    until_async("a put goes through after the loss", async || {
        writer.put(&7, v1(1)).await.is_ok()
    })
    .await;
    assert!(
        !common::exists(&mut raw, &copy).await,
        "the put left the copy of the generation begun while its connection was lost"
    );
}

/// Two OS processes, the old type in schema 1 and the new in schema 2, read and write 32 ids for
/// 30 s: no decode error, no read older than the process's own write, every write seen by both in
/// the end, and no invalidation back and forth (each process loads an id at most once more than
/// the other's puts made it).
#[test]
fn two_schemas_run_side_by_side_for_thirty_seconds() {
    let lines = run_nodes([("1", "1"), ("2", "2")], 30, 32);
    for (i, line) in lines.iter().enumerate() {
        let field = |name: &str| line[name].as_u64().expect(name);
        assert_eq!(field("decode_errors"), 0, "node {i}: {line}");
        assert_eq!(field("errors"), 0, "node {i}: {line}");
        assert_eq!(field("went_back"), 0, "node {i}: {line}");
        assert_eq!(field("converged"), 32, "node {i}: every write seen: {line}");
        assert!(field("puts") > 100, "node {i} wrote: {line}");
        let other_puts = lines[1 - i]["puts"].as_u64().unwrap();
        assert!(
            field("source_reads") <= 32 + other_puts,
            "node {i}: loads beyond the other's writes (ping-pong?): {line}"
        );
    }
}

/// The same two types without schemas (both schema 0) read each other's bytes as decode errors:
/// what `.schema` is for.
#[test]
fn without_schemas_the_changed_type_is_a_decode_error() {
    let lines = run_nodes([("0", "1"), ("0", "2")], 3, 32);
    let errors: u64 = lines
        .iter()
        .map(|l| l["decode_errors"].as_u64().unwrap())
        .sum();
    assert!(errors > 0, "{lines:?}");
}

/// Runs one `schema_node` per `(schema, shape)` for `seconds` over `keys` ids.
fn run_nodes(nodes: [(&str, &str); 2], seconds: u64, keys: u64) -> Vec<serde_json::Value> {
    let valkey = valkey();
    let node = example("schema_node");
    let (url, run) = (valkey.url(), format!("{}-{seconds}", std::process::id()));
    let (seconds, keys) = (seconds.to_string(), keys.to_string());
    let children = nodes
        .iter()
        .map(|(schema, shape)| spawn_node(&node, &[&url, &run, schema, shape, &seconds, &keys]))
        .collect();
    node_lines(children)
}

/// A schema's row type: how to build it from the source's version, and how to read that back.
type Shape<V> = (fn(u64) -> V, fn(&V) -> u64);

/// [`users`] with `.version_by` (the row's own version orders its writes); a copy of version
/// `brief` is fresh for a millisecond only.
async fn versioned_users<V: echostore::Value>(
    store: &Store,
    (schema, brief): (u32, u64),
    source: &Arc<Rows>,
    (row, version): Shape<V>,
) -> Table<u64, V> {
    let source = Arc::clone(source);
    store
        .table::<u64, V>("users")
        .schema(schema)
        .ttl(Duration::from_secs(600))
        .ttl_for(move |v: &V| match version(v) == brief {
            true => Duration::from_millis(1),
            false => Duration::from_secs(600),
        })
        .jitter(0.0)
        .version_by(version)
        .loader(move |_: u64| {
            source.reads.fetch_add(1, SeqCst);
            let version = source.version.load(SeqCst);
            async move { Ok::<_, std::io::Error>(row(version)) }
        })
        .build()
        .await
        .expect("the table starts")
}

/// A fill of one schema that reads a newer version than another schema's copy holds drops that
/// copy: the source moved on without a write reaching the caches (here, outright; in a fleet, a
/// `put` that landed after an invalidation it had raced), and without the drop the other schema
/// would answer the older row for its copy's whole life while this one answers the newer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_drops_another_schemas_older_version() {
    let valkey = valkey();
    let url = valkey.url();
    let source = Arc::new(Rows::default());
    source.set(5);
    let old: Shape<RowV1> = (v1, |r| r.version);
    let old = versioned_users(&coherent_store(&url, None).await, (1, 0), &source, old).await;
    let new: Shape<RowV2> = (v2, |r| r.version);
    let new = versioned_users(&coherent_store(&url, None).await, (2, 5), &source, new).await;
    assert_eq!(*old.get(&7).await.unwrap(), v1(5));
    assert_eq!(
        *new.get(&7).await.unwrap(),
        v2(5),
        "its copy is fresh for 1 ms"
    );

    // The source moves on, and no write tells the caches. The new schema's copy ends at once: its
    // next read loads version 6, and its write drops the old schema's copy of version 5.
    source.set(6);
    until_async("the new schema reads version 6", async || {
        new.get(&7).await.is_ok_and(|r| r.version == 6)
    })
    .await;
    until_async(
        "the old schema's copy of version 5 is dropped",
        async || old.get(&7).await.is_ok_and(|r| r.version == 6),
    )
    .await;
    assert_eq!(source.reads(), 4, "each schema read each version once");
}
