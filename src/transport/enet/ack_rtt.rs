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
//!   earlier transmission (its echo names an older sent time of the same command) gives no
//!   sample: the retransmission's acknowledgement may still come and is measured from the
//!   retransmission (Karn's rule, made exact by the echo). A command is measured once.
//!
//! # Forged acknowledgements
//! The sender of the acknowledgements (a hostile server, or anyone on the path) can predict
//! the channel, the sequence number and the 16-bit sent time of what the bot sends next, and
//! answer it before it could have arrived. What it cannot do is name a transmission that
//! never happened without this host noticing, so each ACKNOWLEDGE is judged ([`Judged`]):
//! - *Forged* (counted [`AckRttStats::forged`], and the whole datagram is withheld from ENet,
//!   whose own estimate would otherwise take the echo as a round trip): an echo newer than
//!   any datagram sent to that session (a sent time not yet used); a sequence number newer
//!   than the last one sent on its channel; an echo that names no transmission of a stamped
//!   command (older than its first transmission, "past-dated", or newer than its last); the
//!   same transmission acknowledged twice. ENet never sends any of these (a network that
//!   duplicates a datagram makes the last; its copy is worth nothing to ENet either).
//! - *Early* (counted [`AckRttStats::early`], not a sample, but passed to ENet): an
//!   acknowledgement of the right transmission that came back sooner than
//!   [`floor`](PeerLog::floor_us) after it left. The floor is half the session's own
//!   handshake (our CONNECT's last transmission to the VERIFY_CONNECT that answered it, which
//!   must carry the CONNECT's random connect id, so it cannot be answered before it
//!   arrives) less [`FLOOR_SLACK_US`]. The stamp stays, so the genuine acknowledgement that
//!   follows is still measured.
//!
//! Limits (docs/measurements/rtt.md): an acknowledgement whose stamp is gone (more than
//! [`SLOTS`] newer commands on its channel, or a collision between channels) and a channel
//! beyond the first [`HIGH_CHANNELS`] one sent on cannot be judged and is passed on
//! unmeasured; a forger that sees the bot's traffic can still answer at any time after the
//! floor, so a sample is never lower than the floor, not never lower than the path.
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
/// Subtracted from half the handshake's round trip to make a session's floor: the generator
/// reads a VERIFY_CONNECT as late as its worker wakes, so a handshake can read long where
/// the path is short (on loopback).
pub(super) const FLOOR_SLACK_US: u32 = 1_000;
/// Channels per session whose last sequence number sent is kept (the handshake channel and
/// a protocol's few): an acknowledgement on another channel is not judged "not yet sent".
pub(super) const HIGH_CHANNELS: usize = 4;
/// Where an ACKNOWLEDGE holds the acknowledged sequence number and the echoed sent time.
const ACK_SEQ_AT: usize = 4;
const ACK_SENT_TIME_AT: usize = 6;

/// The transmissions of an acknowledge-requesting command: 12 bytes (packed to the 2-byte
/// alignment of its sequence numbers), so a peer's table is 768 bytes.
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
    state: StampState,
}

/// Where a stamped command stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(u8)]
enum StampState {
    /// Nothing stamped here in this session.
    #[default]
    Empty,
    /// Sent, its last transmission not acknowledged yet.
    Sent,
    /// Its last transmission was acknowledged (and measured).
    Acked,
}

/// What became of one ACKNOWLEDGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Judged {
    /// Not ours to judge (no session, another address), or nothing against it.
    Passed,
    /// Names a transmission that never happened, or one already acknowledged.
    Forged,
}

/// What is known of one local peer slot.
#[derive(Debug, Default)]
struct PeerLog {
    /// The session's remote: its address and its peer id for us.
    session: Option<(SocketAddr, u16)>,
    stamps: Option<Box<[Stamp; SLOTS]>>,
    /// The sent time of the last datagram to the session that asked for an
    /// acknowledgement: an echo newer than it names a datagram not sent yet.
    last_sent: Option<u16>,
    /// The last sequence number sent per channel, for the first [`HIGH_CHANNELS`] used.
    high: [Option<(u8, u16)>; HIGH_CHANNELS],
    /// No acknowledgement is a sample below this (µs; see the module docs). 0 until the
    /// session's handshake was timed.
    floor_us: u32,
    /// When our CONNECT from this slot last left (µs since the epoch, mod 2^32).
    connect_at: Option<u32>,
}

/// `a` is after `b` in ENet's 16-bit wrapping order (sequence numbers, sent times).
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
    /// Acknowledgements with no stamp to pair with (a command not timed, or one whose stamp
    /// was overwritten): not judged.
    pub unmatched: u64,
    /// Samples dropped because the queue was full.
    pub dropped: u64,
    /// Acknowledgements that named a transmission that never happened (a sent time not
    /// used yet, a sequence number not sent yet, a past-dated echo) or one already
    /// acknowledged; their datagrams never reach ENet (`enet_ack_forged`).
    pub forged: u64,
    /// Acknowledgements of the right transmission that came back sooner than the session's
    /// floor: no sample (`enet_ack_early`).
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
    pub stats: AckRttStats,
}

/// `seq` was sent on `channel`: raise the channel's last sequence number.
fn raise_high(high: &mut [Option<(u8, u16)>; HIGH_CHANNELS], channel: u8, seq: u16) {
    for h in high.iter_mut() {
        match h {
            Some((ch, last)) if *ch == channel => {
                if newer(seq, *last) {
                    *last = seq;
                }
                return;
            }
            Some(_) => {}
            None => {
                *h = Some((channel, seq));
                return;
            }
        }
    }
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
            stats: AckRttStats::default(),
        }
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
                s.state = StampState::Empty;
            }
        }
        p.last_sent = None;
        p.high = [None; HIGH_CHANNELS];
        p.floor_us = 0;
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
        let Some(sent_time) = d.sent_time else {
            // Nothing in it asks for an acknowledgement.
            return;
        };
        let now_us = self.now_us as u32;
        if d.peer_id == NO_PEER_ID {
            // A CONNECT: the session's handshake is timed from its last transmission.
            for c in d.commands {
                if c.number == COMMAND_CONNECT {
                    let slot = c.u16_at(OUTGOING_PEER_ID_AT).map(|id| id & PEER_ID_MASK);
                    if let Some(p) = slot.and_then(|id| self.peers.get_mut(usize::from(id))) {
                        p.connect_at = Some(now_us);
                    }
                }
            }
            return;
        }
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
            p.last_sent = Some(match p.last_sent {
                Some(t) if newer(t, sent_time) => t,
                _ => sent_time,
            });
            raise_high(&mut p.high, c.channel, c.reliable_seq);
            let Some(stamps) = p.stamps.as_deref_mut() else {
                continue;
            };
            let s = &mut stamps[index(c.channel, c.reliable_seq)];
            let again =
                s.state != StampState::Empty && s.channel == c.channel && s.seq == c.reliable_seq;
            *s = Stamp {
                at_us: now_us,
                seq: c.reliable_seq,
                sent_time,
                first_sent: if again { s.first_sent } else { sent_time },
                channel: c.channel,
                state: StampState::Sent,
            };
        }
    }

    /// A datagram that arrived from `from` at `now`: [`Judged::Forged`] when an
    /// acknowledgement in it was (see the module docs), and ENet must not read it.
    pub(super) fn inbound(&mut self, now: Instant, from: SocketAddr, d: Datagram<'_>) -> Judged {
        let local = usize::from(d.peer_id);
        if d.peer_id == NO_PEER_ID || local >= self.peers.len() {
            return Judged::Passed;
        }
        let now_us = self.micros(now) as u32;
        let mut verdict = Judged::Passed;
        for c in d.commands {
            if c.number == COMMAND_VERIFY_CONNECT {
                // We connected: the remote names its slot for us.
                if let Some(id) = c.u16_at(OUTGOING_PEER_ID_AT) {
                    let connect_at = self.peers[local].connect_at.take();
                    self.learn(local, from, id & PEER_ID_MASK);
                    if let Some(at) = connect_at {
                        let handshake = now_us.wrapping_sub(at);
                        if handshake <= i32::MAX as u32 {
                            self.peers[local].floor_us =
                                (handshake / 2).saturating_sub(FLOOR_SLACK_US);
                        }
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
            if self.judge(local, from, now_us, c.channel, seq, echo) == Judged::Forged {
                self.stats.forged += 1;
                verdict = Judged::Forged;
            }
        }
        verdict
    }

    /// One ACKNOWLEDGE of (`channel`, `seq`) echoing `echo`, to slot `local` from `from`.
    fn judge(
        &mut self,
        local: usize,
        from: SocketAddr,
        now_us: u32,
        channel: u8,
        seq: u16,
        echo: u16,
    ) -> Judged {
        let p = &mut self.peers[local];
        if p.session.map(|(a, _)| a) != Some(from) {
            return Judged::Passed;
        }
        let Some(last_sent) = p.last_sent else {
            // Nothing timed sent yet (the CONNECT's acknowledgement, before the session).
            return Judged::Passed;
        };
        if newer(echo, last_sent) {
            // A sent time not used yet: an answer to a datagram before it left.
            return Judged::Forged;
        }
        if let Some((_, high)) = p.high.iter().flatten().find(|(ch, _)| *ch == channel) {
            if newer(seq, *high) {
                return Judged::Forged;
            }
        }
        let floor = p.floor_us;
        let Some(stamps) = p.stamps.as_deref_mut() else {
            return Judged::Passed;
        };
        let s = &mut stamps[index(channel, seq)];
        if s.state == StampState::Empty || s.seq != seq || s.channel != channel {
            self.stats.unmatched += 1;
            return Judged::Passed;
        }
        let (first, last) = (s.first_sent, s.sent_time);
        if echo != last {
            // Only a transmission between the first and the last one made can be named.
            if newer(first, echo) || newer(echo, last) {
                return Judged::Forged;
            }
            self.stats.earlier_transmission += 1;
            return Judged::Passed;
        }
        if s.state == StampState::Acked {
            return Judged::Forged;
        }
        // An acknowledgement timed before its send (a caller's `now` that went back)
        // is 0, as the full-width times gave.
        let waited = now_us.wrapping_sub(s.at_us);
        let waited = if waited > i32::MAX as u32 { 0 } else { waited };
        if waited < floor {
            self.stats.early += 1;
            return Judged::Passed;
        }
        s.state = StampState::Acked;
        if self.samples.len() >= SAMPLE_LIMIT {
            self.stats.dropped += 1;
            return Judged::Passed;
        }
        self.stats.samples += 1;
        self.samples
            .push_back((local, Duration::from_micros(u64::from(waited))));
        Judged::Passed
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
                forged: 1,
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

    /// Our CONNECT from slot 0, as C ENet writes it by hand: header peer id 0xFFF with the
    /// sent-time flag (0x8FFF), sent time 0x0010; CONNECT (acknowledge flag, channel 0xFF,
    /// sequence 1), outgoingPeerID 0, session ids 0xFF 0xFF, then ten u32 (mtu ..
    /// connectID, data) left 0.
    fn connect() -> Vec<u8> {
        let mut d = vec![0x8F, 0xFF, 0x00, 0x10];
        d.extend_from_slice(&[0x82, 0xFF, 0x00, 0x01, 0x00, 0x00, 0xFF, 0xFF]);
        d.extend_from_slice(&[0; 40]);
        d
    }

    /// A session whose handshake took 40 ms (CONNECT at 0, VERIFY_CONNECT at 40 ms): its
    /// floor is 40 / 2 - 1 = 19 ms.
    fn connected_through_a_40_ms_handshake(t0: Instant) -> (AckRtt, Reader, SocketAddr) {
        let server: SocketAddr = SERVER.parse().unwrap();
        let mut t = AckRtt::new(t0, 1);
        let mut r = Reader::new(false, false);
        t.set_now(t0);
        t.outbound(server, r.open(&connect()).unwrap());
        t.inbound(at(t0, 40), server, r.open(&verify_connect()).unwrap());
        assert_eq!(t.peers[0].floor_us, 19_000, "half of 40 ms, less 1 ms");
        (t, r, server)
    }

    #[test]
    fn an_acknowledgement_sooner_than_the_floor_is_early_and_the_genuine_one_is_measured() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected_through_a_40_ms_handshake(t0);
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        // A forger that predicted channel, sequence and sent time answers 0.5 ms later.
        let early = t.inbound(
            t0 + Duration::from_micros(100_500),
            server,
            r.open(&ack(0, 1, 100)).unwrap(),
        );
        assert_eq!(
            early,
            Judged::Passed,
            "ENet may read it: it names a real send"
        );
        assert_eq!(t.pop(), None, "0.5 ms on a path whose handshake took 40 ms");
        // 18.9 ms: still under the floor.
        t.inbound(
            t0 + Duration::from_micros(118_900),
            server,
            r.open(&ack(0xFF, 2, 100)).unwrap(),
        );
        assert_eq!(t.pop(), None);
        // The genuine acknowledgements, one round trip later, are the samples.
        t.inbound(at(t0, 140), server, r.open(&ack(0, 1, 100)).unwrap());
        t.inbound(at(t0, 141), server, r.open(&ack(0xFF, 2, 100)).unwrap());
        assert_eq!(t.pop(), Some((0, Duration::from_millis(40))));
        assert_eq!(t.pop(), Some((0, Duration::from_millis(41))));
        assert_eq!(
            t.stats,
            AckRttStats {
                samples: 2,
                early: 2,
                ..AckRttStats::default()
            }
        );
    }

    #[test]
    fn acknowledgements_naming_no_transmission_are_forged_and_never_samples() {
        let t0 = Instant::now();
        let (mut t, mut r, server) = connected(t0);
        t.set_now(at(t0, 100));
        t.outbound(server, r.open(&reliable_and_ping(100, 1, 2)).unwrap());
        t.set_now(at(t0, 400));
        t.outbound(server, r.open(&reliable_and_ping(400, 1, 2)).unwrap());
        let mut judge = |ms: u64, a: Vec<u8>| t.inbound(at(t0, ms), server, r.open(&a).unwrap());
        // A sent time not used yet (the next datagram's, predicted).
        assert_eq!(judge(410, ack(0, 1, 401)), Judged::Forged, "future echo");
        // A sequence number not sent yet on channel 0, with a real sent time.
        assert_eq!(
            judge(410, ack(0, 2, 400)),
            Judged::Forged,
            "unsent sequence"
        );
        // Past-dated: 20 s before the command's first transmission.
        assert_eq!(
            judge(410, ack(0, 1, 100u16.wrapping_sub(20_000))),
            Judged::Forged
        );
        assert_eq!(
            judge(410, ack(0, 1, 99)),
            Judged::Forged,
            "1 ms before the first"
        );
        // The first transmission's: Karn, no sample, not forged.
        assert_eq!(judge(410, ack(0, 1, 100)), Judged::Passed);
        // The retransmission's: the sample; then the same again is a duplicate.
        assert_eq!(judge(430, ack(0, 1, 400)), Judged::Passed);
        assert_eq!(judge(431, ack(0, 1, 400)), Judged::Forged, "duplicate");
        assert_eq!(t.pop(), Some((0, Duration::from_millis(30))));
        assert_eq!(t.pop(), None);
        assert_eq!(
            t.stats,
            AckRttStats {
                samples: 1,
                earlier_transmission: 1,
                forged: 5,
                ..AckRttStats::default()
            }
        );
    }
}
