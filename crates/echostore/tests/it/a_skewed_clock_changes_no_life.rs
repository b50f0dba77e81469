//! No copy's life rests on a process's wall clock: a replica whose clock runs far ahead still
//! takes the copies on Valkey for fresh (it does not reload them), one whose clock runs behind
//! writes copies the others take for fresh, and the write scripts stamp `fresh_until` on
//! Valkey's `TIME` whatever clock the writer had; and a put the server held up moves no process's
//! estimate of Valkey's clock. The offset the first test sets (`echostore check`'s `skew` fault)
//! is process-wide, so that test runs in a process of its own.

use crate::common;

use std::time::Duration;

use common::{
    Source, envelope, in_a_process_of_its_own, patient_store, pause_writes, raw, read_envelope,
    store_on, table_on, valkey,
};
use echostore::Origin;
use echostore::protocol::offset_wall_clock;
use echostore::protocol::scripts::PUT_SCRIPT;

const TTL: Duration = Duration::from_secs(60);
/// Far more than a ttl and its stale window.
const SKEW_MS: i64 = 3_600_000;

async fn server_ms(conn: &mut common::RawConn) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1000 + micros / 1000
}

/// Two stores on one Valkey; one loads, then the process's clock jumps an hour ahead (and then
/// behind): a store reading the copy takes it from Valkey, and a copy written while behind is
/// fresh for a store with the right clock. The source is read once per id throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_ahead_or_behind_neither_expires_nor_reloads_copies() {
    if !in_a_process_of_its_own(
        "a_skewed_clock_changes_no_life::a_clock_ahead_or_behind_neither_expires_nor_reloads_copies",
    ) {
        return;
    }
    let valkey = valkey();
    let source = Source::open();
    let tune = |t: echostore::TableBuilder<u64, String>| t.ttl(TTL).jitter(0.0);
    let writer = table_on(&store_on(&valkey.url()).await, "skew", &source, tune).await;
    let reader = table_on(&store_on(&valkey.url()).await, "skew", &source, tune).await;

    writer.get(&1).await.expect("load");
    offset_wall_clock(SKEW_MS);
    let ahead = reader.fetch(&1).await.expect("read while ahead");
    offset_wall_clock(0);
    assert_eq!(
        (ahead.origin, source.calls()),
        (Origin::L2, 1),
        "a clock an hour ahead took the copy for fresh"
    );

    offset_wall_clock(-SKEW_MS);
    writer.get(&2).await.expect("load while behind");
    offset_wall_clock(0);
    let mut conn = raw(&valkey.url()).await;
    let now = server_ms(&mut conn).await;
    let stored = read_envelope::<String>(&mut conn, "skew:{2}")
        .await
        .expect("the copy");
    assert!(stored.written_at_ms <= now, "written_at is Valkey's");
    assert_eq!(
        stored.fresh_until_ms - stored.written_at_ms,
        TTL.as_millis() as u64,
        "fresh_until is a ttl past Valkey's written_at, not the writer's clock"
    );
    let behind = reader.fetch(&2).await.expect("read");
    assert_eq!(
        (behind.origin, source.calls()),
        (Origin::L2, 2),
        "a copy written by a clock an hour behind is fresh for the others"
    );
}

/// The put script moves `fresh_until` with `written_at` onto `TIME`, keeping the life the writer
/// gave, whatever its clock said: an envelope from a writer a day behind lands fresh for 5 s.
#[tokio::test]
async fn the_put_script_stamps_fresh_until_on_valkeys_clock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    let day_ago = server_ms(&mut conn).await - 86_400_000;
    let sent = envelope(day_ago + 5_000, day_ago, &"from a clock a day behind");
    let (written, at): (i64, u64) = redis::Script::new(PUT_SCRIPT)
        .key("skew:{3}")
        .key("lock:skew:{3}")
        .arg(&sent)
        .arg(60_000)
        .arg(0)
        .invoke_async(&mut conn)
        .await
        .expect("put");
    assert_eq!(written, 1, "written");
    let stored = read_envelope::<String>(&mut conn, "skew:{3}")
        .await
        .expect("stored");
    assert_eq!(
        (stored.written_at_ms, stored.fresh_until_ms),
        (at, at + 5_000),
        "both stamps on the server's clock, the life kept"
    );
    assert_eq!(stored.value, "from a clock a day behind");
}

/// A put that `CLIENT PAUSE WRITE` held for 4 s came back with the server's time at the end of the
/// pause: it moves no estimate of Valkey's clock, so a copy fresh for 1.5 s more on Valkey's clock
/// is still read as fresh by the same store, not reloaded from the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_the_server_held_up_moves_no_clock() {
    const PAUSE_MS: u64 = 4_000;
    let valkey = valkey();
    let source = Source::open();
    let store = patient_store(&valkey.url(), Duration::from_millis(PAUSE_MS * 3)).await;
    let table = table_on(&store, "held", &source, |t| t.ttl(TTL).jitter(0.0)).await;
    let mut conn = raw(&valkey.url()).await;
    pause_writes(&mut conn, PAUSE_MS).await;
    table
        .put(&1, "held up".into())
        .await
        .expect("the put lands after the pause");

    let now = server_ms(&mut conn).await;
    let planted = envelope(now + 1_500, now, &"fresh for 1.5 s more");
    let _: () = redis::AsyncCommands::set(&mut conn, "held:{2}", planted)
        .await
        .expect("SET");
    let read = table.fetch(&2).await.expect("read");
    assert_eq!(
        (read.origin, source.calls()),
        (Origin::L2, 0),
        "the copy was taken for expired: the held-up put moved the clock ahead"
    );
}
