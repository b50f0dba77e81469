//! Figures read from one Valkey server's `INFO` text, for the benches and tools that report what
//! the server itself counted (commands processed, tracked prefixes, CPU): one field reader instead
//! of a `lines().find_map(strip_prefix)` in each.

use redis::aio::ConnectionLike;

/// `INFO <section>` of one server, as its text.
pub async fn read(conn: &mut impl ConnectionLike, section: &str) -> redis::RedisResult<String> {
    redis::cmd("INFO").arg(section).query_async(conn).await
}

/// The value of the `name:value` line of an `INFO` text, trimmed; `None` if there is none.
pub fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A numeric field of an `INFO` text; `None` if there is none or it is no number.
pub fn number<T: std::str::FromStr>(info: &str, name: &str) -> Option<T> {
    field(info, name)?.parse().ok()
}

/// The server's `total_commands_processed` (`INFO stats`); panics without it, as a bench should.
pub async fn commands_processed(conn: &mut impl ConnectionLike) -> u64 {
    let info = read(conn, "stats").await.expect("INFO stats");
    number(&info, "total_commands_processed").expect("total_commands_processed in INFO stats")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field is found by its whole name only, and its value is trimmed of the line's `\r`.
    #[test]
    fn fields_are_read_by_their_whole_name() {
        let info = "# Stats\r\ntotal_commands_processed_x:9\r\ntotal_commands_processed:42\r\n";
        assert_eq!(field(info, "total_commands_processed"), Some("42"));
        assert_eq!(number::<u64>(info, "total_commands_processed"), Some(42));
        assert_eq!(field(info, "used_cpu_sys"), None);
        assert_eq!(number::<u64>("a:b\r\n", "a"), None);
    }
}
