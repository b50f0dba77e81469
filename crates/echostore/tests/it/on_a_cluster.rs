//! The lock and coherence suites once more, on a three-primary Valkey Cluster: the one test here
//! runs this binary again with `ECHOSTORE_TEST_TARGET=cluster`, filtered to those suites, and
//! each of their tests then starts a cluster instead of a server (`common::valkey`).
#![cfg(feature = "cluster")]

use std::process::Command;

use crate::common::TARGET_ENV;

/// The suites whose promises must hold on a cluster as on one server.
const SUITES: [&str; 19] = [
    "one_source_read_per_expiry_across_stores",
    "loser_policies",
    "release_never_deletes_another_holders_lock",
    "losers_wake_on_the_winners_write",
    "writes_anywhere_reach_every_l1",
    "keys_and_envelopes_on_the_wire",
    "a_load_slower_than_the_lock_is_the_one_source_read",
    "four_processes_read_the_source_once",
    "lock_commands_are_native_where_the_server_has_them",
    "a_skewed_clock_changes_no_life",
    "batch_reads_load_each_id_once",
    "batch_reads_across_processes",
    "tags_and_clear_reach_every_process",
    "tags_and_clear_across_processes",
    "a_source_budget_bounds_the_fleets_loads",
    "a_spent_source_budget_follows_the_loser_policy",
    "a_version_carried_between_replicas_is_read",
    "schemas_run_side_by_side",
    "a_pause_of_the_process_fails_no_call",
];

/// Every test of the lock and coherence suites passes against a cluster.
#[test]
fn the_lock_and_coherence_suites_pass_on_a_cluster() {
    if std::env::var_os(TARGET_ENV).is_some() {
        return; // this is the run on the cluster itself
    }
    let filters = SUITES.map(|suite| format!("{suite}::"));
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .env(TARGET_ENV, "cluster")
        .args(&filters)
        // One at a time: this run goes on beside the rest of the suite.
        .arg("--test-threads=1")
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "on a cluster:\n{stdout}\n{stderr}");
    let passed: usize = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert!(
        passed >= SUITES.len(),
        "on a cluster, only {passed} tests ran:\n{stdout}"
    );
}
