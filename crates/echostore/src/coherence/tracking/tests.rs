//! The URLs of a cluster's primaries.

use super::cluster::with_host;

/// A primary's URL keeps the seed's scheme and login.
#[test]
fn node_urls_keep_scheme_and_login() {
    assert_eq!(
        with_host("redis://127.0.0.1:7000", "10.0.0.2", 7001),
        "redis://10.0.0.2:7001"
    );
    assert_eq!(
        with_host("rediss://app:secret@seed:7000/", "h", 7002),
        "rediss://app:secret@h:7002"
    );
}
