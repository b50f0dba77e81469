//! Anyone can write under a table's prefix: a pushed key whose id makes the key type's own
//! `from_rendered` (or its `Hash`, which routes the id to its shard) panic is a key that cannot
//! be parsed back (the table's L1 is dropped), and the tracking connection goes on carrying
//! every later change. (Under key tracking no such key
//! is pushed: the tracking connection reads only the keys of ids it holds.)

use crate::common;

use std::borrow::Cow;
use std::time::Duration;

use common::{raw, until, until_async, until_stats, valkey};
use echostore::{Key, Origin, Store, Table, Tracking};
use redis::AsyncCommands;

/// A key type that parses its rendered bytes back, and panics on any that are not a number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Strict(u64);

impl Key for Strict {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.0.to_string().into_bytes())
    }

    fn from_rendered(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).expect("Strict ids are UTF-8");
        Some(Strict(text.parse().expect("Strict ids are numbers")))
    }
}

/// A key type whose `Hash` panics for one id, which its `from_rendered` parses: a foreign key
/// `touchy:{666}` reaches the hash on the tracking task.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Touchy(u64);

/// The id whose hash panics.
const UNHASHABLE: u64 = 666;

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        assert_ne!(self.0, UNHASHABLE, "this id cannot be hashed");
        self.0.hash(state);
    }
}

impl Key for Touchy {
    fn render(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.0.to_string().into_bytes())
    }

    fn from_rendered(bytes: &[u8]) -> Option<Self> {
        std::str::from_utf8(bytes).ok()?.parse().ok().map(Touchy)
    }
}

async fn strict_table(url: &str) -> (Store, Table<Strict, String>) {
    keyed_table(url, "strict", |id: &Strict| id.0).await
}

/// A table `name` of `K` ids on a store of its own, loading `loaded <n>` for the id `number`
/// reads.
async fn keyed_table<K: Key>(
    url: &str,
    name: &str,
    number: fn(&K) -> u64,
) -> (Store, Table<K, String>) {
    let store = Store::builder()
        .valkey(url)
        .require_valkey(true)
        .tracking(Tracking::Broadcast)
        .build()
        .await
        .expect("store");
    until("tracking is up", || store.is_coherent()).await;
    let table = store
        .table::<K, String>(name)
        .ttl(Duration::from_secs(600))
        .loader(
            move |id: K| async move { Ok::<_, std::io::Error>(format!("loaded {}", number(&id))) },
        )
        .build()
        .await
        .expect("table");
    (store, table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_its_parser_panics_on_leaves_the_store_coherent() {
    let valkey = valkey();
    let url = valkey.url();
    let (here_store, here) = strict_table(&url).await;
    let (_there_store, there) = strict_table(&url).await;
    assert_eq!(*here.get(&Strict(1)).await.expect("loaded"), "loaded 1");

    let mut conn = raw(&url).await;
    let _: () = conn
        .set("strict:{oops}", "x")
        .await
        .expect("a foreign write");
    there
        .put(&Strict(1), "v2".to_owned())
        .await
        .expect("a put elsewhere");

    until_async("the put reached this store's L1", async || {
        let read = here.fetch(&Strict(1)).await.expect("read");
        *read.value == "v2" && read.origin != Origin::Loaded
    })
    .await;
    assert!(here_store.is_coherent());
    // Counted once every shard has dropped its L1, which may come after the put's shard, which
    // dropped its own first, answered v2.
    until_stats(&here, "the table's L1 was dropped", |s| {
        s.coherence_flushes >= 1
    })
    .await;
    // And the next change too: the tracking connection still carries them.
    there
        .put(&Strict(1), "v3".to_owned())
        .await
        .expect("a second put elsewhere");
    until_async("the second put reached this store's L1", async || {
        *here.get(&Strict(1)).await.expect("read") == "v3"
    })
    .await;
}

/// The same with a key type whose `Hash` panics on the foreign key's id: routing the push to a
/// shard hashes it, on the tracking task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_hash_panics_leaves_the_store_coherent() {
    let valkey = valkey();
    let url = valkey.url();
    let number = |id: &Touchy| id.0;
    let (here_store, here) = keyed_table(&url, "touchy", number).await;
    let (_there_store, there) = keyed_table(&url, "touchy", number).await;
    assert_eq!(*here.get(&Touchy(1)).await.expect("loaded"), "loaded 1");

    let mut conn = raw(&url).await;
    let foreign = format!("touchy:{{{UNHASHABLE}}}");
    let _: () = conn.set(foreign, "x").await.expect("a foreign write");
    there
        .put(&Touchy(1), "v2".to_owned())
        .await
        .expect("a put elsewhere");

    until_async("the put reached this store's L1", async || {
        let read = here.fetch(&Touchy(1)).await.expect("read");
        *read.value == "v2" && read.origin != Origin::Loaded
    })
    .await;
    assert!(here_store.is_coherent());
    // Counted once every shard has dropped its L1, which may come after the put's shard, which
    // dropped its own first, answered v2.
    until_stats(&here, "the table's L1 was dropped", |s| {
        s.coherence_flushes >= 1
    })
    .await;
}
