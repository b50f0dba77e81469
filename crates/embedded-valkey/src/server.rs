//! The server handle: spawning a private `valkey-server` on a free loopback
//! port, waiting until it answers, stopping and restarting it, and cleaning
//! up its process and working directory when the handle goes away.

use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::discover::find_binary;
use crate::error::Error;
use crate::probe;
use crate::{last_lines, next_id};

/// How many fresh ports [`EmbeddedValkey::start`] tries when the chosen one
/// turns out to be taken by the time the server binds it.
const START_ATTEMPTS: u32 = 5;
/// How long one spawned server has to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`EmbeddedValkey::restart`] keeps retrying a port that is still busy.
const RESTART_PORT_WAIT: Duration = Duration::from_secs(5);
const LOG_NAME: &str = "valkey.log";
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
    dir: PathBuf,
    child: Option<Child>,
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

    /// Starts a server using the given `valkey-server` (or `redis-server`)
    /// binary, skipping discovery. Otherwise the same as [`start`](Self::start).
    pub fn start_with_binary(binary: impl Into<PathBuf>) -> Result<EmbeddedValkey, Error> {
        // Built before the first launch so that Drop cleans up on every error path.
        let mut server = EmbeddedValkey {
            binary: binary.into(),
            port: 0,
            dir: private_dir()?,
            child: None,
        };
        let mut attempt = 1;
        loop {
            server.port = free_loopback_port()
                .map_err(|err| Error::io("finding a free port on 127.0.0.1", err))?;
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(failure) if failure.port_busy && attempt < START_ATTEMPTS => attempt += 1,
                Err(failure) => return Err(failure.error),
            }
        }
    }

    /// The URL clients connect to: `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
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
    /// Models "the cache server was killed and came back empty". The working
    /// directory is emptied before the new server starts, so no data survives.
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
        clear_dir(&self.dir).map_err(LaunchError::fatal)?;
        let log_path = self.dir.join(LOG_NAME);
        let log = File::create(&log_path).map_err(|err| {
            LaunchError::fatal(Error::io(format!("creating {}", log_path.display()), err))
        })?;
        let log_for_stderr = log
            .try_clone()
            .map_err(|err| LaunchError::fatal(Error::io("duplicating the log file handle", err)))?;

        let child = Command::new(&self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
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
            let last_probe = match probe::ping(self.port) {
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

impl Drop for EmbeddedValkey {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
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

/// Creates a fresh directory, readable only by us, under the system temp dir.
fn private_dir() -> Result<PathBuf, Error> {
    let base = std::env::temp_dir();
    loop {
        let dir = base.join(format!(
            "embedded-valkey-{}-{}",
            std::process::id(),
            next_id()
        ));
        match fs::create_dir(&dir) {
            Ok(()) => {
                restrict_to_owner(&dir)?;
                return Ok(dir);
            }
            // Left over by an earlier process that had our pid: pick another name.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(Error::io(format!("creating {}", dir.display()), err)),
        }
    }
}

fn restrict_to_owner(dir: &Path) -> Result<(), Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|err| Error::io(format!("restricting {}", dir.display()), err))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
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
