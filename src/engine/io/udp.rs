//! Raw UDP: one protocol message per datagram.
//!
//! Bots: one connected socket each (a server keys clients by source address, so bots cannot
//! share one), which is its own [`Source`]. Servers: each source address is a connection.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Instant;

use super::{BotTransport, LinkEvents, Opened, ServerTransport, Slot, Source, Watch};
use crate::engine::io::sim_path::{PathConditions, SimPath};
use crate::engine::io::socket::bot::BotSocket;
use crate::metrics::{MetricDesc, Recorder, ServerStats};
use crate::protocol::{ConnId, Server, Transmit};

/// The sockets of a worker's UDP bots: one per bot, a new one (a new source) when a bot
/// moves to another server.
#[derive(Default)]
pub struct UdpBots {
    /// By source: the bot it carries and its socket; `None` once retired.
    sources: Vec<Option<(Slot, Rc<BotSocket>)>>,
    /// By source: its simulated network path, when the scenario sets `network:`.
    paths: Vec<Option<SimPath>>,
    /// By group: its `network:`, if any.
    network: Vec<Option<PathConditions>>,
    /// The current source of each bot slot.
    by_slot: Vec<Option<Source>>,
    retired: Vec<Source>,
}

impl UdpBots {
    /// Bots whose datagrams go through their group's `network[group]` (`None`, or no entry:
    /// the real link only).
    pub fn new(network: Vec<Option<PathConditions>>) -> Self {
        UdpBots {
            network,
            ..UdpBots::default()
        }
    }

    fn source(&self, slot: Slot) -> Option<Source> {
        *self.by_slot.get(slot)?
    }
}

/// One protocol datagram on the socket: raw UDP carries one message per datagram, so a
/// datagram sent is also a message sent (`datagram_up`).
fn send_on(sock: &BotSocket, bytes: &[u8], rec: &mut Recorder) {
    if sock.send_counted(bytes, rec) {
        rec.datagram_up(bytes.len());
    }
}

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
        let sock = Rc::new(BotSocket::connect_to(peer, source)?);
        let src = self.sources.len();
        self.sources.push(Some((slot, sock.clone())));
        let path = self
            .network
            .get(group)
            .and_then(Option::as_ref)
            .map(|c| SimPath::new(c, src as u64, now));
        self.paths.push(path);
        if self.by_slot.len() <= slot {
            self.by_slot.resize(slot + 1, None);
        }
        self.by_slot[slot] = Some(src);
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
            if let Some(s) = self.sources.get_mut(old) {
                *s = None;
            }
            self.retired.push(old);
        }
        self.open(slot, group, peer, source, now, rec)
    }

    fn poll_retired(&mut self) -> Option<Source> {
        self.retired.pop()
    }

    fn send(&mut self, slot: Slot, _t: &Transmit, bytes: &[u8], now: Instant, rec: &mut Recorder) {
        let Some(src) = self.source(slot) else {
            return;
        };
        let Some(Some((_, sock))) = self.sources.get(src) else {
            return;
        };
        match self.paths.get_mut(src).and_then(Option::as_mut) {
            Some(path) => {
                path.send(now, bytes, |b| send_on(sock, b, rec));
                path.record(rec);
            }
            None => send_on(sock, bytes, rec),
        }
    }

    fn flush(&mut self, _slot: Slot, _now: Instant, _rec: &mut Recorder) {}

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
        let Some(Some((slot, _))) = self.sources.get(src) else {
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
        let Some(Some((slot, sock))) = self.sources.get(src) else {
            return;
        };
        let Some(path) = self.paths.get_mut(src).and_then(Option::as_mut) else {
            return;
        };
        path.send_due(now, |b| send_on(sock, b, rec));
        path.deliver_due(now, |b| out.data(*slot, b));
    }

    fn poll_timeout(&self, src: Source) -> Option<Instant> {
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
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
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

    /// A relinked bot (a reconnection, a handoff) keeps its source address on its new socket.
    #[test]
    fn a_relinked_bot_keeps_its_source_address() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
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
