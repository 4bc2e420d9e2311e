//! ENet 1.3's datagram layout, read in place: the header and the commands after it.
//!
//! rusty_enet keeps what it reads off the wire to itself, so what this host needs to know of
//! ENet's traffic (who connects, which acknowledgement answers which transmission) is read
//! here from the datagrams passing through the host's socket. Layout (C ENet's `protocol.h`,
//! every field big-endian):
//!
//! - Header: `peerID u16` whose low 12 bits are the receiver's peer id (0xFFF in a CONNECT,
//!   whose sender has none yet), bits 12-13 a session id, 0x4000 "commands compressed" and
//!   0x8000 "sent time present"; then `sentTime u16` (the sender's clock in milliseconds, low
//!   16 bits) when flagged. ENet flags it in every datagram carrying a command that asks for
//!   an acknowledgement.
//! - A 32-bit checksum when both ends enabled checksums.
//! - Commands back to back, range-coded as a whole when flagged compressed. Each starts with
//!   `command u8` (low 4 bits the number, 0x80 "acknowledge me", 0x40 unsequenced),
//!   `channelID u8`, `reliableSequenceNumber u16`, and has a fixed size by number
//!   ([`COMMAND_SIZES`]); the SEND_* commands are followed by `dataLength` bytes of payload.
//!
//! Reading allocates nothing: a compressed body is decoded into the reader's own buffer.

use rusty_enet::{Compressor, RangeCoder, MTU_MAX};

pub(super) const FLAG_SENT_TIME: u16 = 0x8000;
pub(super) const FLAG_COMPRESSED: u16 = 0x4000;
pub(super) const PEER_ID_MASK: u16 = 0x0FFF;
/// The header's peer id in a CONNECT (`ENET_PROTOCOL_MAXIMUM_PEER_ID`).
pub(super) const NO_PEER_ID: u16 = 0x0FFF;
const COMMAND_MASK: u8 = 0x0F;
/// `ENET_PROTOCOL_COMMAND_FLAG_ACKNOWLEDGE`: the receiver answers with an ACKNOWLEDGE.
pub(super) const FLAG_ACKNOWLEDGE: u8 = 0x80;
pub(super) const COMMAND_ACKNOWLEDGE: u8 = 1;
pub(super) const COMMAND_CONNECT: u8 = 2;
pub(super) const COMMAND_VERIFY_CONNECT: u8 = 3;

/// Bytes of each command before its payload, by command number (C ENet's `commandSizes`, the
/// `sizeof` of its packed structs): 0 none, 1 ACKNOWLEDGE 8, 2 CONNECT 48, 3 VERIFY_CONNECT 44,
/// 4 DISCONNECT 8, 5 PING 4, 6 SEND_RELIABLE 6, 7 SEND_UNRELIABLE 8, 8 SEND_FRAGMENT 24,
/// 9 SEND_UNSEQUENCED 8, 10 BANDWIDTH_LIMIT 12, 11 THROTTLE_CONFIGURE 16,
/// 12 SEND_UNRELIABLE_FRAGMENT 24. 13-15 do not exist: a datagram holding one is malformed.
pub(super) const COMMAND_SIZES: [usize; 13] = [0, 8, 48, 44, 8, 4, 6, 8, 24, 8, 12, 16, 24];

/// Where the payload length sits in the commands that carry a payload.
fn payload_length_at(number: u8) -> Option<usize> {
    match number {
        6 => Some(4),              // SEND_RELIABLE: header, dataLength
        7 | 8 | 9 | 12 => Some(6), // SEND_UNRELIABLE, SEND_FRAGMENT, SEND_UNSEQUENCED, SEND_UNRELIABLE_FRAGMENT
        _ => None,
    }
}

/// One command of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Command<'a> {
    /// The command number (low 4 bits of the first byte).
    pub number: u8,
    /// The first byte's flags (`FLAG_ACKNOWLEDGE`, unsequenced).
    pub flags: u8,
    pub channel: u8,
    pub reliable_seq: u16,
    /// The command's fixed part, its 4-byte header included (payload excluded).
    pub fixed: &'a [u8],
}

impl Command<'_> {
    /// The big-endian u16 `at` bytes into the command.
    pub fn u16_at(&self, at: usize) -> Option<u16> {
        Some(u16::from_be_bytes([
            *self.fixed.get(at)?,
            *self.fixed.get(at + 1)?,
        ]))
    }

    /// The big-endian u32 `at` bytes into the command.
    pub fn u32_at(&self, at: usize) -> Option<u32> {
        let b = self.fixed.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The commands of a datagram body, in order. Ends at the body's end or at the first command
/// that is unknown or runs past it (ENet drops the rest of such a datagram too).
#[derive(Debug, Clone)]
pub(super) struct Commands<'a> {
    body: &'a [u8],
}

impl<'a> Commands<'a> {
    /// The commands not yet read, as bytes.
    pub(super) fn body(&self) -> &'a [u8] {
        self.body
    }
}

impl<'a> Iterator for Commands<'a> {
    type Item = Command<'a>;

    fn next(&mut self) -> Option<Command<'a>> {
        let body = self.body;
        let first = *body.first()?;
        let number = first & COMMAND_MASK;
        let size = COMMAND_SIZES.get(usize::from(number)).copied().unwrap_or(0);
        if size == 0 || body.len() < size {
            self.body = &[];
            return None;
        }
        let payload = match payload_length_at(number) {
            Some(i) => usize::from(u16::from_be_bytes([body[i], body[i + 1]])),
            None => 0,
        };
        let Some(rest) = body.get(size + payload..) else {
            self.body = &[];
            return None;
        };
        self.body = rest;
        Some(Command {
            number,
            flags: first & !COMMAND_MASK,
            channel: body[1],
            reliable_seq: u16::from_be_bytes([body[2], body[3]]),
            fixed: &body[..size],
        })
    }
}

/// A datagram's header and its commands.
#[derive(Debug, Clone)]
pub(super) struct Datagram<'a> {
    /// The receiver's peer id (session and flag bits removed).
    pub peer_id: u16,
    /// The sender's clock (ms, low 16 bits) when the header carries it.
    pub sent_time: Option<u16>,
    pub commands: Commands<'a>,
}

/// Opens datagrams; holds what decompression needs, so reading allocates nothing.
pub(super) struct Reader {
    checksum: bool,
    /// The range coder and its output buffer, only on a host that compresses: the 4 KiB
    /// buffer is not worth carrying in every host (a bot with a socket of its own has one).
    coder: Option<(RangeCoder, Box<[u8; MTU_MAX]>)>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("checksum", &self.checksum)
            .field("range_coder", &self.coder.is_some())
            .finish()
    }
}

impl Reader {
    /// A reader for a host with these settings (both ends of a connection share them).
    pub(super) fn new(checksum: bool, range_coder: bool) -> Self {
        Self {
            checksum,
            coder: range_coder.then(|| (RangeCoder::new(), Box::new([0; MTU_MAX]))),
        }
    }

    /// The header and commands of `datagram`; `None` when it is too short, or compressed
    /// and this host has no range coder or the body does not decode. The checksum is not
    /// verified (ENet does, and drops the datagram).
    pub(super) fn open<'s>(&'s mut self, datagram: &'s [u8]) -> Option<Datagram<'s>> {
        let word = u16::from_be_bytes([*datagram.first()?, *datagram.get(1)?]);
        let sent_time = if word & FLAG_SENT_TIME != 0 {
            Some(u16::from_be_bytes([*datagram.get(2)?, *datagram.get(3)?]))
        } else {
            None
        };
        let mut at = if sent_time.is_some() { 4 } else { 2 };
        if self.checksum {
            at += 4;
        }
        let body = if word & FLAG_COMPRESSED != 0 {
            let (coder, scratch) = self.coder.as_mut()?;
            let n = coder.decompress(datagram.get(at..)?, &mut scratch[..]);
            if n == 0 || n > scratch.len() {
                return None;
            }
            &scratch[..n]
        } else {
            datagram.get(at..)?
        };
        Some(Datagram {
            peer_id: word & PEER_ID_MASK,
            sent_time,
            commands: Commands { body },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram as C ENet writes it, by hand: header to peer 5, session bits 10 (0x2000),
    /// sent time 0x0102; an ACKNOWLEDGE on channel 1 of reliable sequence 9 sent at 0x00FF;
    /// a SEND_RELIABLE (acknowledge flag) on channel 0, sequence 3, 2 payload bytes; a PING
    /// (acknowledge flag) on channel 0xFF, sequence 4; a SEND_UNRELIABLE on channel 1 with
    /// unreliable sequence 7 and 1 payload byte.
    fn datagram() -> Vec<u8> {
        let mut d = vec![0xA0, 0x05, 0x01, 0x02];
        d.extend_from_slice(&[0x01, 0x01, 0x00, 0x09, 0x00, 0x09, 0x00, 0xFF]);
        d.extend_from_slice(&[0x86, 0x00, 0x00, 0x03, 0x00, 0x02, b'h', b'i']);
        d.extend_from_slice(&[0x85, 0xFF, 0x00, 0x04]);
        d.extend_from_slice(&[0x07, 0x01, 0x00, 0x03, 0x00, 0x07, 0x00, 0x01, b'x']);
        d
    }

    #[test]
    fn reads_header_and_every_command_of_a_hand_written_datagram() {
        let mut r = Reader::new(false, false);
        let d = datagram();
        let g = r.open(&d).expect("parses");
        assert_eq!(g.peer_id, 5);
        assert_eq!(g.sent_time, Some(0x0102));
        let got: Vec<(u8, u8, u8, u16, usize)> = g
            .commands
            .map(|c| (c.number, c.flags, c.channel, c.reliable_seq, c.fixed.len()))
            .collect();
        assert_eq!(
            got,
            [
                (COMMAND_ACKNOWLEDGE, 0, 1, 9, 8),
                (6, FLAG_ACKNOWLEDGE, 0, 3, 6),
                (5, FLAG_ACKNOWLEDGE, 0xFF, 4, 4),
                (7, 0, 1, 3, 8),
            ]
        );
        let ack = r.open(&d).and_then(|mut g| g.commands.next()).expect("ack");
        assert_eq!(ack.u16_at(4), Some(9), "receivedReliableSequenceNumber");
        assert_eq!(ack.u16_at(6), Some(0x00FF), "receivedSentTime");
        assert_eq!(ack.u16_at(7), None, "past the command's fixed part");
    }

    #[test]
    fn no_sent_time_and_a_checksum_move_the_commands() {
        // Peer 0x123, no flags; 4 checksum bytes; one PING.
        let d = [0x01, 0x23, 9, 9, 9, 9, 0x85, 0xFF, 0x00, 0x01];
        let mut r = Reader::new(true, false);
        let g = r.open(&d).expect("parses");
        assert_eq!((g.peer_id, g.sent_time), (0x123, None));
        assert_eq!(g.commands.map(|c| c.number).collect::<Vec<_>>(), [5]);
    }

    #[test]
    fn stops_at_an_unknown_or_truncated_command() {
        let mut r = Reader::new(false, false);
        let d = datagram();
        // The payload of the SEND_RELIABLE cut short: only the acknowledgement is read.
        let g = r.open(&d[..4 + 8 + 7]).expect("header parses");
        assert_eq!(g.commands.count(), 1);
        // Command number 13 does not exist.
        let g = r.open(&[0x00, 0x01, 0x0D, 0, 0, 0]).expect("header parses");
        assert_eq!(g.commands.count(), 0);
        assert!(r.open(&[0x80]).is_none(), "one byte is no header");
        assert!(r.open(&[0x80, 0x01, 0x00]).is_none(), "sent time cut short");
        // Compressed, but this host has no range coder.
        assert!(r.open(&[0x40, 0x01, 1, 2, 3]).is_none());
    }

    #[test]
    fn decodes_a_range_coded_body() {
        let plain = datagram();
        let mut coder = RangeCoder::new();
        let mut packed = [0u8; MTU_MAX];
        let n = coder.compress(&[&plain[4..]], plain.len() - 4, &mut packed);
        assert!(n > 0);
        let mut d = vec![0xE0, 0x05, 0x01, 0x02];
        d.extend_from_slice(&packed[..n]);
        let mut r = Reader::new(false, true);
        let g = r.open(&d).expect("decodes");
        assert_eq!((g.peer_id, g.sent_time), (5, Some(0x0102)));
        assert_eq!(g.commands.count(), 4);
    }
}
