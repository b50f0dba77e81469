//! `--prometheus ADDR` on the readouts: the `metrics` facade's Prometheus recorder
//! (`metrics-exporter-prometheus`), serving `GET /metrics` on a loopback address while the readout
//! runs, so the readout's tables can be scraped as a service's would be. The exporter and its
//! HTTP stack are behind the `prometheus` feature, so that the everyday build does without them;
//! without it, `--prometheus` is a clear error that says how to turn it on.
//!
//! Every started table publishes its counters and gauges every `METRICS_EXPORT_EVERY` (1 s), and
//! its load and Valkey timings as they happen (see `docs/operations.md`, "Metrics"). A readout's
//! nodes share one table name, so they publish under one `table` label: a counter shows the
//! largest node's figure while the readout runs (the recorder keeps the highest absolute value it
//! was given), and the readout sets it to the nodes' sum when it ends.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::CliResult;

/// Parses `--prometheus`: `127.0.0.1:9898`, `[::1]:9898`, or a bare port for `127.0.0.1:<port>`.
/// Only loopback addresses are taken: the endpoint has no authentication.
pub(crate) fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let addr = match text.parse::<u16>() {
        Ok(port) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        Err(_) => text
            .parse::<SocketAddr>()
            .map_err(|e| format!("{e}: give ADDR as 127.0.0.1:PORT, [::1]:PORT or PORT"))?,
    };
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{} is not a loopback address: the metrics endpoint has no authentication, so it \
             listens on 127.0.0.1 or ::1 only",
            addr.ip()
        ));
    }
    Ok(addr)
}

/// Installs the Prometheus recorder as the process's global recorder, listening on `addr`, and
/// registers EchoStore's metric descriptions. Call it once, from the runtime, before the tables
/// start.
#[cfg(feature = "prometheus")]
pub(crate) fn serve(addr: SocketAddr) -> CliResult<()> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("serving Prometheus metrics on {addr}: {e}"))?;
    echostore::describe_metrics();
    eprintln!("serving Prometheus metrics on http://{addr}/metrics");
    Ok(())
}

/// Without the `prometheus` feature: the error that says how to build with it.
#[cfg(not(feature = "prometheus"))]
pub(crate) fn serve(addr: SocketAddr) -> CliResult<()> {
    Err(format!(
        "--prometheus {addr}: this echostore was built without the Prometheus exporter; build \
         it with `cargo run --release -p echostore-cli --features prometheus -- …`"
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback addresses and bare ports are taken; anything else is refused.
    #[test]
    fn only_loopback_addresses_are_taken() {
        assert_eq!(
            parse_addr("9898"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9898)))
        );
        assert!(parse_addr("127.0.0.1:0").is_ok());
        assert!(parse_addr("[::1]:9898").is_ok());
        assert!(parse_addr("0.0.0.0:9898").is_err());
        assert!(parse_addr("192.168.1.1:9898").is_err());
        assert!(parse_addr("localhost").is_err());
    }
}
