//! What `inspect` and `purge` share: the one id they point at (`--namespace`, table, id), checked
//! the way the library checks it, the two Valkey key names the library builds from it, and the
//! Valkey they talk to (`--valkey`, default [`DEFAULT_VALKEY`]).
//!
//! The names are the library's ([`echostore::protocol::key_names`]): the value at
//! `[<namespace>:]<table>:{<id>}` and the regeneration lock at `[<namespace>:]lock:<table>:{<id>}`.
//! The braces are the Valkey Cluster hash tag, so both keys live in one slot and one command or
//! script may touch both.

use clap::Args;
use echostore::MAX_ID_BYTES;
use echostore::protocol::{key_names, schema_key_names, schemas_key};

use crate::CliResult;
use crate::valkey::Target;

/// The Valkey `inspect` and `purge` talk to without `--valkey`: a local one on the default port.
/// (Unlike the readouts, they never start an embedded one: there would be nothing in it.)
pub(crate) const DEFAULT_VALKEY: &str = "redis://127.0.0.1:6379";

/// The id an operator command points at, and how to print the answer.
#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    /// The table, as given to `Store::table` (`[A-Za-z0-9_.-]{1,64}`).
    #[arg(value_parser = parse_name)]
    pub(crate) table: String,

    /// The id as the library renders it: integers in decimal, strings as they are, UUIDs
    /// hyphenated.
    pub(crate) id: String,

    /// The store's namespace (`StoreBuilder::namespace`), if it has one: keys become
    /// `<namespace>:<key>`.
    #[arg(long, value_parser = parse_name)]
    pub(crate) namespace: Option<String>,

    /// Print one JSON object instead of the readout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The two Valkey keys of one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyNames {
    /// `[<namespace>:]<table>:{<id>}`
    pub(crate) value: String,
    /// `[<namespace>:]lock:<table>:{<id>}`
    pub(crate) lock: String,
}

impl KeyArgs {
    /// The value and lock keys of this id, as the library builds them
    /// ([`echostore::protocol::key_names`]), or an error for an id longer than the library takes.
    pub(crate) fn names(&self) -> CliResult<KeyNames> {
        if self.id.len() > MAX_ID_BYTES {
            return Err(format!(
                "the id is {} bytes; the library refuses ids over {MAX_ID_BYTES} bytes, so no such key exists",
                self.id.len()
            )
            .into());
        }
        let names = key_names(self.namespace.as_deref(), &self.table, self.id.as_bytes())
            .map_err(|e| e.to_string())?;
        // The id is a command-line string and the rest is checked ASCII: the names are UTF-8.
        let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
        Ok(KeyNames {
            value: text(names.value),
            lock: text(names.lock),
        })
    }
}

impl KeyArgs {
    /// The id's value and lock names in every schema n ≥ 1 of the table (`.schema(n)`) that its
    /// live schemas on Valkey list ([`echostore::protocol::schemas_key`]), for `purge` to reach
    /// every schema's copy as the library's writes do. None when no such schema runs.
    pub(crate) async fn schema_names(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> CliResult<Vec<KeyNames>> {
        let (namespace, table) = (self.namespace.as_deref(), self.table.as_str());
        let key = schemas_key(namespace, table).map_err(|e| e.to_string())?;
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query_async(conn)
            .await
            .map_err(|e| format!("reading the table's live schemas: {e}"))?;
        let live: std::collections::BTreeSet<(u32, &str)> = members
            .iter()
            .filter_map(|member| {
                let mut parts = member.splitn(3, ':');
                let schema: u32 = parts.next()?.parse().ok()?;
                Some((schema, parts.next()?))
            })
            .filter(|(schema, _)| *schema != 0)
            .collect();
        let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
        live.into_iter()
            .map(|(schema, generation)| {
                let names =
                    schema_key_names(namespace, table, self.id.as_bytes(), schema, generation)
                        .map_err(|e| e.to_string())?;
                Ok(KeyNames {
                    value: text(names.value),
                    lock: text(names.lock),
                })
            })
            .collect()
    }
}

/// Opens the Valkey at `url` (or [`DEFAULT_VALKEY`]), checked with a PING: an unreachable one is
/// an error that names it.
pub(crate) async fn open(url: Option<&str>) -> CliResult<Target> {
    Target::open(Some(url.unwrap_or(DEFAULT_VALKEY))).await
}

/// Checks a table or namespace name against the library's `[A-Za-z0-9_.-]{1,64}`.
pub(crate) fn parse_name(name: &str) -> Result<String, String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(name.to_owned())
    } else {
        Err("names are 1 to 64 characters from [A-Za-z0-9_.-], as the library requires".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(namespace: Option<&str>, table: &str, id: &str) -> KeyArgs {
        KeyArgs {
            table: table.to_owned(),
            id: id.to_owned(),
            namespace: namespace.map(str::to_owned),
            json: false,
        }
    }

    /// The names are the library's, with and without a namespace, braces in ids included.
    #[test]
    fn names_follow_the_library() {
        let plain = args(None, "set", "EMS0ODMggk1d5N")
            .names()
            .expect("short id");
        assert_eq!(plain.value, "set:{EMS0ODMggk1d5N}");
        assert_eq!(plain.lock, "lock:set:{EMS0ODMggk1d5N}");
        let spaced = args(Some("app"), "users", "1").names().expect("short id");
        assert_eq!(spaced.value, "app:users:{1}");
        assert_eq!(spaced.lock, "app:lock:users:{1}");
        let braced = args(None, "t", "a}b{c").names().expect("short id");
        assert_eq!(braced.value, "t:{a}b{c}");
        let escaped = args(None, "t", "}x").names().expect("short id");
        assert_eq!(
            escaped.value, r"t:{\}x}",
            "an id that would leave the hash tag empty"
        );
    }

    /// Only the library's alphabet and lengths pass; ids over its limit are refused.
    #[test]
    fn names_and_ids_are_checked() {
        for good in ["users", "a", "A-z_0.9", &"n".repeat(64)] {
            assert!(parse_name(good).is_ok(), "{good}");
        }
        for bad in ["", "has space", "brace{", "colon:", "ünï", &"n".repeat(65)] {
            assert!(parse_name(bad).is_err(), "{bad}");
        }
        let long = "x".repeat(MAX_ID_BYTES + 1);
        assert!(args(None, "t", &long).names().is_err());
    }
}
