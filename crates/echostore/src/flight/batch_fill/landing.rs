//! A loaded member's way through the write-many: before it, the envelope to write (or, for a
//! member that is not written — degraded, failed to encode, absent, its load failed — its landing
//! now); after it, the landing its write-many entry decides, with that entry's counters.

use std::sync::Arc;
use std::time::Duration;

use super::{BatchFill, Member};
use crate::error::{Error, Result};
use crate::fetched::Origin;
use crate::flight::batch_fill::on_valkey::Wrote;
use crate::flight::load::Load;
use crate::state::stale::{Filled, Landing, Signal};
use crate::state::stats::bump;
use crate::valkey::envelope;
use crate::valkey::l2::L2;
use crate::wire::key::{Key, Value};

impl<K: Key, V: Value> BatchFill<'_, K, V> {
    /// What a loaded member lands with before its write (`None`: it landed already), the
    /// envelope to write for it, and its value with its life.
    #[allow(clippy::type_complexity)]
    pub(super) fn prepare(
        &self,
        l2: &L2,
        m: &mut Member<K, V>,
        loaded: Option<Result<(V, Duration)>>,
    ) -> (
        Option<Result<Landing<V>>>,
        Option<Vec<u8>>,
        Option<(crate::state::core::Life, Arc<V>)>,
    ) {
        if !m.load {
            return (None, None, None); // an L2 hit (its won lock is released with the writes)
        }
        match loaded.unwrap_or(Err(Error::Absent)) {
            Ok((value, delta)) => {
                let life = self.core.loaded_life(&value, delta);
                let value = Arc::new(value);
                if m.degraded {
                    let repair = self.core.load_repair(Some(&*value));
                    self.core
                        .unsettled
                        .mark(m.id.clone(), m.names.clone(), repair, l2);
                    let entry = life.entry(Arc::clone(&value));
                    let landing = Landing::Filled(Filled::fresh(entry, Origin::Loaded))
                        .capped(self.core.unconfirmed_l1_life);
                    return (Some(Ok(landing)), None, None);
                }
                let encoded = self
                    .core
                    .marking(&m.id, &value, m.stamp())
                    .and_then(|marking| life.encode(&*value, &self.core.config, &marking));
                match encoded {
                    Ok(bytes) => {
                        self.report.signal(
                            &m.id,
                            m.flight,
                            Signal::Writing(envelope::fingerprint(&bytes)),
                        );
                        (None, Some(bytes), Some((life, value)))
                    }
                    Err(e) => (Some(Err(e)), None, None),
                }
            }
            // Gone: its copy goes with the lock, or, degraded, before Valkey is trusted again.
            Err(e) if e.is_absent() => {
                m.gone = true;
                if m.degraded {
                    let (id, names) = (m.id.clone(), m.names.clone());
                    let repair = self.core.load_repair(None);
                    self.core.unsettled.mark(id, names, repair, l2);
                }
                (Some(Err(e)), None, None)
            }
            // A failed load's fail-safe waits for its release ([`BatchFill::fail_safe`]).
            Err(e) => (Some(Err(e)), None, None),
        }
    }

    /// Fail-safe for the members whose load failed (`failed[i]`: whether the write-many's release
    /// found the lock still theirs), as the single fill: a stale copy answers only if the lock
    /// was still the member's, so that no put or invalidate replaced the copy meanwhile.
    pub(super) fn fail_safe(
        &self,
        members: &mut [Member<K, V>],
        landings: &mut [Option<Result<Landing<V>>>],
        failed: &[Option<bool>],
    ) {
        for ((m, landing), ours) in members.iter_mut().zip(landings).zip(failed) {
            let (Some(ours), Some(Err(_))) = (*ours, &*landing) else {
                continue;
            };
            let Some(Err(e)) = landing.take() else {
                continue;
            };
            let load = Load::new(self.core, &m.id, &|_| {});
            let stale = m.stale.take().filter(|_| ours);
            *landing = Some(load.fail_safe(e, stale, ours).map(Landing::Filled));
        }
    }

    /// A member whose envelope (announced with [`Signal::Writing`]) changed no value key, or
    /// whose write failed: its owner expects no push of it.
    pub(super) fn not_written(&self, m: &Member<K, V>, envelope: Option<&[u8]>) {
        if let Some(bytes) = envelope {
            let fingerprint = envelope::fingerprint(bytes);
            self.report
                .signal(&m.id, m.flight, Signal::NotWritten(fingerprint));
        }
    }

    /// A member whose write-many failed, so that whether it ran is unknown: as the single fill's
    /// (`Fill::unknown_fate`), its row is kept for the unconfirmed life only, and the id is marked
    /// unsettled, so that Valkey's copy, which may be older than the row (or of a row gone), is
    /// deleted before this process trusts it again.
    pub(super) fn unknown_fate(
        &self,
        l2: &L2,
        m: &Member<K, V>,
        landing: Result<Landing<V>>,
    ) -> Result<Landing<V>> {
        let row = match &landing {
            Ok(Landing::Filled(f)) => Some(&*f.fetched.value),
            _ => None,
        };
        let repair = self.core.load_repair(row);
        self.core
            .unsettled
            .mark(m.id.clone(), m.names.clone(), repair, l2);
        landing.map(|landing| landing.capped(self.core.unconfirmed_l1_life))
    }

    /// A member's landing once its write-many entry ended (`None`: it landed before);
    /// `written_as`, the fingerprint of its envelope.
    pub(super) fn written(
        &self,
        wrote: Result<Wrote, &Error>,
        life: &mut Option<(crate::state::core::Life, Arc<V>)>,
        written_as: Option<envelope::Fingerprint>,
    ) -> Option<Result<Landing<V>>> {
        let counters = &self.core.stats.counters;
        let (life, value) = match life.take() {
            Some(loaded) => loaded,
            None => {
                match wrote {
                    Ok(Wrote::Released | Wrote::Superseded) => bump(&counters.released),
                    Ok(Wrote::NotOurs) => bump(&counters.release_skipped),
                    _ => bump(&counters.l2_errors),
                }
                return None;
            }
        };
        // Counted as the single fill's fenced write counts them (`Fill::write_fenced`).
        let filled = match wrote {
            Ok(Wrote::Written) => {
                bump(&counters.released);
                Filled::fresh(life.entry(value), Origin::Loaded).made_from(written_as)
            }
            Ok(Wrote::NotOurs) => {
                bump(&counters.fenced_write_skipped);
                bump(&counters.release_skipped);
                Filled::answer_only(value, Origin::Loaded)
            }
            Ok(Wrote::Superseded) => {
                bump(&counters.writes_superseded);
                bump(&counters.released);
                tracing::debug!(table = %self.core.name, "batch write of a member superseded: a newer copy is stored");
                Filled::answer_only(value, Origin::Loaded)
            }
            // A write that failed may or may not have landed: the caller caps what L1 keeps of
            // it and marks the id unsettled (`BatchFill::unknown_fate`).
            Err(_) => {
                bump(&counters.l2_errors);
                Filled::fresh(life.entry(value), Origin::Loaded)
            }
            // Nothing was written for a member that had a row to write: not reached.
            Ok(Wrote::Released) => {
                bump(&counters.l2_errors);
                Filled::answer_only(value, Origin::Loaded)
            }
        };
        Some(Ok(Landing::Filled(filled)))
    }
}
