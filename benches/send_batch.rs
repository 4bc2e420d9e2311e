//! How many datagrams a second one thread puts on the wire over N connected UDP sockets (one
//! per bot, as raw-UDP bots have): a plain `send()` per datagram, against io_uring batches of
//! sends on different sockets per `io_uring_enter`. This measurement chose the engine's
//! batched send path (docs/guide/performance.md).
//!
//! `cargo bench --bench send_batch -- [SOCKETS] [SECONDS_PER_MODE] [HOSTS]` (defaults 3000,
//! 1.5 and 60). The sink is one socket on another thread that reads everything with
//! `recvmmsg`; the line per mode gives datagrams sent per second and the ratio to the plain
//! loop.
//!
//! A second table is ENet's case: HOSTS sockets (3,000 bots at 50 per socket), each flush of
//! a host putting K datagrams on its one socket. It weighs `sendmmsg` per host flush (K
//! datagrams, one socket, one call) against the same io_uring batch across hosts, for the K a
//! flush really has; the engine's choice for ENet (src/engine/io/enet.rs) rests on it.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

const PAYLOAD: [u8; 40] = [7u8; 40];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(3000);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1.5);
    raise_nofile(n as u64 + 64);
    let sink = UdpSocket::bind("127.0.0.1:0").expect("sink");
    let addr = sink.local_addr().expect("sink address");
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, got) = (stop.clone(), got.clone());
        sink.set_read_timeout(Some(Duration::from_millis(50))).ok();
        std::thread::spawn(move || drain(&sink, &stop, &got))
    };
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").expect("bot socket");
            s.connect(addr).expect("connect");
            s.set_nonblocking(true).expect("nonblocking");
            s
        })
        .collect();
    let fds: Vec<i32> = socks.iter().map(AsRawFd::as_raw_fd).collect();
    let slice = Duration::from_secs_f64(secs / ROUNDS as f64);
    println!(
        "# {n} connected UDP sockets -> 1 sink (read by another thread); {ROUNDS} interleaved \
         slices per mode, {secs} s per mode in all"
    );
    println!("# CPU ns/datagram is the sending thread's CPU time (kernel included) per datagram:");
    println!(
        "# on a busy machine it is the figure to compare; wall-clock rates move with the load."
    );
    let modes: [(&str, usize, bool); 5] = [
        ("plain send() loop", 0, false),
        ("io_uring batch 32", 32, false),
        ("io_uring batch 128", 128, false),
        ("io_uring batch 512", 512, false),
        ("io_uring batch 128, registered files", 128, true),
    ];
    let mut rings: Vec<Option<IoUring>> = modes
        .iter()
        .map(|&(_, batch, fixed)| {
            (batch > 0)
                .then(|| ring(&fds, batch, fixed))
                .and_then(|r| match r {
                    Ok(r) => Some(r),
                    Err(e) => {
                        println!("io_uring batch {batch}: unavailable ({e})");
                        None
                    }
                })
        })
        .collect();
    let mut totals = [Outcome::default(); 5];
    for _ in 0..ROUNDS {
        for (i, &(_, batch, fixed)) in modes.iter().enumerate() {
            let o = match (&mut rings[i], batch) {
                (_, 0) => plain(&fds, slice),
                (Some(r), _) => uring(r, &fds, slice, batch, fixed),
                (None, _) => continue,
            };
            totals[i].add(o);
        }
    }
    let base = totals[0].ns_per_datagram();
    for (i, &(name, _, _)) in modes.iter().enumerate() {
        let t = totals[i];
        if t.sent + t.errors == 0 {
            continue;
        }
        println!(
            "{name:<38} {:>7.0} CPU ns/datagram ({:.2}x plain's cost)  {:>9.0} datagrams/s wall  {:>6.1} datagrams/syscall  errors {}",
            t.ns_per_datagram(),
            t.ns_per_datagram() / base,
            t.sent as f64 / t.wall,
            (t.sent + t.errors) as f64 / t.calls.max(1) as f64,
            t.errors,
        );
    }
    let hosts: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(60);
    enet_hosts(&fds[..hosts.min(fds.len())], secs);
    stop.store(true, Ordering::Relaxed);
    let _ = reader.join();
    println!("# sink received {}", got.load(Ordering::Relaxed));
}

const ROUNDS: usize = 10;

/// Datagrams per host flush weighed in the ENet table.
const PER_FLUSH: [usize; 4] = [1, 3, 10, 50];

/// ENet's case: each "flush" puts `k` datagrams on one host socket. Plain `send()` per
/// datagram, one `sendmmsg` per flush, one io_uring call per flush, and io_uring batches of
/// 128 across the hosts' flushes.
fn enet_hosts(fds: &[i32], secs: f64) {
    println!(
        "# ENet: {} host sockets, K datagrams per host flush; CPU ns/datagram, interleaved as above",
        fds.len()
    );
    let Ok(mut ring) = ring(fds, 128, false) else {
        println!("io_uring unavailable: the ENet table is left out");
        return;
    };
    let slice = Duration::from_secs_f64(secs / ROUNDS as f64);
    for k in PER_FLUSH {
        let mut t = [Outcome::default(); 4];
        for _ in 0..ROUNDS {
            t[0].add(plain_k(fds, slice, k));
            t[1].add(sendmmsg_k(fds, slice, k));
            t[2].add(uring_k(&mut ring, fds, slice, k, false));
            t[3].add(uring_k(&mut ring, fds, slice, k, true));
        }
        let base = t[0].ns_per_datagram();
        let r = |o: &Outcome| o.ns_per_datagram() / base;
        println!(
            "K={k:<3} send() {base:>5.0} | sendmmsg per flush {:>5.0} ({:.2}x) | io_uring per flush {:>5.0} ({:.2}x) | io_uring across hosts {:>5.0} ({:.2}x, {:.0}/call) | errors {}",
            t[1].ns_per_datagram(),
            r(&t[1]),
            t[2].ns_per_datagram(),
            r(&t[2]),
            t[3].ns_per_datagram(),
            r(&t[3]),
            (t[3].sent + t[3].errors) as f64 / t[3].calls.max(1) as f64,
            t.iter().map(|o| o.errors).sum::<u64>(),
        );
    }
}

fn plain_k(fds: &[i32], dur: Duration, k: usize) -> Outcome {
    let mut o = Outcome::default();
    let (start, cpu) = (Instant::now(), thread_cpu_ns());
    while start.elapsed() < dur {
        for &fd in fds {
            for _ in 0..k {
                // SAFETY: fd is a live socket; the buffer outlives the call.
                let r = unsafe {
                    libc::send(
                        fd,
                        PAYLOAD.as_ptr().cast(),
                        PAYLOAD.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                o.calls += 1;
                if r < 0 {
                    o.errors += 1
                } else {
                    o.sent += 1
                }
            }
        }
    }
    o.cpu_ns = thread_cpu_ns() - cpu;
    o.wall = start.elapsed().as_secs_f64();
    o
}

fn sendmmsg_k(fds: &[i32], dur: Duration, k: usize) -> Outcome {
    let mut o = Outcome::default();
    let mut iov = libc::iovec {
        iov_base: PAYLOAD.as_ptr() as *mut _,
        iov_len: PAYLOAD.len(),
    };
    // SAFETY: zeroed mmsghdrs are valid; each points at the one iovec (connected sockets
    // need no address).
    let mut hdrs: Vec<libc::mmsghdr> = (0..k).map(|_| unsafe { std::mem::zeroed() }).collect();
    for h in &mut hdrs {
        h.msg_hdr.msg_iov = &mut iov;
        h.msg_hdr.msg_iovlen = 1;
    }
    let (start, cpu) = (Instant::now(), thread_cpu_ns());
    while start.elapsed() < dur {
        for &fd in fds {
            // SAFETY: k live headers over a static payload.
            let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), k as u32, libc::MSG_DONTWAIT) };
            o.calls += 1;
            if r < 0 {
                o.errors += k as u64
            } else {
                o.sent += r as u64;
                o.errors += (k - r as usize) as u64;
            }
        }
    }
    o.cpu_ns = thread_cpu_ns() - cpu;
    o.wall = start.elapsed().as_secs_f64();
    o
}

/// One `io_uring_enter` for the `n` sends queued on `ring`, then their completions counted
/// (a failed submit counts all `n` as errors).
fn submit_and_reap(ring: &mut IoUring, n: usize, o: &mut Outcome) {
    if n == 0 {
        return;
    }
    if ring.submit_and_wait(n).is_err() {
        o.errors += n as u64;
    }
    o.calls += 1;
    for cqe in ring.completion() {
        if cqe.result() < 0 {
            o.errors += 1
        } else {
            o.sent += 1
        }
    }
}

/// `across`: batches of up to 128 over the hosts' flushes; else one call per host flush.
fn uring_k(ring: &mut IoUring, fds: &[i32], dur: Duration, k: usize, across: bool) -> Outcome {
    let mut o = Outcome::default();
    let mut queued = 0usize;
    let (start, cpu) = (Instant::now(), thread_cpu_ns());
    let submit = |ring: &mut IoUring, queued: &mut usize, o: &mut Outcome| {
        submit_and_reap(ring, *queued, o);
        *queued = 0;
    };
    while start.elapsed() < dur {
        for &fd in fds {
            for _ in 0..k {
                if queued == 128 {
                    submit(ring, &mut queued, &mut o);
                }
                let e = opcode::Send::new(types::Fd(fd), PAYLOAD.as_ptr(), PAYLOAD.len() as u32)
                    .flags(libc::MSG_DONTWAIT)
                    .build();
                // SAFETY: the payload is static; the ring holds 128 entries.
                if unsafe { ring.submission().push(&e) }.is_err() {
                    o.errors += 1;
                } else {
                    queued += 1;
                }
            }
            if !across {
                submit(ring, &mut queued, &mut o);
            }
        }
        submit(ring, &mut queued, &mut o);
    }
    o.cpu_ns = thread_cpu_ns() - cpu;
    o.wall = start.elapsed().as_secs_f64();
    o
}

#[derive(Default, Clone, Copy)]
struct Outcome {
    sent: u64,
    errors: u64,
    calls: u64,
    wall: f64,
    cpu_ns: u64,
}

impl Outcome {
    fn add(&mut self, o: Outcome) {
        self.sent += o.sent;
        self.errors += o.errors;
        self.calls += o.calls;
        self.wall += o.wall;
        self.cpu_ns += o.cpu_ns;
    }
    fn ns_per_datagram(&self) -> f64 {
        self.cpu_ns as f64 / (self.sent + self.errors).max(1) as f64
    }
}

fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain clock read into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One `send()` per datagram: the loop the swarm's batches are measured against.
fn plain(fds: &[i32], dur: Duration) -> Outcome {
    plain_k(fds, dur, 1)
}

fn ring(fds: &[i32], batch: usize, fixed: bool) -> std::io::Result<IoUring> {
    let ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .setup_cqsize(batch as u32 * 2)
        .build(batch as u32)?;
    if fixed {
        ring.submitter().register_files(fds)?;
    }
    Ok(ring)
}

fn uring(ring: &mut IoUring, fds: &[i32], dur: Duration, batch: usize, fixed: bool) -> Outcome {
    let mut o = Outcome::default();
    let (start, cpu) = (Instant::now(), thread_cpu_ns());
    while start.elapsed() < dur {
        for (c, chunk) in fds.chunks(batch).enumerate() {
            {
                let mut sq = ring.submission();
                for (i, &fd) in chunk.iter().enumerate() {
                    let e = if fixed {
                        let idx = (c * batch + i) as u32;
                        opcode::Send::new(types::Fixed(idx), PAYLOAD.as_ptr(), PAYLOAD.len() as u32)
                    } else {
                        opcode::Send::new(types::Fd(fd), PAYLOAD.as_ptr(), PAYLOAD.len() as u32)
                    }
                    .flags(libc::MSG_DONTWAIT)
                    .build();
                    // SAFETY: the payload is static; the ring holds `batch` entries.
                    if unsafe { sq.push(&e) }.is_err() {
                        o.errors += 1;
                    }
                }
            }
            submit_and_reap(ring, chunk.len(), &mut o);
        }
    }
    o.cpu_ns = thread_cpu_ns() - cpu;
    o.wall = start.elapsed().as_secs_f64();
    o
}

fn drain(sink: &UdpSocket, stop: &AtomicBool, got: &AtomicU64) {
    const B: usize = 64;
    let mut bufs = vec![[0u8; 64]; B];
    while !stop.load(Ordering::Relaxed) {
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: zeroed mmsghdrs are valid; each points at a live iovec.
        let mut hdrs: Vec<libc::mmsghdr> = (0..B).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (h, iov) in hdrs.iter_mut().zip(iovs.iter_mut()) {
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
        }
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        // SAFETY: as above; blocking with a timeout.
        let r = unsafe {
            libc::recvmmsg(
                sink.as_raw_fd(),
                hdrs.as_mut_ptr(),
                B as u32,
                libc::MSG_WAITFORONE,
                &mut ts,
            )
        };
        if r > 0 {
            got.fetch_add(r as u64, Ordering::Relaxed);
        }
    }
}

fn raise_nofile(want: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain get/set of this process's limit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < want {
            l.rlim_cur = want.min(l.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}
