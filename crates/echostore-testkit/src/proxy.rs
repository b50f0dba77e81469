//! A TCP forwarder between a store and its real Valkey: the network faults of the integration
//! tests and of `echostore check`. Nothing is answered by the proxy itself; every byte goes to the
//! real server. Two kinds of fault, which compose:
//!
//! - Gates, for a test that holds one kind of traffic at a chosen moment. A connection that
//!   turned on `CLIENT TRACKING` (a store's coherence connection) is never held by
//!   [`Proxy::hold`]: only the data connection is delayed, while pushes and health checks pass.
//!   [`Proxy::hold_open_connections`] holds only the data connections open at the call (a
//!   store's data path hangs while its new tracking connection comes back).
//!   [`Proxy::hold_pushes`] holds the other way: what Valkey sends on the coherence connection (a
//!   push that is late); and [`Proxy::hold_replies`] what it sends on the data connection (a
//!   write that has landed, whose reply is late).
//! - The [`Link`], for a whole link gone bad, every connection and both directions: slow (each
//!   chunk delayed), silent (bytes held, nothing closed, as a black-holed link does) or healthy
//!   (what was held is delivered). `echostore check`'s `proxy` fault is this.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the link does to each chunk of bytes, in either direction, on every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Passes it on at once.
    Healthy,
    /// Passes it on after this long.
    Slow(Duration),
    /// Holds it until the link is healthy or slow again.
    Silent,
}

/// Forwards every connection made to it to one Valkey; requests pass only while open, and every
/// chunk through the [`Link`] it is set to.
pub struct Proxy {
    port: u16,
    gates: Gates,
    /// Requests (reads of the client's socket) waiting at the gate now.
    waiting: Arc<AtomicUsize>,
    /// Connections accepted so far: each is numbered in that order.
    accepted: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

/// What each connection's two pumps watch; clones share the senders.
#[derive(Clone)]
struct Gates {
    /// Whether requests on data connections pass.
    open: watch::Sender<bool>,
    /// Requests on data connections numbered below this wait (0: none).
    held_below: watch::Sender<u64>,
    /// Whether what Valkey sends on coherence connections passes.
    pushes: watch::Sender<bool>,
    /// Whether what Valkey sends on data connections passes.
    replies: watch::Sender<bool>,
    link: watch::Sender<Link>,
}

impl Proxy {
    /// A proxy in front of the Valkey at `url` (`redis://[user:pass@]host:port[/db]`), open and
    /// healthy; panics if it cannot listen (what a test wants).
    pub async fn start(url: &str) -> Proxy {
        Proxy::bind(url).await.expect("the proxy listens")
    }

    /// [`Proxy::start`], with its failure returned: a URL that is not `redis://`, or no free
    /// loopback port.
    pub async fn bind(url: &str) -> std::io::Result<Proxy> {
        let upstream = host_port(url)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let gates = Gates {
            open: watch::channel(true).0,
            held_below: watch::channel(0).0,
            pushes: watch::channel(true).0,
            replies: watch::channel(true).0,
            link: watch::channel(Link::Healthy).0,
        };
        let waiting = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let (shared, counted, numbers) =
            (gates.clone(), Arc::clone(&waiting), Arc::clone(&accepted));
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let number = numbers.fetch_add(1, Ordering::SeqCst);
                // Valkey down (a restart, an outage): this client's connection is dropped, as a
                // refused one would be, and the next is tried afresh.
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                // As the client and Valkey set on their own sockets: without it, Nagle's
                // algorithm holds a small chunk (a push, a reply) until the previous one is
                // acknowledged, which a delayed ACK puts off by up to 40 ms at each hop.
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (from_client, to_client) = client.into_split();
                let (from_server, to_server) = server.into_split();
                let tracking = Arc::new(AtomicBool::new(false));
                let way = Way::Requests(Arc::clone(&counted), number);
                let (gates, tracked) = (shared.clone(), Arc::clone(&tracking));
                tokio::spawn(pump(from_client, to_server, gates, tracked, way));
                tokio::spawn(pump(
                    from_server,
                    to_client,
                    shared.clone(),
                    tracking,
                    Way::Answers,
                ));
            }
        });
        Ok(Proxy {
            port,
            gates,
            waiting,
            accepted,
            accept,
        })
    }

    /// The url a store uses to reach Valkey through this proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Requests sent from now on wait at the proxy.
    pub fn hold(&self) {
        self.gates.open.send_replace(false);
    }

    /// Requests waiting at the proxy now (each a read of a client's socket: one or more
    /// commands).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Held and later requests go through (those [`Proxy::hold_open_connections`] held too).
    pub fn release(&self) {
        self.gates.open.send_replace(true);
        self.gates.held_below.send_replace(0);
    }

    /// Requests sent from now on, on the data connections open now, wait at the proxy;
    /// connections opened later pass.
    pub fn hold_open_connections(&self) {
        let opened = self.accepted.load(Ordering::SeqCst);
        self.gates.held_below.send_replace(opened);
    }

    /// What Valkey sends on coherence connections from now on (pushes, health replies) waits at
    /// the proxy.
    pub fn hold_pushes(&self) {
        self.gates.pushes.send_replace(false);
    }

    /// Held and later pushes go through.
    pub fn release_pushes(&self) {
        self.gates.pushes.send_replace(true);
    }

    /// What Valkey sends on data connections from now on (the replies to a store's commands,
    /// which have run) waits at the proxy.
    pub fn hold_replies(&self) {
        self.gates.replies.send_replace(false);
    }

    /// Held and later replies go through.
    pub fn release_replies(&self) {
        self.gates.replies.send_replace(true);
    }

    /// Sets what the link does from now on, to every connection, in both directions.
    pub fn set(&self, link: Link) {
        self.gates.link.send_replace(link);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Which way a pump copies, and what it waits at on the way.
enum Way {
    /// Client to Valkey (the connection's number): marks the connection as a coherence one when
    /// it turns on tracking; a data connection's bytes wait at the request gates, counted while
    /// they do.
    Requests(Arc<AtomicUsize>, u64),
    /// Valkey to client: the push gate on a coherence connection, the reply gate on a data one.
    Answers,
}

/// Copies one direction of a connection: each chunk through its way's gate, then the link.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    gates: Gates,
    tracking: Arc<AtomicBool>,
    way: Way,
) {
    let mut open = gates.open.subscribe();
    let mut held_below = gates.held_below.subscribe();
    let mut pushes = gates.pushes.subscribe();
    let mut replies = gates.replies.subscribe();
    let mut link = gates.link.subscribe();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let passes = match &way {
            Way::Requests(waiting, number) => {
                if buf[..n].windows(8).any(|w| w == b"TRACKING") {
                    tracking.store(true, Ordering::SeqCst);
                }
                if tracking.load(Ordering::SeqCst) {
                    true
                } else {
                    // Bytes read while held wait here until the proxy opens.
                    waiting.fetch_add(1, Ordering::SeqCst);
                    let opened = open.wait_for(|open| *open).await.is_ok()
                        && held_below.wait_for(|below| number >= below).await.is_ok();
                    waiting.fetch_sub(1, Ordering::SeqCst);
                    opened
                }
            }
            Way::Answers => match tracking.load(Ordering::SeqCst) {
                true => pushes.wait_for(|open| *open).await.is_ok(),
                false => replies.wait_for(|open| *open).await.is_ok(),
            },
        };
        if !passes || !through(&mut link).await || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Takes one chunk through the link as it is now: at once, after the slow link's delay, or once
/// a silent link speaks again. False when the proxy is gone.
async fn through(link: &mut watch::Receiver<Link>) -> bool {
    let now = *link.borrow_and_update();
    match now {
        Link::Healthy => true,
        Link::Slow(by) => {
            tokio::time::sleep(by).await;
            true
        }
        Link::Silent => link.wait_for(|l| *l != Link::Silent).await.is_ok(),
    }
}

/// `host:port` of a `redis://[user:pass@]host:port[/db]` URL: what the proxy connects to.
fn host_port(url: &str) -> std::io::Result<String> {
    let rest = url.strip_prefix("redis://").ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the proxy needs a redis:// URL, not {url}"),
        )
    })?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
    Ok(rest.split('/').next().unwrap_or(rest).to_owned())
}

#[cfg(test)]
mod tests {
    use super::host_port;

    /// Credentials and the database are not part of where the proxy connects.
    #[test]
    fn upstream_is_host_and_port() {
        for (url, upstream) in [
            ("redis://127.0.0.1:6379", "127.0.0.1:6379"),
            ("redis://127.0.0.1:6379/", "127.0.0.1:6379"),
            ("redis://user:pass@h:7000/3", "h:7000"),
        ] {
            assert_eq!(host_port(url).expect("a redis url"), upstream);
        }
        assert!(host_port("rediss://h:1").is_err());
    }
}
