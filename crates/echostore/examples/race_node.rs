//! One node of a cross-process stampede: run several of these at once against one Valkey and
//! the source is read once in all.
//!
//! ```text
//! race_node <valkey-url> <nodes> <requests> <run-id>
//! ```
//!
//! The node waits until `<nodes>` nodes have checked in (a counter on Valkey), then fires
//! `<requests>` concurrent gets of one hot key. Its loader counts each source read on Valkey
//! itself (`INCR race:<run-id>:source_reads`) and takes 200 ms, like a slow query. It prints its
//! table's counters as one JSON line.

use std::time::Duration;

use echostore::LoserPolicy;
use redis::AsyncCommands;

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, nodes, requests, run] = &args[..] else {
        return Err("usage: race_node <valkey-url> <nodes> <requests> <run-id>".into());
    };
    let (nodes, requests): (u64, usize) = (nodes.parse()?, requests.parse()?);
    let counter = format!("race:{run}:source_reads");
    let source = support::connect(url).await?;

    let store = support::store_builder(url)
        .require_valkey(true)
        .build()
        .await?;
    let table = store
        .table::<String, String>("race")
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        })
        .loader(move |id: String| {
            let mut source = source.clone();
            let counter = counter.clone();
            async move {
                let read: u64 = source.incr(&counter, 1).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, redis::RedisError>(format!("{id} read #{read}"))
            }
        })
        .start()
        .await?;

    // Check in, then wait for the other nodes so the herds overlap.
    let mut conn = support::connect(url).await?;
    support::check_in(&mut conn, &format!("race:{run}:ready"), nodes).await?;

    let key = format!("hot-{run}");
    let answers = support::herd(&table, &key, requests).await?;
    let mut line = serde_json::to_value(table.stats())?;
    line["answers"] = serde_json::json!(answers);
    println!("{line}");
    Ok(())
}
