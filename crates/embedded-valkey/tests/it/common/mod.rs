//! Test helpers: a minimal raw-RESP client, so the tests talk to the real
//! server without depending on a client crate; it runs over plain TCP or
//! over any stream (the TLS tests hand it a rustls stream).

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// One RESP reply, as far as these tests need to tell replies apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+text`
    Simple(String),
    /// `-text`
    Error(String),
    /// `:n`
    Integer(i64),
    /// `$len text`, or `None` for the null bulk string `$-1`.
    Bulk(Option<String>),
    /// `*n` followed by `n` replies.
    Array(Vec<Reply>),
}

/// Sends one command to `127.0.0.1:port` as a RESP array and reads one reply.
pub(crate) fn command(port: u16, args: &[&str]) -> std::io::Result<Reply> {
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream);
    command_over(&mut reader, args)
}

/// Sends one command on an open connection and reads one reply.
pub(crate) fn command_over<S: Read + Write>(
    stream: &mut BufReader<S>,
    args: &[&str],
) -> std::io::Result<Reply> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.get_mut().write_all(request.as_bytes())?;
    stream.get_mut().flush()?;
    read_reply(stream)
}

fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed without a reply",
        ));
    }
    let line = line.trim_end();
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("reply {line:?}"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(rest.parse().map_err(|_| bad())?),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Reply::Bulk(None)
            } else {
                let len = usize::try_from(len).map_err(|_| bad())?;
                let mut body = vec![0; len + 2];
                reader.read_exact(&mut body)?;
                body.truncate(len);
                Reply::Bulk(Some(String::from_utf8_lossy(&body).into_owned()))
            }
        }
        "*" => {
            let len: usize = rest.parse().map_err(|_| bad())?;
            let items = (0..len).map(|_| read_reply(reader));
            Reply::Array(items.collect::<std::io::Result<_>>()?)
        }
        _ => return Err(bad()),
    })
}

/// Whether a process with this pid exists (Linux: `/proc/<pid>` is present).
pub(crate) fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}
