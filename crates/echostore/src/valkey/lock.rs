//! The regeneration lock: one fill per key per expiry across every process sharing the Valkey.
//!
//! A fill that misses contends with `SET lock:<table>:{<id>} <token> NX PX <lock_ttl>`, where the
//! token is 128 random bits unique to this attempt. The acquire runs in one script together with a
//! second read of the value key, so a winner sees a value that the previous holder wrote an instant
//! ago and does not read the source again. While the winner loads, it extends its lock (a
//! token-checked `PEXPIRE`, the *lease*), so a load of any length keeps it. The winner writes with
//! a *fenced* write (the value is set only while the lock still holds its token), which deletes
//! the lock in the same script; a winner that writes nothing releases with the token-checked
//! compare-and-delete of the seed (where the server has them, the release is `DELIFEQ` and the
//! lease `SET … IFEQ … PX`: [`crate::wire::natives`]). A lock is never removed without its token on
//! these paths: only `invalidate` and `put`, which mean to cancel fills in flight, drop it.
//!
//! The scripts themselves, and the rule for which of two writes wins, are [`crate::wire::scripts`].
//!
//! Values are read with `GETRANGE <key> 0 <max_value_bytes>`, so a value over the table's limit is
//! never pulled into memory whole: at most one byte more than the limit comes back.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::valkey::l2::L2;
use crate::wire::key::KeyNames;
use crate::wire::natives::Natives;
use crate::wire::scripts::SCRIPTS;

/// A token unique to one fill attempt: 128 random bits as 32 hex digits.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// How long a lease waits before its next extension: `every` (a third of the lock's life) after
/// one that landed, a quarter of that after one that failed (a timeout under load, a refused
/// call). The lock then has only what is left of its life since the last extension that landed,
/// and a full period's wait would leave it one more try at most, none when the failed call was
/// slow: a load slower than the lock stays the one source read only while its lease holds.
pub(crate) fn next_extension(every: Duration, failed: bool) -> Duration {
    if failed { every / 4 } else { every }
}

/// What the acquire saw.
pub(crate) struct Acquired<'a> {
    /// The lock, if this attempt won it; `None` when another holder has it.
    pub(crate) held: Option<HeldLock<'a>>,
    /// The value key's bytes (at most `max_bytes + 1`), read after the `SET NX`.
    pub(crate) value: Option<Vec<u8>>,
}

/// A regeneration lock this process won: the id's keys, the token that names this hold, and the
/// lock's ttl. Only a `HeldLock` can extend, write under or release a lock, and each of those
/// steps is token-checked on Valkey: once the lock is another's (it expired and was taken, or a
/// `put` or `invalidate` dropped it), nothing here touches it.
pub(crate) struct HeldLock<'a> {
    l2: &'a L2,
    names: &'a KeyNames,
    token: String,
    ttl_ms: u64,
    /// When the acquire was sent: no write that dropped this hold can have begun before then.
    sent_at: Instant,
}

/// How a put ended on Valkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// The value is stored, stamped with Valkey's clock then (unix ms; none for a `DEL`).
    Written { at_ms: Option<u64> },
    /// A newer value is stored: nothing written.
    Superseded,
    /// It arrived after its deadline: nothing written.
    TooLate,
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

/// How a reloader's renewal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// The copy's life is restamped (or the copy deleted), and the lock released.
    Done,
    /// The lock no longer holds this attempt's token: nothing done.
    NotOurs,
    /// The copy is no longer on Valkey (its stale window ended, or it was evicted): nothing
    /// done, and the lock is still this attempt's.
    CopyLeft,
}

/// `SET lock token NX PX lock_ttl` with a new token, then a bounded read of the value, atomically.
pub(crate) async fn acquire_or_read<'a>(
    l2: &'a L2,
    names: &'a KeyNames,
    lock_ttl_ms: u64,
    max_bytes: usize,
) -> Result<Acquired<'a>> {
    let token = new_token();
    let sent_at = Instant::now();
    let mut inv = SCRIPTS.acquire_or_read.prepare_invoke();
    inv.key(&names.value)
        .key(&names.lock)
        .arg(&token)
        .arg(lock_ttl_ms)
        .arg(max_bytes);
    let (won, value): (i64, Option<Vec<u8>>) =
        l2.script("acquire (SET lock NX PX)", names, inv).await?;
    let held = (won == 1).then_some(HeldLock {
        l2,
        names,
        token,
        ttl_ms: lock_ttl_ms,
        sent_at,
    });
    Ok(Acquired {
        held,
        value: value.filter(|v| !v.is_empty()),
    })
}

impl HeldLock<'_> {
    /// When the acquire that won this hold was sent: a write that dropped the hold began after
    /// it, so it cannot be older than a read begun before then.
    pub(crate) fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// The key names of the id this hold is on, and the connection it was won on.
    pub(crate) fn on(&self) -> (&KeyNames, &L2) {
        (self.names, self.l2)
    }

    /// The lease: `PEXPIRE lock lock_ttl` if the lock still holds the token. `Ok(false)`: not
    /// ours. `SET lock token IFEQ token PX lock_ttl` where the server has it
    /// ([`crate::wire::natives`]).
    pub(crate) async fn extend(&self) -> Result<bool> {
        let (l2, names, token, lock_ttl_ms) = (self.l2, self.names, &self.token, self.ttl_ms);
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

    /// Writes `envelope` with a physical life of `px` ms if the lock still holds the token and no
    /// newer value is stored (here or in `others`, the other live schemas' value and lock keys,
    /// whose older copies it drops), and releases the lock if it holds the token (written or
    /// superseded).
    pub(crate) async fn write(
        &self,
        envelope: Vec<u8>,
        px: u64,
        others: &[Vec<u8>],
    ) -> Result<Fenced> {
        let (l2, names, token) = (self.l2, self.names, &self.token);
        let mut inv = SCRIPTS.fenced_write.prepare_invoke();
        inv.key(&names.value).key(&names.lock);
        for key in others {
            inv.key(key);
        }
        inv.arg(token).arg(envelope).arg(px);
        let written: i64 = l2.script("fenced write", names, inv).await?;
        Ok(match written {
            1 => Fenced::Written,
            -1 => Fenced::Superseded,
            _ => Fenced::NotOurs,
        })
    }

    /// The reloader's answer for the copy written at `written_at_ms`: renew its life (`Some(fresh)`:
    /// fresh for that long, kept `px` ms) or delete it (`None`), fenced by the token, releasing the
    /// lock. [`Renewed::CopyLeft`] releases nothing.
    pub(crate) async fn renew(
        &self,
        written_at_ms: u64,
        life: Option<(u64, u64)>,
    ) -> Result<Renewed> {
        let (l2, names, token) = (self.l2, self.names, &self.token);
        let mut inv = SCRIPTS.renew.prepare_invoke();
        inv.key(&names.value)
            .key(&names.lock)
            .arg(token)
            .arg(written_at_ms.to_le_bytes().to_vec());
        match life {
            Some((fresh_ms, px)) => inv.arg(fresh_ms).arg(px),
            None => inv.arg("gone").arg(0),
        };
        let renewed: i64 = l2
            .script("renew (SETRANGE life, PEXPIRE)", names, inv)
            .await?;
        Ok(match renewed {
            1 => Renewed::Done,
            -1 => Renewed::CopyLeft,
            _ => Renewed::NotOurs,
        })
    }

    /// The source said the row is gone: delete the copy and release the lock, if the lock still
    /// holds the token. `Ok(false)`: not ours (a write dropped it, and its value stands).
    pub(crate) async fn delete_copy(&self) -> Result<bool> {
        let (l2, names, token) = (self.l2, self.names, &self.token);
        let mut inv = SCRIPTS.fenced_delete.prepare_invoke();
        inv.key(&names.value).key(&names.lock).arg(token);
        let deleted: i64 = l2.script("fenced delete", names, inv).await?;
        Ok(deleted == 1)
    }

    /// The token-checked release. `Ok(false)`: the lock was no longer this token's; nothing
    /// deleted. `DELIFEQ lock token` where the server has it ([`crate::wire::natives`]), the
    /// seed's script otherwise.
    pub(crate) async fn release(&self) -> Result<bool> {
        let (l2, names, token) = (self.l2, self.names, &self.token);
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

    /// A release that failed (the connection reset, the breaker open), tried again in the
    /// background until it lands or the lock's `PX` would have ended it anyway. Left to its
    /// `PX`, the lock would hold every reader of the id that long after a blip (`lock_ttl`, 5 s
    /// by default) for a flight that is over. Token-checked like every release: it never deletes
    /// another holder's lock.
    pub(crate) fn release_later(&self) {
        release_later(self.l2, self.names, &self.token, self.ttl_ms);
    }
}

/// [`HeldLock::release_later`] for the lock `token` holds on `names` (a batch member's, whose
/// write-many, which releases with the write, failed).
pub(crate) fn release_later(l2: &L2, names: &KeyNames, token: &str, ttl_ms: u64) {
    let under_way = std::sync::Arc::clone(l2.under_way());
    let (l2, names, token) = (l2.clone(), names.clone(), token.to_owned());
    let lasting = (std::time::Duration::from_millis(ttl_ms), &under_way);
    crate::wire::retry::in_background(lasting, RELEASE_RETRY, move || {
        let (l2, names, token) = (l2.clone(), names.clone(), token.clone());
        async move {
            let held = HeldLock {
                l2: &l2,
                names: &names,
                token,
                ttl_ms,
                sent_at: Instant::now(),
            };
            held.release().await.is_ok()
        }
    });
}

/// The first pause before a failed release is tried again, and the longest.
const RELEASE_RETRY: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(20),
    std::time::Duration::from_millis(250),
);

/// Write-through unless a newer value is stored or the put arrives after its deadline (the
/// server's time as estimated when sent, plus the timeout its caller waits: [`ServerClock`]);
/// drops the lock when it writes. The reply's server time refreshes the estimate.
///
/// [`ServerClock`]: crate::wire::server_clock::ServerClock
pub(crate) async fn versioned_put(
    l2: &L2,
    names: &KeyNames,
    envelope: Vec<u8>,
    px: u64,
) -> Result<Put> {
    let clock = l2.clock();
    let sent = clock.send();
    let mut inv = SCRIPTS.put.prepare_invoke();
    for key in names.all() {
        inv.key(key);
    }
    inv.arg(envelope).arg(px).arg(clock.deadline(l2.timeout()));
    let (written, server_ms): (i64, u64) = l2
        .script("put (SET value unless newer, DEL lock)", names, inv)
        .await?;
    clock.read(sent, server_ms);
    Ok(match written {
        1 => Put::Written {
            at_ms: Some(server_ms),
        },
        0 => Put::Superseded,
        _ => Put::TooLate,
    })
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
                Err(e) if crate::wire::natives::is_unsupported(&e) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?;
    if answer.is_none() {
        lose(l2.natives());
    }
    Ok(answer)
}
