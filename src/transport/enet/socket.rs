//! The socket ENet is given ([`QueueSocket`]): two datagram queues instead of a file
//! descriptor, which is what makes the host sans-IO. Everything that must see each datagram
//! as it passes (the admission gate, the handshake reader, the acknowledgement timing) sits
//! here.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;

use rusty_enet as enet;

use super::ack_rtt::AckRtt;
use super::admission::{AddressGate, PendingVerify, Proof};
use super::handshake::Handshake;
use super::queue::DatagramQueue;
use super::types::HostStats;
use super::wire::{self, COMMAND_VERIFY_CONNECT};

/// The [`rusty_enet::Socket`] ENet is given: two queues instead of a file descriptor.
///
/// `receive` hands ENet what the engine pushed; `send` queues what ENet writes. ENet never
/// blocks on it and it never fails.
#[derive(Debug)]
pub struct QueueSocket {
    pub(super) inbound: DatagramQueue,
    pub(super) outbound: DatagramQueue,
    pub(super) stats: HostStats,
    pub(super) gate: AddressGate,
    /// Reads the datagrams' headers and commands (see "Address reuse" and "Measurements").
    pub(super) reader: wire::Reader,
    /// Times acknowledged commands ([`EnetConfig::ack_rtt`](super::EnetConfig::ack_rtt)).
    pub(super) acks: Option<AckRtt>,
    /// CONNECTs are being handled: look for our VERIFY_CONNECT answers in what ENet sends.
    pub(super) watch_verify: bool,
    /// The VERIFY_CONNECTs seen since the last service: to whom, and what they say.
    pub(super) verified: Vec<(SocketAddr, Handshake)>,
    /// VERIFY_CONNECTs sent to unproven addresses, by address and our peer id: what the
    /// acknowledgement completing the handshake must name and echo (see "Admission").
    pub(super) verifies: HashMap<(SocketAddr, u16), PendingVerify>,
    /// Half-open connects (address, our peer id) that sent a forged proof, to end at the
    /// next service.
    pub(super) condemned: Vec<(SocketAddr, u16)>,
    /// Scratch for the handshake acknowledgements of one datagram.
    pub(super) acks_seen: Vec<(u16, u16)>,
}

impl QueueSocket {
    pub(super) fn new(
        limit: usize,
        checksum: bool,
        range_coder: bool,
        acks: Option<AckRtt>,
    ) -> Self {
        Self {
            inbound: DatagramQueue::new(limit),
            outbound: DatagramQueue::new(limit),
            stats: HostStats::default(),
            gate: AddressGate::default(),
            reader: wire::Reader::new(checksum, range_coder),
            acks,
            watch_verify: false,
            verified: Vec::new(),
            verifies: HashMap::new(),
            condemned: Vec::new(),
            acks_seen: Vec::new(),
        }
    }

    /// Check the handshake acknowledgements of `data` from the unproven address `from`
    /// against the VERIFY_CONNECTs sent to it (see "Admission").
    pub(super) fn check_proof(&mut self, from: SocketAddr, data: &[u8]) -> Proof {
        let mut acks = std::mem::take(&mut self.acks_seen);
        let to_peer = self.reader.handshake_acks(data, &mut acks);
        let mut proof = Proof::None;
        if let Some(to_peer) = to_peer {
            for &(seq, echo) in &acks {
                match self.verifies.get_mut(&(from, to_peer)) {
                    Some(v) if v.seq == seq && v.carried(echo) => {
                        v.acked = true;
                        proof = Proof::Valid;
                    }
                    _ => {
                        proof = Proof::Forged;
                        self.condemned.push((from, to_peer));
                        break;
                    }
                }
            }
        }
        self.acks_seen = acks;
        proof
    }
}

impl enet::Socket for QueueSocket {
    type Address = SocketAddr;
    type Error = Infallible;

    fn send(&mut self, address: SocketAddr, buffer: &[u8]) -> Result<usize, Infallible> {
        if self.watch_verify {
            // ENet answers a CONNECT in the same service that handles it.
            if let Some(v) = self.reader.find(buffer, COMMAND_VERIFY_CONNECT) {
                self.verified.push((address, v));
            }
        }
        if !self.gate.allow(address, buffer.len()) {
            // Withheld like a lost datagram: ENet retransmits when the peer speaks again.
            self.stats.gated_out += 1;
            self.stats.gated_bytes_out += buffer.len() as u64;
            return Ok(buffer.len());
        }
        if !self.gate.is_proven(address) {
            // A VERIFY_CONNECT (or its retransmission) that really leaves: its sent time is
            // what the proof must echo.
            if let Some(v) = self.reader.verify_sent(buffer) {
                let key = (address, v.handshake.from_peer);
                let p = self
                    .verifies
                    .entry(key)
                    .or_insert_with(|| PendingVerify::new(&v));
                if p.seq != v.seq || p.connect_id != v.handshake.connect_id {
                    // The slot answers a new CONNECT from that address.
                    *p = PendingVerify::new(&v);
                }
                if let Some(t) = v.sent_time {
                    p.sent_at(t);
                }
            }
        }
        if self.outbound.push(address, buffer) {
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += buffer.len() as u64;
            if let Some(acks) = self.acks.as_mut() {
                if let Some(d) = self.reader.open(buffer) {
                    acks.outbound(address, d);
                }
            }
        } else {
            self.stats.dropped_out += 1;
        }
        // A full queue behaves like a full socket buffer: the datagram is gone and ENet's
        // retransmission deals with it.
        Ok(buffer.len())
    }

    fn receive(
        &mut self,
        buffer: &mut [u8; enet::MTU_MAX],
    ) -> Result<Option<(SocketAddr, enet::PacketReceived)>, Infallible> {
        Ok(self
            .inbound
            .pop_into(buffer)
            .map(|(addr, len)| (addr, enet::PacketReceived::Complete(len))))
    }
}
