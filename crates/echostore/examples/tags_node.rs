//! One node of a cross-process tag invalidation: run several of these at once against one
//! Valkey, and after one of them invalidates a tag (or clears the table) every node reads the
//! new rows of the ids it covers and keeps the others, with each covered id read from the
//! source once more in all.
//!
//! ```text
//! tags_node <valkey-url> <nodes> <run-id> <index> tag|clear
//! ```
//!
//! Every node reads ids 1..=20 (`get_many`) once all `<nodes>` have checked in; the source is a
//! row version on Valkey (`tags:<run-id>:version`, 1 when unset) and counts each id it reads
//! there (`HINCRBY tags:<run-id>:reads <id> 1`). Ids are tagged `odd` or `even`. Once every node
//! has read, node 0 sets the version to 2 (the source changed) and invalidates the tag `odd`, or
//! clears the table; every other node waits until it has heard of that (`marks_taken`). Then
//! every node reads the ids again and checks what it got. It prints its table's counters, and
//! `right` (every answer as expected), as one JSON line.

use std::time::Duration;

use redis::AsyncCommands;

#[path = "support/mod.rs"]
mod support;

const IDS: std::ops::RangeInclusive<u64> = 1..=20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, nodes, run, index, action] = &args[..] else {
        return Err("usage: tags_node <valkey-url> <nodes> <run-id> <index> tag|clear".into());
    };
    let (nodes, index): (u64, u64) = (nodes.parse()?, index.parse()?);
    let clear = match action.as_str() {
        "tag" => false,
        "clear" => true,
        other => return Err(format!("tag or clear, not {other:?}").into()),
    };
    let key = |what: &str| format!("tags:{run}:{what}");
    let source = support::connect(url).await?;
    let (version, reads) = (key("version"), key("reads"));

    let store = support::store_builder(url)
        .require_valkey(true)
        .build()
        .await?;
    let table = store
        .table::<u64, String>(&format!("tags-{run}"))
        .ttl(Duration::from_secs(60))
        .tags(|id: &u64, _: &String| [if id % 2 == 1 { "odd" } else { "even" }])
        .loader(move |id: u64| {
            let (mut source, version, reads) = (source.clone(), version.clone(), reads.clone());
            async move {
                let _: u64 = source.hincr(&reads, id, 1).await?;
                let row: Option<u64> = source.get(&version).await?;
                Ok::<_, redis::RedisError>(format!("row {id} v{}", row.unwrap_or(1)))
            }
        })
        .build()
        .await?;

    let mut conn = support::connect(url).await?;
    support::check_in(&mut conn, &key("ready"), nodes).await?;
    let first = table.get_many(IDS).await?;
    let mut right = IDS.clone().all(|id| {
        first
            .get(&id)
            .is_some_and(|v| **v == format!("row {id} v1"))
    });
    support::check_in(&mut conn, &key("read"), nodes).await?;
    if index == 0 {
        let _: () = conn.set(key("version"), 2).await?;
        if clear {
            table.clear().await?;
        } else {
            table.invalidate_tag("odd").await?;
        }
        let _: () = conn.set(key("marked"), 1).await?;
    } else {
        while conn.get::<_, Option<u64>>(key("marked")).await?.is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        while table.stats().marks_taken == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let again = table.get_many(IDS).await?;
    right &= IDS.clone().all(|id| {
        let version = if clear || id % 2 == 1 { 2 } else { 1 };
        again
            .get(&id)
            .is_some_and(|v| **v == format!("row {id} v{version}"))
    });
    let mut line = serde_json::to_value(table.stats())?;
    line["right"] = serde_json::json!(right);
    println!("{line}");
    Ok(())
}
