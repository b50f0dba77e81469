//! Two stores (as two processes would) `put` one id at the same instant, round after round. When
//! both puts have returned and every push has arrived, neither store's L1 may keep a value that
//! differs from Valkey's: a copy that did would be served for the rest of its minute-long ttl.
//! (When Valkey sends one push for both writes, the store whose write came first checks it by
//! reading the value back, so its copy may differ for that one round trip, and no longer.)
//!
//! The owner keeps a put's entry out of L1 when a push for the id arrived while the put was on
//! the wire (`shard/owner.rs`, `overtaken_writes`): the other store's write may have landed after it.
//! A flush does the same for every write on the wire (`shard/owner/marked.rs`): for a key type that
//! cannot be parsed back, every push is one.

use crate::common;

use std::time::Duration;

use std::borrow::Cow;

use common::{Proxy, coherent_store, exists, on_task, raw, store_on, until, until_async, valkey};
use echostore::{Key, Origin, Table};
use redis::AsyncCommands;

/// A `String -> u64` table `pr` with a minute's ttl on a store of its own.
async fn table(url: &str) -> Table<String, u64> {
    store_on(url)
        .await
        .table::<String, u64>("pr")
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .loader(|_id: String| async { Ok::<_, std::io::Error>(0) })
        .build()
        .await
        .expect("table")
}

/// Waits until a push for a fresh probe key has reached both tables: every push Valkey sent
/// before it has then been handled by their owners (one tracking connection, one mailbox each).
async fn pushes_drained(conn: &mut common::RawConn, tables: &[&Table<String, u64>]) {
    let before: Vec<u64> = tables.iter().map(|t| t.stats().invalidations).collect();
    let _: () = conn.set("pr:{probe}", "x").await.expect("SET probe");
    until("the probe's push reached both tables", || {
        tables
            .iter()
            .zip(&before)
            .all(|(t, b)| t.stats().invalidations > *b)
    })
    .await;
}

/// Concurrent puts of one id from two stores: afterwards, an L1 hit in either store answers
/// what Valkey holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_racing_a_foreign_write_leaves_no_stale_l1() {
    let valkey = valkey();
    let url = valkey.url();
    let (a, b) = (table(&url).await, table(&url).await);
    let mut conn = raw(&url).await;
    pushes_drained(&mut conn, &[&a, &b]).await; // both tracked before the first round
    let id = "x".to_owned();
    let mut stale = Vec::new();
    for round in 0..300u64 {
        let (pa, pb) = tokio::join!(a.put(&id, round * 2), b.put(&id, round * 2 + 1));
        pa.expect("put a");
        pb.expect("put b");
        pushes_drained(&mut conn, &[&a, &b]).await;
        let bytes: Vec<u8> = conn.get("pr:{x}").await.expect("GET");
        let held = payload(&bytes);
        for (name, t) in [("a", &a), ("b", &b)] {
            let f = t.fetch(&id).await.expect("fetch");
            if matches!(f.origin, Origin::L1) && *f.value != held {
                stale.push((round, name, *f.value, held));
            }
        }
        // A push that may be the store's own write is checked by reading the value back, one
        // round trip after the push was handled: a copy may differ until that check lands, and
        // never after (it would otherwise be served for the rest of its minute).
        for &(r, name, _, held) in stale.iter().filter(|s| s.0 == round) {
            let t = if name == "a" { &a } else { &b };
            until_async(
                &format!("round {r}: store {name} let go of its copy"),
                async || {
                    let f = t.fetch(&id).await.expect("fetch");
                    !matches!(f.origin, Origin::L1) || *f.value == held
                },
            )
            .await;
        }
    }
    // Reaching here, every copy that differed was dropped by its store's own-write check.
    if !stale.is_empty() {
        eprintln!("copies that differed until their own-write check landed: {stale:?}");
    }
}

/// The `u64` of an envelope: postcard's varint after the header, 17 bytes in format 1 and 21 in
/// format 2 (docs/lock-protocol.md).
fn payload(envelope: &[u8]) -> u64 {
    let header = if envelope[0] == 1 { 17 } else { 21 };
    let mut value = 0u64;
    for (i, byte) in envelope[header..].iter().enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            break;
        }
    }
    value
}

/// A key type with the default `from_rendered`: every push for it is a flush of L1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Sku(u32);

impl Key for Sku {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.0.to_string().into_bytes())
    }
}

/// A put whose write has landed, but whose landing the owner has not yet taken, is overtaken by
/// a flush (here, another store's later write of the id, pushed for a key type that cannot be
/// parsed back): its entry stays out of L1, which would otherwise keep it for its whole ttl
/// while Valkey holds the other store's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_overtakes_a_put_on_the_wire() {
    let valkey = valkey();
    let proxy = Proxy::start(&valkey.url()).await;
    let skus = |store: echostore::Store| async move {
        store
            .table::<Sku, String>("sku")
            .ttl(Duration::from_secs(60))
            .loader(|_: Sku| async { Ok::<_, std::io::Error>("from the source".to_owned()) })
            .build()
            .await
            .expect("table")
    };
    let here = skus(coherent_store(&proxy.url(), None).await).await;
    let there = skus(coherent_store(&valkey.url(), None).await).await;
    let mut conn = raw(&valkey.url()).await;
    // The put script is loaded on the server first (a NOSCRIPT reply held would hold the put).
    let before = here.stats().coherence_flushes;
    here.put(&Sku(0), "warm".to_owned()).await.expect("put");
    until("the warm-up's push arrived", || {
        here.stats().coherence_flushes > before
    })
    .await;
    let flushes = here.stats().coherence_flushes;

    proxy.hold_replies();
    let put = on_task(&here, |here| async move {
        here.put(&Sku(1), "here".to_owned()).await
    });
    until_async("the put landed on Valkey", async || {
        exists(&mut conn, "sku:{1}").await
    })
    .await;
    there.put(&Sku(1), "there".to_owned()).await.expect("put");
    // Both writes' pushes reach `here` as flushes while its put's landing waits.
    until("both pushes flushed the store's L1", || {
        here.stats().coherence_flushes >= flushes + 2
    })
    .await;
    proxy.release_replies();
    put.await.expect("task").expect("put");
    let read = here.fetch(&Sku(1)).await.expect("read");
    assert_eq!(
        (read.value.as_str(), read.origin),
        ("there", Origin::L2),
        "Valkey holds the later write; L1 must not keep the earlier one"
    );
}
