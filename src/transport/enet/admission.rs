//! Admission (see "Admission" and "Address reuse" in the module docs): the address gate
//! that keeps an unproven address from receiving more than it sent, and the proof a
//! handshake's acknowledgement must carry. The socket keeps them ([`super::socket`]); the
//! host's rules for half-open connects and superseded sessions, which use them, are the
//! host's own ([`super::host`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::first_map::FirstMap;
use super::handshake::VerifySent;

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
