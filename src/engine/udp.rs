//! UDP sockets for the engine: creation with sane buffers, and batched receive through
//! quinn-udp (recvmmsg and GRO on Linux) on tokio sockets.

use std::io::{self, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState, BATCH_SIZE};
use tokio::io::Interest;

/// Largest coalesced receive (GRO can glue datagrams of one sender into 64 KiB).
const RX_BUF: usize = 64 * 1024;

/// A tokio UDP socket with its quinn-udp state.
pub struct Socket {
    pub io: tokio::net::UdpSocket,
    pub state: UdpSocketState,
}

impl Socket {
    /// Bind an ephemeral local port of the right family and connect it to `peer`, so the
    /// kernel filters strangers and reports ICMP errors (a closed port) as ECONNREFUSED.
    pub fn connect_to(peer: SocketAddr) -> io::Result<Self> {
        let local: SocketAddr = match peer {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let std = std::net::UdpSocket::bind(local)?;
        std.connect(peer)?;
        Self::from_std(std)
    }

    /// Bind a listening socket (reference servers) with large buffers: a server sends a
    /// burst of one snapshot per client every tick.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let std = std::net::UdpSocket::bind(addr)?;
        set_big_buffers(&std, 8 * 1024 * 1024);
        Self::from_std(std)
    }

    fn from_std(std: std::net::UdpSocket) -> io::Result<Self> {
        std.set_nonblocking(true)?;
        let state = UdpSocketState::new(UdpSockRef::from(&std))?;
        let io = tokio::net::UdpSocket::from_std(std)?;
        Ok(Self { io, state })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// Send one datagram now; never waits. `WouldBlock` means the socket buffer is full.
    pub fn try_send(&self, to: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        let t = quinn_udp::Transmit {
            destination: to,
            ecn: None,
            contents: bytes,
            segment_size: None,
            src_ip: None,
        };
        self.state.try_send(UdpSockRef::from(&self.io), &t)
    }

    /// Send one datagram, waiting for buffer room if the socket is full (servers: a
    /// reference server should not invent loss).
    pub async fn send(&self, to: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        let t = quinn_udp::Transmit {
            destination: to,
            ecn: None,
            contents: bytes,
            segment_size: None,
            src_ip: None,
        };
        loop {
            self.io.writable().await?;
            match self.io.try_io(Interest::WRITABLE, || {
                self.state.try_send(UdpSockRef::from(&self.io), &t)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    }

    /// Receive what is queued (up to a batch) without waiting. `Ok(0)` never happens:
    /// nothing queued is `WouldBlock`, which also clears tokio's readiness.
    pub fn try_recv_batch(&self, rx: &mut RxBatch) -> io::Result<usize> {
        let RxBatch { bufs, metas } = rx;
        self.io.try_io(Interest::READABLE, || {
            let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] = bufs_as_slices(bufs);
            self.state
                .recv(UdpSockRef::from(&self.io), &mut iovs, metas)
        })
    }
}

fn bufs_as_slices(bufs: &mut [Box<[u8]>; BATCH_SIZE]) -> [IoSliceMut<'_>; BATCH_SIZE] {
    bufs.each_mut().map(|b| IoSliceMut::new(&mut b[..]))
}

/// Receive buffers shared by every socket of a worker (allocated once).
pub struct RxBatch {
    bufs: [Box<[u8]>; BATCH_SIZE],
    metas: [RecvMeta; BATCH_SIZE],
}

impl Default for RxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RxBatch {
    pub fn new() -> Self {
        Self {
            bufs: std::array::from_fn(|_| vec![0u8; RX_BUF].into_boxed_slice()),
            metas: [RecvMeta::default(); BATCH_SIZE],
        }
    }

    /// Every datagram of the first `n` entries, splitting GRO-coalesced buffers at `stride`.
    pub fn datagrams(&self, n: usize) -> impl Iterator<Item = (SocketAddr, &[u8])> + '_ {
        self.metas
            .iter()
            .zip(self.bufs.iter())
            .take(n)
            .flat_map(|(m, b)| {
                let stride = if m.stride == 0 {
                    m.len.max(1)
                } else {
                    m.stride
                };
                b[..m.len.min(b.len())]
                    .chunks(stride)
                    .map(move |d| (m.addr, d))
            })
    }
}

/// Ask for large socket buffers; as root the kernel cap (rmem_max) can be bypassed.
fn set_big_buffers(sock: &std::net::UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let v = bytes as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        // SAFETY: fd is a live socket owned by `sock`; the option value is a c_int.
        let ok = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                force,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        if !ok {
            // SAFETY: as above.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    plain,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

/// A short stable name for an I/O error, for counters.
pub fn error_name(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::WouldBlock => "would_block",
        io::ErrorKind::ConnectionRefused => "connection_refused",
        io::ErrorKind::AddrNotAvailable => "addr_not_available",
        io::ErrorKind::PermissionDenied => "permission_denied",
        io::ErrorKind::NetworkUnreachable => "network_unreachable",
        io::ErrorKind::HostUnreachable => "host_unreachable",
        _ if e.raw_os_error() == Some(libc::EMFILE) => "too_many_open_files",
        _ if e.raw_os_error() == Some(libc::ENOBUFS) => "no_buffer_space",
        _ => "other",
    }
}
