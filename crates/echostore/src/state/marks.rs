//! A table's marks: the generation at which it was last cleared and at which each tag was last
//! invalidated, and the one rule that makes a copy written before either a miss.
//!
//! **On Valkey** the marks are one sorted set per table, `<table>:{}marks` (member `clear` or
//! `tag:<tag>`, score the generation), written only by [`crate::wire::scripts::MARK_SCRIPT`]. A
//! generation is the server's clock in µs, raised above every mark already set: it only grows,
//! and a Valkey that restarts empty (losing its marks with its copies) still hands out
//! generations above those processes remember. The set sits under the table's tracked prefix, so
//! every process of the table is pushed an invalidation when it changes.
//!
//! **In each process** [`Marks`] is a copy of that set, read in full when the table starts and
//! whenever tracking is lost or regained, and read from its latest generation onward when a push
//! says it changed; what is read only ever raises a mark known here. Every write is stamped with [`Marks::stamp`], the latest generation this
//! process knows, taken before the data written is read (before the lock attempt of a fill, at
//! the call of a `put`). A copy read back is **current** unless a mark above its stamp names the
//! table (`clear`) or one of its tags ([`Marks::is_current`]); a copy that is not current is a
//! miss, never a stale copy to serve. A process that has not yet heard of a mark stamps below it,
//! so what it writes meanwhile is a miss to those that have: an extra load, never an old value.
//!
//! **A read that fails is owed.** A process that may have missed a push of the marks key (its
//! tracking connection came back, its owner restarted, the table started) reads them in full; a
//! read that fails there (Valkey's data path still away while tracking is back), or a read after
//! a push that fails, leaves a full read owed ([`Marks::owes_full_read`]), retried at once, then
//! every 10 ms, 20 ms, … up to `unconfirmed_l1_life`, until one lands. Meanwhile copies are judged
//! by the marks known, as while tracking is down: a mark missed then is heard within that bound
//! once Valkey answers. (Taking every copy for a miss meanwhile was tried: in a cluster failing
//! over, each store then reloaded ids whose fresh copies the failover had not touched, for up to
//! a second after it healed.)
//!
//! **What Valkey lost is put back.** A full read that finds fewer marks than this process knew
//! when it sent the read (Valkey came back empty, or a replica that had not received them took
//! over) puts back the missing ones ([`crate::wire::scripts::PUT_BACK_MARKS_SCRIPT`], never lowering a mark): a mark
//! one process heard and another missed just before the loss would otherwise divide them until
//! the table's next mark, the second stamping below it, each of its copies a miss to the first.
//! A read above the latest known mark also asks for that mark's member: gone or lower (the key
//! evicted or deleted alone), the marks are read in full, and so put back, at once.
//!
//! This state lives in the table's shared core, not in the owner, so an owner that crashes loses
//! none of it. What a mark drops from L1 and which flights it overtakes is the owner's part
//! (`OwnerMsg::Marked`), ordered with its other changes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::valkey::envelope::Marking;
use crate::valkey::l2::L2;
use crate::wire::scripts::SCRIPTS;

/// The member of a table's marks that records its last clear.
const CLEAR: &str = "clear";
/// What precedes a tag in the member that records its last invalidation.
const TAG: &str = "tag:";
/// The longest tag accepted, in bytes.
pub const MAX_TAG_BYTES: usize = 1024;
/// The most marks a table keeps on Valkey: past it, the oldest half of its tags is folded into a
/// clear ([`crate::wire::scripts::MARK_SCRIPT`]), so the key, and each process's copy of it, stay
/// bounded however many distinct tags are invalidated.
pub(crate) const MAX_MARKS: usize = 4096;
/// How far ahead of the server's clock a mark may be and still be believed (planted bytes are
/// not allowed to make every later invalidation a no-op).
const MAX_AHEAD_US: u64 = 300_000_000;

/// A table's marks as this process knows them.
pub(crate) struct Marks {
    /// The latest generation known: a write stamped at or above it is current whatever it
    /// carries, without a look at the rest.
    latest: AtomicU64,
    view: RwLock<View>,
    /// The marks' key on Valkey.
    key: Vec<u8>,
    /// How long a tag's mark is kept on Valkey, µs (`0`: until the next clear).
    keep_us: u64,
    /// Reads of the marks that failed, so far.
    failed: AtomicU64,
    /// The count of `failed` when the last full read that landed began: behind `failed`, a mark
    /// may be set that this process has not heard of.
    answered: AtomicU64,
    /// A task retries the owed read ([`Marks::claim_retries`]).
    retrying: AtomicBool,
    /// When the latest read of the marks that landed was sent, in coarse-clock ticks: a copy
    /// read after that is judged by every mark set before it.
    read_sent: AtomicU64,
    /// Pushes of the marks key received so far ([`Marks::pushed`]).
    pushes: AtomicU64,
    /// The count of `pushes` when the latest read of the marks that landed was sent: behind
    /// `pushes`, a mark Valkey has told this process of is not known here yet.
    heard: AtomicU64,
    /// One read at a time for the reads of a process behind on its pushes
    /// (`crate::state::heard_marks`), which share it.
    behind: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct View {
    latest: u64,
    /// A member whose mark is `latest`: while Valkey holds the marks this process knows, it
    /// holds this member at `latest` or above.
    latest_member: Vec<u8>,
    cleared: u64,
    tags: HashMap<String, u64>,
}

impl View {
    /// Drops the tags that no longer tell anything: those marked before the last clear (it covers
    /// them), and, when marks are kept for a while only (`timed`), those marked before `horizon`
    /// (no copy written before them can still be read). Past [`MAX_MARKS`] tags, the oldest half
    /// is folded into the clear, as on Valkey: L1 took each of them when it came, and a copy read
    /// later that any of them might cover is a miss.
    fn prune(&mut self, horizon: u64, timed: bool) {
        let last_clear = self.cleared;
        self.tags
            .retain(|_, g| *g > last_clear && (!timed || *g >= horizon));
        if self.tags.len() <= MAX_MARKS {
            return;
        }
        let mut generations: Vec<u64> = self.tags.values().copied().collect();
        generations.sort_unstable();
        let floor = generations[generations.len() / 2];
        self.cleared = self.cleared.max(floor);
        self.tags.retain(|_, g| *g > floor);
    }
}

/// What a change of the marks makes stale here: every entry, or those carrying one of the tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    Tags(HashSet<String>),
}

impl Marks {
    /// No marks yet, kept on Valkey under `key` for `keep` (`None`: until the next clear).
    pub(crate) fn new(key: Vec<u8>, keep: Option<Duration>) -> Self {
        Marks {
            latest: AtomicU64::new(0),
            view: RwLock::new(View::default()),
            key,
            keep_us: keep.map_or(0, |k| u64::try_from(k.as_micros()).unwrap_or(u64::MAX)),
            failed: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            retrying: AtomicBool::new(false),
            read_sent: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
            heard: AtomicU64::new(0),
            behind: tokio::sync::Mutex::new(()),
        }
    }

    /// Valkey pushed a change of the marks: until a read sent from now on lands, a mark may be
    /// set that this process was told of and does not know ([`Marks::push_unread`]).
    pub(crate) fn pushed(&self) {
        self.pushes.fetch_add(1, SeqCst);
    }

    /// `true` while a push of the marks has had no read sent after it land: what is stamped or
    /// judged meanwhile would miss a mark set before the caller began.
    pub(crate) fn push_unread(&self) -> bool {
        self.heard.load(SeqCst) < self.pushes.load(SeqCst)
    }

    /// `true` once a read of the marks sent at coarse-clock time `since` or later has landed.
    pub(crate) fn read_since(&self, since: u64) -> bool {
        self.read_sent.load(SeqCst) >= since
    }

    /// The one read at a time of a process behind on its pushes (`crate::state::heard_marks`).
    pub(crate) fn one_behind(&self) -> &tokio::sync::Mutex<()> {
        &self.behind
    }

    /// `true` if the caller is now the one task that retries an owed read, until
    /// [`Marks::end_retries`]: reads that fail meanwhile leave the retries to it.
    pub(crate) fn claim_retries(&self) -> bool {
        !self.retrying.swap(true, SeqCst)
    }

    /// The retrying task is done.
    pub(crate) fn end_retries(&self) {
        self.retrying.store(false, SeqCst);
    }

    /// A read of the marks failed: a full read begun from now on is owed.
    fn owe_full_read(&self) {
        self.failed.fetch_add(1, SeqCst);
    }

    /// `true` while a full read is owed: a read of the marks failed since the last full read that
    /// landed began.
    pub(crate) fn owes_full_read(&self) -> bool {
        self.answered.load(SeqCst) < self.failed.load(SeqCst)
    }

    /// The generation a write whose data is read from now on is stamped with.
    pub(crate) fn stamp(&self) -> u64 {
        self.latest.load(SeqCst)
    }

    /// `true` unless a mark above `marking`'s generation names the table or one of its tags.
    pub(crate) fn is_current(&self, marking: &Marking) -> bool {
        if marking.generation >= self.latest.load(SeqCst) {
            return true;
        }
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        marking.generation >= view.cleared
            && marking
                .tags
                .iter()
                .all(|tag| view.tags.get(tag).is_none_or(|&g| marking.generation >= g))
    }

    /// Takes in marks read from Valkey, each raising what is known (never lowering it: a read
    /// that started before a mark was set may arrive after it); returns what they make stale.
    fn merge(&self, read: &[(Vec<u8>, f64)], now_us: u64) -> Option<Scope> {
        let mut view = self.view.write().unwrap_or_else(PoisonError::into_inner);
        let (mut cleared, mut risen) = (false, HashSet::new());
        for &(ref member, score) in read {
            let Some(generation) = believable(score, now_us) else {
                tracing::warn!(score, "a mark ahead of the server's clock: ignored");
                continue;
            };
            match std::str::from_utf8(member) {
                Ok(CLEAR) if generation > view.cleared => {
                    view.cleared = generation;
                    cleared = true;
                }
                Ok(CLEAR) => {}
                Ok(member) if member.starts_with(TAG) => {
                    let tag = &member[TAG.len()..];
                    let mark = view.tags.entry(tag.to_owned()).or_default();
                    if generation > *mark {
                        *mark = generation;
                        risen.insert(tag.to_owned());
                    }
                }
                _ => {
                    let member = String::from_utf8_lossy(member);
                    tracing::warn!(%member, "not a mark: ignored");
                    continue;
                }
            }
            if generation > view.latest {
                view.latest = generation;
                view.latest_member.clone_from(member);
            }
        }
        view.prune(now_us.saturating_sub(self.keep_us), self.keep_us > 0);
        self.latest.store(view.latest, SeqCst);
        if cleared {
            return Some(Scope::All);
        }
        risen.retain(|tag| view.tags.contains_key(tag));
        (!risen.is_empty()).then_some(Scope::Tags(risen))
    }

    /// Reads the marks from Valkey: all of them (`full`), or those above the latest known. A read
    /// that fails leaves a full read owed; a full read that lands pays what was owed when it
    /// began.
    ///
    /// A read above the latest known also asks for the member that carries it: when Valkey no
    /// longer holds it there (the key evicted or deleted, a replica that missed it promoted), the
    /// marks are read in full at once, which puts back what Valkey lost. Without that, only a
    /// full read at a table's start or a tracking reconnection noticed the loss: every process
    /// that knew the marks went on judging by them while a newcomer, finding none, served the
    /// copies they retired.
    pub(crate) async fn refresh(&self, l2: &L2, full: bool) -> Result<Option<Scope>> {
        let failed_before = self.failed.load(SeqCst);
        let pushes_before = self.pushes.load(SeqCst);
        let sent = crate::clock::coarse_ticks();
        let (known, latest_member) = self.latest_known();
        let read = match self.read(l2, full, known, latest_member).await {
            Ok(read) => read,
            Err(e) => {
                self.owe_full_read();
                return Err(e);
            }
        };
        let (read, latest_score) = read;
        let now = now_us(l2.now_ms());
        if !full && self.lost_latest(&read, known, latest_score, now) {
            // Neither merged nor counted as a read that landed: the full read takes these marks
            // in with the rest and says what they make stale, or, failing, leaves a full read
            // owed that will.
            return Box::pin(self.refresh(l2, true)).await;
        }
        // Counted as landed once taken in, so that whoever sees it counted finds the marks.
        let landed = || {
            self.read_sent.fetch_max(sent, SeqCst);
            self.heard.fetch_max(pushes_before, SeqCst);
        };
        if !full {
            let scope = self.merge(&read, now);
            landed();
            return Ok(scope);
        }
        let (scope, lost) = self.take_in_full(&read, now, known);
        landed();
        self.answered.fetch_max(failed_before, SeqCst);
        if !lost.is_empty() {
            self.put_back(l2, &lost, read.is_empty()).await;
        }
        Ok(scope)
    }

    /// The latest mark known here, and a member that carries it.
    fn latest_known(&self) -> (u64, Vec<u8>) {
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        (view.latest, view.latest_member.clone())
    }

    /// One read of the marks: every one (`full`), or those above `known`, with the score of
    /// `latest_member` (the member that carries `known`) beside them.
    async fn read(
        &self,
        l2: &L2,
        full: bool,
        known: u64,
        latest_member: Vec<u8>,
    ) -> Result<(Vec<(Vec<u8>, f64)>, Option<f64>)> {
        let key = &self.key;
        let latest_member = &latest_member;
        l2.run("read the marks", None, |mut c| async move {
            let mut pipe = redis::pipe();
            if full {
                pipe.cmd("ZRANGE").arg(key).arg(0).arg(-1);
            } else {
                pipe.cmd("ZRANGEBYSCORE")
                    .arg(key)
                    .arg(format!("({known}"))
                    .arg("+inf");
            }
            pipe.arg("WITHSCORES");
            pipe.cmd("ZSCORE").arg(key).arg(latest_member);
            pipe.query_async(&mut c).await
        })
        .await
    }

    /// Whether Valkey lost the latest mark known here (`known`, its member's score now
    /// `latest_score`; `read`, the marks above it), where it should still hold it: a clear at or
    /// above it removes every tag's mark below it (and covers them), and a mark kept for a while
    /// only (`keep_us`) is let go with its key once the table has been quiet that long.
    fn lost_latest(
        &self,
        read: &[(Vec<u8>, f64)],
        known: u64,
        latest_score: Option<f64>,
        now_us: u64,
    ) -> bool {
        let missing = latest_score.is_none_or(|score| score < known as f64);
        let kept = self.keep_us == 0 || known.saturating_add(self.keep_us) > now_us;
        let cleared_since = read
            .iter()
            .any(|(member, score)| member == CLEAR.as_bytes() && *score >= known as f64);
        known > 0 && missing && kept && !cleared_since
    }

    /// Takes in a full read of the marks (`read`), sent when the latest mark known here was
    /// `known`: what it makes stale, and the marks this process still knows that Valkey lost.
    /// Judged after the merge has dropped what no longer tells anything, so a timed tag whose
    /// mark Valkey let expire is not put back.
    fn take_in_full(
        &self,
        read: &[(Vec<u8>, f64)],
        now_us: u64,
        known: u64,
    ) -> (Option<Scope>, Vec<(String, u64)>) {
        let scope = self.merge(read, now_us);
        (scope, self.lost_by(read, known))
    }

    /// The marks this process knows above what a full read found on Valkey (`read`), beyond its
    /// clear: those Valkey lost. Only a mark known when the read was sent (at or below `known`)
    /// can be: one heard while it was on its way (a push, this process's own `clear`) was set
    /// after the read ran, above every mark Valkey then held.
    fn lost_by(&self, read: &[(Vec<u8>, f64)], known: u64) -> Vec<(String, u64)> {
        let found: HashMap<&[u8], f64> = read.iter().map(|(m, g)| (m.as_slice(), *g)).collect();
        let below = |member: &str, g: u64| {
            g <= known && found.get(member.as_bytes()).is_none_or(|&f| f < g as f64)
        };
        let found_clear = found.get(CLEAR.as_bytes()).copied().unwrap_or(0.0);
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        let mut lost = Vec::new();
        if view.cleared > 0 && below(CLEAR, view.cleared) {
            lost.push((CLEAR.to_owned(), view.cleared));
        }
        for (tag, &g) in &view.tags {
            let member = format!("{TAG}{tag}");
            if g as f64 > found_clear && below(&member, g) {
                lost.push((member, g));
            }
        }
        lost
    }

    /// Puts back on Valkey the marks it lost (`lost`): every process then hears them, so none
    /// stamps its writes below a mark another knows (each such copy would be that other's miss,
    /// and one more source read, until the table's next mark). A put-back that fails is left to
    /// the next full read. `whole`: the marks key was gone, as it is once a table stays quiet
    /// for its keep (or Valkey was emptied), which is expected; a key that lost some marks only
    /// is not, and is logged as a warning.
    async fn put_back(&self, l2: &L2, lost: &[(String, u64)], whole: bool) {
        let mut invocation = SCRIPTS.put_back_marks.prepare_invoke();
        invocation.key(&self.key).arg(self.keep_us);
        for (member, generation) in lost {
            invocation.arg(member).arg(*generation);
        }
        let invocation = &invocation;
        let put: Result<i64> = l2
            .run("put back the marks", None, |mut c| async move {
                invocation.invoke_async(&mut c).await
            })
            .await;
        match put {
            Ok(_) if whole => {
                tracing::info!(key = %String::from_utf8_lossy(&self.key), marks = ?lost, latest = self.stamp(), "the table's marks key was gone (quiet for its keep, or Valkey emptied): put back what this process knew")
            }
            Ok(_) => {
                tracing::warn!(key = %String::from_utf8_lossy(&self.key), marks = ?lost, latest = self.stamp(), "Valkey had lost marks of the table: put back what this process knew")
            }
            Err(e) => tracing::debug!(error = %e, "putting back the marks failed"),
        }
    }

    /// A clear (`tags: None`) or an invalidation of `tags`: marked on Valkey when there is one
    /// (else here only), and taken in here before this returns.
    pub(crate) async fn mark(&self, l2: Option<&L2>, tags: Option<&[String]>) -> Result<Scope> {
        let members: Vec<String> = match tags {
            None => vec![CLEAR.to_owned()],
            Some(tags) => tags.iter().map(|tag| format!("{TAG}{tag}")).collect(),
        };
        let scope = match tags {
            None => Scope::All,
            Some(tags) => Scope::Tags(tags.iter().cloned().collect()),
        };
        match l2 {
            Some(l2) => {
                let mut invocation = SCRIPTS.mark.prepare_invoke();
                invocation
                    .key(&self.key)
                    .arg(self.keep_us)
                    .arg(self.stamp())
                    .arg(MAX_MARKS);
                for member in &members {
                    invocation.arg(member);
                }
                let invocation = &invocation;
                let above: Vec<(Vec<u8>, f64)> = l2
                    .run("mark", None, |mut c| async move {
                        invocation.invoke_async(&mut c).await
                    })
                    .await?;
                let _ = self.merge(&above, now_us(l2.now_ms()));
            }
            None => {
                let now = now_us(crate::wire::server_clock::wall_ms());
                let generation = now.max(self.stamp() + 1);
                let marked: Vec<_> = members
                    .into_iter()
                    .map(|m| (m.into_bytes(), generation as f64))
                    .collect();
                let _ = self.merge(&marked, generation);
            }
        }
        Ok(scope)
    }
}

/// A mark's score as a generation, unless it is no generation or lies further ahead of the
/// server's clock than any honest mark.
fn believable(score: f64, now_us: u64) -> Option<u64> {
    let ok = score.is_finite() && score >= 0.0 && score <= (now_us + MAX_AHEAD_US) as f64;
    ok.then_some(score as u64)
}

fn now_us(now_ms: u64) -> u64 {
    now_ms.saturating_mul(1000)
}

/// Checks a tag given to `invalidate_tag` or returned by `.tags`.
pub(crate) fn validate_tag(tag: &str) -> Result<()> {
    if tag.len() > MAX_TAG_BYTES {
        return Err(Error::InvalidName(format!(
            "a tag of {} bytes (at most {MAX_TAG_BYTES})",
            tag.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
