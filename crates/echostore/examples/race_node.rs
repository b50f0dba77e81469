//! One node of a cross-process stampede: run several of these at once against one Valkey and
//! the source is read once in all.
//!
//! ```text
//! race_node <valkey-url> <nodes> <requests> <run-id> [<lock-ttl-ms>]
//! ```
//!
//! The node waits until `<nodes>` nodes have checked in (a counter on Valkey), then fires
//! `<requests>` concurrent gets of one hot key. Its loader counts each source read on Valkey
//! itself (`INCR race:<run-id>:source_reads`) and takes 200 ms, like a slow query. Given a
//! `<lock-ttl-ms>`, the lock lives that long and the loader takes four of them, so the lock's own
//! `PX` would lapse three times over during one load; once every get is answered, the node then
//! gets the key once more and reports where that answer came from (`again`). It prints its
//! table's counters and the answers as one JSON line.

use std::time::Duration;

use echostore::LoserPolicy;
use redis::AsyncCommands;

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, nodes, requests, run, lock_ttl) = match &args[..] {
        [_, url, nodes, requests, run] => (url, nodes, requests, run, None),
        [_, url, nodes, requests, run, ms] => (url, nodes, requests, run, Some(ms.parse()?)),
        _ => {
            return Err(
                "usage: race_node <valkey-url> <nodes> <requests> <run-id> [<lock-ttl-ms>]".into(),
            );
        }
    };
    let (nodes, requests): (u64, usize) = (nodes.parse()?, requests.parse()?);
    let lock_ttl = lock_ttl.map(Duration::from_millis);
    // The slowness of the second form is the behaviour under test: four lock_ttls.
    let load = lock_ttl.map_or(Duration::from_millis(200), |ttl| ttl * 4);
    let counter = format!("race:{run}:source_reads");
    let source = support::connect(url).await?;

    let store = support::store_builder(url)
        .require_valkey(true)
        .build()
        .await?;
    let mut table = store
        .table::<String, String>("race")
        .ttl(Duration::from_secs(60))
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        });
    if let Some(lock_ttl) = lock_ttl {
        table = table.lock_ttl(lock_ttl);
    }
    let table = table
        .loader(move |id: String| {
            let mut source = source.clone();
            let counter = counter.clone();
            async move {
                let read: u64 = source.incr(&counter, 1).await?;
                tokio::time::sleep(load).await;
                Ok::<_, redis::RedisError>(format!("{id} read #{read}"))
            }
        })
        .build()
        .await?;

    // Check in, then wait for the other nodes so the herds overlap.
    let mut conn = support::connect(url).await?;
    support::check_in(&mut conn, &format!("race:{run}:ready"), nodes).await?;

    let key = format!("hot-{run}");
    let answers = support::herd(&table, &key, requests).await?;
    let again = match lock_ttl {
        Some(_) => {
            let again = table.fetch(&key).await?;
            serde_json::json!({
                "origin": format!("{:?}", again.origin),
                "value": again.value.as_str(),
            })
        }
        None => serde_json::Value::Null,
    };
    support::settled(&table).await;
    let mut line = serde_json::to_value(table.stats())?;
    line["answers"] = serde_json::json!(answers);
    line["again"] = again;
    println!("{line}");
    Ok(())
}
