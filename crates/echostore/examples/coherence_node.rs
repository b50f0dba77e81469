//! One node of a cross-process coherence check: a store (coherence on) with one table whose ttl
//! is a minute, driven line by line on stdin, so a test can make a write in one process and watch
//! it reach every other process's L1.
//!
//! ```text
//! coherence_node <valkey-url> <run-id> [broadcast|keys]
//! ```
//!
//! The third argument is the store's [`Tracking`] mode (default broadcast).
//!
//! The table `coh` (`String -> String`, ttl 60 s, no jitter) loads an id from the Valkey key
//! `src:<run-id>:<id>` and counts each load with `INCR src:<run-id>:reads`; both keys lie outside
//! the table's prefixes. Once Valkey's pushes reach the table (it writes a probe key under the
//! table's prefix until the table counts the invalidation; under key tracking it puts the probe
//! through the table first, so that Valkey tracks it), the node prints `ready`. Then each
//! command gets one JSON line in answer:
//!
//! ```text
//! get <id>             {"value", "origin", "invalidations"}  one fetch
//! settle <id>          the same, once a fetch is answered from L1 (the id is in L1)
//! wait-for <id> <v>    the same, once a fetch returns <v> (fetches in a loop; gives up after 30 s)
//! put <id> <v>         {"ok": true}
//! invalidate <id>      {"ok": true}
//! stats                the table's counters
//! ```
//!
//! `invalidations`, in every answer, counts the pushes that reached the table since `ready`
//! (not the probe's).

use std::io::BufRead;
use std::time::{Duration, Instant};

use echostore::{Fetched, Origin, Store, Table, Tracking};
use redis::AsyncCommands;
use serde_json::{Value, json};

/// How long `settle` and `wait-for` keep fetching: far below the ttl, far above a healthy push.
const GIVE_UP: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, run, tracking) = match &args[..] {
        [_, url, run] => (url, run, Tracking::Broadcast),
        [_, url, run, mode] if mode == "broadcast" => (url, run, Tracking::Broadcast),
        [_, url, run, mode] if mode == "keys" => (url, run, Tracking::Keys),
        _ => return Err("usage: coherence_node <valkey-url> <run-id> [broadcast|keys]".into()),
    };
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let store = Store::builder()
        .valkey(url.as_str())
        .require_valkey(true)
        .coherence(true)
        .tracking(tracking)
        .build()
        .await?;
    let (source, run_id) = (conn.clone(), run.clone());
    let table = store
        .table::<String, String>("coh")
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .loader(move |id: String| {
            let (mut source, run) = (source.clone(), run_id.clone());
            async move {
                let _: u64 = source.incr(format!("src:{run}:reads"), 1).await?;
                let value: Option<String> = source.get(format!("src:{run}:{id}")).await?;
                Ok::<_, redis::RedisError>(value.unwrap_or_default())
            }
        })
        .build()
        .await?;
    tracked(&table, &mut conn).await?;
    let base = table.stats().invalidations;
    println!("ready");

    // Commands arrive on a thread of their own; stdin closing ends the node.
    let (tx, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = commands.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words[..] {
            ["get", id] => seen(&table, base, table.fetch(&id.to_owned()).await?),
            ["settle", id] => {
                fetch_until(&table, base, id, |f| matches!(f.origin, Origin::L1)).await?
            }
            ["wait-for", id, want] => fetch_until(&table, base, id, |f| *f.value == want).await?,
            ["put", id, value] => {
                table.put(&id.to_owned(), value.to_owned()).await?;
                json!({ "ok": true })
            }
            ["invalidate", id] => {
                table.invalidate(&id.to_owned()).await?;
                json!({ "ok": true })
            }
            ["stats"] => {
                // A flight answers on its own task; its owner ends it a moment later.
                while table.stats().in_flight > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                let mut stats = serde_json::to_value(table.stats())?;
                stats["invalidations"] = json!(table.stats().invalidations - base);
                stats
            }
            _ => json!({ "error": format!("unknown command {line:?}") }),
        };
        println!("{answer}");
    }
    Ok(())
}

/// A fetch's answer line.
fn seen(table: &Table<String, String>, base: u64, fetched: Fetched<String>) -> Value {
    json!({
        "value": *fetched.value,
        "origin": format!("{:?}", fetched.origin),
        "invalidations": table.stats().invalidations - base,
    })
}

/// Fetches `id` until `done` holds for an answer, then answers with it; an error line after
/// [`GIVE_UP`].
async fn fetch_until(
    table: &Table<String, String>,
    base: u64,
    id: &str,
    done: impl Fn(&Fetched<String>) -> bool,
) -> echostore::Result<Value> {
    let (id, give_up) = (id.to_owned(), Instant::now() + GIVE_UP);
    loop {
        let fetched = table.fetch(&id).await?;
        if done(&fetched) {
            return Ok(seen(table, base, fetched));
        }
        if Instant::now() >= give_up {
            return Ok(json!({ "error": "gave up", "last": seen(table, base, fetched) }));
        }
        tokio::task::yield_now().await;
    }
}

/// Returns once Valkey's pushes reach `table`: sets a probe key under its prefix until the table
/// counts an invalidation (tracking connected, the table's prefix subscribed).
async fn tracked(
    table: &Table<String, String>,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<(), Box<dyn std::error::Error>> {
    let id = format!("probe-{}", std::process::id());
    let probe = format!("coh:{{{id}}}");
    let give_up = Instant::now() + GIVE_UP;
    loop {
        let before = table.stats().invalidations;
        table.put(&id, String::new()).await?;
        let _: () = conn.set(&probe, "probe").await?;
        let retry = Instant::now() + Duration::from_millis(100);
        while Instant::now() < retry {
            if table.stats().invalidations > before {
                let _: () = conn.del(&probe).await?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if Instant::now() >= give_up {
            return Err("no invalidation push reached the table".into());
        }
    }
}
