//! Writing a pcapng file of UDP datagrams (`tickswarm relay --record`): one section, one
//! interface of link type raw IP (101), each datagram an Enhanced Packet Block with an IPv4
//! or IPv6 and a UDP header made up for it (checksums computed) and a µs timestamp. The file
//! stops growing at its byte limit; datagrams past it are counted, not written.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// LINKTYPE_RAW: each packet starts with its IP header.
const LINKTYPE_RAW: u16 = 101;

/// A pcapng file being written.
pub struct PcapngWriter<W: Write> {
    out: W,
    written: u64,
    limit: u64,
    /// Datagrams not written because the file reached its limit.
    pub over_limit: u64,
    /// Datagrams written.
    pub datagrams: u64,
    scratch: Vec<u8>,
}

impl<W: Write> PcapngWriter<W> {
    /// Start a file on `out` (section header and the one interface), at most `limit` bytes.
    pub fn new(mut out: W, limit: u64) -> std::io::Result<Self> {
        let mut head = Vec::with_capacity(48);
        // Section Header Block: type, length 28, byte-order magic, version 1.0, section
        // length unknown (-1), length again.
        head.extend_from_slice(&0x0A0D_0D0Au32.to_le_bytes());
        head.extend_from_slice(&28u32.to_le_bytes());
        head.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
        head.extend_from_slice(&1u16.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&(-1i64).to_le_bytes());
        head.extend_from_slice(&28u32.to_le_bytes());
        // Interface Description Block: link type raw, snap length 0 (none), no options
        // (timestamps in µs, the default resolution).
        head.extend_from_slice(&1u32.to_le_bytes());
        head.extend_from_slice(&20u32.to_le_bytes());
        head.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        head.extend_from_slice(&20u32.to_le_bytes());
        out.write_all(&head)?;
        Ok(Self {
            out,
            written: head.len() as u64,
            limit,
            over_limit: 0,
            datagrams: 0,
            scratch: Vec::with_capacity(2048),
        })
    }

    /// One UDP datagram from `src` to `dst` (the same address family), seen at `at`.
    pub fn datagram(
        &mut self,
        at: SystemTime,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let packet = &mut self.scratch;
        packet.clear();
        let built = match (src, dst) {
            (SocketAddr::V4(s), SocketAddr::V4(d)) => {
                etherparse::PacketBuilder::ipv4(s.ip().octets(), d.ip().octets(), 64)
                    .udp(s.port(), d.port())
                    .write(packet, payload)
            }
            (SocketAddr::V6(s), SocketAddr::V6(d)) => {
                etherparse::PacketBuilder::ipv6(s.ip().octets(), d.ip().octets(), 64)
                    .udp(s.port(), d.port())
                    .write(packet, payload)
            }
            _ => {
                return Err(std::io::Error::other(
                    "src and dst of different address families",
                ))
            }
        };
        if built.is_err() {
            // Larger than IP carries (never for a datagram that was received).
            self.over_limit += 1;
            return Ok(());
        }
        let pad = (4 - packet.len() % 4) % 4;
        let total = 32 + packet.len() + pad;
        if self.written + total as u64 > self.limit {
            self.over_limit += 1;
            return Ok(());
        }
        let us = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let mut block = Vec::with_capacity(total);
        block.extend_from_slice(&6u32.to_le_bytes());
        block.extend_from_slice(&(total as u32).to_le_bytes());
        block.extend_from_slice(&0u32.to_le_bytes());
        block.extend_from_slice(&((us >> 32) as u32).to_le_bytes());
        block.extend_from_slice(&(us as u32).to_le_bytes());
        block.extend_from_slice(&(packet.len() as u32).to_le_bytes());
        block.extend_from_slice(&(packet.len() as u32).to_le_bytes());
        block.extend_from_slice(packet);
        block.resize(block.len() + pad, 0);
        block.extend_from_slice(&(total as u32).to_le_bytes());
        self.out.write_all(&block)?;
        self.written += total as u64;
        self.datagrams += 1;
        Ok(())
    }

    /// Flush what is buffered.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_datagram_reads_back_with_its_addresses_time_and_payload() {
        let mut buf = Vec::new();
        let mut w = PcapngWriter::new(&mut buf, 1 << 20).expect("header");
        let at = UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        let src: SocketAddr = "127.0.0.1:5000".parse().expect("addr");
        let dst: SocketAddr = "127.0.0.2:4242".parse().expect("addr");
        w.datagram(at, src, dst, b"hello").expect("write");
        // The header blocks by hand: SHB magic then IDB of link type 101.
        assert_eq!(&buf[..4], &[0x0A, 0x0D, 0x0D, 0x0A]);
        assert_eq!(&buf[28..32], &[1, 0, 0, 0]);
        assert_eq!(&buf[36..38], &[101, 0]);
        let mut got = Vec::new();
        super::super::read::read(&buf[..], &mut |p| {
            got.push((p.at_us, p.src, p.dst, p.payload.to_vec()))
        })
        .expect("reads");
        assert_eq!(got, [(1_700_000_000_123_456, src, dst, b"hello".to_vec())]);
    }

    #[test]
    fn the_file_stops_at_its_limit() {
        let mut buf = Vec::new();
        let mut w = PcapngWriter::new(&mut buf, 48 + 64).expect("header");
        let a: SocketAddr = "[::1]:1".parse().expect("addr");
        for _ in 0..3 {
            w.datagram(SystemTime::now(), a, a, &[0; 8]).expect("write");
        }
        assert_eq!(
            (w.datagrams, w.over_limit),
            (0, 3),
            "48 + 32 + 48 + 8 > 112"
        );
        let mut w = PcapngWriter::new(Vec::new(), 48 + 100).expect("header");
        w.datagram(SystemTime::now(), a, a, &[0; 8]).expect("write");
        w.datagram(SystemTime::now(), a, a, &[0; 8]).expect("write");
        assert_eq!((w.datagrams, w.over_limit), (1, 1));
    }
}
