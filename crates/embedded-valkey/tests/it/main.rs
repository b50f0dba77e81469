//! embedded-valkey's integration tests, one test binary: real `valkey-server`s started, stopped,
//! restarted, clustered and served over TLS.

mod common;

mod cluster;
mod concurrent_starts;
mod env_override;
mod server_lifecycle;
mod tls;
