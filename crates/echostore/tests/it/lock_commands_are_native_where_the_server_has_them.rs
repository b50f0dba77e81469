//! The release and the lease use Valkey's own commands where the server has them — `DELIFEQ`
//! (9.0) and `SET … IFEQ … PX` (8.1), found from `INFO server` — and the Lua scripts otherwise
//! (`StoreBuilder::native_lock_commands(false)` stands in for an older server here). Both paths
//! keep the lock while the winner loads, release only this winner's lock, and leave another
//! holder's lock in place. `INFO commandstats` tells which path ran: it counts the commands a
//! script runs too, so `pexpire` appears only when the lease is the script.

use crate::common;

use std::time::Duration;

use common::{
    Source, SourceLoader, builder_on, exists, raw, settled, spawn_fetch, until, until_async, valkey,
};
use echostore::Table;
use redis::AsyncCommands;

const LOCK: &str = "lock:native:{1}";

/// Calls of `command` since the last `CONFIG RESETSTAT`, summed over the servers.
async fn calls(conn: &mut common::RawConn, command: &str) -> u64 {
    common::command_calls(conn, command).await
}

async fn table(url: &str, native: bool, loader: SourceLoader) -> Table<u64, String> {
    builder_on(url)
        .require_valkey(true)
        .native_lock_commands(native)
        .build()
        .await
        .expect("store")
        .table::<u64, String>("native")
        .lock_ttl(Duration::from_millis(300))
        .loader(loader)
        .build()
        .await
        .expect("table")
}

/// A winner whose load outlasts several lease periods keeps its lock, then releases it: with its
/// fenced write, which deletes the lock in the same script, or, when its load fails and it writes
/// nothing, with the release of its own (`DELIFEQ`, or the script).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_and_the_release_take_the_servers_own_commands_or_the_scripts() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    for native in [true, false] {
        let _: () = conn.del(&["native:{1}", LOCK]).await.expect("DEL");
        let source = Source::gated();
        // The first read answers; the next fails, so its winner writes nothing.
        let loader = source.answering(|id, n| match n {
            1 => Ok(format!("value-{id}-1")),
            _ => Err(std::io::Error::other("the source is down")),
        });
        let t = table(&valkey.url(), native, loader).await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .expect("CONFIG RESETSTAT");
        let fill = spawn_fetch(&t, 1);
        until("the winner reads the source", || source.calls() == 1).await;
        let lease = if native { "set" } else { "pexpire" };
        until_async("the lease extended the lock twice", async || {
            // The acquire's own `SET … NX` is one `set`: the lease adds to it.
            let base = u64::from(native);
            calls(&mut conn, lease).await >= base + 2
        })
        .await;
        assert!(
            exists(&mut conn, LOCK).await,
            "held past its PX by the lease"
        );
        source.release();
        assert_eq!(
            *fill.await.expect("task").expect("value").value,
            "value-1-1"
        );
        assert!(
            !exists(&mut conn, LOCK).await,
            "released by the fenced write"
        );
        let (delifeq, pexpire) = (
            calls(&mut conn, "delifeq").await,
            calls(&mut conn, "pexpire").await,
        );
        match native {
            true => assert_eq!((delifeq, pexpire), (0, 0), "SET IFEQ leases"),
            false => assert!(
                delifeq == 0 && pexpire >= 2,
                "the scripts: {delifeq}, {pexpire}"
            ),
        }
        assert_eq!((t.stats().released, t.stats().lease_lost), (1, 0));

        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .expect("CONFIG RESETSTAT");
        assert!(t.get(&2).await.is_err(), "the source is down");
        assert!(
            !exists(&mut conn, "lock:native:{2}").await,
            "released after the failed load"
        );
        let (delifeq, del) = (
            calls(&mut conn, "delifeq").await,
            calls(&mut conn, "del").await,
        );
        match native {
            true => assert_eq!((delifeq, del), (1, 0), "DELIFEQ"),
            false => assert_eq!((delifeq, del), (0, 1), "the release script's DEL"),
        }
        assert_eq!(t.stats().released, 2);
        settled(&t).await;
    }
}

/// The lock is taken over mid-load by another holder: neither path's lease revives this
/// winner's lock, and neither path's release deletes the other holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_path_touches_another_holders_lock() {
    let valkey = valkey();
    let mut conn = raw(&valkey.url()).await;
    for native in [true, false] {
        let _: () = conn.del(&["native:{1}", LOCK]).await.expect("DEL");
        let source = Source::gated();
        let t = table(&valkey.url(), native, source.loader()).await;
        let fill = spawn_fetch(&t, 1);
        until("the winner reads the source", || source.calls() == 1).await;
        let _: () = conn.set(LOCK, "token-of-another").await.expect("SET");
        until("the lease found the lock not its own", || {
            t.stats().lease_lost == 1
        })
        .await;
        source.release();
        fill.await.expect("task").expect("the winner still answers");
        let held: Option<String> = conn.get(LOCK).await.expect("GET");
        assert_eq!(
            held.as_deref(),
            Some("token-of-another"),
            "native: {native}"
        );
        assert_eq!(t.stats().release_skipped, 1, "native: {native}");
        let _: () = conn.del(LOCK).await.expect("DEL");
        settled(&t).await;
    }
}
