//! Batch reads across OS processes: four `batch_node` processes make overlapping `get_many`s
//! at once (ids 1–30, 10–40, 20–50, 1–50), and each id is read from the source once in all —
//! counted by the source itself, in Valkey.

use crate::common;

use std::collections::HashMap;

use common::{example, node_lines, raw, spawn_node, valkey};
use redis::AsyncCommands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_in_four_processes_read_each_id_once() {
    let valkey = valkey();
    let node = example("batch_node");
    let url = valkey.url();
    let run = std::process::id().to_string();
    let ranges = [("1", "30"), ("10", "40"), ("20", "50"), ("1", "50")];
    let children = ranges
        .iter()
        .map(|(first, last)| spawn_node(&node, &[&url, "4", first, last, &run]))
        .collect();
    let lines = node_lines(children);
    for (line, (first, last)) in lines.iter().zip(ranges) {
        let asked = last.parse::<u64>().expect("id") - first.parse::<u64>().expect("id") + 1;
        assert_eq!(line["found"].as_u64(), Some(asked), "{line}");
        assert_eq!(line["all_right"].as_bool(), Some(true), "{line}");
        assert_eq!(line["in_flight"].as_u64(), Some(0), "{line}");
    }
    let mut conn = raw(&url).await;
    let reads: HashMap<u64, u64> = conn
        .hgetall(format!("batch:{run}:reads"))
        .await
        .expect("HGETALL");
    assert_eq!(reads.len(), 50, "every id was read");
    assert!(
        reads.values().all(|&n| n == 1),
        "each id read once across the processes: {reads:?}"
    );
    let source_reads: u64 = lines
        .iter()
        .map(|l| l["source_reads"].as_u64().expect("source_reads"))
        .sum();
    assert_eq!(source_reads, 50, "the nodes' own count agrees");
}
