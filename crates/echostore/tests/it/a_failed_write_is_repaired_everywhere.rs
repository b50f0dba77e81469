//! A `put` or `invalidate` that fails has usually followed a commit at the source, so Valkey's copy
//! of the id — and other processes' L1 copies — may now be older than the source. The writing
//! table remembers the id and repairs it (`DEL` of value and lock, which every other store hears as
//! a push) as soon as Valkey takes it; meanwhile its own reads do not trust Valkey's copy. Without
//! the repair, the old copy was served everywhere for the rest of its ttl (issue "outages, clocks
//! and edges"; `echostore check --faults kill-all` found reads going back to it).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{coherent_store, raw, read_envelope, settled, until_async, valkey};
use echostore::{EventKind, InvalidatedBy, Store, Table};

/// The source: one row, which the test moves on as a database commit would.
type Row = Arc<Mutex<String>>;

async fn rows_table(store: &Store, row: &Row) -> Table<u64, String> {
    let row = Arc::clone(row);
    store
        .table::<u64, String>("rows")
        .ttl(Duration::from_secs(60))
        .loader(move |_id: u64| {
            let row = Arc::clone(&row);
            async move { Ok::<_, std::io::Error>(row.lock().expect("row").clone()) }
        })
        .build()
        .await
        .expect("table")
}

/// Stores A (as user `writer`) and B share the row; both hold "v1" in L1.
async fn two_stores(
    url: &str,
    admin: &mut common::RawConn,
    row: &Row,
) -> (Table<u64, String>, Table<u64, String>) {
    common::acl_setuser(admin, "writer", &["on", ">secret", "~*", "&*", "+@all"]).await;
    let writer_url = url.replacen("redis://", "redis://writer:secret@", 1);
    let a = rows_table(&coherent_store(&writer_url, None).await, row).await;
    let b = rows_table(&coherent_store(url, None).await, row).await;
    a.put(&1, "v1".into()).await.expect("put v1");
    assert_eq!(*b.get(&1).await.expect("B reads v1"), "v1");
    (a, b)
}

/// The kinds of the events of id 1 received so far.
fn kinds(events: &mut tokio::sync::broadcast::Receiver<echostore::Event<u64>>) -> Vec<EventKind> {
    std::iter::from_fn(|| events.try_recv().ok())
        .filter(|e| e.id == Some(1))
        .map(|e| e.kind)
        .collect()
}

/// The repair reached B (its L1 copy of "v1" is retired and it reads "v2"), and Valkey no longer
/// holds "v1".
async fn repaired_everywhere(b: &Table<u64, String>, admin: &mut common::RawConn) {
    until_async("B's L1 copy of v1 is retired and B reads v2", async || {
        b.fetch(&1).await.expect("B reads").value.as_str() == "v2"
    })
    .await;
    let on_valkey = read_envelope::<String>(admin, "rows:{1}").await;
    assert!(
        on_valkey.as_ref().is_none_or(|env| env.value == "v2"),
        "Valkey no longer holds v1: {on_valkey:?}"
    );
}

/// A put refused by Valkey (the writer lost the right to run scripts) after the source moved to
/// "v2": Valkey's "v1" is deleted at once (a `DEL` is still allowed), B's L1 copy is retired by
/// that push and B reads "v2" from the source; A never serves Valkey's old copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_put_is_repaired_on_valkey_and_in_every_l1() {
    let valkey = valkey();
    let url = valkey.url();
    let mut admin = raw(&url).await;
    let row: Row = Arc::new(Mutex::new("v1".into()));
    let (a, b) = two_stores(&url, &mut admin, &row).await;
    // A holds v1 in L1 when it puts (a tracking connection that a loaded machine lost and
    // regained since would have flushed it, and a put of an id L1 does not hold retires nothing).
    until_async("A holds v1 in L1", async || {
        a.get(&1).await.expect("A reads v1");
        a.peek_local(&1).is_some()
    })
    .await;

    common::acl_setuser(&mut admin, "writer", &["-@scripting"]).await;
    *row.lock().expect("row") = "v2".into(); // the database committed
    let errors = a.stats().l2_errors;
    let mut events = a.events();
    let failed = a.put(&1, "v2".into()).await;
    assert!(failed.is_err(), "the put's script was refused: {failed:?}");
    assert!(
        a.stats().l2_errors > errors,
        "the failed put was not counted"
    );
    // A's L1 copy of v1 went when the put was taken, failed or not: a subscriber hears so, and
    // hears of no write.
    assert_eq!(
        kinds(&mut events),
        [EventKind::Invalidated {
            by: InvalidatedBy::Put
        }]
    );

    repaired_everywhere(&b, &mut admin).await;
    assert_eq!(*a.get(&1).await.expect("A reads"), "v2");
    common::acl_setuser(&mut admin, "writer", &["+@all"]).await;
    settled(&a).await;
}

/// An invalidate refused by Valkey (no `DEL` for the writer, so no repair can land either): A
/// keeps retrying, and once the right is back its repair lands and reaches B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_invalidate_is_repaired_once_valkey_takes_it() {
    let valkey = valkey();
    let url = valkey.url();
    let mut admin = raw(&url).await;
    let row: Row = Arc::new(Mutex::new("v1".into()));
    let (a, b) = two_stores(&url, &mut admin, &row).await;

    common::acl_setuser(&mut admin, "writer", &["-del"]).await;
    *row.lock().expect("row") = "v2".into();
    let errors = a.stats().l2_errors;
    let mut events = a.events();
    let failed = a.invalidate(&1).await;
    assert!(failed.is_err(), "the DEL was refused: {failed:?}");
    assert_eq!(
        kinds(&mut events),
        [EventKind::Invalidated {
            by: InvalidatedBy::Invalidate
        }],
        "A's L1 copy went, failed or not"
    );
    assert!(
        a.stats().l2_errors > errors,
        "the failed invalidate was not counted"
    );
    assert_eq!(
        *a.get(&1).await.expect("A reads"),
        "v2",
        "A loads in-process rather than trust Valkey's v1"
    );

    common::acl_setuser(&mut admin, "writer", &["+del"]).await;
    until_async("A's repair landed and reached B", async || {
        b.fetch(&1).await.expect("B reads").value.as_str() == "v2"
    })
    .await;
    settled(&a).await;
}

/// The source moved to "v2" and nobody told Valkey (a writer's put failed): store A, unable to
/// read Valkey, answers "v2" from its loader. A then never reads Valkey's older "v1": the
/// degraded load marks the id unsettled, so Valkey's copy is deleted before A trusts Valkey for
/// it again, and B, which held "v1", hears the delete. (A keeps nothing unconfirmed in L1 here,
/// so its next read goes to Valkey at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_answered_from_its_loader_never_reads_valkeys_older_copy() {
    let valkey = valkey();
    let url = valkey.url();
    let mut admin = raw(&url).await;
    let row: Row = Arc::new(Mutex::new("v1".into()));
    common::acl_setuser(
        &mut admin,
        "writer",
        &["on", ">secret", "~*", "&*", "+@all"],
    )
    .await;
    let b = rows_table(&coherent_store(&url, None).await, &row).await;
    b.put(&1, "v1".into()).await.expect("put v1");
    let writer_url = url.replacen("redis://", "redis://writer:secret@", 1);
    let a_store = Store::builder()
        .valkey(writer_url)
        .require_valkey(true)
        .unconfirmed_l1_life(Duration::ZERO)
        .build()
        .await
        .expect("store A");
    let a = rows_table(&a_store, &row).await;

    *row.lock().expect("row") = "v2".into(); // committed; Valkey was never told
    common::acl_setuser(&mut admin, "writer", &["-@scripting", "-getrange"]).await; // A cannot read Valkey; DEL still goes
    assert_eq!(*a.get(&1).await.expect("A loads in-process"), "v2");
    common::acl_setuser(&mut admin, "writer", &["+@all"]).await;

    assert_eq!(
        *a.get(&1).await.expect("A reads again"),
        "v2",
        "A never goes back to Valkey's v1"
    );
    repaired_everywhere(&b, &mut admin).await;
    settled(&a).await;
}

/// A clear Valkey refuses (the writer lost the right to run scripts) is a failed write like a
/// put's: counted in `l2_errors`, and this process's L1 still drops what it covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_clear_is_counted_and_still_drops_l1() {
    let valkey = valkey();
    let url = valkey.url();
    let mut admin = raw(&url).await;
    let row: Row = Arc::new(Mutex::new("v1".into()));
    let (a, _b) = two_stores(&url, &mut admin, &row).await;
    assert_eq!(a.peek_local(&1).as_deref().map(String::as_str), Some("v1"));

    common::acl_setuser(&mut admin, "writer", &["-@scripting"]).await;
    let errors = a.stats().l2_errors;
    let refused = a.clear().await;
    assert!(
        refused.is_err(),
        "the mark's script was refused: {refused:?}"
    );
    assert!(
        a.stats().l2_errors > errors,
        "the refused clear was not counted"
    );
    assert!(a.peek_local(&1).is_none(), "L1 kept what the clear covers");
    common::acl_setuser(&mut admin, "writer", &["+@all"]).await;
}

/// Sets Valkey's `maxmemory` (1: every write is refused with OOM; 0: no limit).
async fn maxmemory(conn: &mut common::RawConn, bytes: u64) {
    for (name, value) in [
        ("maxmemory-policy", "noeviction".to_owned()),
        ("maxmemory", bytes.to_string()),
    ] {
        common::config_set(conn, name, value).await;
    }
}

/// A load whose write back fails (Valkey refuses it) leaves Valkey an older copy, which a later
/// read of this process could serve as its stale copy after answering the loaded row: it went
/// back. So the failed write marks the id unsettled, as a degraded load does, and Valkey's older
/// copy is deleted; the row is kept for the unconfirmed life only. A batch read's write likewise.
async fn a_failed_write_back_retires_the_older_copy(batch: bool) {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let source = common::Source::gated();
    let name = if batch { "unsure_b" } else { "unsure" };
    let t = common::valkey_table(&valkey.url(), name, &source, |t| {
        t.ttl(Duration::from_secs(60))
            .stale_for(Duration::from_secs(600))
    })
    .await;
    let key = format!("{name}:{{1}}");
    let now = common::unix_ms();
    let older = common::envelope(now - 1_000, now - 2_000, &"v0".to_owned());
    let _: () = redis::AsyncCommands::set(&mut conn, &key, older)
        .await
        .expect("plant an older copy");

    let read = tokio::spawn({
        let t = t.clone();
        async move {
            if batch {
                let mut answers = t.fetch_many([1u64, 2]).await;
                answers.remove(0).1
            } else {
                t.fetch(&1).await
            }
        }
    });
    common::until("the source is read under the lock", || source.calls() >= 1).await;
    maxmemory(&mut conn, 1).await;
    source.release();
    let read = read.await.expect("the read").expect("the loaded row");
    assert_eq!(read.origin, echostore::Origin::Loaded);
    assert!(t.stats().l2_errors >= 1, "the write back failed");
    maxmemory(&mut conn, 0).await;

    until_async("Valkey's older copy is deleted", async || {
        !common::exists(&mut conn, &key).await
    })
    .await;
    settled(&t).await;
    let next = t.fetch(&1).await.expect("the next read");
    assert_ne!(*next.value, "v0", "went back to the older copy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_back_retires_valkeys_older_copy() {
    a_failed_write_back_retires_the_older_copy(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_failed_write_back_retires_valkeys_older_copy() {
    a_failed_write_back_retires_the_older_copy(true).await;
}

/// What Valkey holds of id 1 once store A repaired it, after A loaded version 2 and its write
/// back failed, and B put `b_puts` before the repair could land. Store A (user `writer`) is
/// refused scripts and writes while its load writes back; it gets its rights back and repairs
/// (seen by the hook that counts what the table holds of its ids).
#[cfg(feature = "fault-injection")]
async fn after_a_load_repair_over(b_puts: u64) -> Option<u64> {
    let valkey = valkey();
    let url = valkey.url();
    let mut admin = raw(&url).await;
    common::acl_setuser(
        &mut admin,
        "writer",
        &["on", ">secret", "~*", "&*", "+@all"],
    )
    .await;
    let source = common::Source::gated();
    let versioned = |store: Store, source: common::Source| async move {
        store
            .table::<u64, u64>("versioned")
            .ttl(Duration::from_secs(60))
            .version_by(|v: &u64| *v)
            .loader(move |_id: u64| {
                let source = source.clone();
                async move {
                    source.read().await;
                    Ok::<_, std::io::Error>(2)
                }
            })
            .build()
            .await
            .expect("table")
    };
    let writer_url = url.replacen("redis://", "redis://writer:secret@", 1);
    let a = versioned(coherent_store(&writer_url, None).await, source.clone()).await;
    let b = versioned(coherent_store(&url, None).await, common::Source::open()).await;

    let read = tokio::spawn({
        let a = a.clone();
        async move { a.fetch(&1).await }
    });
    common::until("A reads the source under the lock", || source.calls() >= 1).await;
    common::acl_setuser(&mut admin, "writer", &["-@scripting", "-@write"]).await;
    source.release();
    let read = read.await.expect("A's read").expect("the loaded row");
    assert_eq!((*read.value, read.origin), (2, echostore::Origin::Loaded));
    b.put(&1, b_puts).await.expect("B's put");

    common::acl_setuser(&mut admin, "writer", &["+@all"]).await;
    common::until("A's repair landed", || a.ids_held() == 0).await;
    let held = read_envelope::<u64>(&mut admin, "versioned:{1}").await;
    held.map(|copy| copy.value)
}

/// A load's repair keeps a copy that shows the row's version, written by another process before
/// the repair landed: it is not older than the row, and deleting it would cost every process a
/// source read nobody needs.
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_keeps_a_copy_that_shows_the_loaded_version() {
    assert_eq!(
        after_a_load_repair_over(2).await,
        Some(2),
        "the repair deleted B's copy of the version A answered"
    );
}

/// And deletes one older than the row: A would go back to it otherwise.
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_deletes_a_copy_older_than_the_loaded_version() {
    assert_eq!(
        after_a_load_repair_over(1).await,
        None,
        "the repair kept B's copy, older than the version A answered"
    );
}
