//! Probing: asking a server `PING` (after `AUTH`, when it has a password)
//! and, once it answers, which process it is, so a server that some other
//! program started on the same port is never mistaken for ours.

use crate::resp::{Conn, Endpoint, Reply};

/// Credentials to log in with before probing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Login<'a> {
    /// The ACL user, or `None` for the default user.
    pub(crate) user: Option<&'a str>,
    pub(crate) password: &'a str,
}

/// Connects to `endpoint`, logs in if asked, expects `+PONG` to `PING`, then
/// reads `process_id` from `INFO server`.
///
/// `Ok(Some(pid))` means a server answered and said who it is; `Ok(None)`
/// means it answered but did not report a pid. `Err` describes why the
/// server is not (yet) ready: connection refused, an error reply such as
/// `-LOADING`, a timeout.
pub(crate) fn ping(endpoint: &Endpoint, login: Option<Login<'_>>) -> Result<Option<u32>, String> {
    let mut conn = Conn::connect(endpoint)?;
    if let Some(login) = login {
        conn.auth(login.user, login.password)?;
    }
    match conn.command(&["PING"])? {
        Reply::Simple(pong) if pong == "PONG" => {}
        other => return Err(format!("PING answered {other:?}")),
    }
    let info = match conn.command(&["INFO", "server"])? {
        Reply::Bulk(Some(body)) => String::from_utf8_lossy(&body).into_owned(),
        other => return Err(format!("INFO server answered {other:?}")),
    };
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok()))
}
