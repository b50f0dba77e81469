//! Read-your-writes across replicas: a write's version, carried as a token from the store that
//! wrote to another store, makes that store's read return the write (or a newer one) although
//! it never hears the write's push (its coherence is off: the push held back for good).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::valkey;
use echostore::{Error, LoserPolicy, ReadOptions, Store, Table, Version};

/// The source: one row's version, which a write moves on before it puts.
#[derive(Clone, Default)]
struct Row(Arc<AtomicU64>);

/// A table of `name` on `store` whose loader reads `row`; ordered by the value's own version
/// when `by_version`.
async fn table(store: &Store, name: &str, row: &Row, by_version: bool) -> Table<u64, u64> {
    let row = row.clone();
    let mut builder = store
        .table::<u64, u64>(name)
        .ttl(Duration::from_secs(60))
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_millis(300),
        });
    if by_version {
        builder = builder.version_by(|v: &u64| *v);
    }
    builder
        .loader(move |_id: u64| {
            let row = row.clone();
            async move { Ok::<_, std::io::Error>(row.0.load(SeqCst)) }
        })
        .build()
        .await
        .expect("table")
}

/// A table of `name` on `store` whose values are rows that may be gone (`None`, which shows no
/// version), ordered by `.version_by`; its loader reads `row` (0: the row is gone).
async fn optional(store: &Store, name: &str, row: &Row) -> Table<u64, Option<u64>> {
    let row = row.clone();
    store
        .table::<u64, Option<u64>>(name)
        .ttl(Duration::from_secs(60))
        .version_by(|v: &Option<u64>| v.unwrap_or(0))
        .loader(move |_id: u64| {
            let row = row.clone();
            async move { Ok::<_, std::io::Error>(Some(row.0.load(SeqCst)).filter(|&v| v > 0)) }
        })
        .build()
        .await
        .expect("table")
}

/// Store A, coherent, and store B, which hears no push.
async fn replicas(url: &str) -> (Store, Store) {
    let a = common::coherent_store(url, None).await;
    let b = common::builder_on(url)
        .require_valkey(true)
        .coherence(false)
        .build()
        .await
        .expect("store B");
    (a, b)
}

/// A writes version 2 over the version 1 B holds in L1; B's plain read still answers 1, its
/// read at least the token A's write returned answers 2, and so does every read after it.
async fn carried(by_version: bool) {
    let valkey = valkey();
    let (a, b) = replicas(&valkey.url()).await;
    let row = Row(Arc::new(AtomicU64::new(1)));
    let name = if by_version { "by_version" } else { "by_clock" };
    let (on_a, on_b) = (
        table(&a, name, &row, by_version).await,
        table(&b, name, &row, by_version).await,
    );
    assert_eq!(*on_b.get(&7).await.expect("B's first read"), 1);

    row.0.store(2, SeqCst);
    let written = on_a.put_versioned(&7, 2).await.expect("A's put");
    let token = written.version.to_string();
    assert_eq!(
        *on_b.get(&7).await.expect("B's plain read"),
        1,
        "B heard the push after all"
    );

    let wanted: Version = token.parse().expect("the token parses back");
    let hits = on_b.stats().l1_hits;
    let read = on_b
        .get_with(&7, ReadOptions::new().at_least(wanted))
        .await
        .expect("B's read at least A's version");
    assert_eq!(*read, 2, "B answered a copy older than the token");
    assert_eq!(
        on_b.stats().l1_hits,
        hits,
        "the L1 copy the read passed over was counted as a hit"
    );
    assert_eq!(
        *on_b.get(&7).await.expect("B's next read"),
        2,
        "B went back in time"
    );
}

#[tokio::test]
async fn a_token_from_a_put_is_read_on_a_replica_that_missed_the_push() {
    carried(false).await;
}

#[tokio::test]
async fn a_token_from_a_versioned_put_is_read_on_a_replica_that_missed_the_push() {
    carried(true).await;
}

/// A version the source never reaches: the read reads on until its bound, then says so.
#[tokio::test]
async fn a_version_the_source_cannot_give_is_unavailable() {
    let valkey = valkey();
    let store = common::coherent_store(&valkey.url(), None).await;
    let row = Row(Arc::new(AtomicU64::new(1)));
    let t = table(&store, "unreached", &row, true).await;
    let ahead: Version = "s64".parse().expect("a token");
    let refused = t
        .get_with(&7, ReadOptions::new().at_least(ahead))
        .await
        .expect_err("the source is behind the token");
    assert!(
        matches!(refused, Error::VersionUnavailable { wanted } if wanted == ahead),
        "{refused}"
    );
    // And once the source catches up, the same read answers.
    row.0.store(0x64, SeqCst);
    let read = t
        .get_with(&7, ReadOptions::new().at_least(ahead))
        .await
        .expect("caught up");
    assert_eq!(*read, 0x64);
}

/// A copy whose version cannot be told (`.version_by` panics on it) is not taken for one at least
/// the token: the read reads on, and answers the written version, not the older copy B holds.
#[tokio::test]
async fn a_copy_whose_version_cannot_be_told_is_read_past() {
    let valkey = valkey();
    let (a, b) = replicas(&valkey.url()).await;
    let row = Row(Arc::new(AtomicU64::new(13)));
    let touchy = |store: &Store| {
        let row = row.clone();
        store
            .table::<u64, u64>("touchy")
            .ttl(Duration::from_secs(60))
            .version_by(|v: &u64| {
                assert_ne!(*v, 13, "version_by cannot stand 13");
                *v
            })
            .loader(move |_id: u64| {
                let row = row.clone();
                async move { Ok::<_, std::io::Error>(row.0.load(SeqCst)) }
            })
            .build()
    };
    let (on_a, on_b) = (
        touchy(&a).await.expect("table on A"),
        touchy(&b).await.expect("table on B"),
    );
    assert_eq!(*on_b.get(&7).await.expect("B's first read"), 13);

    row.0.store(20, SeqCst);
    let written = on_a.put_versioned(&7, 20).await.expect("A's put");
    let read = on_b
        .get_with(&7, ReadOptions::new().at_least(written.version))
        .await
        .expect("B's read at least A's version");
    assert_eq!(
        *read, 20,
        "B answered a copy whose version it could not tell"
    );
}

/// A deletion in L1 (`None`) is not taken for a copy at least the token: a write after a delete
/// re-creates the row, whatever its version. B holds the `None` it read while the row was gone; A
/// re-creates the row; B's read at least A's version answers the row, not the `None`.
#[tokio::test]
async fn a_deletion_is_not_taken_for_a_later_re_creation() {
    let valkey = valkey();
    let (a, b) = replicas(&valkey.url()).await;
    let row = Row(Arc::new(AtomicU64::new(0))); // 0: the row is gone
    let (on_a, on_b) = (
        optional(&a, "optional", &row).await,
        optional(&b, "optional", &row).await,
    );
    assert_eq!(*on_b.get(&7).await.expect("B's first read"), None);

    row.0.store(20, SeqCst);
    let written = on_a
        .put_versioned(&7, Some(20))
        .await
        .expect("A re-creates the row");
    let read = on_b
        .get_with(&7, ReadOptions::new().at_least(written.version))
        .await
        .expect("B's read at least A's version");
    assert_eq!(*read, Some(20), "B answered the deletion it held");
}

/// A deletion on Valkey (`None`) is not taken for a row the source re-created since: the
/// service moved the row to version 2 at the source, and its put is still on its way, when a
/// read at least the source's version 2 finds the delete's `None` on Valkey. That `None` shows
/// no version, so the read asks the source and answers the row.
#[tokio::test]
async fn a_deletion_on_valkey_is_not_taken_for_a_row_re_created_at_the_source() {
    let valkey = valkey();
    let store = common::coherent_store(&valkey.url(), None).await;
    let row = Row(Arc::new(AtomicU64::new(1)));
    let table = optional(&store, "re_created", &row).await;
    assert_eq!(*table.get(&7).await.expect("the first read"), Some(1));
    row.0.store(0, SeqCst);
    table.delete(&7).await.expect("the delete");

    row.0.store(2, SeqCst); // re-created at the source; its put not made yet
    let read = table
        .get_with(&7, ReadOptions::new().at_least(Version::from_source(2)))
        .await
        .expect("the read at least version 2");
    assert_eq!(
        *read,
        Some(2),
        "the read answered the delete's None from Valkey"
    );
    assert_eq!(
        *table.get(&7).await.expect("a plain read after it"),
        Some(2)
    );
}

/// A `None` that lands on Valkey after the read dropped an older copy shows no version either:
/// a put sent before the read began may land after that drop, up to its deadline. Valkey holds
/// version 1 and the source has moved to 2; the read finds 1 and drops it; another holder's lock
/// keeps the read waiting, and the late put of a `None` lands (dropping that lock as any put
/// does). The read must answer the source's 2, not that `None`.
#[tokio::test]
async fn a_none_landing_after_the_read_dropped_an_older_copy_is_not_taken() {
    let valkey = valkey();
    let (writer, reader) = replicas(&valkey.url()).await;
    let row = Row(Arc::new(AtomicU64::new(1)));
    let (on_writer, on_reader) = (
        optional(&writer, "late_none", &row).await,
        optional(&reader, "late_none", &row).await,
    );
    on_writer
        .put(&7, Some(1))
        .await
        .expect("version 1 on Valkey");
    row.0.store(2, SeqCst); // the source moves on; no write tells the caches

    let names = on_reader.key_names(&7).expect("key names");
    let mut conn = common::raw(&valkey.url()).await;
    let lock = String::from_utf8(names.lock).expect("a text lock key");
    common::hold_lock(&mut conn, &lock, "another-holder").await;
    let read = tokio::spawn(async move {
        on_reader
            .get_with(&7, ReadOptions::new().at_least(Version::from_source(2)))
            .await
    });
    common::until_async("the read dropped version 1", async || {
        !common::exists(&mut conn, &names.value).await
    })
    .await;
    on_writer.put(&7, None).await.expect("the late put");

    let read = read.await.expect("the read's task").expect("the read");
    assert_eq!(*read, Some(2), "the read took the late put's None");
}

/// A copy recent enough that lands between the read's look at an older one and its drop stays:
/// the drop takes only a copy that does not show the wanted version. Valkey holds version 1 and
/// the source 2; the reader finds 1, and while it weighs it (its `.version_by`, the hook here)
/// the writer's put of 2 lands. The read must answer that 2 from Valkey, and the source, which
/// the put made needless to read, must not be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recent_copy_landing_before_the_drop_stays() {
    let valkey = valkey();
    let (writer, reader) = replicas(&valkey.url()).await;
    let row = Row(Arc::new(AtomicU64::new(1)));
    let on_writer = table(&writer, "landing", &row, true).await;
    on_writer.put(&7, 1).await.expect("version 1 on Valkey");
    row.0.store(2, SeqCst);

    let landed = Arc::new(AtomicBool::new(false));
    let put_of_2_lands = move |v: &u64| {
        if *v == 1 && !landed.swap(true, SeqCst) {
            // The reader's worker hands its other tasks on while the put runs to its end.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(on_writer.put(&7, 2))
            })
            .expect("the put of 2");
        }
        *v
    };
    let loads = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&loads);
    let on_reader = reader
        .table::<u64, u64>("landing")
        .ttl(Duration::from_secs(60))
        .version_by(put_of_2_lands)
        .loader(move |_id: u64| {
            counted.fetch_add(1, SeqCst);
            async move { Ok::<_, std::io::Error>(2) }
        })
        .build()
        .await
        .expect("the reader's table");

    let read = on_reader
        .get_with(&7, ReadOptions::new().at_least(Version::from_source(2)))
        .await
        .expect("the read at least version 2");
    assert_eq!(*read, 2);
    assert_eq!(
        loads.load(SeqCst),
        0,
        "the read dropped the put's version 2 and read the source again"
    );
}

/// A `None` the source gave a flight that a read joined counts as the source's answer, as it
/// does for the flight's leader: the flight began after both reads had dropped what L1 held (any
/// flight running before is overtaken by the drop), so its source read came after both began.
/// Two reads at least the source's version 2 of a row gone at the source, together in one
/// process: one leads the flight, the other joins it. Before, the joiner took the `None` for one
/// with no version to tell, dropped it from Valkey and read the source again.
#[tokio::test]
async fn a_none_from_a_joined_flight_is_the_sources_answer() {
    let valkey = valkey();
    let store = common::coherent_store(&valkey.url(), None).await;
    let loads = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&loads);
    let table = store
        .table::<u64, Option<u64>>("joined_none")
        .ttl(Duration::from_secs(60))
        .version_by(|v: &Option<u64>| v.unwrap_or(0))
        .loader(move |_id: u64| {
            counted.fetch_add(1, SeqCst);
            async move { Ok::<_, std::io::Error>(None) }
        })
        .build()
        .await
        .expect("table");

    let at_least_2 = || ReadOptions::new().at_least(Version::from_source(2));
    let (one, other) = tokio::join!(
        table.get_with(&7, at_least_2()),
        table.get_with(&7, at_least_2())
    );
    assert_eq!(*one.expect("one read"), None);
    assert_eq!(*other.expect("the other read"), None);
    assert_eq!(
        table.stats().coalesced,
        1,
        "one read joined the other's flight"
    );
    assert_eq!(
        loads.load(SeqCst),
        1,
        "the joiner dropped the flight's None and read the source again"
    );
}
