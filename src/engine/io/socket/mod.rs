//! The OS sockets under the engine's I/O adapters: a bot's connected socket (`bot`) and a
//! reference server's socket for every client ([`server`]), with what both need (buffer sizes,
//! short names for I/O errors in counters).

pub(crate) mod bot;
pub mod server;

use std::io;
use std::os::fd::AsRawFd;

/// Kernel buffers a socket asks for, each way, in bytes. Linux doubles what it is asked
/// (`man 7 socket`: the extra half pays for its own bookkeeping of each queued datagram), so
/// `getsockopt` reads back twice these figures, and a buffer takes kernel memory only for the
/// datagrams waiting in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketBuffers {
    pub receive: usize,
    pub send: usize,
}

impl SocketBuffers {
    /// The same size both ways.
    pub fn both(bytes: usize) -> Self {
        Self {
            receive: bytes,
            send: bytes,
        }
    }
}

/// Ask for socket buffers of `bytes` each way; as root the kernel cap (rmem_max, wmem_max)
/// is bypassed.
pub(crate) fn set_big_buffers(sock: &std::net::UdpSocket, bytes: usize) {
    set_buffers(sock, SocketBuffers::both(bytes));
}

/// Ask for `b`: the FORCE options first (root, or CAP_NET_ADMIN: past rmem_max), else the
/// plain ones (capped at rmem_max / wmem_max).
pub(crate) fn set_buffers(sock: &std::net::UdpSocket, b: SocketBuffers) {
    let fd = sock.as_raw_fd();
    for (force, plain, bytes) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, b.receive),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, b.send),
    ] {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
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

/// The buffers the kernel granted `sock` (`getsockopt`): twice what was asked, within the
/// caps (see [`SocketBuffers`]).
pub fn granted_buffers(sock: &impl AsRawFd) -> io::Result<SocketBuffers> {
    let get = |opt| -> io::Result<usize> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: fd is a live socket; `v` and `len` are valid for the call.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(usize::try_from(v).unwrap_or(0))
    };
    Ok(SocketBuffers {
        receive: get(libc::SO_RCVBUF)?,
        send: get(libc::SO_SNDBUF)?,
    })
}

/// A short stable name for an I/O error, for counters.
pub fn error_name(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::WouldBlock => "would_block",
        io::ErrorKind::ConnectionRefused => "connection_refused",
        io::ErrorKind::AddrNotAvailable => "address_not_available",
        io::ErrorKind::PermissionDenied => "permission_denied",
        io::ErrorKind::NetworkUnreachable => "network_unreachable",
        io::ErrorKind::HostUnreachable => "host_unreachable",
        _ if e.raw_os_error() == Some(libc::EMFILE) => "too_many_open_files",
        _ if e.raw_os_error() == Some(libc::ENOBUFS) => "no_buffer_space",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small enough to be under the default rmem_max and wmem_max (212,992), so the plain
    /// options grant it without root too; large enough to be above the kernel's minimum.
    const ASKED: SocketBuffers = SocketBuffers {
        receive: 48_000,
        send: 24_000,
    };

    #[test]
    fn a_socket_gets_twice_what_it_asks_for() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_buffers(&sock, ASKED);
        let got = granted_buffers(&sock).unwrap();
        assert_eq!(
            got,
            SocketBuffers {
                receive: 2 * ASKED.receive,
                send: 2 * ASKED.send
            }
        );
    }
}
