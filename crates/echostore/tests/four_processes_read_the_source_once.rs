//! The invariant across OS processes: four `race_node` processes, 250 concurrent misses each, one
//! source read in all — counted by the source itself, in Valkey.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{raw, valkey};
use redis::AsyncCommands;

/// The `race_node` example next to this test binary, built first if this run did not build it.
fn race_node() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let node = profile_dir.join("examples").join("race_node");
    if !node.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "echostore", "--example", "race_node"])
            .status()
            .expect("cargo build --example race_node");
        assert!(status.success());
    }
    node
}

/// 4 processes × 250 misses on one key: the source is read exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_read_the_source_once() {
    let valkey = valkey();
    let node = race_node();
    let run = std::process::id().to_string();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&node)
                .args([&valkey.url(), "4", "250", &run])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn race_node")
        })
        .collect();
    let mut lines = Vec::new();
    for child in children {
        let out = child.wait_with_output().expect("race_node ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "race_node failed: {stderr}");
        let line: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON line of stats");
        lines.push(line);
    }

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
