//! Inputs: the action drawn from the weighted mix (with the parcels the bot knows free or
//! its own), the InputMessage on the input grid, and its InputAck.

use super::*;

/// An action as the bot queues it (copied, no borrow), turned into [`Action`] on encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Act {
    pub(super) ty: u8,
    pub(super) a: i32,
    pub(super) b: i32,
    pub(super) c: u32,
    pub(super) n: usize,
    pub(super) tiles: [(i32, i32); 4],
}

impl ZergCityBot {
    pub(super) fn on_input_ack(&mut self, now: Instant, seq: u32, result: u8, rec: &mut Recorder) {
        let name = InputResult::from_u8(result).map_or("other", InputResult::name);
        rec.events.add2("input_result", name, 1);
        self.pending.ack(seq, now, rec);
    }

    pub(super) fn send_input(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(due) = self.grid.take_due(now, rec) else {
            return;
        };
        rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
        let act = self.draw_action();
        self.input_seq = self.input_seq.wrapping_add(1);
        let client_tick = self.estimated_tick(now).unwrap_or(0.0).max(0.0) as u64;
        self.out.push_back(Out::Input {
            seq: self.input_seq,
            client_tick,
            act,
        });
        rec.events.add2("action", action_name(act.ty), 1);
        self.pending.sent(self.input_seq, now);
        rec.inputs_sent += 1;
    }

    /// The bot's own parcels with nothing on them, and its structures, from the newest state.
    pub(super) fn survey(&mut self) {
        self.free_parcels.clear();
        self.mine.clear();
        let Some(me) = self.slot.map(|s| s + 1) else {
            return;
        };
        let Some(t) = self.newest else { return };
        let w = &self.ring[(t as usize) % BASELINES];
        for e in &w.entities {
            if e.owner() != Some(me) {
                continue;
            }
            let Some(p) = e.position() else { continue };
            if e.archetype == world::ARCH_PARCEL {
                self.free_parcels.push(p);
            } else {
                self.mine.push(p);
            }
        }
        let mine = &self.mine;
        self.free_parcels.retain(|p| !mine.contains(p));
    }

    pub(super) fn random_tile(&mut self) -> (i32, i32) {
        let (w, h) = (self.map.0.max(2), self.map.1.max(2));
        let s = i32::from(self.slot.unwrap_or(0));
        let (cx, cy) = ((s % 2) * w / 2 + w / 4, (s / 2) * h / 2 + h / 4);
        (
            (cx + self.me.rng.random_range(-6..=6)).clamp(0, w - 1),
            (cy + self.me.rng.random_range(-6..=6)).clamp(0, h - 1),
        )
    }

    pub(super) fn pick_free(&mut self) -> (i32, i32) {
        if !self.free_parcels.is_empty() && self.me.rng.random_bool(0.85) {
            let i = self.me.rng.random_range(0..self.free_parcels.len());
            self.free_parcels.swap_remove(i)
        } else {
            self.random_tile()
        }
    }

    pub(super) fn draw_action(&mut self) -> Act {
        self.survey();
        let total: f64 = self.weights.iter().sum();
        let mut x = self.me.rng.random::<f64>() * total;
        let mut k = 0;
        for (i, w) in self.weights.iter().enumerate() {
            if x < *w {
                k = i;
                break;
            }
            x -= w;
            k = i;
        }
        let mut act = Act {
            ty: codec::INPUT_NONE,
            a: 0,
            b: 0,
            c: 0,
            n: 0,
            tiles: [(0, 0); 4],
        };
        match k {
            0 => {
                let (x, y) = self.pick_free();
                act.ty = codec::INPUT_PLACE_BUILDING;
                act.c = self.me.rng.random_range(1..=4);
                act.tiles[0] = (x, y);
                act.a = self.me.rng.random_range(0..4);
            }
            1 => {
                let (x, y) = self.pick_free();
                act.ty = codec::INPUT_DESIGNATE_ZONE;
                act.c = self.me.rng.random_range(1..=3);
                act.a = self.me.rng.random_range(0..2);
                act.tiles[0] = (x, y);
                act.n = 1;
            }
            2 => {
                act.ty = codec::INPUT_DEMOLISH;
                let n = self.mine.len().min(2);
                for i in 0..n {
                    let j = self.me.rng.random_range(0..self.mine.len());
                    act.tiles[i] = self.mine[j];
                }
                if n == 0 {
                    act.tiles[0] = self.random_tile();
                }
                act.n = n.max(1);
            }
            3 => {
                act.ty = codec::INPUT_PURCHASE_TILE;
                act.tiles[0] = self.random_tile();
            }
            4 => {
                act.ty = codec::INPUT_SET_TRIBUTE_RATE;
                act.a = self.me.rng.random_range(0..=3);
                act.c = self.me.rng.random_range(0..=25);
            }
            _ => {
                act.ty = match k {
                    5 => codec::INPUT_PLACE_ROAD,
                    6 => codec::INPUT_PLACE_CONDUIT,
                    _ => codec::INPUT_PLACE_PIPE,
                };
                let n = self.me.rng.random_range(1..=2);
                for i in 0..n {
                    act.tiles[i] = self.pick_free();
                }
                act.n = n;
            }
        }
        act
    }

    pub(super) fn age_inputs(&mut self, now: Instant, rec: &mut Recorder) {
        self.pending.age(now, rec);
    }
}

pub(super) fn action_name(ty: u8) -> &'static str {
    Action::Tiles {
        kind: ty,
        tiles: &[],
    }
    .name()
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash of `x`.
pub(super) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
