//! One node of a cross-process stampede on a load slower than the lock: run several of these at
//! once against one Valkey, and the source is still read once in all.
//!
//! ```text
//! slow_node <valkey-url> <nodes> <requests> <run-id> <lock-ttl-ms>
//! ```
//!
//! Like `race_node`, the node waits until `<nodes>` nodes have checked in (a counter on Valkey),
//! then fires `<requests>` concurrent gets of one hot key. Its loader counts each source read on
//! Valkey itself (`INCR slow:<run-id>:source_reads`) and takes four times `<lock-ttl-ms>`, so the
//! lock's own `PX` would lapse three times over during one load. Once every get is answered, the
//! node gets the key once more and reports where that answer came from. It prints its table's
//! counters, the answers and that origin as one JSON line.

use std::time::Duration;

use echostore::LoserPolicy;
use redis::AsyncCommands;

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, nodes, requests, run, lock_ttl_ms] = &args[..] else {
        return Err(
            "usage: slow_node <valkey-url> <nodes> <requests> <run-id> <lock-ttl-ms>".into(),
        );
    };
    let (nodes, requests): (u64, usize) = (nodes.parse()?, requests.parse()?);
    let lock_ttl = Duration::from_millis(lock_ttl_ms.parse()?);
    let counter = format!("slow:{run}:source_reads");
    let source = support::connect(url).await?;

    let store = support::store_builder(url)
        .require_valkey(true)
        .build()
        .await?;
    let table = store
        .table::<String, String>("slow")
        .ttl(Duration::from_secs(60))
        .lock_ttl(lock_ttl)
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        })
        .loader(move |id: String| {
            let mut source = source.clone();
            let counter = counter.clone();
            async move {
                let read: u64 = source.incr(&counter, 1).await?;
                // The slowness is the behaviour under test: four lock_ttls.
                tokio::time::sleep(lock_ttl * 4).await;
                Ok::<_, redis::RedisError>(format!("{id} read #{read}"))
            }
        })
        .start()
        .await?;

    // Check in, then wait for the other nodes so the herds overlap.
    let mut conn = support::connect(url).await?;
    support::check_in(&mut conn, &format!("slow:{run}:ready"), nodes).await?;

    let key = format!("hot-{run}");
    let answers = support::herd(&table, &key, requests).await?;
    let again = table.fetch(&key).await?;
    let mut line = serde_json::to_value(table.stats())?;
    line["answers"] = serde_json::json!(answers);
    line["again"] = serde_json::json!({
        "origin": format!("{:?}", again.origin),
        "value": again.value.as_str(),
    });
    println!("{line}");
    Ok(())
}
