//! The readouts end to end: the built `echostore` binary, small sizes, `--json`, a real Valkey.

use crate::common;

use std::process::Command;

use common::{assert_latency, readout};
use serde_json::Value;

/// A small race with the given loser policy.
fn race(losers: &str) -> Value {
    readout(&[
        "race",
        "--losers",
        losers,
        "--nodes",
        "2",
        "--requests",
        "50",
        "--source-latency",
        "20ms",
        "--json",
    ])
}

/// A number field of a readout.
fn num(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

/// Fields every race readout carries, with the invariant: one source read.
fn assert_race_shape(v: &Value) {
    for field in [
        "source_reads",
        "coalesced",
        "lock_lost",
        "stale_served",
        "defaults_served",
        "failed_fast",
        "max_staleness_ms",
    ] {
        num(v, field);
    }
    assert_latency(v, "latency_ms");
    assert_eq!(num(v, "source_reads"), 1.0, "{v}");
    assert_eq!(v["invariant_held"], true);
    assert_eq!(num(v, "lock_won"), 1.0, "{v}");
    assert!(
        num(v, "lock_lost") >= 1.0,
        "the other node lost the lock: {v}"
    );
    assert!(
        num(v, "coalesced") >= 1.0,
        "requests coalesced in-process: {v}"
    );
}

/// Polling losers: one source read, the loser node waited (woken by a push or its safety poll)
/// until the winner's value landed; every wake-up sent one poll.
#[test]
fn race_poll_reads_the_source_once_and_polls() {
    let v = race("poll");
    assert_race_shape(&v);
    assert!(num(&v, "poll_commands") >= 1.0, "{v}");
    assert_eq!(
        num(&v, "poll_commands"),
        num(&v, "poll_waits") + num(&v, "push_wakeups"),
        "{v}"
    );
    assert_eq!(num(&v, "stale_served"), 0.0);
    assert_eq!(num(&v, "failed_fast"), 0.0);
    assert_eq!(v["answers"]["other_errors"], 0, "{v}");
}

/// The race on a local three-primary cluster: still one source read for every request.
#[test]
fn race_on_a_cluster_reads_the_source_once() {
    let v = readout(&[
        "race",
        "--cluster",
        "--nodes",
        "3",
        "--requests",
        "60",
        "--source-latency",
        "20ms",
        "--json",
    ]);
    assert_race_shape(&v);
    assert_eq!(num(&v, "lock_won"), 1.0, "{v}");
    assert_eq!(v["answers"]["other_errors"], 0, "{v}");
}

/// Serve-stale losers: one source read, the loser node served the stale copy with a staleness.
#[test]
fn race_stale_reads_the_source_once_and_serves_stale() {
    let v = race("stale");
    assert_race_shape(&v);
    assert!(num(&v, "stale_served") >= 1.0, "{v}");
    assert!(num(&v, "max_staleness_ms") > 0.0, "{v}");
    assert!(v["answers"]["stale"].as_u64().unwrap_or(0) >= 1, "{v}");
}

/// Default losers: one source read, the loser node got the placeholder.
#[test]
fn race_default_reads_the_source_once_and_serves_the_placeholder() {
    let v = race("default");
    assert_race_shape(&v);
    assert!(num(&v, "defaults_served") >= 1.0, "{v}");
    assert!(v["answers"]["default"].as_u64().unwrap_or(0) >= 1, "{v}");
}

/// Fail-fast losers: one source read, the loser node failed fast with LockBusy.
#[test]
fn race_fail_fast_reads_the_source_once_and_fails_fast() {
    let v = race("fail-fast");
    assert_race_shape(&v);
    assert!(num(&v, "failed_fast") >= 1.0, "{v}");
    assert!(v["answers"]["lock_busy"].as_u64().unwrap_or(0) >= 1, "{v}");
}

/// A small coherence run: the structure of the readout, and every write seen by every reader.
fn coherence(mode: &str, writes: &str) -> Value {
    let v = readout(&[
        "coherence",
        "--coherence",
        mode,
        "--writes",
        writes,
        "--readers",
        "3",
        "--gap",
        "1ms",
        "--json",
    ]);
    assert_eq!(v["readout"], "coherence", "{v}");
    assert_eq!(v["coherence"], mode, "{v}");
    assert_latency(&v, "lag_ms");
    assert_eq!(v["invariant_held"], true, "{v}");
    assert_eq!(v["every_write_seen"], true, "{v}");
    assert_eq!(
        v["went_back"], 0,
        "no reader read an older write after a newer one: {v}"
    );
    let writes = num(&v, "writes");
    assert_eq!(num(&v, "sightings"), writes * 3.0, "{v}");
    assert_eq!(v["lag_ms"]["count"], v["sightings"], "{v}");
    let histogram: f64 = v["histogram"]
        .as_array()
        .expect("histogram")
        .iter()
        .map(|b| b["count"].as_f64().unwrap_or(0.0))
        .sum();
    assert_eq!(histogram, writes * 3.0, "every lag is in one bucket: {v}");
    assert_eq!(v["per_reader"].as_array().map(Vec::len), Some(3), "{v}");
    let rate = num(&v, "l1_hit_rate");
    assert!(
        (0.0..=1.0).contains(&rate) && num(&v, "reads") >= num(&v, "l1_hits"),
        "{v}"
    );
    v
}

/// Coherence on: every write reached every reader through a push (each reader counted
/// invalidations), and the writer's own puts came back to it as pushes.
#[test]
fn coherence_on_brings_every_write_to_every_reader() {
    let v = coherence("on", "6");
    assert_eq!(num(&v, "writes"), 6.0, "{v}");
    assert_eq!(num(&v, "puts"), 3.0, "{v}");
    assert_eq!(num(&v, "invalidates"), 3.0, "{v}");
    for reader in v["per_reader"].as_array().expect("per_reader") {
        assert!(
            reader["stats"]["invalidations"].as_u64().unwrap_or(0) >= 6,
            "a push per write reached each reader: {reader}"
        );
    }
    assert_eq!(v["self_push"]["missing"], 0, "{v}");
    assert!(num(&v, "invalidations") >= 18.0, "{v}");
}

/// Coherence off: the writes still reach every reader, once their copies expire (a short run:
/// each write takes up to the 1 s ttl).
#[test]
fn coherence_off_brings_every_write_as_copies_expire() {
    let v = coherence("off", "2");
    assert_eq!(
        num(&v, "invalidations"),
        0.0,
        "no pushes without coherence: {v}"
    );
    assert_eq!(num(&v, "ttl_ms"), 1000.0, "{v}");
}

/// An owned lock: the tokens are equal and the DEL fires.
#[test]
fn release_of_an_owned_lock_fires_the_del() {
    let v = readout(&["release", "--state", "owned", "--json"]);
    assert_eq!(v["comparison"], "equal", "{v}");
    assert_eq!(v["script_returned"], 1, "{v}");
    assert_eq!(v["del_fired"], true, "{v}");
    assert_eq!(v["lock_after"], "gone", "{v}");
    assert!(v["lock_value_after"].is_null(), "{v}");
}

/// A re-acquired lock: the tokens differ, the DEL does not fire, the other holder keeps it —
/// with the server's `DELIFEQ` (the provisioned Valkey has it) and with the Lua script.
#[test]
fn release_of_a_reacquired_lock_leaves_the_other_holder() {
    for (flags, path) in [(&[][..], "DELIFEQ"), (&["--lua"][..], "lua")] {
        let mut args = vec!["release", "--state", "reacquired", "--json"];
        args.extend_from_slice(flags);
        let v = readout(&args);
        assert_eq!(v["released_with"], path, "{v}");
        assert_eq!(v["comparison"], "differs", "{v}");
        assert_eq!(v["script_returned"], 0, "{v}");
        assert_eq!(v["del_fired"], false, "{v}");
        assert_eq!(v["lock_after"], "still the other holder's", "{v}");
        assert_eq!(v["lock_value_after"], v["other_token"], "{v}");
        assert_ne!(v["lock_value_after"], v["token"], "{v}");
        assert_eq!(v["other_released"], true, "{v}");
    }
}

/// An unreachable `--valkey` is a clear error, not a panic.
#[test]
fn unreachable_valkey_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_echostore"))
        .args(["--valkey", "redis://127.0.0.1:1/", "release", "--json"])
        .output()
        .expect("the echostore binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.starts_with("error: cannot reach Valkey"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The README's main job as a user types it (`echostore race`, the human readout): it succeeds
/// and logs no warning and no error, the store's shutdown included.
#[test]
fn the_readmes_race_succeeds_quietly() {
    let out = Command::new(env!("CARGO_BIN_EXE_echostore"))
        .arg("race")
        .env_remove("RUST_LOG")
        .output()
        .expect("the echostore binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "echostore race failed:\n{stderr}");
    common::assert_quiet(&stderr, &["race"]);
}
