//! Reading a capture file (pcap or pcapng, any byte order and timestamp resolution) into the
//! UDP datagrams and TCP segments it holds, streamed: the file is read through a buffer of at
//! most [`MAX_BLOCK`] bytes, so a capture of any size is read in bounded memory.
//!
//! Link types read: Ethernet (VLAN tags included), raw IP (IPv4 and IPv6), Linux cooked
//! capture v1 and v2 (SLL, SLL2: what `tcpdump -i any` writes) and BSD loopback. Other link types are refused by name, as are IP fragments
//! (counted: a datagram split by IP cannot be read whole) and packets cut short by the
//! capture's snap length (counted: their end is missing).

use std::io::Read;
use std::net::{IpAddr, SocketAddr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_parser::{Linktype, PcapBlockOwned, PcapError};

/// The largest block the reader holds (a pcapng block or a pcap record): far past a 64 KiB
/// datagram with its headers; a larger one is a corrupt or hostile file, refused.
pub const MAX_BLOCK: usize = 1 << 20;
/// Interfaces a pcapng file may describe.
const MAX_INTERFACES: usize = 256;

/// Why a capture cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not a pcap or pcapng file.
    #[error("not a pcap or pcapng capture (the first bytes are neither a pcap header nor a pcapng section header)")]
    NotACapture,
    /// The file ends inside a block.
    #[error("the capture ends in the middle of a block at byte {0} (truncated file)")]
    Truncated(u64),
    /// A block larger than [`MAX_BLOCK`], or one the parser cannot read.
    #[error("unreadable block at byte {at}: {why}")]
    BadBlock {
        /// Offset of the block in the file.
        at: u64,
        /// What is wrong with it.
        why: String,
    },
    /// A link type this reader does not know.
    #[error(
        "link type {0} is not one inspect reads (Ethernet 1, raw IP 101/228/229, Linux cooked \
         113/276, BSD loopback 0/108): capture on an Ethernet or loopback interface, or convert \
         with editcap"
    )]
    LinkType(i32),
    /// A packet names an interface the file never described.
    #[error("a packet at byte {at} names interface {id}, which the capture does not describe")]
    NoInterface {
        /// Offset of the packet's block.
        at: u64,
        /// The interface id.
        id: u32,
    },
}

/// The transport of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Carrier {
    /// A UDP datagram.
    Udp,
    /// A TCP segment.
    Tcp,
}

/// One UDP datagram or TCP segment of the capture.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Capture time, µs since the Unix epoch.
    pub at_us: u64,
    /// UDP or TCP.
    pub carrier: Carrier,
    /// Source address.
    pub src: SocketAddr,
    /// Destination address.
    pub dst: SocketAddr,
    /// The UDP payload or TCP segment payload.
    pub payload: &'a [u8],
    /// TCP: the sequence number of the payload's first byte.
    pub tcp_seq: u32,
    /// TCP: SYN set.
    pub tcp_syn: bool,
}

/// What the reader saw besides the packets it handed on.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadCounts {
    /// Captured frames.
    pub frames: u64,
    /// UDP datagrams and TCP segments handed on.
    pub packets: u64,
    /// Frames cut by the snap length (captured length below the original): not read.
    pub snaplen_cut: u64,
    /// IP fragments: not reassembled, not read.
    pub ip_fragments: u64,
    /// Frames that are neither UDP nor TCP over IP (ARP, ICMP, ...).
    pub other: u64,
    /// Frames whose headers do not parse.
    pub malformed: u64,
    /// The byte where the file ends inside a block (a capture cut short, as a tcpdump killed
    /// mid-write leaves it): everything before it was read.
    pub truncated_at: Option<u64>,
}

/// The header of Linux cooked capture v2 (`tcpdump -i any` since libpcap 1.10), before the
/// network-layer packet: protocol, reserved, interface, ARPHRD type, packet type, address
/// length, address.
const SLL2_HEADER: usize = 20;

struct Interface {
    link: Linktype,
    /// Timestamp units a second.
    resolution: u64,
    offset_s: i64,
}

/// Read `input` (a pcap or pcapng stream), handing each UDP datagram and TCP segment to
/// `each`. Memory: one buffer of at most [`MAX_BLOCK`] bytes.
pub fn read<R: Read + Send>(
    input: R,
    each: &mut dyn FnMut(Packet<'_>),
) -> Result<ReadCounts, CaptureError> {
    let mut reader = match pcap_parser::create_reader(64 * 1024, input) {
        Ok(r) => r,
        Err(PcapError::Eof) => return Err(CaptureError::NotACapture),
        Err(PcapError::Incomplete(_)) => return Err(CaptureError::Truncated(0)),
        Err(PcapError::ReadError) => {
            return Err(CaptureError::Io(std::io::Error::other("read failed")))
        }
        Err(_) => return Err(CaptureError::NotACapture),
    };
    let mut counts = ReadCounts::default();
    let mut interfaces: Vec<Interface> = Vec::new();
    // Legacy pcap: one link type and resolution for the whole file.
    let mut legacy: Option<(Linktype, u64)> = None;
    let mut size = 64 * 1024;
    loop {
        let at = reader.consumed() as u64;
        match reader.next() {
            Ok((offset, block)) => {
                let r = handle(block, at, &mut interfaces, &mut legacy, &mut counts, each);
                reader.consume(offset);
                r?;
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => {
                // A full buffer that still holds no whole block is grown as for
                // BufferTooSmall; otherwise more of the file is read.
                if reader.data().len() >= size {
                    size = doubled(size, at)?;
                    reader.grow(size);
                }
                if reader.refill().is_err() {
                    return Err(CaptureError::Io(std::io::Error::other("read failed")));
                }
            }
            Err(PcapError::UnexpectedEof) => {
                // A capture cut short: what came before its last block stands (with nothing
                // before it, the truncation is all there is to say).
                if counts.frames == 0 {
                    return Err(CaptureError::Truncated(at));
                }
                counts.truncated_at = Some(at);
                break;
            }
            Err(PcapError::BufferTooSmall) => {
                size = doubled(size, at)?;
                reader.grow(size);
                if reader.refill().is_err() {
                    return Err(CaptureError::Truncated(at));
                }
            }
            Err(PcapError::ReadError) => {
                return Err(CaptureError::Io(std::io::Error::other("read failed")))
            }
            Err(e) => {
                return Err(CaptureError::BadBlock {
                    at,
                    why: match e {
                        PcapError::NomError(_, k) | PcapError::OwnedNomError(_, k) => {
                            format!("malformed ({k:?})")
                        }
                        PcapError::HeaderNotRecognized => "unknown block".into(),
                        _ => "malformed".into(),
                    },
                })
            }
        }
    }
    Ok(counts)
}

/// The reader's next buffer size for a block at `at` that does not fit `size` bytes: twice
/// as much, up to [`MAX_BLOCK`]; past it the block is refused.
fn doubled(size: usize, at: u64) -> Result<usize, CaptureError> {
    if size >= MAX_BLOCK {
        return Err(CaptureError::BadBlock {
            at,
            why: format!("a block of more than {MAX_BLOCK} bytes"),
        });
    }
    Ok((size * 2).min(MAX_BLOCK))
}

fn handle(
    block: PcapBlockOwned<'_>,
    at: u64,
    interfaces: &mut Vec<Interface>,
    legacy: &mut Option<(Linktype, u64)>,
    counts: &mut ReadCounts,
    each: &mut dyn FnMut(Packet<'_>),
) -> Result<(), CaptureError> {
    use pcap_parser::Block;
    match block {
        PcapBlockOwned::LegacyHeader(h) => {
            check_link(h.network)?;
            let res = if h.is_nanosecond_precision() {
                1_000_000_000
            } else {
                1_000_000
            };
            *legacy = Some((h.network, res));
        }
        PcapBlockOwned::Legacy(b) => {
            let Some((link, res)) = *legacy else {
                return Err(CaptureError::NotACapture);
            };
            let at_us =
                u64::from(b.ts_sec) * 1_000_000 + u64::from(b.ts_usec) * 1_000_000 / res.max(1);
            frame(link, at_us, b.caplen < b.origlen, b.data, counts, each);
        }
        PcapBlockOwned::NG(Block::SectionHeader(_)) => {
            // A new section describes its interfaces anew.
            interfaces.clear();
        }
        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
            check_link(idb.linktype)?;
            if interfaces.len() >= MAX_INTERFACES {
                return Err(CaptureError::BadBlock {
                    at,
                    why: format!("more than {MAX_INTERFACES} interfaces"),
                });
            }
            interfaces.push(Interface {
                link: idb.linktype,
                resolution: idb.ts_resolution().unwrap_or(1_000_000).max(1),
                offset_s: idb.ts_offset(),
            });
        }
        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
            let Some(i) = interfaces.get(epb.if_id as usize) else {
                return Err(CaptureError::NoInterface { at, id: epb.if_id });
            };
            let ticks = (u128::from(epb.ts_high) << 32) | u128::from(epb.ts_low);
            let us = ticks * 1_000_000 / u128::from(i.resolution);
            let us = u64::try_from(us).unwrap_or(u64::MAX);
            let at_us = us.saturating_add_signed(i.offset_s.saturating_mul(1_000_000));
            frame(
                i.link,
                at_us,
                epb.caplen < epb.origlen,
                epb.data,
                counts,
                each,
            );
        }
        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
            let Some(i) = interfaces.first() else {
                return Err(CaptureError::NoInterface { at, id: 0 });
            };
            // No timestamp in a simple packet block.
            frame(
                i.link,
                0,
                spb.data.len() < spb.origlen as usize,
                spb.data,
                counts,
                each,
            );
        }
        PcapBlockOwned::NG(_) => {}
    }
    Ok(())
}

fn check_link(l: Linktype) -> Result<(), CaptureError> {
    match l {
        Linktype::ETHERNET
        | Linktype::RAW
        | Linktype::IPV4
        | Linktype::IPV6
        | Linktype::LINUX_SLL
        | Linktype::LINUX_SLL2
        | Linktype::NULL
        | Linktype::LOOP => Ok(()),
        other => Err(CaptureError::LinkType(other.0)),
    }
}

/// One captured frame: its UDP or TCP payload to `each`, or counted.
fn frame(
    link: Linktype,
    at_us: u64,
    cut: bool,
    data: &[u8],
    counts: &mut ReadCounts,
    each: &mut dyn FnMut(Packet<'_>),
) {
    counts.frames += 1;
    if cut {
        counts.snaplen_cut += 1;
        return;
    }
    let sliced = match link {
        Linktype::ETHERNET => SlicedPacket::from_ethernet(data),
        Linktype::LINUX_SLL => SlicedPacket::from_linux_sll(data),
        Linktype::LINUX_SLL2 => match data.get(SLL2_HEADER..) {
            Some(rest) => SlicedPacket::from_ip(rest),
            None => {
                counts.malformed += 1;
                return;
            }
        },
        Linktype::NULL | Linktype::LOOP => match data.get(4..) {
            Some(rest) => SlicedPacket::from_ip(rest),
            None => {
                counts.malformed += 1;
                return;
            }
        },
        _ => SlicedPacket::from_ip(data),
    };
    let Ok(p) = sliced else {
        counts.malformed += 1;
        return;
    };
    let (src_ip, dst_ip, fragmented): (IpAddr, IpAddr, bool) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => (
            v4.header().source_addr().into(),
            v4.header().destination_addr().into(),
            v4.payload().fragmented,
        ),
        Some(NetSlice::Ipv6(v6)) => (
            v6.header().source_addr().into(),
            v6.header().destination_addr().into(),
            v6.payload().fragmented,
        ),
        _ => {
            counts.other += 1;
            return;
        }
    };
    if fragmented {
        counts.ip_fragments += 1;
        return;
    }
    let packet = match &p.transport {
        Some(TransportSlice::Udp(u)) => Packet {
            at_us,
            carrier: Carrier::Udp,
            src: SocketAddr::new(src_ip, u.source_port()),
            dst: SocketAddr::new(dst_ip, u.destination_port()),
            payload: u.payload(),
            tcp_seq: 0,
            tcp_syn: false,
        },
        Some(TransportSlice::Tcp(t)) => Packet {
            at_us,
            carrier: Carrier::Tcp,
            src: SocketAddr::new(src_ip, t.source_port()),
            dst: SocketAddr::new(dst_ip, t.destination_port()),
            payload: t.payload(),
            tcp_seq: t.sequence_number(),
            tcp_syn: t.syn(),
        },
        _ => {
            counts.other += 1;
            return;
        }
    };
    counts.packets += 1;
    each(packet);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy pcap (µs, little-endian) of link type `link`, one record per frame, each
    /// `(captured bytes, original length)`.
    fn pcap(link: u8, frames: &[(&[u8], u32)]) -> Vec<u8> {
        let mut f = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        f.extend_from_slice(&[0xFF, 0xFF, 0, 0, link, 0, 0, 0]);
        for (i, (data, orig)) in frames.iter().enumerate() {
            f.extend_from_slice(&[0, 0, 0, 0]);
            f.extend_from_slice(&(i as u32 * 1000).to_le_bytes());
            f.extend_from_slice(&(data.len() as u32).to_le_bytes());
            f.extend_from_slice(&orig.to_le_bytes());
            f.extend_from_slice(data);
        }
        f
    }

    fn read_all(file: &[u8]) -> (ReadCounts, Vec<(SocketAddr, SocketAddr, Vec<u8>)>) {
        let mut got = Vec::new();
        let counts = read(file, &mut |p| got.push((p.src, p.dst, p.payload.to_vec())))
            .expect("a readable capture");
        (counts, got)
    }

    /// IPv4 (20 bytes, UDP, 127.0.0.1 -> 127.0.0.2, flags/fragment field `frag`), UDP
    /// 5000 -> 6000, payload "hi".
    fn ipv4_udp(frag: [u8; 2]) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 30, 0, 1, frag[0], frag[1], 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
        ];
        p.extend_from_slice(&[0x13, 0x88, 0x17, 0x70, 0, 10, 0, 0, b'h', b'i']);
        p
    }

    #[test]
    fn ethernet_and_ipv6_frames_give_their_udp_payloads() {
        // Ethernet: destination, source, EtherType 0x0800, then the IPv4 packet.
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ipv4_udp([0, 0]));
        let (c, got) = read_all(&pcap(1, &[(&eth, eth.len() as u32)]));
        assert_eq!((c.frames, c.packets), (1, 1));
        assert_eq!(got[0].0, "127.0.0.1:5000".parse().expect("addr"));
        assert_eq!(got[0].2, b"hi");
        // Raw IPv6: version 6, payload length 10, next header UDP (17), hop limit 64, ::1 to ::1.
        let mut v6 = vec![0x60, 0, 0, 0, 0, 10, 17, 64];
        v6.extend_from_slice(&[0; 15]);
        v6.push(1);
        v6.extend_from_slice(&[0; 15]);
        v6.push(1);
        v6.extend_from_slice(&[0x13, 0x88, 0x17, 0x70, 0, 10, 0, 0, b'h', b'i']);
        let (c, got) = read_all(&pcap(101, &[(&v6, v6.len() as u32)]));
        assert_eq!(c.packets, 1);
        assert_eq!(got[0].1, "[::1]:6000".parse().expect("addr"));
    }

    #[test]
    fn cut_frames_and_ip_fragments_are_counted_not_read() {
        let whole = ipv4_udp([0, 0]);
        // Captured with a snap length of 24: the original was 30 bytes.
        let cut = &whole[..24];
        // More-fragments set (0x2000): the first piece of a split datagram.
        let first_piece = ipv4_udp([0x20, 0]);
        let (c, got) = read_all(&pcap(
            101,
            &[
                (cut, 30),
                (&first_piece, first_piece.len() as u32),
                (&whole, 30),
            ],
        ));
        assert_eq!(
            (c.frames, c.snaplen_cut, c.ip_fragments, c.packets),
            (3, 1, 1, 1)
        );
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn a_pcapng_block_past_the_bound_is_refused_without_reading_it() {
        // A section header block (28 bytes), then a block of type 6 claiming 16 MiB.
        let mut f = vec![
            0x0A, 0x0D, 0x0D, 0x0A, 28, 0, 0, 0, 0x4D, 0x3C, 0x2B, 0x1A, 1, 0, 0, 0,
        ];
        f.extend_from_slice(&[0xFF; 8]);
        f.extend_from_slice(&[28, 0, 0, 0]);
        f.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0; 64]);
        let e = read(&f[..], &mut |_| {}).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("unreadable block") || text.contains("truncated"),
            "{text}"
        );
    }
}
