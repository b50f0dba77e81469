//! `start()`: every setting checked against its range (none can make later arithmetic overflow),
//! then the table's shared state built and its owner started.

use super::*;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// Checks the settings and starts the table's owner under the store's supervisor.
    ///
    /// Fails with [`Error::InvalidName`] for a name outside `[A-Za-z0-9_.-]{1,64}` and with
    /// [`Error::InvalidConfig`] for a missing loader or a setting out of its range.
    pub async fn start(self) -> Result<Table<K, V>> {
        validate_table_name(&self.name)?;
        let marks_kept_for = marks_kept_for(&self);
        let invalid = |what: String| Error::InvalidConfig(format!("table {:?}: {what}", self.name));
        if self.loader.is_none() && self.batch_loader.is_none() {
            return Err(invalid("no loader (set loader or batch_loader)".into()));
        }
        let l1_bound = match (self.l1_capacity_bytes, self.l1_weigher) {
            (None, None) => Bound::Entries(self.l1_capacity),
            (Some(capacity), Some(weigher)) if capacity > 0 => Bound::Bytes { capacity, weigher },
            (Some(_), Some(_)) => {
                return Err(invalid("l1_capacity_bytes must be at least 1".into()));
            }
            (Some(_), None) => {
                return Err(invalid(
                    "l1_capacity_bytes needs an l1_weigher to weigh entries".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "l1_weigher needs l1_capacity_bytes, the bound it weighs against".into(),
                ));
            }
        };
        let durations = [
            ("ttl", Some(self.ttl)),
            ("stale_for", Some(self.stale_for)),
            ("lock_ttl", Some(self.lock_ttl)),
            ("load_timeout", self.load_timeout),
            ("soft_timeout", self.soft_timeout),
        ];
        let poll = match &self.losers {
            LoserPolicy::Poll { every, up_to } => {
                [("Poll.every", Some(*every)), ("Poll.up_to", Some(*up_to))]
            }
            _ => [("Poll.every", None), ("Poll.up_to", None)],
        };
        for (setting, value) in durations.into_iter().chain(poll) {
            if let Some(value) = value
                && value > MAX_DURATION
            {
                return Err(invalid(format!(
                    "{setting} {value:?} is over the limit of {MAX_DURATION:?}"
                )));
            }
        }
        let shards = self.shards.unwrap_or_else(sharding::default_shards);
        let checks = [
            (
                (1..=sharding::MAX_SHARDS).contains(&shards),
                format!("shards must be within 1..={}", sharding::MAX_SHARDS),
            ),
            (
                (0.0..=0.5).contains(&self.jitter),
                format!("jitter {} is outside 0.0..=0.5", self.jitter),
            ),
            (!self.ttl.is_zero(), "ttl must be above zero".into()),
            (
                (0.0..=MAX_EARLY_REFRESH_BETA).contains(&self.early_refresh),
                format!(
                    "early_refresh {} is outside 0.0..={MAX_EARLY_REFRESH_BETA}",
                    self.early_refresh
                ),
            ),
            (
                self.lock_ttl >= MIN_LOCK_TTL,
                format!("lock_ttl must be at least {MIN_LOCK_TTL:?}"),
            ),
            (
                (1..=MAX_L1_CAPACITY).contains(&self.l1_capacity),
                format!("l1_capacity must be within 1..={MAX_L1_CAPACITY}"),
            ),
            (
                (1..=MAX_VALUE_BYTES_LIMIT).contains(&self.max_value_bytes),
                format!("max_value_bytes must be within 1..={MAX_VALUE_BYTES_LIMIT}"),
            ),
            (
                self.load_timeout.is_none_or(|t| !t.is_zero()),
                "load_timeout must be above zero".into(),
            ),
            (
                self.soft_timeout.is_none_or(|soft| {
                    !soft.is_zero() && self.load_timeout.is_none_or(|hard| soft < hard)
                }),
                "soft_timeout must be above zero and below load_timeout".into(),
            ),
            (
                !matches!(self.losers, LoserPolicy::Poll { every, .. } if every.is_zero()),
                "LoserPolicy::Poll needs every > 0".into(),
            ),
        ];
        if let Some((_, what)) = checks.into_iter().find(|(ok, _)| !ok) {
            return Err(invalid(what));
        }
        let losers = self.losers.shared();
        let marks = crate::marks::Marks::new(
            crate::key::marks_key_under(self.store.namespace(), &self.name),
            marks_kept_for,
        );
        let core = TableCore {
            name: Arc::from(self.name.as_str()),
            namespace: Arc::from(self.store.namespace()),
            config: TableConfig {
                ttl: self.ttl,
                jitter: self.jitter,
                stale_for: self.stale_for,
                lock_ttl: self.lock_ttl,
                losers,
                load_timeout: self.load_timeout,
                soft_timeout: self.soft_timeout,
                fail_safe: self.fail_safe,
                max_value_bytes: self.max_value_bytes,
                early_beta: self.early_refresh,
                version_by: self.version_by,
                has_none: crate::delete::absent::<V>().is_some(),
                ttl_for: self.ttl_for,
            },
            l1: L1::new(self.l1_backend, l1_bound),
            unconfirmed: crate::l1::Unconfirmed::new(),
            l2: self.store.l2().cloned(),
            loader: self.loader,
            batch_loader: self.batch_loader,
            stats: Stats::new(shards),
            tracker: self.store.tracker().cloned(),
            unconfirmed_l1_life: self.store.unconfirmed_l1_life(),
            board: Arc::new(crate::board::Board::new()),
            unsettled: crate::unsettled::Unsettled::new(),
            tags: self.tags,
            marks,
            shards,
            owners: std::sync::OnceLock::new(),
        };
        Table::start(self.store, core).await
    }
}

/// How long Valkey keeps a tag's mark: past the longest a copy written before it can be read. A
/// copy is written at most a load's time (`load_timeout`, a day without one) and two lock lives
/// after the generation it is stamped with, and lives at most its ttl (or, with `.ttl_for`, the
/// longest any ttl may be), spread by the jitter, then its stale window.
fn marks_kept_for<K, V>(builder: &TableBuilder<K, V>) -> Option<Duration> {
    const NO_LOAD_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
    let longest = if builder.ttl_for.is_some() {
        MAX_DURATION
    } else {
        builder.ttl
    };
    let written_within = builder
        .load_timeout
        .unwrap_or(NO_LOAD_TIMEOUT)
        .saturating_add(builder.lock_ttl.saturating_mul(2));
    // Taken before the settings are checked: saturating, whatever they hold.
    let spread = Duration::try_from_secs_f64(longest.as_secs_f64() * (1.0 + builder.jitter))
        .unwrap_or(MAX_DURATION);
    Some(
        spread
            .saturating_add(builder.stale_for)
            .saturating_add(written_within),
    )
}
