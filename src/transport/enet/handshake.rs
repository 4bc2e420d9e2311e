//! The two handshake commands read off ENet's wire: who is connecting (CONNECT) and which of
//! our peer slots answered whom (VERIFY_CONNECT).
//!
//! rusty_enet keeps a peer's remote peer id and connect id to itself, but the host needs them
//! to tell a *new* session of a remote peer from its *old* one (see "Address reuse" in the
//! parent module): ENet routes a datagram by the receiver's peer id and a 2-bit session id, so
//! an old session still open at the server reaches a new client that took over the address.
//! Layout from ENet 1.3's protocol.h, all fields big-endian: a header (peer id with flags and
//! session bits, then the 16-bit sent time when `SENT_TIME` is flagged), the 32-bit checksum
//! when checksums are on, then commands, range-coded when `COMPRESSED` is flagged. Each command
//! starts with a 4-byte header (command number in the low 4 bits); CONNECT and VERIFY_CONNECT
//! then carry the sender's peer id (2 bytes) and, 40 bytes into the command, the connect id.
//!
//! The same reading checks the proof that completes an incoming handshake (see "Admission" in
//! the parent module): the ACKNOWLEDGE of our VERIFY_CONNECT (channel 0xFF) names the
//! VERIFY_CONNECT's reliable sequence number and echoes the 16-bit sent time of the datagram
//! that carried it. ENet itself checks neither the echo nor which transmission it names, so
//! the host does, against what [`Reader::verify_sent`] read off its own datagrams.

use super::wire::{Reader, COMMAND_ACKNOWLEDGE, COMMAND_CONNECT, COMMAND_VERIFY_CONNECT};

/// Where the connect id sits in CONNECT and VERIFY_CONNECT.
const CONNECT_ID_AT: usize = 40;
/// Where the sender's peer id (`outgoingPeerID`) sits in CONNECT and VERIFY_CONNECT.
pub(super) const OUTGOING_PEER_ID_AT: usize = 4;

/// ENet's channel of connection-management commands (`0xFF`): CONNECT, VERIFY_CONNECT, their
/// acknowledgements.
pub(super) const HANDSHAKE_CHANNEL: u8 = 0xFF;
/// Where an ACKNOWLEDGE carries the reliable sequence number it acknowledges, and the sent
/// time it echoes.
const ACK_SEQ_AT: usize = 4;
const ACK_SENT_TIME_AT: usize = 6;

/// A VERIFY_CONNECT as it left this host: what its acknowledgement must name and echo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct VerifySent {
    pub handshake: Handshake,
    /// Its reliable sequence number on [`HANDSHAKE_CHANNEL`].
    pub seq: u16,
    /// The sent time in the header of the datagram that carried it.
    pub sent_time: Option<u16>,
}

/// A CONNECT or VERIFY_CONNECT found in a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Handshake {
    /// The peer id in the datagram's header: whom it is for at the receiver (0xFFF in a
    /// CONNECT, whose sender has no id there yet).
    pub to_peer: u16,
    /// The sender's own peer id for this session (the command's `outgoingPeerID`).
    pub from_peer: u16,
    /// The session's connect id, chosen by the connecting side and echoed in the verify.
    pub connect_id: u32,
}

impl Reader {
    /// The first command numbered `command` (CONNECT or VERIFY_CONNECT) in `datagram`, or
    /// `None` when there is none or the datagram does not parse.
    pub(super) fn find(&mut self, datagram: &[u8], command: u8) -> Option<Handshake> {
        debug_assert!(command == COMMAND_CONNECT || command == COMMAND_VERIFY_CONNECT);
        let mut d = self.open(datagram)?;
        let to_peer = d.peer_id;
        let c = d.commands.find(|c| c.number == command)?;
        Some(Handshake {
            to_peer,
            from_peer: c.u16_at(OUTGOING_PEER_ID_AT)? & super::wire::PEER_ID_MASK,
            connect_id: c.u32_at(CONNECT_ID_AT)?,
        })
    }

    /// The VERIFY_CONNECT in `datagram` (one this host is sending), with its sequence
    /// number and the datagram's sent time.
    pub(super) fn verify_sent(&mut self, datagram: &[u8]) -> Option<VerifySent> {
        let mut d = self.open(datagram)?;
        let (to_peer, sent_time) = (d.peer_id, d.sent_time);
        let c = d.commands.find(|c| c.number == COMMAND_VERIFY_CONNECT)?;
        Some(VerifySent {
            handshake: Handshake {
                to_peer,
                from_peer: c.u16_at(OUTGOING_PEER_ID_AT)? & super::wire::PEER_ID_MASK,
                connect_id: c.u32_at(CONNECT_ID_AT)?,
            },
            seq: c.reliable_seq,
            sent_time,
        })
    }

    /// The acknowledgements on [`HANDSHAKE_CHANNEL`] in `datagram`, as (acknowledged
    /// sequence number, echoed sent time), into `out` (cleared first); returns the header's
    /// peer id (whom at this host the datagram is for), or `None` when it does not parse.
    pub(super) fn handshake_acks(
        &mut self,
        datagram: &[u8],
        out: &mut Vec<(u16, u16)>,
    ) -> Option<u16> {
        out.clear();
        let d = self.open(datagram)?;
        let to_peer = d.peer_id;
        for c in d.commands {
            if c.number != COMMAND_ACKNOWLEDGE || c.channel != HANDSHAKE_CHANNEL {
                continue;
            }
            if let (Some(seq), Some(echo)) = (c.u16_at(ACK_SEQ_AT), c.u16_at(ACK_SENT_TIME_AT)) {
                out.push((seq, echo));
            }
        }
        Some(to_peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusty_enet::{Compressor, RangeCoder, MTU_MAX};

    /// A CONNECT as a fresh C ENet client sends it, written out by hand: header with the sent
    /// time (peer id 0xFFF, flag 0x8000), then the command (CONNECT with the acknowledge flag
    /// 0x80, channel 0xFF, reliable sequence 1).
    fn connect_bytes() -> Vec<u8> {
        let mut d = vec![0x8F, 0xFF, 0x12, 0x34];
        d.extend_from_slice(&[0x82, 0xFF, 0x00, 0x01]);
        d.extend_from_slice(&[0x00, 0x07]); // outgoingPeerID 7
        d.extend_from_slice(&[0xFF, 0xFF]); // session ids
        d.extend_from_slice(&[0; 32]); // mtu .. throttle deceleration: 8 u32
        d.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]); // connectID
        d.extend_from_slice(&[0, 0, 0, 9]); // data
        d
    }

    #[test]
    fn reads_a_hand_written_connect() {
        let mut r = Reader::new(false, false);
        assert_eq!(
            r.find(&connect_bytes(), COMMAND_CONNECT),
            Some(Handshake {
                to_peer: 0xFFF,
                from_peer: 7,
                connect_id: 0xDEAD_BEEF
            })
        );
        assert_eq!(r.find(&connect_bytes(), COMMAND_VERIFY_CONNECT), None);
    }

    #[test]
    fn skips_acknowledgements_and_payloads_before_the_verify() {
        // Header without sent time, to peer 3 with session bits 01 (0x1000).
        let mut d = vec![0x10, 0x03];
        d.extend_from_slice(&[0x01, 0xFF, 0, 1, 0, 1, 0x12, 0x34]); // ACKNOWLEDGE
        d.extend_from_slice(&[0x86, 0x00, 0, 2, 0, 3, b'a', b'b', b'c']); // SEND_RELIABLE "abc"
        d.extend_from_slice(&[0x83, 0xFF, 0, 1, 0x00, 0x2A, 0, 0]); // VERIFY_CONNECT from 42
        d.extend_from_slice(&[0; 32]); // mtu .. throttle deceleration: 8 u32
        d.extend_from_slice(&[0, 0, 0, 5]); // connectID 5
        let mut r = Reader::new(false, false);
        assert_eq!(
            r.find(&d, COMMAND_VERIFY_CONNECT),
            Some(Handshake {
                to_peer: 3,
                from_peer: 42,
                connect_id: 5
            })
        );
    }

    #[test]
    fn reads_through_checksum_and_range_coder() {
        let plain = connect_bytes();
        let mut coder = RangeCoder::new();
        let mut packed = [0u8; MTU_MAX];
        let n = coder.compress(&[&plain[4..]], plain.len() - 4, &mut packed);
        assert!(n > 0 && n < plain.len() - 4, "the CONNECT body compresses");
        // Header flagged compressed (0x4000) with the sent time, then a checksum (not checked
        // here: ENet checks it), then the compressed commands.
        let mut d = vec![0xCF, 0xFF, 0x12, 0x34, 1, 2, 3, 4];
        d.extend_from_slice(&packed[..n]);
        let mut r = Reader::new(true, true);
        assert_eq!(
            r.find(&d, COMMAND_CONNECT),
            Some(Handshake {
                to_peer: 0xFFF,
                from_peer: 7,
                connect_id: 0xDEAD_BEEF
            })
        );
    }

    #[test]
    fn reads_a_verify_as_sent_and_the_acknowledgement_of_it() {
        // To peer 0 with session bits 01, sent time 0x1234; VERIFY_CONNECT (acknowledge
        // flag, channel 0xFF, sequence 1) from our peer 3, connect id 5.
        let mut v = vec![0x90, 0x00, 0x12, 0x34, 0x83, 0xFF, 0, 1, 0, 3, 0xFF, 0xFF];
        v.extend_from_slice(&[0; 32]); // mtu .. throttle deceleration: 8 u32
        v.extend_from_slice(&[0, 0, 0, 5]);
        let mut r = Reader::new(false, false);
        assert_eq!(
            r.verify_sent(&v),
            Some(VerifySent {
                handshake: Handshake {
                    to_peer: 0,
                    from_peer: 3,
                    connect_id: 5
                },
                seq: 1,
                sent_time: Some(0x1234)
            })
        );
        // The answer: to our peer 3, an ACKNOWLEDGE on channel 1 (not ours) and one on the
        // handshake channel of sequence 1 echoing 0x1234.
        let ack = [
            0x00, 0x03, 0x01, 0x01, 0, 1, 0, 7, 0, 9, 0x01, 0xFF, 0, 1, 0, 1, 0x12, 0x34,
        ];
        let mut out = Vec::new();
        assert_eq!(r.handshake_acks(&ack, &mut out), Some(3));
        assert_eq!(out, vec![(1, 0x1234)]);
        assert_eq!(r.verify_sent(&ack), None);
    }

    #[test]
    fn truncated_or_unknown_commands_are_not_read() {
        let mut r = Reader::new(false, false);
        let d = connect_bytes();
        assert_eq!(r.find(&d[..d.len() - 5], COMMAND_CONNECT), None);
        assert_eq!(r.find(&[0x8F], COMMAND_CONNECT), None);
        assert_eq!(r.find(&[0x00, 0x01, 0x0F, 0, 0, 0], COMMAND_CONNECT), None);
        // Compressed, but this host has no range coder.
        assert_eq!(r.find(&[0x4F, 0xFF, 1, 2, 3], COMMAND_CONNECT), None);
    }
}
