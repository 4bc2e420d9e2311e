//! [`EnetHost`]: ENet over the caller's socket and clock, any number of peers; what the
//! caller drives (connect, send, service, poll) and the events and counters it reads.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusty_enet as enet;

use super::ack_rtt::AckRtt;
use super::admission::{Proof, CONNECT_PEER_ID};
use super::clock::Clock;
use super::config::{EnetConfig, DEFAULT_THROTTLE, MAX_ENET_DATAGRAM};
use super::handshake::Handshake;
use super::socket::QueueSocket;
use super::types::{
    DisconnectReason, EnetError, EnetEvent, EnetPacket, HostStats, PeerId, PeerState, PeerStats,
};
use super::wire::COMMAND_CONNECT;
use crate::protocol::Transmit;

/// What this host knows of a peer slot beyond ENet's own state.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PeerMeta {
    /// `connect` returned it or a `Connected` event announced it: it owes a `Disconnected`.
    pub(super) announced: bool,
    /// The session reached Connected.
    pub(super) connected: bool,
    /// This side asked to disconnect.
    pub(super) local_close: bool,
    pub(super) packets_sent: u64,
    pub(super) bytes_sent: u64,
    pub(super) packets_received: u64,
    pub(super) bytes_received: u64,
    /// This slot holds a proof of its address in the gate (released when the slot ends).
    pub(super) proof: Option<SocketAddr>,
}

/// What a host that accepts connections knows of a peer slot: kept apart from [`PeerMeta`]
/// and made only when the first CONNECT arrives, so a bots' host (which only connects out)
/// carries none of it: 56 bytes a peer slot less.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Accepted {
    /// An incoming connect not finished yet: since when (see "Admission").
    pub(super) half_open_since: Option<Instant>,
    /// An accepted session: the remote's address, its peer id and the connect id, read from
    /// our VERIFY_CONNECT (see "Address reuse").
    pub(super) remote: Option<(SocketAddr, u16, u32)>,
}

/// A seed for ENet's connect ids when [`EnetConfig::seed`] gives none. ENet would seed from
/// the host's memory address plus its clock, and a host's clock here always starts at
/// `CLOCK_START_MS` (`clock.rs`): a host allocated where a freed one was, or the same
/// allocation in the next process (without address randomisation), would draw the same connect ids, and a
/// server takes a CONNECT whose address and connect id match a session it still holds for a
/// duplicate (and "Address reuse" needs the ids to differ). std's `RandomState` is keyed from
/// the operating system's generator; the counter and clock make each call differ.
fn fresh_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

fn millis_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// An ENet host over the caller's socket: sans-IO, any number of peers. See the module docs.
pub struct EnetHost {
    pub(super) host: enet::Host<QueueSocket>,
    pub(super) clock: Clock,
    pub(super) meta: Vec<PeerMeta>,
    /// By slot, once a CONNECT has arrived (empty until then: no slot can be half-open or
    /// hold an accepted session before one).
    pub(super) accepted: Vec<Accepted>,
    pub(super) events: VecDeque<EnetEvent>,
    pub(super) last_service: Instant,
    pub(super) service_interval: Duration,
    pub(super) ping_interval: u32,
    pub(super) timeout: (u32, u32, u32),
    pub(super) throttle: (u32, u32, u32),
    /// Some peer slot is not Disconnected: ENet has timers running.
    pub(super) busy: bool,
    /// Packets were queued since the last flush or service.
    pub(super) unflushed: bool,
    pub(super) half_open_timeout: Duration,
    pub(super) half_open_evictable: Duration,
    /// CONNECT datagrams queued since the last service.
    pub(super) pending_connects: usize,
    /// The `now` of the current service.
    pub(super) now: Instant,
    /// CONNECTs queued since the last service: from where, remote peer id and connect id.
    pub(super) connects: Vec<(SocketAddr, Handshake)>,
    /// Scratch: each slot's address while it is in use (kept so a service allocates nothing).
    pub(super) slot_addrs: Vec<Option<SocketAddr>>,
}

impl fmt::Debug for EnetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnetHost")
            .field("peer_limit", &self.meta.len())
            .field("busy", &self.busy)
            .field("events", &self.events.len())
            .field("stats", &self.host.socket().stats)
            .finish_non_exhaustive()
    }
}

impl EnetHost {
    /// A host with no peers yet. `now` starts its clock.
    pub fn new(now: Instant, config: &EnetConfig) -> Result<Self, EnetError> {
        if config.peer_limit == 0 || config.peer_limit > enet::PeerID::MAX {
            return Err(EnetError::BadParameter("peer_limit"));
        }
        if config.channel_limit == 0
            || config.channel_limit > enet::consts::PROTOCOL_MAXIMUM_CHANNEL_COUNT as usize
        {
            return Err(EnetError::BadParameter("channel_limit"));
        }
        if config.queue_limit == 0 {
            return Err(EnetError::BadParameter("queue_limit"));
        }
        // The clock's phase is drawn apart from the connect-id seed (a CONNECT shows those).
        let phase = match config.seed {
            Some(seed) => (seed.wrapping_mul(0x9E37_79B9) >> 16) as u16,
            None => fresh_seed() as u16,
        };
        let clock = Clock::new(now, phase);
        let settings = enet::HostSettings {
            peer_limit: config.peer_limit,
            channel_limit: config.channel_limit,
            incoming_bandwidth_limit: config.incoming_bandwidth,
            outgoing_bandwidth_limit: config.outgoing_bandwidth,
            compressor: if config.range_coder {
                Some(Box::new(enet::RangeCoder::new()))
            } else {
                None
            },
            checksum: if config.checksum {
                Some(Box::new(enet::crc32))
            } else {
                None
            },
            time: clock.reader(),
            seed: Some(config.seed.unwrap_or_else(fresh_seed)),
        };
        let acks = config.ack_rtt.then(|| AckRtt::new(now, config.peer_limit));
        let socket = QueueSocket::new(
            config.queue_limit,
            config.checksum,
            config.range_coder,
            acks,
        );
        let mut host = enet::Host::new(socket, settings).map_err(|e| match e {
            enet::error::HostNewError::BadParameter(b) => EnetError::BadParameter(b.parameter),
            enet::error::HostNewError::FailedToInitializeSocket(never) => match never {},
        })?;
        host.set_mtu(config.mtu)
            .map_err(|_| EnetError::BadParameter("mtu"))?;
        Ok(Self {
            host,
            clock,
            meta: vec![PeerMeta::default(); config.peer_limit],
            accepted: Vec::new(),
            events: VecDeque::new(),
            last_service: now,
            service_interval: config.service_interval.max(Duration::from_millis(1)),
            ping_interval: millis_u32(config.ping_interval).max(1),
            timeout: (
                config.timeout_limit,
                millis_u32(config.timeout_minimum),
                millis_u32(config.timeout_maximum),
            ),
            throttle: config.throttle,
            busy: false,
            unflushed: false,
            half_open_timeout: config.half_open_timeout,
            half_open_evictable: config.half_open_evictable,
            pending_connects: 0,
            now,
            connects: Vec::new(),
            // Grown at its first use, which only a host that accepts connections makes.
            slot_addrs: Vec::new(),
        })
    }

    /// Set the host's clock (ENet's milliseconds, and the instant sends are stamped with).
    pub(super) fn set_now(&mut self, now: Instant) {
        self.clock.set(now);
        if let Some(acks) = self.host.socket_mut().acks.as_mut() {
            acks.set_now(now);
        }
    }

    /// Forget all this host knows of slot `i` (its proof, if any, must be released first).
    pub(super) fn clear_slot(&mut self, i: usize) {
        self.meta[i] = PeerMeta::default();
        if let Some(a) = self.accepted.get_mut(i) {
            *a = Accepted::default();
        }
    }

    /// Slot `i`'s session is over: its acknowledgement timing goes with it.
    pub(super) fn forget_rtt(&mut self, i: usize) {
        if let Some(acks) = self.host.socket_mut().acks.as_mut() {
            acks.forget(i);
        }
    }

    /// Start connecting to `addr` with `channels` channels (1..=255); `data` reaches the other
    /// side's `Connected` event. The handshake goes out on the next flush or service; a
    /// `Connected` or `Disconnected { reason: ConnectFailed }` event ends it.
    pub fn connect(
        &mut self,
        now: Instant,
        addr: SocketAddr,
        channels: usize,
        data: u32,
    ) -> Result<PeerId, EnetError> {
        if channels == 0 || channels > enet::consts::PROTOCOL_MAXIMUM_CHANNEL_COUNT as usize {
            return Err(EnetError::BadParameter("channels"));
        }
        self.set_now(now);
        let limit = self.meta.len();
        let (ping, (tl, tmin, tmax)) = (self.ping_interval, self.timeout);
        let peer = self
            .host
            .connect(addr, channels, data)
            .map_err(|_| EnetError::NoFreePeer(limit))?;
        peer.set_ping_interval(ping);
        peer.set_timeout(tl, tmin, tmax);
        // The throttle is configured once connected: ENet's VERIFY_CONNECT must echo the
        // throttle settings the CONNECT carried, and a change in between fails the handshake.
        let id = PeerId(peer.id().0);
        self.clear_slot(id.0);
        self.meta[id.0].announced = true;
        // We chose to talk to it: the address needs no proof.
        self.hold_proof(id.0, addr);
        self.busy = true;
        self.unflushed = true;
        Ok(id)
    }

    /// Queue `bytes` for `peer` on `channel`. Reliable packets are acknowledged, retransmitted
    /// and delivered in order within their channel; unreliable ones are sequenced (a late one is
    /// dropped) and, like C ENet's default, sent reliably in fragments when larger than the MTU.
    /// Nothing leaves before the next [`flush`](Self::flush) or [`service`](Self::service).
    pub fn send(
        &mut self,
        peer: PeerId,
        channel: u8,
        reliable: bool,
        bytes: &[u8],
    ) -> Result<(), EnetError> {
        let p = self
            .host
            .get_peer_mut(enet::PeerID(peer.0))
            .ok_or(EnetError::UnknownPeer(peer))?;
        let packet = if reliable {
            enet::Packet::reliable(bytes)
        } else {
            enet::Packet::unreliable(bytes)
        };
        p.send(channel, &packet).map_err(|e| match e {
            enet::error::PeerSendError::NotConnected => EnetError::NotConnected,
            enet::error::PeerSendError::InvalidChannel => EnetError::InvalidChannel(channel),
            enet::error::PeerSendError::PacketTooLarge
            | enet::error::PeerSendError::FragmentsExceeded => {
                EnetError::PacketTooLarge(bytes.len())
            }
            enet::error::PeerSendError::FailedToQueue => EnetError::FailedToQueue,
        })?;
        let m = &mut self.meta[peer.0];
        m.packets_sent += 1;
        m.bytes_sent += bytes.len() as u64;
        self.unflushed = true;
        Ok(())
    }

    /// [`send`](Self::send) what a protocol state machine wrote: `buf[..t.len]` with its
    /// channel and reliability hints.
    pub fn send_transmit(
        &mut self,
        peer: PeerId,
        t: &Transmit,
        buf: &[u8],
    ) -> Result<(), EnetError> {
        self.send(peer, t.channel, t.reliable, &buf[..t.len])
    }

    /// End `peer`'s session politely: packets already queued go first, then ENet's disconnect,
    /// and a `Disconnected { reason: Local }` event follows once the other side acknowledged (or
    /// the peer timeout passed). A peer still connecting is dropped at once (with its event).
    pub fn disconnect(&mut self, now: Instant, peer: PeerId, data: u32) -> Result<(), EnetError> {
        self.close(now, peer, data, false)
    }

    /// End `peer`'s session at once: one unacknowledged disconnect datagram is queued, the slot
    /// is freed and the `Disconnected { reason: Local }` event is queued immediately.
    pub fn disconnect_now(
        &mut self,
        now: Instant,
        peer: PeerId,
        data: u32,
    ) -> Result<(), EnetError> {
        self.close(now, peer, data, true)
    }

    pub(super) fn close(
        &mut self,
        now: Instant,
        peer: PeerId,
        data: u32,
        immediate: bool,
    ) -> Result<(), EnetError> {
        self.set_now(now);
        let p = self
            .host
            .get_peer_mut(enet::PeerID(peer.0))
            .ok_or(EnetError::UnknownPeer(peer))?;
        if immediate {
            p.disconnect_now(data);
        } else {
            p.disconnect_later(data);
        }
        let gone = p.state() == enet::PeerState::Disconnected;
        let m = &mut self.meta[peer.0];
        m.local_close = true;
        if gone && m.announced {
            // ENet resets a slot it was not connected on without an event; keep the promise of
            // one `Disconnected` per announced peer.
            let proof = m.proof.take();
            self.clear_slot(peer.0);
            if let Some(addr) = proof {
                self.host.socket_mut().gate.release(addr, now);
            }
            self.forget_rtt(peer.0);
            self.events.push_back(EnetEvent::Disconnected {
                peer,
                data,
                reason: DisconnectReason::Local,
            });
        }
        self.unflushed = true;
        self.refresh_busy();
        Ok(())
    }

    /// A datagram that arrived on this host's socket from `from`. Queued until the next
    /// [`service`](Self::service).
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let sock = self.host.socket_mut();
        if !sock.gate.is_proven(from) && sock.check_proof(from, data) == Proof::Forged {
            // A blind guess at the proof: ENet never sees it, and the half-open connect it
            // tried to complete ends (one guess per CONNECT).
            sock.stats.forged_proofs += 1;
            sock.stats.bytes_in += data.len() as u64;
            sock.stats.datagrams_in += 1;
            sock.gate.received(from, data.len());
            return;
        }
        if data.len() > MAX_ENET_DATAGRAM || !sock.inbound.push(from, data) {
            sock.stats.dropped_in += 1;
            return;
        }
        if let Some(acks) = sock.acks.as_mut() {
            // Acknowledgements are timed at arrival (`now`), not when ENet reads them.
            if let Some(d) = sock.reader.open(data) {
                acks.inbound(now, from, d);
            }
        }
        sock.stats.datagrams_in += 1;
        sock.stats.bytes_in += data.len() as u64;
        sock.gate.received(from, data.len());
        // The header's peer id (low 12 bits of the first two bytes, never compressed) is
        // 0xFFF only in a CONNECT: the sender has no id at this host yet.
        if data.len() >= 2 && u16::from_be_bytes([data[0], data[1]]) & 0x0FFF == CONNECT_PEER_ID {
            self.pending_connects += 1;
            sock.watch_verify = true;
            if self.accepted.is_empty() {
                self.accepted = vec![Accepted::default(); self.meta.len()];
            }
            if let Some(c) = sock.reader.find(data, COMMAND_CONNECT) {
                self.connects.push((from, c));
            }
        }
    }

    /// Run ENet at `now`: process queued datagrams, run its timers, send what is due. Returns
    /// the number of events it queued for [`poll_event`](Self::poll_event).
    pub fn service(&mut self, now: Instant) -> usize {
        self.set_now(now);
        self.now = now;
        let connects = std::mem::take(&mut self.pending_connects);
        self.supersede();
        self.end_condemned();
        self.bound_half_open(now, connects);
        self.host.socket_mut().gate.prune(now);
        let before = self.events.len();
        loop {
            let ev = match self.host.service() {
                Ok(Some(ev)) => ev.no_ref(),
                Ok(None) => {
                    // ENet reads at most 256 datagrams per pass.
                    if self.host.socket().inbound.is_empty() {
                        break;
                    }
                    continue;
                }
                Err(never) => match never {},
            };
            self.on_event(ev);
        }
        self.record_verified();
        self.last_service = now;
        self.unflushed = false;
        self.refresh_busy();
        self.events.len() - before
    }

    /// Slot `i`'s session is over: release its proof, forget it, and owe the caller the
    /// `Disconnected` event if the session was announced.
    pub(super) fn slot_ended(&mut self, i: usize, data: u32) {
        self.release_proof(i);
        self.forget_rtt(i);
        let m = self.meta[i];
        self.clear_slot(i);
        if !m.announced {
            return;
        }
        let reason = if m.local_close {
            DisconnectReason::Local
        } else if m.connected {
            DisconnectReason::Remote
        } else {
            DisconnectReason::ConnectFailed
        };
        self.events.push_back(EnetEvent::Disconnected {
            peer: PeerId(i),
            data,
            reason,
        });
    }

    pub(super) fn on_event(&mut self, ev: enet::EventNoRef) {
        match ev {
            enet::EventNoRef::Connect { peer, data } => {
                let (ping, (tl, tmin, tmax)) = (self.ping_interval, self.timeout);
                let p = self.host.peer_mut(peer);
                let Some(addr) = p.address() else {
                    return;
                };
                if !self.meta[peer.0].announced && !self.proof_holds(addr, peer.0) {
                    // ENet completed a handshake whose proof this host did not see checked:
                    // no session (see "Admission").
                    self.host.peer_mut(peer).reset();
                    self.clear_slot(peer.0);
                    self.forget_rtt(peer.0);
                    self.host.socket_mut().stats.forged_proofs += 1;
                    return;
                }
                let p = self.host.peer_mut(peer);
                if !self.meta[peer.0].announced {
                    // Accepted by this host: apply the same ping and timeout settings.
                    p.set_ping_interval(ping);
                    p.set_timeout(tl, tmin, tmax);
                }
                // ENet sends this to the other side (THROTTLE_CONFIGURE): it sets how the
                // *remote* throttles unreliable packets to us. Only when not ENet's default.
                let (ti, ta, td) = self.throttle;
                if (ti, ta, td) != DEFAULT_THROTTLE {
                    p.set_throttle(ti, ta, td);
                }
                let proof = self.meta[peer.0].proof;
                self.meta[peer.0] = PeerMeta {
                    announced: true,
                    connected: true,
                    proof,
                    ..PeerMeta::default()
                };
                if let Some(a) = self.accepted.get_mut(peer.0) {
                    a.half_open_since = None;
                }
                // ENet's handshake completed: the address acknowledged our VERIFY_CONNECT.
                self.hold_proof(peer.0, addr);
                self.events.push_back(EnetEvent::Connected {
                    peer: PeerId(peer.0),
                    addr,
                    data,
                });
            }
            enet::EventNoRef::Receive {
                peer,
                channel_id,
                packet,
            } => {
                let m = &mut self.meta[peer.0];
                m.packets_received += 1;
                m.bytes_received += packet.data().len() as u64;
                self.events.push_back(EnetEvent::Received {
                    peer: PeerId(peer.0),
                    channel: channel_id,
                    packet: EnetPacket(packet),
                });
            }
            enet::EventNoRef::Disconnect { peer, data } => self.slot_ended(peer.0, data),
        }
    }

    pub(super) fn refresh_busy(&mut self) {
        self.busy = self
            .host
            .peers()
            .any(|p| p.state() != enet::PeerState::Disconnected);
    }

    /// Send what [`send`](Self::send), [`connect`](Self::connect) and
    /// [`disconnect`](Self::disconnect) queued, without reading datagrams or running timeouts.
    pub fn flush(&mut self, now: Instant) {
        self.set_now(now);
        self.host.flush();
        self.unflushed = false;
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<EnetEvent> {
        self.events.pop_front()
    }

    /// The next round trip measured from an acknowledgement ([`EnetConfig::ack_rtt`]): the
    /// peer and the time from sending a reliable command to its acknowledgement's arrival,
    /// in the caller's `now`s, with microsecond resolution. Samples of a session that ended
    /// are dropped with it.
    pub fn poll_rtt_sample(&mut self) -> Option<(PeerId, Duration)> {
        let (peer, rtt) = self.host.socket_mut().acks.as_mut()?.pop()?;
        Some((PeerId(peer), rtt))
    }

    /// The shortest handshake round trip this host timed ([`EnetConfig::ack_rtt`]): what
    /// the floor under acknowledgement samples is half of.
    pub fn ack_handshake(&self) -> Option<Duration> {
        let us = self.host.socket().acks.as_ref()?.handshake_us()?;
        Some(Duration::from_micros(u64::from(us)))
    }

    /// The shortest handshake round trip to this host's server seen by its owner across
    /// its hosts: this host's floor under acknowledgement samples is half the shortest of
    /// this and its own (a session that connected amid a crowd reads a long handshake).
    pub fn share_ack_handshake(&mut self, shortest: Duration) {
        if let Some(acks) = self.host.socket_mut().acks.as_mut() {
            acks.share_handshake(u32::try_from(shortest.as_micros()).unwrap_or(u32::MAX));
        }
    }

    /// The next datagram to write to the socket: copied into `buf`, returns its destination and
    /// length. `buf` must hold the host's MTU (see [`MAX_ENET_DATAGRAM`]).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        self.host.socket_mut().outbound.pop_into(buf)
    }

    /// When this host next wants [`service`](Self::service) (or [`flush`](Self::flush) when
    /// only sends are pending); `None` when it has nothing alive. An instant not after the last
    /// call's `now` means "now".
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.unflushed {
            Some(self.last_service)
        } else {
            self.poll_service_timeout()
        }
    }

    /// [`poll_timeout`](Self::poll_timeout) for a caller that flushes the sends it queued
    /// without being asked (the engine flushes each host its bots queued on once, at the end
    /// of the wake-up): when received datagrams or ENet's own timers want a
    /// [`service`](Self::service). Queued sends alone would make it "now", and a full service
    /// per bot input walks every peer of the host several times.
    pub fn poll_service_timeout(&self) -> Option<Instant> {
        if !self.host.socket().inbound.is_empty() {
            Some(self.last_service)
        } else if self.busy || !self.events.is_empty() {
            Some(self.last_service + self.service_interval)
        } else {
            None
        }
    }

    /// Something was queued (a send, a connect, a disconnect) that no flush or service has
    /// sent yet.
    pub fn has_unflushed(&self) -> bool {
        self.unflushed
    }

    /// The peer's state and ENet's measurements of its link; `None` for a slot out of range.
    pub fn peer_stats(&self, peer: PeerId) -> Option<PeerStats> {
        let p = self.host.get_peer(enet::PeerID(peer.0))?;
        let m = self.meta.get(peer.0)?;
        let scale = f64::from(enet::consts::PEER_PACKET_LOSS_SCALE);
        // ENet's first RTT sample sets the variance to (rtt + 1) / 2 >= 1 and later updates
        // keep it >= 1; before any sample it is 0 and the RTT is a 500 ms placeholder.
        let sampled = p.round_trip_time_variance() > Duration::ZERO;
        Some(PeerStats {
            state: p.state().into(),
            rtt: sampled.then(|| p.round_trip_time()),
            rtt_variance: sampled.then(|| p.round_trip_time_variance()),
            packet_loss: f64::from(p.packet_loss()) / scale,
            packet_loss_variance: f64::from(p.packet_loss_variance()) / scale,
            packets_sent: m.packets_sent,
            bytes_sent: m.bytes_sent,
            packets_received: m.packets_received,
            bytes_received: m.bytes_received,
            mtu: p.mtu(),
        })
    }

    /// ENet's round-trip estimate for `peer`, once it has measured one.
    pub fn rtt(&self, peer: PeerId) -> Option<Duration> {
        self.peer_stats(peer)?.rtt
    }

    /// ENet's packet-loss estimate for `peer`, 0.0..=1.0.
    pub fn packet_loss(&self, peer: PeerId) -> Option<f64> {
        Some(self.peer_stats(peer)?.packet_loss)
    }

    pub fn peer_state(&self, peer: PeerId) -> Option<PeerState> {
        Some(self.host.get_peer(enet::PeerID(peer.0))?.state().into())
    }

    /// The remote address of `peer` (kept after it disconnected, until the slot is reused).
    pub fn peer_addr(&self, peer: PeerId) -> Option<SocketAddr> {
        self.host.get_peer(enet::PeerID(peer.0))?.address()
    }

    /// Peer slots not Disconnected (connecting, connected or disconnecting).
    pub fn peers_in_use(&self) -> usize {
        self.meta
            .iter()
            .enumerate()
            .filter(|&(i, _)| {
                self.host
                    .get_peer(enet::PeerID(i))
                    .is_some_and(|p| p.state() != enet::PeerState::Disconnected)
            })
            .count()
    }

    /// Peers currently connected.
    pub fn connected_peers(&mut self) -> usize {
        self.host.connected_peers().count()
    }

    pub fn peer_limit(&self) -> usize {
        self.meta.len()
    }

    /// The largest datagram this host sends.
    pub fn mtu(&self) -> u16 {
        self.host.mtu()
    }

    pub fn stats(&self) -> HostStats {
        let sock = self.host.socket();
        HostStats {
            ack_rtt: sock.acks.as_ref().map(|a| a.stats).unwrap_or_default(),
            ..sock.stats
        }
    }
}

// Admission (see "Admission" and "Address reuse" in the module docs): the host's rules for
// half-open connects, proofs and superseded sessions, over the gate its socket keeps
// ([`super::admission`]).
impl EnetHost {
    /// Record that slot `i` proves `addr` (once per slot).
    pub(super) fn hold_proof(&mut self, i: usize, addr: SocketAddr) {
        let m = &mut self.meta[i];
        if m.proof.is_none() {
            m.proof = Some(addr);
            self.host.socket_mut().gate.prove(addr);
        }
    }

    /// Slot `i` ended: its proof lapses after
    /// [`GATE_LINGER`](super::admission::GATE_LINGER) unless another peer holds one.
    pub(super) fn release_proof(&mut self, i: usize) {
        if let Some(addr) = self.meta[i].proof.take() {
            let now = self.now;
            self.host.socket_mut().gate.release(addr, now);
        }
    }

    /// Bound half-open connects (see "Admission"): make room for queued CONNECTs by
    /// dropping the oldest evictable half-open peers when no slot is free, and drop those
    /// older than the timeout. Silent (`enet_peer_reset`): nothing is sent to them.
    pub(super) fn bound_half_open(&mut self, now: Instant, make_room: usize) {
        if self.accepted.is_empty() {
            // No CONNECT has arrived yet: no slot is half-open (a bots' host, every service).
            return;
        }
        let mut half_open: Vec<(Instant, usize)> = Vec::new();
        let mut free = 0usize;
        for (i, p) in self.host.peers().enumerate() {
            let (Some(m), Some(a)) = (self.meta.get(i), self.accepted.get_mut(i)) else {
                continue;
            };
            match p.state() {
                enet::PeerState::Disconnected => {
                    free += 1;
                    a.half_open_since = None;
                }
                enet::PeerState::AcknowledgingConnect | enet::PeerState::ConnectionPending
                    if !m.announced =>
                {
                    let since = *a.half_open_since.get_or_insert(now);
                    half_open.push((since, i));
                }
                _ => a.half_open_since = None,
            }
        }
        if half_open.is_empty() {
            return;
        }
        half_open.sort_unstable();
        let mut evict = make_room.saturating_sub(free);
        let (timeout, evictable) = (self.half_open_timeout, self.half_open_evictable);
        let stats = &mut self.host.socket_mut().stats;
        let mut drop = Vec::new();
        for &(since, i) in &half_open {
            let age = now.saturating_duration_since(since);
            if age >= timeout {
                stats.half_open_expired += 1;
                drop.push(i);
            } else if evict > 0 && age >= evictable {
                evict -= 1;
                stats.half_open_evicted += 1;
                drop.push(i);
            }
        }
        for i in drop {
            self.host.peer_mut(enet::PeerID(i)).reset();
            self.clear_slot(i);
            self.forget_rtt(i);
        }
    }

    /// An incoming handshake with `addr` completed in slot `i`: did the address acknowledge
    /// our VERIFY_CONNECT, echoing the sent time of a datagram that carried it, for this
    /// session's connect id? An address already proven needs no new proof (its datagrams
    /// are not checked).
    pub(super) fn proof_holds(&mut self, addr: SocketAddr, i: usize) -> bool {
        let remote = self.accepted.get(i).and_then(|a| a.remote);
        let sock = self.host.socket_mut();
        if sock.gate.is_proven(addr) {
            return true;
        }
        let Some(v) = u16::try_from(i)
            .ok()
            .and_then(|slot| sock.verifies.remove(&(addr, slot)))
        else {
            return false;
        };
        v.acked && remote.is_none_or(|(a, _, id)| a == addr && id == v.connect_id)
    }

    /// End the half-open connects that sent a forged proof, silently (as an expired one),
    /// and forget the VERIFY_CONNECTs of slots no longer half-open with their address.
    pub(super) fn end_condemned(&mut self) {
        let mut condemned = std::mem::take(&mut self.host.socket_mut().condemned);
        for &(addr, slot) in &condemned {
            let i = usize::from(slot);
            let Some(p) = self.host.get_peer(enet::PeerID(i)) else {
                continue;
            };
            let half_open = matches!(
                p.state(),
                enet::PeerState::AcknowledgingConnect | enet::PeerState::ConnectionPending
            );
            if p.address() == Some(addr) && half_open && !self.meta[i].announced {
                self.host.peer_mut(enet::PeerID(i)).reset();
                self.clear_slot(i);
                self.forget_rtt(i);
            }
        }
        condemned.clear();
        self.host.socket_mut().condemned = condemned;
        if self.host.socket().verifies.is_empty() {
            return;
        }
        let mut addrs = std::mem::take(&mut self.slot_addrs);
        addrs.clear();
        addrs.extend(self.host.peers().map(|p| {
            (p.state() != enet::PeerState::Disconnected)
                .then(|| p.address())
                .flatten()
        }));
        self.host
            .socket_mut()
            .verifies
            .retain(|&(addr, slot), _| addrs.get(usize::from(slot)) == Some(&Some(addr)));
        self.slot_addrs = addrs;
    }

    /// Drop the sessions whose remote peer connected anew (see "Address reuse"), before ENet
    /// handles the CONNECTs: nothing more of the old session reaches the new one.
    pub(super) fn supersede(&mut self) {
        let mut connects = std::mem::take(&mut self.connects);
        for &(addr, c) in &connects {
            for i in 0..self.accepted.len() {
                let Some((a, peer, id)) = self.accepted[i].remote else {
                    continue;
                };
                if a != addr || peer != c.from_peer || id == c.connect_id {
                    continue;
                }
                let p = self.host.peer_mut(enet::PeerID(i));
                if p.state() == enet::PeerState::Disconnected {
                    self.accepted[i].remote = None;
                    continue;
                }
                p.reset();
                self.host.socket_mut().stats.superseded += 1;
                self.slot_ended(i, 0);
            }
        }
        connects.clear();
        self.connects = connects;
    }

    /// Note which slot answered which CONNECT, from the VERIFY_CONNECTs ENet just sent.
    pub(super) fn record_verified(&mut self) {
        let sock = self.host.socket_mut();
        sock.watch_verify = false;
        let mut verified = std::mem::take(&mut sock.verified);
        for &(addr, v) in &verified {
            let i = usize::from(v.from_peer);
            let Some(p) = self.host.get_peer(enet::PeerID(i)) else {
                continue;
            };
            if p.address() == Some(addr) && p.state() != enet::PeerState::Disconnected {
                if let Some(a) = self.accepted.get_mut(i) {
                    a.remote = Some((addr, v.to_peer, v.connect_id));
                }
            }
        }
        verified.clear();
        self.host.socket_mut().verified = verified;
    }
}
