//! Snapshots: the baselines a delta is applied onto (within a byte budget), the applier
//! that builds each state, and the bot's handling of a snapshot (tick accounting, acks).

use super::*;

/// The last 30 snapshot states, by tick, held within a byte budget. Slots are reused, so
/// storing a state swaps vectors and allocates nothing once they have grown.
///
/// # Budget
/// Every vector a bot keeps for states (the slots, live or not, and the spare one a new
/// state is built in) counts by its capacity against `max_bytes`
/// (`DarkAgesOptions::max_state_bytes`). Storing a state that takes the total over it frees
/// first the vectors of slots no longer in the window, then the spare, then the oldest
/// stored baselines (`baseline_evicted`), never the world nor the state just stored: a
/// server whose deltas build ever larger states keeps its bots to the newest few of them
/// (a delta onto an evicted one is a `baseline_miss`, answered by a full snapshot), and one
/// state never holds more than [`MAX_TRACKED_ENTITIES`] entities (see [`Applier`]).
#[derive(Debug)]
pub struct Baselines {
    pub(super) slots: Vec<(u32, Vec<EntityState>)>,
    pub(super) len: usize,
    pub(super) next: usize,
    pub(super) current: Option<usize>,
    pub(super) max_bytes: usize,
}

impl Baselines {
    pub fn new(n: usize) -> Self {
        Self::with_budget(n, usize::MAX)
    }

    /// `n` slots holding at most `max_bytes` of states together.
    pub fn with_budget(n: usize, max_bytes: usize) -> Self {
        Self {
            slots: (0..n.max(1)).map(|_| (0, Vec::with_capacity(64))).collect(),
            len: 0,
            next: 0,
            current: None,
            max_bytes,
        }
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
        self.current = None;
    }

    /// The slot holding `tick`, if stored.
    pub fn find(&self, tick: u32) -> Option<usize> {
        let n = self.slots.len();
        (0..self.len)
            .map(|k| (self.next + n - 1 - k) % n)
            .find(|&i| self.slots[i].0 == tick)
    }

    pub fn get(&self, slot: usize) -> &[EntityState] {
        self.slots.get(slot).map_or(&[], |s| s.1.as_slice())
    }

    /// Store `state` (swapped in; `state` gets the evicted slot's vector) as `tick`.
    pub fn store(&mut self, tick: u32, state: &mut Vec<EntityState>) -> usize {
        let i = self.next;
        if self.current == Some(i) {
            self.current = None;
        }
        self.slots[i].0 = tick;
        std::mem::swap(&mut self.slots[i].1, state);
        self.next = (i + 1) % self.slots.len();
        self.len = (self.len + 1).min(self.slots.len());
        i
    }

    /// Bring the bytes held (with `spare`, the vectors the caller keeps) under the budget:
    /// free the vectors of slots outside the window, then `spare`, then the oldest stored
    /// states other than the world and the newest stored. Returns how many stored states
    /// were dropped.
    pub fn enforce_budget(&mut self, spare: &mut [&mut Vec<EntityState>]) -> u64 {
        let held = |b: &Self, spare: &[&mut Vec<EntityState>]| {
            let caps: usize = b.slots.iter().map(|s| s.1.capacity()).sum::<usize>()
                + spare.iter().map(|v| v.capacity()).sum::<usize>();
            caps * std::mem::size_of::<EntityState>()
        };
        if held(self, spare) <= self.max_bytes {
            return 0;
        }
        let n = self.slots.len();
        for k in self.len..n {
            let i = (self.next + n - 1 - k) % n;
            self.slots[i].1 = Vec::new();
        }
        for k in 0..spare.len() {
            if held(self, spare) <= self.max_bytes {
                return 0;
            }
            *spare[k] = Vec::new();
        }
        let mut evicted = 0;
        while self.len > 1 && held(self, spare) > self.max_bytes {
            let oldest = (self.next + n - self.len) % n;
            if self.current == Some(oldest) {
                break;
            }
            self.slots[oldest].1 = Vec::new();
            self.len -= 1;
            evicted += 1;
        }
        evicted
    }

    /// The world: the newest applied snapshot's state.
    pub fn current(&self) -> &[EntityState] {
        self.current.map_or(&[], |i| self.get(i))
    }

    pub fn ticks(&self) -> impl Iterator<Item = u32> + '_ {
        let n = self.slots.len();
        (0..self.len).map(move |k| self.slots[(self.next + n - 1 - k) % n].0)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A snapshot whose state would hold more entities than a bot tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the state would hold more than {limit} entities")]
pub struct TooManyEntities {
    pub limit: usize,
}

/// Builds the state a snapshot describes. Its scratch vectors (the delta's records sorted by
/// id, its removed ids sorted) are reused, so applying allocates nothing once they have grown.
///
/// A delta is merged with its baseline in one pass: the records are sorted by id
/// (`k log k`), runs of baseline entities between two changed ids are copied in bulk (found
/// by binary search), so a delta costs `O(k log n)` plus one copy of the baseline, whatever
/// the ids: no insert into the middle of a vector, whose cost grows with the entities held.
#[derive(Debug, Default)]
pub struct Applier {
    /// `(wire order, record)`, sorted by `(id, wire order)`: several records for one id
    /// apply in the order they came.
    pub(super) records: Vec<(u32, codec::EntityUpdate)>,
    pub(super) removed: Vec<u32>,
}

impl Applier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes the scratch vectors hold (by capacity).
    pub fn held_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<(u32, codec::EntityUpdate)>()
            + self.removed.capacity() * 4
    }

    /// Free the scratch vectors if they hold more than `bytes`.
    pub fn shrink_over(&mut self, bytes: usize) {
        if self.held_bytes() > bytes {
            self.records = Vec::new();
            self.removed = Vec::new();
        }
    }

    /// Build into `out` (cleared first) a full snapshot's records, or `base` with a delta's
    /// changes and removals; records stay sorted by entity id. At most `limit` entities:
    /// beyond that the snapshot is refused (`out` is then half-built; discard it). Returns how
    /// many removed ids were not in the baseline (a server bug worth counting).
    pub fn apply(
        &mut self,
        base: &[EntityState],
        s: &Snapshot<'_>,
        out: &mut Vec<EntityState>,
        limit: usize,
    ) -> Result<u64, TooManyEntities> {
        out.clear();
        let too_many = TooManyEntities { limit };
        if s.is_full() {
            if s.record_count() > limit {
                return Err(too_many);
            }
            reserve_within(out, s.record_count(), limit);
            out.extend(s.records().map(|u| u.state));
            out.sort_unstable_by_key(|e| e.id);
            return Ok(0);
        }
        self.records.clear();
        self.records
            .extend(s.records().enumerate().map(|(i, u)| (i as u32, u)));
        self.records.sort_unstable_by_key(|(i, u)| (u.state.id, *i));
        self.removed.clear();
        self.removed.extend(s.removed());
        self.removed.sort_unstable();
        if base.len().saturating_sub(self.removed.len()) > limit {
            return Err(too_many);
        }
        reserve_within(out, base.len().saturating_add(self.records.len()), limit);
        let (recs, removed) = (&self.records, &self.removed);
        let (mut b, mut u, mut r) = (0usize, 0usize, 0usize);
        let mut hits = 0u64;
        loop {
            // The next id a record or a removal names; the baseline's entities below it are
            // copied as they are.
            let next = match (recs.get(u), removed.get(r)) {
                (Some(x), Some(&y)) => x.1.state.id.min(y),
                (Some(x), None) => x.1.state.id,
                (None, Some(&y)) => y,
                (None, None) => {
                    let rest = &base[b..];
                    if out.len() + rest.len() > limit {
                        return Err(too_many);
                    }
                    out.extend_from_slice(rest);
                    break;
                }
            };
            let run = base[b..].partition_point(|e| e.id < next);
            if out.len() + run > limit {
                return Err(too_many);
            }
            out.extend_from_slice(&base[b..b + run]);
            b += run;
            let mut e = match base.get(b) {
                Some(e) if e.id == next => {
                    b += 1;
                    Some(*e)
                }
                _ => None,
            };
            while let Some((_, x)) = recs.get(u).filter(|x| x.1.state.id == next) {
                x.apply_to(e.get_or_insert_with(EntityState::default));
                u += 1;
            }
            if removed.get(r) == Some(&next) {
                // A removal wins over a change of the same id; a repeated removal finds
                // nothing the second time.
                if e.is_some() {
                    hits += 1;
                }
                e = None;
                r += 1;
            }
            if let Some(e) = e {
                if out.len() >= limit {
                    return Err(too_many);
                }
                out.push(e);
            }
        }
        Ok(self.removed.len() as u64 - hits)
    }
}

/// Room in `out` (empty) for `n` entities: a quarter more than needed, so a world that
/// grows slowly reallocates rarely, but never room for more than `limit`: a vector's
/// capacity, which the budget counts, stays within one state's limit.
pub(super) fn reserve_within(out: &mut Vec<EntityState>, n: usize, limit: usize) {
    let n = n.min(limit);
    if out.capacity() < n {
        out.reserve_exact(n.saturating_add(n / 4).min(limit));
    }
}

/// [`Applier::apply`] with fresh scratch and no entity limit (benches, tests).
pub fn apply_snapshot(base: &[EntityState], s: &Snapshot<'_>, out: &mut Vec<EntityState>) -> u64 {
    Applier::new()
        .apply(base, s, out, usize::MAX)
        .unwrap_or_default()
}

impl DarkAgesBot {
    /// End of a zone session's snapshots: count the ticks still held back for learning.
    pub(super) fn finish_ticks(&mut self, rec: &mut Recorder) {
        let news = self.ticks.finish();
        news.record(rec);
    }

    pub(super) fn on_snapshot(
        &mut self,
        now: Instant,
        data_len: usize,
        s: &Snapshot<'_>,
        rec: &mut Recorder,
    ) {
        let news = self.ticks.on_tick(s.server_tick);
        news.record(rec);
        // Whether to apply is decided by the tick itself, never by the loss mapping: a step
        // that does not fit the server must not freeze the world (and the ack) on one tick.
        if self.baselines.find(s.server_tick).is_some() {
            rec.event("snapshot_duplicate");
            return;
        }
        if news.duplicate {
            rec.event("snapshot_tick_off_step");
        }
        let base = if s.is_full() {
            rec.record_extra("snapshot_full_bytes", data_len as u64);
            None
        } else {
            rec.record_extra("snapshot_delta_bytes", data_len as u64);
            match self.baselines.find(s.baseline_tick) {
                Some(i) => Some(i),
                None => {
                    rec.event("baseline_miss");
                    self.awaiting_full = true;
                    self.ack = 0;
                    return;
                }
            }
        };
        let mut state = std::mem::take(&mut self.scratch);
        let applied = self.applier.apply(
            base.map_or(&[][..], |i| self.baselines.get(i)),
            s,
            &mut state,
            MAX_TRACKED_ENTITIES,
        );
        self.applier.shrink_over(APPLIER_KEEP_BYTES);
        let unknown = match applied {
            Ok(n) => n,
            Err(_) => {
                // Not stored, not acknowledged: the server's next delta is onto the tick
                // acknowledged before (a full snapshot always fits: at most 65,535 records).
                rec.decode_error("snapshot", "too_many_entities");
                state.clear();
                self.scratch = state;
                self.enforce_budget(rec);
                return;
            }
        };
        if unknown > 0 {
            rec.events.add("removed_unknown_entity", unknown);
        }
        if s.is_full() {
            if self.awaiting_full {
                self.awaiting_full = false;
                rec.event("full_fallback");
            }
        } else {
            let full_equiv = codec::len::FULL_HEADER + codec::len::RECORD_FULL * state.len();
            let saved = 1.0 - data_len as f64 / full_equiv as f64;
            rec.record_extra(
                "delta_savings_pct",
                (saved * 100.0).round().clamp(0.0, 100.0) as u64,
            );
            rec.events.add("delta_bytes", data_len as u64);
            rec.events
                .add("delta_full_equivalent_bytes", full_equiv as u64);
        }
        let newer = self
            .newest
            .is_none_or(|(t, _)| (s.server_tick.wrapping_sub(t) as i32) > 0);
        let slot = self.baselines.store(s.server_tick, &mut state);
        self.scratch = state;
        self.enforce_budget(rec);
        if !newer {
            rec.event("snapshot_reordered");
            return;
        }
        if let Some((_, at)) = self.newest {
            rec.record_snapshot_interarrival(now.saturating_duration_since(at).as_micros() as u64);
        }
        self.arrivals.mark(now);
        self.newest = Some((s.server_tick, now));
        self.baselines.current = Some(slot);
        if !self.awaiting_full {
            self.ack = s.server_tick;
        }
        rec.snapshots_applied += 1;
        rec.record_extra("entities", self.baselines.get(slot).len() as u64);
        self.reconcile(now, rec);
    }

    /// Keep the states held within `max_state_bytes` ([`Baselines`]).
    pub(super) fn enforce_budget(&mut self, rec: &mut Recorder) {
        let evicted = self.baselines.enforce_budget(&mut [&mut self.scratch]);
        if evicted > 0 {
            rec.events.add("baseline_evicted", evicted);
        }
    }
}
