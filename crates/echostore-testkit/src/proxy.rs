//! A TCP forwarder between a store and its real Valkey that can hold the store's requests: a
//! network that delays one process's writes while another's land. Nothing is answered by the
//! proxy itself; every byte goes to the real server. A connection that turned on `CLIENT
//! TRACKING` (a store's coherence connection) is never held by [`Proxy::hold`]: only the data
//! connection is delayed, while pushes and health checks pass. [`Proxy::hold_pushes`] holds the
//! other way: what Valkey sends on the coherence connection (a push that is late); and
//! [`Proxy::hold_replies`] what it sends on the data connection (a write that has landed, whose
//! reply is late).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwards every connection made to it to one Valkey; requests pass only while open.
pub struct Proxy {
    port: u16,
    open: watch::Sender<bool>,
    /// Whether what Valkey sends on coherence connections passes.
    pushes: watch::Sender<bool>,
    /// Whether what Valkey sends on data connections passes.
    replies: watch::Sender<bool>,
    /// Requests (reads of the client's socket) waiting at the gate now.
    waiting: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// A proxy in front of the Valkey at `url` (`redis://host:port`), open.
    pub async fn start(url: &str) -> Proxy {
        let upstream = url
            .strip_prefix("redis://")
            .expect("a redis:// url")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (open, _) = watch::channel(true);
        let (pushes, _) = watch::channel(true);
        let (replies, _) = watch::channel(true);
        let gate = open.clone();
        let push_gate = pushes.clone();
        let reply_gate = replies.clone();
        let waiting = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&waiting);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.expect("upstream");
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let mut gate = gate.subscribe();
                let mut push_gate = push_gate.subscribe();
                let mut reply_gate = reply_gate.subscribe();
                let counted = Arc::clone(&counted);
                let tracking = Arc::new(AtomicBool::new(false));
                let tracked = Arc::clone(&tracking);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = match from_client.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if buf[..n].windows(8).any(|w| w == b"TRACKING") {
                            tracking.store(true, Ordering::SeqCst);
                        }
                        if tracking.load(Ordering::SeqCst) {
                            if to_server.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                            continue;
                        }
                        // Bytes read while held wait here until the proxy opens.
                        counted.fetch_add(1, Ordering::SeqCst);
                        let opened = gate.wait_for(|open| *open).await.is_ok();
                        counted.fetch_sub(1, Ordering::SeqCst);
                        if !opened {
                            return;
                        }
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = match from_server.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let passes = if tracked.load(Ordering::SeqCst) {
                            push_gate.wait_for(|open| *open).await.is_ok()
                        } else {
                            reply_gate.wait_for(|open| *open).await.is_ok()
                        };
                        if !passes {
                            return;
                        }
                        if to_client.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Proxy {
            port,
            open,
            pushes,
            replies,
            waiting,
            accept,
        }
    }

    /// The url a store uses to reach Valkey through this proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Requests sent from now on wait at the proxy.
    pub fn hold(&self) {
        self.open.send_replace(false);
    }

    /// Requests waiting at the proxy now (each a read of a client's socket: one or more
    /// commands).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Held and later requests go through.
    pub fn release(&self) {
        self.open.send_replace(true);
    }

    /// What Valkey sends on coherence connections from now on (pushes, health replies) waits at
    /// the proxy.
    pub fn hold_pushes(&self) {
        self.pushes.send_replace(false);
    }

    /// Held and later pushes go through.
    pub fn release_pushes(&self) {
        self.pushes.send_replace(true);
    }

    /// What Valkey sends on data connections from now on (the replies to a store's commands,
    /// which have run) waits at the proxy.
    pub fn hold_replies(&self) {
        self.replies.send_replace(false);
    }

    /// Held and later replies go through.
    pub fn release_replies(&self) {
        self.replies.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
