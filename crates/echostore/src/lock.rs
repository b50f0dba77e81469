//! The regeneration lock, and every Lua script EchoStore runs: one fill per key per expiry across
//! every process sharing the Valkey.
//!
//! A fill that misses contends with `SET lock:<table>:{<id>} <token> NX PX <lock_ttl>`, where the
//! token is 128 random bits unique to this attempt. The acquire runs in one script together with a
//! second read of the value key, so a winner sees a value that the previous holder wrote an instant
//! ago and does not read the source again. While the winner loads, it extends its lock (a
//! token-checked `PEXPIRE`, the *lease*), so a load of any length keeps it. The winner writes with
//! a *fenced* write (the value is set only while the lock still holds its token) and then releases
//! with the token-checked compare-and-delete of the seed (where the server has them, the release
//! is `DELIFEQ` and the lease `SET … IFEQ … PX`: [`crate::natives`]). A lock is never removed by a plain `DEL`
//! on these paths: only `invalidate` and `put`, which mean to cancel fills in flight, drop it.
//!
//! **The last write to land wins, and Valkey's clock stamps it.** The fenced write and `put` set
//! the envelope's `written_at` from the server's own `TIME` inside the script, so which of two
//! writes wins depends on the order they reach Valkey, never on the writers' wall clocks (a
//! writer whose clock runs ahead cannot make others' writes no-ops). A fill cannot land over a
//! `put` that reached Valkey after the fill took its lock: the put drops the lock, and the fenced
//! write checks it. A stored `written_at` ahead of the server's clock (planted bytes, or a clock
//! stepped back) stands against a write for at most [`MAX_CLOCK_SKEW_MS`]; further ahead it is
//! taken for garbage and replaced, so planted bytes cannot block writes for long.
//!
//! Values are read with `GETRANGE <key> 0 <max_value_bytes>`, so a value over the table's limit is
//! never pulled into memory whole: at most one byte more than the limit comes back.

use std::sync::LazyLock;

use crate::error::Result;
use crate::key::KeyNames;
use crate::l2::L2;
use crate::natives::Natives;

/// How far ahead of the server's clock a stored `written_at` may be and still count as newer.
pub const MAX_CLOCK_SKEW_MS: u64 = 300_000;

/// The Lua functions both versioned writes use: `stamped(new, now)` is the envelope `new` with
/// its `written_at` (bytes 10..17, little-endian) set to the server's own clock (`TIME`), and
/// `newer(old, now)` is `true` when the stored envelope `old` (format byte 1 or 2) was stamped
/// after `now` but no more than the skew allowance after it.
macro_rules! newer_than_lua {
    () => {
        r#"
local function le(n)
  local bytes = {}
  for i = 1, 8 do bytes[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(bytes)
end
local function written_at(v)
  if type(v) ~= 'string' or #v < 17 then return nil end
  local format = string.byte(v, 1)
  if format ~= 1 and format ~= 2 then return nil end
  local n = 0
  for i = 17, 10, -1 do n = n * 256 + string.byte(v, i) end
  return n
end
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function stamped(v, now)
  return string.sub(v, 1, 9) .. le(now) .. string.sub(v, 18)
end
local function newer(old, now)
  local a = written_at(old)
  return a ~= nil and a > now and a <= now + 300000
end
"#
    };
}

/// `SET lock NX PX` and a bounded read of the value, in one round trip. Returns `{won, value}`.
pub const ACQUIRE_OR_READ_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token, ARGV[2] = lock ttl ms, ARGV[3] = max bytes
local won = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2])
local value = redis.pcall('GETRANGE', KEYS[1], 0, ARGV[3])
if type(value) == 'table' and value.err then value = false end -- another type: a miss
if won then return {1, value} end
return {0, value}
"#;

/// A loser's look: a bounded read of the value and whether the lock exists. Returns `{value, locked}`.
pub const POLL_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = max bytes
local value = redis.pcall('GETRANGE', KEYS[1], 0, ARGV[1])
if type(value) == 'table' and value.err then value = false end -- another type: no value yet
return {value, redis.call('EXISTS', KEYS[2])}
"#;

/// The lease: push the lock's expiry out while it still holds this attempt's token. Returns 1 or 0.
pub const EXTEND_SCRIPT: &str = r#"
-- KEYS[1] = lock key; ARGV[1] = token, ARGV[2] = lock ttl ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// Set the value only while the lock holds this attempt's token and nothing newer is stored.
/// Returns 1 (written), 0 (fenced out: not our lock) or -1 (a newer value is stored).
pub const FENCED_WRITE_SCRIPT: &str = concat!(
    newer_than_lua!(),
    r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token, ARGV[2] = envelope, ARGV[3] = px ms
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local now = server_ms()
if newer(redis.pcall('GETRANGE', KEYS[1], 0, 16), now) then return -1 end
redis.call('SET', KEYS[1], stamped(ARGV[2], now), 'PX', ARGV[3])
return 1
"#
);

/// Write-through: set the value unless a newer one is stored, and drop the lock of any fill in
/// flight so that its fenced write cannot land over this value. Returns 1 (written) or 0
/// (superseded: a newer value is stored; nothing changed).
pub const PUT_SCRIPT: &str = concat!(
    newer_than_lua!(),
    r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = envelope, ARGV[2] = physical life ms
local now = server_ms()
if newer(redis.pcall('GETRANGE', KEYS[1], 0, 16), now) then return 0 end
redis.call('SET', KEYS[1], stamped(ARGV[1], now), 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
return 1
"#
);

/// The seed's release: delete the lock only if it is still this attempt's. Returns 1 or 0.
pub const RELEASE_SCRIPT: &str = r#"
-- KEYS[1] = lock key; ARGV[1] = this attempt's token
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
end
return 0
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// The skew the Lua compares with is the documented constant.
    #[test]
    fn the_scripts_use_the_documented_skew() {
        let skew = format!("a <= now + {MAX_CLOCK_SKEW_MS}");
        assert!(FENCED_WRITE_SCRIPT.contains(&skew) && PUT_SCRIPT.contains(&skew));
    }
}

/// The scripts, hashed once per process (`redis::Script` computes the SHA1 and falls back from
/// EVALSHA to loading the script when the server answers NOSCRIPT).
struct Scripts {
    acquire_or_read: redis::Script,
    poll: redis::Script,
    extend: redis::Script,
    fenced_write: redis::Script,
    put: redis::Script,
    release: redis::Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(Scripts::new);

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire_or_read: redis::Script::new(ACQUIRE_OR_READ_SCRIPT),
            poll: redis::Script::new(POLL_SCRIPT),
            extend: redis::Script::new(EXTEND_SCRIPT),
            fenced_write: redis::Script::new(FENCED_WRITE_SCRIPT),
            put: redis::Script::new(PUT_SCRIPT),
            release: redis::Script::new(RELEASE_SCRIPT),
        }
    }
}

/// A token unique to one fill attempt: 128 random bits as 32 hex digits.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What the acquire saw.
pub(crate) struct Acquired {
    /// `true` if this attempt now holds the lock.
    pub(crate) won: bool,
    /// The value key's bytes (at most `max_bytes + 1`), read after the `SET NX`.
    pub(crate) value: Option<Vec<u8>>,
}

/// How a fenced write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fenced {
    /// The value is stored.
    Written,
    /// The lock no longer holds this attempt's token: nothing written.
    NotOurs,
    /// A newer value is stored: nothing written.
    Superseded,
}

/// `SET lock token NX PX lock_ttl`, then a bounded read of the value, atomically.
pub(crate) async fn acquire_or_read(
    l2: &L2,
    names: &KeyNames,
    token: &str,
    lock_ttl_ms: u64,
    max_bytes: usize,
) -> Result<Acquired> {
    let mut inv = SCRIPTS.acquire_or_read.prepare_invoke();
    inv.key(&names.value)
        .key(&names.lock)
        .arg(token)
        .arg(lock_ttl_ms)
        .arg(max_bytes);
    let (won, value): (i64, Option<Vec<u8>>) =
        l2.script("acquire (SET lock NX PX)", names, inv).await?;
    Ok(Acquired {
        won: won == 1,
        value: value.filter(|v| !v.is_empty()),
    })
}

/// The lease: `PEXPIRE lock lock_ttl` if the lock still holds `token`. `Ok(false)`: not ours.
/// `SET lock token IFEQ token PX lock_ttl` where the server has it ([`crate::natives`]).
pub(crate) async fn extend(
    l2: &L2,
    names: &KeyNames,
    token: &str,
    lock_ttl_ms: u64,
) -> Result<bool> {
    if l2.natives().set_ifeq() {
        let mut set = redis::cmd("SET");
        set.arg(&names.lock)
            .arg(token)
            .arg("IFEQ")
            .arg(token)
            .arg("PX")
            .arg(lock_ttl_ms);
        let lease = "lease (SET IFEQ PX)";
        if let Some(reply) =
            native::<Option<String>>(l2, names, lease, set, Natives::lost_set_ifeq).await?
        {
            return Ok(reply.is_some());
        }
    }
    let mut inv = SCRIPTS.extend.prepare_invoke();
    inv.key(&names.lock).arg(token).arg(lock_ttl_ms);
    let extended: i64 = l2
        .script("lease (token-checked PEXPIRE)", names, inv)
        .await?;
    Ok(extended == 1)
}

/// Writes `envelope` with a physical life of `px` ms if the lock still holds `token` and no newer
/// value is stored.
pub(crate) async fn fenced_write(
    l2: &L2,
    names: &KeyNames,
    token: &str,
    envelope: Vec<u8>,
    px: u64,
) -> Result<Fenced> {
    let mut inv = SCRIPTS.fenced_write.prepare_invoke();
    inv.key(&names.value)
        .key(&names.lock)
        .arg(token)
        .arg(envelope)
        .arg(px);
    let written: i64 = l2.script("fenced write", names, inv).await?;
    Ok(match written {
        1 => Fenced::Written,
        -1 => Fenced::Superseded,
        _ => Fenced::NotOurs,
    })
}

/// Write-through unless a newer value is stored; drops the lock when it writes. `Ok(false)`:
/// superseded, nothing changed.
pub(crate) async fn versioned_put(
    l2: &L2,
    names: &KeyNames,
    envelope: Vec<u8>,
    px: u64,
) -> Result<bool> {
    let mut inv = SCRIPTS.put.prepare_invoke();
    inv.key(&names.value).key(&names.lock).arg(envelope).arg(px);
    let written: i64 = l2
        .script("put (SET value unless newer, DEL lock)", names, inv)
        .await?;
    Ok(written == 1)
}

/// What a polling loser looks at: the value (bounded, another type read as none) and whether
/// the lock exists, in one script.
pub(crate) async fn poll(
    l2: &L2,
    names: &KeyNames,
    max_bytes: usize,
) -> Result<(Option<Vec<u8>>, bool)> {
    let mut inv = SCRIPTS.poll.prepare_invoke();
    inv.key(&names.value).key(&names.lock).arg(max_bytes);
    let (bytes, locked): (Option<Vec<u8>>, i64) = l2
        .script("poll (GETRANGE value, EXISTS lock)", names, inv)
        .await?;
    Ok((bytes.filter(|b| !b.is_empty()), locked == 1))
}

/// The token-checked release. `Ok(false)`: the lock was no longer this token's; nothing deleted.
/// `DELIFEQ lock token` where the server has it ([`crate::natives`]), the seed's script otherwise.
pub(crate) async fn release(l2: &L2, names: &KeyNames, token: &str) -> Result<bool> {
    if l2.natives().delifeq() {
        let mut delifeq = redis::cmd("DELIFEQ");
        delifeq.arg(&names.lock).arg(token);
        let release = "release (DELIFEQ)";
        if let Some(deleted) =
            native::<i64>(l2, names, release, delifeq, Natives::lost_delifeq).await?
        {
            return Ok(deleted == 1);
        }
    }
    let mut inv = SCRIPTS.release.prepare_invoke();
    inv.key(&names.lock).arg(token);
    let deleted: i64 = l2.script("release (token-checked DEL)", names, inv).await?;
    Ok(deleted == 1)
}

/// Runs a native lock command: its answer, or `None` when the server does not have it (or this
/// user may not run it), after which `lose` makes the store use the script for good.
async fn native<T: redis::FromRedisValue>(
    l2: &L2,
    names: &KeyNames,
    context: &'static str,
    command: redis::Cmd,
    lose: fn(&Natives),
) -> Result<Option<T>> {
    let answer = l2
        .run(context, Some(names), |mut c| async move {
            match command.query_async::<T>(&mut c).await {
                Ok(answer) => Ok(Some(answer)),
                Err(e) if crate::natives::is_unsupported(&e) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?;
    if answer.is_none() {
        lose(l2.natives());
    }
    Ok(answer)
}
