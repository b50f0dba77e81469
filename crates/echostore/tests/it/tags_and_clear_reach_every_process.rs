//! `invalidate_tag` and `clear` across stores on one real Valkey: every store's L1 drops what
//! the mark covers, every copy on Valkey written before it is a miss everywhere (a store that
//! starts later included), a fill that read the source before it does not store its value after
//! it, and it all costs one Valkey command however many entries it covers.

use crate::common;

use std::time::Duration;

use common::{
    Proxy, Source, coherent_store, coherent_table, on_task, patient_store, round_trips_of,
    store_on, table_on, until, until_stats, valkey,
};
use echostore::{Origin, Store, Table, TableBuilder};

/// Ids are tagged by parity: `odd` or `even`.
fn by_parity(t: TableBuilder<u64, String>) -> TableBuilder<u64, String> {
    t.ttl(Duration::from_secs(60))
        .tags(|id: &u64, _: &String| [if id % 2 == 1 { "odd" } else { "even" }])
}

async fn tagged(store: &Store, source: &Source) -> Table<u64, String> {
    table_on(store, "tagged", source, by_parity).await
}

/// Reads `ids` in `table` and returns their origins.
async fn origins(table: &Table<u64, String>, ids: &[u64]) -> Vec<Origin> {
    let mut out = Vec::new();
    for id in ids {
        out.push(table.fetch(id).await.expect("read").origin);
    }
    out
}

/// A tag invalidated in one store: the other store's L1 drops the tagged entries only, the
/// copies on Valkey are misses in both, and each tagged id is read from the source once more
/// in all, the untagged ones not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_invalidated_in_one_store_is_gone_from_every_store() {
    let valkey = valkey();
    let source = Source::open();
    let here = tagged(&coherent_store(&valkey.url(), None).await, &source).await;
    let there = tagged(&coherent_store(&valkey.url(), None).await, &source).await;
    let ids = [1, 2, 3, 4];
    assert_eq!(origins(&here, &ids).await, [Origin::Loaded; 4]);
    // Every load's write pushes to the other store too: let them arrive first.
    until_stats(&there, "the loads' pushes reached the other store", |s| {
        s.invalidations >= 4
    })
    .await;
    assert_eq!(origins(&there, &ids).await, [Origin::L2; 4]);

    there
        .invalidate_tag("odd")
        .await
        .expect("invalidate the tag");
    // Read-your-writes in the store that invalidated: its next read of an odd id loads it.
    assert_eq!(origins(&there, &[1]).await, [Origin::Loaded]);
    until_stats(&here, "the mark reached the other store", |s| {
        s.marks_taken >= 1
    })
    .await;
    assert_eq!(
        origins(&here, &ids).await,
        [Origin::L2, Origin::L1, Origin::Loaded, Origin::L1],
        "1 as the other store reloaded it, 3 stamped before the mark, the even ids untouched"
    );
    assert_eq!(origins(&there, &[3]).await, [Origin::L2]);
    assert_eq!(
        source.calls(),
        6,
        "each odd id read from the source once more"
    );
    assert!(here.stats().marked_misses >= 1 && there.stats().marked_misses >= 1);
}

/// A clear in one store makes every entry a miss in every store, each id read once more in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_in_one_store_empties_every_store() {
    let valkey = valkey();
    let source = Source::open();
    let plain = |t: TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let here = coherent_table(&valkey.url(), "cleared", &source, plain).await;
    let there = coherent_table(&valkey.url(), "cleared", &source, plain).await;
    let ids = [1, 2, 3];
    origins(&here, &ids).await;
    until_stats(&there, "the loads' pushes reached the other store", |s| {
        s.invalidations >= 3
    })
    .await;
    assert_eq!(origins(&there, &ids).await, [Origin::L2; 3]);
    here.clear().await.expect("clear");
    until_stats(&there, "the clear reached the other store", |s| {
        s.marks_taken >= 1
    })
    .await;
    assert_eq!(origins(&there, &ids).await, [Origin::Loaded; 3]);
    // Those loads' own pushes reach `here` too; either way it reads what `there` loaded.
    let after: Vec<String> = futures::future::join_all(ids.iter().map(|id| here.get(id)))
        .await
        .into_iter()
        .map(|v| v.expect("read").to_string())
        .collect();
    assert_eq!(after, ["value-1-4", "value-2-5", "value-3-6"]);
    assert_eq!(
        source.calls(),
        6,
        "each id read once before the clear and once after"
    );
}

/// A store that starts after a mark was set reads it first: the copies on Valkey written
/// before it are misses there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_started_after_a_mark_knows_it() {
    let valkey = valkey();
    let source = Source::open();
    let first = tagged(&store_on(&valkey.url()).await, &source).await;
    first.get(&1).await.expect("load");
    first.get(&2).await.expect("load");
    first
        .invalidate_tag("odd")
        .await
        .expect("invalidate the tag");
    let later = tagged(&store_on(&valkey.url()).await, &source).await;
    assert_eq!(origins(&later, &[1, 2]).await, [Origin::Loaded, Origin::L2]);
    assert_eq!(source.calls(), 3);
}

/// A fill that read the source before a clear, and writes after it, stores nothing anyone
/// serves: its own callers get what it read (their reads began before the clear), but no later
/// read in either store answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_a_clear_does_not_store_after_it() {
    let valkey = valkey();
    let source = Source::gated();
    let plain = |t: TableBuilder<u64, String>| t.ttl(Duration::from_secs(60));
    let here = coherent_table(&valkey.url(), "raced", &source, plain).await;
    let there = coherent_table(&valkey.url(), "raced", &source, plain).await;
    let early = on_task(&here, |here| async move {
        here.get(&1).await.expect("read").to_string()
    });
    common::until("the fill reads the source", || source.calls() == 1).await;
    there.clear().await.expect("clear");
    until_stats(&here, "the clear reached the loading store", |s| {
        s.marks_taken >= 1
    })
    .await;
    source.release();
    assert_eq!(early.await.expect("task"), "value-1-1");
    let later = here.fetch(&1).await.expect("read");
    assert_eq!(
        (later.value.as_str(), later.origin),
        ("value-1-2", Origin::Loaded)
    );
    let other = there.fetch(&1).await.expect("read");
    assert_eq!(
        other.value.as_str(),
        "value-1-2",
        "never the copy read before the clear"
    );
}

/// A put whose value was given before a tag invalidation that covers it, and whose write lands
/// after, is not kept in L1: the invalidating store's next read does not answer it from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_covers_the_puts_made_before_it() {
    let valkey = valkey();
    let source = Source::open();
    // Coherent first: tracking coming up flushes L1, which would drop the put's entry too.
    let store = coherent_store(&valkey.url(), None).await;
    let table = tagged(&store, &source).await;
    table.put(&1, "put".to_owned()).await.expect("put");
    assert_eq!(
        origins(&table, &[1]).await,
        [Origin::L1],
        "{:?}",
        table.stats()
    );
    table
        .invalidate_tag("odd")
        .await
        .expect("invalidate the tag");
    let read = table.fetch(&1).await.expect("read");
    assert_eq!(
        (read.value.as_str(), read.origin),
        ("value-1-1", Origin::Loaded)
    );
}

/// A put made after a mark's push reached its store is stamped with the mark, whether or not
/// the read the push set off has landed: its copy is current in a store that knows the mark,
/// which answers it from Valkey instead of reading the source. Here the push has come and the
/// read waits at a proxy when the put is called. Stamped with the marks known at the call, the
/// put was a miss to every store that knew the mark, each reading the source again, though it
/// was the newest write (found by `echostore check`: an extra source read under key tracking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_after_a_pushed_mark_is_current_where_the_mark_is_known() {
    let valkey = valkey();
    if common::cluster_seeds(&valkey.url()).is_some() {
        return; // the proxy stands in front of one server; marks are the same on a cluster
    }
    let proxy = Proxy::start(&valkey.url()).await;
    let source = Source::open();
    let late_store = patient_store(&proxy.url(), Duration::from_secs(30)).await;
    until("tracking is up", || late_store.is_coherent()).await;
    let late = tagged(&late_store, &source).await;
    let knowing = tagged(&coherent_store(&valkey.url(), None).await, &source).await;
    late.put(&1, "first".into()).await.expect("a first put"); // loads the scripts, reads the clock

    proxy.hold(); // the late store's commands wait; its tracking connection's pushes pass
    knowing.invalidate_tag("odd").await.expect("invalidate");
    until("the mark's push set off a read, held", || {
        proxy.waiting() >= 1
    })
    .await;
    let mut put = std::pin::pin!(late.put(&1, "after the mark".into()));
    assert!(futures::poll!(put.as_mut()).is_pending(), "held");
    proxy.release();
    put.await.expect("the put lands");

    let read = knowing.fetch(&1).await.expect("read");
    assert_eq!(
        (read.value.as_str(), read.origin),
        ("after the mark", Origin::L2),
        "the put's copy is current where the mark is known"
    );
    assert_eq!(source.calls(), 0, "no source read");
    assert_eq!(knowing.stats().marked_misses, 0);
}

/// However many entries a tag covers, invalidating it is one round trip to Valkey (the mark
/// script, which touches no entry's key), and each other store reads the marks once: round trips
/// as `MONITOR` shows them, on a server of the test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidating_a_tag_is_one_round_trip_whatever_it_covers() {
    let valkey = embedded_valkey::EmbeddedValkey::start().expect("a valkey-server");
    let source = Source::open();
    let here = tagged(&coherent_store(&valkey.url(), None).await, &source).await;
    let there = tagged(&coherent_store(&valkey.url(), None).await, &source).await;
    // A third store without coherence loads the entries: a store that writes them hears its own
    // writes' pushes and reads each value back to know them for its own, reads that a loaded
    // host may leave for the measured stretch.
    let filler_store = common::builder_on(&valkey.url())
        .coherence(false)
        .build()
        .await
        .expect("store");
    let ids: Vec<u64> = (1..=200).collect();
    tagged(&filler_store, &source)
        .await
        .get_many(&ids)
        .await
        .expect("load");
    here.get_many(&ids).await.expect("read");
    there.get_many(&ids).await.expect("read");
    // The first mark loads the script on the server (a NOSCRIPT, then the script): not counted.
    here.invalidate_tag("none")
        .await
        .expect("invalidate a tag nothing carries");
    until_stats(&there, "the first mark reached the other store", |s| {
        s.marks_taken >= 1
    })
    .await;
    let commands = round_trips_of(&valkey.url(), async {
        here.invalidate_tag("odd")
            .await
            .expect("invalidate the tag");
        until_stats(&there, "the mark reached the other store", |s| {
            s.marks_taken >= 2
        })
        .await;
    })
    .await;
    let count = |name: &str| commands.iter().filter(|c| c.as_str() == name).count();
    assert_eq!(count("EVALSHA"), 1, "one mark script: {commands:?}");
    // Each store reads the marks once per push it hears: the other on this mark's, this one on
    // its own, and this one may still be reading on the first mark's push (nothing here waits
    // for that): at most three reads, however many entries the tag covers. Each read asks, in
    // the same pipeline, for the score of the latest mark its store knows (was it lost?).
    assert!((1..=3).contains(&count("ZRANGEBYSCORE")), "{commands:?}");
    assert_eq!(count("ZSCORE"), count("ZRANGEBYSCORE"), "{commands:?}");
    let others: Vec<&String> = commands
        .iter()
        .filter(|c| !["EVALSHA", "ZRANGEBYSCORE", "ZSCORE", "PING"].contains(&c.as_str()))
        .collect();
    assert!(
        others.is_empty(),
        "no entry's key read or written: {others:?}"
    );
}

/// A store that sets a mark takes in every mark set before it, not only its own: here a store
/// that hears no pushes (coherence off, and no poll of the marks within the test) invalidates
/// one tag after another store invalidated another, and a copy the first mark covers is a miss
/// to it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setting_a_mark_takes_in_the_marks_set_before_it() {
    let valkey = valkey();
    let source = Source::open();
    let first = tagged(&store_on(&valkey.url()).await, &source).await;
    let deaf = common::builder_on(&valkey.url())
        .require_valkey(true)
        .coherence(false)
        .unconfirmed_l1_life(Duration::from_secs(3600))
        .build()
        .await
        .expect("store");
    let deaf = tagged(&deaf, &source).await;
    first.get(&1).await.expect("load");
    first.invalidate_tag("odd").await.expect("the first mark");
    deaf.invalidate_tag("even").await.expect("the second mark");
    let read = deaf.fetch(&1).await.expect("read");
    assert_eq!(
        (read.value.as_str(), read.origin),
        ("value-1-2", Origin::Loaded),
        "the copy of 1 was written before the first mark"
    );
}

/// A tag's sweep of L1 is the table's, not each shard's: with 8 shards, `.tags` is asked once per
/// entry in L1 by the invalidation here, and by the mark's push in another store (not once per
/// shard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_sweeps_l1_once_per_table() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    const ENTRIES: u64 = 200;
    let valkey = valkey();
    let source = Source::open();
    let asked = Arc::new(AtomicU64::new(0));
    let counting = |store: Store| {
        let asked = Arc::clone(&asked);
        let source = source.clone();
        async move {
            table_on(&store, "swept", &source, move |t| {
                t.ttl(Duration::from_secs(60))
                    .shards(8)
                    .tags(move |id: &u64, _: &String| {
                        asked.fetch_add(1, Relaxed);
                        [if id % 2 == 1 { "odd" } else { "even" }]
                    })
            })
            .await
        }
    };
    let here = counting(coherent_store(&valkey.url(), None).await).await;
    let there = counting(coherent_store(&valkey.url(), None).await).await;
    for id in 0..ENTRIES {
        here.get(&id).await.expect("load");
    }
    // Each load's write pushes to the other store: let them all arrive before it reads, so that
    // none drops an entry it has read.
    until_stats(&there, "the loads' pushes reached the other store", |s| {
        s.invalidations >= ENTRIES
    })
    .await;
    for id in 0..ENTRIES {
        there.get(&id).await.expect("read");
    }
    let (l1_here, l1_there) = (here.stats().l1_len, there.stats().l1_len);
    let before = asked.load(Relaxed);
    here.invalidate_tag("odd")
        .await
        .expect("invalidate the tag");
    until_stats(&there, "the mark reached the other store", |s| {
        s.marks_taken >= 1
    })
    .await;
    // The store that set the mark may also hear of it through its own push before its call
    // returns, and sweep what is left once more (the call must not return before its own sweep).
    let swept = asked.load(Relaxed) - before;
    assert!(
        swept > 0 && swept <= 2 * (l1_here + l1_there),
        ".tags asked {swept} times for {} entries in the two stores' L1",
        l1_here + l1_there
    );
}

/// Thousands of distinct tags, each invalidated once: the table's marks on Valkey stay bounded
/// (past 4,096 the oldest tags are folded into a clear) and carry a TTL, and a copy written before
/// a folded tag's mark is still a miss in another store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_stay_bounded_and_expire() {
    let _turn = common::heavy().await;
    const TAGS: u64 = 4_200;
    let valkey = valkey();
    let source = Source::open();
    let each_its_own = |t: TableBuilder<u64, String>| {
        t.ttl(Duration::from_secs(60))
            .tags(|id: &u64, _: &String| [format!("t{id}")])
    };
    let here = table_on(
        &store_on(&valkey.url()).await,
        "bounded",
        &source,
        each_its_own,
    )
    .await;
    here.get(&0).await.expect("load id 0, tagged t0");
    for tag in 0..TAGS {
        here.invalidate_tag(&format!("t{tag}"))
            .await
            .expect("a mark");
    }
    let mut conn = common::raw(&valkey.url()).await;
    let kept: u64 = redis::cmd("ZCARD")
        .arg("bounded:{}marks")
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    let ttl: i64 = redis::cmd("PTTL")
        .arg("bounded:{}marks")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(kept <= 4_097, "{kept} marks kept for {TAGS} tags");
    assert!(ttl > 0, "the marks' key has no TTL ({ttl})");
    let there = table_on(
        &store_on(&valkey.url()).await,
        "bounded",
        &source,
        each_its_own,
    )
    .await;
    assert_eq!(
        there.fetch(&0).await.expect("read").origin,
        Origin::Loaded,
        "the copy of id 0, written before t0's mark, was served"
    );
}

/// A store that hears no pushes (coherence off) reads the marks every `unconfirmed_l1_life`, and
/// every few milliseconds when that life is zero: a clear set by another store reaches its L1
/// although no push does. (A zero life made the poll's timer panic, and the poll end, silently.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_hears_no_push_reads_the_marks_even_with_no_unconfirmed_life() {
    let valkey = valkey();
    let deaf = common::builder_on(&valkey.url())
        .require_valkey(true)
        .coherence(false)
        .unconfirmed_l1_life(Duration::ZERO)
        .build()
        .await
        .expect("a store with coherence off");
    let source = Source::open();
    let reader = tagged(&deaf, &source).await;
    assert_eq!(reader.fetch(&1).await.expect("load").origin, Origin::Loaded);
    assert_eq!(reader.fetch(&1).await.expect("hit").origin, Origin::L1);

    let clearing = tagged(&store_on(&valkey.url()).await, &source).await;
    clearing.clear().await.expect("clear");
    until_stats(&reader, "the clear reached the deaf store", |s| {
        s.marks_taken >= 1
    })
    .await;
    assert_ne!(reader.fetch(&1).await.expect("read").origin, Origin::L1);
}
