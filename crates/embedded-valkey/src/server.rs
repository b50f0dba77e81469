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
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::certs::{TlsFiles, write_tls_files};
use crate::discover::{find_binary, find_tls_binary};
use crate::error::Error;
use crate::last_lines;
use crate::probe::{self, Login};
use crate::resp::Endpoint;

/// How many fresh ports [`EmbeddedValkey::start`] tries when the chosen one
/// turns out to be taken by the time the server binds it.
const START_ATTEMPTS: u32 = 5;
/// How long one spawned server has to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`EmbeddedValkey::restart`] keeps retrying a port that is still busy.
const RESTART_PORT_WAIT: Duration = Duration::from_secs(5);
const LOG_NAME: &str = "valkey.log";
const DATA_DIR: &str = "data";
const TLS_DIR: &str = "tls";
const SOCKET_NAME: &str = "valkey.sock";
const NODES_CONF: &str = "nodes.conf";
const LOG_TAIL_LINES: usize = 20;
const MAX_BACKOFF: Duration = Duration::from_millis(100);

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

/// Credentials every client must give.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Auth {
    /// An ACL user of its own, or `None` for the default user with `requirepass`.
    user: Option<String>,
    password: String,
}

/// The cluster settings every node of one [`EmbeddedCluster`](crate::EmbeddedCluster) shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterMode {
    /// `--cluster-node-timeout`.
    pub(crate) node_timeout: Duration,
    /// `--cluster-require-full-coverage`.
    pub(crate) full_coverage: bool,
}

/// Cluster-mode settings of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClusterNode {
    /// The cluster bus port (`--cluster-port`), picked free like the client port.
    bus_port: u16,
    mode: ClusterMode,
}

/// Settings for a server that [`EmbeddedValkey::start`] does not cover:
/// TLS, a password, an ACL user, a given binary.
///
/// ```no_run
/// use embedded_valkey::EmbeddedValkey;
///
/// # fn main() -> Result<(), embedded_valkey::Error> {
/// let valkey = EmbeddedValkey::builder()
///     .tls(true)
///     .user("app")
///     .password("s3cret")
///     .start()?;
/// let url = valkey.url(); // "rediss://app:s3cret@127.0.0.1:<port>/"
/// let ca = valkey.ca_cert_path(); // trust this CA, and only it
/// # let _ = (url, ca);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Builder {
    binary: Option<PathBuf>,
    tls: bool,
    user: Option<String>,
    password: Option<String>,
    cluster: Option<ClusterMode>,
    port: Option<u16>,
}

impl Builder {
    /// Listens on this loopback port instead of a free one picked at start: for a server other
    /// programs find at a known address. Starting fails if the port is taken.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Runs this binary instead of discovering one ([`find_binary`], or
    /// [`find_tls_binary`] for a TLS server).
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Serves TLS only: a `--tls-port` with a certificate made at start for
    /// `127.0.0.1`, `::1` and `localhost`, signed by a CA of this server's own
    /// ([`EmbeddedValkey::ca_cert_path`]); no plain TCP port. Clients need no
    /// certificate of their own. Needs a binary built with TLS.
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Requires every client to log in with this password: as the default
    /// user (`requirepass`), or as the [`user`](Self::user) if one is set.
    ///
    /// Passwords and user names are limited to printable ASCII without
    /// spaces, so they travel unchanged on the server's command line and in
    /// URLs. The command line is visible to `ps`: these are test credentials.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Creates an ACL user with this name, the [`password`](Self::password)
    /// and every permission (`~* &* +@all`), and switches the default user off,
    /// so clients must log in as this user. Needs a password.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Cluster mode, for [`EmbeddedCluster`](crate::EmbeddedCluster)'s nodes.
    pub(crate) fn cluster(mut self, mode: ClusterMode) -> Self {
        self.cluster = Some(mode);
        self
    }

    /// Finds a binary (unless one was given) and starts the server, as
    /// [`EmbeddedValkey::start`] does.
    ///
    /// For a TLS server without a given binary, [`find_tls_binary`] may
    /// provision one on first use; if none can be had this fails with
    /// [`Error::NoTlsBinary`], which says what to install.
    pub fn start(self) -> Result<EmbeddedValkey, Error> {
        let auth = self.auth()?;
        let binary = match (self.binary, self.tls) {
            (Some(binary), _) => binary,
            (None, true) => find_tls_binary()?,
            (None, false) => find_binary()?,
        };
        EmbeddedValkey::launch_new(binary, self.tls, auth, self.cluster, self.port)
    }

    fn auth(&self) -> Result<Option<Auth>, Error> {
        for (what, value) in [("user", &self.user), ("password", &self.password)] {
            if let Some(value) = value {
                check_credential(what, value)?;
            }
        }
        match (&self.user, &self.password) {
            (Some(_), None) => Err(Error::InvalidConfig {
                reason: "an ACL user needs a password: call .password(..) too".to_owned(),
            }),
            (user, Some(password)) => Ok(Some(Auth {
                user: user.clone(),
                password: password.clone(),
            })),
            (None, None) => Ok(None),
        }
    }
}

/// Credentials must be non-empty printable ASCII without spaces.
fn check_credential(what: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::InvalidConfig {
            reason: format!("the {what} is empty"),
        });
    }
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "the {what} contains {bad:?}; only printable ASCII without spaces is accepted"
            ),
        });
    }
    Ok(())
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

/// Why one launch failed, and whether trying again on a port is worthwhile.
struct LaunchError {
    error: Error,
    port_busy: bool,
}

impl LaunchError {
    fn fatal(error: Error) -> Self {
        LaunchError {
            error,
            port_busy: false,
        }
    }
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
    /// [`find_tls_binary`], which on a fresh Debian machine provisions one
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

    /// Spawns the server on `self.port` and waits until it answers.
    /// On failure, no child is left running and `self.child` is `None`.
    fn launch(&mut self) -> Result<(), LaunchError> {
        let data = self.fresh_data_dir()?;
        let log_path = self.dir.path().join(LOG_NAME);
        let log = File::create(&log_path).map_err(|err| {
            LaunchError::fatal(Error::io(format!("creating {}", log_path.display()), err))
        })?;
        let log_for_stderr = log
            .try_clone()
            .map_err(|err| LaunchError::fatal(Error::io("duplicating the log file handle", err)))?;
        let child = self
            .command(&data)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .map_err(|source| {
                LaunchError::fatal(Error::Spawn {
                    binary: self.binary.clone(),
                    source,
                })
            })?;
        self.child = Some(child);

        let result = self.wait_ready(&log_path);
        if result.is_err() {
            self.stop();
        }
        result
    }

    /// Empties (or creates) the data directory and removes a Unix socket a
    /// killed server left behind; returns the data directory.
    fn fresh_data_dir(&self) -> Result<PathBuf, LaunchError> {
        let data = self.dir.path().join(DATA_DIR);
        if data.exists() {
            clear_dir(&data).map_err(LaunchError::fatal)?;
        } else {
            fs::create_dir(&data).map_err(|err| {
                LaunchError::fatal(Error::io(format!("creating {}", data.display()), err))
            })?;
        }
        let socket = self.dir.path().join(SOCKET_NAME);
        match fs::remove_file(&socket) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => Err(LaunchError::fatal(
                Error::io(format!("removing {}", socket.display()), err),
            )),
            _ => Ok(data),
        }
    }

    /// The server's command line: where it listens, no persistence, `data`
    /// as its directory, and its login and cluster settings.
    fn command(&self, data: &Path) -> Command {
        let mut command = Command::new(&self.binary);
        match &self.tls {
            None => {
                command.arg("--port").arg(self.port.to_string());
            }
            Some(files) => {
                command
                    .args(["--port", "0", "--tls-port"])
                    .arg(self.port.to_string())
                    .arg("--tls-cert-file")
                    .arg(&files.server_cert)
                    .arg("--tls-key-file")
                    .arg(&files.server_key)
                    .arg("--tls-ca-cert-file")
                    .arg(&files.ca_cert)
                    .args(["--tls-auth-clients", "no", "--unixsocket"])
                    .arg(self.dir.path().join(SOCKET_NAME))
                    .args(["--unixsocketperm", "700"]);
            }
        }
        command
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(data);
        if let Some(auth) = &self.auth {
            auth_args(&mut command, auth);
        }
        if let Some(cluster) = &self.cluster {
            cluster_args(&mut command, cluster, &self.dir.path().join(NODES_CONF));
        }
        command
    }

    /// Polls the port until our own child answers `PING` (checked by pid),
    /// the child exits, or [`READY_TIMEOUT`] passes.
    fn wait_ready(&mut self, log_path: &Path) -> Result<(), LaunchError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut backoff = Duration::from_millis(2);
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(self.not_ready(
                    log_path,
                    "the server is not running".to_owned(),
                    false,
                ));
            };
            let own_pid = child.id();
            match child.try_wait() {
                Ok(Some(status)) => {
                    let log = read_log(log_path);
                    let port_busy = log.contains("Address already in use");
                    return Err(self.not_ready(
                        log_path,
                        format!("the server exited early ({status})"),
                        port_busy,
                    ));
                }
                Ok(None) => {}
                Err(err) => {
                    return Err(LaunchError::fatal(Error::io(
                        "checking on the server process",
                        err,
                    )));
                }
            }

            // Someone else answering on our port is not fatal by itself: if
            // it took the port first, our child exits with "Address already
            // in use" and the check above turns that into a retry.
            let last_probe = match probe::ping(&self.endpoint(), self.login()) {
                Ok(Some(pid)) if pid != own_pid => {
                    format!(
                        "a process other than ours (pid {pid}, ours is {own_pid}) answers on this port"
                    )
                }
                Ok(_) => return Ok(()),
                Err(reason) => reason,
            };

            if Instant::now() >= deadline {
                return Err(self.not_ready(
                    log_path,
                    format!(
                        "no +PONG within {} s (last attempt: {last_probe})",
                        READY_TIMEOUT.as_secs()
                    ),
                    false,
                ));
            }
            thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
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

    fn not_ready(&self, log_path: &Path, reason: String, port_busy: bool) -> LaunchError {
        LaunchError {
            error: Error::NotReady {
                port: self.port,
                reason,
                log: log_path.to_path_buf(),
                log_tail: last_lines(&read_log(log_path), LOG_TAIL_LINES),
            },
            port_busy,
        }
    }
}

impl Drop for EmbeddedValkey {
    fn drop(&mut self) {
        self.stop();
        // `dir` is removed as the fields drop, now that the server is gone.
    }
}

/// The password, and the ACL user if there is one (the default user is then off).
fn auth_args(command: &mut Command, auth: &Auth) {
    match &auth.user {
        None => {
            command.arg("--requirepass").arg(&auth.password);
        }
        Some(user) => {
            let password = format!(">{}", auth.password);
            command
                .arg("--user")
                .arg(user)
                .args(["on", &password, "~*", "&*", "+@all"]);
            if user != "default" {
                command.args(["--user", "default", "off"]);
            }
        }
    }
}

/// A cluster node's arguments. Two differ from the server's defaults, for
/// tests: `--repl-diskless-sync-delay 0`, since the default waits 5 s for more
/// replicas before every full sync (at start, and when a restarted primary
/// rejoins as a replica); and `--cluster-allow-replica-migration no`, so a
/// replica stays in its shard and a primary whose last slot was migrated away
/// stays an empty primary instead of becoming a replica of the slot's new owner.
fn cluster_args(command: &mut Command, cluster: &ClusterNode, nodes_conf: &Path) {
    let yes_no = |on: bool| if on { "yes" } else { "no" };
    command
        .args(["--cluster-enabled", "yes", "--cluster-config-file"])
        .arg(nodes_conf)
        .arg("--cluster-port")
        .arg(cluster.bus_port.to_string())
        .arg("--cluster-node-timeout")
        .arg(cluster.mode.node_timeout.as_millis().to_string())
        .arg("--cluster-require-full-coverage")
        .arg(yes_no(cluster.mode.full_coverage))
        .args(["--cluster-allow-replica-migration", "no"])
        .args(["--repl-diskless-sync-delay", "0"]);
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

/// Creates a fresh directory, readable only by us (tempfile makes it `0o700`), under the system
/// temp dir.
fn private_dir() -> Result<tempfile::TempDir, Error> {
    tempfile::Builder::new()
        .prefix("embedded-valkey-")
        .tempdir()
        .map_err(|err| {
            Error::io(
                format!("creating a directory in {}", std::env::temp_dir().display()),
                err,
            )
        })
}

/// Empties the working directory so a (re)started server finds no data.
fn clear_dir(dir: &Path) -> Result<(), Error> {
    let context = || format!("emptying {}", dir.display());
    for entry in fs::read_dir(dir).map_err(|err| Error::io(context(), err))? {
        let entry = entry.map_err(|err| Error::io(context(), err))?;
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(|err| Error::io(format!("removing {}", path.display()), err))?;
    }
    Ok(())
}

fn read_log(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(err) => format!("(could not read the log: {err})"),
    }
}
