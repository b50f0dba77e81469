//! Every Lua script EchoStore runs, quoted in `docs/lock-protocol.md` and published as
//! `echostore::protocol::*`, each hashed once per process and run by [`Invocation`].
//!
//! **The last write to land wins, and Valkey's clock stamps it.** The fenced write and `put` set
//! the envelope's `written_at` from the server's own `TIME` inside the script (and `fresh_until`
//! to `TIME` plus the life the writer gave, so no copy's life rests on its writer's clock), so which of two
//! writes wins depends on the order they reach Valkey, never on the writers' wall clocks (a
//! writer whose clock runs ahead cannot make others' writes no-ops). A fill cannot land over a
//! `put` that reached Valkey after the fill took its lock: the put drops the lock, and the fenced
//! write checks it. A stored `written_at` ahead of the server's clock (planted bytes, or a clock
//! stepped back) stands against a write for at most [`MAX_CLOCK_SKEW_MS`]; further ahead it is
//! taken for garbage and replaced, so planted bytes cannot block writes for long.
//!
//! **With `.version_by`, the source's own version decides instead.** Envelopes of such a table
//! carry the value's version (formats 3 and 5, bytes 21..29); when both the stored envelope and the new
//! one have a version, the write is refused if the stored version is greater, whenever and in
//! whatever order the two reach Valkey (a put that timed out and lands late cannot undo a newer
//! row). Equal versions: the later write lands. Otherwise `written_at` decides, as above.

use std::sync::LazyLock;

/// How far ahead of the server's clock a stored `written_at` may be and still count as newer.
pub const MAX_CLOCK_SKEW_MS: u64 = 300_000;

/// The Lua functions both ordered writes use: `stamped(new, now)` is the envelope `new` with its
/// `written_at` (bytes 10..17, little-endian) set to the server's own clock (`TIME`) and its
/// `fresh_until` (bytes 2..9) moved with it, keeping the life the writer gave, and
/// `newer(old, now, new)` is `true` when the stored envelope `old` must win over `new`: both carry
/// a source version (format 3 or 5) and `old`'s is greater, compared byte by byte (a Lua number
/// would round versions past 2^53); or, failing versions, `old` (formats 1 to 5) was stamped after
/// `now` but no more than the skew allowance after it. `written_before(key, new, now)` is `true`
/// when `key` holds, still fresh, exactly `new` stamped at that copy's `written_at`: the write's
/// own first send landed, and a cluster client sent it again (it does so when a node's reply came
/// after its timer: a pause of the process).
macro_rules! newer_than_lua {
    () => {
        r#"
local function le(n)
  local bytes = {}
  for i = 1, 8 do bytes[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(bytes)
end
local function u64_at(v, first)
  local n = 0
  for i = first + 7, first, -1 do n = n * 256 + string.byte(v, i) end
  return n
end
local function written_at(v)
  if type(v) ~= 'string' or #v < 17 then return nil end
  local format = string.byte(v, 1) % 16
  if format < 1 or format > 5 then return nil end
  return u64_at(v, 10)
end
local function version(v)
  if type(v) ~= 'string' or #v < 29 then return nil end
  local format = string.byte(v, 1) % 16
  if format ~= 3 and format ~= 5 then return nil end
  return v
end
local function greater_version(a, b)
  for i = 29, 22, -1 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return false
end
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function stamped(v, now)
  local life = math.max(0, u64_at(v, 2) - u64_at(v, 10))
  return string.sub(v, 1, 1) .. le(now + life) .. le(now) .. string.sub(v, 18)
end
local function newer(old, now, new)
  if version(old) and version(new) then return greater_version(old, new) end
  local a = written_at(old)
  return a ~= nil and a > now and a <= now + 300000
end
local function written_before(key, envelope, now)
  local head = redis.pcall('GETRANGE', key, 0, 16)
  local at = written_at(head)
  if not at or at > now or u64_at(head, 2) <= now then return false end
  return redis.call('GET', key) == stamped(envelope, at)
end
"#
    };
}

/// `SET lock NX PX` and a bounded read of the value, in one round trip. Returns `{won, value}`.
/// A lock that already holds this attempt's token is won: a cluster client sends a call again
/// when a node's reply came later than its timer (a pause of the process), and the first send
/// took the lock.
pub(crate) const ACQUIRE_OR_READ_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token, ARGV[2] = lock ttl ms, ARGV[3] = max bytes
local won = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2])
  or redis.pcall('GET', KEYS[2]) == ARGV[1]
local value = redis.pcall('GETRANGE', KEYS[1], 0, ARGV[3])
if type(value) == 'table' and value.err then value = false end -- another type: a miss
if won then return {1, value} end
return {0, value}
"#;

/// A loser's look: a bounded read of the value and whether the lock exists. Returns `{value, locked}`.
pub(crate) const POLL_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = max bytes
local value = redis.pcall('GETRANGE', KEYS[1], 0, ARGV[1])
if type(value) == 'table' and value.err then value = false end -- another type: no value yet
return {value, redis.call('EXISTS', KEYS[2])}
"#;

/// The lease: push the lock's expiry out while it still holds this attempt's token. Returns 1 or 0.
pub(crate) const EXTEND_SCRIPT: &str = r#"
-- KEYS[1] = lock key; ARGV[1] = token, ARGV[2] = lock ttl ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// The Lua function both fenced writes (one id, many) use, after `newer_than_lua!`:
/// `fenced(first, last, token, envelope, px, now)` writes `envelope` to `KEYS[first]` while its
/// lock `KEYS[first + 1]` holds `token` and no copy of the id is newer, its own or another live
/// schema's (`KEYS[first + 2 .. last]`, value and lock pairs), then releases the lock. A newer
/// copy in another schema refuses it and drops its own schema's copy, which is older still (as
/// `put` does); once written, every other schema's copy of an *older version* goes too: it was
/// written before the source moved on (a `put` that landed after an invalidation it had raced),
/// and no push would retire it before its life ends. Without versions, the other copies stay:
/// nothing says they are older. Returns 1 (written), 0 (not our lock: nothing done) or -1
/// (superseded: released, nothing written).
///
/// A write sent again finds the lock gone, released by its first send; when that send's copy is
/// what the value key holds (`written_before`), the answer is 1 again: a "not our lock" would have
/// the winner read its own write back as another's and drop its own-write record.
macro_rules! fenced_lua {
    () => {
        r#"
local function older(old, new)
  return version(old) ~= nil and version(new) ~= nil and greater_version(new, old)
end
local function fenced(first, last, token, envelope, px, now)
  if redis.call('GET', KEYS[first + 1]) ~= token then
    if written_before(KEYS[first], envelope, now) then return 1 end
    return 0
  end
  for i = first, last, 2 do
    if newer(redis.pcall('GETRANGE', KEYS[i], 0, 28), now, envelope) then
      if i > first then redis.call('DEL', KEYS[first]) end
      redis.call('DEL', KEYS[first + 1])
      return -1
    end
  end
  redis.call('SET', KEYS[first], stamped(envelope, now), 'PX', px)
  redis.call('DEL', KEYS[first + 1])
  for i = first + 2, last, 2 do
    if older(redis.pcall('GETRANGE', KEYS[i], 0, 28), envelope) then redis.call('DEL', KEYS[i]) end
  end
  return 1
end
"#
    };
}

/// Set the value only while the lock holds this attempt's token and nothing newer is stored (in
/// any live schema), and release the lock: the winner's write and release in one round trip.
/// Returns 1 (written, released), 0 (fenced out: not our lock, nothing done) or -1 (a newer value
/// is stored: released, nothing written).
pub(crate) const FENCED_WRITE_SCRIPT: &str = concat!(
    newer_than_lua!(),
    fenced_lua!(),
    r#"
-- KEYS[1] = value key, KEYS[2] = lock key, KEYS[3..] = the other live schemas' value and lock
-- keys; ARGV[1] = token, ARGV[2] = envelope, ARGV[3] = px ms
return fenced(1, #KEYS, ARGV[1], ARGV[2], ARGV[3], server_ms())
"#
);

/// The reloader's "unchanged": while the lock holds this attempt's token and the value key still
/// holds the copy the reloader was given (its `written_at`, bytes 10..17), restamp that copy's
/// life on the server's clock (`fresh_until` = now + the fresh life, `written_at` = now: 16 bytes,
/// no value bytes sent) and its `PX`, and release the lock; `ARGV[3]` = `gone` deletes the copy
/// instead. Returns 1 (renewed or deleted, released), 0 (fenced out: not our lock, nothing done)
/// or -1 (the copy left meanwhile, its stale window over or evicted: nothing done, the lock still
/// held, so that the winner writes the value in full under it).
pub(crate) const RENEW_SCRIPT: &str = concat!(
    newer_than_lua!(),
    r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token, ARGV[2] = the copy's written_at
-- (8 bytes, little-endian), ARGV[3] = fresh life ms or 'gone', ARGV[4] = px ms
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local at = redis.pcall('GETRANGE', KEYS[1], 9, 16)
if type(at) ~= 'string' or at ~= ARGV[2] or not written_at(redis.call('GETRANGE', KEYS[1], 0, 16)) then
  return -1
end
if ARGV[3] == 'gone' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
local now = server_ms()
redis.call('SETRANGE', KEYS[1], 1, le(now + tonumber(ARGV[3])) .. le(now))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
return 1
"#
);

/// Write-through: set the value unless a newer one is stored or the put's deadline (server ms,
/// 0 for none) has passed, and drop the lock of any fill in flight so that its fenced write
/// cannot land over this value. The other live schemas' copies of the id (`KEYS[3..]`, value
/// and lock pairs: `crate::state::schemas`) count as stored values too, and are dropped with their
/// locks when the put lands. Superseded by another schema's newer copy, it drops its own
/// schema's copy and lock, which are older than the put: the newer write may not have known them
/// (a process not yet settled on its generation keeps copies that only it reads), and they must
/// not outlive this put. Returns `{1, now}` (written), `{0, now}` (superseded: a newer value is
/// stored) or `{-2, now}` (too late: its caller has given up), with the server's time. A put sent
/// again past its deadline whose first send landed (`written_before`) answers `{1, now}`, writing
/// nothing: the node's timer that made the client send it again fires no sooner than the deadline.
pub(crate) const PUT_SCRIPT: &str = concat!(
    newer_than_lua!(),
    r#"
-- KEYS[1] = value key, KEYS[2] = lock key, KEYS[3..] = the other schemas' value and lock keys;
-- ARGV[1] = envelope, ARGV[2] = physical life ms, ARGV[3] = deadline, server unix ms (0: none)
local now = server_ms()
local deadline = tonumber(ARGV[3])
if deadline > 0 and now > deadline then
  if written_before(KEYS[1], ARGV[1], now) then return {1, now} end -- its first send landed
  return {-2, now}
end
for i = 1, #KEYS, 2 do
  if newer(redis.pcall('GETRANGE', KEYS[i], 0, 28), now, ARGV[1]) then
    if i > 1 then redis.call('DEL', KEYS[1], KEYS[2]) end -- another schema's: drop our older copy
    return {0, now}
  end
end
redis.call('SET', KEYS[1], stamped(ARGV[1], now), 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
return {1, now}
"#
);

/// A batch's acquire-or-read: for each id, `SET lock NX PX` and a bounded read of the value, in
/// one round trip (on a cluster, one per hash slot: the keys of one call share a slot). Returns
/// `{won_1, value_1, won_2, value_2, …}`. A lock already holding its id's token is won, as in
/// [`ACQUIRE_OR_READ_SCRIPT`].
pub(crate) const ACQUIRE_MANY_SCRIPT: &str = r#"
-- KEYS = value_1, lock_1, value_2, lock_2, …; ARGV[1] = lock ttl ms, ARGV[2] = max bytes,
-- ARGV[2 + i] = the token of id i
local out = {}
for i = 1, #KEYS / 2 do
  local won = redis.call('SET', KEYS[2 * i], ARGV[2 + i], 'NX', 'PX', ARGV[1])
    or redis.pcall('GET', KEYS[2 * i]) == ARGV[2 + i]
  local value = redis.pcall('GETRANGE', KEYS[2 * i - 1], 0, ARGV[2])
  if type(value) == 'table' and value.err then value = false end -- another type: a miss
  out[2 * i - 1] = won and 1 or 0
  out[2 * i] = value
end
return out
"#;

/// A batch's losers' look, in one round trip (per hash slot on a cluster): for each id, a bounded
/// read of the value and whether its lock exists. Returns `{value_1, locked_1, value_2, …}`.
pub(crate) const POLL_MANY_SCRIPT: &str = r#"
-- KEYS = value_1, lock_1, value_2, lock_2, …; ARGV[1] = max bytes
local out = {}
for i = 1, #KEYS / 2 do
  local value = redis.pcall('GETRANGE', KEYS[2 * i - 1], 0, ARGV[1])
  if type(value) == 'table' and value.err then value = false end -- another type: no value yet
  out[2 * i - 1] = value
  out[2 * i] = redis.call('EXISTS', KEYS[2 * i])
end
return out
"#;

/// A batch's lease, in one round trip (per hash slot on a cluster): push out the expiry of each
/// lock that still holds its token. Returns one 1 (extended) or 0 (no longer ours) per lock.
pub(crate) const EXTEND_MANY_SCRIPT: &str = r#"
-- KEYS = lock_1, lock_2, …; ARGV[1] = lock ttl ms, ARGV[1 + i] = the token of lock i
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1 + i] then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[1])
  else
    out[i] = 0
  end
end
return out
"#;

/// A batch's fenced writes and releases in one round trip (per hash slot on a cluster): for
/// each id whose lock still holds its token, set its envelope as the single fenced write does
/// (unless it is empty: release only, or delete the copy too where the source said the row is
/// gone), then delete the lock. Returns one code per id: 1 (written), 2 (released, nothing to
/// write), 0 (not our lock: nothing done) or -1 (a newer
/// value is stored: released, nothing written).
pub(crate) const WRITE_MANY_SCRIPT: &str = concat!(
    newer_than_lua!(),
    fenced_lua!(),
    r#"
-- KEYS = for each id i: its value and lock keys, then ARGV[4i] pairs of the other live schemas'
-- value and lock keys; ARGV[4i - 3] = token, ARGV[4i - 2] = envelope ('' = release only),
-- ARGV[4i - 1] = px ms, or 'gone' with no envelope: the copy is deleted with the lock
local now = server_ms()
local out = {}
local first = 1
for i = 1, #ARGV / 4 do
  local token, envelope, px = ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1]
  local last = first + 1 + 2 * tonumber(ARGV[4 * i])
  if envelope ~= '' then
    out[i] = fenced(first, last, token, envelope, px, now)
  elseif redis.call('GET', KEYS[first + 1]) == token then
    if px == 'gone' then redis.call('DEL', KEYS[first]) end
    redis.call('DEL', KEYS[first + 1]); out[i] = 2
  else
    out[i] = 0
  end
  first = last + 1
end
return out
"#
);

/// The source said the row is gone: while the lock holds this attempt's token, delete the copy
/// with the lock. Returns 1 (deleted, released) or 0 (not our lock: nothing done).
pub(crate) const FENCED_DELETE_SCRIPT: &str = r#"
-- KEYS[1] = value key, KEYS[2] = lock key; ARGV[1] = token
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"#;

/// A read that must see at least a version found an older copy, or a load answered here is
/// repaired (`state/unsettled.rs`): delete the value, unless what Valkey holds by now carries a
/// version at least that one (a write that landed since; deleting it would cost a source read
/// nobody needs). The lock, if any, stays its holder's.
/// Returns 1 (deleted, or nothing there) or 0 (a recent enough copy stays).
pub(crate) const DROP_OLDER_SCRIPT: &str = concat!(
    newer_than_lua!(),
    r#"
-- KEYS[1] = value key; ARGV[1] = the version wanted, 8 bytes little-endian, placed where an
-- envelope's version sits so that the writes' own compare reads it
local held = version(redis.pcall('GETRANGE', KEYS[1], 0, 28))
if held and not greater_version(string.rep('\0', 21) .. ARGV[1], held) then return 0 end
redis.call('DEL', KEYS[1])
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

/// A `clear` or an `invalidate_tag`: one new generation, from the server's clock in µs and above
/// every mark already set, given to each member named (`clear`, or `tag:<tag>`) in the table's
/// marks (a sorted set, the score a member's generation). A clear subsumes the marks before it,
/// which it removes; marks older than the longest a copy they could invalidate can be read
/// (`ARGV[1]`, µs; 0 = kept until the next clear) are removed too, and so is the whole key that
/// long after its last mark (`PEXPIRE`). Past `ARGV[3]` marks, the oldest half of the tags is
/// folded into the clear (raised to the newest of them): every copy stamped before those tags is
/// then a miss, which is more than they asked, never less, and the key stays bounded. Returns
/// every mark above the generation the caller knew (`ARGV[2]`), its own included, as
/// `member, score, …`: a mark another process set just before this one is taken in with it.
pub(crate) const MARK_SCRIPT: &str = r#"
-- KEYS[1] = the table's marks; ARGV[1] = how long a mark is kept, µs (0: until a clear),
-- ARGV[2] = the latest generation the caller knows, ARGV[3] = the most marks kept,
-- ARGV[4..] = the members to mark
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = now
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) >= n and tonumber(top[2]) <= now + 300000000 then
  n = tonumber(top[2]) + 1
end
local g = string.format('%.0f', n)
for i = 4, #ARGV do
  if ARGV[i] == 'clear' then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. g) end
  redis.call('ZADD', KEYS[1], g, ARGV[i])
end
local keep = tonumber(ARGV[1])
if keep > 0 then
  local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', n - keep))
  for _, member in ipairs(old) do
    if string.sub(member, 1, 4) == 'tag:' then redis.call('ZREM', KEYS[1], member) end
  end
  redis.call('PEXPIRE', KEYS[1], math.ceil(keep / 1000))
end
local most = tonumber(ARGV[3])
if redis.call('ZCARD', KEYS[1]) > most then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, math.floor(most / 2), 'WITHSCORES')
  local floor = nil
  for i = 1, #oldest, 2 do
    if string.sub(oldest[i], 1, 4) == 'tag:' then
      redis.call('ZREM', KEYS[1], oldest[i])
      floor = oldest[i + 1]
    end
  end
  if floor then
    redis.call('ZADD', KEYS[1], 'GT', floor, 'clear')
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. floor)
  end
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf', 'WITHSCORES')
"#;

/// Marks this process knows that a full read did not find (Valkey came back empty, or a replica
/// that had not received them took over): each member is set to at least the generation given,
/// never lowered (`ZADD GT`), and the key kept as `MARK_SCRIPT` keeps it. Other processes are
/// pushed the change and read the marks above the latest they know, so a mark one process heard
/// and another missed before the loss is known to both again (`state/marks.rs`).
pub(crate) const PUT_BACK_MARKS_SCRIPT: &str = r#"
-- KEYS[1] = the table's marks; ARGV[1] = how long a mark is kept, µs (0: until a clear);
-- ARGV[2..] = member, generation pairs
for i = 2, #ARGV - 1, 2 do
  redis.call('ZADD', KEYS[1], 'GT', ARGV[i + 1], ARGV[i])
end
local keep = tonumber(ARGV[1])
if keep > 0 then redis.call('PEXPIRE', KEYS[1], math.ceil(keep / 1000)) end
return 1
"#;

/// A source-budget lease (`state/budget.rs`): drop the leases that ended on the server's clock, then
/// renew `ARGV[1]`'s if it is live, or grant it if fewer than `ARGV[2]` are; the key lives as
/// long as its newest lease. Returns 1 (held) or 0 (the budget is spent).
pub(crate) const BUDGET_SCRIPT: &str = r#"
-- KEYS[1] = the table's budget; ARGV[1] = token, ARGV[2] = limit, ARGV[3] = lease, ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends = now + tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ends, ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
"#;

/// A table's live schemas (`crate::state::schemas`): drop the leases that ended on the server's clock,
/// then renew this process's lease (`<schema>:<generation>:<token>`), taking its schema's live
/// generation, or a new one (the server's clock in µs) when no process of the schema is left.
/// The key lives as long as its newest lease. A process passes what it last heard (`ARGV[4..]`,
/// member and lease-end pairs, its own among them): should its own member be gone while its
/// lease has not ended on the server's clock, no expiry removed it, Valkey lost the set (a
/// restart, an outage, a flush), and every schema with no member left is put back as it was
/// heard, each member until its lease's end (its own for a lease), so that no generation moves
/// because Valkey forgot it. Returns `{generation, how, age, ends, member, lease end, …}`: `how`
/// 0 when this process's lease went on, 1 when it joins its schema's live generation, 2 when it
/// starts a new one, 3 when it put members back; the generation's age in ms; when this
/// process's lease now ends; then every live member of another schema and when its lease ends.
pub(crate) const SCHEMAS_SCRIPT: &str = r#"
-- KEYS[1] = the table's live schemas; ARGV[1] = schema, ARGV[2] = token, ARGV[3] = lease, ms;
-- ARGV[4..] = member, lease end (ms) pairs to put back if this process's own member was lost
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local function parse(member) return string.match(member, '^(%d+):(%d+):(.*)$') end
local restored = false
if #ARGV > 3 then
  local present, lost = {}, false
  for i = 4, #ARGV - 1, 2 do
    local schema, _, token = parse(ARGV[i])
    if schema == ARGV[1] and token == ARGV[2] then lost = tonumber(ARGV[i + 1]) > now end
  end
  for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local schema, _, token = parse(member)
    if schema then present[schema] = true end
    if schema == ARGV[1] and token == ARGV[2] then lost = false end
  end
  for i = 4, #ARGV - 1, 2 do
    local schema, _, token = parse(ARGV[i])
    local ends = tonumber(ARGV[i + 1])
    if schema == ARGV[1] and token == ARGV[2] then ends = now + tonumber(ARGV[3]) end
    if lost and schema and not present[schema] and ends > now then
      redis.call('ZADD', KEYS[1], ends, ARGV[i])
      restored = true
    end
  end
end
local generation, mine, others = nil, nil, {}
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #live, 2 do
  local member = live[i]
  local schema, g, token = parse(member)
  if schema == ARGV[1] then
    generation = generation or g
    if token == ARGV[2] then mine = member end
  elseif schema then
    table.insert(others, member)
    table.insert(others, live[i + 1])
  end
end
local how = (restored and 3) or (mine and 0) or 1
if not generation then
  generation = t[1] .. string.format('%06d', tonumber(t[2]))
  how = 2
end
local member = ARGV[1] .. ':' .. generation .. ':' .. ARGV[2]
if mine and mine ~= member then redis.call('ZREM', KEYS[1], mine) end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), member)
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local age = math.max(0, math.floor((now_us - tonumber(generation)) / 1000))
local ends = string.format('%d', now + tonumber(ARGV[3]))
local out = {generation, tostring(how), string.format('%d', age), ends}
for _, other in ipairs(others) do table.insert(out, other) end
return out
"#;

/// The scripts, hashed once per process.
pub(crate) struct Scripts {
    pub(crate) acquire_or_read: Lua,
    pub(crate) poll: Lua,
    pub(crate) extend: Lua,
    pub(crate) fenced_write: Lua,
    pub(crate) renew: Lua,
    pub(crate) fenced_delete: Lua,
    pub(crate) drop_older: Lua,
    pub(crate) put: Lua,
    pub(crate) release: Lua,
    pub(crate) acquire_many: Lua,
    pub(crate) poll_many: Lua,
    pub(crate) extend_many: Lua,
    pub(crate) write_many: Lua,
    pub(crate) mark: Lua,
    pub(crate) put_back_marks: Lua,
    pub(crate) budget: Lua,
    pub(crate) schemas: Lua,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(Scripts::new);

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire_or_read: Lua::new(ACQUIRE_OR_READ_SCRIPT),
            poll: Lua::new(POLL_SCRIPT),
            extend: Lua::new(EXTEND_SCRIPT),
            fenced_write: Lua::new(FENCED_WRITE_SCRIPT),
            renew: Lua::new(RENEW_SCRIPT),
            fenced_delete: Lua::new(FENCED_DELETE_SCRIPT),
            drop_older: Lua::new(DROP_OLDER_SCRIPT),
            put: Lua::new(PUT_SCRIPT),
            release: Lua::new(RELEASE_SCRIPT),
            acquire_many: Lua::new(ACQUIRE_MANY_SCRIPT),
            poll_many: Lua::new(POLL_MANY_SCRIPT),
            extend_many: Lua::new(EXTEND_MANY_SCRIPT),
            write_many: Lua::new(WRITE_MANY_SCRIPT),
            mark: Lua::new(MARK_SCRIPT),
            put_back_marks: Lua::new(PUT_BACK_MARKS_SCRIPT),
            budget: Lua::new(BUDGET_SCRIPT),
            schemas: Lua::new(SCHEMAS_SCRIPT),
        }
    }
}

/// One script: its source and SHA1. It runs as `EVALSHA`, and as `EVAL` on a node that does not
/// have it cached (one that restarted empty, or a replica just promoted): `EVAL` goes to the
/// node that holds the keys and caches the script there. (redis-rs's own fallback loads the
/// script with `SCRIPT LOAD` on every node of a cluster, which a cluster that is healing may not
/// all answer, and whose retry can make the cluster client reconnect from its seeds.)
pub(crate) struct Lua {
    code: &'static str,
    sha: String,
}

/// A script's call being built: its keys and arguments.
pub(crate) struct Invocation<'a> {
    lua: &'a Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Lua {
    fn new(code: &'static str) -> Self {
        Lua {
            code,
            sha: redis::Script::new(code).get_hash().to_owned(),
        }
    }

    /// A call of this script, with no keys or arguments yet.
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

impl Invocation<'_> {
    /// Adds a key: `KEYS[i]` in the script.
    pub(crate) fn key(&mut self, key: impl redis::ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument: `ARGV[i]` in the script.
    pub(crate) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Runs the call: `EVALSHA`, or `EVAL` where the node answers `NOSCRIPT`.
    pub(crate) async fn invoke_async<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        let no_script = redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
        match self
            .command("EVALSHA", &self.lua.sha)
            .query_async(conn)
            .await
        {
            Err(e) if e.kind() == no_script => {
                self.command("EVAL", self.lua.code).query_async(conn).await
            }
            ran => ran,
        }
    }

    fn command(&self, verb: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(self.keys.len());
        for key in &self.keys {
            cmd.arg(key.as_slice());
        }
        for arg in &self.args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The skew the Lua compares with is the documented constant.
    #[test]
    fn the_scripts_use_the_documented_skew() {
        let skew = format!("a <= now + {MAX_CLOCK_SKEW_MS}");
        assert!(FENCED_WRITE_SCRIPT.contains(&skew) && PUT_SCRIPT.contains(&skew));
        assert!(WRITE_MANY_SCRIPT.contains(&skew));
    }

    /// A private server and a connection to it (the server lives as long as the handle).
    async fn server() -> (
        embedded_valkey::EmbeddedValkey,
        redis::aio::MultiplexedConnection,
    ) {
        let valkey = embedded_valkey::EmbeddedValkey::start().expect("valkey");
        let client = redis::Client::open(valkey.url()).expect("url");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        (valkey, conn)
    }

    /// Runs an acquire script on the lock key `lock` (`many`: the batch's, for one id) for
    /// `token`; whether it won.
    async fn acquire(conn: &mut impl redis::aio::ConnectionLike, many: bool, token: &str) -> bool {
        let (lua, ttl, max) = (&SCRIPTS, 60_000, 64);
        let mut call = if many {
            lua.acquire_many.prepare_invoke()
        } else {
            lua.acquire_or_read.prepare_invoke()
        };
        call.key("value").key("lock");
        if many {
            call.arg(ttl).arg(max).arg(token);
        } else {
            call.arg(token).arg(ttl).arg(max);
        }
        let answer: Vec<redis::Value> = call.invoke_async(conn).await.expect("acquire");
        answer.first() == Some(&redis::Value::Int(1))
    }

    /// An envelope of format 1 holding `body`, fresh for `fresh_ms` from its writer's clock.
    fn envelope(body: &[u8], fresh_ms: u64) -> Vec<u8> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as u64;
        let mut bytes = vec![1];
        bytes.extend((now + fresh_ms).to_le_bytes());
        bytes.extend(now.to_le_bytes());
        bytes.extend(body);
        bytes
    }

    /// Runs a fenced write (`many`: the batch's, for one id) of `envelope` under `token` on the
    /// keys `value` and `lock`; its answer (1 written, 0 not our lock, -1 superseded).
    async fn fenced_write(
        conn: &mut impl redis::aio::ConnectionLike,
        many: bool,
        token: &str,
        envelope: &[u8],
    ) -> i64 {
        let px = 60_000;
        if many {
            let mut call = SCRIPTS.write_many.prepare_invoke();
            call.key("value")
                .key("lock")
                .arg(token)
                .arg(envelope)
                .arg(px)
                .arg(0);
            let answer: Vec<i64> = call.invoke_async(conn).await.expect("write many");
            answer[0]
        } else {
            let mut call = SCRIPTS.fenced_write.prepare_invoke();
            call.key("value")
                .key("lock")
                .arg(token)
                .arg(envelope)
                .arg(px);
            call.invoke_async(conn).await.expect("fenced write")
        }
    }

    /// A fenced write sent again (a cluster client does so when a node's reply came after its
    /// timer) answers "written" again: the value key holds, fresh, the copy its first send stored.
    /// Before, the second send answered "not our lock" (its first had released the lock). Another
    /// envelope, or a copy past its fresh life, still answers "not our lock".
    #[tokio::test]
    async fn a_fenced_write_sent_again_answers_written() {
        let (_valkey, mut conn) = server().await;
        for many in [false, true] {
            for (fresh_ms, again) in [(60_000, 1), (0, 0)] {
                let sent = envelope(b"row 1", fresh_ms);
                let _: () = redis::cmd("SET")
                    .arg(&["lock", "one"][..])
                    .query_async(&mut conn)
                    .await
                    .expect("take the lock");
                let answers = [
                    fenced_write(&mut conn, many, "one", &sent).await,
                    fenced_write(&mut conn, many, "one", &sent).await,
                    fenced_write(&mut conn, many, "one", &envelope(b"row 2", fresh_ms)).await,
                ];
                assert_eq!(answers, [1, again, 0], "many: {many}, fresh {fresh_ms} ms");
            }
        }
    }

    /// Runs a put of `envelope` on the key `value` with a `deadline` (server unix ms; 0: none); its
    /// answer (1 written, 0 superseded, -2 too late).
    async fn put(
        conn: &mut impl redis::aio::ConnectionLike,
        envelope: &[u8],
        deadline: u64,
    ) -> i64 {
        let mut call = SCRIPTS.put.prepare_invoke();
        call.key("value")
            .key("lock")
            .arg(envelope)
            .arg(60_000)
            .arg(deadline);
        let answer: Vec<i64> = call.invoke_async(conn).await.expect("put");
        answer[0]
    }

    /// A put sent again past its deadline (the node's timer that makes a cluster client send it
    /// again fires no sooner) answers "written" when its first send's copy is what Valkey holds,
    /// fresh; before, "too late", though it had landed. Another envelope, or a copy past its
    /// fresh life, is still too late, and nothing is written.
    #[tokio::test]
    async fn a_put_sent_again_past_its_deadline_answers_written() {
        let (_valkey, mut conn) = server().await;
        let long_past = 1;
        for (fresh_ms, again) in [(60_000, 1), (0, -2)] {
            let sent = envelope(b"row 1", fresh_ms);
            let answers = [
                put(&mut conn, &sent, 0).await,
                put(&mut conn, &sent, long_past).await,
                put(&mut conn, &envelope(b"row 2", fresh_ms), long_past).await,
            ];
            assert_eq!(answers, [1, again, -2], "fresh {fresh_ms} ms");
        }
    }

    /// Sets the lock key afresh: gone, or (`hash`) holding a hash.
    async fn reset_lock(conn: &mut impl redis::aio::ConnectionLike, hash: bool) {
        let mut reset = redis::pipe();
        reset.cmd("DEL").arg("lock").ignore();
        if hash {
            reset
                .cmd("HSET")
                .arg(&["lock", "field", "value"][..])
                .ignore();
        }
        let _: () = reset.query_async(conn).await.expect("reset the lock key");
    }

    /// An acquire sent again (a cluster client does so when a node's reply came after its timer,
    /// a pause of the process) wins: the first send took the lock for the same token. Another
    /// token loses it, and so does any token when the lock key holds another type. Before, the
    /// second send lost to the first, and the flight waited for its own lock's push until the
    /// lock's life ended.
    #[tokio::test]
    async fn an_acquire_sent_again_wins_its_own_lock() {
        let (_valkey, mut conn) = server().await;
        for many in [false, true] {
            reset_lock(&mut conn, false).await;
            let sent = [
                acquire(&mut conn, many, "one").await,
                acquire(&mut conn, many, "one").await,
                acquire(&mut conn, many, "two").await,
            ];
            assert_eq!(sent, [true, true, false], "many: {many}");
            // A lock key of another type (hostile bytes) is another holder's, not an error.
            reset_lock(&mut conn, true).await;
            assert!(!acquire(&mut conn, many, "one").await, "many: {many}");
        }
    }
}
