//! One node of a cross-process batch stampede: run several of these at once against one Valkey,
//! with overlapping id ranges, and each id is read from the source once in all.
//!
//! ```text
//! batch_node <valkey-url> <nodes> <first-id> <last-id> <run-id>
//! ```
//!
//! The node waits until `<nodes>` nodes have checked in (a counter on Valkey), then makes one
//! `get_many` of the ids `<first-id>..=<last-id>`. Its batch loader counts each id it reads on
//! Valkey itself (`HINCRBY batch:<run-id>:reads <id> 1`) and takes 100 ms, like a slow
//! `WHERE id = ANY(..)`. It prints its table's counters, and how many ids it got, as one JSON line.

use std::collections::HashMap;
use std::time::Duration;

use echostore::LoserPolicy;
use redis::AsyncCommands;

#[path = "support/mod.rs"]
mod support;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, nodes, first, last, run] = &args[..] else {
        return Err("usage: batch_node <valkey-url> <nodes> <first-id> <last-id> <run-id>".into());
    };
    let (nodes, first, last): (u64, u64, u64) = (nodes.parse()?, first.parse()?, last.parse()?);
    let reads = format!("batch:{run}:reads");
    let source = support::connect(url).await?;

    let store = support::store_builder(url)
        .require_valkey(true)
        .build()
        .await?;
    let table = store
        .table::<u64, String>("batch")
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(30),
        })
        .batch_loader(move |ids: Vec<u64>| {
            let mut source = source.clone();
            let reads = reads.clone();
            async move {
                for &id in &ids {
                    let _: u64 = source.hincr(&reads, id, 1).await?;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let rows = ids.into_iter().map(|id| (id, format!("row {id}")));
                Ok::<_, redis::RedisError>(rows.collect::<HashMap<_, _>>())
            }
        })
        .build()
        .await?;

    let mut conn = support::connect(url).await?;
    support::check_in(&mut conn, &format!("batch:{run}:ready"), nodes).await?;
    let found = table.get_many(first..=last).await?;
    let right = (first..=last).all(|id| found.get(&id).is_some_and(|v| **v == format!("row {id}")));
    support::settled(&table).await;
    let mut line = serde_json::to_value(table.stats())?;
    line["found"] = serde_json::json!(found.len());
    line["all_right"] = serde_json::json!(right);
    println!("{line}");
    Ok(())
}
