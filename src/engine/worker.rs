//! One worker: an OS thread with a current-thread tokio runtime that owns a shard of bots,
//! their sockets, one timer heap and one metric recorder.
//!
//! Nothing here is shared with other threads except the channel to the collector and the
//! stop signal. Bots are driven synchronously from two kinds of tasks: one receive task per
//! socket (woken by readiness) and one timer task per worker (woken by the earliest
//! deadline). Each wake-up reads the clock once for the whole batch it handles.
//!
//! A bot reaches its server over a [`Link`]: its own UDP socket (raw UDP protocols), or a peer
//! of an ENet host in a [`Group`] that owns one socket for `bots_per_socket` bots. Protocols
//! never see which.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::bot_socket::{BotRx, BotSocket, RECV_BATCH};
use super::factory::{transport_for, TransportKind};
use super::timer::{self, PreciseTimer};
use super::udp::error_name;
use crate::metrics::Recorder;
use crate::protocol::{Bot, BotParams, BotPhase, MAX_DATAGRAM};
use crate::scenario::{ProtocolSection, SpawnEvent};
use crate::transport::{
    DisconnectReason, EnetConfig, EnetEvent, EnetHost, PeerId, MAX_ENET_DATAGRAM,
};

/// What a worker runs.
pub struct WorkerSpec {
    /// Sorted by start time.
    pub bots: Vec<(SpawnEvent, BotParams, SocketAddr)>,
    pub protocol: ProtocolSection,
    pub run_start: Instant,
    pub run_end: Instant,
    /// Bots sharing one socket where the transport multiplexes peers (ENet).
    pub bots_per_socket: usize,
    /// ENet: keep the unreliable-packet throttle of the server's traffic to the bots.
    pub enet_throttle: bool,
}

/// Worker to collector.
pub enum WorkerMsg {
    /// Interval `index` (second `index + 1` of the run) is complete.
    Interval {
        index: u64,
        rec: Recorder,
        connected_now: u64,
    },
    /// The worker has stopped its bots; `rec` holds what came after the last interval.
    Done {
        rec: Recorder,
        ever_connected: u64,
        failed: u64,
    },
}

/// How a bot reaches its server.
enum Link {
    Udp(Rc<BotSocket>),
    Enet { group: usize, peer: PeerId },
}

struct Slot {
    bot: Box<dyn Bot>,
    link: Link,
    /// Generation of the timer entry that is current for this bot.
    timer_gen: u32,
    scheduled: Option<Instant>,
    ever_connected: bool,
    /// The transport never came up (ENet connect failed), so the bot never started.
    transport_failed: bool,
    /// The ENet session was asked to close (after the bot ended or on stop).
    closing: bool,
}

/// An ENet host with its socket, shared by up to `bots_per_socket` bots.
struct Group {
    sock: Rc<BotSocket>,
    peer_addr: SocketAddr,
    host: EnetHost,
    /// Slot index by ENet peer index.
    peers: Vec<Option<usize>>,
    members: usize,
    timer_gen: u32,
    scheduled: Option<Instant>,
}

/// Timer targets: a bot slot, or an ENet group with this bit set.
const GROUP_BIT: u32 = 1 << 31;

struct Shared {
    slots: RefCell<Vec<Slot>>,
    groups: RefCell<Vec<Group>>,
    rec: RefCell<Recorder>,
    timers: RefCell<BinaryHeap<Reverse<(Instant, u32, u32)>>>,
    /// The deadline the timer task sleeps until; an earlier one must wake it.
    timer_target: Cell<Option<Instant>>,
    timer_wake: Notify,
    tx_buf: RefCell<Vec<u8>>,
    rx: RefCell<BotRx>,
    /// ENet events drained from a host before the bots handle them (reused).
    events: RefCell<Vec<EnetEvent>>,
}

impl Shared {
    fn arm(&self, target: u32, generation: u32, at: Instant) {
        self.timers
            .borrow_mut()
            .push(Reverse((at, target, generation)));
        if self.timer_target.get().is_none_or(|t| at < t) {
            self.timer_wake.notify_one();
        }
    }

    /// Run `f` on bot `idx`, send what it queued, and re-arm its timer.
    fn drive(&self, idx: usize, now: Instant, f: impl FnOnce(&mut dyn Bot, &mut Recorder)) {
        let mut slots = self.slots.borrow_mut();
        let mut rec = self.rec.borrow_mut();
        let Some(slot) = slots.get_mut(idx) else {
            return;
        };
        f(slot.bot.as_mut(), &mut rec);
        let mut buf = self.tx_buf.borrow_mut();
        match &slot.link {
            Link::Udp(sock) => {
                while let Some(t) = slot.bot.poll_transmit(&mut buf) {
                    let bytes = &buf[..t.len.min(buf.len())];
                    match sock.send(bytes) {
                        Ok(()) => rec.datagram_up(bytes.len()),
                        Err(e) => rec.send_errors.add(error_name(&e), 1),
                    }
                }
            }
            Link::Enet { group, peer } => {
                let mut groups = self.groups.borrow_mut();
                if let Some(g) = groups.get_mut(*group) {
                    let mut queued = false;
                    while let Some(t) = slot.bot.poll_transmit(&mut buf) {
                        match g.host.send_transmit(*peer, &t, &buf) {
                            Ok(()) => {
                                rec.datagram_up(t.len);
                                queued = true;
                            }
                            Err(_) => rec.send_errors.add2("enet", "not_queued", 1),
                        }
                    }
                    // A bot that ended closes its session politely, after its last words.
                    let ended = matches!(slot.bot.phase(), BotPhase::Failed | BotPhase::Closed);
                    if ended && !slot.closing {
                        slot.closing = true;
                        let _ = g.host.disconnect(now, *peer, 0);
                        queued = true;
                    }
                    if queued {
                        flush_group(g, now, &mut buf, &mut rec);
                        self.rearm_group(*group, g);
                    }
                }
            }
        }
        if slot.bot.phase() == BotPhase::Connected {
            slot.ever_connected = true;
        }
        let next = slot.bot.poll_timeout();
        if next != slot.scheduled {
            slot.scheduled = next;
            slot.timer_gen = slot.timer_gen.wrapping_add(1);
            if let Some(at) = next {
                self.arm(idx as u32, slot.timer_gen, at);
            }
        }
    }

    fn rearm_group(&self, gi: usize, g: &mut Group) {
        let next = g.host.poll_timeout();
        if next != g.scheduled {
            g.scheduled = next;
            g.timer_gen = g.timer_gen.wrapping_add(1);
            if let Some(at) = next {
                self.arm(gi as u32 | GROUP_BIT, g.timer_gen, at);
            }
        }
    }

    /// Service ENet group `gi` and hand its events to the bots.
    fn service_group(&self, gi: usize, now: Instant) {
        let mut events = std::mem::take(&mut *self.events.borrow_mut());
        if let Some(g) = self.groups.borrow_mut().get_mut(gi) {
            g.host.service(now);
            while let Some(ev) = g.host.poll_event() {
                events.push(ev);
            }
        }
        // The bot behind an ENet peer, looked up per event (no copy of the table per service).
        let slot_of = |p: PeerId| {
            self.groups
                .borrow()
                .get(gi)
                .and_then(|g| g.peers.get(p.index()).copied().flatten())
        };
        for ev in events.drain(..) {
            match ev {
                EnetEvent::Connected { peer, .. } => {
                    if let Some(idx) = slot_of(peer) {
                        self.drive(idx, now, |bot, rec| bot.start(now, rec));
                    }
                }
                EnetEvent::Received { peer, packet, .. } => {
                    if let Some(idx) = slot_of(peer) {
                        self.drive(idx, now, |bot, rec| bot.handle_datagram(now, &packet, rec));
                    }
                }
                EnetEvent::Disconnected { peer, reason, .. } => {
                    let Some(idx) = slot_of(peer) else { continue };
                    let never_started = self
                        .slots
                        .borrow()
                        .get(idx)
                        .is_some_and(|s| s.bot.phase() == BotPhase::Idle);
                    if never_started {
                        if let Some(s) = self.slots.borrow_mut().get_mut(idx) {
                            s.transport_failed = true;
                        }
                        let why = match reason {
                            DisconnectReason::ConnectFailed => "connect_failed",
                            DisconnectReason::Remote => "closed_by_server",
                            DisconnectReason::Local => "closed",
                        };
                        self.rec.borrow_mut().connect_failures.add2("enet", why, 1);
                    } else {
                        self.drive(idx, now, |bot, rec| bot.handle_transport_closed(now, rec));
                    }
                    if let Some(g) = self.groups.borrow_mut().get_mut(gi) {
                        if let Some(p) = g.peers.get_mut(peer.index()) {
                            *p = None;
                        }
                    }
                }
            }
        }
        *self.events.borrow_mut() = events;
        let mut groups = self.groups.borrow_mut();
        if let Some(g) = groups.get_mut(gi) {
            let mut buf = self.tx_buf.borrow_mut();
            let mut rec = self.rec.borrow_mut();
            flush_group(g, now, &mut buf, &mut rec);
            self.rearm_group(gi, g);
        }
    }
}

/// Pack what ENet has queued into datagrams and send them on the group's socket.
fn flush_group(g: &mut Group, now: Instant, buf: &mut [u8], rec: &mut Recorder) {
    g.host.flush(now);
    while let Some((_, len)) = g.host.poll_transmit(buf) {
        if let Err(e) = g.sock.send(&buf[..len.min(buf.len())]) {
            rec.send_errors.add(error_name(&e), 1);
        }
    }
}

/// Run a worker to completion on the current thread.
pub fn run_worker(spec: WorkerSpec, tx: Sender<WorkerMsg>, stop: watch::Receiver<bool>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => {
            let _ = tx.send(WorkerMsg::Done {
                rec: Recorder::new(),
                ever_connected: 0,
                failed: spec.bots.len() as u64,
            });
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, worker_main(spec, tx, stop));
}

async fn worker_main(spec: WorkerSpec, tx: Sender<WorkerMsg>, mut stop: watch::Receiver<bool>) {
    let shared = Rc::new(Shared {
        slots: RefCell::new(Vec::with_capacity(spec.bots.len())),
        groups: RefCell::new(Vec::new()),
        rec: RefCell::new(Recorder::new()),
        timers: RefCell::new(BinaryHeap::with_capacity(spec.bots.len() * 2)),
        timer_target: Cell::new(None),
        timer_wake: Notify::new(),
        tx_buf: RefCell::new(vec![0u8; MAX_DATAGRAM.max(MAX_ENET_DATAGRAM)]),
        rx: RefCell::new(BotRx::default()),
        events: RefCell::new(Vec::new()),
    });

    tokio::task::spawn_local(timer_loop(shared.clone()));
    let intervals =
        tokio::task::spawn_local(interval_loop(shared.clone(), spec.run_start, tx.clone()));

    let transport = transport_for(&spec.protocol);
    let mut enet_cfg = EnetConfig::with_peers(spec.bots_per_socket.clamp(1, 4095));
    // Housekeeping (retransmission, ping and timeout checks) every 25 ms instead of ENet's
    // usual 10: a worker holds hundreds of hosts, and receiving and sending already service a
    // host at once. Retransmissions may leave up to 25 ms late, well under ENet's minimum RTO.
    enet_cfg.service_interval = Duration::from_millis(25);
    if !spec.enet_throttle {
        enet_cfg.throttle.2 = 0;
    }
    // Spawn bots on schedule; stop them on ramp-down; end at run_end or on the stop signal.
    let mut stops: Vec<(Instant, usize)> = Vec::new();
    let mut pending = spec.bots.into_iter().peekable();
    let protocol = spec.protocol;
    loop {
        let next_spawn = pending.peek().map(|(ev, _, _)| spec.run_start + ev.start);
        let next_stop = stops.iter().map(|s| s.0).min();
        let wake = [next_spawn, next_stop, Some(spec.run_end)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(spec.run_end);
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        let now = Instant::now();
        if now >= spec.run_end {
            break;
        }
        while pending
            .peek()
            .is_some_and(|(ev, _, _)| spec.run_start + ev.start <= now)
        {
            let Some((ev, params, peer)) = pending.next() else {
                break;
            };
            let bot = protocol.make_bot(params);
            let spawned = match transport {
                TransportKind::Udp => spawn_udp_bot(&shared, bot, peer, now),
                TransportKind::Enet { channels } => {
                    spawn_enet_bot(&shared, bot, peer, channels, &enet_cfg, now)
                }
            };
            match spawned {
                Ok(idx) => {
                    if let Some(stop_at) = ev.stop {
                        stops.push((spec.run_start + stop_at, idx));
                    }
                }
                Err(e) => {
                    let mut rec = shared.rec.borrow_mut();
                    rec.connect_failures.add2("socket", error_name(&e), 1);
                }
            }
        }
        let due: Vec<usize> = stops.iter().filter(|s| s.0 <= now).map(|s| s.1).collect();
        stops.retain(|s| s.0 > now);
        for idx in due {
            stop_bot(&shared, idx, now);
        }
    }

    // Polite shutdown: every bot sends its goodbye now.
    let now = Instant::now();
    let count = shared.slots.borrow().len();
    for idx in 0..count {
        stop_bot(&shared, idx, now);
    }
    intervals.abort();
    let (ever_connected, failed) = {
        let slots = shared.slots.borrow();
        let ever = slots.iter().filter(|s| s.ever_connected).count() as u64;
        let failed = slots
            .iter()
            .filter(|s| {
                !s.ever_connected && (s.transport_failed || s.bot.phase() == BotPhase::Failed)
            })
            .count() as u64;
        (ever, failed)
    };
    let socket_failures = shared.rec.borrow().connect_failures.get_prefix("socket");
    let rec = shared.rec.borrow_mut().take_interval();
    let _ = tx.send(WorkerMsg::Done {
        rec,
        ever_connected,
        failed: failed + socket_failures,
    });
}

fn spawn_udp_bot(
    shared: &Rc<Shared>,
    bot: Box<dyn Bot>,
    peer: SocketAddr,
    now: Instant,
) -> std::io::Result<usize> {
    let sock = Rc::new(BotSocket::connect_to(peer)?);
    let idx = {
        let mut slots = shared.slots.borrow_mut();
        slots.push(Slot {
            bot,
            link: Link::Udp(sock.clone()),
            timer_gen: 0,
            scheduled: None,
            ever_connected: false,
            transport_failed: false,
            closing: false,
        });
        slots.len() - 1
    };
    shared.drive(idx, now, |bot, rec| bot.start(now, rec));
    tokio::task::spawn_local(recv_loop(shared.clone(), idx, sock));
    Ok(idx)
}

/// Put the bot on an ENet host with room (one socket per `per_socket` bots) and start the
/// ENet connection; the bot itself starts when ENet reports `Connected`.
fn spawn_enet_bot(
    shared: &Rc<Shared>,
    bot: Box<dyn Bot>,
    peer_addr: SocketAddr,
    channels: usize,
    cfg: &EnetConfig,
    now: Instant,
) -> std::io::Result<usize> {
    let per_socket = cfg.peer_limit;
    let open = shared
        .groups
        .borrow()
        .iter()
        .position(|g| g.peer_addr == peer_addr && g.members < per_socket);
    let gi = match open {
        Some(gi) => gi,
        None => {
            let sock = Rc::new(BotSocket::connect_to(peer_addr)?);
            let host = EnetHost::new(now, cfg).map_err(|e| std::io::Error::other(e.to_string()))?;
            let mut groups = shared.groups.borrow_mut();
            groups.push(Group {
                sock: sock.clone(),
                peer_addr,
                host,
                peers: vec![None; per_socket],
                members: 0,
                timer_gen: 0,
                scheduled: None,
            });
            let gi = groups.len() - 1;
            tokio::task::spawn_local(group_recv_loop(shared.clone(), gi, sock));
            gi
        }
    };
    let slot_idx = shared.slots.borrow().len();
    let peer = {
        let mut groups = shared.groups.borrow_mut();
        let g = &mut groups[gi];
        let peer = g
            .host
            .connect(now, peer_addr, channels, slot_idx as u32)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Some(p) = g.peers.get_mut(peer.index()) {
            *p = Some(slot_idx);
        }
        g.members += 1;
        peer
    };
    shared.slots.borrow_mut().push(Slot {
        bot,
        link: Link::Enet { group: gi, peer },
        timer_gen: 0,
        scheduled: None,
        ever_connected: false,
        transport_failed: false,
        closing: false,
    });
    {
        let mut groups = shared.groups.borrow_mut();
        let g = &mut groups[gi];
        let mut buf = shared.tx_buf.borrow_mut();
        let mut rec = shared.rec.borrow_mut();
        flush_group(g, now, &mut buf, &mut rec);
        shared.rearm_group(gi, g);
    }
    Ok(slot_idx)
}

/// Stop a bot: the protocol's goodbye, then (ENet) the transport's disconnect.
fn stop_bot(shared: &Rc<Shared>, idx: usize, now: Instant) {
    shared.drive(idx, now, |bot, rec| bot.stop(now, rec));
    let enet = match shared.slots.borrow_mut().get_mut(idx) {
        Some(s) if !s.closing => match s.link {
            Link::Enet { group, peer } => {
                s.closing = true;
                Some((group, peer))
            }
            Link::Udp(_) => None,
        },
        _ => None,
    };
    if let Some((gi, peer)) = enet {
        let mut groups = shared.groups.borrow_mut();
        if let Some(g) = groups.get_mut(gi) {
            let _ = g.host.disconnect(now, peer, 0);
            let mut buf = shared.tx_buf.borrow_mut();
            let mut rec = shared.rec.borrow_mut();
            flush_group(g, now, &mut buf, &mut rec);
        }
    }
}

async fn recv_loop(shared: Rc<Shared>, idx: usize, sock: Rc<BotSocket>) {
    loop {
        let Ok(mut ready) = sock.readable().await else {
            return;
        };
        loop {
            let mut rx = shared.rx.borrow_mut();
            match ready.recv(&mut rx) {
                Ok(n) => {
                    // One clock read for the batch.
                    let now = Instant::now();
                    for d in rx.datagrams(n) {
                        shared.drive(idx, now, |bot, rec| bot.handle_datagram(now, d, rec));
                    }
                    if n < RECV_BATCH {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Connected UDP reports ICMP errors (closed port) here, once each.
                    shared
                        .rec
                        .borrow_mut()
                        .send_errors
                        .add2("recv", error_name(&e), 1);
                }
            }
        }
        let finished = shared
            .slots
            .borrow()
            .get(idx)
            .is_none_or(|s| matches!(s.bot.phase(), BotPhase::Failed | BotPhase::Closed));
        if finished {
            return;
        }
    }
}

async fn group_recv_loop(shared: Rc<Shared>, gi: usize, sock: Rc<BotSocket>) {
    loop {
        let Ok(mut ready) = sock.readable().await else {
            return;
        };
        let mut got = false;
        let mut now = Instant::now();
        loop {
            let mut rx = shared.rx.borrow_mut();
            match ready.recv(&mut rx) {
                Ok(n) => {
                    now = Instant::now();
                    got = true;
                    let mut groups = shared.groups.borrow_mut();
                    if let Some(g) = groups.get_mut(gi) {
                        let from = g.peer_addr;
                        for d in rx.datagrams(n) {
                            g.host.handle_datagram(now, from, d);
                        }
                    }
                    if n < RECV_BATCH {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    shared
                        .rec
                        .borrow_mut()
                        .send_errors
                        .add2("recv", error_name(&e), 1);
                }
            }
        }
        if got {
            shared.service_group(gi, now);
        }
    }
}

async fn timer_loop(shared: Rc<Shared>) {
    let precise = PreciseTimer::new().ok();
    loop {
        let next = shared.timers.borrow().peek().map(|r| r.0 .0);
        shared.timer_target.set(next);
        let sleep_until = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        match &precise {
            Some(t) => tokio::select! {
                _ = shared.timer_wake.notified() => continue,
                _ = timer::sleep_until(t, sleep_until) => {}
            },
            None => tokio::select! {
                _ = shared.timer_wake.notified() => continue,
                _ = tokio::time::sleep_until(sleep_until.into()) => {}
            },
        }
        let now = Instant::now();
        loop {
            let top = shared.timers.borrow().peek().copied();
            let Some(Reverse((at, target, generation))) = top else {
                break;
            };
            if at > now {
                break;
            }
            shared.timers.borrow_mut().pop();
            if target & GROUP_BIT != 0 {
                let gi = (target & !GROUP_BIT) as usize;
                let current = shared.groups.borrow_mut().get_mut(gi).is_some_and(|g| {
                    let cur = g.timer_gen == generation;
                    if cur {
                        g.scheduled = None;
                    }
                    cur
                });
                if current {
                    shared.service_group(gi, now);
                }
                continue;
            }
            let idx = target as usize;
            let current = shared.slots.borrow_mut().get_mut(idx).is_some_and(|s| {
                let cur = s.timer_gen == generation;
                if cur {
                    s.scheduled = None;
                }
                cur
            });
            if current {
                shared.drive(idx, now, |bot, rec| bot.handle_timeout(now, rec));
            }
        }
    }
}

async fn interval_loop(shared: Rc<Shared>, run_start: Instant, tx: Sender<WorkerMsg>) {
    let mut index = 0u64;
    loop {
        let at = run_start + Duration::from_secs(index + 1);
        tokio::time::sleep_until(at.into()).await;
        let connected_now = {
            let slots = shared.slots.borrow();
            let groups = shared.groups.borrow();
            let mut rec = shared.rec.borrow_mut();
            let mut connected = 0u64;
            for s in slots.iter() {
                if s.bot.phase() != BotPhase::Connected {
                    continue;
                }
                connected += 1;
                // The transport's own view, next to the protocol's: one sample per bot a second.
                if let Link::Enet { group, peer } = s.link {
                    if let Some(g) = groups.get(group) {
                        if let Some(rtt) = g.host.rtt(peer) {
                            rec.record_extra("enet_rtt_us", rtt.as_micros() as u64);
                        }
                        if let Some(loss) = g.host.packet_loss(peer) {
                            rec.record_extra("enet_packet_loss_ppm", (loss * 1e6) as u64);
                        }
                    }
                }
            }
            connected
        };
        let rec = shared.rec.borrow_mut().take_interval();
        if tx
            .send(WorkerMsg::Interval {
                index,
                rec,
                connected_now,
            })
            .is_err()
        {
            return;
        }
        index += 1;
    }
}
