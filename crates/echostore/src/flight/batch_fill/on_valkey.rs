//! A batch's round trips to Valkey: ids grouped so that each group's keys may go in one command
//! (every id on one server; the ids of one hash slot on a cluster; a few hundred at most), and for
//! each group one pipelined read of the values (`GETRANGE`, bounded as a single read's),
//! one acquire-many, one poll-many and one lease (extend-many) for the ids it lost or won, and
//! one write-many ([`crate::wire::scripts`]).

use crate::error::Result;
use crate::valkey::l2::L2;
use crate::wire::key::KeyNames;
use crate::wire::scripts::SCRIPTS;

/// The most ids one command carries. A script runs alone on its server, and a large one would
/// hold up every other client's commands (and its own reply would outlast `valkey_timeout`): a
/// batch of many thousand ids goes as several commands, sent at once.
pub(crate) const MAX_GROUP: usize = 512;

/// Indices of `names` grouped so that each group's keys may be sent in one command: every id on
/// one server, the ids of one hash slot on a cluster, at most [`MAX_GROUP`] in a group.
pub(crate) fn groups(l2: &L2, names: &[&KeyNames]) -> Vec<Vec<usize>> {
    let groups = if l2.is_cluster() {
        slot_groups(names)
    } else {
        vec![(0..names.len()).collect()]
    };
    groups
        .into_iter()
        .flat_map(|group| {
            group
                .chunks(MAX_GROUP)
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(feature = "cluster")]
fn slot_groups(names: &[&KeyNames]) -> Vec<Vec<usize>> {
    let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
    for (i, n) in names.iter().enumerate() {
        by_slot.entry(n.slot()).or_default().push(i);
    }
    by_slot.into_values().collect()
}

#[cfg(not(feature = "cluster"))]
fn slot_groups(names: &[&KeyNames]) -> Vec<Vec<usize>> {
    (0..names.len()).map(|i| vec![i]).collect()
}

/// One group's values, each read as a single read reads it (`GETRANGE <key> 0 <max_bytes>`: at
/// most one byte over the table's limit, however large the stored value; `MGET` has no bound),
/// pipelined in one round trip: each value, `None` when missing, empty or not a string. A
/// pipeline costs Valkey less than the same reads in a script, and unlike a script it is not
/// held up by `CLIENT PAUSE WRITE`.
pub(crate) async fn read_values(
    l2: &L2,
    group: &[&KeyNames],
    max_bytes: usize,
) -> Result<Vec<Option<Vec<u8>>>> {
    let Some(first) = group.first() else {
        return Ok(Vec::new());
    };
    let values: Vec<redis::RedisResult<Vec<u8>>> = l2
        .run("GETRANGE values", Some(first), |mut c| async move {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for n in group {
                pipe.cmd("GETRANGE").arg(&n.value).arg(0).arg(max_bytes);
            }
            pipe.query_async(&mut c).await
        })
        .await?;
    Ok(values
        .into_iter()
        .map(|v| v.ok().filter(|b| !b.is_empty()))
        .collect())
}

/// What the acquire-many saw for one id.
pub(crate) struct Acquired {
    pub(crate) won: bool,
    pub(crate) value: Option<Vec<u8>>,
}

/// One group's acquire-or-read: for each id (with its `token`), `SET lock NX PX` and its value.
pub(crate) async fn acquire_many(
    l2: &L2,
    group: &[(&KeyNames, &str)],
    lock_ttl_ms: u64,
    max_bytes: usize,
) -> Result<Vec<Acquired>> {
    let Some((first, _)) = group.first() else {
        return Ok(Vec::new());
    };
    let mut inv = SCRIPTS.acquire_many.prepare_invoke();
    inv.arg(lock_ttl_ms).arg(max_bytes);
    for (names, token) in group {
        inv.key(&names.value).key(&names.lock).arg(*token);
    }
    let flat: Vec<redis::Value> = l2.script("acquire many", first, inv).await?;
    let mut out = Vec::with_capacity(group.len());
    let mut items = flat.into_iter();
    while let (Some(won), Some(value)) = (items.next(), items.next()) {
        let won = matches!(won, redis::Value::Int(1));
        let value = match value {
            redis::Value::BulkString(bytes) if !bytes.is_empty() => Some(bytes),
            _ => None,
        };
        out.push(Acquired { won, value });
    }
    Ok(out)
}

/// One group's look while it waits for another process's write: for each id, the value (`None`
/// when missing or empty) and whether its lock is still held.
pub(crate) async fn poll_many(
    l2: &L2,
    group: &[&KeyNames],
    max_bytes: usize,
) -> Result<Vec<(Option<Vec<u8>>, bool)>> {
    let Some(first) = group.first() else {
        return Ok(Vec::new());
    };
    let mut inv = SCRIPTS.poll_many.prepare_invoke();
    inv.arg(max_bytes);
    for names in group {
        inv.key(&names.value).key(&names.lock);
    }
    let flat: Vec<redis::Value> = l2.script("poll many", first, inv).await?;
    let mut out = Vec::with_capacity(group.len());
    let mut items = flat.into_iter();
    while let (Some(value), Some(locked)) = (items.next(), items.next()) {
        let value = match value {
            redis::Value::BulkString(bytes) if !bytes.is_empty() => Some(bytes),
            _ => None,
        };
        out.push((value, matches!(locked, redis::Value::Int(1))));
    }
    Ok(out)
}

/// One group's lease: each lock that still holds its token lives `lock_ttl_ms` more; `true`
/// for each lock extended.
pub(crate) async fn extend_many(
    l2: &L2,
    group: &[(&KeyNames, &str)],
    lock_ttl_ms: u64,
) -> Result<Vec<bool>> {
    let Some((first, _)) = group.first() else {
        return Ok(Vec::new());
    };
    let mut inv = SCRIPTS.extend_many.prepare_invoke();
    inv.arg(lock_ttl_ms);
    for (names, token) in group {
        inv.key(&names.lock).arg(*token);
    }
    let extended: Vec<i64> = l2.script("lease many", first, inv).await?;
    Ok(extended.into_iter().map(|e| e == 1).collect())
}

/// How one id's write-many entry ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrote {
    /// Stored, lock released.
    Written,
    /// Released; there was nothing to write.
    Released,
    /// The lock no longer held the token: nothing done.
    NotOurs,
    /// A newer value is stored: released, nothing written.
    Superseded,
}

/// One id's entry of a write-many: its lock's token, what becomes of its copy, and the other
/// live schemas' value and lock keys of the id (a newer copy there refuses the write, which
/// drops the older ones).
pub(crate) struct ToWrite<'a> {
    pub(crate) names: &'a KeyNames,
    pub(crate) token: &'a str,
    pub(crate) fate: Fate<'a>,
    pub(crate) others: Vec<Vec<u8>>,
}

/// What a write-many does to one id's copy under its lock.
pub(crate) enum Fate<'a> {
    /// Writes `envelope`, with a physical life of `px` ms.
    Write { envelope: &'a [u8], px: u64 },
    /// Leaves it: a release only.
    Leave,
    /// Deletes it: the source said the row is gone.
    Delete,
}

/// One group's fenced writes and releases, in one script.
pub(crate) async fn write_many(l2: &L2, group: &[ToWrite<'_>]) -> Result<Vec<Wrote>> {
    let Some(first) = group.first() else {
        return Ok(Vec::new());
    };
    let mut inv = SCRIPTS.write_many.prepare_invoke();
    for w in group {
        inv.key(&w.names.value).key(&w.names.lock);
        for key in &w.others {
            inv.key(key);
        }
        inv.arg(w.token);
        match w.fate {
            Fate::Write { envelope, px } => inv.arg(envelope).arg(px),
            Fate::Leave => inv.arg("").arg(1),
            Fate::Delete => inv.arg("").arg("gone"),
        };
        inv.arg(w.others.len() / 2);
    }
    let codes: Vec<i64> = l2.script("write many", first.names, inv).await?;
    Ok(codes
        .into_iter()
        .map(|code| match code {
            1 => Wrote::Written,
            2 => Wrote::Released,
            -1 => Wrote::Superseded,
            _ => Wrote::NotOurs,
        })
        .collect())
}
