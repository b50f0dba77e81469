//! `echostore inspect <table> <id>`: what Valkey holds for one id, as an operator needs to see it.
//!
//! One read-only Lua script reads both of the id's keys at one instant (they share a hash tag, so
//! the script touches one slot): each key's Valkey type, length, first bytes and `PTTL`. Of the
//! value it shows the envelope's header (read with the library's own decoder,
//! [`echostore::protocol::decode_header`]: format, `fresh_until`, `written_at`, the load time once
//! recorded), its size and the payload's size — the payload itself is the table's type,
//! which the command does not know. Of the lock: whether it is held, its token and its `PTTL`.
//!
//! Bytes that are not an envelope (another Valkey type, a foreign format byte, too short) are
//! *information*, reported as undecodable with their first bytes, and the exit code is 0: the
//! library treats them as a counted miss and overwrites them at the next fill. A missing value or
//! lock is information too. Only a bad name or an unreachable Valkey is an error.

use echostore::protocol::{Header, LONGEST_HEADER, decode_header};
use serde::Serialize;

use crate::keyspace::{self, KeyArgs, KeyNames};
use crate::{CliResult, Outcome, output};

mod print;

/// How many bytes of a lock's value are read: a token is 32 hex digits; anything longer is not
/// one of EchoStore's.
const LOCK_BYTES: usize = 256;

/// A written_at this far ahead of the inspecting clock is one the library's versioned writes
/// take for garbage (and replace).
const SKEW_MS: u64 = echostore::protocol::MAX_CLOCK_SKEW_MS;

/// Both keys read at one instant: `{type, length, first bytes, PTTL}` for the value, then the lock.
/// Wrong types are reported, not errors: only a string has a length and bytes.
const SNAPSHOT_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1], ARGV[2] = last byte to read of each
local function look(key, last)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then return {kind, -1, false, -2} end
  local len, head = -1, false
  if kind == 'string' then
    len = redis.call('STRLEN', key)
    head = redis.call('GETRANGE', key, 0, last)
  end
  return {kind, len, head, redis.call('PTTL', key)}
end
return {look(KEYS[1], ARGV[1]), look(KEYS[2], ARGV[2])}
"#;

/// One key as the script saw it: type, length (-1 unless a string), first bytes, `PTTL`.
type Look = (String, i64, Option<Vec<u8>>, i64);

/// Flags of `echostore inspect`.
pub(crate) type InspectArgs = KeyArgs;

/// What `inspect` prints with `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct InspectReport {
    /// `"inspect"`.
    command: &'static str,
    /// The Valkey, password hidden.
    valkey: String,
    namespace: Option<String>,
    table: String,
    id: String,
    /// The inspecting machine's clock, unix ms: what "fresh for" and "stale for" are measured by.
    now_ms: u64,
    value: ValueReport,
    lock: LockReport,
}

/// The value key.
#[derive(Debug, Serialize)]
pub(crate) struct ValueReport {
    key: String,
    exists: bool,
    /// Valkey's `TYPE` (`string` for an EchoStore value); null when the key does not exist.
    valkey_type: Option<String>,
    /// The whole value, header included (strings only).
    size_bytes: Option<u64>,
    /// The key's remaining physical life (`PTTL`, ms); null without a key or without an expiry.
    pttl_ms: Option<u64>,
    /// The key exists and never expires (EchoStore always sets one: someone else wrote it).
    persistent: bool,
    /// The key holds an envelope header this version reads.
    decodable: bool,
    /// Why it does not, when it exists and does not.
    undecodable: Option<String>,
    /// The first bytes in hex, when undecodable.
    first_bytes_hex: Option<String>,
    envelope: Option<EnvelopeReport>,
}

/// The envelope's header, and the payload's size.
#[derive(Debug, Serialize)]
pub(crate) struct EnvelopeReport {
    /// 1, or 2 once the load time is recorded.
    format: u8,
    header_bytes: u64,
    /// Bytes after the header: the postcard-encoded value.
    payload_bytes: u64,
    fresh_until_ms: u64,
    written_at_ms: u64,
    /// `now < fresh_until`.
    fresh: bool,
    /// While fresh: how much of the logical life is left, ms.
    fresh_for_ms: Option<u64>,
    /// Once stale: how long ago the logical life ended, ms.
    stale_for_ms: Option<u64>,
    /// `now − written_at`, ms (negative when the writer's clock is ahead).
    age_ms: i64,
    /// The load's duration, ms (format 2, recorded to the µs); null when not recorded.
    delta_ms: Option<f64>,
    /// The value's version from the source (format 3: a table with `.version_by`).
    version: Option<u64>,
    /// Anything odd about the header, in words.
    notes: Vec<String>,
}

/// The lock key.
#[derive(Debug, Serialize)]
pub(crate) struct LockReport {
    key: String,
    /// Any key there blocks `SET … NX`: a fill elsewhere is rebuilding (or crashed within its
    /// lock's life).
    held: bool,
    valkey_type: Option<String>,
    /// The holder's token (a string lock only).
    token: Option<String>,
    /// The lock's remaining life (`PTTL`, ms); null without a lock or without an expiry.
    pttl_ms: Option<u64>,
    /// Held and never expiring: no EchoStore lock is; it blocks every fill of the id until deleted.
    persistent: bool,
}

/// Reads both keys and prints what they hold.
pub(crate) async fn run(url: Option<&str>, args: &InspectArgs) -> CliResult<Outcome> {
    let names = args.names()?;
    let target = keyspace::open(url).await?;
    let mut conn = target.connect().await?;
    let (value, lock): (Look, Look) = redis::Script::new(SNAPSHOT_SCRIPT)
        .key(&names.value)
        .key(&names.lock)
        .arg(LONGEST_HEADER - 1)
        .arg(LOCK_BYTES - 1)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| format!("reading {} and {}: {e}", names.value, names.lock))?;
    let now_ms = unix_ms();
    let report = InspectReport {
        command: "inspect",
        valkey: target.shown_url(),
        namespace: args.namespace.clone(),
        table: args.table.clone(),
        id: args.id.clone(),
        now_ms,
        value: value_report(&names, value, now_ms),
        lock: lock_report(&names, lock),
    };
    if args.json {
        output::print_json(&report)?;
    } else {
        print::human(&report);
    }
    Ok(Outcome::Held)
}

fn value_report(names: &KeyNames, (kind, len, head, pttl): Look, now_ms: u64) -> ValueReport {
    let exists = kind != "none";
    let mut report = ValueReport {
        key: names.value.clone(),
        exists,
        valkey_type: exists.then(|| kind.clone()),
        size_bytes: u64::try_from(len).ok(),
        pttl_ms: u64::try_from(pttl).ok(),
        persistent: exists && pttl == -1,
        decodable: false,
        undecodable: None,
        first_bytes_hex: None,
        envelope: None,
    };
    if !exists {
        return report;
    }
    let Some(head) = head else {
        report.undecodable = Some(format!(
            "the key holds a {kind}, not a string: not an EchoStore value (the library reads it as a miss)"
        ));
        return report;
    };
    match decode_header(&head) {
        Ok(h) => {
            report.decodable = true;
            report.envelope = Some(envelope_report(h, len.max(0) as u64, now_ms));
        }
        Err(why) => {
            report.undecodable = Some(why.to_string());
            report.first_bytes_hex = Some(hex(&head));
        }
    }
    report
}

fn envelope_report(h: Header, size: u64, now_ms: u64) -> EnvelopeReport {
    let fresh = now_ms < h.fresh_until_ms;
    let mut notes = Vec::new();
    if h.fresh_until_ms < h.written_at_ms {
        notes.push("fresh_until is before written_at: not a header EchoStore writes".to_owned());
    }
    if h.written_at_ms > now_ms.saturating_add(SKEW_MS) {
        notes.push(format!(
            "written_at is more than {} s ahead of this clock: the library's writes take it for \
             garbage and replace it",
            SKEW_MS / 1000
        ));
    }
    EnvelopeReport {
        format: h.format,
        header_bytes: h.len as u64,
        payload_bytes: size.saturating_sub(h.len as u64),
        fresh_until_ms: h.fresh_until_ms,
        written_at_ms: h.written_at_ms,
        fresh,
        fresh_for_ms: fresh.then(|| h.fresh_until_ms - now_ms),
        stale_for_ms: (!fresh).then(|| now_ms - h.fresh_until_ms),
        age_ms: (i128::from(now_ms) - i128::from(h.written_at_ms))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
        delta_ms: h.delta.map(|d| d.as_secs_f64() * 1e3),
        version: h.version,
        notes,
    }
}

/// The first bytes as hex, `68 65 6c 6c 6f`, for a report of bytes that did not decode.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn lock_report(names: &KeyNames, (kind, _len, head, pttl): Look) -> LockReport {
    let held = kind != "none";
    LockReport {
        key: names.lock.clone(),
        held,
        valkey_type: held.then_some(kind),
        token: head.map(|t| String::from_utf8_lossy(&t).into_owned()),
        pttl_ms: u64::try_from(pttl).ok(),
        persistent: held && pttl == -1,
    }
}

/// Wall-clock now in unix milliseconds (envelopes are stamped with writers' wall clocks).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> KeyNames {
        KeyNames {
            value: "t:{1}".into(),
            lock: "lock:t:{1}".into(),
        }
    }

    fn envelope(fresh_until: u64, written_at: u64) -> Vec<u8> {
        let mut out = vec![1u8];
        out.extend_from_slice(&fresh_until.to_le_bytes());
        out.extend_from_slice(&written_at.to_le_bytes());
        out
    }

    /// A fresh value: fresh for the rest of its life, its payload the bytes after the header.
    #[test]
    fn a_fresh_value_reads_fresh() {
        let look = (
            "string".to_owned(),
            40,
            Some(envelope(15_000, 1_000)),
            60_000,
        );
        let r = value_report(&names(), look, 2_700);
        let e = r.envelope.expect("decoded");
        assert!(r.decodable && e.fresh);
        assert_eq!((e.fresh_for_ms, e.stale_for_ms), (Some(12_300), None));
        assert_eq!((e.payload_bytes, e.age_ms), (23, 1_700));
        assert_eq!(r.pttl_ms, Some(60_000));
        assert!(e.notes.is_empty());
    }

    /// A stale value and a header from the future are told as such.
    #[test]
    fn stale_and_odd_headers_are_told() {
        let stale = value_report(
            &names(),
            ("string".into(), 17, Some(envelope(1_000, 500)), 10),
            5_100,
        );
        let e = stale.envelope.expect("decoded");
        assert_eq!((e.fresh, e.stale_for_ms), (false, Some(4_100)));
        let future = value_report(
            &names(),
            ("string".into(), 17, Some(envelope(1, 10_000_000)), -1),
            1,
        );
        assert!(future.persistent);
        assert_eq!(future.envelope.expect("decoded").notes.len(), 2);
    }

    /// Another type, garbage and no key at all are reports, not errors.
    #[test]
    fn undecodable_and_missing_are_reports() {
        let list = value_report(&names(), ("list".into(), -1, None, -1), 1);
        assert!(list.exists && !list.decodable);
        assert!(list.undecodable.expect("why").contains("a list"));
        let garbage = value_report(
            &names(),
            ("string".into(), 5, Some(b"hello".to_vec()), 9),
            1,
        );
        assert_eq!(garbage.first_bytes_hex.as_deref(), Some("68 65 6c 6c 6f"));
        let none = value_report(&names(), ("none".into(), -1, None, -2), 1);
        assert!(!none.exists && none.undecodable.is_none() && none.pttl_ms.is_none());
        let lock = lock_report(&names(), ("none".into(), -1, None, -2));
        assert!(!lock.held && lock.token.is_none());
    }
}
