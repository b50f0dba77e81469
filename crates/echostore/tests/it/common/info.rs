//! Figures read from Valkey's `INFO`: what the server itself counts, for tests that must not
//! take the library's word for it. On a cluster `INFO` answers one text per node; the counts here
//! are summed over them.

/// The texts of `INFO <section>`: one for a server, one per node for a cluster.
async fn info_texts(conn: &mut super::RawConn, section: &str) -> Vec<String> {
    let reply: redis::Value = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .expect("INFO");
    let mut texts = Vec::new();
    collect_texts(&reply, &mut texts);
    texts
}

fn collect_texts(value: &redis::Value, into: &mut Vec<String>) {
    match value {
        redis::Value::BulkString(bytes) => into.push(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::VerbatimString { text, .. } | redis::Value::SimpleString(text) => {
            into.push(text.clone())
        }
        redis::Value::Map(pairs) => pairs.iter().for_each(|(_, v)| collect_texts(v, into)),
        redis::Value::Array(items) => items.iter().for_each(|v| collect_texts(v, into)),
        _ => {}
    }
}

/// Every value of the `field` line of `INFO <section>` (`blocked_clients`,
/// `tracking_total_prefixes`, `cmdstat_set`…): what follows its `:`, one per node that has it.
async fn info_values(conn: &mut super::RawConn, section: &str, field: &str) -> Vec<String> {
    let prefix = format!("{field}:");
    info_texts(conn, section)
        .await
        .iter()
        .flat_map(|text| text.lines())
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|value| value.trim().to_owned())
        .collect()
}

/// A numeric `INFO` field, summed over the nodes; panics if no node has it.
pub async fn info_count(conn: &mut super::RawConn, section: &str, field: &str) -> u64 {
    let values = info_values(conn, section, field).await;
    assert!(!values.is_empty(), "{field} in INFO {section}");
    values
        .iter()
        .map(|v| {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("{field} is not a count: {v}"))
        })
        .sum()
}

/// How many times the servers ran `command`, scripts' inner calls included (`INFO
/// commandstats`: `cmdstat_<command>:calls=N,…`), since the last `CONFIG RESETSTAT`; 0 if never.
pub async fn command_calls(conn: &mut super::RawConn, command: &str) -> u64 {
    info_values(conn, "commandstats", &format!("cmdstat_{command}"))
        .await
        .iter()
        .filter_map(|stats| {
            stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
