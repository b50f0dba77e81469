//! The network fault of `echostore check`: a TCP forwarder between one worker and Valkey that
//! can slow that worker's traffic, then black-hole it (bytes are held, nothing is closed, as a
//! silent link does), then heal (what was held is delivered). Nothing is answered by the proxy;
//! every byte goes to the real server.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the link does to each chunk of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Passes it on at once.
    Healthy,
    /// Passes it on after this long.
    Slow(Duration),
    /// Holds it until the link is healthy or slow again.
    Silent,
}

/// Forwards every connection made to it to one Valkey, through the [`Link`] it is set to.
pub(crate) struct Proxy {
    port: u16,
    link: watch::Sender<Link>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// A healthy proxy on a free loopback port in front of `upstream` (`host:port`).
    pub(crate) async fn start(upstream: String) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (link, _) = watch::channel(Link::Healthy);
        let links = link.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (from_client, to_client) = client.into_split();
                let (from_server, to_server) = server.into_split();
                tokio::spawn(pump(from_client, to_server, links.subscribe()));
                tokio::spawn(pump(from_server, to_client, links.subscribe()));
            }
        });
        Ok(Proxy { port, link, accept })
    }

    /// The URL a worker connects to instead of Valkey's.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Sets what the link does from now on, to every connection.
    pub(crate) fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies one direction of a connection through the link.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut link: watch::Receiver<Link>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let now = *link.borrow_and_update();
        match now {
            Link::Healthy => {}
            Link::Slow(by) => tokio::time::sleep(by).await,
            Link::Silent => {
                if link.wait_for(|l| *l != Link::Silent).await.is_err() {
                    return;
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
