//! Batched sends across the bot sockets of one worker: many datagrams, each on its own
//! connected socket, handed to the kernel with one `io_uring_enter` instead of one `send()`
//! each.
//!
//! Raw-UDP bots cannot share a socket (servers key clients by source address), so `sendmmsg`
//! and GSO, which batch datagrams of *one* socket, do not apply. io_uring takes send requests
//! on any number of sockets per system call. Measured on a 2-core machine over 3,000
//! connected loopback sockets (`benches/send_batch.rs`), batches of 128 cut the cost per
//! datagram well below a `send()` loop's; see docs/measurements/send-path.md for the figures.
//! ENet hosts (up to `bots_per_socket` bots on one socket) use the same batch: measured, it
//! beat `sendmmsg` per host flush (see `super::enet`). A submission of one send goes out as
//! a plain `send()`: an `io_uring_enter` carrying one send measured 1.18x the cost of the
//! `send()` it replaces.
//!
//! Each send carries `MSG_DONTWAIT`: the kernel tries it at once, inside the submitting
//! `io_uring_enter`, in submission order, and a full socket buffer comes back as `EAGAIN`
//! (counted `would_block`, the datagram dropped) exactly as a plain non-blocking `send()`
//! reports it. Nothing is ever parked in the kernel, so a bot's datagrams leave in the order
//! it queued them and the worker never waits.
//!
//! Where io_uring is missing or refused (an old kernel, `io_uring_disabled`, a seccomp
//! profile that answers `ENOSYS`/`EPERM`) the worker keeps the plain path: one `send()` per
//! datagram. `TICKSWARM_IO=plain` forces it (see [`IoMode`]).
//!
//! Allocation-free once warm: the ring, the payload arena and the table of pending sends are
//! the worker's, sized at start; the table grows only to the largest wake-up's sends.

use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;

use io_uring::{opcode, types, IoUring};

use super::socket::bot::BotSocket;
use crate::metrics::{Recorder, SendIo};

/// Sends per `io_uring_enter`: past 128 the measured gain per datagram is small, while the
/// ring and arena grow (see the module docs).
pub const BATCH: usize = 128;

/// Payload bytes held for one submission. A batch is submitted early when the next datagram
/// would not fit; a datagram longer than this is sent on its own at once.
const ARENA: usize = 256 * 1024;

/// Which send path the environment asks for (`TICKSWARM_IO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// io_uring where the kernel gives it, else plain (the default; `auto`, unset).
    Auto,
    /// One `send()` per datagram, as before batching (`plain`, `send`, `off`).
    Plain,
}

impl IoMode {
    /// The environment variable that chooses the path.
    pub const VAR: &'static str = "TICKSWARM_IO";

    /// From the variable's value; anything unknown is [`IoMode::Auto`].
    pub fn parse(v: Option<&str>) -> Self {
        match v.map(str::trim) {
            Some("plain" | "send" | "off") => IoMode::Plain,
            _ => IoMode::Auto,
        }
    }

    pub fn from_env() -> Self {
        Self::parse(std::env::var(Self::VAR).ok().as_deref())
    }
}

/// The send path a worker ended up with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendPath {
    /// io_uring, batches of up to [`BATCH`] sends per system call.
    Uring,
    /// One `send()` per datagram: forced by `TICKSWARM_IO`, or io_uring refused (the error).
    Plain { refused: Option<String> },
}

impl SendPath {
    /// One line for the plan and the console.
    pub fn describe(&self) -> String {
        match self {
            SendPath::Uring => format!("io_uring, up to {BATCH} sends per system call"),
            SendPath::Plain { refused: None } => {
                format!("send() per datagram ({}=plain)", IoMode::VAR)
            }
            SendPath::Plain { refused: Some(why) } => {
                format!("send() per datagram (io_uring unavailable: {why})")
            }
        }
    }

    /// The path this machine gives for `mode`, by building (and dropping) a ring.
    pub fn probe(mode: IoMode) -> SendPath {
        Self::choose(mode, || UringBatch::new().map(drop))
    }

    /// [`SendPath::probe`] with the ring's construction injected (tests refuse it).
    pub fn choose(mode: IoMode, ring: impl FnOnce() -> io::Result<()>) -> SendPath {
        match mode {
            IoMode::Plain => SendPath::Plain { refused: None },
            IoMode::Auto => match ring() {
                Ok(()) => SendPath::Uring,
                Err(e) => SendPath::Plain {
                    refused: Some(refusal(&e)),
                },
            },
        }
    }
}

/// How one worker's bots' datagrams reach the kernel, for every transport that sends on
/// bot sockets (raw UDP, ENet): through the worker's [`UringBatch`] where the kernel gives
/// io_uring, else one `send()` each; the path is counted in `send_io` once per worker.
pub struct WorkerSends {
    /// The worker's io_uring; `None`: one `send()` per datagram.
    batch: Option<UringBatch>,
    /// Which path, and why (the plan and summary say it).
    path: SendPath,
    /// The path is counted (`send_io.workers_*`) once, at the worker's first submit.
    counted: bool,
}

impl Default for WorkerSends {
    /// Plain sends (a transport built without [`WorkerSends::new`]).
    fn default() -> Self {
        Self {
            batch: None,
            path: SendPath::Plain { refused: None },
            counted: false,
        }
    }
}

impl WorkerSends {
    /// The path `mode` asks for, with the ring built by `ring` (tests inject a refusal).
    pub fn new(mode: IoMode, ring: impl FnOnce() -> io::Result<UringBatch>) -> Self {
        let mut batch = None;
        let path = SendPath::choose(mode, || {
            batch = Some(ring()?);
            Ok(())
        });
        Self {
            batch,
            path,
            counted: false,
        }
    }

    /// The path this worker uses.
    pub fn path(&self) -> SendPath {
        self.path.clone()
    }

    /// One datagram on `sock`, counted in group `group`'s recorder (`rec` is that recorder):
    /// its bytes on the wire and, when `message` (raw UDP: one message a datagram), one
    /// message sent; a transport that counted its messages at queueing (ENet) says `false`.
    /// Batched, it leaves and is counted at [`WorkerSends::submit`]; plain, now, one call.
    pub fn send(
        &mut self,
        sock: &Rc<BotSocket>,
        group: usize,
        bytes: &[u8],
        rec: &mut Recorder,
        message: bool,
    ) {
        match &mut self.batch {
            Some(b) => b.queue(sock, group, bytes, message),
            None => {
                rec.send_io.call(1);
                if sock.send_counted(bytes, rec) && message {
                    rec.datagram_up(bytes.len());
                }
            }
        }
    }

    /// [`WorkerSends::send`] by descriptor, for a transport that keeps its sockets' `fd`s
    /// beside its own per-bot state (raw UDP): no visit to the socket's allocation (a cache
    /// miss per datagram with thousands of bots) and no reference count taken. The caller
    /// keeps the socket open until the next [`WorkerSends::submit`] has returned.
    ///
    /// (Registering the sockets in the ring's file table, so the kernel skips its descriptor
    /// look-up, was measured and dropped: the table's entries are allocated apart, and the
    /// look-up's cache miss only moved there, one more per send.)
    pub fn send_fd(
        &mut self,
        fd: RawFd,
        group: usize,
        bytes: &[u8],
        rec: &mut Recorder,
        message: bool,
    ) {
        match &mut self.batch {
            Some(b) => {
                b.queue_fd(fd, group, bytes, message);
            }
            None => {
                rec.send_io.call(1);
                let r = send_now(fd, bytes);
                count_one(rec, bytes.len(), message, Some(r));
            }
        }
    }

    /// End of a wake-up: everything queued goes to the kernel and is counted in its group's
    /// recorder of `recs`.
    pub fn submit(&mut self, recs: &mut [Recorder]) {
        if !self.counted {
            if let Some(rec) = recs.first_mut() {
                self.counted = true;
                match self.batch {
                    Some(_) => rec.send_io.workers_uring += 1,
                    None => rec.send_io.workers_plain += 1,
                }
            }
        }
        if let Some(b) = &mut self.batch {
            b.flush(recs);
        }
    }
}

/// Why io_uring was refused, in words a user can act on.
fn refusal(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring (ENOSYS)".into(),
        Some(libc::EPERM) => {
            "io_uring not permitted (EPERM: kernel.io_uring_disabled or a seccomp profile)".into()
        }
        _ => e.to_string(),
    }
}

/// A send waiting for its outcome to be counted.
#[derive(Clone, Copy)]
struct Pending {
    /// The recorder (group) the datagram is counted in.
    group: u32,
    len: u32,
    /// The datagram is also one protocol message (raw UDP: counted `datagram_up` when sent);
    /// `false` for a transport that counted its messages when they were queued (ENet).
    message: bool,
    /// The kernel's answer: bytes sent, or `-errno`; `None` until reaped.
    result: Option<i32>,
}

/// A send queued for the next submission: its payload is `arena[off..off + len]`.
#[derive(Clone, Copy)]
struct Queued {
    fd: RawFd,
    off: usize,
    len: usize,
    /// Its entry in `pending` (the request's `user_data`).
    idx: usize,
}

/// One worker's io_uring and what it has queued since the last [`UringBatch::flush`].
pub struct UringBatch {
    ring: IoUring,
    /// Payload copies of the queued sends (the caller's buffer is reused at once). Never
    /// reallocated: the kernel reads from here until the batch is reaped.
    arena: Vec<u8>,
    /// Sockets of the queued sends, kept open until they are reaped.
    socks: Vec<Rc<BotSocket>>,
    /// Every send since the last flush, in order; the index is the request's `user_data`.
    pending: Vec<Pending>,
    /// Sends not yet handed to the kernel, in order. Their ring entries are written at
    /// submission, so a submission of one send can go out as a plain `send()` instead.
    queued: Vec<Queued>,
    io: SendIo,
}

impl UringBatch {
    /// A ring of [`BATCH`] entries, after checking the kernel can send through it (a kernel
    /// or seccomp profile without io_uring fails here, not on the first send).
    pub fn new() -> io::Result<Self> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_cqsize(2 * BATCH as u32)
            .build(BATCH as u32)?;
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Send::CODE) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel's io_uring has no send operation",
            ));
        }
        Ok(Self {
            ring,
            arena: Vec::with_capacity(ARENA),
            socks: Vec::with_capacity(BATCH),
            pending: Vec::with_capacity(4 * BATCH),
            queued: Vec::with_capacity(BATCH),
            io: SendIo::default(),
        })
    }

    /// Queue one datagram on `sock`, counted in group `group`'s recorder at the next flush:
    /// its bytes on the wire and, when `message` (raw UDP: one message a datagram), one
    /// message sent ([`WorkerSends::send`] says which).
    fn queue(&mut self, sock: &Rc<BotSocket>, group: usize, bytes: &[u8], message: bool) {
        if self.queue_fd(sock.raw_fd(), group, bytes, message) {
            self.socks.push(sock.clone());
        }
    }

    /// Queue one datagram on `fd` (whose socket the caller keeps open until the next flush):
    /// [`UringBatch::queue`] without holding the socket. `true` if it waits in the batch,
    /// `false` if it was sent at once.
    fn queue_fd(&mut self, fd: RawFd, group: usize, bytes: &[u8], message: bool) -> bool {
        if self.queued.len() == BATCH || self.arena.len() + bytes.len() > self.arena.capacity() {
            self.submit();
        }
        let idx = self.pending.len();
        self.pending.push(Pending {
            group: group as u32,
            len: bytes.len() as u32,
            message,
            result: None,
        });
        if bytes.len() > self.arena.capacity() {
            // Larger than the whole arena (no bot sends such): sent at once, after what was
            // queued before it (submitted above).
            self.io.call(1);
            let r = send_now(fd, bytes);
            if let Some(p) = self.pending.get_mut(idx) {
                p.result = Some(r);
            }
            return false;
        }
        let off = self.arena.len();
        self.arena.extend_from_slice(bytes);
        self.queued.push(Queued {
            fd,
            off,
            len: bytes.len(),
            idx,
        });
        true
    }

    /// Hand every queued send to the kernel and collect every answer. One send alone goes
    /// out as a plain `send()`: measured, an `io_uring_enter` carrying a single send costs
    /// more than the `send()` it replaces (benches/send_batch.rs).
    fn submit(&mut self) {
        let n = self.queued.len();
        if n == 0 {
            return;
        }
        self.io.call(n);
        if let [q] = self.queued[..] {
            let r = send_now(q.fd, &self.arena[q.off..q.off + q.len]);
            if let Some(p) = self.pending.get_mut(q.idx) {
                p.result = Some(r);
            }
        } else {
            self.submit_ring();
        }
        self.queued.clear();
        self.arena.clear();
        self.socks.clear();
    }

    /// The queued sends through the ring: one `io_uring_enter`, in queue order.
    fn submit_ring(&mut self) {
        let mut outstanding = 0;
        {
            let mut sq = self.ring.submission();
            for q in &self.queued {
                // The arena is never reallocated (capacity checked at queueing), so the
                // payload stays put until the arena is cleared after the reap below.
                let ptr = self.arena[q.off..q.off + q.len].as_ptr();
                let entry = opcode::Send::new(types::Fd(q.fd), ptr, q.len as u32)
                    .flags(libc::MSG_DONTWAIT)
                    .build()
                    .user_data(q.idx as u64);
                // SAFETY: the payload (the arena) and the socket (`socks`) stay alive until
                // every request is reaped, below.
                if unsafe { sq.push(&entry) }.is_ok() {
                    outstanding += 1;
                } else if let Some(p) = self.pending.get_mut(q.idx) {
                    // Cannot happen (the ring holds BATCH and is submitted at BATCH sends);
                    // counted as a failed send rather than lost.
                    p.result = Some(-libc::ENOBUFS);
                }
            }
        }
        while outstanding > 0 {
            // MSG_DONTWAIT sends complete inside this call; the wait is for the rare one the
            // kernel still hands to a worker thread.
            match self.ring.submit_and_wait(outstanding) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    // The ring itself failed: every unanswered send counts as failed.
                    let code = -e.raw_os_error().unwrap_or(libc::EIO);
                    for p in self.pending.iter_mut().filter(|p| p.result.is_none()) {
                        p.result = Some(code);
                    }
                    break;
                }
            }
            for cqe in self.ring.completion() {
                if let Some(p) = self.pending.get_mut(cqe.user_data() as usize) {
                    if p.result.is_none() {
                        outstanding = outstanding.saturating_sub(1);
                    }
                    p.result = Some(cqe.result());
                }
            }
        }
    }

    /// Submit what is queued and count every send since the last flush in its group's
    /// recorder (`recs[group]`; the batch figures in `recs[0]`): exactly what the plain path
    /// counts, send by send.
    pub fn flush(&mut self, recs: &mut [Recorder]) {
        self.submit();
        let last = recs.len().saturating_sub(1);
        for p in self.pending.drain(..) {
            let Some(rec) = recs.get_mut((p.group as usize).min(last)) else {
                continue;
            };
            count_one(rec, p.len as usize, p.message, p.result);
        }
        if let Some(rec) = recs.first_mut() {
            rec.send_io.merge(&std::mem::take(&mut self.io));
        }
    }

    /// Sends queued or awaiting their count.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Count one send of `len` bytes by the kernel's answer (bytes sent, or `-errno`; `None`:
/// never answered): on the wire and, when `message`, as a message sent; or its error.
fn count_one(rec: &mut Recorder, len: usize, message: bool, result: Option<i32>) {
    match result {
        Some(r) if r >= 0 => {
            rec.wire_up(len);
            if message {
                rec.datagram_up(len);
            }
        }
        Some(r) => {
            let e = io::Error::from_raw_os_error(-r);
            rec.send_errors.add(super::socket::error_name(&e), 1);
        }
        None => rec.send_errors.add("other", 1),
    }
}

/// One non-blocking `send()` on `fd`: the bytes sent, or `-errno` as io_uring answers.
fn send_now(fd: RawFd, bytes: &[u8]) -> i32 {
    // SAFETY: `fd` is a live socket (its owner is held by the caller) and the buffer
    // outlives the call.
    let r = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_DONTWAIT) };
    if r < 0 {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        r as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickswarm_io_plain_forces_the_plain_path_without_trying_io_uring() {
        let mut tried = false;
        let path = SendPath::choose(IoMode::parse(Some("plain")), || {
            tried = true;
            Ok(())
        });
        assert_eq!(path, SendPath::Plain { refused: None });
        assert!(!tried);
        assert_eq!(IoMode::parse(None), IoMode::Auto);
        assert_eq!(IoMode::parse(Some("off")), IoMode::Plain);
    }

    /// A seccomp profile answers io_uring_setup with EPERM, an old kernel with ENOSYS: the
    /// worker falls back and says why.
    #[test]
    fn a_refused_io_uring_falls_back_to_plain_sends_and_says_why() {
        for (errno, words) in [(libc::EPERM, "EPERM"), (libc::ENOSYS, "ENOSYS")] {
            let path = SendPath::choose(IoMode::Auto, || Err(io::Error::from_raw_os_error(errno)));
            match &path {
                SendPath::Plain { refused: Some(why) } => assert!(why.contains(words), "{why}"),
                other => panic!("expected the fallback, got {other:?}"),
            }
            assert!(path.describe().contains("io_uring unavailable"));
        }
    }

    /// A submission of one send is a plain `send()`, of several one `io_uring_enter`: both
    /// counted as one system call, delivered in order, counted on the wire; a transport's
    /// datagram (ENet's, `message: false`) is not also a message sent.
    #[test]
    fn a_lone_send_is_one_plain_send_and_several_are_one_ring_call() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let Ok(mut batch) = UringBatch::new() else {
            return; // This kernel refuses io_uring: nothing of it to test here.
        };
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let sock =
            Rc::new(BotSocket::connect_to(server.local_addr().unwrap(), None, None).unwrap());
        let mut recs = vec![Recorder::new()];
        batch.queue(&sock, 0, b"one", true);
        batch.flush(&mut recs);
        batch.queue(&sock, 0, b"two", false);
        batch.queue(&sock, 0, b"three", false);
        batch.flush(&mut recs);
        assert!(batch.is_empty());
        let mut b = [0u8; 16];
        for want in [&b"one"[..], b"two", b"three"] {
            let n = server.recv(&mut b).expect("every datagram arrives");
            assert_eq!(&b[..n], want, "in the order queued");
        }
        let rec = &recs[0];
        assert_eq!((rec.wire.packets_up, rec.wire.bytes_up), (3, 11));
        assert_eq!(
            rec.packets_up, 1,
            "only the raw-UDP datagram is also a message"
        );
        assert_eq!(
            (
                rec.send_io.syscalls,
                rec.send_io.datagrams,
                rec.send_io.max_batch
            ),
            (2, 3, 2)
        );
    }

    #[test]
    fn send_io_merges_exactly() {
        let mut a = SendIo::default();
        a.call(3);
        a.call(128);
        let mut b = SendIo::default();
        b.call(1);
        b.workers_uring = 1;
        a.merge(&b);
        assert_eq!(
            a,
            SendIo {
                syscalls: 3,
                datagrams: 132,
                max_batch: 128,
                workers_uring: 1,
                workers_plain: 0
            }
        );
    }
}
