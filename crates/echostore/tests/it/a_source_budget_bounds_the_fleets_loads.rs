//! `.source_budget(n)` across OS processes: four `budget_node` processes read 10,000 ids, one of
//! them clears the table, and all read every id again; the source, a gauge on Valkey that every
//! load raises while it runs, never sees more than `n` loads at once, and every id is served.

use crate::common;

use common::{example, node_lines, raw, spawn_node, valkey};
use redis::AsyncCommands;

const NODES: u64 = 4;
const KEYS: u64 = 10_000;
const BUDGET: u64 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clear_over_many_keys_loads_at_most_the_budget_at_once() {
    let _turn = common::heavy().await;
    let valkey = valkey();
    let node = example("budget_node");
    let url = valkey.url();
    let run = std::process::id().to_string();
    let (keys, budget) = (KEYS.to_string(), BUDGET.to_string());
    let children = (0..NODES)
        .map(|i| spawn_node(&node, &[&url, "4", &run, &i.to_string(), &keys, &budget]))
        .collect();
    let lines = node_lines(children);
    let sum = |field: &str| {
        lines
            .iter()
            .map(|l| l[field].as_u64().expect(field))
            .sum::<u64>()
    };
    assert_eq!(
        sum("served"),
        2 * NODES * KEYS,
        "every id served, before and after the clear"
    );
    assert_eq!(sum("errors"), 0);
    let mut conn = raw(&url).await;
    let most: u64 = conn
        .get(format!("{{budget-{run}}}:max"))
        .await
        .expect("GET max");
    assert!(
        (1..=BUDGET).contains(&most),
        "the source saw {most} loads at once, over the budget of {BUDGET}"
    );
    assert!(sum("budget_waits") > 0, "the budget was never spent");
    // A second read of one id is allowed only where a lock was lost (a lease that lapsed, a
    // fenced write skipped): the nodes' counters of those say which, if it fails.
    let why: Vec<String> = lines
        .iter()
        .map(|l| {
            let of = |f: &str| l[f].as_u64().unwrap_or_default();
            format!(
                "reads {} won {} lost {} lease_lost {} fenced_write_skipped {} errors {} \
                 owner_restarts {} connections_replaced {}",
                of("source_reads"),
                of("lock_won"),
                of("lock_lost"),
                of("lease_lost"),
                of("fenced_write_skipped"),
                of("errors"),
                of("owner_restarts"),
                of("connections_replaced"),
            )
        })
        .collect();
    let (reads, fenced_out) = (sum("source_reads"), sum("fenced_write_skipped"));
    assert!(
        (2 * KEYS..=2 * KEYS + fenced_out).contains(&reads),
        "one source read per id per clear, and one more only where a load's lock was taken over \
         (its write fenced out): {reads} reads; each node: {why:#?}"
    );
}
