//! A reference server's UDP socket: one socket for every client, created with large buffers,
//! with batched receive through quinn-udp (recvmmsg and GRO on Linux) and batched send, on a
//! tokio socket.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState, BATCH_SIZE};
use tokio::io::Interest;

use super::set_big_buffers;

/// Largest coalesced receive (GRO can glue datagrams of one sender into 64 KiB).
const RX_BUF: usize = 64 * 1024;

/// A tokio UDP socket with its quinn-udp state.
pub struct Socket {
    pub io: tokio::net::UdpSocket,
    pub state: UdpSocketState,
}

impl Socket {
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

/// Datagrams a server sends per `sendmmsg` call.
pub const SEND_BATCH: usize = 64;

/// Outgoing datagrams to many peers, sent with one `sendmmsg` per batch: a reference server
/// sends one snapshot to every client each tick, and a syscall per datagram doubled its cost.
pub struct TxBatch {
    bufs: Box<[[u8; crate::protocol::MAX_DATAGRAM]; SEND_BATCH]>,
    lens: [usize; SEND_BATCH],
    addrs: Vec<socket2::SockAddr>,
}

impl Default for TxBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl TxBatch {
    pub fn new() -> Self {
        Self {
            bufs: Box::new([[0; crate::protocol::MAX_DATAGRAM]; SEND_BATCH]),
            lens: [0; SEND_BATCH],
            addrs: Vec::with_capacity(SEND_BATCH),
        }
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.addrs.len() == SEND_BATCH
    }

    /// The buffer for the next datagram; commit it with [`TxBatch::push`].
    pub fn next_buf(&mut self) -> &mut [u8] {
        let i = self.addrs.len().min(SEND_BATCH - 1);
        &mut self.bufs[i]
    }

    pub fn push(&mut self, to: SocketAddr, len: usize) {
        if self.addrs.len() < SEND_BATCH {
            self.lens[self.addrs.len()] = len;
            self.addrs.push(socket2::SockAddr::from(to));
        }
    }

    /// Send everything queued, waiting for socket buffer room when needed. A datagram the
    /// kernel rejects (a departed client) is skipped.
    pub async fn flush(&mut self, sock: &Socket) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut sent = 0;
        while sent < self.addrs.len() {
            let count = self.addrs.len() - sent;
            let mut iovs: [libc::iovec; SEND_BATCH] = std::array::from_fn(|_| libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            });
            // SAFETY: an all-zero mmsghdr is a valid empty header.
            let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
            for i in 0..count {
                let j = sent + i;
                iovs[i].iov_base = self.bufs[j].as_mut_ptr().cast();
                iovs[i].iov_len = self.lens[j];
                hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
                hdrs[i].msg_hdr.msg_iovlen = 1;
                hdrs[i].msg_hdr.msg_name = self.addrs[j].as_ptr() as *mut libc::c_void;
                hdrs[i].msg_hdr.msg_namelen = self.addrs[j].len();
            }
            let fd = sock.io.as_raw_fd();
            let r = sock.io.try_io(Interest::WRITABLE, || {
                // SAFETY: `count` headers, each pointing at a live iovec, buffer and address.
                let n = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), count as libc::c_uint, 0) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(n) => sent += n.max(1),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => sock.io.writable().await?,
                // The first datagram failed for its own reason: skip it, keep the rest.
                Err(_) => sent += 1,
            }
        }
        self.addrs.clear();
        Ok(())
    }
}
