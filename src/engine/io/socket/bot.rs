//! The socket of one bot: a connected, non-blocking UDP socket registered with the worker's
//! reactor.
//!
//! Bots use plain `send` and `recvmmsg` without control messages instead of quinn-udp: a bot
//! socket carries one peer at ~60 datagrams a second, so GRO and GSO never engage, while
//! quinn-udp's per-datagram control messages (ECN, packet info) showed in profiles as a
//! measurable share of the worker's time. Reference servers, one socket for every client,
//! keep quinn-udp.
//!
//! One receive syscall per wake-up: `recvmmsg` asks for a small batch, and when it returns
//! fewer than asked the queue was empty, so readiness is cleared without a second call that
//! would only return `EAGAIN`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

/// Datagrams asked for per receive call.
pub const RECV_BATCH: usize = 8;
/// Largest datagram a bot accepts: the largest a UDP datagram can be, so servers that send
/// big snapshots (tens of kilobytes) are read whole. A longer one (an IPv6 jumbogram) is
/// counted as `recv.truncated` and not handed to the bot.
pub const RECV_BUF: usize = 65_536;

pub struct BotSocket {
    fd: AsyncFd<UdpSocket>,
}

/// Receive buffers shared by all bots of a worker (allocated once, on the heap).
pub struct BotRx {
    bufs: [Box<[u8]>; RECV_BATCH],
    /// Each datagram's real length (the kernel reports it even when it did not fit).
    lens: [usize; RECV_BATCH],
}

impl Default for BotRx {
    fn default() -> Self {
        Self {
            bufs: std::array::from_fn(|_| vec![0u8; RECV_BUF].into_boxed_slice()),
            lens: [0; RECV_BATCH],
        }
    }
}

impl BotRx {
    /// The first `n` datagrams that fit their buffer.
    pub fn datagrams(&self, n: usize) -> impl Iterator<Item = &[u8]> + '_ {
        self.bufs
            .iter()
            .zip(self.lens.iter())
            .take(n)
            .filter(|(b, &l)| l <= b.len())
            .map(|(b, &l)| &b[..l])
    }

    /// The real sizes of the first `n` datagrams.
    pub fn sizes(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        self.lens.iter().take(n).copied()
    }

    /// Of the first `n` datagrams, how many were cut short, and their real total size.
    pub fn truncated(&self, n: usize) -> (u64, u64) {
        self.lens
            .iter()
            .take(n)
            .filter(|&&l| l > RECV_BUF)
            .fold((0, 0), |(c, b), &l| (c + 1, b + l as u64))
    }
}

/// Receive and send buffer asked for each bot socket (granted up to `net.core.rmem_max`
/// unless running as root).
const BOT_SOCKET_BUFFER: usize = 1024 * 1024;

impl BotSocket {
    /// Bind an ephemeral port on `source` (the bot's source address; `None`: the wildcard
    /// address of `peer`'s family) and connect to `peer`, so the kernel filters strangers and
    /// reports a closed port (ICMP) as ECONNREFUSED. A source address this machine does not
    /// have fails with [`io::ErrorKind::AddrNotAvailable`] and a message saying how to add it
    /// ([`source_unavailable`]). `buffers`: the kernel buffers the socket asks for (the plan's
    /// size for what the protocol can burst, `engine.socket_buffer`); `None`: 1 MiB each way.
    pub fn connect_to(
        peer: SocketAddr,
        source: Option<IpAddr>,
        buffers: Option<super::SocketBuffers>,
    ) -> io::Result<Self> {
        let local: SocketAddr = match (source, peer) {
            (Some(ip), _) => (ip, 0).into(),
            (None, SocketAddr::V4(_)) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            (None, SocketAddr::V6(_)) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let sock = UdpSocket::bind(local).map_err(|e| match source {
            Some(ip) if e.kind() == io::ErrorKind::AddrNotAvailable => source_unavailable(ip),
            _ => e,
        })?;
        // The default receive buffer (about 200 KB) holds three 60 KB snapshots: a worker
        // descheduled for a moment would drop what the server sent, and the run would report
        // the tool's own stall as the server's loss. The kernel charges only what is queued.
        super::set_buffers(
            &sock,
            buffers.unwrap_or(super::SocketBuffers::both(BOT_SOCKET_BUFFER)),
        );
        sock.connect(peer)?;
        sock.set_nonblocking(true)?;
        // Readable only: a bot never waits to write (a full buffer is a dropped datagram,
        // counted), and with EPOLLOUT registered every datagram sent raised a write-space
        // event when loopback freed it, one epoll event and reactor wake-up per datagram
        // (measured: 10 % of a 4,500-bot swarm's samples).
        // SAFETY: the socket moves into the AsyncFd, which owns it, keeps the descriptor
        // open while registered and deregisters before closing it.
        let fd = unsafe { AsyncFd::register_with_interest(sock, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Self { fd })
    }

    /// The address and port the socket is bound to.
    #[cfg(test)]
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.fd.get_ref().local_addr()
    }

    /// The socket's descriptor, for requests the worker batches (io_uring): valid while
    /// this socket lives.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.get_ref().as_raw_fd()
    }

    /// Send now; never waits. `WouldBlock` means the socket buffer is full.
    pub fn send(&self, bytes: &[u8]) -> io::Result<()> {
        self.fd.get_ref().send(bytes).map(|_| ())
    }

    /// [`BotSocket::send`], counted: the bytes on the wire (`wire_up`), or the error by its
    /// kind in `send_errors`. `true` when the datagram went out.
    pub fn send_counted(&self, bytes: &[u8], rec: &mut crate::metrics::Recorder) -> bool {
        match self.send(bytes) {
            Ok(()) => {
                rec.wire_up(bytes.len());
                true
            }
            Err(e) => {
                rec.send_errors.add(super::error_name(&e), 1);
                false
            }
        }
    }

    /// Wait until the socket is readable. Receive through the returned guard, without
    /// holding any borrow across the wait.
    pub async fn readable(&self) -> io::Result<Readable<'_>> {
        Ok(Readable(self.fd.readable().await?))
    }
}

/// The error of a bind to a source address that is on no interface (EADDRNOTAVAIL): it names
/// the address and the command that adds it.
pub fn source_unavailable(ip: IpAddr) -> io::Error {
    let add = match ip {
        IpAddr::V4(_) => format!("ip addr add {ip}/32 dev eth0"),
        IpAddr::V6(_) => format!("ip -6 addr add {ip}/128 dev eth0"),
    };
    io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        format!(
            "cannot bind source address {ip}: it is not on any interface of this machine \
             (add it, e.g. `{add}` with your interface's name, or change \
             engine.source_addresses)"
        ),
    )
}

/// Whether this machine can send from `ip`: a bind to it, without sending anything.
pub fn check_source(ip: IpAddr) -> io::Result<()> {
    UdpSocket::bind((ip, 0)).map(drop).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrNotAvailable {
            source_unavailable(ip)
        } else {
            io::Error::new(e.kind(), format!("cannot bind source address {ip}: {e}"))
        }
    })
}

/// A readiness guard for one wake-up.
pub struct Readable<'a>(AsyncFdReadyGuard<'a, UdpSocket>);

impl Readable<'_> {
    /// Receive up to [`RECV_BATCH`] datagrams with one syscall. Fewer than asked means the
    /// queue is drained, and readiness is cleared (the next datagram raises a fresh event)
    /// without a second call that would only return `EAGAIN`. Errors (ICMP port unreachable
    /// on a connected socket) come once each.
    pub fn recv(&mut self, rx: &mut BotRx) -> io::Result<usize> {
        match recvmmsg(self.0.get_ref().get_ref(), rx) {
            Ok(n) => {
                if n < RECV_BATCH {
                    self.0.clear_ready();
                }
                Ok(n)
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::WouldBlock {
                    self.0.clear_ready();
                }
                Err(e)
            }
        }
    }
}

fn recvmmsg(sock: &UdpSocket, rx: &mut BotRx) -> io::Result<usize> {
    let mut iovs: [libc::iovec; RECV_BATCH] = std::array::from_fn(|_| libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    });
    // SAFETY: an all-zero mmsghdr (null name and control, no iovecs) is valid.
    let mut hdrs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
    for ((iov, hdr), buf) in iovs.iter_mut().zip(hdrs.iter_mut()).zip(rx.bufs.iter_mut()) {
        iov.iov_base = buf.as_mut_ptr().cast();
        iov.iov_len = buf.len();
        hdr.msg_hdr.msg_iov = iov;
        hdr.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: every header points at a live iovec over a live buffer of the stated length;
    // the kernel writes at most that many bytes and the datagram lengths into msg_len.
    let n = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            hdrs.as_mut_ptr(),
            RECV_BATCH as libc::c_uint,
            // MSG_TRUNC: msg_len is the datagram's real length even when it did not fit.
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    for (len, hdr) in rx.lens.iter_mut().zip(hdrs.iter()).take(n) {
        *len = hdr.msg_len as usize;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel reports a datagram's real length with MSG_TRUNC; one longer than the buffer
    /// (only an IPv6 jumbogram can be, loopback UDP cannot) is never handed on, and is counted
    /// at its real size.
    #[test]
    fn a_cut_datagram_is_counted_at_its_real_size_and_not_delivered() {
        let mut rx = BotRx::default();
        rx.lens[0] = 100;
        rx.lens[1] = RECV_BUF + 10;
        rx.lens[2] = RECV_BUF;
        let delivered: Vec<usize> = rx.datagrams(3).map(<[u8]>::len).collect();
        assert_eq!(delivered, vec![100, RECV_BUF]);
        assert_eq!(rx.truncated(3), (1, (RECV_BUF + 10) as u64));
        assert_eq!(
            rx.sizes(3).collect::<Vec<_>>(),
            vec![100, RECV_BUF + 10, RECV_BUF]
        );
    }

    /// A bot socket asks for the buffers the worker's plan gives it, whatever its opener's
    /// default (48,000 / 24,000 bytes: under the default rmem_max and wmem_max, so granted
    /// without root too, doubled by the kernel).
    #[test]
    fn a_bot_socket_gets_the_buffers_the_plan_gives_it() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let asked = super::super::SocketBuffers {
            receive: 48_000,
            send: 24_000,
        };
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sock = BotSocket::connect_to(server.local_addr().unwrap(), None, Some(asked)).unwrap();
        let got = super::super::granted_buffers(&sock.raw_fd()).unwrap();
        assert_eq!((got.receive, got.send), (2 * asked.receive, 2 * asked.send));
    }

    /// A real 60,000-byte datagram on loopback arrives whole.
    #[test]
    fn a_big_datagram_arrives_whole() {
        let rt = crate::engine::io::test_runtime();
        rt.block_on(async {
            let server = UdpSocket::bind("127.0.0.1:0").unwrap();
            let sock = BotSocket::connect_to(server.local_addr().unwrap(), None, None).unwrap();
            sock.send(b"hi").unwrap();
            let mut b = [0u8; 16];
            let (_, from) = server.recv_from(&mut b).unwrap();
            let big = vec![7u8; 60_000];
            server.send_to(&big, from).unwrap();
            let mut rx = BotRx::default();
            let mut ready = sock.readable().await.unwrap();
            let n = ready.recv(&mut rx).unwrap();
            assert_eq!(n, 1);
            assert_eq!(rx.truncated(n), (0, 0));
            assert_eq!(rx.datagrams(n).next().map(<[u8]>::len), Some(60_000));
        });
    }
}
