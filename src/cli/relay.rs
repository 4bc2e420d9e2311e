//! `tickswarm relay`: the engine's network model as a standalone user-space UDP relay, so a
//! real game client (or another tool) can sit behind the same conditions as the bots.
//!
//! One thread, one `poll(2)` loop, no root. Each client address gets its own upstream socket
//! (so the server sees distinct clients, as without the relay) and its own pair of links
//! (`up`: client to server, `down`: server to client) seeded from `--seed` and the order in
//! which clients appeared. Datagrams wait in two [`DelayLine`]s whose buffers are reused, so
//! once the relay has seen its busiest moment it allocates nothing per datagram. The lines
//! are bounded by the memory they hold (`--max-held`: buffers' capacity and each datagram's
//! bookkeeping, not payload, which an empty datagram has none of) and by count
//! (`--max-held-datagrams`); a datagram past either is dropped and counted.
//!
//! The relay is no amplifier towards an address that never answers: until a client has
//! shown that it receives, it sends on no more, either way, than came in for it (duplicates
//! included); see [`budget`] for the rule and its limits. Its upstream sockets are connected
//! to the target, so only the target's datagrams come back through them.
//!
//! The client table is bounded (`--max-clients`) and clients idle for `--idle` are forgotten
//! (their upstream socket closed). Ctrl-C or SIGTERM ends the relay with one summary line,
//! which ends with how late the relay itself let held datagrams go (`late_us`, p50/p90/max
//! per direction): near 0 on a machine with CPU to spare; on a starved one, time the link
//! added beyond its configured delay.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::netsim::{DelayLine, Fate, HeldBound, Link, NetworkConditions};

mod budget;

use budget::{Budget, Proof};

/// The largest UDP payload.
const MAX_DATAGRAM: usize = 65_536;
/// Receive and send buffers of the listening socket, which all clients share (as root past
/// the kernel's rmem_max; otherwise capped there).
const LISTEN_BUFFER: usize = 4 << 20;
/// Buffers of each client's upstream socket: one server's answers to one client.
const UPSTREAM_BUFFER: usize = 1 << 20;
/// How often the loop looks at the stop flag and the idle clients when nothing else happens.
const TICK: Duration = Duration::from_millis(50);

#[derive(clap::Args, Debug)]
pub(crate) struct RelayArgs {
    /// Where clients send to, e.g. 127.0.0.1:7000 (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// The server the relay forwards to.
    #[arg(long, value_name = "ADDR")]
    target: SocketAddr,
    /// A YAML file with a `network:` section, as a scenario writes it. Without it the relay
    /// adds no conditions (with `--record`: a recorder between a client and its server).
    #[arg(long, value_name = "FILE", required_unless_present = "record")]
    profile: Option<PathBuf>,
    /// Seed of the links' randomness: the same seed and the same clients in the same order
    /// give the same fates.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most clients at once; a datagram from a new client past it is dropped (counted).
    #[arg(long, default_value_t = 4096)]
    max_clients: usize,
    /// A client that sent and received nothing for this long is forgotten.
    #[arg(long, default_value = "60s", value_parser = crate::scenario::parse_duration)]
    idle: Duration,
    /// Memory each direction may hold for datagrams in flight, in bytes: their buffers'
    /// capacity and each one's bookkeeping, not just their payload. Past it datagrams are
    /// dropped (counted as over the bound).
    #[arg(long, default_value_t = 64 << 20)]
    max_held: usize,
    /// Datagrams each direction may hold at once; past it they are dropped (counted).
    #[arg(long, default_value_t = 65_536)]
    max_held_datagrams: usize,
    /// Write every datagram that reaches the relay, both ways, to this pcapng file (as the
    /// client and the server sent it, before the profile's conditions), for `tickswarm
    /// inspect`: a capture of a real client without root or tcpdump.
    #[arg(long, value_name = "FILE.pcapng")]
    record: Option<PathBuf>,
    /// Largest size of the `--record` file, in bytes; datagrams past it are counted.
    #[arg(long, default_value_t = 1 << 30, requires = "record")]
    record_limit: u64,
}

/// The `--record` file: datagrams between the client's address and the target.
type Recorder = crate::capture::write::PcapngWriter<std::io::BufWriter<std::fs::File>>;

/// The profile file: just a `network:` section (other keys are refused).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    network: NetworkConditions,
}

/// Read and check a profile; errors name the file, line and column.
pub(crate) fn load_profile(path: &Path) -> Result<NetworkConditions, String> {
    let shown = path.display().to_string();
    let text = crate::scenario::read_bounded(path).map_err(|e| format!("{shown}: {e}"))?;
    let p: Profile =
        serde_saphyr::from_str(&text).map_err(|e| crate::scenario::yaml_error(&e, &text, path))?;
    p.network.validate().map_err(|e| format!("{shown}: {e}"))?;
    Ok(p.network)
}

/// What one direction did.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Datagrams that came in.
    r#in: u64,
    /// Datagrams sent on (copies included).
    out: u64,
    /// Lost to the link (outage, loss, its queue) or to the relay's bound.
    dropped: u64,
    duplicated: u64,
    /// Copies the link made that were not sent: the client was not yet proven and had no
    /// budget left (see [`budget`]).
    unproven: u64,
}

struct Client {
    addr: SocketAddr,
    /// Bumped each time a slot is reused, so a held datagram of a forgotten client is not
    /// delivered to the next one in its slot.
    generation: u32,
    upstream: UdpSocket,
    up: Link,
    down: Link,
    /// What may go up and down for this client until it is proven.
    up_budget: Budget,
    down_budget: Budget,
    proof: Proof,
    last_seen: Instant,
}

type Key = (usize, u32);

struct Relay {
    listen: UdpSocket,
    target: SocketAddr,
    up_cond: crate::netsim::Conditions,
    down_cond: crate::netsim::Conditions,
    seed: u64,
    max_clients: usize,
    idle: Duration,
    slots: Vec<Option<Client>>,
    generations: Vec<u32>,
    by_addr: HashMap<SocketAddr, usize>,
    clients_seen: u64,
    up_line: DelayLine<Key>,
    down_line: DelayLine<Key>,
    up: Counts,
    down: Counts,
    refused: u64,
    /// How late each held datagram left after its due time, in µs, per direction: the
    /// relay's own timing, which a starved relay (a loaded machine) adds to the link's delay.
    up_late: hdrhistogram::Histogram<u64>,
    down_late: hdrhistogram::Histogram<u64>,
    /// `--record`'s file.
    record: Option<Recorder>,
    /// The listening address (the server's side in the recording when the client and the
    /// target are of different address families).
    local: SocketAddr,
}

pub(crate) fn cmd_relay(a: &RelayArgs) -> anyhow::Result<u8> {
    let network = match a
        .profile
        .as_deref()
        .map_or_else(|| Ok(NetworkConditions::default()), load_profile)
    {
        Ok(n) => n,
        Err(e) => {
            say!("error: {e}");
            return Ok(super::EXIT_USAGE);
        }
    };
    let listen = match UdpSocket::bind(a.listen) {
        Ok(s) => s,
        Err(e) => {
            say!("error: cannot listen on {}: {e}", a.listen);
            return Ok(super::EXIT_USAGE);
        }
    };
    listen.set_nonblocking(true)?;
    // Every client's datagrams arrive on this one socket: room for bursts while the loop is
    // busy, so the kernel does not drop what the link model should decide about.
    crate::engine::io::socket::set_big_buffers(&listen, LISTEN_BUFFER);
    let (up_cond, down_cond) = network.directions();
    let stop = Arc::new(AtomicBool::new(false));
    install_stop(stop.clone());
    let local = listen.local_addr()?;
    let bound = HeldBound {
        datagrams: a.max_held_datagrams,
        bytes: a.max_held,
    };
    let record = match &a.record {
        Some(path) => {
            let file = match std::fs::File::create(path) {
                Ok(f) => f,
                Err(e) => {
                    say!("error: --record {}: {e}", path.display());
                    return Ok(super::EXIT_USAGE);
                }
            };
            Some(Recorder::new(
                std::io::BufWriter::new(file),
                a.record_limit,
            )?)
        }
        None => None,
    };
    out!("relay: listening on {local}, forwarding to {}", a.target);
    let mut r = Relay {
        listen,
        target: a.target,
        up_cond,
        down_cond,
        seed: a.seed,
        max_clients: a.max_clients.max(1),
        idle: a.idle,
        slots: Vec::new(),
        generations: Vec::new(),
        by_addr: HashMap::new(),
        clients_seen: 0,
        up_line: DelayLine::new(bound),
        down_line: DelayLine::new(bound),
        up: Counts::default(),
        down: Counts::default(),
        refused: 0,
        up_late: crate::metrics::new_histogram(),
        down_late: crate::metrics::new_histogram(),
        record,
        local,
    };
    r.run(&stop)?;
    if let Some(w) = r.record.as_mut() {
        w.flush()?;
        out!(
            "relay: recorded {} datagrams ({} past --record-limit not written)",
            w.datagrams,
            w.over_limit
        );
    }
    out!("{}", r.summary());
    Ok(super::EXIT_PASS)
}

/// Ctrl-C or SIGTERM sets `stop`; the loop sees it within [`TICK`].
fn install_stop(stop: Arc<AtomicBool>) {
    super::signals::on_stop(move |_| stop.store(true, Ordering::Relaxed), false);
}

impl Relay {
    fn run(&mut self, stop: &AtomicBool) -> std::io::Result<()> {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut fd_slot: Vec<usize> = Vec::new();
        let mut next_sweep = Instant::now() + TICK;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut wake = now + TICK;
            for due in [self.up_line.next_due(), self.down_line.next_due()]
                .into_iter()
                .flatten()
            {
                wake = wake.min(due);
            }
            fds.clear();
            fd_slot.clear();
            fds.push(pollfd(self.listen.as_raw_fd()));
            for (i, c) in self.slots.iter().enumerate() {
                if let Some(c) = c {
                    fds.push(pollfd(c.upstream.as_raw_fd()));
                    fd_slot.push(i);
                }
            }
            let wait = wake.saturating_duration_since(now);
            let ts = libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            };
            // ppoll, not poll: its timeout is in nanoseconds, so a datagram leaves when it is
            // due, not up to a millisecond later.
            // SAFETY: `fds` is a valid, initialised array of `fds.len()` pollfd structs and
            // `ts` a valid timespec, both outliving the call; no signal mask is passed.
            let n = unsafe {
                libc::ppoll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    &ts,
                    std::ptr::null(),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n > 0 {
                if fds[0].revents != 0 {
                    self.read_clients(&mut buf);
                }
                for (k, fd) in fds[1..].iter().enumerate() {
                    if fd.revents != 0 {
                        self.read_server(fd_slot[k], &mut buf);
                    }
                }
            }
            self.deliver(Instant::now());
            let now = Instant::now();
            if now >= next_sweep {
                self.forget_idle(now);
                next_sweep = now + TICK;
            }
        }
        Ok(())
    }

    /// Everything waiting on the listening socket: through each client's up link.
    fn read_clients(&mut self, buf: &mut [u8]) {
        loop {
            let (len, from) = match self.listen.recv_from(buf) {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                // An ICMP error from an earlier send (a client gone): not ours to stop on.
                Err(_) => continue,
            };
            let now = Instant::now();
            self.up.r#in += 1;
            self.record(from, true, &buf[..len]);
            let Some(slot) = self.client(from, now) else {
                self.up.dropped += 1;
                self.refused += 1;
                continue;
            };
            let Some(c) = self.slots[slot].as_mut() else {
                continue;
            };
            c.last_seen = now;
            c.proof.heard_from();
            c.up_budget.received(len);
            let fate = c.up.submit(now, len);
            let key = (slot, c.generation);
            let proven = c.proof.proven();
            let held = Hold {
                line: &mut self.up_line,
                counts: &mut self.up,
                budget: &mut c.up_budget,
                proven,
            };
            held.hold(fate, key, &buf[..len]);
        }
    }

    /// Everything waiting on one client's upstream socket: through its down link.
    fn read_server(&mut self, slot: usize, buf: &mut [u8]) {
        loop {
            let Some(c) = self.slots[slot].as_mut() else {
                return;
            };
            let len = match c.upstream.recv(buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(_) => continue,
            };
            let now = Instant::now();
            self.down.r#in += 1;
            let addr = c.addr;
            self.record(addr, false, &buf[..len]);
            let Some(c) = self.slots[slot].as_mut() else {
                return;
            };
            c.last_seen = now;
            c.down_budget.received(len);
            let fate = c.down.submit(now, len);
            let key = (slot, c.generation);
            let proven = c.proof.proven();
            let held = Hold {
                line: &mut self.down_line,
                counts: &mut self.down,
                budget: &mut c.down_budget,
                proven,
            };
            held.hold(fate, key, &buf[..len]);
        }
    }

    /// Write a datagram between `client` and the server to `--record`'s file; a failed
    /// write ends the recording with a word, not the relay.
    fn record(&mut self, client: SocketAddr, up: bool, bytes: &[u8]) {
        let Some(w) = self.record.as_mut() else {
            return;
        };
        let server = if client.is_ipv4() == self.target.is_ipv4() {
            self.target
        } else {
            self.local
        };
        let (src, dst) = if up {
            (client, server)
        } else {
            (server, client)
        };
        if let Err(e) = w.datagram(std::time::SystemTime::now(), src, dst, bytes) {
            say!("relay: --record stopped: {e}");
            self.record = None;
        }
    }

    /// Send what is due in both directions.
    fn deliver(&mut self, now: Instant) {
        let slots = &mut self.slots;
        let up = &mut self.up;
        while let Some(due) = self.up_line.next_due().filter(|&at| at <= now) {
            record_late(&mut self.up_late, now, due);
            self.up_line.pop_due(now, |key, bytes| {
                if let Some(c) = alive(slots, key) {
                    if c.upstream.send(bytes).is_ok() {
                        up.out += 1;
                    }
                }
            });
        }
        let down = &mut self.down;
        let listen = &self.listen;
        while let Some(due) = self.down_line.next_due().filter(|&at| at <= now) {
            record_late(&mut self.down_late, now, due);
            self.down_line.pop_due(now, |key, bytes| {
                if let Some(c) = alive(slots, key) {
                    if listen.send_to(bytes, c.addr).is_ok() {
                        down.out += 1;
                        c.proof.sent_to();
                    }
                }
            });
        }
    }

    /// The slot of `addr`'s client, created (with its upstream socket and links) on its
    /// first datagram; `None` when the table is full or no socket can be had.
    fn client(&mut self, addr: SocketAddr, now: Instant) -> Option<usize> {
        if let Some(&slot) = self.by_addr.get(&addr) {
            return Some(slot);
        }
        if self.by_addr.len() >= self.max_clients {
            return None;
        }
        let any: SocketAddr = if self.target.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let upstream = UdpSocket::bind(any).ok()?;
        upstream.connect(self.target).ok()?;
        upstream.set_nonblocking(true).ok()?;
        crate::engine::io::socket::set_big_buffers(&upstream, UPSTREAM_BUFFER);
        let n = self.clients_seen;
        self.clients_seen += 1;
        let seed = self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        self.slots[slot] = Some(Client {
            addr,
            generation: self.generations[slot],
            upstream,
            up: Link::new(&self.up_cond, seed, now),
            down: Link::new(&self.down_cond, seed ^ 0xD0D0_D0D0, now),
            up_budget: Budget::default(),
            down_budget: Budget::default(),
            proof: Proof::default(),
            last_seen: now,
        });
        self.by_addr.insert(addr, slot);
        Some(slot)
    }

    fn forget_idle(&mut self, now: Instant) {
        for slot in self.slots.iter_mut() {
            if slot
                .as_ref()
                .is_some_and(|c| now.saturating_duration_since(c.last_seen) >= self.idle)
            {
                if let Some(c) = slot.take() {
                    self.by_addr.remove(&c.addr);
                }
            }
        }
    }

    fn summary(&self) -> String {
        let d = |name: &str, c: &Counts| {
            format!(
                "{name} in {} out {} dropped {} duplicated {}",
                c.r#in, c.out, c.dropped, c.duplicated
            )
        };
        let late = |h: &hdrhistogram::Histogram<u64>| {
            format!(
                "{}/{}/{}",
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.9),
                h.max()
            )
        };
        let held = |name: &str, l: &DelayLine<Key>| {
            format!(
                "holding {name} peak {} datagrams {} bytes, over bound {}",
                l.peak_len(),
                l.peak_memory(),
                l.refused()
            )
        };
        format!(
            "relay: {}; {}; clients {} (refused {}); {}; {}; copies withheld from unproven \
             clients up {} down {}; late_us up {} down {} (p50/p90/max)",
            d("up", &self.up),
            d("down", &self.down),
            self.clients_seen,
            self.refused,
            held("up", &self.up_line),
            held("down", &self.down_line),
            self.up.unproven,
            self.down.unproven,
            late(&self.up_late),
            late(&self.down_late)
        )
    }
}

/// A held datagram left at `now`, due at `due`: how late, in µs (0 when on time).
fn record_late(h: &mut hdrhistogram::Histogram<u64>, now: Instant, due: Instant) {
    let us = now.saturating_duration_since(due).as_micros();
    crate::metrics::record(h, u64::try_from(us).unwrap_or(u64::MAX));
}

/// The live client a held datagram is for (`None` once its slot was forgotten or reused).
fn alive(slots: &mut [Option<Client>], (slot, generation): Key) -> Option<&mut Client> {
    slots
        .get_mut(slot)
        .and_then(|c| c.as_mut())
        .filter(|c| c.generation == generation)
}

/// Where one direction of one client holds a datagram.
struct Hold<'a> {
    line: &'a mut DelayLine<Key>,
    counts: &'a mut Counts,
    budget: &'a mut Budget,
    /// The client has shown that it receives: its copies need no budget.
    proven: bool,
}

impl Hold<'_> {
    /// Hold a datagram (and its copy) until the link delivers it, or count its loss. The
    /// original always fits the budget (it came in with it); a copy for a client not yet
    /// proven only where the link dropped enough before it.
    fn hold(self, fate: Fate, key: Key, bytes: &[u8]) {
        let Fate::Deliver { at, copy_at } = fate else {
            self.counts.dropped += 1;
            return;
        };
        if !self.line.push(at, key, bytes) {
            self.counts.dropped += 1;
            return;
        }
        self.budget.spend(bytes.len());
        let Some(copy_at) = copy_at else {
            return;
        };
        if !self.proven && !self.budget.allows(bytes.len()) {
            self.counts.unproven += 1;
        } else if self.line.push(copy_at, key, bytes) {
            self.budget.spend(bytes.len());
            self.counts.duplicated += 1;
        }
    }
}

fn pollfd(fd: std::os::fd::RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}
