//! Probing: just enough RESP over a plain TCP socket to ask a server `PING`
//! and, once it answers, which process it is (so a server that some other
//! program started on the same port is never mistaken for ours).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
const IO_TIMEOUT: Duration = Duration::from_secs(1);
/// `INFO server` is a few kilobytes; anything far larger is not a server reply.
const MAX_INFO_LEN: usize = 1 << 20;

/// Connects to `127.0.0.1:port`, expects `+PONG` to an inline `PING`, then
/// reads `process_id` from `INFO server`.
///
/// `Ok(Some(pid))` means a server answered and said who it is; `Ok(None)`
/// means it answered but did not report a pid. `Err` describes why the
/// server is not (yet) ready: connection refused, an error reply such as
/// `-LOADING`, a timeout.
pub(crate) fn ping(port: u16) -> Result<Option<u32>, String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);

    writer.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
    let reply = read_line(&mut reader)?;
    if reply != "+PONG" {
        return Err(format!("PING answered {reply:?}"));
    }

    writer
        .write_all(b"INFO server\r\n")
        .map_err(|e| e.to_string())?;
    let header = read_line(&mut reader)?;
    let len = header
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok());
    let Some(len) = len.filter(|&len| len <= MAX_INFO_LEN) else {
        return Err(format!("INFO server answered {header:?}"));
    };
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    let info = String::from_utf8_lossy(&body);
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok()))
}

fn read_line(reader: &mut impl BufRead) -> Result<String, String> {
    let mut line = Vec::new();
    let n = reader
        .read_until(b'\n', &mut line)
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("connection closed without a reply".to_owned());
    }
    Ok(String::from_utf8_lossy(&line).trim_end().to_owned())
}
