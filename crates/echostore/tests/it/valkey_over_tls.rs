//! `rediss://` with a private CA: stores reach a TLS-only server, the cross-store herd still reads
//! the source once, and a wrong CA is a clear error. Needs the `tls` feature:
//! `cargo test -p echostore --features tls --test valkey_over_tls`.
#![cfg(feature = "tls")]

use crate::common;

use common::{Source, answers, herd_across, settled, table_on, until};
use echostore::{Error, Store, Table};
use embedded_valkey::EmbeddedValkey;

/// Four stores over TLS with the server's CA: one source read for a herd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_over_tls_reads_the_source_once() {
    let valkey = EmbeddedValkey::start_tls().expect("a TLS valkey");
    let url = valkey.tls_url().expect("a rediss url");
    let ca = valkey.ca_cert_path().expect("its CA").to_path_buf();
    let source = Source::open();
    let mut tables: Vec<Table<u64, String>> = Vec::new();
    for _ in 0..4 {
        let store = Store::builder()
            .valkey(url.clone())
            .valkey_ca(ca.clone())
            .require_valkey(true)
            .build()
            .await
            .expect("a store over TLS");
        until("tracking is up over TLS", || store.is_coherent()).await;
        tables.push(table_on(&store, "tls", &source, |t| t).await);
    }
    for answer in answers(herd_across(&tables, 50, 1)).await {
        assert_eq!(answer.expect("a value").value.as_str(), "value-1-1");
    }
    assert_eq!(source.calls(), 1);
    for table in &tables {
        settled(table).await;
    }
}

/// A CA that did not sign the server's certificate: `build()` fails, naming the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_clear_error() {
    let valkey = EmbeddedValkey::start_tls().expect("a TLS valkey");
    let other = EmbeddedValkey::start_tls().expect("another TLS valkey, another CA");
    let built = Store::builder()
        .valkey(valkey.tls_url().expect("url"))
        .valkey_ca(other.ca_cert_path().expect("the other CA"))
        .require_valkey(true)
        .build()
        .await;
    let err = built.expect_err("the certificate is not trusted");
    assert!(matches!(err, Error::Valkey { .. }), "{err}");
    let text = format!("{err} {:?}", err);
    assert!(
        text.to_lowercase().contains("certificate") || text.contains("UnknownIssuer"),
        "{text}"
    );
}

/// A CA file that does not exist is refused at build, naming the file.
#[tokio::test]
async fn a_missing_ca_file_is_refused() {
    let err = Store::builder()
        .valkey("rediss://127.0.0.1:1")
        .valkey_ca("/nonexistent/ca.pem")
        .build()
        .await
        .expect_err("no such file");
    assert!(
        matches!(&err, Error::InvalidConfig(m) if m.contains("/nonexistent/ca.pem")),
        "{err}"
    );
}
