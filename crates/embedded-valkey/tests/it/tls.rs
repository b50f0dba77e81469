//! TLS and login against real servers: a TLS server answers over TLS to a
//! client that trusts its CA, and to nobody else (plain TCP, another CA);
//! passwords and ACL users are enforced and appear in the URL.
//!
//! These tests need a binary built with TLS. On a fresh Debian machine the
//! first one provisions Debian's redis-server (see `find_tls_binary`); where
//! none can be had they fail with the error that says what to install.

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Reply, command, command_over};
use embedded_valkey::{EmbeddedValkey, Error};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

fn pong() -> Reply {
    Reply::Simple("PONG".to_owned())
}

fn ok() -> Reply {
    Reply::Simple("OK".to_owned())
}

/// A rustls client configuration trusting only the CA certificates in `pem`.
fn trusting(pem: &[u8]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert.expect("a PEM certificate")).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

fn trusting_file(path: &Path) -> Arc<ClientConfig> {
    trusting(&std::fs::read(path).expect("the CA file is readable"))
}

/// Opens a TLS connection to `127.0.0.1:port`, verifying the server as `name`.
fn tls_connect(
    port: u16,
    config: Arc<ClientConfig>,
    name: &'static str,
) -> BufReader<StreamOwned<ClientConnection, TcpStream>> {
    let tcp = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("TCP connect");
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let server = ServerName::try_from(name).unwrap();
    let conn = ClientConnection::new(config, server).unwrap();
    BufReader::new(StreamOwned::new(conn, tcp))
}

fn tls_server() -> EmbeddedValkey {
    EmbeddedValkey::start_tls().unwrap_or_else(|err| panic!("a TLS server starts: {err}"))
}

/// Over TLS, with the server's CA trusted, PING answers PONG and keys round-trip,
/// whether the server is named by IP address or as localhost.
#[test]
fn a_tls_server_answers_a_client_that_trusts_its_ca() {
    let valkey = tls_server();
    let port = valkey.port();
    assert_eq!(
        valkey.tls_url(),
        Some(format!("rediss://127.0.0.1:{port}/"))
    );
    assert_eq!(valkey.url(), format!("rediss://127.0.0.1:{port}/"));
    let ca = valkey.ca_cert_path().expect("a TLS server has a CA");
    assert!(ca.is_file());
    let files = valkey.tls_files().unwrap();
    assert!(files.server_cert.is_file() && files.server_key.is_file());

    let config = trusting_file(ca);
    let mut conn = tls_connect(port, config.clone(), "127.0.0.1");
    assert_eq!(command_over(&mut conn, &["PING"]).unwrap(), pong());
    assert_eq!(command_over(&mut conn, &["SET", "k", "v"]).unwrap(), ok());
    assert_eq!(
        command_over(&mut conn, &["GET", "k"]).unwrap(),
        Reply::Bulk(Some("v".to_owned()))
    );

    let mut by_name = tls_connect(port, config, "localhost");
    assert_eq!(command_over(&mut by_name, &["PING"]).unwrap(), pong());
}

/// The TLS server has no plain port: a plain RESP client on its port gets no
/// PONG (the server drops the connection, which does not speak TLS).
#[test]
fn a_plain_tcp_client_is_refused() {
    let valkey = tls_server();
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, valkey.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    (&stream).write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut answer = Vec::new();
    // Closed (Ok(0)), reset, or at worst a TLS alert: never a RESP reply.
    let _ = (&stream).take(1024).read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(!text.contains("PONG"), "plain TCP got {text:?}");
    assert!(command(valkey.port(), &["PING"]).is_err());
}

/// A client that trusts another CA refuses the server's certificate.
#[test]
fn a_client_trusting_another_ca_is_refused() {
    let valkey = tls_server();
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_ca = params.self_signed(&other_key).unwrap();

    let mut conn = tls_connect(
        valkey.port(),
        trusting(other_ca.pem().as_bytes()),
        "127.0.0.1",
    );
    let err = command_over(&mut conn, &["PING"]).expect_err("the handshake must fail");
    let message = err.to_string();
    assert!(
        message.contains("UnknownIssuer") || message.contains("invalid peer certificate"),
        "{message}"
    );
}

/// A restarted TLS server keeps its certificates: the same CA still works.
#[test]
fn a_restarted_tls_server_keeps_its_ca() {
    let mut valkey = tls_server();
    let config = trusting_file(valkey.ca_cert_path().unwrap());
    valkey.restart().expect("restarts");
    let mut conn = tls_connect(valkey.port(), config, "127.0.0.1");
    assert_eq!(command_over(&mut conn, &["PING"]).unwrap(), pong());
}

/// With an ACL user, nothing works before AUTH, a wrong password is refused,
/// the right one is accepted, and the URL carries both.
#[test]
fn an_acl_user_over_tls_must_log_in() {
    let valkey = EmbeddedValkey::builder()
        .tls(true)
        .user("app")
        .password("s3cret!")
        .start()
        .unwrap_or_else(|err| panic!("a TLS server with a user starts: {err}"));
    let port = valkey.port();
    assert_eq!(
        valkey.url(),
        format!("rediss://app:s3cret%21@127.0.0.1:{port}/")
    );
    assert_eq!(valkey.user(), Some("app"));
    assert_eq!(valkey.password(), Some("s3cret!"));

    let config = trusting_file(valkey.ca_cert_path().unwrap());
    let mut conn = tls_connect(port, config, "127.0.0.1");
    let Reply::Error(noauth) = command_over(&mut conn, &["PING"]).unwrap() else {
        panic!("PING before AUTH must fail");
    };
    assert!(noauth.starts_with("NOAUTH"), "{noauth}");
    assert!(matches!(
        command_over(&mut conn, &["AUTH", "app", "wrong"]).unwrap(),
        Reply::Error(_)
    ));
    assert!(matches!(
        command_over(&mut conn, &["AUTH", "s3cret!"]).unwrap(),
        Reply::Error(_)
    ));
    assert_eq!(
        command_over(&mut conn, &["AUTH", "app", "s3cret!"]).unwrap(),
        ok()
    );
    assert_eq!(command_over(&mut conn, &["PING"]).unwrap(), pong());
}

/// A plain server with a password wants it, and its URL says `:password@`.
#[test]
fn a_plain_server_with_a_password_wants_it() {
    let valkey = EmbeddedValkey::builder()
        .password("pw")
        .start()
        .expect("server starts");
    let port = valkey.port();
    assert_eq!(valkey.url(), format!("redis://:pw@127.0.0.1:{port}/"));
    assert_eq!(valkey.tls_url(), None);
    assert_eq!(valkey.ca_cert_path(), None);

    let Reply::Error(noauth) = command(port, &["PING"]).unwrap() else {
        panic!("PING before AUTH must fail");
    };
    assert!(noauth.starts_with("NOAUTH"), "{noauth}");
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    let mut conn = BufReader::new(stream);
    assert_eq!(command_over(&mut conn, &["AUTH", "pw"]).unwrap(), ok());
    assert_eq!(command_over(&mut conn, &["PING"]).unwrap(), pong());
}

/// Unusable credentials are refused before anything starts.
#[test]
fn bad_credentials_are_a_clear_error() {
    for builder in [
        EmbeddedValkey::builder().password("two words"),
        EmbeddedValkey::builder().password(""),
        EmbeddedValkey::builder().user("app"),
        EmbeddedValkey::builder().user("a\nb").password("x"),
    ] {
        let err = builder.start().expect_err("refused");
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    }
}

/// A binary without TLS, given explicitly, fails to start a TLS server with
/// its own complaint in the error rather than hanging.
#[test]
fn a_binary_without_tls_is_reported_as_not_ready() {
    let plain = embedded_valkey::find_binary().expect("a plain binary");
    if embedded_valkey::find_tls_binary().ok().as_deref() == Some(plain.as_path()) {
        return; // this machine's plain binary has TLS; nothing to show
    }
    let err = EmbeddedValkey::builder()
        .tls(true)
        .binary(plain)
        .start()
        .expect_err("no TLS in this binary");
    assert!(matches!(err, Error::NotReady { .. }), "{err:?}");
    assert!(err.to_string().contains("TLS"), "{err}");
}
