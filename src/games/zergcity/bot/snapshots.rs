//! Snapshots (see the bot's module docs, "Baselines"): FullSnapshot and DeltaSnapshot onto
//! the ring of baselines, opaque baselines, the byte budget, acks, and the reconnection a
//! first snapshot may plan.

use super::*;

impl ZergCityBot {
    pub(super) fn ack(&mut self, tick: u64) {
        self.newest = Some(tick);
        self.out.push_back(Out::Ack(tick));
    }

    pub(super) fn note_state(&mut self, now: Instant, rec: &mut Recorder) {
        if let Some(prev) = self.last_state_at.replace(now) {
            rec.record_snapshot_interarrival(now.saturating_duration_since(prev).as_micros() as u64);
        }
        rec.snapshots_applied += 1;
        // No lost snapshot is counted here: the rate reads what arrived.
        rec.snapshots_sent += 1;
    }

    pub(super) fn on_full(&mut self, now: Instant, tick: u64, data: &[u8], rec: &mut Recorder) {
        if !matches!(self.stage, Stage::AwaitFull | Stage::Playing) {
            rec.event("full_snapshot_unexpected");
            return;
        }
        let i = (tick as usize) % BASELINES;
        let parsed = world::parse_full_within(
            data,
            &mut self.ring[i],
            &mut self.terrain,
            MAX_TRACKED_ENTITIES,
        );
        match parsed {
            Ok(info) => {
                self.ring[i].tick = tick;
                self.opaque[i] = false;
                if info.meta.tick != tick {
                    rec.event("full_snapshot_tick_mismatch");
                }
                if info.skipped_components > 0 {
                    rec.events
                        .add("components_skipped", u64::from(info.skipped_components));
                }
            }
            Err(world::FullError::Foreign(reason)) => {
                // §5.1 frames the sections but does not define their contents: another
                // implementation's layout is not an error. The snapshot is kept as an opaque
                // baseline by its tick, acknowledged, and deltas onto it are checked against
                // §5.2 and acknowledged without their contents being applied.
                self.ring[i].tick = tick;
                self.opaque[i] = true;
                rec.events.add2("full_snapshot", "foreign_layout", 1);
                rec.events.add2("foreign_layout_reason", reason, 1);
            }
            Err(world::FullError::Malformed(reason) | world::FullError::TooLarge(reason)) => {
                self.valid[i] = false;
                rec.decode_error("full_snapshot", reason);
                self.enforce_budget(Some(i), rec);
                return;
            }
        }
        self.valid[i] = true;
        self.enforce_budget(Some(i), rec);
        // Delta loss counts target-tick gaps between deltas; the server sends none while this
        // snapshot is unacknowledged, so counting starts again from the next delta.
        self.last_delta_target = None;
        if self.fulls_this_session > 0 {
            rec.event("full_snapshot_fallbacks");
        }
        self.fulls_this_session += 1;
        if self.newest.is_none_or(|n| tick > n) {
            self.ack(tick);
        }
        self.note_state(now, rec);
        if self.stage == Stage::AwaitFull {
            self.stage = Stage::Playing;
            if let Some(start) = self.relink_started.take() {
                rec.record_extra(
                    "resync_us",
                    now.saturating_duration_since(start).as_micros() as u64,
                );
                self.reconnects_done += 1;
            }
            self.grid.begin(now, &self.me.params);
            if self.me.opts.chat_rate > 0.0 {
                let p = self.chat_timer.period();
                self.chat_timer
                    .start_at(now + p.mul_f64(self.me.rng.random::<f64>()));
            }
            self.plan_reconnect(now);
        }
    }

    /// A bot chosen by its seed drops once, `reconnect_after_ms` (plus up to as much again)
    /// after its first snapshot.
    pub(super) fn plan_reconnect(&mut self, now: Instant) {
        if self.reconnects_done > 0 || self.me.opts.reconnect_share <= 0.0 {
            return;
        }
        let coin = (splitmix(self.me.params.seed ^ 0x7e_c0) >> 11) as f64 / (1u64 << 53) as f64;
        if coin < self.me.opts.reconnect_share {
            let after = Duration::from_millis(self.me.opts.reconnect_after_ms);
            self.reconnect_at = Some(now + after + after.mul_f64(self.me.rng.random::<f64>()));
        }
    }

    pub(super) fn on_delta(
        &mut self,
        now: Instant,
        d: &codec::DeltaSnapshot<'_>,
        rec: &mut Recorder,
    ) {
        if self.stage != Stage::Playing {
            rec.event("baseline_misses");
            return;
        }
        self.count_delta(d.target_tick, rec);
        if self.newest.is_some_and(|n| d.target_tick <= n) {
            rec.event("delta_stale");
            return;
        }
        if d.target_tick <= d.base_tick {
            rec.decode_error("delta_snapshot", "target_not_after_base");
            return;
        }
        if !self.has_baseline(d.base_tick) {
            rec.event("baseline_misses");
            return;
        }
        let b = (d.base_tick as usize) % BASELINES;
        if self.opaque[b] {
            if let Err(reason) = world::check_delta(d.entity_count, d.component_count, d.payload) {
                rec.decode_error("delta_snapshot", reason);
                return;
            }
            rec.event("delta_applied_opaque");
            let t = (d.target_tick as usize) % BASELINES;
            self.ring[t].entities.clear();
            self.ring[t].tick = d.target_tick;
            self.valid[t] = true;
            self.opaque[t] = true;
            self.ack(d.target_tick);
            self.note_state(now, rec);
            return;
        }
        let mut skipped = 0;
        let applied = self.applier.apply(
            &self.ring[b],
            &mut self.work,
            (d.entity_count, d.component_count, d.payload),
            MAX_TRACKED_ENTITIES,
            &mut skipped,
        );
        self.applier.shrink_over(APPLIER_KEEP_BYTES);
        if let Err(reason) = applied {
            // Not acknowledged: the server's next delta is onto an older tick, or a
            // FullSnapshot once that ages.
            rec.decode_error("delta_snapshot", reason);
            self.work.entities.clear();
            self.enforce_budget(None, rec);
            return;
        }
        if skipped > 0 {
            rec.events.add("components_skipped", u64::from(skipped));
        }
        self.work.tick = d.target_tick;
        let t = (d.target_tick as usize) % BASELINES;
        std::mem::swap(&mut self.work, &mut self.ring[t]);
        self.valid[t] = true;
        self.opaque[t] = false;
        self.enforce_budget(Some(t), rec);
        self.ack(d.target_tick);
        self.note_state(now, rec);
    }

    /// Keep what the bot holds for states within `max_state_bytes`: free the vectors of ring
    /// slots that hold no baseline, then the spare world, then the baselines with the oldest
    /// ticks (`baseline_evicted`), never the newest applied one nor `keep` (just stored).
    pub(super) fn enforce_budget(&mut self, keep: Option<usize>, rec: &mut Recorder) {
        let size = std::mem::size_of::<world::Entity>();
        let held = |b: &Self| {
            let worlds: usize = b.ring.iter().map(|w| w.entities.capacity()).sum::<usize>()
                + b.work.entities.capacity();
            worlds * size + b.terrain.capacity() + b.applier.held_bytes()
        };
        let max = self.me.opts.max_state_bytes;
        if held(self) <= max {
            return;
        }
        for i in 0..BASELINES {
            if !self.valid[i] && Some(i) != keep {
                self.ring[i].entities = Vec::new();
            }
        }
        if held(self) > max {
            self.work.entities = Vec::new();
        }
        let newest = self.newest.map(|t| (t as usize) % BASELINES);
        while held(self) > max {
            let oldest = (0..BASELINES)
                .filter(|&i| self.valid[i] && Some(i) != keep && Some(i) != newest)
                .min_by_key(|&i| self.ring[i].tick);
            let Some(i) = oldest else { break };
            self.valid[i] = false;
            self.ring[i].entities = Vec::new();
            rec.event("baseline_evicted");
        }
    }

    /// Delta loss (§5.2: deltas at the tick rate, one per tick): the target ticks skipped
    /// between consecutive deltas since the last FullSnapshot, as `deltas_expected` /
    /// `deltas_missing`. Independent of the header sequence, so a server's pongs and acks do
    /// not dilute it. A delta older than the last one (reordered) is `delta_reordered`.
    pub(super) fn count_delta(&mut self, target: u64, rec: &mut Recorder) {
        match self.last_delta_target {
            Some(p) if target <= p => rec.event("delta_reordered"),
            Some(p) => {
                let gap = target - p - 1;
                // A jump beyond the ring's reach is a server pause, not a burst of loss.
                let gap = if gap > 10 * u64::from(self.tick_rate) {
                    0
                } else {
                    gap
                };
                rec.events.add("deltas_expected", gap + 1);
                rec.events.add("deltas_missing", gap);
                self.last_delta_target = Some(target);
            }
            None => {
                rec.events.add("deltas_expected", 1);
                self.last_delta_target = Some(target);
            }
        }
    }
}
