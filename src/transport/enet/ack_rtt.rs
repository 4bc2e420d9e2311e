//! Round-trip times of single reliable commands, from ENet's own acknowledgements.
//!
//! ENet acknowledges every command sent with the acknowledge flag (reliable sends and their
//! fragments, its PING, the handshake's commands) with an ACKNOWLEDGE naming the command's
//! channel and reliable sequence number and echoing the 16-bit sent time of the datagram that
//! carried it. ENet folds those into a smoothed estimate in whole milliseconds; this module
//! keeps each one as a sample in microseconds instead:
//!
//! - When a datagram leaves, each acknowledge-requesting command in it is stamped with the
//!   instant of sending (the `now` of the call that sent it) and the datagram's sent time,
//!   keyed by channel and reliable sequence number. A retransmission overwrites both.
//! - When an ACKNOWLEDGE arrives for a stamped command whose echoed sent time equals the
//!   stamp's, the sample is its arrival instant minus the stamp. An acknowledgement of an
//!   earlier transmission (its echo names an older sent time) gives no sample: the
//!   retransmission's acknowledgement may still come and is measured from the retransmission
//!   (Karn's rule, made exact by the echo). A command is measured once.
//!
//! # Acknowledgements that are no samples
//! An ACKNOWLEDGE carries nothing its sender could not predict: the channel, the reliable
//! sequence number and the 16-bit sent time (the bot's clock, readable off its traffic). A
//! hostile server can answer a command before it could have arrived, or echo a sent time
//! that never was. Each acknowledgement is judged before it is a sample; the datagram
//! carrying it reaches ENet whatever the verdict, so the judging changes no session (an
//! earlier attempt withheld "forged" datagrams from ENet and broke genuine sessions):
//! - *forged* ([`AckRttStats::forged`]): it names a stamped command with a sent time that
//!   none of its transmissions had (older than its first, "past-dated", or newer than its
//!   last, a sent time not used yet). No sample.
//! - *early* ([`AckRttStats::early`]): the right transmission, back sooner than the
//!   session's *floor* after it left. No sample; the stamp stays, so the acknowledgement that
//!   really answers it is still measured. The floor is half the shortest handshake round trip
//!   seen to that server (our CONNECT's last transmission to the VERIFY_CONNECT answering it,
//!   which must carry the CONNECT's random connect id and so cannot be sent before the
//!   CONNECT arrives), less [`FLOOR_SLACK_US`]. The shortest over every session of the
//!   worker to that server ([`AckRtt::share_handshake`]), not the session's own: a session
//!   that connected while the server worked through a crowd of handshakes reads a long one,
//!   and its genuine acknowledgements would fall under half of it.
//!
//! Limits (docs/measurements/rtt.md): a forger that reads the bot's traffic can still answer
//! any command right after the floor, so a sample can read as low as half the path's round
//! trip, not lower; ENet itself still takes every echo into its own estimate
//! (`enet_rtt_us`); a command whose stamp is gone is not judged.
//!
//! Sends are keyed by the remote's peer id (the header of what we send names the receiver's
//! id for us), acknowledgements by ours (the header of what we receive names our id): the
//! pairing of both per session is read from VERIFY_CONNECT, in whichever direction it passes
//! (a client receives it: header = our id, `outgoingPeerID` = theirs; a server sends it: the
//! other way round). A CONNECT (header 0xFFF) has no session yet and is not timed: the
//! handshake is timed by the engine as a whole.
//!
//! Bounded and allocation-free per datagram: each peer slot has a fixed table of
//! [`SLOTS`] stamps, indexed by sequence number (a command older than [`SLOTS`] newer ones on
//! its channel loses its stamp and is not measured), allocated once per slot on its first
//! session; samples wait in a queue of at most [`SAMPLE_LIMIT`] until the host's owner takes
//! them. Range-coded datagrams are decoded once more for this (rusty_enet's coder, into the
//! reader's own buffer).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::first_map::FirstMap;
use super::handshake::OUTGOING_PEER_ID_AT;
use super::wire::{
    Datagram, COMMAND_ACKNOWLEDGE, COMMAND_CONNECT, COMMAND_VERIFY_CONNECT, FLAG_ACKNOWLEDGE,
    NO_PEER_ID, PEER_ID_MASK,
};

/// Stamps kept per peer: commands of one channel in flight at once beyond this lose theirs.
pub(super) const SLOTS: usize = 64;
/// Heap bytes of one peer's stamp table (`engine/footprint.rs` pins it: one per ENet bot).
#[cfg(test)]
pub(crate) const STAMP_TABLE_BYTES: usize = SLOTS * std::mem::size_of::<Stamp>();
/// Samples waiting for the host's owner; beyond it they are counted and dropped.
pub(super) const SAMPLE_LIMIT: usize = 65_536;
/// Subtracted from half the shortest handshake to make the floor: a worker reads a
/// VERIFY_CONNECT as late as it wakes, so even the shortest handshake can read a little long.
pub(super) const FLOOR_SLACK_US: u32 = 1_000;
/// Where an ACKNOWLEDGE holds the acknowledged sequence number and the echoed sent time.
const ACK_SEQ_AT: usize = 4;
const ACK_SENT_TIME_AT: usize = 6;

/// The transmissions of an acknowledge-requesting command: 12 bytes (packed to the 2-byte
/// alignment of its sequence numbers), so a peer's table is 768 bytes (1 KiB unpacked).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, packed(2))]
struct Stamp {
    /// Microseconds since the tracker's epoch, modulo 2^32 (71 minutes): the round trip is
    /// the wrapping difference, exact up to 35 minutes. A stamp is paired only with the
    /// acknowledgement of its own transmission (sequence number and ENet's sent time), which
    /// a session that ENet keeps alive sends within its timeout (30 s by default), and a
    /// session's stamps go with it.
    at_us: u32,
    seq: u16,
    /// The sent time of its last transmission (the one measured).
    sent_time: u16,
    /// The sent time of its first transmission: an echo older than this is past-dated.
    first_sent: u16,
    channel: u8,
    live: bool,
}

/// What is known of one local peer slot.
#[derive(Debug, Default)]
struct PeerLog {
    /// The session's remote: its address and its peer id for us.
    session: Option<(SocketAddr, u16)>,
    stamps: Option<Box<[Stamp; SLOTS]>>,
    /// When our CONNECT from this slot last left (µs since the epoch, mod 2^32), until the
    /// VERIFY_CONNECT answering it arrives.
    connect_at: Option<u32>,
}

/// `a` is after `b` in ENet's 16-bit wrapping order (sent times).
fn newer(a: u16, b: u16) -> bool {
    (1..0x8000).contains(&a.wrapping_sub(b))
}

/// Counts of what the tracker saw, for tests and diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckRttStats {
    /// Acknowledgements that became samples.
    pub samples: u64,
    /// Acknowledgements of an earlier transmission than the last one (no sample: Karn).
    pub earlier_transmission: u64,
    /// Acknowledgements with no stamp to pair with (a duplicate, a command not timed, or one
    /// whose stamp was overwritten).
    pub unmatched: u64,
    /// Samples dropped because the queue was full.
    pub dropped: u64,
    /// Acknowledgements echoing a sent time none of the command's transmissions had
    /// (past-dated, or not used yet): no sample (`enet_ack_forged`).
    pub forged: u64,
    /// Acknowledgements of the right transmission back sooner than the floor: no sample
    /// (`enet_ack_early`).
    pub early: u64,
}

/// Per-peer stamps and the samples they produced. See the module docs.
#[derive(Debug)]
pub(super) struct AckRtt {
    epoch: Instant,
    /// The `now` of the call under way, µs since the epoch: when what is sent now leaves.
    now_us: u64,
    peers: Vec<PeerLog>,
    /// Local peer slot by (remote address, remote peer id).
    /// One entry at a bots' host: kept inline ([`FirstMap`]).
    by_remote: FirstMap<(SocketAddr, u16), usize>,
    samples: VecDeque<(usize, Duration)>,
    /// The shortest handshake round trip this host timed (µs), and the shortest its owner
    /// saw to the same server across its hosts ([`AckRtt::share_handshake`]).
    own_handshake_us: Option<u32>,
    shared_handshake_us: Option<u32>,
    pub stats: AckRttStats,
}

fn index(channel: u8, seq: u16) -> usize {
    // Consecutive sequence numbers of a channel take consecutive slots; channels are offset
    // so that two channels' early numbers do not collide.
    (usize::from(seq) + usize::from(channel) * 17) % SLOTS
}

impl AckRtt {
    pub(super) fn new(now: Instant, peers: usize) -> Self {
        Self {
            epoch: now,
            now_us: 0,
            peers: (0..peers).map(|_| PeerLog::default()).collect(),
            by_remote: FirstMap::default(),
            samples: VecDeque::new(),
            own_handshake_us: None,
            shared_handshake_us: None,
            stats: AckRttStats::default(),
        }
    }

    /// The shortest handshake round trip this host timed, in µs (`None` before any: a
    /// server's host times none).
    pub(super) fn handshake_us(&self) -> Option<u32> {
        self.own_handshake_us
    }

    /// The shortest handshake round trip to this host's server that its owner saw across
    /// all its hosts: the floor is half of it (or of this host's own, if shorter).
    pub(super) fn share_handshake(&mut self, us: u32) {
        self.shared_handshake_us = Some(self.shared_handshake_us.map_or(us, |s| s.min(us)));
    }

    /// No acknowledgement is a sample sooner than this after its command left (µs).
    pub(super) fn floor_us(&self) -> u32 {
        self.own_handshake_us
            .into_iter()
            .chain(self.shared_handshake_us)
            .min()
            .map_or(0, |shortest| (shortest / 2).saturating_sub(FLOOR_SLACK_US))
    }

    /// Sessions known (by remote address and peer id), and the hash table's capacity (0:
    /// every session so far fit inline).
    #[cfg(test)]
    pub(super) fn sessions(&self) -> (usize, usize) {
        (self.by_remote.len(), self.by_remote.table_capacity())
    }

    fn micros(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// The time of the call under way (never goes backwards).
    pub(super) fn set_now(&mut self, now: Instant) {
        self.now_us = self.now_us.max(self.micros(now));
    }

    /// Local slot `local` now has a session with peer `remote` at `addr`: forget what the
    /// slot held before.
    fn learn(&mut self, local: usize, addr: SocketAddr, remote: u16) {
        if local >= self.peers.len() {
            return;
        }
        if self.peers[local].session == Some((addr, remote)) {
            return;
        }
        self.forget(local);
        if let Some(old) = self.by_remote.insert((addr, remote), local) {
            if old != local {
                self.forget_stamps(old);
                self.peers[old].session = None;
            }
        }
        let p = &mut self.peers[local];
        p.session = Some((addr, remote));
        p.stamps
            .get_or_insert_with(|| Box::new([Stamp::default(); SLOTS]));
    }

    fn forget_stamps(&mut self, local: usize) {
        let p = &mut self.peers[local];
        if let Some(stamps) = p.stamps.as_deref_mut() {
            for s in stamps.iter_mut() {
                s.live = false;
            }
        }
    }

    /// Slot `local`'s session ended: its stamps and queued samples go.
    pub(super) fn forget(&mut self, local: usize) {
        if local >= self.peers.len() {
            return;
        }
        if let Some(key) = self.peers[local].session.take() {
            if self.by_remote.get(&key) == Some(&local) {
                self.by_remote.remove(&key);
            }
        }
        self.forget_stamps(local);
        self.samples.retain(|&(p, _)| p != local);
    }

    /// A datagram this host sent to `to`.
    pub(super) fn outbound(&mut self, to: SocketAddr, d: Datagram<'_>) {
        if d.peer_id == NO_PEER_ID {
            // A CONNECT (no session yet): when it left starts the handshake's round trip.
            for c in d.commands {
                if c.number != COMMAND_CONNECT {
                    continue;
                }
                let Some(id) = c.u16_at(OUTGOING_PEER_ID_AT) else {
                    continue;
                };
                let now = self.now_us as u32;
                if let Some(p) = self.peers.get_mut(usize::from(id & PEER_ID_MASK)) {
                    p.connect_at = Some(now);
                }
            }
            return;
        }
        let Some(sent_time) = d.sent_time else {
            // Nothing in it asks for an acknowledgement.
            return;
        };
        let remote = d.peer_id;
        let mut local = self.by_remote.get(&(to, remote)).copied();
        for c in d.commands {
            if c.number == COMMAND_VERIFY_CONNECT {
                // We accepted this remote: our slot is the command's sender.
                if let Some(id) = c.u16_at(OUTGOING_PEER_ID_AT) {
                    let id = usize::from(id & PEER_ID_MASK);
                    self.learn(id, to, remote);
                    local = Some(id);
                }
            }
            if c.flags & FLAG_ACKNOWLEDGE == 0 {
                continue;
            }
            let Some(p) = local.and_then(|l| self.peers.get_mut(l)) else {
                continue;
            };
            let Some(stamps) = p.stamps.as_deref_mut() else {
                continue;
            };
            let slot = &mut stamps[index(c.channel, c.reliable_seq)];
            // A retransmission keeps its command's first sent time.
            let first_sent = if slot.live && slot.seq == c.reliable_seq && slot.channel == c.channel
            {
                slot.first_sent
            } else {
                sent_time
            };
            *slot = Stamp {
                at_us: self.now_us as u32,
                seq: c.reliable_seq,
                sent_time,
                first_sent,
                channel: c.channel,
                live: true,
            };
        }
    }

    /// A datagram that arrived from `from` at `now`.
    pub(super) fn inbound(&mut self, now: Instant, from: SocketAddr, d: Datagram<'_>) {
        let local = usize::from(d.peer_id);
        if d.peer_id == NO_PEER_ID || local >= self.peers.len() {
            return;
        }
        let now_us = self.micros(now);
        let floor = self.floor_us();
        for c in d.commands {
            if c.number == COMMAND_VERIFY_CONNECT {
                // We connected: the remote names its slot for us.
                if let Some(id) = c.u16_at(OUTGOING_PEER_ID_AT) {
                    self.learn(local, from, id & PEER_ID_MASK);
                }
                if let Some(sent) = self.peers[local].connect_at.take() {
                    let hs = (now_us as u32).wrapping_sub(sent);
                    if hs <= i32::MAX as u32 {
                        self.own_handshake_us =
                            Some(self.own_handshake_us.map_or(hs, |h| h.min(hs)));
                    }
                }
                continue;
            }
            if c.number != COMMAND_ACKNOWLEDGE {
                continue;
            }
            let (Some(seq), Some(echo)) = (c.u16_at(ACK_SEQ_AT), c.u16_at(ACK_SENT_TIME_AT)) else {
                continue;
            };
            let p = &mut self.peers[local];
            if p.session.map(|(a, _)| a) != Some(from) {
                continue;
            }
            let Some(stamps) = p.stamps.as_deref_mut() else {
                continue;
            };
            let s = &mut stamps[index(c.channel, seq)];
            if !s.live || s.seq != seq || s.channel != c.channel {
                self.stats.unmatched += 1;
                continue;
            }
            if s.sent_time != echo {
                // One of its earlier transmissions (Karn), or none of them at all.
                if newer(s.first_sent, echo) || newer(echo, s.sent_time) {
                    self.stats.forged += 1;
                } else {
                    self.stats.earlier_transmission += 1;
                }
                continue;
            }
            // An acknowledgement timed before its send (a caller's `now` that went back)
            // is 0, as the full-width times gave.
            let waited = (now_us as u32).wrapping_sub(s.at_us);
            let waited = if waited > i32::MAX as u32 { 0 } else { waited };
            if waited < floor {
                // Sooner than any genuine answer: the stamp stays for the real one.
                self.stats.early += 1;
                continue;
            }
            s.live = false;
            let rtt = Duration::from_micros(u64::from(waited));
            if self.samples.len() >= SAMPLE_LIMIT {
                self.stats.dropped += 1;
                continue;
            }
            self.stats.samples += 1;
            self.samples.push_back((local, rtt));
        }
    }

    /// The oldest sample not taken yet: the local peer slot and the round trip.
    pub(super) fn pop(&mut self) -> Option<(usize, Duration)> {
        self.samples.pop_front()
    }

    /// Slot `local` has a session whose sends are timed.
    #[cfg(test)]
    fn tracks(&self, local: usize) -> bool {
        self.peers.get(local).is_some_and(|p| p.session.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::Reader;
    use super::*;

    const SERVER: &str = "10.0.0.2:7777";

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// What a server sends a client that connected as its peer 0 (header peer id 0, no sent
    /// time), accepting it as the server's peer 9, written out by hand: the ACKNOWLEDGE of the
    /// CONNECT, then VERIFY_CONNECT (acknowledge flag, channel 0xFF, sequence 1) whose
    /// `outgoingPeerID` is 9. Both headers carry a sent time, as ENet writes them.
    fn verify_connect() -> Vec<u8> {
        let mut d = vec![0x80, 0x00, 0x00, 0x10];
        d.extend_from_slice(&[0x01, 0xFF, 0x00, 0x01, 0x00, 0x01, 0x03, 0xE8]);
        d.extend_from_slice(&[0x83, 0xFF, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00]);
        d.extend_from_slice(&[0; 32]); // mtu .. throttle deceleration: 8 u32
        d.extend_from_slice(&[0, 0, 0, 5]); // connectID
        d
    }

    /// What the client sends its server's peer 9 (header 0x8009 = sent time present) at
    /// `sent_time`: a SEND_RELIABLE on channel 0 with sequence `seq` and a PING, sequence
    /// `ping`.
    fn reliable_and_ping(sent_time: u16, seq: u16, ping: u16) -> Vec<u8> {
        let [t0, t1] = sent_time.to_be_bytes();
        let [s0, s1] = seq.to_be_bytes();
        let [p0, p1] = ping.to_be_bytes();
        let mut d = vec![0x80, 0x09, t0, t1];
        d.extend_from_slice(&[0x86, 0x00, s0, s1, 0x00, 0x01, b'!']);
        d.extend_from_slice(&[0x85, 0xFF, p0, p1]);
        d
    }

    /// An ACKNOWLEDGE to the client's peer 0 of (`channel`, `seq`) echoing `echo`.
    fn ack(channel: u8, seq: u16, echo: u16) -> Vec<u8> {
        let [s0, s1] = seq.to_be_bytes();
        let [e0, e1] = echo.to_be_bytes();
        vec![
            0x80, 0x00, 0x12, 0x34, 0x01, channel, s0, s1, s0, s1, e0, e1,
        ]
    }

    fn connected(t0: Instant) -> (AckRtt, Reader, SocketAddr) {
        let server: SocketAddr = SERVER.parse().unwrap();
        let mut t = AckRtt::new(t0, 1);
        let mut r = Reader::new(false, false);
        let v = verify_connect();
        t.inbound(at(t0, 20), server, r.open(&v).unwrap());
        assert!(
            t.tracks(0),
            "the VERIFY_CONNECT paired slot 0 with the server's 9"
        );
        (t, r, server)
    }

    #[test]
    fn an_acknowledgement_echoing_the_sent_time_is_one_sample_in_microseconds() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected(t0);
        t.set_now(t0 + Duration::from_micros(100_250));
        let d = reliable_and_ping(0x0064, 1, 2);
        t.outbound(server, r.open(&d).unwrap());
        // The PING's acknowledgement first, then the reliable's, then a duplicate.
        let now = t0 + Duration::from_micros(123_456);
        t.inbound(now, server, r.open(&ack(0xFF, 2, 0x0064)).unwrap());
        t.inbound(
            now + Duration::from_micros(7),
            server,
            r.open(&ack(0, 1, 0x0064)).unwrap(),
        );
        t.inbound(now, server, r.open(&ack(0, 1, 0x0064)).unwrap());
        assert_eq!(t.pop(), Some((0, Duration::from_micros(23_206))));
        assert_eq!(t.pop(), Some((0, Duration::from_micros(23_213))));
        assert_eq!(t.pop(), None);
        assert_eq!(
            t.stats,
            AckRttStats {
                samples: 2,
                unmatched: 1,
                ..AckRttStats::default()
            }
        );
    }

    #[test]
    fn a_retransmission_is_measured_from_itself_and_the_first_sends_ack_is_no_sample() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected(t0);
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        // Retransmitted at 400 ms in a datagram sent at ENet time 400.
        t.set_now(at(t0, 400));
        t.outbound(server, r.open(&reliable_and_ping(400, 1, 2)).unwrap());
        // The first transmission's acknowledgement arrives late: no sample from 100 ms.
        t.inbound(at(t0, 410), server, r.open(&ack(0, 1, 100)).unwrap());
        assert_eq!(t.pop(), None);
        // The retransmission's: 30 ms.
        t.inbound(at(t0, 430), server, r.open(&ack(0, 1, 400)).unwrap());
        assert_eq!(t.pop(), Some((0, Duration::from_millis(30))));
        assert_eq!(t.stats.earlier_transmission, 1);
    }

    #[test]
    fn acknowledgements_from_elsewhere_or_of_other_commands_are_not_samples() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected(t0);
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        let other: SocketAddr = "10.0.0.3:7777".parse().unwrap();
        t.inbound(at(t0, 120), other, r.open(&ack(0, 1, 100)).unwrap());
        t.inbound(at(t0, 120), server, r.open(&ack(1, 1, 100)).unwrap());
        t.inbound(at(t0, 120), server, r.open(&ack(0, 2, 100)).unwrap());
        assert_eq!(t.pop(), None);
        // Sent to another remote peer id: not this session's.
        let mut d = reliable_and_ping(200, 3, 4);
        d[1] = 0x0A;
        t.set_now(at(t0, 200));
        t.outbound(server, r.open(&d).unwrap());
        t.inbound(at(t0, 220), server, r.open(&ack(0, 3, 200)).unwrap());
        assert_eq!(t.pop(), None);
        // The session ends: its stamps go with it.
        t.forget(0);
        t.inbound(at(t0, 220), server, r.open(&ack(0, 1, 100)).unwrap());
        assert_eq!(t.pop(), None);
        assert!(!t.tracks(0));
    }

    /// Our CONNECT from slot 0, at ENet time `sent_time`, written out by hand: header peer
    /// id 0xFFF with the sent-time flag, CONNECT (acknowledge flag, channel 0xFF, sequence
    /// 1) with `outgoingPeerID` 0.
    fn connect(sent_time: u16) -> Vec<u8> {
        let [t0, t1] = sent_time.to_be_bytes();
        let mut d = vec![0x8F, 0xFF, t0, t1];
        d.extend_from_slice(&[0x82, 0xFF, 0x00, 0x01]);
        d.extend_from_slice(&[0x00, 0x00]); // outgoingPeerID 0
        d.extend_from_slice(&[0xFF, 0xFF]); // session ids
        d.extend_from_slice(&[0; 32]); // mtu .. throttle deceleration: 8 u32
        d.extend_from_slice(&[0, 0, 0, 5]); // connectID
        d.extend_from_slice(&[0, 0, 0, 0]); // data
        d
    }

    /// A session whose handshake took 40 ms (CONNECT at 0, VERIFY_CONNECT at 40 ms).
    fn connected_over_40ms(t0: Instant) -> (AckRtt, Reader, SocketAddr) {
        let server: SocketAddr = SERVER.parse().unwrap();
        let mut t = AckRtt::new(t0, 1);
        let mut r = Reader::new(false, false);
        t.set_now(t0);
        t.outbound(server, r.open(&connect(0)).unwrap());
        t.inbound(at(t0, 40), server, r.open(&verify_connect()).unwrap());
        assert!(t.tracks(0));
        (t, r, server)
    }

    /// Issue 35, break 6: a server that predicts the bot's sequence numbers and sent times
    /// answered commands before they could arrive (min 167 µs on a 40 ms path). The
    /// handshake (which cannot be answered early: VERIFY_CONNECT carries the CONNECT's random
    /// id) took 40 ms, so nothing comes back sooner than 19 ms: an acknowledgement at
    /// 0.5 ms is early, no sample, and the genuine one after it is measured.
    #[test]
    fn an_acknowledgement_sooner_than_half_the_handshake_is_early_and_no_sample() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected_over_40ms(t0);
        assert_eq!(t.handshake_us(), Some(40_000));
        assert_eq!(t.floor_us(), 19_000);
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        t.inbound(
            t0 + Duration::from_micros(100_500),
            server,
            r.open(&ack(0, 1, 100)).unwrap(),
        );
        assert_eq!(t.pop(), None);
        assert_eq!(t.stats.early, 1);
        t.inbound(at(t0, 140), server, r.open(&ack(0, 1, 100)).unwrap());
        assert_eq!(t.pop(), Some((0, Duration::from_millis(40))));
        assert_eq!(t.stats.samples, 1);
    }

    /// The floor is half the shortest handshake the worker saw to that server: a session
    /// that connected amid a crowd (a 40 ms handshake on a 2 ms path) keeps its genuine
    /// samples once another session's 2 ms handshake is shared.
    #[test]
    fn a_shorter_handshake_shared_by_the_worker_lowers_the_floor() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected_over_40ms(t0);
        t.share_handshake(2_000);
        assert_eq!(t.floor_us(), 0);
        t.share_handshake(10_000);
        assert_eq!(t.floor_us(), 0, "the shortest stays");
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        t.inbound(at(t0, 102), server, r.open(&ack(0, 1, 100)).unwrap());
        assert_eq!(t.pop(), Some((0, Duration::from_millis(2))));
        assert_eq!(t.stats.early, 0);
    }

    /// An echo that names none of the command's transmissions: past-dated (older than its
    /// first, as a server pushing ENet's estimate to 20 s sent) or a sent time not used yet.
    /// Counted forged, no sample; the earlier transmission's echo stays Karn's case.
    #[test]
    fn an_echo_of_no_transmission_is_forged_and_no_sample() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected(t0);
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        t.set_now(at(t0, 400));
        t.outbound(server, r.open(&reliable_and_ping(400, 1, 2)).unwrap());
        // Past-dated: 20 s before the first transmission (ENet time wraps at 65,536 ms).
        t.inbound(
            at(t0, 410),
            server,
            r.open(&ack(0, 1, 100u16.wrapping_sub(20_000))).unwrap(),
        );
        // Not used yet.
        t.inbound(at(t0, 410), server, r.open(&ack(0, 1, 450)).unwrap());
        // The first transmission's: Karn, not forged.
        t.inbound(at(t0, 410), server, r.open(&ack(0, 1, 100)).unwrap());
        assert_eq!(t.pop(), None);
        assert_eq!(t.stats.forged, 2);
        assert_eq!(t.stats.earlier_transmission, 1);
        // The retransmission's own: measured from it.
        t.inbound(at(t0, 430), server, r.open(&ack(0, 1, 400)).unwrap());
        assert_eq!(t.pop(), Some((0, Duration::from_millis(30))));
    }

    #[test]
    fn a_server_pairs_the_session_from_the_verify_connect_it_sends() {
        let t0 = Instant::now();
        let client: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let mut t = AckRtt::new(t0, 16);
        let mut r = Reader::new(false, false);
        // Our slot 9 answers the client's peer 0: header peer id 0, outgoingPeerID 9, sent at
        // ENet time 0x0010.
        t.set_now(at(t0, 16));
        t.outbound(client, r.open(&verify_connect()).unwrap());
        assert!(t.tracks(9));
        // The client acknowledges the VERIFY_CONNECT (channel 0xFF, sequence 1) to our 9.
        let mut a = ack(0xFF, 1, 0x0010);
        a[1] = 9;
        t.inbound(at(t0, 19), client, r.open(&a).unwrap());
        assert_eq!(t.pop(), Some((9, Duration::from_millis(3))));
    }
}
