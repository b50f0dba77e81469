//! The server handle: spawning a private `valkey-server` on a free loopback
//! port, waiting until it answers, stopping and restarting it, and cleaning
//! up its process and working directory when the handle goes away.
//!
//! A [`Builder`] adds what a plain [`EmbeddedValkey::start`] leaves out: TLS
//! (a TLS-capable binary, fresh certificates, no plain TCP port at all), a
//! password or ACL user, and, for [`EmbeddedCluster`](crate::EmbeddedCluster)'s
//! nodes, cluster mode.
//!
//! Each server owns one private directory (mode 0700) laid out as:
//! `data/` (its `--dir`, emptied on every (re)start), `valkey.log`, `tls/`
//! (the PEM files), `valkey.sock` (TLS servers only: the Unix socket this
//! crate probes them through, since they have no plain TCP port) and
//! `nodes.conf` (cluster nodes only, kept across restarts so a node comes
//! back as itself).

use std::fmt::Write as _;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use crate::certs::{TlsFiles, write_tls_files};
use crate::discover::find_binary;
use crate::error::Error;
use crate::probe::Login;
use crate::resp::Endpoint;

mod builder;
mod launch;

use builder::Auth;
pub use builder::Builder;
pub(crate) use builder::ClusterMode;
use launch::{MAX_BACKOFF, private_dir};

/// How many fresh ports [`EmbeddedValkey::start`] tries when the chosen one
/// turns out to be taken by the time the server binds it.
const START_ATTEMPTS: u32 = 5;
/// How long [`EmbeddedValkey::restart`] keeps retrying a port that is still busy.
const RESTART_PORT_WAIT: Duration = Duration::from_secs(5);
const TLS_DIR: &str = "tls";
const SOCKET_NAME: &str = "valkey.sock";

/// A private `valkey-server` listening on `127.0.0.1` at a port of its own.
///
/// The server keeps nothing on disk (`--save ""`, `--appendonly no`) and works
/// in a temporary directory of its own, which also holds its log. Dropping
/// the handle kills the server, waits for it and removes that directory,
/// also when a test panics.
#[derive(Debug)]
pub struct EmbeddedValkey {
    binary: PathBuf,
    port: u16,
    /// Removed when the handle drops, after `Drop::drop` has stopped the server.
    dir: tempfile::TempDir,
    child: Option<Child>,
    tls: Option<TlsFiles>,
    auth: Option<Auth>,
    cluster: Option<ClusterNode>,
}

/// Cluster-mode settings of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClusterNode {
    /// The cluster bus port (`--cluster-port`), picked free like the client port.
    bus_port: u16,
    mode: ClusterMode,
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

impl EmbeddedValkey {
    /// Finds a binary with [`find_binary`] and starts a server with it.
    ///
    /// Blocks until the server answers `PING` (at most about 10 s per
    /// attempt). If the free port picked for it is grabbed by someone else
    /// before the server binds it, a new port is tried a few times.
    /// Synchronous; fine to call from inside an async test.
    pub fn start() -> Result<EmbeddedValkey, Error> {
        EmbeddedValkey::start_with_binary(find_binary()?)
    }

    /// Starts a TLS-only server: see [`Builder::tls`]. The binary comes from
    /// [`find_tls_binary`](crate::find_tls_binary), which on a fresh Debian machine provisions one
    /// from Debian's packages the first time.
    pub fn start_tls() -> Result<EmbeddedValkey, Error> {
        EmbeddedValkey::builder().tls(true).start()
    }

    /// A [`Builder`] for servers with TLS, a password or an ACL user.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Starts a server using the given `valkey-server` (or `redis-server`)
    /// binary, skipping discovery. Otherwise the same as [`start`](Self::start).
    pub fn start_with_binary(binary: impl Into<PathBuf>) -> Result<EmbeddedValkey, Error> {
        EmbeddedValkey::launch_new(binary.into(), false, None, None, None)
    }

    fn launch_new(
        binary: PathBuf,
        tls: bool,
        auth: Option<Auth>,
        cluster: Option<ClusterMode>,
        port: Option<u16>,
    ) -> Result<EmbeddedValkey, Error> {
        // Built before the first launch so that Drop cleans up on every error path.
        let mut server = EmbeddedValkey {
            binary,
            port: 0,
            dir: private_dir()?,
            child: None,
            tls: None,
            auth,
            cluster: cluster.map(|mode| ClusterNode { bus_port: 0, mode }),
        };
        if tls {
            server.tls = Some(write_tls_files(&server.dir.path().join(TLS_DIR))?);
        }
        let mut attempt = 1;
        loop {
            server.port = match port {
                Some(port) => port,
                None => free_loopback_port()
                    .map_err(|err| Error::io("finding a free port on 127.0.0.1", err))?,
            };
            if let Some(cluster) = server.cluster.as_mut() {
                cluster.bus_port = loop {
                    let bus = free_loopback_port()
                        .map_err(|err| Error::io("finding a free port on 127.0.0.1", err))?;
                    if bus != server.port {
                        break bus;
                    }
                };
            }
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(failure) if failure.port_busy && port.is_none() && attempt < START_ATTEMPTS => {
                    attempt += 1
                }
                Err(failure) => return Err(failure.error),
            }
        }
    }

    /// The URL clients connect to: `redis://127.0.0.1:<port>/`, or
    /// `rediss://127.0.0.1:<port>/` for a TLS server, with `user:password@`
    /// (or `:password@`) before the host when the server wants a login.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let login = match &self.auth {
            None => String::new(),
            Some(auth) => format!(
                "{}:{}@",
                auth.user.as_deref().map(url_encode).unwrap_or_default(),
                url_encode(&auth.password)
            ),
        };
        format!("{scheme}://{login}127.0.0.1:{}/", self.port)
    }

    /// For a TLS server, its [`url`](Self::url) (`rediss://...`); `None` for a plain one.
    pub fn tls_url(&self) -> Option<String> {
        self.tls.as_ref().map(|_| self.url())
    }

    /// For a TLS server, the PEM file of the CA that signed its certificate:
    /// what a client must trust. `None` for a plain server.
    pub fn ca_cert_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|files| files.ca_cert.as_path())
    }

    /// For a TLS server, all of its PEM files; `None` for a plain one.
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The ACL user clients log in as, if the server was given one.
    pub fn user(&self) -> Option<&str> {
        self.auth.as_ref().and_then(|auth| auth.user.as_deref())
    }

    /// The password clients log in with, if the server wants one.
    pub fn password(&self) -> Option<&str> {
        self.auth.as_ref().map(|auth| auth.password.as_str())
    }

    /// For a cluster node, its cluster bus port.
    pub(crate) fn cluster_bus_port(&self) -> Option<u16> {
        self.cluster.as_ref().map(|cluster| cluster.bus_port)
    }

    /// The loopback port the server listens on; it stays the same across
    /// [`stop`](Self::stop) and [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, or `None` while it is stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `true` once the server's process has exited by itself (killed from outside, or crashed);
    /// `false` while it runs or after [`stop`](Self::stop).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| !matches!(child.try_wait(), Ok(None)))
    }

    /// The binary this server runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Kills the server (SIGKILL, so nothing is flushed) and waits for it to
    /// exit. The port and working directory are kept for [`restart`](Self::restart).
    /// Does nothing if the server is already stopped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // kill fails only if the child already exited; wait reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port, stopping the current one first.
    ///
    /// Models "the cache server was killed and came back empty". The data
    /// directory is emptied before the new server starts, so no data survives
    /// (a TLS server keeps its certificates, a cluster node its `nodes.conf`).
    /// If the port is briefly still busy, spawning is retried for a few seconds.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        let deadline = Instant::now() + RESTART_PORT_WAIT;
        let mut backoff = Duration::from_millis(10);
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                Err(failure) if failure.port_busy && Instant::now() < deadline => {
                    thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(failure) => return Err(failure.error),
            }
        }
    }

    /// Where this crate probes the server: its TCP port, or for a TLS server
    /// (which has no plain TCP port) its private Unix socket.
    pub(crate) fn endpoint(&self) -> Endpoint {
        match self.tls {
            Some(_) => Endpoint::Unix(self.dir.path().join(SOCKET_NAME)),
            None => Endpoint::Tcp(self.port),
        }
    }

    /// How this crate logs in to the server, if it must.
    pub(crate) fn login(&self) -> Option<Login<'_>> {
        self.auth.as_ref().map(|auth| Login {
            user: auth.user.as_deref(),
            password: &auth.password,
        })
    }
}

impl Drop for EmbeddedValkey {
    fn drop(&mut self) {
        self.stop();
        // `dir` is removed as the fields drop, now that the server is gone.
    }
}

/// Returns a loopback port that nothing listened on a moment ago.
///
/// Binds `127.0.0.1:0`, reads the port the system chose and closes the
/// socket again. Useful for tests that need an address where nothing
/// listens; another process may of course take the port afterwards.
pub fn free_loopback_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}
