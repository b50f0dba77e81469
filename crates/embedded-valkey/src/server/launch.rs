//! Launching one server process: its command line, its private directory, and the wait until
//! it answers `PING` (and is ours).

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{Auth, ClusterNode, EmbeddedValkey, SOCKET_NAME};
use crate::error::Error;
use crate::last_lines;
use crate::probe;

/// How long one spawned server has to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest pause between two probes of a starting server, or two restarts on a busy port.
pub(super) const MAX_BACKOFF: Duration = Duration::from_millis(100);
const LOG_NAME: &str = "valkey.log";
const DATA_DIR: &str = "data";
const NODES_CONF: &str = "nodes.conf";
const LOG_TAIL_LINES: usize = 20;

/// Why one launch failed, and whether trying again on a port is worthwhile.
pub(super) struct LaunchError {
    pub(super) error: Error,
    pub(super) port_busy: bool,
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
    /// Spawns the server on `self.port` and waits until it answers.
    /// On failure, no child is left running and `self.child` is `None`.
    pub(super) fn launch(&mut self) -> Result<(), LaunchError> {
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

/// Creates a fresh directory, readable only by us (tempfile makes it `0o700`), under the system
/// temp dir.
pub(super) fn private_dir() -> Result<tempfile::TempDir, Error> {
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
