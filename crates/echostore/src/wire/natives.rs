//! Which of Valkey's native lock commands the server has: `DELIFEQ key token` (Valkey 9.0), the
//! seed's compare-and-delete as one command, and `SET key token IFEQ token PX ms` (Valkey 8.1),
//! the lease's token-checked extension. Where the server has them, the release and the lease
//! use them; elsewhere (redis-server, older Valkey, a proxy that refuses them) the Lua scripts of
//! [`crate::valkey::lock`], which do the same thing atomically.
//!
//! Found once per store, from `INFO server` when the store connects; a native command that a
//! server refuses later (a failover to an older replica) switches that command back to Lua for
//! good, and the call is made again with the script.

use std::sync::atomic::{AtomicBool, Ordering};

/// The first Valkey version with `DELIFEQ`.
pub const DELIFEQ_SINCE: (u32, u32) = (9, 0);
/// The first Valkey version with `SET … IFEQ`.
pub const SET_IFEQ_SINCE: (u32, u32) = (8, 1);

/// The native commands a server has, by its `INFO server` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NativeCommands {
    /// `DELIFEQ key value`: delete only if the value matches.
    pub delifeq: bool,
    /// `SET key value IFEQ old …`: set only if the current value matches.
    pub set_ifeq: bool,
}

impl NativeCommands {
    /// What `INFO server`'s answer says: Valkey reports `valkey_version:<x.y.z>` (a redis-server
    /// reports none, and has neither command).
    pub fn from_info(info: &str) -> NativeCommands {
        let version = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("valkey_version:"))
            .and_then(parse_version);
        match version {
            Some(v) => NativeCommands {
                delifeq: v >= DELIFEQ_SINCE,
                set_ifeq: v >= SET_IFEQ_SINCE,
            },
            None => NativeCommands::default(),
        }
    }
}

/// What every server of an `INFO server` answer has: one text from a server, a map of node to
/// text from a cluster (a command is used only if every node has it).
pub(crate) fn of_every_node(answer: &redis::Value) -> NativeCommands {
    let mut found: Option<NativeCommands> = None;
    let mut each = |text: &str| {
        let this = NativeCommands::from_info(text);
        let so_far = found.unwrap_or(this);
        found = Some(NativeCommands {
            delifeq: so_far.delifeq && this.delifeq,
            set_ifeq: so_far.set_ifeq && this.set_ifeq,
        });
    };
    visit_texts(answer, &mut each);
    found.unwrap_or_default()
}

fn visit_texts(value: &redis::Value, each: &mut impl FnMut(&str)) {
    match value {
        redis::Value::BulkString(bytes) => each(&String::from_utf8_lossy(bytes)),
        redis::Value::SimpleString(text) | redis::Value::VerbatimString { text, .. } => each(text),
        redis::Value::Map(pairs) => pairs.iter().for_each(|(_, v)| visit_texts(v, each)),
        redis::Value::Array(items) => items.iter().for_each(|v| visit_texts(v, each)),
        _ => {}
    }
}

/// `9.1.2` as `(9, 1)`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// What a store uses now (all Lua until the server is known).
#[derive(Debug, Default)]
pub(crate) struct Natives {
    delifeq: AtomicBool,
    set_ifeq: AtomicBool,
}

impl Natives {
    /// Uses what the server has.
    pub(crate) fn set(&self, found: NativeCommands) {
        self.delifeq.store(found.delifeq, Ordering::Relaxed);
        self.set_ifeq.store(found.set_ifeq, Ordering::Relaxed);
    }

    pub(crate) fn delifeq(&self) -> bool {
        self.delifeq.load(Ordering::Relaxed)
    }

    pub(crate) fn set_ifeq(&self) -> bool {
        self.set_ifeq.load(Ordering::Relaxed)
    }

    /// The server refused `DELIFEQ`: the script from now on.
    pub(crate) fn lost_delifeq(&self) {
        self.delifeq.store(false, Ordering::Relaxed);
    }

    /// The server refused `SET … IFEQ`: the script from now on.
    pub(crate) fn lost_set_ifeq(&self) {
        self.set_ifeq.store(false, Ordering::Relaxed);
    }
}

/// `true` for the error reply of a server that does not have a command or an option of it, or
/// does not let this user run it (an ACL without `+delifeq`: the script may still be allowed).
pub(crate) fn is_unsupported(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    e.code() == Some("NOPERM")
        || e.code().is_some()
            && (text.contains("unknown command")
                || text.contains("syntax error")
                || text.contains("unknown subcommand"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Valkey's version line decides; a redis-server (no `valkey_version`) has neither command.
    #[test]
    fn versions_pick_the_commands() {
        let valkey = |v: &str| format!("# Server\r\nredis_version:7.2.4\r\nvalkey_version:{v}\r\n");
        let both = NativeCommands {
            delifeq: true,
            set_ifeq: true,
        };
        assert_eq!(NativeCommands::from_info(&valkey("9.1.2")), both);
        assert_eq!(NativeCommands::from_info(&valkey("9.0.0")), both);
        assert_eq!(
            NativeCommands::from_info(&valkey("8.1.3")),
            NativeCommands {
                delifeq: false,
                set_ifeq: true
            }
        );
        assert_eq!(
            NativeCommands::from_info(&valkey("8.0.2")),
            NativeCommands::default()
        );
        assert_eq!(
            NativeCommands::from_info("# Server\r\nredis_version:7.2.4\r\n"),
            NativeCommands::default()
        );
        assert_eq!(
            NativeCommands::from_info(&valkey("garbage")),
            NativeCommands::default()
        );
        // A cluster: each node's text; a command is used only if every node has it.
        let node = |v: &str| redis::Value::BulkString(valkey(v).into_bytes());
        let nodes = |versions: &[&str]| {
            redis::Value::Map(
                versions
                    .iter()
                    .map(|v| (redis::Value::SimpleString("node".into()), node(v)))
                    .collect(),
            )
        };
        assert_eq!(of_every_node(&nodes(&["9.1.2", "9.1.2"])), both);
        assert_eq!(
            of_every_node(&nodes(&["9.1.2", "8.1.0"])),
            NativeCommands {
                delifeq: false,
                set_ifeq: true
            }
        );
        assert_eq!(of_every_node(&node("9.0.1")), both);
        assert_eq!(of_every_node(&redis::Value::Nil), NativeCommands::default());
    }
}
