//! `echostore early-refresh` end to end: the built binary, small sizes, `--json`, a real Valkey.
//! The structure of the readout and its invariant only; no timing thresholds.

use crate::common;

use common::{assert_latency, readout};

/// A small run: two stores, one reader each, a short ttl and run.
#[test]
fn early_refresh_reports_both_modes_side_by_side() {
    let v = readout(&[
        "early-refresh",
        "--ttl",
        "200ms",
        "--load",
        "10ms",
        "--stores",
        "2",
        "--readers",
        "1",
        "--run",
        "500ms",
        "--json",
    ]);

    assert_eq!(v["readout"], "early-refresh", "{v}");
    assert_eq!(v["invariant_held"], true, "{v}");
    assert!(v["l2_round_trip_ms"].is_number(), "{v}");
    assert!(v["source_reads_ratio"].is_number(), "{v}");
    for target in [
        "on_no_read_waited",
        "on_p99_under_l2_round_trip",
        "on_source_reads_at_most_1_5x",
        "off_waits_visible",
    ] {
        assert!(v["targets"][target].is_boolean(), "targets.{target} in {v}");
    }
    for (mode, on) in [("off", false), ("on", true)] {
        let m = &v[mode];
        assert_eq!(m["early_refresh"], on, "{v}");
        assert_eq!(m["overlapping_loads"], 0, "one load at a time: {v}");
        for field in [
            "reads",
            "reads_waited_on_load",
            "source_reads",
            "source_reads_per_expiry",
            "source_reads_per_minute",
            "early_refreshes",
        ] {
            assert!(m[field].is_number(), "{mode}.{field} in {v}");
        }
        assert_latency(m, "latency_ms");
        assert!(m["reads"].as_u64().unwrap_or(0) > 0, "{mode} read: {v}");
        assert_eq!(m["origins"]["errors"], 0, "{v}");
    }
    assert_eq!(
        v["off"]["early_refreshes"], 0,
        "beta 0 never refreshes early: {v}"
    );
}
