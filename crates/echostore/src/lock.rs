//! The regeneration lock: one fill per key per expiry across every process sharing the Valkey.
//!
//! A fill that misses contends with `SET lock:<table>:{<id>} <token> NX PX <lock_ttl>`, where the
//! token is 128 random bits unique to this attempt. The acquire runs in one script together with a
//! second read of the value key, so a winner sees a value that the previous holder wrote an instant
//! ago and does not read the source again. The winner writes with a *fenced* write (the value is set
//! only while the lock still holds its token) and then releases with the token-checked
//! compare-and-delete of the seed. A lock is never removed by a plain `DEL` on these paths: only
//! `invalidate` and `put`, which mean to cancel fills in flight, drop it outright.

use crate::error::Result;
use crate::key::KeyNames;
use crate::l2::L2;

/// `SET lock NX PX` and `GET value` in one round trip (Lua). Returns `{won, value}`.
pub const ACQUIRE_OR_READ_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token, ARGV[2] = lock ttl ms
local won = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2])
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then value = false end -- another type: a miss
if won then return {1, value} end
return {0, value}
"#;

/// Set the value only while the lock still holds this attempt's token (Lua). Returns 1 or 0.
pub const FENCED_WRITE_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token, ARGV[2] = envelope, ARGV[3] = px ms
if redis.call('GET', KEYS[2]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
"#;

/// The seed's release: delete the lock only if it is still this attempt's (Lua). Returns 1 or 0.
pub const RELEASE_SCRIPT: &str = r#"
-- KEYS[1] = lock key; ARGV[1] = this attempt's token
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
end
return 0
"#;

/// The three lock scripts, hashed once per store (`redis::Script` computes the SHA1 and falls
/// back from EVALSHA to loading the script when the server answers NOSCRIPT).
pub(crate) struct LockScripts {
    acquire_or_read: redis::Script,
    fenced_write: redis::Script,
    release: redis::Script,
}

impl LockScripts {
    pub(crate) fn new() -> Self {
        LockScripts {
            acquire_or_read: redis::Script::new(ACQUIRE_OR_READ_SCRIPT),
            fenced_write: redis::Script::new(FENCED_WRITE_SCRIPT),
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
    /// The value key's bytes, read after the `SET NX`.
    pub(crate) value: Option<Vec<u8>>,
}

/// `SET lock token NX PX lock_ttl`, then `GET value`, atomically.
pub(crate) async fn acquire_or_read(
    l2: &L2,
    names: &KeyNames,
    token: &str,
    lock_ttl_ms: u64,
) -> Result<Acquired> {
    let mut inv = l2.lock_scripts.acquire_or_read.prepare_invoke();
    inv.key(&names.value)
        .key(&names.lock)
        .arg(token)
        .arg(lock_ttl_ms);
    let (won, value): (i64, Option<Vec<u8>>) = l2.script("acquire (SET lock NX PX)", inv).await?;
    Ok(Acquired {
        won: won == 1,
        value,
    })
}

/// Writes `envelope` with a physical life of `px` ms if the lock still holds `token`.
/// `Ok(false)` means fenced out: the lock expired, or was taken over, or dropped by a put.
pub(crate) async fn fenced_write(
    l2: &L2,
    names: &KeyNames,
    token: &str,
    envelope: Vec<u8>,
    px: u64,
) -> Result<bool> {
    let mut inv = l2.lock_scripts.fenced_write.prepare_invoke();
    inv.key(&names.value)
        .key(&names.lock)
        .arg(token)
        .arg(envelope)
        .arg(px);
    let written: i64 = l2.script("fenced write", inv).await?;
    Ok(written == 1)
}

/// The token-checked release. `Ok(false)`: the lock was no longer this token's; nothing deleted.
pub(crate) async fn release(l2: &L2, names: &KeyNames, token: &str) -> Result<bool> {
    let mut inv = l2.lock_scripts.release.prepare_invoke();
    inv.key(&names.lock).arg(token);
    let deleted: i64 = l2.script("release (token-checked DEL)", inv).await?;
    Ok(deleted == 1)
}
