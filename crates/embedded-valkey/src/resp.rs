//! A tiny blocking RESP2 client: just enough to probe a server, log in, and
//! run a cluster (form it, ask it what it looks like, fail it over, migrate
//! a slot), over a plain TCP socket or the Unix socket in a server's private
//! directory. Arguments are bytes, since keys moved by `MIGRATE` may be any.
//!
//! Errors are plain strings: they end up inside this crate's [`Error`](crate::Error)
//! messages, never in front of a caller on their own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// No reply this crate reads is anywhere near this; a larger length is garbage.
const MAX_BULK_LEN: usize = 16 << 20;
const MAX_ARRAY_LEN: usize = 1 << 20;
/// `CLUSTER SLOTS` nests three deep; anything deeper is not a reply we asked for.
const MAX_DEPTH: usize = 8;

/// Where a server can be reached without TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `127.0.0.1:<port>`.
    Tcp(u16),
    /// A Unix socket path (used for TLS servers, which have no plain TCP port).
    #[cfg_attr(not(unix), allow(dead_code))]
    Unix(PathBuf),
}

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+text`
    Simple(String),
    /// `-text`
    Error(String),
    /// `:n`
    Integer(i64),
    /// `$len`, `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*n`, `None` for the null array.
    Array(Option<Vec<Reply>>),
}

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buf),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buf),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.flush(),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.flush(),
        }
    }
}

/// One connection to a server.
pub(crate) struct Conn {
    stream: BufReader<Stream>,
}

impl Conn {
    /// Connects with short timeouts, so a server that is not there yet fails fast.
    pub(crate) fn connect(endpoint: &Endpoint) -> Result<Conn, String> {
        let stream = match endpoint {
            Endpoint::Tcp(port) => {
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, *port));
                let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                    .map_err(|e| e.to_string())?;
                stream
                    .set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
                    .map_err(|e| e.to_string())?;
                Stream::Tcp(stream)
            }
            #[cfg(unix)]
            Endpoint::Unix(path) => {
                let stream = UnixStream::connect(path).map_err(|e| e.to_string())?;
                stream
                    .set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
                    .map_err(|e| e.to_string())?;
                Stream::Unix(stream)
            }
            #[cfg(not(unix))]
            Endpoint::Unix(path) => {
                return Err(format!(
                    "Unix sockets are not available here ({})",
                    path.display()
                ));
            }
        };
        Ok(Conn {
            stream: BufReader::new(stream),
        })
    }

    /// Sends one command as a RESP array and reads its reply. An error reply
    /// (`-ERR ...`) is returned as [`Reply::Error`], not as `Err`.
    pub(crate) fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, String> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            let arg = arg.as_ref();
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        let name = args
            .first()
            .map(|name| String::from_utf8_lossy(name.as_ref()).into_owned())
            .unwrap_or_default();
        self.stream
            .get_mut()
            .write_all(&request)
            .map_err(|e| format!("sending {name}: {e}"))?;
        read_reply(&mut self.stream, 0).map_err(|e| format!("reading the reply to {name}: {e}"))
    }

    /// Like [`command`](Self::command), but an error reply becomes `Err`.
    pub(crate) fn ok_command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, String> {
        match self.command(args)? {
            Reply::Error(message) => Err(format!("{} answered -{message}", shown(args))),
            reply => Ok(reply),
        }
    }

    /// Like [`ok_command`](Self::ok_command), for commands whose answer is
    /// text: a bulk or simple string.
    pub(crate) fn text_command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<String, String> {
        match self.ok_command(args)? {
            Reply::Bulk(Some(body)) => Ok(String::from_utf8_lossy(&body).into_owned()),
            Reply::Simple(text) => Ok(text),
            other => Err(format!("{} answered {other:?}", shown(args))),
        }
    }

    /// Logs in with `AUTH [user] password`.
    pub(crate) fn auth(&mut self, user: Option<&str>, password: &str) -> Result<(), String> {
        let reply = match user {
            Some(user) => self.command(&["AUTH", user, password])?,
            None => self.command(&["AUTH", password])?,
        };
        match reply {
            Reply::Simple(ok) if ok == "OK" => Ok(()),
            other => Err(format!("AUTH answered {other:?}")),
        }
    }
}

/// A command as a line of text for error messages, with at most a few arguments.
fn shown<A: AsRef<[u8]>>(args: &[A]) -> String {
    const SHOWN: usize = 6;
    let mut words: Vec<String> = args
        .iter()
        .take(SHOWN)
        .map(|arg| String::from_utf8_lossy(arg.as_ref()).into_owned())
        .collect();
    if args.len() > SHOWN {
        words.push(format!("... ({} arguments)", args.len()));
    }
    words.join(" ")
}

fn read_reply(reader: &mut impl BufRead, depth: usize) -> Result<Reply, String> {
    if depth > MAX_DEPTH {
        return Err("reply nested too deeply".to_owned());
    }
    let line = read_line(reader)?;
    let bad = || format!("unexpected reply line {line:?}");
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(rest.parse().map_err(|_| bad())?),
        "$" => match parse_len(rest, MAX_BULK_LEN).ok_or_else(bad)? {
            None => Reply::Bulk(None),
            Some(len) => {
                let mut body = vec![0; len + 2];
                reader.read_exact(&mut body).map_err(|e| e.to_string())?;
                body.truncate(len);
                Reply::Bulk(Some(body))
            }
        },
        "*" => match parse_len(rest, MAX_ARRAY_LEN).ok_or_else(bad)? {
            None => Reply::Array(None),
            Some(len) => Reply::Array(Some(
                (0..len)
                    .map(|_| read_reply(reader, depth + 1))
                    .collect::<Result<_, _>>()?,
            )),
        },
        _ => return Err(bad()),
    })
}

/// `-1` is the null length (`Some(None)`); anything else must be in `0..=max`.
fn parse_len(text: &str, max: usize) -> Option<Option<usize>> {
    if text == "-1" {
        return Some(None);
    }
    text.parse::<usize>()
        .ok()
        .filter(|&len| len <= max)
        .map(Some)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, String> {
        read_reply(&mut BufReader::new(bytes), 0)
    }

    #[test]
    fn parses_every_kind_of_reply() {
        assert_eq!(parse(b"+OK\r\n"), Ok(Reply::Simple("OK".to_owned())));
        assert_eq!(parse(b"-ERR no\r\n"), Ok(Reply::Error("ERR no".to_owned())));
        assert_eq!(parse(b":-3\r\n"), Ok(Reply::Integer(-3)));
        assert_eq!(parse(b"$-1\r\n"), Ok(Reply::Bulk(None)));
        assert_eq!(
            parse(b"$2\r\nhi\r\n"),
            Ok(Reply::Bulk(Some(b"hi".to_vec())))
        );
        assert_eq!(
            parse(b"*2\r\n:1\r\n*0\r\n"),
            Ok(Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Array(Some(vec![]))
            ])))
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for input in [
            &b""[..],
            b"\r\n",
            b"?x\r\n",
            b":x\r\n",
            b"$99999999999\r\n",
            b"$5\r\nab",
            b"*-2\r\n",
            b"*1\r\n",
        ] {
            assert!(parse(input).is_err(), "{input:?}");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }
}
