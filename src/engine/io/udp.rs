//! Raw UDP: one protocol message per datagram.
//!
//! Bots: one connected socket each (a server keys clients by source address, so bots cannot
//! share one), which is its own [`Source`]. Servers: each source address is a connection.
//!
//! A worker's bots send through one io_uring where the kernel gives it ([`UringBatch`]): a
//! bot's datagrams are queued and the worker submits them all at the end of its wake-up, one
//! system call for up to [`super::send_batch::BATCH`] sends on as many sockets. Otherwise (or
//! with `TICKSWARM_IO=plain`) each datagram is one `send()`, as it left before batching.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Instant;

use super::{BotTransport, LinkEvents, Opened, ServerTransport, Slot, Source, Watch};
use crate::engine::io::send_batch::{IoMode, SendPath, UringBatch, WorkerSends};
use crate::engine::io::sim_path::{PathConditions, SimPath};
use crate::engine::io::socket::bot::BotSocket;
use crate::metrics::{MetricDesc, Recorder, ServerStats};
use crate::protocol::{ConnId, Server, Transmit};

/// The sockets of a worker's UDP bots: one per bot, a new one (a new source) when a bot
/// moves to another server.
#[derive(Default)]
pub struct UdpBots {
    /// By source: the bot it carries, its group and its socket; `None` once retired.
    sources: Vec<Option<BotSource>>,
    /// Retired sockets, closed after the next submit: a datagram queued on one before its
    /// bot moved must still find it open (not closed, its number not reused) when it leaves.
    closing: Vec<BotSource>,
    /// By source: its simulated network path, when the scenario sets `network:`.
    paths: Vec<Option<SimPath>>,
    /// Some source has a simulated path: without one, `paths` is never read (with thousands
    /// of bots, its entry was a cache miss per bot per tick when the worker asked for the
    /// source's timer).
    any_simulated: bool,
    /// By group: its `network:`, if any.
    network: Vec<Option<PathConditions>>,
    /// The current source of each bot slot.
    by_slot: Vec<Option<SendTo>>,
    retired: Vec<Source>,
    /// The worker's way to the kernel: io_uring batches, or one `send()` each.
    sends: WorkerSends,
    /// Kernel buffers each bot socket asks for (`None`: the socket's default).
    socket_buffers: Option<crate::engine::io::socket::SocketBuffers>,
}

/// One bot's socket.
struct BotSource {
    slot: Slot,
    group: super::GroupId,
    /// The socket's descriptor.
    fd: RawFd,
    /// Holds the socket open: dropping the entry closes it.
    _sock: Rc<BotSocket>,
}

/// Where a bot's datagrams go, by slot: everything a send reads, in 16 bytes, so a send is
/// one look-up in a dense table (not the source's entry, nor the socket's allocation: with
/// thousands of bots each was a cache miss per datagram).
#[derive(Clone, Copy)]
struct SendTo {
    src: u32,
    fd: RawFd,
    group: u32,
    /// The scenario sets `network:` for its group: its sends go through `paths`.
    simulated: bool,
}

impl UdpBots {
    /// Bots whose datagrams go through their group's `network[group]` (`None`, or no entry:
    /// the real link only).
    /// They send through io_uring unless `TICKSWARM_IO=plain` or the kernel refuses it.
    pub fn new(network: Vec<Option<PathConditions>>) -> Self {
        Self::with_send_path(network, IoMode::from_env(), UringBatch::new)
    }

    /// [`UdpBots::new`] with the send path chosen by `mode` and `ring` (tests inject a
    /// refused io_uring here).
    pub fn with_send_path(
        network: Vec<Option<PathConditions>>,
        mode: IoMode,
        ring: impl FnOnce() -> std::io::Result<UringBatch>,
    ) -> Self {
        UdpBots {
            network,
            sends: WorkerSends::new(mode, ring),
            ..UdpBots::default()
        }
    }

    /// Bot sockets ask the kernel for `b` (the plan's size).
    pub fn with_socket_buffers(
        mut self,
        b: Option<crate::engine::io::socket::SocketBuffers>,
    ) -> Self {
        self.socket_buffers = b;
        self
    }

    /// The send path this worker uses.
    pub fn send_path(&self) -> SendPath {
        self.sends.path()
    }
}

/// Raw UDP carries one message per datagram: a datagram sent is also a message sent.
const ONE_MESSAGE_EACH: bool = true;

impl BotTransport for UdpBots {
    const NAME: &'static str = "udp";
    const METRICS: &'static [MetricDesc] = &[];

    fn open(
        &mut self,
        slot: Slot,
        group: super::GroupId,
        peer: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        _rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        let sock = Rc::new(BotSocket::connect_to(peer, source, self.socket_buffers)?);
        let src = self.sources.len();
        let path = self
            .network
            .get(group)
            .and_then(Option::as_ref)
            .map(|c| SimPath::new(c, src as u64, now));
        let fd = sock.raw_fd();
        let to = SendTo {
            src: src as u32,
            fd,
            group: group as u32,
            simulated: path.is_some(),
        };
        self.sources.push(Some(BotSource {
            slot,
            group,
            fd,
            _sock: sock.clone(),
        }));
        self.any_simulated |= path.is_some();
        self.paths.push(path);
        if self.by_slot.len() <= slot {
            self.by_slot.resize(slot + 1, None);
        }
        self.by_slot[slot] = Some(to);
        Ok(Opened {
            source: src,
            watch: Some(Watch::Socket(sock)),
            up: true,
        })
    }

    fn relink(
        &mut self,
        slot: Slot,
        group: super::GroupId,
        peer: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        if let Some(old) = self.by_slot.get_mut(slot).and_then(Option::take) {
            let old = old.src as Source;
            if let Some(s) = self.sources.get_mut(old).and_then(Option::take) {
                self.closing.push(s);
            }
            self.retired.push(old);
        }
        self.open(slot, group, peer, source, now, rec)
    }

    fn poll_retired(&mut self) -> Option<Source> {
        self.retired.pop()
    }

    fn send(&mut self, slot: Slot, _t: &Transmit, bytes: &[u8], now: Instant, rec: &mut Recorder) {
        let Some(&Some(to)) = self.by_slot.get(slot) else {
            return;
        };
        let (fd, group) = (to.fd, to.group as usize);
        let sends = &mut self.sends;
        if !to.simulated {
            sends.send_fd(fd, group, bytes, rec, ONE_MESSAGE_EACH);
            return;
        }
        if let Some(path) = self.paths.get_mut(to.src as usize).and_then(Option::as_mut) {
            path.send(now, bytes, |b| {
                sends.send_fd(fd, group, b, rec, ONE_MESSAGE_EACH)
            });
            path.record(rec);
        }
    }

    fn flush(&mut self, _slot: Slot, _now: Instant, _rec: &mut Recorder) {}

    fn submit(&mut self, recs: &mut [Recorder]) {
        self.sends.submit(recs);
        // Nothing is queued on the retired sockets any more: closed.
        self.closing.clear();
    }

    fn close(&mut self, _slot: Slot, _now: Instant, _rec: &mut Recorder) {}

    fn on_datagrams<'a>(
        &mut self,
        src: Source,
        now: Instant,
        datagrams: impl Iterator<Item = &'a [u8]>,
        rec: &mut Recorder,
        out: &mut LinkEvents,
    ) {
        // A retired source's late datagrams belong to a server the bot has left.
        let Some(Some(BotSource { slot, .. })) = self.sources.get(src) else {
            return;
        };
        let slot = *slot;
        match self.paths.get_mut(src).and_then(Option::as_mut) {
            Some(path) => {
                for d in datagrams {
                    path.receive(now, d, |b| out.data(slot, b));
                }
                path.record(rec);
            }
            None => {
                for d in datagrams {
                    out.data(slot, d);
                }
            }
        }
    }

    /// Held datagrams of the simulated path that are due: sent, or handed to the bot.
    fn on_timer(&mut self, src: Source, now: Instant, rec: &mut Recorder, out: &mut LinkEvents) {
        let Some(Some(s)) = self.sources.get(src) else {
            return;
        };
        let (slot, group, fd) = (s.slot, s.group, s.fd);
        let Some(path) = self.paths.get_mut(src).and_then(Option::as_mut) else {
            return;
        };
        let sends = &mut self.sends;
        path.send_due(now, |b| sends.send_fd(fd, group, b, rec, ONE_MESSAGE_EACH));
        path.deliver_due(now, |b| out.data(slot, b));
    }

    fn poll_timeout(&self, src: Source) -> Option<Instant> {
        if !self.any_simulated {
            return None;
        }
        self.paths.get(src)?.as_ref()?.next_due()
    }

    fn sample(&self, _slot: Slot, _rec: &mut Recorder) {}

    fn finish(&mut self, _now: Instant, _rec: &mut Recorder) {}

    fn is_idle(&self) -> bool {
        true
    }
}

/// Connection ids for a raw UDP server: one per source address, forgotten when the server
/// closes the session (so a flood of spoofed sources cannot grow the table past what the
/// server itself keeps).
#[derive(Default)]
pub struct UdpServerSide {
    by_addr: HashMap<SocketAddr, ConnId>,
    by_id: HashMap<ConnId, SocketAddr>,
    next: u64,
    /// Datagrams the server addressed to a connection it had already closed.
    no_conn: u64,
}

impl UdpServerSide {
    fn id_of(&mut self, addr: SocketAddr) -> ConnId {
        if let Some(&c) = self.by_addr.get(&addr) {
            return c;
        }
        let c = ConnId(self.next);
        self.next += 1;
        self.by_addr.insert(addr, c);
        self.by_id.insert(c, addr);
        c
    }

    /// Source addresses the table holds.
    #[cfg(test)]
    fn known(&self) -> usize {
        self.by_addr.len()
    }
}

impl ServerTransport for UdpServerSide {
    fn on_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
        server: &mut dyn Server,
    ) {
        let id = self.id_of(from);
        server.handle_datagram(now, id, data);
    }

    fn service(&mut self, _now: Instant, _server: &mut dyn Server) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Straight from the server into `buf`: no copy through the transport.
    fn poll_datagram(
        &mut self,
        _now: Instant,
        server: &mut dyn Server,
        buf: &mut [u8],
    ) -> Option<(SocketAddr, usize)> {
        while let Some((to, t)) = server.poll_transmit(buf) {
            match self.by_id.get(&to) {
                Some(&addr) => return Some((addr, t.len)),
                None => self.no_conn += 1,
            }
        }
        // Everything the server queued is out: now forget the sessions it closed.
        while let Some(c) = server.poll_close() {
            if let Some(a) = self.by_id.remove(&c) {
                self.by_addr.remove(&a);
            }
        }
        None
    }

    fn report(&self, stats: &mut ServerStats) {
        stats.connections = self.by_addr.len();
        if self.no_conn > 0 {
            stats
                .events
                .add("udp_send_to_closed_connection", self.no_conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ServerStats;

    /// Echoes each datagram to its sender, and closes the connection of any datagram `bye`.
    #[derive(Default)]
    struct Echo {
        out: std::collections::VecDeque<(ConnId, Vec<u8>)>,
        close: Vec<ConnId>,
        stats: ServerStats,
    }

    impl Server for Echo {
        fn handle_datagram(&mut self, _: Instant, from: ConnId, data: &[u8]) {
            self.out.push_back((from, data.to_vec()));
            if data == b"bye" {
                self.close.push(from);
            }
        }
        fn handle_timeout(&mut self, _: Instant) {}
        fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
            let (to, d) = self.out.pop_front()?;
            buf[..d.len()].copy_from_slice(&d);
            Some((to, Transmit::datagram(d.len())))
        }
        fn poll_timeout(&self) -> Option<Instant> {
            None
        }
        fn stats(&self) -> &ServerStats {
            &self.stats
        }
        fn poll_close(&mut self) -> Option<ConnId> {
            self.close.pop()
        }
    }

    #[test]
    fn a_relinked_bot_gets_a_new_source_and_the_old_one_is_retired() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let now = Instant::now();
        let mut rec = Recorder::new();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:9".parse().unwrap(),
            "127.0.0.1:10".parse().unwrap(),
        );
        let mut t = UdpBots::default();
        let first = t.open(7, 0, a, None, now, &mut rec).unwrap();
        assert!(first.up && matches!(first.watch, Some(Watch::Socket(_))));
        let second = t.relink(7, 0, b, None, now, &mut rec).unwrap();
        assert_ne!(first.source, second.source);
        assert_eq!(t.poll_retired(), Some(first.source));
        assert_eq!(t.poll_retired(), None);
        // Late datagrams on the old source reach no bot; the new source's reach bot 7.
        let mut out = LinkEvents::default();
        t.on_datagrams(
            first.source,
            now,
            [&b"old"[..]].into_iter(),
            &mut rec,
            &mut out,
        );
        assert!(out.is_empty());
        t.on_datagrams(
            second.source,
            now,
            [&b"new"[..]].into_iter(),
            &mut rec,
            &mut out,
        );
        assert_eq!(
            out.get(0).map(|(slot, _, d)| (slot, d.to_vec())),
            Some((7, b"new".to_vec()))
        );
    }

    /// A datagram a bot queued before it moved still leaves, on its old socket, at the
    /// wake-up's submit: the retired socket stays open (its descriptor not reused) until then.
    #[test]
    fn a_datagram_queued_before_a_relink_still_leaves_on_the_old_socket() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let now = Instant::now();
        let server = || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            s
        };
        let (old, new) = (server(), server());
        for mode in [IoMode::Auto, IoMode::Plain] {
            let mut t = UdpBots::with_send_path(Vec::new(), mode, UringBatch::new);
            let mut recs = vec![Recorder::new()];
            let tr = Transmit::datagram(0);
            t.open(0, 0, old.local_addr().unwrap(), None, now, &mut recs[0])
                .unwrap();
            t.send(0, &tr, b"before", now, &mut recs[0]);
            t.relink(0, 0, new.local_addr().unwrap(), None, now, &mut recs[0])
                .unwrap();
            t.send(0, &tr, b"after", now, &mut recs[0]);
            t.submit(&mut recs);
            let mut b = [0u8; 16];
            let n = old.recv(&mut b).expect("the old socket's datagram arrives");
            assert_eq!(&b[..n], b"before", "{mode:?}");
            let n = new.recv(&mut b).expect("the new socket's datagram arrives");
            assert_eq!(&b[..n], b"after", "{mode:?}");
            assert_eq!(recs[0].wire.packets_up, 2, "{mode:?}");
            assert_eq!(recs[0].send_errors.total(), 0, "{mode:?}");
        }
    }

    /// A relinked bot (a reconnection, a handoff) keeps its source address on its new socket.
    #[test]
    fn a_relinked_bot_keeps_its_source_address() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let now = Instant::now();
        let mut rec = Recorder::new();
        let source: IpAddr = "127.0.3.1".parse().unwrap();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:9".parse().unwrap(),
            "127.0.0.1:10".parse().unwrap(),
        );
        let bound = |o: &Opened| match &o.watch {
            Some(Watch::Socket(s)) => s.local_addr().unwrap().ip(),
            None => panic!("a UDP bot has its own socket"),
        };
        let mut t = UdpBots::default();
        let first = t.open(3, 0, a, Some(source), now, &mut rec).unwrap();
        assert_eq!(bound(&first), source);
        let second = t.relink(3, 0, b, Some(source), now, &mut rec).unwrap();
        assert_ne!(first.source, second.source);
        assert_eq!(bound(&second), source);
    }

    /// `bots` bots in two groups each send `each` numbered datagrams through `t`, submitted
    /// once; the server socket receives every one, each bot's in order, and the recorders
    /// count exactly what went out, per group.
    fn delivers_every_datagram(mut t: UdpBots, bots: usize, each: usize) -> Vec<Recorder> {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let now = Instant::now();
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        // Room for every datagram of the test at once (the default buffer holds a few hundred).
        crate::engine::io::socket::set_big_buffers(&server, 4 << 20);
        let peer = server.local_addr().unwrap();
        let mut recs = vec![Recorder::new(), Recorder::new()];
        for slot in 0..bots {
            t.open(slot, slot % 2, peer, None, now, &mut recs[slot % 2])
                .unwrap();
        }
        let tr = Transmit::datagram(0);
        for k in 0..each {
            for slot in 0..bots {
                let msg = [slot as u8, k as u8, (k >> 8) as u8, 0xAB];
                t.send(slot, &tr, &msg, now, &mut recs[slot % 2]);
            }
        }
        t.submit(&mut recs);
        let mut next = vec![0usize; bots];
        let mut b = [0u8; 16];
        for _ in 0..bots * each {
            let n = server.recv(&mut b).expect("every datagram arrives");
            assert_eq!(n, 4);
            let (slot, k) = (b[0] as usize, b[1] as usize | (b[2] as usize) << 8);
            assert_eq!(
                k, next[slot],
                "bot {slot}'s datagrams in the order it sent them"
            );
            next[slot] += 1;
        }
        server.set_nonblocking(true).unwrap();
        assert!(server.recv(&mut b).is_err(), "not one datagram more");
        let total = (bots * each) as u64;
        let in_group = |g: usize| ((0..bots).filter(|s| s % 2 == g).count() * each) as u64;
        for (g, rec) in recs.iter().enumerate() {
            assert_eq!(rec.wire.packets_up, in_group(g));
            assert_eq!(rec.packets_up, in_group(g));
            assert_eq!(rec.wire.bytes_up, 4 * in_group(g));
            assert_eq!(rec.send_errors.total(), 0);
        }
        let io = recs[0].send_io.merged_with(&recs[1].send_io);
        assert_eq!(io.datagrams, total);
        assert_eq!(io.workers_uring + io.workers_plain, 1);
        recs
    }

    const BOTS: usize = 100;
    const EACH: usize = 3;

    #[test]
    fn io_uring_batches_deliver_exactly_what_was_sent_in_few_system_calls() {
        let t = UdpBots::with_send_path(Vec::new(), IoMode::Auto, UringBatch::new);
        let uring = t.send_path() == SendPath::Uring;
        let recs = delivers_every_datagram(t, BOTS, EACH);
        let io = recs[0].send_io.merged_with(&recs[1].send_io);
        if uring {
            // 300 sends, at most BATCH per system call.
            let calls = (BOTS * EACH).div_ceil(crate::engine::io::send_batch::BATCH) as u64;
            assert_eq!((io.syscalls, io.workers_uring), (calls, 1));
            assert_eq!(io.max_batch, crate::engine::io::send_batch::BATCH as u64);
        } else {
            // This kernel refuses io_uring: the fallback carried everything.
            assert_eq!(io.syscalls, (BOTS * EACH) as u64);
        }
    }

    #[test]
    fn the_plain_path_delivers_exactly_what_was_sent_one_call_each() {
        let t = UdpBots::with_send_path(Vec::new(), IoMode::Plain, UringBatch::new);
        assert_eq!(t.send_path(), SendPath::Plain { refused: None });
        let recs = delivers_every_datagram(t, BOTS, EACH);
        let io = recs[0].send_io.merged_with(&recs[1].send_io);
        assert_eq!((io.syscalls, io.max_batch), ((BOTS * EACH) as u64, 1));
        assert_eq!(io.workers_plain, 1);
    }

    /// A seccomp profile or an old kernel refuses io_uring: the worker falls back to plain
    /// sends, says why, and still delivers every datagram.
    #[test]
    fn a_refused_io_uring_falls_back_and_still_delivers_everything() {
        let t = UdpBots::with_send_path(Vec::new(), IoMode::Auto, || {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        });
        assert!(matches!(
            t.send_path(),
            SendPath::Plain { refused: Some(ref why) } if why.contains("EPERM")
        ));
        let recs = delivers_every_datagram(t, BOTS, EACH);
        let io = recs[0].send_io.merged_with(&recs[1].send_io);
        assert_eq!((io.syscalls, io.workers_plain), ((BOTS * EACH) as u64, 1));
    }

    /// A send the kernel refuses (nobody listens: ECONNREFUSED after the ICMP) is counted
    /// by its reason on the batched path as on the plain one, never as sent.
    #[test]
    fn refused_sends_count_the_same_on_both_paths() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let now = Instant::now();
        // A port nobody listens on.
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = closed.local_addr().unwrap();
        drop(closed);
        let mut counts = Vec::new();
        for mode in [IoMode::Auto, IoMode::Plain] {
            let mut t = UdpBots::with_send_path(Vec::new(), mode, UringBatch::new);
            let mut recs = vec![Recorder::new()];
            t.open(0, 0, peer, None, now, &mut recs[0]).unwrap();
            let tr = Transmit::datagram(0);
            for _ in 0..3 {
                t.send(0, &tr, b"x", now, &mut recs[0]);
                t.submit(&mut recs);
                // Let the ICMP come back before the next send.
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let r = &recs[0];
            assert_eq!(r.wire.packets_up + r.send_errors.total(), 3);
            counts.push((r.wire.packets_up, r.send_errors.total()));
        }
        assert_eq!(counts[0], counts[1]);
    }

    #[test]
    fn one_connection_per_source_forgotten_after_its_last_datagram() {
        let now = Instant::now();
        let (a, b): (SocketAddr, SocketAddr) =
            ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:1".parse().unwrap());
        let mut t = UdpServerSide::default();
        let mut s = Echo::default();
        t.on_datagram(now, a, b"hi", &mut s);
        t.on_datagram(now, b, b"bye", &mut s);
        t.on_datagram(now, a, b"again", &mut s);
        assert_eq!(t.known(), 2);
        let mut buf = [0u8; 64];
        let mut sent = Vec::new();
        while let Some((to, n)) = t.poll_datagram(now, &mut s, &mut buf) {
            sent.push((to, buf[..n].to_vec()));
        }
        // `b`'s goodbye still reached it before its connection was forgotten.
        assert_eq!(
            sent,
            vec![
                (a, b"hi".to_vec()),
                (b, b"bye".to_vec()),
                (a, b"again".to_vec())
            ]
        );
        assert_eq!(t.known(), 1);
        // A new datagram from `b` is a new connection.
        t.on_datagram(now, b, b"x", &mut s);
        assert_eq!(s.out.back().map(|o| o.0), Some(ConnId(2)));
    }
}
