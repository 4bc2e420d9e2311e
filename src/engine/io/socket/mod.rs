//! The OS sockets under the engine's I/O adapters: a bot's connected socket (`bot`) and a
//! reference server's socket for every client ([`server`]), with what both need (buffer sizes,
//! short names for I/O errors in counters).

pub(crate) mod bot;
pub mod server;

use std::io;

/// Ask for large socket buffers; as root the kernel cap (rmem_max) can be bypassed.
pub(crate) fn set_big_buffers(sock: &std::net::UdpSocket, bytes: usize) {
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
        io::ErrorKind::AddrNotAvailable => "address_not_available",
        io::ErrorKind::PermissionDenied => "permission_denied",
        io::ErrorKind::NetworkUnreachable => "network_unreachable",
        io::ErrorKind::HostUnreachable => "host_unreachable",
        _ if e.raw_os_error() == Some(libc::EMFILE) => "too_many_open_files",
        _ if e.raw_os_error() == Some(libc::ENOBUFS) => "no_buffer_space",
        _ => "other",
    }
}
