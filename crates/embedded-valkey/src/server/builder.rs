//! The settings [`EmbeddedValkey::start`] leaves out: TLS, a password or ACL user, a given
//! binary or port, and cluster mode for [`EmbeddedCluster`](crate::EmbeddedCluster)'s nodes.

use std::path::PathBuf;
use std::time::Duration;

use super::EmbeddedValkey;
use crate::discover::{find_binary, find_tls_binary};
use crate::error::Error;

/// Settings for a server that [`EmbeddedValkey::start`] does not cover:
/// TLS, a password, an ACL user, a given binary.
///
/// ```no_run
/// use embedded_valkey::EmbeddedValkey;
///
/// # fn main() -> Result<(), embedded_valkey::Error> {
/// let valkey = EmbeddedValkey::builder()
///     .tls(true)
///     .user("app")
///     .password("s3cret")
///     .start()?;
/// let url = valkey.url(); // "rediss://app:s3cret@127.0.0.1:<port>/"
/// let ca = valkey.ca_cert_path(); // trust this CA, and only it
/// # let _ = (url, ca);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Builder {
    binary: Option<PathBuf>,
    tls: bool,
    user: Option<String>,
    password: Option<String>,
    cluster: Option<ClusterMode>,
    port: Option<u16>,
}

impl Builder {
    /// Listens on this loopback port instead of a free one picked at start: for a server other
    /// programs find at a known address. Starting fails if the port is taken.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Runs this binary instead of discovering one ([`find_binary`], or
    /// [`find_tls_binary`] for a TLS server).
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Serves TLS only: a `--tls-port` with a certificate made at start for
    /// `127.0.0.1`, `::1` and `localhost`, signed by a CA of this server's own
    /// ([`EmbeddedValkey::ca_cert_path`]); no plain TCP port. Clients need no
    /// certificate of their own. Needs a binary built with TLS.
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Requires every client to log in with this password: as the default
    /// user (`requirepass`), or as the [`user`](Self::user) if one is set.
    ///
    /// Passwords and user names are limited to printable ASCII without
    /// spaces, so they travel unchanged on the server's command line and in
    /// URLs. The command line is visible to `ps`: these are test credentials.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Creates an ACL user with this name, the [`password`](Self::password)
    /// and every permission (`~* &* +@all`), and switches the default user off,
    /// so clients must log in as this user. Needs a password.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Cluster mode, for [`EmbeddedCluster`](crate::EmbeddedCluster)'s nodes.
    pub(crate) fn cluster(mut self, mode: ClusterMode) -> Self {
        self.cluster = Some(mode);
        self
    }

    /// Finds a binary (unless one was given) and starts the server, as
    /// [`EmbeddedValkey::start`] does.
    ///
    /// For a TLS server without a given binary, [`find_tls_binary`] may
    /// provision one on first use; if none can be had this fails with
    /// [`Error::NoTlsBinary`], which says what to install.
    pub fn start(self) -> Result<EmbeddedValkey, Error> {
        let auth = self.auth()?;
        let binary = match (self.binary, self.tls) {
            (Some(binary), _) => binary,
            (None, true) => find_tls_binary()?,
            (None, false) => find_binary()?,
        };
        EmbeddedValkey::launch_new(binary, self.tls, auth, self.cluster, self.port)
    }

    fn auth(&self) -> Result<Option<Auth>, Error> {
        for (what, value) in [("user", &self.user), ("password", &self.password)] {
            if let Some(value) = value {
                check_credential(what, value)?;
            }
        }
        match (&self.user, &self.password) {
            (Some(_), None) => Err(Error::InvalidConfig {
                reason: "an ACL user needs a password: call .password(..) too".to_owned(),
            }),
            (user, Some(password)) => Ok(Some(Auth {
                user: user.clone(),
                password: password.clone(),
            })),
            (None, None) => Ok(None),
        }
    }
}

/// Credentials must be non-empty printable ASCII without spaces.
fn check_credential(what: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::InvalidConfig {
            reason: format!("the {what} is empty"),
        });
    }
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(Error::InvalidConfig {
            reason: format!(
                "the {what} contains {bad:?}; only printable ASCII without spaces is accepted"
            ),
        });
    }
    Ok(())
}

/// Credentials every client must give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Auth {
    /// An ACL user of its own, or `None` for the default user with `requirepass`.
    pub(super) user: Option<String>,
    pub(super) password: String,
}

/// The cluster settings every node of one [`EmbeddedCluster`](crate::EmbeddedCluster) shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterMode {
    /// `--cluster-node-timeout`.
    pub(crate) node_timeout: Duration,
    /// `--cluster-require-full-coverage`.
    pub(crate) full_coverage: bool,
}
