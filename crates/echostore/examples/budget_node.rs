//! One node of a fleet-wide stampede of distinct keys: run several of these at once against one
//! Valkey and, with a source budget of `n`, the source never sees more than `n` loads at once.
//!
//! ```text
//! budget_node <valkey-url> <nodes> <run-id> <index> <keys> <budget>
//! ```
//!
//! Once all `<nodes>` have checked in, every node reads ids `0..<keys>` (gets from 32 tasks, each
//! id once per node); node 0 then clears the table and every node, once it has heard of the
//! clear, reads them all again. The source is a gauge on Valkey: each load raises
//! `{budget-<run>}:now`, records the highest it saw in `{budget-<run>}:max`, takes 2 ms and
//! lowers it again. `<budget>` 0 sets none. The node prints its table's counters and `served`
//! (answers that were the id's row) as one JSON line.

use std::sync::Arc;
use std::time::Duration;

use echostore::{LoserPolicy, Table};
use redis::AsyncCommands;

#[path = "support/mod.rs"]
mod support;

/// Concurrent readers in one node.
const TASKS: u64 = 32;

/// Raises the gauge and keeps its highest value.
const UP: &str = r#"
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, nodes, run, index, keys, budget] = &args[..] else {
        return Err(
            "usage: budget_node <valkey-url> <nodes> <run-id> <index> <keys> <budget>".into(),
        );
    };
    let (nodes, index, keys, budget): (u64, u64, u64, u32) = (
        nodes.parse()?,
        index.parse()?,
        keys.parse()?,
        budget.parse()?,
    );
    let key = |what: &str| format!("{{budget-{run}}}:{what}");
    let (now, max) = (key("now"), key("max"));
    let source = support::connect(url).await?;

    let store = support::store_builder(url)
        .require_valkey(true)
        .build()
        .await?;
    let mut table = store
        .table::<u64, String>(&format!("budget-{run}"))
        .ttl(Duration::from_secs(120))
        .losers(LoserPolicy::Poll {
            every: Duration::from_millis(10),
            up_to: Duration::from_secs(120),
        });
    if budget > 0 {
        table = table.source_budget(budget);
    }
    let table = table
        .loader(move |id: u64| {
            let (mut source, now, max) = (source.clone(), now.clone(), max.clone());
            async move {
                let _: u64 = redis::Script::new(UP)
                    .key(&now)
                    .key(&max)
                    .invoke_async(&mut source)
                    .await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: i64 = source.decr(&now, 1).await?;
                Ok::<_, redis::RedisError>(format!("row {id}"))
            }
        })
        .build()
        .await?;

    let mut conn = support::connect(url).await?;
    support::check_in(&mut conn, &key("ready"), nodes).await?;
    let mut served = read_all(&table, keys).await;
    support::check_in(&mut conn, &key("read"), nodes).await?;
    if index == 0 {
        table.clear().await?;
        let _: () = conn.set(key("cleared"), 1).await?;
    } else {
        while conn.get::<_, Option<u64>>(key("cleared")).await?.is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        while table.stats().marks_taken == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    served += read_all(&table, keys).await;
    support::settled(&table).await;
    let mut line = serde_json::to_value(table.stats())?;
    line["served"] = serde_json::json!(served);
    println!("{line}");
    Ok(())
}

/// Every id of `0..keys` read once, from [`TASKS`] tasks; how many answers were the id's row.
async fn read_all(table: &Table<u64, String>, keys: u64) -> u64 {
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (table, served) = (table.clone(), Arc::clone(&served));
            tokio::spawn(async move {
                for id in (task..keys).step_by(TASKS as usize) {
                    match table.get(&id).await {
                        Ok(row) if *row == format!("row {id}") => {
                            served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Ok(row) => eprintln!("id {id}: {row}"),
                        Err(e) => eprintln!("id {id}: {e}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    served.load(std::sync::atomic::Ordering::Relaxed)
}
