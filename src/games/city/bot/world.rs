//! The world as the bot knows it: FullState, spawns, the start of play, and each DeltaState
//! (tick accounting, the own entity's reconciliation, the remote entities' samples).

use super::*;

impl CityBot {
    pub(super) fn on_full_state(&mut self, now: Instant, f: &FullState<'_>, rec: &mut Recorder) {
        if !matches!(self.stage, Stage::AwaitWorld | Stage::Playing) {
            rec.event("unexpected_full_state");
            return;
        }
        let (w, h) = (f.tilemap.width, f.tilemap.height);
        self.bounds = (w > 0 && h > 0).then(|| (f32::from(w), f32::from(h)));
        // A full state replaces what the bot knew.
        self.remotes.clear();
        self.note_tick(now, f.tick);
        for e in f.entities() {
            self.spawn(now, f.tick, &e, rec);
        }
        rec.snapshots_applied += 1;
        if self.stage != Stage::Playing {
            if self.own.is_some() {
                self.begin_play(now, f.tick);
            } else {
                rec.event("full_state_without_player");
            }
        }
    }

    pub(super) fn on_spawn(&mut self, now: Instant, e: &EntityData<'_>, rec: &mut Recorder) {
        if matches!(self.stage, Stage::Hello | Stage::Content) {
            rec.event("spawn_before_world");
            return;
        }
        let tick = self.newest_tick.map(|(t, _)| t).unwrap_or(0);
        self.spawn(now, tick, e, rec);
        if self.stage == Stage::AwaitWorld && self.own.is_some() {
            self.begin_play(now, tick);
        }
    }

    pub(super) fn spawn(
        &mut self,
        now: Instant,
        tick: u32,
        e: &EntityData<'_>,
        rec: &mut Recorder,
    ) {
        let c = &e.components;
        let pos = c.position.unwrap_or_default();
        if e.net_entity_id == self.player_entity {
            match &mut self.own {
                Some(own) => {
                    // Re-announced: take the server's word for where it is.
                    own.pos = pos;
                    if let Some(s) = c.speed {
                        own.speed = s;
                    }
                    if self.opts.dialect == Dialect::Implementation {
                        self.grid_pred = Some(Box::new(Predictor::new(now, pos)));
                    }
                }
                None => {
                    if c.speed.is_none() && self.dialect() == Dialect::Spec {
                        rec.event("player_without_movement");
                    }
                    self.own = Some(OwnEntity {
                        id: e.net_entity_id,
                        pos,
                        speed: c.speed.unwrap_or(0.0),
                    });
                    if self.opts.dialect == Dialect::Implementation {
                        // A player spawns standing on a tile's centre.
                        self.grid_pred = Some(Box::new(Predictor::new(now, pos)));
                    }
                }
            }
            return;
        }
        if !self.remotes.contains_key(&e.net_entity_id)
            && self.remotes.len() >= MAX_TRACKED_ENTITIES
        {
            rec.event("entity_refused_table_full");
            return;
        }
        self.remotes.insert(
            e.net_entity_id,
            Remote::new(tick, pos, c.velocity.unwrap_or_default()),
        );
    }

    pub(super) fn begin_play(&mut self, now: Instant, tick: u32) {
        self.stage = Stage::Playing;
        self.grid.begin(now, &self.params);
        self.play_started = Some(now + self.params.phase_offset);
        self.next_input_tick = tick.wrapping_add(1);
        self.first_input_tick = self.next_input_tick;
        if self.opts.chat_rate > 0.0 {
            let period = Duration::from_secs_f64(60.0 / self.opts.chat_rate);
            let offset = period.mul_f64(self.rng.random::<f64>());
            self.chat_timer.start_at(now + offset);
        }
    }

    pub(super) fn note_tick(&mut self, now: Instant, tick: u32) {
        if self.newest_tick.is_none_or(|(t, _)| tick > t) {
            self.newest_tick = Some((tick, now));
        }
    }

    pub(super) fn on_delta(&mut self, now: Instant, d: &DeltaState<'_>, rec: &mut Recorder) {
        if self.stage != Stage::Playing {
            rec.event("delta_before_world");
            return;
        }
        let news = self.ticks.on_tick(d.tick);
        news.record(rec);
        // A step is configured (one delta a tick), so every tick has a verdict.
        let outcome = news.outcome.unwrap_or(SeqOutcome::Duplicate);
        match outcome {
            SeqOutcome::Duplicate | SeqOutcome::TooOld => {
                rec.event("delta_duplicate_or_old");
                return;
            }
            SeqOutcome::Reordered => rec.event("delta_reordered"),
            // Counted as `snapshot_tick_reset` by the record above.
            SeqOutcome::Reset => {}
            SeqOutcome::Advanced { .. } => {}
        }
        self.note_tick(now, d.tick);
        self.arrivals.on_arrival(now, rec);
        let ack = d.last_acked_input.or(self.newest_input_ack);
        for u in d.updates() {
            if self.own.is_some_and(|o| o.id == u.net_entity_id) {
                if self.dialect() == Dialect::Implementation {
                    // No InputAck, no last_acked_input: match against the grid predictions.
                    self.reconcile_grid(now, d.tick, &u, rec);
                } else if let Some(a) = ack {
                    self.reconcile(a, u.position, rec);
                }
            } else if let Some(r) = self.remotes.get_mut(&u.net_entity_id) {
                r.push(d.tick, u.position);
                r.velocity = u.velocity;
            } else {
                rec.event("delta_unknown_entity");
            }
        }
        rec.snapshots_applied += 1;
    }
}
