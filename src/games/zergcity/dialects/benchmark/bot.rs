//! The bot for the POC-2 benchmark server (`dialect: benchmark`).
//!
//! Life: the server streams to every ENet peer that connects, unasked: a FullSnapshot on the
//! next tick, then a DeltaSnapshot every tick. `start` sends nothing; the first FullSnapshot
//! applied makes the bot Connected (handshake time from `start`). Every snapshot applied is
//! acknowledged with a bare SnapshotAck carrying its tick (reliable, channel 0), as the real
//! client does; a delta after which the world's FNV-1a checksum differs from the server's is a
//! desync (`checksum_mismatch`): the bot sends one ResyncRequest and ignores deltas until the
//! next FullSnapshot (`resync_us` times it). The checksum is kept by [`WorldChecksum`]: a
//! delta's hashing is paid for by what the datagrams carried, never the world's size, and a
//! delta it could not afford to check is counted (`checksum_unverified`).
//!
//! # What it measures
//! - **Downstream loss**: the header's `sequence` is the server tick, and the server sends
//!   each peer exactly one message a tick (the FullSnapshot on its tick, a delta on every
//!   other), so a tick missing between two that arrived is a lost delta (a 128-tick window
//!   takes the unsequenced channel's reordering). A server with nothing changed for a peer
//!   sends nothing that tick; the real one changes 2% of its world every tick.
//! - **RTT**: not by the bot (nothing the server sends answers anything the bot sends);
//!   the run's `rtt_us` comes from ENet's acknowledgements of the bot's reliable acks.
//! - **Upstream loss**: not measurable: the bot's only messages are reliable and nothing
//!   acknowledges them at this level.
//! - `inputs_sent` counts the bot's SnapshotAcks: the benchmark has no player input, and the
//!   acks are the per-tick upstream load it puts on the server.
//!
//! State is bounded: one world of at most 65,536 entities (1.5 MiB), allocated when the
//! first FullSnapshot (or one of another size) arrives and reused; decompression goes into
//! one buffer per worker thread.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::checksum::WorldChecksum;
use super::codec::{self, Decompressor, Delta, Full, Message, CHANNEL_ACK};
use crate::games::zergcity::dialects::enet_closed::phase_after_close;
use crate::games::zergcity::ZergCityOptions;
use crate::protocol::prelude::seqwindow::SeqWindow;
use crate::protocol::prelude::timers::{earliest, Handshake, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Transmit};

/// A ResyncRequest without a FullSnapshot after this long is sent again.
pub const RESYNC_RETRY: Duration = Duration::from_secs(2);

thread_local! {
    /// One decompression buffer per worker thread, not per bot.
    static DECOMPRESSOR: std::cell::RefCell<Decompressor> =
        std::cell::RefCell::new(Decompressor::default());
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Ack(u32),
    Resync,
}

pub struct BenchmarkBot {
    params: BotParams,
    opts: ZergCityOptions,
    phase: BotPhase,
    out: VecDeque<Out>,
    started_at: Option<Instant>,
    handshake: Handshake,
    silence: Silence,
    /// Positions then data components, 24 bytes an entity: the server's two arrays.
    world: Vec<u8>,
    /// The world's checksum as far as what the datagrams paid for can tell it.
    sum: WorldChecksum,
    count: u32,
    /// Tick of the newest snapshot applied.
    applied_tick: Option<u32>,
    /// A desync was seen: deltas are ignored until a FullSnapshot (since when, and when the
    /// last ResyncRequest went).
    resync: Option<(Instant, Instant)>,
    down: SeqWindow,
}

impl BenchmarkBot {
    pub fn new(params: BotParams, opts: ZergCityOptions) -> Self {
        Self {
            silence: Silence::new(params.server_silence_timeout),
            params,
            opts,
            phase: BotPhase::Idle,
            out: VecDeque::with_capacity(8),
            started_at: None,
            handshake: Handshake::new(),
            world: Vec::new(),
            sum: WorldChecksum::default(),
            count: 0,
            applied_tick: None,
            resync: None,
            down: SeqWindow::new(),
        }
    }

    /// Entities in the world the bot holds.
    pub fn entity_count(&self) -> u32 {
        self.count
    }

    /// The world checksum as the server computes it (a pass of its own, for tests).
    pub fn checksum(&self) -> u64 {
        codec::fnv1a(&self.world)
    }

    /// Bytes of world the bot hashed to check deltas so far: the work the checksum cost.
    pub fn checksum_bytes_hashed(&self) -> u64 {
        self.sum.bytes_hashed()
    }

    fn close(&mut self, phase: BotPhase) {
        self.phase = phase;
        self.out.clear();
        self.handshake.end();
    }

    fn queue(&mut self, o: Out, rec: &mut Recorder) {
        // Acks go out on every poll; a bounded queue still keeps a stalled engine's bot small.
        if self.out.len() >= 64 {
            rec.event("ack_queue_full");
            return;
        }
        if matches!(o, Out::Ack(_)) {
            rec.inputs_sent += 1;
        }
        self.out.push_back(o);
    }

    fn on_full(&mut self, now: Instant, f: Full<'_>, wire: usize, body: usize, rec: &mut Recorder) {
        rec.record_extra("full_snapshot_compressed_bytes", wire as u64);
        rec.record_extra("full_snapshot_uncompressed_bytes", body as u64);
        if self.count != f.count || self.world.len() != f.world.len() {
            self.world.clear();
            self.world.shrink_to(f.world.len());
            self.world.extend_from_slice(f.world);
            self.count = f.count;
        } else {
            self.world.copy_from_slice(f.world);
        }
        self.sum.changed();
        self.sum.earn(body, self.world.len());
        self.applied_tick = Some(f.tick);
        rec.snapshots_applied += 1;
        // No lost snapshot is counted here: the rate reads what arrived.
        rec.snapshots_sent += 1;
        if let Some((since, _)) = self.resync.take() {
            rec.record_extra(
                "resync_us",
                now.saturating_duration_since(since).as_micros() as u64,
            );
        }
        if self.phase == BotPhase::Connecting {
            self.handshake.end();
            self.phase = BotPhase::Connected;
            if let Some(s) = self.started_at {
                rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
            }
        } else {
            rec.event("full_snapshot_fallbacks");
        }
        self.queue(Out::Ack(f.tick), rec);
    }

    fn on_delta(
        &mut self,
        now: Instant,
        d: Delta<'_>,
        wire: usize,
        body: usize,
        rec: &mut Recorder,
    ) {
        rec.record_extra("delta_compressed_bytes", wire as u64);
        rec.record_extra("delta_uncompressed_bytes", body as u64);
        if self.applied_tick.is_none() {
            rec.event("delta_before_full");
            return;
        }
        if let Some((_, asked)) = self.resync {
            rec.event("delta_while_resyncing");
            if now.saturating_duration_since(asked) >= RESYNC_RETRY {
                self.resync = self.resync.map(|(since, _)| (since, now));
                self.queue(Out::Resync, rec);
            }
            return;
        }
        if d.max_id.is_some_and(|id| u32::from(id) >= self.count) {
            rec.decode_error("delta_snapshot", "entity_out_of_range");
            return;
        }
        self.sum.earn(body, self.world.len());
        let n = self.count as usize;
        let mut changed = false;
        for e in d.entries() {
            let id = usize::from(e.id);
            for (bit, v) in e.values.iter().enumerate() {
                if e.mask & (1 << bit) == 0 {
                    continue;
                }
                // x, y, z in the position array; type_id, flags, value in the data array.
                let at = if bit < 3 {
                    id * 12 + bit * 4
                } else {
                    n * 12 + id * 12 + (bit - 3) * 4
                };
                if let Some(dst) = self.world.get_mut(at..at + 4) {
                    // A write of the value already there keeps the world's hash known.
                    if dst != v {
                        dst.copy_from_slice(v);
                        changed = true;
                    }
                }
            }
        }
        rec.snapshots_applied += 1;
        // No lost snapshot is counted here: the rate reads what arrived.
        rec.snapshots_sent += 1;
        if self.applied_tick.is_some_and(|t| d.tick > t) {
            self.applied_tick = Some(d.tick);
        }
        if changed {
            self.sum.changed();
        }
        if self.opts.verify_checksum {
            match self.sum.current(&self.world) {
                Some(h) if h != d.checksum => {
                    rec.event("checksum_mismatch");
                    self.resync = Some((now, now));
                    self.queue(Out::Resync, rec);
                    return;
                }
                Some(_) => {}
                None => rec.event("checksum_unverified"),
            }
        }
        self.queue(Out::Ack(d.tick), rec);
    }
}

impl Bot for BenchmarkBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.phase != BotPhase::Idle {
            return;
        }
        self.phase = BotPhase::Connecting;
        self.started_at = Some(now);
        // The server streams unasked: nothing to send, only a deadline for the first snapshot.
        self.handshake
            .begin(now, None, self.params.handshake_timeout);
        self.silence.arm(now);
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.takes_datagram(rec) {
            return;
        }
        self.silence.heard(now);
        let limit = self.opts.max_decompressed_bytes.min(codec::MAX_BODY);
        DECOMPRESSOR.with(|cell| {
            let Ok(mut dec) = cell.try_borrow_mut() else {
                rec.event("decompressor_busy");
                return;
            };
            dec.set_limit(limit);
            match codec::decode(data, &mut dec) {
                Ok(m) => {
                    // Loss: one message a tick, counted from the first sound one.
                    let tick = match m {
                        Message::Full(f) => f.tick,
                        Message::Delta(d) => d.tick,
                    };
                    let (e, r) = self.down.on_seq(tick).deltas();
                    rec.loss_down.add(e, r);
                    let body = data.len() - codec::HEADER_LEN;
                    match m {
                        Message::Full(f) => {
                            let n = 4 + f.world.len();
                            self.on_full(now, f, data.len(), n, rec)
                        }
                        Message::Delta(d) => {
                            let n = if data[6] & codec::FLAG_COMPRESSED != 0 {
                                u32::from_le_bytes([data[16], data[17], data[18], data[19]])
                                    as usize
                            } else {
                                body
                            };
                            self.on_delta(now, d, data.len(), n, rec)
                        }
                    }
                }
                Err(e) => {
                    rec.decode_error(e.message, e.reason);
                    super::hint::name_other_dialect(data, rec);
                }
            }
            dec.shrink();
        });
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting if self.handshake.timed_out(now) => {
                rec.connect_failures.add("timeout", 1);
                self.close(BotPhase::Failed);
            }
            BotPhase::Connected if self.silence.expired(now) => {
                rec.event("server_silence_timeout");
                self.close(BotPhase::Closed);
            }
            _ => {}
        }
    }

    fn stop(&mut self, _now: Instant, _rec: &mut Recorder) {
        // No goodbye message: the engine's ENet disconnect is the goodbye.
        let phase = if self.phase == BotPhase::Failed {
            BotPhase::Failed
        } else {
            BotPhase::Closed
        };
        self.close(phase);
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(o) = self.out.pop_front() {
            let len = match o {
                Out::Ack(t) => codec::encode_ack(buf, t),
                Out::Resync => codec::encode_resync(buf),
            };
            if let Ok(len) = len {
                return Some(Transmit {
                    len,
                    channel: CHANNEL_ACK,
                    reliable: true,
                });
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting => earliest([self.handshake.next_deadline()]),
            BotPhase::Connected => earliest([self.silence.deadline()]),
            _ => None,
        }
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    fn waiting_for(&self) -> Option<&'static str> {
        (self.phase == BotPhase::Connecting).then_some("FullSnapshot")
    }

    fn handle_transport_closed(&mut self, _now: Instant, rec: &mut Recorder) {
        if let Some(phase) = phase_after_close(self.phase, rec) {
            self.close(phase);
        }
    }
}

impl std::fmt::Debug for BenchmarkBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchmarkBot")
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("entities", &self.count)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::games::zergcity::dialects::benchmark::server::{
        BenchmarkServer, BenchmarkServerConfig,
    };
    use crate::games::zergcity::Dialect;
    use crate::protocol::prelude::sim::{self, Dir, Link, Sim};

    fn opts() -> ZergCityOptions {
        ZergCityOptions {
            dialect: Dialect::Benchmark,
            ..ZergCityOptions::default()
        }
    }

    fn bot() -> (BenchmarkBot, Recorder, Instant) {
        (
            BenchmarkBot::new(BotParams::with_index(0, 1), opts()),
            Recorder::new(),
            Instant::now(),
        )
    }

    /// Every message the bot wants sent: (type, sequence, channel, reliable).
    fn sent(b: &mut BenchmarkBot) -> Vec<(u8, u32, u8, bool)> {
        let mut buf = [0u8; 64];
        let mut v = Vec::new();
        while let Some(t) = b.poll_transmit(&mut buf) {
            assert_eq!(t.len, codec::HEADER_LEN, "a bare header");
            let h = codec::Header::parse(&buf[..t.len]).unwrap();
            assert_eq!((h.version, h.flags, h.payload_length), (1, 0, 0));
            v.push((h.ty, h.sequence, t.channel, t.reliable));
        }
        v
    }

    /// A world of `n` entities: entity i has x = i, every other field 0.
    fn world(n: u32) -> Vec<u8> {
        let mut w = vec![0u8; n as usize * 24];
        for i in 0..n as usize {
            w[i * 12..i * 12 + 4].copy_from_slice(&(i as u32).to_le_bytes());
        }
        w
    }

    fn full(tick: u32, w: &[u8]) -> Vec<u8> {
        let mut body = ((w.len() / 24) as u32).to_le_bytes().to_vec();
        body.extend_from_slice(w);
        let mut b = vec![0u8; 4096];
        let n = codec::encode_compressed(&mut b, codec::ty::FULL_SNAPSHOT, tick, &body).unwrap();
        b.truncate(n);
        b
    }

    /// A delta setting entity `id`'s flags (field 4) to `v` in `w`, with `w`'s checksum after.
    fn delta(tick: u32, w: &mut [u8], id: u16, v: u32) -> Vec<u8> {
        let n = w.len() / 24;
        let at = n * 12 + usize::from(id) * 12 + 4;
        w[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let mut body = codec::fnv1a(w).to_le_bytes().to_vec();
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&id.to_le_bytes());
        body.push(0x10);
        body.extend_from_slice(&v.to_le_bytes());
        let mut b = vec![0u8; 4096];
        let n = codec::encode_compressed(&mut b, codec::ty::DELTA_SNAPSHOT, tick, &body).unwrap();
        b.truncate(n);
        b
    }

    #[test]
    fn the_first_full_snapshot_is_the_handshake_and_every_snapshot_is_acked_by_tick() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        assert!(sent(&mut b).is_empty(), "the server streams unasked");
        assert_eq!(b.waiting_for(), Some("FullSnapshot"));
        let mut w = world(10);
        b.handle_datagram(t0 + Duration::from_millis(30), &full(100, &w), &mut rec);
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(rec.connects_ok, 1);
        assert!(rec.handshake_us.min() >= 29_000);
        b.handle_datagram(t0, &delta(101, &mut w, 3, 77), &mut rec);
        assert_eq!(
            b.checksum(),
            codec::fnv1a(&w),
            "the delta landed in the data array"
        );
        assert_eq!(
            sent(&mut b),
            vec![(3, 100, CHANNEL_ACK, true), (3, 101, CHANNEL_ACK, true)]
        );
        assert_eq!(rec.snapshots_applied, 2);
        assert_eq!(rec.inputs_sent, 2, "acks are the bot's upstream messages");
        assert_eq!((rec.loss_down.expected, rec.loss_down.received), (2, 2));
        assert_eq!(rec.decode_errors.total(), 0);
    }

    #[test]
    fn missing_ticks_are_lost_deltas_and_a_late_one_fills_its_hole() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let mut w = world(4);
        b.handle_datagram(t0, &full(10, &w), &mut rec);
        let d11 = delta(11, &mut w, 0, 1);
        let d12 = delta(12, &mut w, 1, 2);
        let d13 = delta(13, &mut w, 2, 3);
        let d14 = delta(14, &mut w, 3, 4);
        b.handle_datagram(t0, &d11, &mut rec);
        // 12 and 13 do not come; 14 does: two lost so far (and the world no longer matches).
        b.handle_datagram(t0, &d14, &mut rec);
        assert_eq!((rec.loss_down.expected, rec.loss_down.received), (5, 3));
        // 12 arrives late (unsequenced): it fills its hole.
        b.handle_datagram(t0, &d12, &mut rec);
        assert_eq!((rec.loss_down.expected, rec.loss_down.received), (5, 4));
        drop(d13);
    }

    #[test]
    fn a_checksum_mismatch_asks_for_a_resync_and_waits_for_the_full_snapshot() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let mut w = world(4);
        b.handle_datagram(t0, &full(1, &w), &mut rec);
        sent(&mut b);
        // Delta 2 is lost; delta 3 carries only its own change, so the checksum differs.
        let _lost = delta(2, &mut w, 0, 9);
        let d3 = delta(3, &mut w, 1, 8);
        b.handle_datagram(t0, &d3, &mut rec);
        assert_eq!(rec.events.get("checksum_mismatch"), 1);
        assert_eq!(
            sent(&mut b),
            vec![(4, 0, CHANNEL_ACK, true)],
            "ResyncRequest, no ack"
        );
        let d4 = delta(4, &mut w, 2, 7);
        b.handle_datagram(t0, &d4, &mut rec);
        assert_eq!(rec.events.get("delta_while_resyncing"), 1);
        assert!(sent(&mut b).is_empty());
        let t1 = t0 + Duration::from_millis(80);
        b.handle_datagram(t1, &full(5, &w), &mut rec);
        assert_eq!(sent(&mut b), vec![(3, 5, CHANNEL_ACK, true)]);
        assert_eq!(b.checksum(), codec::fnv1a(&w));
        assert_eq!(rec.events.get("full_snapshot_fallbacks"), 1);
        assert_eq!(rec.decode_errors.total(), 0);
        assert_eq!((rec.loss_down.expected, rec.loss_down.received), (5, 4));
    }

    #[test]
    fn malformed_datagrams_are_counted_and_dropped() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let mut w = world(4);
        b.handle_datagram(t0, &full(1, &w), &mut rec);
        let before = b.checksum();
        let mut d = delta(2, &mut w, 0, 5);
        d.truncate(d.len() - 1);
        b.handle_datagram(t0, &d, &mut rec);
        // An entity the world does not hold.
        let mut big = world(8);
        let oob = delta(3, &mut big, 7, 1);
        b.handle_datagram(t0, &oob, &mut rec);
        b.handle_datagram(t0, b"garbage", &mut rec);
        assert_eq!(rec.decode_errors.total(), 3);
        assert_eq!(b.checksum(), before, "nothing half-applied");
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(rec.events.get("dialect_hint.spec"), 0);
    }

    #[test]
    fn other_dialects_bytes_are_named() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let mut buf = [0u8; 128];
        let n = crate::games::zergcity::dialects::implementation::codec::encode_server_status(
            &mut buf, 1, 4, 0, 0, b"z",
        )
        .unwrap();
        b.handle_datagram(t0, &buf[..n], &mut rec);
        assert_eq!(rec.events.get("dialect_hint.implementation"), 1);
        // The spec's Pong: a ZCNT header of a type the benchmark does not send.
        let mut pong = b"ZCNT\x01\x04\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00".to_vec();
        pong.extend_from_slice(&[0; 16]);
        b.handle_datagram(t0, &pong, &mut rec);
        assert_eq!(rec.events.get("dialect_hint.spec"), 1);
        assert_eq!(rec.decode_errors.total(), 2);
    }

    /// The spec dialect's bot (wrapped) and the implementation's name the benchmark.
    #[test]
    fn the_other_dialects_name_the_benchmark() {
        let t0 = Instant::now();
        let spec = crate::games::zergcity::ZergCityBot::new(
            BotParams::with_index(0, 1),
            ZergCityOptions::default(),
        );
        let mut s = super::super::hint::SpecWithHint::new(spec, super::super::hint::BenchmarkBytes);
        let mut rec = Recorder::new();
        s.start(t0, &mut rec);
        let f = full(3, &world(2));
        s.handle_datagram(t0, &f, &mut rec);
        assert_eq!(rec.events.get("dialect_hint.benchmark"), 1);
        let mut i = crate::games::zergcity::dialects::implementation::ImplementationBot::new(
            BotParams::with_index(0, 1),
            ZergCityOptions {
                dialect: Dialect::Implementation,
                ..ZergCityOptions::default()
            },
        );
        let mut rec = Recorder::new();
        i.start(t0, &mut rec);
        i.handle_datagram(t0, &f, &mut rec);
        assert_eq!(rec.events.get("dialect_hint.benchmark"), 1);
        assert_eq!(rec.events.get("dialect_hint.spec"), 0);
    }

    /// Bots against the reference server over a simulated ENet link that drops every 7th
    /// delta on the way down: the bots' loss is exactly the link's, and with a 10 ms one-way
    /// delay (the ack reaches the server before the next tick) every delta still carries the
    /// lost one's changes, so no desync.
    #[test]
    fn against_the_reference_server_loss_is_the_links_exactly() {
        let t0 = Instant::now();
        let server = BenchmarkServer::new(BenchmarkServerConfig::default(), t0);
        let bots = (0..3)
            .map(|i| BenchmarkBot::new(BotParams::with_index(i, u64::from(i)), opts()))
            .collect();
        let mut s = Sim::new(t0, server, bots);
        s.link = Link::Enet;
        s.up.delay = Duration::from_millis(10);
        s.down.delay = Duration::from_millis(10);
        let mut deltas = 0u64;
        s.down.drop = Some(sim::rule(move |m| {
            if m.channel != codec::CHANNEL_DELTA {
                return false;
            }
            deltas += 1;
            deltas % 7 == 0
        }));
        for i in 0..3 {
            s.transport_connect(i);
        }
        s.start_all();
        s.run_for(Duration::from_secs(5));
        let down: Vec<_> = s.log.iter().filter(|r| r.dir == Dir::Down).collect();
        let dropped = down.iter().filter(|r| r.dropped).count() as u64;
        let mut expected = 0;
        let mut received = 0;
        for (i, rec) in s.recs.iter().enumerate() {
            assert_eq!(s.bots[i].phase(), BotPhase::Connected);
            assert_eq!(rec.decode_errors.total(), 0);
            assert_eq!(rec.events.get("checksum_mismatch"), 0, "bot {i}");
            expected += rec.loss_down.expected;
            received += rec.loss_down.received;
        }
        assert!(dropped > 30, "{dropped}");
        // Every message sent to a bot is either received or dropped, bar the last one's
        // tail: a drop after the last arrival is not yet seen.
        let sent = down.len() as u64;
        assert!(received + dropped <= sent && sent <= received + dropped + 3);
        assert!(expected - received <= dropped && expected - received + 3 >= dropped);
    }

    /// A round trip longer than a tick (30 ms each way): the ack of the delta before a lost
    /// one reaches the server after the lost one left and clears its changes, so the next
    /// delta lacks them. The bots see the checksum differ, ask for a resync, get a
    /// FullSnapshot and play on; loss is still the link's exactly.
    #[test]
    fn a_lost_delta_behind_a_slow_ack_desyncs_and_the_resync_recovers() {
        let t0 = Instant::now();
        let server = BenchmarkServer::new(BenchmarkServerConfig::default(), t0);
        let bots = (0..2)
            .map(|i| BenchmarkBot::new(BotParams::with_index(i, u64::from(i)), opts()))
            .collect();
        let mut s = Sim::new(t0, server, bots);
        s.link = Link::Enet;
        s.up.delay = Duration::from_millis(30);
        s.down.delay = Duration::from_millis(30);
        let mut deltas = 0u64;
        s.down.drop = Some(sim::rule(move |m| {
            if m.channel != codec::CHANNEL_DELTA {
                return false;
            }
            deltas += 1;
            deltas % 9 == 0
        }));
        for i in 0..2 {
            s.transport_connect(i);
        }
        s.start_all();
        s.run_for(Duration::from_secs(6));
        let resyncs_asked = s
            .log
            .iter()
            .filter(|r| r.dir == Dir::Up && r.bytes.get(5) == Some(&codec::ty::RESYNC_REQUEST))
            .count() as u64;
        let down: Vec<_> = s.log.iter().filter(|r| r.dir == Dir::Down).collect();
        let dropped = down.iter().filter(|r| r.dropped).count() as u64;
        let (mut expected, mut received, mut mismatches, mut fallbacks) = (0, 0, 0, 0);
        for (i, rec) in s.recs.iter().enumerate() {
            assert_eq!(s.bots[i].phase(), BotPhase::Connected);
            assert_eq!(rec.decode_errors.total(), 0);
            mismatches += rec.events.get("checksum_mismatch");
            fallbacks += rec.events.get("full_snapshot_fallbacks");
            expected += rec.loss_down.expected;
            received += rec.loss_down.received;
        }
        assert!(mismatches > 5, "{mismatches} desyncs");
        assert_eq!(resyncs_asked, mismatches, "one ResyncRequest a desync");
        // Each resync answered by a FullSnapshot (bar one still in flight at the end).
        assert!(fallbacks <= mismatches && fallbacks + 2 >= mismatches);
        let sent = down.len() as u64;
        assert!(received + dropped <= sent && sent <= received + dropped + 3);
        assert!(expected - received <= dropped && expected - received + 3 >= dropped);
    }

    /// A message of type `t` at `tick` with `body`, compressed, in a buffer its size.
    fn message(t: u8, tick: u32, body: &[u8]) -> Vec<u8> {
        let mut b =
            vec![0u8; codec::HEADER_LEN + 4 + lz4_flex::block::get_maximum_output_size(body.len())];
        let n = codec::encode_compressed(&mut b, t, tick, body).unwrap();
        b.truncate(n);
        b
    }

    /// An empty delta (no entity changed) carrying `checksum`: 26 bytes on the wire.
    fn empty_delta(tick: u32, checksum: u64) -> Vec<u8> {
        let mut body = checksum.to_le_bytes().to_vec();
        body.extend_from_slice(&0u16.to_le_bytes());
        message(codec::ty::DELTA_SNAPSHOT, tick, &body)
    }

    /// Bytes the bot hashed for each of 1,000 empty deltas with the right checksum, after a
    /// FullSnapshot of `entities` entities, and the deltas it left unchecked.
    fn hashing_per_empty_delta(entities: u32) -> (Vec<u64>, u64) {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let w = world(entities);
        let mut body = entities.to_le_bytes().to_vec();
        body.extend_from_slice(&w);
        b.handle_datagram(t0, &message(codec::ty::FULL_SNAPSHOT, 1, &body), &mut rec);
        assert_eq!(b.phase(), BotPhase::Connected);
        let sum = codec::fnv1a(&w);
        // The first delta checks the world the FullSnapshot brought (and paid for).
        b.handle_datagram(t0, &empty_delta(2, sum), &mut rec);
        assert_eq!(
            b.checksum_bytes_hashed(),
            w.len() as u64,
            "{entities} entities"
        );
        let mut per_delta = Vec::with_capacity(1000);
        for tick in 3..1003 {
            let before = b.checksum_bytes_hashed();
            b.handle_datagram(t0, &empty_delta(tick, sum), &mut rec);
            per_delta.push(b.checksum_bytes_hashed() - before);
        }
        assert_eq!(
            rec.events.get("checksum_mismatch"),
            0,
            "{entities} entities"
        );
        assert_eq!(rec.snapshots_applied, 1002);
        (per_delta, rec.events.get("checksum_unverified"))
    }

    /// Issue 35: a server streaming 26-byte empty deltas made every one cost a pass over the
    /// whole world (1.5 MiB at 65,536 entities), and stalled the run. An empty delta changes
    /// nothing, so its checksum is checked against the hash already known: no bytes hashed,
    /// whatever the world's size, and every one of them checked.
    #[test]
    fn an_empty_delta_costs_no_hashing_whatever_the_worlds_size() {
        for entities in [1, 1_000, 65_536] {
            let (per_delta, unverified) = hashing_per_empty_delta(entities);
            let total: u64 = per_delta.iter().sum();
            assert_eq!(
                total,
                0,
                "{entities} entities: {total} bytes hashed over 1,000 empty deltas \
                 (before the fix: 1,000 x {} bytes)",
                entities as usize * codec::ENTITY_BYTES
            );
            assert_eq!(
                unverified, 0,
                "{entities} entities: every empty delta is checked"
            );
        }
    }

    /// An empty delta whose checksum is wrong is still a desync: the kept hash is the real one.
    #[test]
    fn an_empty_delta_with_a_wrong_checksum_is_a_mismatch() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let w = world(65_536);
        let mut body = 65_536u32.to_le_bytes().to_vec();
        body.extend_from_slice(&w);
        b.handle_datagram(t0, &message(codec::ty::FULL_SNAPSHOT, 1, &body), &mut rec);
        sent(&mut b);
        let sum = codec::fnv1a(&w);
        b.handle_datagram(t0, &empty_delta(2, sum), &mut rec);
        b.handle_datagram(t0, &empty_delta(3, sum ^ 1), &mut rec);
        assert_eq!(rec.events.get("checksum_mismatch"), 1);
        assert_eq!(
            sent(&mut b),
            vec![(3, 2, CHANNEL_ACK, true), (4, 0, CHANNEL_ACK, true)],
            "an ack for the right delta, then a ResyncRequest"
        );
        assert_eq!(b.checksum_bytes_hashed(), w.len() as u64, "one pass in all");
    }

    /// Deltas that change a 65,536-entity world: each pays 32 KiB and its body of hashing,
    /// so the world (1.5 MiB) is hashed about once in 48 deltas, not at every one; the rest
    /// are counted unchecked. A delta lost on the way still shows as a mismatch at the next
    /// delta that is checked.
    #[test]
    fn changing_deltas_on_a_large_world_are_checked_at_a_bounded_rate_and_still_find_a_desync() {
        use super::super::checksum::HASH_ALLOWANCE;
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let mut w = world(65_536);
        let world_len = w.len() as u64;
        let mut body = 65_536u32.to_le_bytes().to_vec();
        body.extend_from_slice(&w);
        b.handle_datagram(t0, &message(codec::ty::FULL_SNAPSHOT, 1, &body), &mut rec);
        let n = w.len() / 24;
        let change = |tick: u32, w: &mut [u8], id: usize| {
            let at = n * 12 + id * 12 + 4;
            w[at..at + 4].copy_from_slice(&tick.to_le_bytes());
            let mut body = codec::fnv1a(w).to_le_bytes().to_vec();
            body.extend_from_slice(&1u16.to_le_bytes());
            body.extend_from_slice(&(id as u16).to_le_bytes());
            body.push(0x10);
            body.extend_from_slice(&tick.to_le_bytes());
            message(codec::ty::DELTA_SNAPSHOT, tick, &body)
        };
        let deltas = 200u64;
        for tick in 2..2 + deltas as u32 {
            let d = change(tick, &mut w, tick as usize % n);
            b.handle_datagram(t0, &d, &mut rec);
        }
        let hashed = b.checksum_bytes_hashed();
        let paid = world_len + deltas * (HASH_ALLOWANCE as u64 + 17);
        assert!(
            hashed <= paid,
            "{hashed} bytes hashed over {deltas} one-entity deltas; paid for: {paid} \
             (before the fix: {} bytes)",
            deltas * world_len
        );
        let checked = hashed / world_len;
        assert!(checked >= 4, "{checked} passes over {deltas} deltas");
        assert_eq!(
            rec.events.get("checksum_unverified") + checked,
            deltas,
            "every delta is checked or counted unchecked"
        );
        assert_eq!(rec.events.get("checksum_mismatch"), 0);
        // A delta lost: the world the bot holds now differs from the server's for good.
        let _lost = change(1000, &mut w, 7);
        let mut found_after = None;
        for (k, tick) in (1001..1101u32).enumerate() {
            let d = change(tick, &mut w, 9);
            b.handle_datagram(t0, &d, &mut rec);
            if rec.events.get("checksum_mismatch") > 0 {
                found_after = Some(k + 1);
                break;
            }
        }
        let found_after = found_after.expect("the desync is found within 100 deltas");
        assert!(found_after <= 50, "found after {found_after} deltas");
    }
}
