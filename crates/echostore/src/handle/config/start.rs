//! `build()`: every setting checked against its range (none can make later arithmetic
//! overflow), then the table's shared state built and its owner started.

use super::*;

impl<K: Key, V: Value> TableBuilder<K, V> {
    /// Checks the settings and starts the table's owner under the store's supervisor: the verb
    /// both builders finish with (`Store::builder()…build()`).
    ///
    /// Fails with [`Error::InvalidName`] for a name outside `[A-Za-z0-9_.-]{1,64}` and with
    /// [`Error::InvalidConfig`] for a missing loader or a setting out of its range.
    pub async fn build(mut self) -> Result<Table<K, V>> {
        validate_table_name(&self.name)?;
        let name = self.name.clone();
        let invalid = move |what: String| Error::InvalidConfig(format!("table {name:?}: {what}"));
        if self.loader.is_none() && self.batch_loader.is_none() {
            return Err(invalid("no loader (set loader or batch_loader)".into()));
        }
        self.check_durations().map_err(&invalid)?;
        let shards = self.check_ranges().map_err(&invalid)?;
        let l1_bound = self.l1_bound().map_err(&invalid)?;
        let store = self.store.clone();
        let core = self.into_core(l1_bound, shards);
        Table::start(store, core).await
    }

    /// The old name of [`build`](Self::build).
    #[deprecated(
        since = "0.1.0",
        note = "use `build()`, the verb both builders finish with"
    )]
    pub async fn start(self) -> Result<Table<K, V>> {
        self.build().await
    }

    /// L1's bound: a count of entries, or bytes as the weigher counts them.
    fn l1_bound(&mut self) -> std::result::Result<Bound<K, V>, String> {
        match (self.l1_capacity_bytes, self.l1_weigher.take()) {
            (None, None) => Ok(Bound::Entries(self.l1_capacity)),
            (Some(capacity), Some(weigher)) if capacity > 0 => {
                Ok(Bound::Bytes { capacity, weigher })
            }
            (Some(_), Some(_)) => Err("l1_capacity_bytes must be at least 1".into()),
            (Some(_), None) => Err("l1_capacity_bytes needs an l1_weigher to weigh entries".into()),
            (None, Some(_)) => {
                Err("l1_weigher needs l1_capacity_bytes, the bound it weighs against".into())
            }
        }
    }

    /// Every duration within [`MAX_DURATION`], so that no later arithmetic on it overflows.
    fn check_durations(&self) -> std::result::Result<(), String> {
        let durations = [
            ("ttl", Some(self.ttl)),
            ("stale_for", Some(self.stale_for)),
            ("lock_ttl", Some(self.lock_ttl)),
            ("load_timeout", self.load_timeout),
            ("soft_timeout", self.soft_timeout),
            ("l1_idle", self.l1_idle),
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
                return Err(format!(
                    "{setting} {value:?} is over the limit of {MAX_DURATION:?}"
                ));
            }
        }
        Ok(())
    }

    /// Every other setting within its range; the number of shards.
    fn check_ranges(&self) -> std::result::Result<usize, String> {
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
                self.source_budget != Some(0),
                "source_budget must be at least 1".into(),
            ),
            (
                self.audit_sample.is_none_or(|f| (0.0..=1.0).contains(&f)),
                "audit_sample must be within 0.0..=1.0".into(),
            ),
            (
                self.l1_idle
                    .is_none_or(|idle| idle >= Duration::from_millis(1)),
                "l1_idle must be at least 1 ms".into(),
            ),
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
        ];
        match checks.into_iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(what),
            None => self.check_timeouts().map(|()| shards),
        }
    }

    /// The timeouts and the poll interval: above zero, the soft one below the hard one.
    fn check_timeouts(&self) -> std::result::Result<(), String> {
        let checks = [
            (
                self.load_timeout.is_none_or(|t| !t.is_zero()),
                "load_timeout must be above zero",
            ),
            (
                self.soft_timeout.is_none_or(|soft| {
                    !soft.is_zero() && self.load_timeout.is_none_or(|hard| soft < hard)
                }),
                "soft_timeout must be above zero and below load_timeout",
            ),
            (
                !matches!(self.losers, LoserPolicy::Poll { every, .. } if every.is_zero()),
                "LoserPolicy::Poll needs every > 0",
            ),
        ];
        match checks.into_iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(what.into()),
            None => Ok(()),
        }
    }

    /// The table's shared state, from settings already checked.
    fn into_core(self, l1_bound: Bound<K, V>, shards: usize) -> TableCore<K, V> {
        let marks = crate::state::marks::Marks::new(
            crate::wire::key::marks_key_under(self.store.namespace(), &self.name),
            marks_kept_for(&self),
        );
        let events = Arc::new(crate::events::Events::new());
        let boards = crate::state::board::Boards::new(shards);
        TableCore {
            audit: self.audit_sample.map(crate::state::audit::Audit::new),
            name: Arc::from(self.name.as_str()),
            namespace: Arc::from(self.store.namespace()),
            l1: L1::new(self.l1_backend, l1_bound, self.l1_idle, &events),
            events,
            l2: self.store.l2().cloned(),
            schemas: Arc::new(crate::state::schemas::Schemas::new(
                self.store.namespace(),
                &self.name,
                self.schema,
            )),
            budget: self.source_budget.map(|limit| {
                let key = crate::state::budget::budget_key(self.store.namespace(), &self.name);
                crate::state::budget::Budget::new(key, limit, self.lock_ttl)
            }),
            stats: Stats::new(),
            tracker: self.store.tracker().cloned(),
            vouch: self
                .store
                .tracker()
                .map(|t| Arc::clone(t.vouch()))
                .unwrap_or_default(),
            unconfirmed_l1_life: self.store.unconfirmed_l1_life(),
            unsettled: crate::state::unsettled::Unsettled::new(boards.clone()),
            boards,
            marks,
            shards,
            owners: std::sync::OnceLock::new(),
            loader: self.loader,
            reloader: self.reloader,
            batch_loader: self.batch_loader,
            tags: self.tags,
            config: TableConfig {
                ttl: self.ttl,
                jitter: self.jitter,
                stale_for: self.stale_for,
                lock_ttl: self.lock_ttl,
                losers: self.losers.shared(),
                load_timeout: self.load_timeout,
                soft_timeout: self.soft_timeout,
                fail_safe: self.fail_safe,
                max_value_bytes: self.max_value_bytes,
                early_beta: self.early_refresh,
                version_by: self.version_by,
                has_none: crate::state::absence::absent::<V>().is_some(),
                ttl_for: self.ttl_for,
                l1_idle: self.l1_idle,
                coding: self.coding,
            },
        }
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
    let spread = Duration::try_from_secs_f64(longest.as_secs_f64() * (1.0 + builder.jitter))
        .unwrap_or(MAX_DURATION);
    Some(
        spread
            .saturating_add(builder.stale_for)
            .saturating_add(written_within),
    )
}
