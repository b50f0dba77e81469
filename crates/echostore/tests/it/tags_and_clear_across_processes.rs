//! Tags and clear across OS processes: four `tags_node` processes read ids 1–20, one of them
//! invalidates the tag `odd` (or clears the table) after the source changed, and every process
//! then reads the new rows of the covered ids and keeps the rest, each covered id read from the
//! source once more in all, counted by the source itself, in Valkey.

use crate::common;

use std::collections::HashMap;

use common::{example, node_lines, raw, spawn_node, valkey};
use redis::AsyncCommands;

/// Runs four nodes with `action`; the source reads per id.
async fn run(action: &str) -> HashMap<u64, u64> {
    let valkey = valkey();
    let node = example("tags_node");
    let url = valkey.url();
    let run = format!("{}-{action}", std::process::id());
    let children = (0..4)
        .map(|index| spawn_node(&node, &[&url, "4", &run, &index.to_string(), action]))
        .collect();
    for line in node_lines(children) {
        assert_eq!(line["right"].as_bool(), Some(true), "{line}");
        // The node that set the mark may take it twice: its own push can beat the script's reply.
        assert!(
            (1..=2).contains(&line["marks_taken"].as_u64().unwrap_or(0)),
            "{line}"
        );
    }
    let mut conn = raw(&url).await;
    conn.hgetall(format!("tags:{run}:reads"))
        .await
        .expect("HGETALL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_invalidated_in_one_process_is_reloaded_once_in_all() {
    let reads = run("tag").await;
    let expected: HashMap<u64, u64> = (1..=20)
        .map(|id| (id, if id % 2 == 1 { 2 } else { 1 }))
        .collect();
    assert_eq!(
        reads, expected,
        "odd ids read twice across the processes, even ids once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_in_one_process_reloads_every_id_once_in_all() {
    let reads = run("clear").await;
    let expected: HashMap<u64, u64> = (1..=20).map(|id| (id, 2)).collect();
    assert_eq!(reads, expected, "every id read twice across the processes");
}
