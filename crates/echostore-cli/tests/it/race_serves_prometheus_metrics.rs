//! `echostore race --prometheus ADDR`: the race's tables can be scraped as a service's would be.
//!
//! The scrape is ordered by the readout itself, not by a clock: `--prometheus-linger` keeps the
//! endpoint up after the report is printed, and the test scrapes once it has read the report's
//! line. The child runs against the test's own Valkey, so killing it (by its handle) leaves no
//! server behind.
#![cfg(feature = "prometheus")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use embedded_valkey::EmbeddedValkey;

/// `GET /metrics` over plain HTTP/1.0; the body.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the metrics endpoint answers");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("the request is sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the response is read");
    assert!(response.starts_with("HTTP/1."), "{response}");
    assert!(response.contains(" 200 "), "{response}");
    response
}

/// After a small race the endpoint serves the nodes' summed counters under `table="race"`, with
/// their descriptions, and the source read's timing.
#[test]
fn race_serves_its_counters_for_prometheus() {
    let server = EmbeddedValkey::start().expect("an embedded Valkey starts");
    let port = embedded_valkey::free_loopback_port().expect("a free loopback port");
    let mut child = Command::new(env!("CARGO_BIN_EXE_echostore"))
        .args(["--valkey", &server.url(), "race", "--nodes", "2"])
        .args(["--requests", "20", "--source-latency", "5ms", "--json"])
        .args(["--prometheus", &format!("127.0.0.1:{port}")])
        .args(["--prometheus-linger", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the echostore binary runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout is piped"))
        .read_line(&mut line)
        .expect("the report is read");
    let metrics = if line.trim().is_empty() {
        String::new()
    } else {
        scrape(port)
    };
    child.kill().expect("the readout is stopped");
    child.wait().expect("the readout is reaped");

    let report: serde_json::Value =
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("no report ({e}): {line}"));
    assert_eq!(report["source_reads"], 1, "{report}");
    for expected in [
        "# HELP echostore_source_reads_total Ids read from the source of truth: one per loader call, one per id of a batch loader call.",
        "echostore_source_reads_total{table=\"race\"} 1\n",
        "echostore_lock_won_total{table=\"race\"} 1\n",
        "echostore_load_seconds_count{table=\"race\"} 1\n",
        "echostore_l1_len{table=\"race\"}",
    ] {
        assert!(metrics.contains(expected), "{expected:?} in:\n{metrics}");
    }
    let lost = format!(
        "echostore_lock_lost_total{{table=\"race\"}} {}\n",
        report["lock_lost"]
    );
    assert!(metrics.contains(&lost), "{lost:?} in:\n{metrics}");
}
