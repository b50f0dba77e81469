//! What the CLI's end-to-end tests share: the built `echostore` binary run with `--json`, its one
//! JSON object parsed (and its stderr free of warnings), and the shape of a latency summary in it.

use std::process::Command;

use serde_json::Value;

/// Runs `echostore <args>` and parses its one JSON object; the exit code must be success.
pub(crate) fn readout(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_echostore"))
        .args(args)
        .output()
        .expect("the echostore binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "echostore {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert_quiet(&stderr, args);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "echostore {args:?} printed no single JSON object ({e}):\n{stdout}\nstderr: {stderr}"
        )
    })
}

/// A run that succeeded logged no warning and no error (tracing's `WARN` and `ERROR` levels).
pub(crate) fn assert_quiet(stderr: &str, args: &[&str]) {
    let loud: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert!(
        loud.is_empty(),
        "echostore {args:?} succeeded but logged:\n{}",
        loud.join("\n")
    );
}

/// `v[at]` is a latency summary: p50, p99 and max, each a number.
pub(crate) fn assert_latency(v: &Value, at: &str) {
    for q in ["p50", "p99", "max"] {
        assert!(v[at][q].is_number(), "{at}.{q} in {v}");
    }
}
