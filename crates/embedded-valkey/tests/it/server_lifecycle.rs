//! Behaviour of one server handle: it answers, keeps its data to itself,
//! dies with its handle, and restarts empty on the same port.

use crate::common;

use common::{Reply, command, process_exists};
use embedded_valkey::{EmbeddedValkey, Error, free_loopback_port};

fn ok() -> Reply {
    Reply::Simple("OK".to_owned())
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(Some(text.to_owned()))
}

/// A started server answers a raw `PING` with `+PONG` and stores and returns a key.
#[test]
fn starts_a_server_that_answers_ping() {
    let valkey = EmbeddedValkey::start().expect("server starts");
    let port = valkey.port();

    assert_eq!(
        command(port, &["PING"]).unwrap(),
        Reply::Simple("PONG".to_owned())
    );
    assert_eq!(command(port, &["SET", "greeting", "hello"]).unwrap(), ok());
    assert_eq!(command(port, &["GET", "greeting"]).unwrap(), bulk("hello"));
    assert_eq!(valkey.url(), format!("redis://127.0.0.1:{port}/"));
    assert!(valkey.pid().is_some());
    assert!(valkey.binary().is_file());
}

/// Two servers listen on different ports and a key set in one is absent from the other.
#[test]
fn two_servers_get_distinct_ports_and_do_not_share_data() {
    let first = EmbeddedValkey::start().expect("first server starts");
    let second = EmbeddedValkey::start().expect("second server starts");
    assert_ne!(first.port(), second.port());

    assert_eq!(
        command(first.port(), &["SET", "owner", "first"]).unwrap(),
        ok()
    );
    assert_eq!(
        command(second.port(), &["GET", "owner"]).unwrap(),
        Reply::Bulk(None)
    );
    assert_eq!(
        command(first.port(), &["GET", "owner"]).unwrap(),
        bulk("first")
    );
}

/// Dropping the handle kills the server process and reaps it.
#[test]
fn drop_kills_the_server() {
    let valkey = EmbeddedValkey::start().expect("server starts");
    let pid = valkey.pid().expect("a running server has a pid");
    assert!(process_exists(pid));

    drop(valkey);

    assert!(
        !process_exists(pid),
        "process {pid} still exists after drop"
    );
}

/// The handle also cleans up when the test that owns it panics.
#[test]
fn a_panicking_owner_still_kills_the_server() {
    let (sender, receiver) = std::sync::mpsc::channel();
    let outcome = std::thread::spawn(move || {
        let valkey = EmbeddedValkey::start().expect("server starts");
        sender.send(valkey.pid()).expect("receiver is alive");
        panic!("the test failed while the server was running");
    })
    .join();

    assert!(outcome.is_err(), "the thread panicked");
    let pid = receiver
        .recv()
        .unwrap()
        .expect("a running server has a pid");
    assert!(!process_exists(pid), "process {pid} outlived the panic");
}

/// After stop and restart the server answers on the same port and has forgotten every key.
#[test]
fn restart_gives_an_empty_server_on_the_same_port() {
    let mut valkey = EmbeddedValkey::start().expect("server starts");
    let port = valkey.port();
    let old_pid = valkey.pid().expect("a running server has a pid");
    assert_eq!(command(port, &["SET", "survivor", "no"]).unwrap(), ok());

    valkey.stop();
    assert_eq!(valkey.pid(), None);
    assert!(!process_exists(old_pid));

    valkey.restart().expect("server restarts");
    assert_eq!(valkey.port(), port);
    assert_ne!(valkey.pid(), Some(old_pid));
    assert_eq!(
        command(port, &["GET", "survivor"]).unwrap(),
        Reply::Bulk(None)
    );
    assert_eq!(command(port, &["DBSIZE"]).unwrap(), Reply::Integer(0));
}

/// Restarting a running server (without stopping it first) also leaves it empty on the same port.
#[test]
fn restart_without_stop_replaces_the_running_server() {
    let mut valkey = EmbeddedValkey::start().expect("server starts");
    let port = valkey.port();
    assert_eq!(command(port, &["SET", "k", "v"]).unwrap(), ok());

    valkey.restart().expect("server restarts");

    assert_eq!(valkey.port(), port);
    assert_eq!(command(port, &["DBSIZE"]).unwrap(), Reply::Integer(0));
}

/// The server keeps nothing on disk: saving and the append-only file are off.
#[test]
fn persistence_is_switched_off() {
    let valkey = EmbeddedValkey::start().expect("server starts");
    let port = valkey.port();

    assert_eq!(
        command(port, &["CONFIG", "GET", "appendonly"]).unwrap(),
        Reply::Array(vec![bulk("appendonly"), bulk("no")])
    );
    assert_eq!(
        command(port, &["CONFIG", "GET", "save"]).unwrap(),
        Reply::Array(vec![bulk("save"), bulk("")])
    );
}

/// A binary that exits at once is reported as not ready, quoting the server log.
#[test]
fn a_binary_that_exits_at_once_is_reported_as_not_ready() {
    let err = EmbeddedValkey::start_with_binary("/bin/false").expect_err("false is no server");

    assert!(matches!(err, Error::NotReady { .. }), "{err:?}");
    assert!(err.to_string().contains("exited early"), "{err}");
}

/// A binary that does not exist is reported as a spawn failure naming it.
#[test]
fn a_missing_binary_is_a_spawn_error() {
    let err = EmbeddedValkey::start_with_binary("/nonexistent/valkey-server")
        .expect_err("there is no such binary");

    assert!(matches!(err, Error::Spawn { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/valkey-server"),
        "{err}"
    );
}

/// Nothing answers on a port from `free_loopback_port`.
#[test]
fn free_loopback_port_has_nothing_listening() {
    let port = free_loopback_port().unwrap();
    assert!(command(port, &["PING"]).is_err());
}

/// Restarting onto a port that another program now holds fails with the server's complaint, not a hang.
#[test]
fn restart_onto_a_port_held_by_someone_else_is_a_clear_error() {
    let mut valkey = EmbeddedValkey::start().expect("server starts");
    let port = valkey.port();
    valkey.stop();
    let squatter =
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("port is free after stop");

    let err = valkey.restart().expect_err("the port is taken");

    assert!(matches!(err, Error::NotReady { .. }), "{err:?}");
    assert!(err.to_string().contains("Address already in use"), "{err}");
    assert_eq!(valkey.pid(), None);
    drop(squatter);
}
