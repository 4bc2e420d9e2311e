//! Raw UDP play after a login over TCP ([`TransportNeeds::UdpTcpLogin`]).
//!
//! Each bot gets two links to one server: a TCP connection to the target (the login) and its
//! own connected UDP socket to the same host at the TCP port + `udp_port_offset` (the play).
//! The UDP socket is the bot's [`Source`], watched like [`super::udp`]'s. The TCP stream is a
//! non-blocking socket polled on the source's timer: every millisecond while it is connecting,
//! has bytes to write or was written to in the last `BUSY_FOR` (a login is a few round
//! trips), every `IDLE_POLL` otherwise (only to notice a close). No thread, no task per bot.
//!
//! The bot starts on [`LinkEvent::Up`](super::LinkEvent::Up) when the TCP connection is up;
//! a refused connect is [`DownReason::Refused`], a connect that never completes is the
//! worker's `transport connect timed out` at the bot's `handshake_timeout`. Stream bytes the
//! bot sends are `Transmit { reliable: true }`; everything else is a datagram. Received
//! stream bytes reach the bot through `Bot::handle_stream`, unframed, at most `READ_BUDGET`
//! bytes a poll (`tcp_login_read_budget_spent` counts the polls that stopped there). The end of the stream
//! (or a reset) is [`DownReason::ClosedByServer`]: the bot decides whether that ends it.
//!
//! [`TransportNeeds::UdpTcpLogin`]: crate::protocol::TransportNeeds::UdpTcpLogin

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::rc::Rc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::{BotTransport, DownReason, LinkEvents, Opened, Slot, Source, Watch};
use crate::engine::io::socket::bot::{source_unavailable, BotSocket};
use crate::engine::io::socket::error_name;
use crate::metrics::{MetricDesc, Recorder};
use crate::protocol::Transmit;

/// Poll the stream every millisecond for this long after the bot last wrote to it.
const BUSY_FOR: Duration = Duration::from_millis(250);
const BUSY_POLL: Duration = Duration::from_millis(1);
/// Poll an idle stream this often.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// Bytes read from a stream per read call (a login reply is a few dozen).
const READ_CHUNK: usize = 4096;
/// Bytes read from a stream per poll at most: what a server streams beyond it waits in the
/// kernel (and TCP's window then holds the server back) until the next poll, at most every
/// `BUSY_POLL` during a login and every `IDLE_POLL` after it. Without it a server writing
/// as fast as loopback carries kept one poll reading for seconds and the bots' inputs
/// waited behind it (issue 35, break 12).
const READ_BUDGET: usize = 4 * READ_CHUNK;

enum TcpState {
    Connecting(Socket),
    Up(TcpStream),
    /// Failed at connect (reported on the next poll, once the worker knows the source).
    Failed(DownReason),
}

struct Tcp {
    state: TcpState,
    /// Bytes the bot sent that the socket has not taken yet.
    pending: Vec<u8>,
    last_write: Instant,
    next_poll: Instant,
}

struct Link {
    slot: Slot,
    udp: Rc<BotSocket>,
    tcp: Option<Tcp>,
}

/// The links of a worker's bots.
pub struct TcpLoginBots {
    udp_port_offset: u16,
    /// By source: `None` once retired.
    sources: Vec<Option<Link>>,
    by_slot: Vec<Option<Source>>,
    retired: Vec<Source>,
    /// Kernel buffers each bot's UDP socket asks for (`None`: the socket's default).
    socket_buffers: Option<super::socket::SocketBuffers>,
}

impl TcpLoginBots {
    pub fn new(udp_port_offset: u16) -> Self {
        Self {
            udp_port_offset,
            sources: Vec::new(),
            by_slot: Vec::new(),
            retired: Vec::new(),
            socket_buffers: None,
        }
    }

    /// Bot UDP sockets ask the kernel for `b` (the plan's size).
    pub fn with_socket_buffers(mut self, b: Option<super::socket::SocketBuffers>) -> Self {
        self.socket_buffers = b;
        self
    }

    fn link_mut(&mut self, slot: Slot) -> Option<&mut Link> {
        let src = (*self.by_slot.get(slot)?)?;
        self.sources.get_mut(src)?.as_mut()
    }

    fn udp_peer(&self, peer: SocketAddr) -> io::Result<SocketAddr> {
        let port = peer
            .port()
            .checked_add(self.udp_port_offset)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "TCP port {} + udp_port_offset {} is past 65535",
                        peer.port(),
                        self.udp_port_offset
                    ),
                )
            })?;
        Ok(SocketAddr::new(peer.ip(), port))
    }
}

/// Start a non-blocking connect to `peer` from `source`.
fn start_connect(peer: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpState> {
    let sock = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_nodelay(true)?;
    if let Some(ip) = source {
        sock.bind(&SocketAddr::new(ip, 0).into())
            .map_err(|e| match e.kind() {
                io::ErrorKind::AddrNotAvailable => source_unavailable(ip),
                _ => e,
            })?;
    }
    Ok(match sock.connect(&peer.into()) {
        Ok(()) => TcpState::Up(sock.into()),
        Err(e) if in_progress(&e) => TcpState::Connecting(sock),
        Err(e) => TcpState::Failed(connect_error(&e)),
    })
}

fn in_progress(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock
}

fn connect_error(e: &io::Error) -> DownReason {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => DownReason::Refused,
        _ => DownReason::ConnectFailed,
    }
}

impl Tcp {
    /// Write what is pending; false when the connection is gone.
    fn write_pending(&mut self, rec: &mut Recorder) -> bool {
        let TcpState::Up(stream) = &mut self.state else {
            return true;
        };
        while !self.pending.is_empty() {
            match stream.write(&self.pending) {
                Ok(0) => return false,
                Ok(n) => {
                    rec.wire_up(n);
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    rec.send_errors.add2("tcp", error_name(&e), 1);
                    return false;
                }
            }
        }
        true
    }

    /// One poll: finish the connect, write, read. Events go to `out`; the link's new state
    /// is returned (`None`: the stream is gone).
    fn poll(
        mut self,
        slot: Slot,
        now: Instant,
        rec: &mut Recorder,
        out: &mut LinkEvents,
    ) -> Option<Tcp> {
        if let TcpState::Failed(why) = self.state {
            out.down(slot, why);
            return None;
        }
        if let TcpState::Connecting(sock) = &self.state {
            match sock.take_error() {
                Ok(Some(e)) | Err(e) => {
                    out.down(slot, connect_error(&e));
                    return None;
                }
                Ok(None) => {}
            }
            match sock.peer_addr() {
                Ok(_) => {
                    let TcpState::Connecting(sock) =
                        std::mem::replace(&mut self.state, TcpState::Failed(DownReason::Closed))
                    else {
                        return None;
                    };
                    self.state = TcpState::Up(sock.into());
                    out.up(slot);
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    self.next_poll = now + BUSY_POLL;
                    return Some(self);
                }
                Err(e) => {
                    out.down(slot, connect_error(&e));
                    return None;
                }
            }
        }
        if !self.write_pending(rec) {
            out.down(slot, DownReason::ClosedByServer);
            return None;
        }
        let TcpState::Up(stream) = &mut self.state else {
            return None;
        };
        let mut buf = [0u8; READ_CHUNK];
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                rec.event("tcp_login_read_budget_spent");
                break;
            }
            match stream.read(&mut buf) {
                Ok(0) => {
                    out.down(slot, DownReason::ClosedByServer);
                    return None;
                }
                Ok(n) => {
                    rec.wire_down(n);
                    out.stream(slot, &buf[..n]);
                    budget = budget.saturating_sub(n);
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    out.down(slot, DownReason::ClosedByServer);
                    return None;
                }
            }
        }
        let busy =
            !self.pending.is_empty() || now.saturating_duration_since(self.last_write) < BUSY_FOR;
        self.next_poll = now + if busy { BUSY_POLL } else { IDLE_POLL };
        Some(self)
    }
}

impl BotTransport for TcpLoginBots {
    const NAME: &'static str = "tcp_login";
    const METRICS: &'static [MetricDesc] = &[];

    fn open(
        &mut self,
        slot: Slot,
        _group: super::GroupId,
        peer: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        _rec: &mut Recorder,
    ) -> io::Result<Opened> {
        let udp = Rc::new(BotSocket::connect_to(
            self.udp_peer(peer)?,
            source,
            self.socket_buffers,
        )?);
        let state = start_connect(peer, source)?;
        let src = self.sources.len();
        self.sources.push(Some(Link {
            slot,
            udp: udp.clone(),
            tcp: Some(Tcp {
                state,
                pending: Vec::new(),
                last_write: now,
                next_poll: now,
            }),
        }));
        if self.by_slot.len() <= slot {
            self.by_slot.resize(slot + 1, None);
        }
        self.by_slot[slot] = Some(src);
        Ok(Opened {
            source: src,
            watch: Some(Watch::Socket(udp)),
            up: false,
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
    ) -> io::Result<Opened> {
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

    fn send(&mut self, slot: Slot, t: &Transmit, bytes: &[u8], _now: Instant, rec: &mut Recorder) {
        let Some(link) = self.link_mut(slot) else {
            return;
        };
        if t.reliable {
            match &mut link.tcp {
                Some(tcp) => {
                    rec.datagram_up(bytes.len());
                    tcp.pending.extend_from_slice(bytes);
                }
                None => rec.send_errors.add2("tcp", "closed", 1),
            }
            return;
        }
        if link.udp.send_counted(bytes, rec) {
            rec.datagram_up(bytes.len());
        }
    }

    fn flush(&mut self, slot: Slot, now: Instant, rec: &mut Recorder) {
        let Some(link) = self.link_mut(slot) else {
            return;
        };
        let Some(tcp) = &mut link.tcp else {
            return;
        };
        if tcp.pending.is_empty() {
            return;
        }
        tcp.last_write = now;
        // A failed write shows on the next poll, which is now.
        let _ = tcp.write_pending(rec);
        tcp.next_poll = now;
    }

    fn close(&mut self, slot: Slot, _now: Instant, rec: &mut Recorder) {
        if let Some(link) = self.link_mut(slot) {
            if let Some(mut tcp) = link.tcp.take() {
                // Last words (none in practice), then FIN as the stream drops.
                let _ = tcp.write_pending(rec);
            }
        }
    }

    fn on_datagrams<'a>(
        &mut self,
        src: Source,
        _now: Instant,
        datagrams: impl Iterator<Item = &'a [u8]>,
        _rec: &mut Recorder,
        out: &mut LinkEvents,
    ) {
        let Some(Some(link)) = self.sources.get(src) else {
            return;
        };
        for d in datagrams {
            out.data(link.slot, d);
        }
    }

    fn on_timer(&mut self, src: Source, now: Instant, rec: &mut Recorder, out: &mut LinkEvents) {
        let Some(Some(link)) = self.sources.get_mut(src) else {
            return;
        };
        if link.tcp.as_ref().is_some_and(|t| t.next_poll <= now) {
            link.tcp = link
                .tcp
                .take()
                .and_then(|t| t.poll(link.slot, now, rec, out));
        }
    }

    fn poll_timeout(&self, src: Source) -> Option<Instant> {
        let link = self.sources.get(src)?.as_ref()?;
        link.tcp.as_ref().map(|t| t.next_poll)
    }

    fn sample(&self, _slot: Slot, _rec: &mut Recorder) {}

    fn finish(&mut self, _now: Instant, rec: &mut Recorder) {
        for link in self.sources.iter_mut().flatten() {
            if let Some(tcp) = &mut link.tcp {
                let _ = tcp.write_pending(rec);
            }
        }
    }

    fn is_idle(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::io::LinkEvent;
    use std::net::TcpListener;

    fn poll_until(
        t: &mut TcpLoginBots,
        src: Source,
        mut done: impl FnMut(&LinkEvents) -> bool,
    ) -> LinkEvents {
        let mut rec = Recorder::new();
        let mut out = LinkEvents::default();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            t.on_timer(src, Instant::now(), &mut rec, &mut out);
            if done(&out) {
                return out;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        out
    }

    fn has(out: &LinkEvents, want: &LinkEvent) -> bool {
        (0..out.len()).any(|i| out.get(i).is_some_and(|(_, e, _)| e == want))
    }

    /// A closed port is refused at once, with that reason.
    #[test]
    fn a_closed_port_is_refused() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer = l.local_addr().expect("addr");
        drop(l);
        let mut t = TcpLoginBots::new(1);
        let mut rec = Recorder::new();
        let o = t
            .open(0, 0, peer, None, Instant::now(), &mut rec)
            .expect("open");
        assert!(!o.up);
        let out = poll_until(&mut t, o.source, |o| !o.is_empty());
        assert!(has(&out, &LinkEvent::Down(DownReason::Refused)));
        assert_eq!(
            t.poll_timeout(o.source),
            None,
            "a failed stream is not polled"
        );
    }

    /// Up, bytes out on the stream (reliable), bytes back as stream events, EOF as a close.
    #[test]
    fn stream_bytes_go_both_ways_and_eof_is_a_close() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer = l.local_addr().expect("addr");
        let mut t = TcpLoginBots::new(1);
        let mut rec = Recorder::new();
        let o = t
            .open(0, 0, peer, None, Instant::now(), &mut rec)
            .expect("open");
        let (mut server, _) = l.accept().expect("accept");
        let out = poll_until(&mut t, o.source, |o| !o.is_empty());
        assert!(has(&out, &LinkEvent::Up));
        let reliable = Transmit {
            len: 5,
            channel: 0,
            reliable: true,
        };
        t.send(0, &reliable, b"hello", Instant::now(), &mut rec);
        t.flush(0, Instant::now(), &mut rec);
        let mut got = [0u8; 5];
        server.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"hello");
        server.write_all(b"welcome").expect("write");
        let out = poll_until(&mut t, o.source, |o| !o.is_empty());
        let (_, ev, bytes) = out.get(0).expect("an event");
        assert!(matches!(ev, LinkEvent::Stream(_)));
        assert_eq!(bytes, b"welcome");
        drop(server);
        let out = poll_until(&mut t, o.source, |o| !o.is_empty());
        assert!(has(&out, &LinkEvent::Down(DownReason::ClosedByServer)));
    }
}
