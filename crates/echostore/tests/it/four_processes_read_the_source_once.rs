//! The invariant across OS processes: four `race_node` processes, 250 concurrent misses each, one
//! source read in all — counted by the source itself, in Valkey.

use crate::common;

use common::{example, node_lines, raw, spawn_node, valkey};
use redis::AsyncCommands;

/// 4 processes × 250 misses on one key: the source is read exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_read_the_source_once() {
    let valkey = valkey();
    let node = example("race_node");
    let run = std::process::id().to_string();
    let url = valkey.url();
    let children = (0..4)
        .map(|_| spawn_node(&node, &[&url, "4", "250", &run]))
        .collect();
    let lines = node_lines(children);

    let mut conn = raw(&valkey.url()).await;
    let reads: u64 = conn
        .get(format!("race:{run}:source_reads"))
        .await
        .expect("GET counter");
    assert_eq!(reads, 1, "exactly one source read across four processes");
    let sum = |field: &str| {
        lines
            .iter()
            .map(|l| l[field].as_u64().expect(field))
            .sum::<u64>()
    };
    assert_eq!(sum("source_reads"), 1);
    assert_eq!(sum("in_flight"), 0, "no node left a flight or a waiter");
    assert_eq!(sum("lock_won"), 1);
    assert_eq!(
        sum("coalesced") + sum("l1_hits") + 4,
        1000,
        "each node led one flight; its other requests joined it or hit L1 after it"
    );
    let answers: std::collections::BTreeSet<_> = lines
        .iter()
        .flat_map(|l| l["answers"].as_array().expect("answers").clone())
        .collect::<Vec<_>>()
        .into_iter()
        .map(|a| a.as_str().expect("text").to_string())
        .collect();
    assert_eq!(answers.len(), 1, "one answer for all: {answers:?}");
}
