//! Admission (see "Admission" and "Address reuse" in the module docs): the address gate
//! that keeps an unproven address from receiving more than it sent, the proof a handshake's
//! acknowledgement must carry, and the host's rules for half-open connects and superseded
//! sessions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rusty_enet as enet;

use super::first_map::FirstMap;
use super::handshake::VerifySent;
use super::host::EnetHost;

/// Sent times remembered per VERIFY_CONNECT: its first transmission and retransmissions
/// (ENet gives up on a handshake after a few).
pub(super) const VERIFY_SENT_TIMES: usize = 8;

/// A VERIFY_CONNECT this host sent to an unproven address.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingVerify {
    pub(super) seq: u16,
    pub(super) connect_id: u32,
    /// The sent times of the datagrams that carried it (ring of the latest).
    pub(super) sent_times: [u16; VERIFY_SENT_TIMES],
    pub(super) count: usize,
    /// An acknowledgement echoed one of them: the address received it.
    pub(super) acked: bool,
}

impl PendingVerify {
    pub(super) fn new(v: &VerifySent) -> Self {
        Self {
            seq: v.seq,
            connect_id: v.handshake.connect_id,
            sent_times: [0; VERIFY_SENT_TIMES],
            count: 0,
            acked: false,
        }
    }

    pub(super) fn sent_at(&mut self, t: u16) {
        self.sent_times[self.count % VERIFY_SENT_TIMES] = t;
        self.count += 1;
    }

    pub(super) fn carried(&self, t: u16) -> bool {
        self.sent_times[..self.count.min(VERIFY_SENT_TIMES)].contains(&t)
    }
}

/// What a datagram from an unproven address says about its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proof {
    /// No acknowledgement on the handshake channel: nothing to check.
    None,
    /// It acknowledges our VERIFY_CONNECT with the right sequence number and sent time.
    Valid,
    /// It acknowledges something we did not send it, or echoes a sent time we did not use.
    Forged,
}

/// Bytes an unproven address may receive beyond what it sent: one datagram's worth of the
/// size difference range-coder compression can make between a CONNECT and its
/// VERIFY_CONNECT, so a compressed handshake is never blocked by a few bytes.
const GATE_SLACK: u64 = 16;

/// Most credit an unproven address can bank.
const GATE_CREDIT_CAP: u64 = 4096;

/// Most unproven addresses tracked; beyond it the table is cleared (which only withholds).
const GATE_TABLE_LIMIT: usize = 16_384;

/// A closed peer's address stays proven this long, for the last acknowledgements.
pub(super) const GATE_LINGER: Duration = Duration::from_secs(5);

/// ENet's peer id of a datagram whose sender has no id yet: a CONNECT.
pub(super) const CONNECT_PEER_ID: u16 = 0x0FFF;

/// Admission at the socket: an address is *proven* once this host connected to it or ENet's
/// handshake with it completed. Until then it receives at most the bytes it sent (plus
/// [`GATE_SLACK`] once), so VERIFY_CONNECT retransmissions to a forged source stop.
#[derive(Debug, Default)]
pub(super) struct AddressGate {
    /// Proven addresses: how many peers hold the proof (several bots on one host share the
    /// server's address), and once none does, the instant the proof lapses.
    /// A bots' host proves one address (its server): kept inline ([`FirstMap`]).
    pub(super) proven: FirstMap<SocketAddr, (u32, Option<Instant>)>,
    /// What each unproven address may still receive.
    pub(super) credit: HashMap<SocketAddr, u64>,
}

impl AddressGate {
    pub(super) fn received(&mut self, from: SocketAddr, len: usize) {
        if self.proven.contains_key(&from) {
            return;
        }
        if self.credit.len() >= GATE_TABLE_LIMIT && !self.credit.contains_key(&from) {
            self.credit.clear();
        }
        let c = self.credit.entry(from).or_insert(GATE_SLACK);
        *c = (*c + len as u64).min(GATE_CREDIT_CAP);
    }

    /// May `len` bytes go to `to`? Spends the credit when they may.
    pub(super) fn allow(&mut self, to: SocketAddr, len: usize) -> bool {
        if self.proven.contains_key(&to) {
            return true;
        }
        match self.credit.get_mut(&to) {
            Some(c) if *c >= len as u64 => {
                *c -= len as u64;
                true
            }
            _ => false,
        }
    }

    pub(super) fn is_proven(&self, addr: SocketAddr) -> bool {
        self.proven.contains_key(&addr)
    }

    pub(super) fn prove(&mut self, addr: SocketAddr) {
        self.credit.remove(&addr);
        let e = self.proven.get_or_insert_with(addr, || (0, None));
        e.0 += 1;
        e.1 = None;
    }

    pub(super) fn release(&mut self, addr: SocketAddr, now: Instant) {
        if let Some(e) = self.proven.get_mut(&addr) {
            e.0 = e.0.saturating_sub(1);
            if e.0 == 0 {
                e.1 = Some(now + GATE_LINGER);
            }
        }
    }

    pub(super) fn prune(&mut self, now: Instant) {
        self.proven
            .retain(|_, (live, until)| *live > 0 || until.is_none_or(|t| t > now));
    }
}

impl EnetHost {
    /// Record that slot `i` proves `addr` (once per slot).
    pub(super) fn hold_proof(&mut self, i: usize, addr: SocketAddr) {
        let m = &mut self.meta[i];
        if m.proof.is_none() {
            m.proof = Some(addr);
            self.host.socket_mut().gate.prove(addr);
        }
    }

    /// Slot `i` ended: its proof lapses after [`GATE_LINGER`] unless another peer holds one.
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
