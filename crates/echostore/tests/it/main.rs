//! EchoStore's integration tests, one binary (`cargo test` links it once): each module is one
//! behaviour, named as the claim it proves, against real Valkey servers and clusters the tests
//! start (`embedded-valkey`). `common` holds what they share.
//!
//! The cluster and TLS suites need the `cluster` and `tls` features; the README's test command
//! (`cargo test --workspace --all-features`) turns them on. `on_a_cluster` runs the lock and
//! coherence suites a second time against a three-primary cluster.

mod common;

mod a_cluster_heals_after_a_primary_fails;
mod a_cold_miss_is_traced;
mod a_cold_miss_makes_three_round_trips;
mod a_crashed_owner_answers_stopped_and_restarts;
mod a_crashed_owner_leaves_l1_agreeing_with_valkey;
mod a_deleted_row_is_gone_everywhere;
mod a_dropped_store_lets_go_of_valkey;
mod a_dropped_tables_keys_are_no_longer_tracked;
mod a_failed_extension_keeps_the_lease;
mod a_failed_write_is_repaired_everywhere;
mod a_failing_or_hanging_batch_loader_never_holds_the_locks;
mod a_failing_or_hanging_loader_never_holds_the_lock;
mod a_failing_or_hanging_reloader_never_holds_the_lock;
mod a_key_its_parser_panics_on_keeps_coherence;
mod a_leaving_process_hands_its_locks_back;
mod a_load_slower_than_the_lock_is_the_one_source_read;
mod a_mark_heard_while_the_marks_cannot_be_read_is_taken;
mod a_million_key_storm_stays_bounded;
mod a_namespace_keeps_two_apps_apart;
mod a_pause_of_the_process_fails_no_call;
mod a_process_never_reads_back_in_time;
mod a_put_racing_a_foreign_write_leaves_no_stale_l1;
mod a_read_takes_effect_when_it_is_made;
mod a_ready_loader_answers_on_the_callers_task;
mod a_release_that_fails_is_tried_again;
mod a_reloader_renews_unchanged_values_in_place;
mod a_row_the_batch_loader_leaves_out_leaves_no_copy;
#[cfg(feature = "fault-injection")]
mod a_skewed_clock_changes_no_life;
mod a_slot_migration_delays_no_write;
mod a_source_budget_bounds_the_fleets_loads;
mod a_spent_source_budget_follows_the_loser_policy;
mod a_values_own_ttl_is_its_life_everywhere;
mod a_version_carried_between_replicas_is_read;
mod an_answer_kept_nowhere_retires_older_stale_copies;
mod an_audit_sees_stale_hits;
mod bad_input_gets_a_clear_error_and_loses_nothing;
mod batch_reads_across_processes;
mod batch_reads_and_gets_never_read_back_in_time;
mod batch_reads_load_each_id_once;
mod borrowed_keys_read_like_a_hashmap;
mod cancelled_callers_leave_the_flight_running;
mod concurrent_misses_read_the_source_once;
mod events_tell_what_happened;
mod expiry_is_jittered;
mod four_processes_read_the_source_once;
mod hostile_payloads_are_a_counted_miss;
mod hot_keys_are_refreshed_before_they_expire;
mod hung_loads_are_bounded;
mod idle_entries_leave_l1;
mod key_tracking_confirms_what_l1_keeps;
mod keys_and_envelopes_on_the_wire;
mod l1_answers_only_while_tracking_keeps_up;
mod l1_can_be_bounded_by_bytes;
#[cfg(feature = "moka")] // the test's blocked weigher must hold no lock a read needs
mod l1_is_vouched_for_once_pushes_are_applied;
mod l1_keeps_what_valkey_could_not_confirm_briefly;
mod l2_hits_are_read_on_the_callers_task;
mod loader_errors_of_any_type_come_back_typed;
mod loader_failures_reach_every_waiter;
mod lock_commands_are_native_where_the_server_has_them;
mod loser_policies;
mod losers_never_load_on_valkey_errors;
mod losers_wake_on_the_winners_write;
mod metrics_read_what_stats_reads;
mod misses_spread_over_sharded_owners;
#[cfg(feature = "fault-injection")]
mod newer_writes_win;
mod on_a_cluster;
mod one_source_read_per_expiry_across_stores;
mod peeks_never_load_nor_lock;
mod read_options_apply_to_one_call;
mod release_never_deletes_another_holders_lock;
mod schemas_run_side_by_side;
mod settings_that_would_overflow_are_refused;
mod stale_copies_are_served_only_within_their_window;
mod table_configuration_is_validated;
mod tags_and_clear_across_processes;
mod tags_and_clear_reach_every_process;
mod tracking_loss_flushes_and_recovers;
mod user_closures_that_panic_cost_one_value;
mod valkey_cluster_keeps_the_guarantees;
mod valkey_outages_degrade_to_l1_and_the_loader;
mod valkey_over_tls;
mod values_are_read_whatever_codec_wrote_them;
mod versions_from_the_source_order_writes;
mod writes_anywhere_reach_every_l1;
mod writes_during_a_fill;
mod writes_in_one_process_reach_every_other_l1;
