//! ENet's framing taken off captured datagrams, for `tickswarm inspect`: each datagram of
//! one direction of one flow in, the packets a peer would hand its application out (the
//! payload of each SEND_* command, fragments reassembled, retransmitted reliable commands
//! given once), or the byte where a datagram stops reading as ENet.
//!
//! Bounded whatever the capture holds: a reassembly is at most [`MAX_PACKET`] bytes, at most
//! [`MAX_REASSEMBLIES`] wait at once (the oldest gives way), and the record of reliable
//! commands seen is a fixed window per channel.

use super::wire::{Reader, COMMAND_SIZES, FLAG_COMPRESSED, FLAG_SENT_TIME};

/// The largest packet reassembled from fragments (a larger one is reported, not held).
pub const MAX_PACKET: usize = 1 << 20;
/// Reassemblies waiting at once per direction.
pub const MAX_REASSEMBLIES: usize = 32;
/// Reliable sequence numbers remembered per channel (to give a retransmission once).
const SEEN_WINDOW: u16 = 4096;

/// Where a datagram stops reading as ENet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotEnet {
    /// Byte offset in the datagram (in the decompressed body when compressed).
    pub offset: usize,
    /// What ENet has there.
    pub expected: String,
}

/// One packet an application would receive.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// The ENet channel.
    pub channel: u8,
    /// Sent reliably.
    pub reliable: bool,
    /// The payload.
    pub data: &'a [u8],
}

struct Reassembly {
    channel: u8,
    start_seq: u16,
    reliable: bool,
    total: usize,
    count: u32,
    got: u32,
    filled: Vec<bool>,
    data: Vec<u8>,
}

/// One direction of one flow.
pub struct Unframer {
    reader: Reader,
    pending: Vec<Reassembly>,
    /// Per channel, the reliable sequence numbers seen lately (`seq % SEEN_WINDOW` slot holds
    /// the number).
    seen: Vec<Option<Box<[Option<u16>]>>>,
    /// Packets too large or too many reassemblies at once (dropped, counted).
    pub dropped: u64,
}

impl std::fmt::Debug for Unframer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unframer")
            .field("pending", &self.pending.len())
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl Unframer {
    /// A reader of datagrams of a host with these settings (`range_coder`: ENet's own
    /// compression; checksums are not used by any protocol here).
    pub fn new(range_coder: bool) -> Self {
        Self {
            reader: Reader::new(false, range_coder),
            pending: Vec::new(),
            seen: Vec::new(),
            dropped: 0,
        }
    }

    /// Read one datagram; each complete packet goes to `out`. Returns how many commands the
    /// datagram held.
    pub fn datagram(
        &mut self,
        datagram: &[u8],
        out: &mut dyn FnMut(Packet<'_>),
    ) -> Result<usize, NotEnet> {
        let Some(first) = datagram.get(..2) else {
            return Err(NotEnet {
                offset: datagram.len(),
                expected: "a 2-byte ENet header (peer id and flags)".into(),
            });
        };
        let word = u16::from_be_bytes([first[0], first[1]]);
        let header = if word & FLAG_SENT_TIME != 0 { 4 } else { 2 };
        if datagram.len() < header {
            return Err(NotEnet {
                offset: datagram.len(),
                expected: "the header's sent time (flag 0x8000 set)".into(),
            });
        }
        let compressed = word & FLAG_COMPRESSED != 0;
        // The body, decompressed when flagged, copied out of the reader's buffer so the
        // reassemblies can be updated while it is read.
        let body: Vec<u8> = match self.reader.open(datagram) {
            Some(d) => d.commands.body().to_vec(),
            None => {
                return Err(NotEnet {
                    offset: header,
                    expected: if compressed {
                        "a range-coded body (flag 0x4000)".into()
                    } else {
                        "ENet commands".into()
                    },
                })
            }
        };
        let base = if compressed { 0 } else { header };
        let mut at = 0usize;
        let mut commands = 0usize;
        if body.is_empty() {
            return Err(NotEnet {
                offset: base,
                expected: "at least one ENet command".into(),
            });
        }
        while at < body.len() {
            let first = body[at];
            let number = first & 0x0F;
            let size = COMMAND_SIZES.get(usize::from(number)).copied().unwrap_or(0);
            if size == 0 {
                return Err(NotEnet {
                    offset: base + at,
                    expected: format!(
                        "an ENet command number 1-12 in the low 4 bits (0x{first:02X} has {number})"
                    ),
                });
            }
            let Some(fixed) = body.get(at..at + size) else {
                return Err(NotEnet {
                    offset: base + body.len(),
                    expected: format!("the {size}-byte command {number}"),
                });
            };
            let len_at = match number {
                6 => Some(4),
                7 | 8 | 9 | 12 => Some(6),
                _ => None,
            };
            let payload_len = len_at.map_or(0, |i| {
                usize::from(u16::from_be_bytes([fixed[i], fixed[i + 1]]))
            });
            let Some(payload) = body.get(at + size..at + size + payload_len) else {
                return Err(NotEnet {
                    offset: base + at + len_at.unwrap_or(0),
                    expected: format!(
                        "a dataLength of at most the {} bytes left",
                        body.len() - at - size
                    ),
                });
            };
            let channel = fixed[1];
            let reliable_seq = u16::from_be_bytes([fixed[2], fixed[3]]);
            match number {
                // A reliable send is given once, however often it was retransmitted.
                6 | 7 | 9 if number != 6 || self.first_time(channel, reliable_seq) => {
                    out(Packet {
                        channel,
                        reliable: number == 6,
                        data: payload,
                    });
                }
                // Fragments of one reliable packet each carry their own reliable sequence
                // number.
                8 | 12 if number == 12 || self.first_time(channel, reliable_seq) => {
                    self.fragment(fixed, channel, number == 8, payload, out);
                }
                _ => {}
            }
            commands += 1;
            at += size + payload_len;
        }
        Ok(commands)
    }

    /// Whether a reliable command is new (not a retransmission).
    fn first_time(&mut self, channel: u8, seq: u16) -> bool {
        let ch = usize::from(channel);
        if self.seen.len() <= ch {
            self.seen.resize_with(ch + 1, || None);
        }
        let w = self.seen[ch].get_or_insert_with(|| vec![None; usize::from(SEEN_WINDOW)].into());
        let slot = &mut w[usize::from(seq % SEEN_WINDOW)];
        if *slot == Some(seq) {
            return false;
        }
        *slot = Some(seq);
        true
    }

    fn fragment(
        &mut self,
        fixed: &[u8],
        channel: u8,
        reliable: bool,
        payload: &[u8],
        out: &mut dyn FnMut(Packet<'_>),
    ) {
        let u32_at =
            |i: usize| u32::from_be_bytes([fixed[i], fixed[i + 1], fixed[i + 2], fixed[i + 3]]);
        let start_seq = u16::from_be_bytes([fixed[4], fixed[5]]);
        let count = u32_at(8);
        let number = u32_at(12);
        let total = u32_at(16) as usize;
        let offset = u32_at(20) as usize;
        if total > MAX_PACKET
            || count == 0
            || number >= count
            || count as usize > total.max(1)
            || offset
                .checked_add(payload.len())
                .is_none_or(|end| end > total)
        {
            self.dropped += 1;
            return;
        }
        let i = match self
            .pending
            .iter()
            .position(|r| r.channel == channel && r.start_seq == start_seq && r.total == total)
        {
            Some(i) => i,
            None => {
                if self.pending.len() >= MAX_REASSEMBLIES {
                    self.pending.remove(0);
                    self.dropped += 1;
                }
                self.pending.push(Reassembly {
                    channel,
                    start_seq,
                    reliable,
                    total,
                    count,
                    got: 0,
                    filled: vec![false; count as usize],
                    data: vec![0; total],
                });
                self.pending.len() - 1
            }
        };
        let r = &mut self.pending[i];
        if r.count != count || r.filled[number as usize] {
            return;
        }
        r.filled[number as usize] = true;
        r.got += 1;
        r.data[offset..offset + payload.len()].copy_from_slice(payload);
        if r.got == r.count {
            let r = self.pending.remove(i);
            out(Packet {
                channel: r.channel,
                reliable: r.reliable,
                data: &r.data,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(u: &mut Unframer, d: &[u8]) -> Result<Vec<(u8, bool, Vec<u8>)>, NotEnet> {
        let mut got = Vec::new();
        u.datagram(d, &mut |p| {
            got.push((p.channel, p.reliable, p.data.to_vec()))
        })?;
        Ok(got)
    }

    #[test]
    fn payloads_come_out_once_and_a_retransmission_is_not_given_twice() {
        // Header: peer 5, sent time. SEND_RELIABLE ch 0 seq 3 "hi"; SEND_UNRELIABLE ch 1 "x".
        let mut d = vec![0x80, 0x05, 0x01, 0x02];
        d.extend_from_slice(&[0x86, 0x00, 0x00, 0x03, 0x00, 0x02, b'h', b'i']);
        d.extend_from_slice(&[0x07, 0x01, 0x00, 0x03, 0x00, 0x07, 0x00, 0x01, b'x']);
        let mut u = Unframer::new(false);
        let got = collect(&mut u, &d).expect("reads");
        assert_eq!(got, [(0, true, b"hi".to_vec()), (1, false, b"x".to_vec())]);
        let again = collect(&mut u, &d).expect("reads");
        assert_eq!(
            again,
            [(1, false, b"x".to_vec())],
            "the reliable one was seen"
        );
    }

    #[test]
    fn fragments_are_reassembled_in_any_order() {
        // SEND_FRAGMENT (8) ch 0: start seq 1, 2 fragments of a 4-byte packet.
        let frag = |seq: u8, n: u8, off: u8, bytes: &[u8]| {
            let mut d = vec![0x00, 0x05];
            d.extend_from_slice(&[0x88, 0x00, 0x00, seq, 0x00, 0x01, 0x00, 0x02]);
            d.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, n, 0, 0, 0, 4, 0, 0, 0, off]);
            d.extend_from_slice(bytes);
            d
        };
        let mut u = Unframer::new(false);
        assert!(collect(&mut u, &frag(2, 1, 2, b"cd"))
            .expect("reads")
            .is_empty());
        let got = collect(&mut u, &frag(1, 0, 0, b"ab")).expect("reads");
        assert_eq!(got, [(0, true, b"abcd".to_vec())]);
    }

    #[test]
    fn a_datagram_that_is_not_enet_says_where() {
        let mut u = Unframer::new(false);
        // "FE CA 01 02": a cafe header read as ENet: peer word 0xFECA (sent time), then a
        // command byte 0x?? past the 4-byte header.
        let e = collect(&mut u, &[0xFE, 0xCA, 0x01, 0x02, 0x0D, 0, 0, 0]).unwrap_err();
        assert_eq!(e.offset, 4);
        assert_eq!(collect(&mut u, &[0x80]).unwrap_err().offset, 1);
        // A SEND_RELIABLE whose dataLength runs past the datagram.
        let e = collect(&mut u, &[0x00, 0x01, 0x86, 0, 0, 1, 0, 9, b'a']).unwrap_err();
        assert_eq!(e.offset, 2 + 4);
    }
}
