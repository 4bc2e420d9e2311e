//! The simulated Skirmish player.

use std::collections::VecDeque;
use std::time::Instant;

use tickswarm::api::baselines::Baselines;
use tickswarm::api::lifecycle::{Due, Lifecycle};
use tickswarm::api::reported::ReportedLoss;
use tickswarm::api::seqwindow::SeqWindow;
use tickswarm::api::wire::{Le, Reader, Writer};
use tickswarm::api::*;

use crate::codec::*;

/// A simulated Skirmish player: its messages; the lifecycle (handshake, silence, input grid,
/// ping) is tickswarm's.
pub struct SkirmishBot {
    life: Lifecycle,
    nonce: u32,
    worlds: Baselines<World, HISTORY>,
    acked: u32,
    seqs: SeqWindow,
    up: ReportedLoss,
    input_seq: u32,
    token: u32,
    /// Messages to send: their type, and the keys of an Input.
    out: VecDeque<(u8, u8)>,
}

impl SkirmishBot {
    /// A bot not yet started.
    pub fn new(params: BotParams) -> Self {
        let mut life = Lifecycle::new(params);
        Self {
            nonce: life.rng().next_u32() | 1,
            life,
            worlds: Baselines::new(),
            acked: 0,
            seqs: SeqWindow::new(),
            up: ReportedLoss::new(),
            input_seq: 0,
            token: 0,
            out: VecDeque::with_capacity(8),
        }
    }
    /// The last tick this bot applied (and acknowledges).
    pub fn acked_tick(&self) -> u32 {
        self.acked
    }
    /// Player `id`'s position in the bot's newest world.
    pub fn position(&self, id: u16) -> Option<(i16, i16)> {
        *self.worlds.get(self.acked)?.get(usize::from(id))?
    }

    fn on_snapshot(&mut self, r: &mut Reader<'_, Le>, rec: &mut Recorder) -> Decoded {
        let [seq, tick, baseline, last_input, seen] = [r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?];
        let (e, got) = self.seqs.on_seq(seq).deltas();
        rec.loss_down.add(e, got);
        if tick <= self.acked {
            return Ok(()); // older than what we have: nothing new to apply
        }
        let mut w = match (baseline, self.worlds.get(baseline)) {
            (0, _) => EMPTY,
            (_, Some(w)) => *w,
            (_, None) => return Err("baseline_missing"),
        };
        for _ in 0..r.u8()? {
            let (id, x, y) = (usize::from(r.u16()?), r.i16()?, r.i16()?);
            *w.get_mut(id).ok_or("player_id_out_of_range")? = (x != GONE).then_some((x, y));
        }
        r.expect_end()?;
        match baseline {
            0 => rec.event("full_snapshots"),
            b => rec.record_extra("baseline_age_ticks", u64::from(tick.saturating_sub(b))),
        }
        self.up.on_report(last_input, seen, rec);
        self.worlds.put(tick, w);
        self.acked = tick;
        rec.snapshots_applied += 1;
        Ok(())
    }

    fn handle(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) -> Decoded {
        let mut r = Reader::<Le>::new(data);
        match (r.u8()?, self.life.phase()) {
            (msg::WELCOME, BotPhase::Connecting) if r.u32()? == self.nonce => {
                let _id = r.u16()?;
                self.life.accepted(now, rec);
                self.seqs.on_seq(0); // the server's snapshot seq starts at 1: a lost first counts
            }
            (msg::SNAPSHOT, BotPhase::Connected) => self.on_snapshot(&mut r, rec)?,
            (msg::PONG, BotPhase::Connected) if r.u32()? == self.token => self.life.on_pong(now, rec),
            (msg::WELCOME | msg::PONG, _) => rec.event("stale_reply"),
            (msg::SNAPSHOT, _) => rec.event("snapshot_outside_session"),
            _ => return Err("unknown_type"),
        }
        Ok(())
    }
}

impl Bot for SkirmishBot {
    fn start(&mut self, now: Instant, _: &mut Recorder) {
        self.life.start(now);
        self.out.push_back((msg::HELLO, 0));
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        self.life.heard(now);
        if let Err(e) = self.handle(now, data, rec) {
            rec.decode_error("datagram", e);
        }
    }
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        while let Some(due) = self.life.poll(now, rec) {
            self.out.push_back(match due {
                Due::Hello => (msg::HELLO, 0),
                Due::Input(keys) => (msg::INPUT, keys.0),
                Due::Ping => (msg::PING, 0),
            });
        }
    }
    fn stop(&mut self, _: Instant, _: &mut Recorder) {
        if self.life.stop() {
            self.out.push_back((msg::BYE, 0));
        }
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let (kind, keys) = self.out.pop_front()?;
        let mut w = Writer::<Le>::new(buf);
        w.u8(kind).ok()?;
        match kind {
            msg::HELLO => (w.u8(VERSION).ok()?, w.u32(self.nonce).ok()?).1,
            msg::INPUT => {
                self.input_seq += 1;
                (w.u32(self.input_seq).ok()?, w.u32(self.acked).ok()?, w.u8(keys).ok()?).2
            }
            msg::PING => {
                self.token = self.token.wrapping_add(1);
                w.u32(self.token).ok()?
            }
            _ => {}
        }
        Some(Transmit::datagram(w.position()))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.life.next_timeout()
    }
    fn phase(&self) -> BotPhase {
        self.life.phase()
    }
}
