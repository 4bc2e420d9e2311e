//! One worker: an OS thread with a current-thread tokio runtime that owns a shard of bots,
//! their sockets, one timer queue and one metric recorder.
//!
//! Nothing here is shared with other threads except the channel to the collector and the
//! stop signal. Bots are driven synchronously from two kinds of tasks: one receive task per
//! socket (woken by readiness) and one timer task per worker (woken by the earliest
//! deadline). Each wake-up reads the clock once for the whole batch it handles.
//!
//! A bot reaches its server through the [`BotTransport`] its protocol needs (its own UDP
//! socket, a peer of an ENet host shared by `bots_per_socket` bots, ...). The worker is
//! generic over it: it watches the sources the transport opens, runs their timers, and hands
//! the transport's [`LinkEvents`] to the bots. Protocols never see which transport it is.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::io::socket::bot::{BotRx, BotSocket, RECV_BATCH};
use super::io::socket::error_name;
use super::io::{
    self, BotTransport, BotTransportOptions, LinkEvent, LinkEvents, Source, Watch, WithBotTransport,
};
use super::timer::{self, PreciseTimer};
use super::timer_wheel::TimerQueue;
use crate::metrics::phases::MAX_TARGETS;
use crate::metrics::{Phase, PhaseCounts, Recorder, TargetPoint, Waiting};
use crate::protocol::{Bot, BotParams, BotPhase, MAX_DATAGRAM, MAX_MESSAGE};
use crate::scenario::lifecycle::LATE_JOIN;
use crate::scenario::{ProtocolSection, SpawnEvent, SpawnKind, StopKind};
use crate::transport::MAX_ENET_DATAGRAM;

/// What a worker runs.
pub struct WorkerSpec {
    /// Sorted by start time: each bot's schedule, parameters, server and source address.
    pub bots: Vec<(SpawnEvent, BotParams, SocketAddr, Option<IpAddr>)>,
    pub protocol: ProtocolSection,
    pub run_start: Instant,
    pub run_end: Instant,
    pub transport: BotTransportOptions,
    /// Which worker this is (0-based), for its per-second CPU time.
    pub id: usize,
    /// How many groups the plan has: the worker keeps a recorder for each.
    pub groups: usize,
    /// `engine.timer_coalesce`: bots' timers fire on a grid of this step from `run_start`
    /// (`None`: each at its own instant). See [`super::timer_wheel`].
    pub timer_step: Option<crate::scenario::TimerStep>,
}

/// Worker to collector.
pub enum WorkerMsg {
    /// Interval `index` (second `index + 1` of the run) is complete.
    Interval {
        index: u64,
        /// The second's figures, all groups together.
        rec: Recorder,
        /// The same per group, when the plan has more than one (else empty: `rec` is the
        /// one group's).
        groups: Vec<Recorder>,
        connected_now: u64,
        /// Of those, per group (empty with one group, as `groups`).
        connected_by_group: Vec<u64>,
        /// Bots per phase at the end of the interval, the groups still on their way in, and
        /// the same per target.
        census: Census,
        /// This worker's id and the CPU time its thread used in the interval (ns, user and
        /// system), from its previous reading to this one.
        worker: usize,
        cpu_ns: Option<u64>,
        /// The wall time that CPU time was used in (µs): the interval as the worker saw it,
        /// from its previous read to this one. A worker woken late on a busy machine reads
        /// more than a second, and its share of a core must be taken over that.
        span_us: u64,
    },
    /// The worker has stopped its bots; `rec` holds what came after the last interval.
    Done {
        /// This worker's id.
        worker: usize,
        rec: Recorder,
        /// `rec` and the bot counts per group, when the plan has more than one.
        groups: Vec<(Recorder, GroupBots)>,
        ever_connected: u64,
        failed: u64,
        /// Bots in play when the run ended.
        connected_now: u64,
        /// Bots that were in play and lost their session before the end.
        lost: u64,
        /// Bots in play at the end that had heard nothing for [`SILENT_AT_END`].
        silent_at_end: u64,
        /// Bots per phase when the run ended (before the engine stopped them).
        census: Census,
        /// Bots that were ever in play, per group and source address (with a pool:
        /// `engine.source_addresses` or a group's own).
        connected_by_source: Vec<(usize, IpAddr, u64)>,
        /// The CPU time the worker's thread used since its last interval's reading (ns): the
        /// run's last, partial second and the sessions' close, so that the intervals' and
        /// this add up to the thread's whole run.
        cpu_ns: Option<u64>,
    },
}

/// A group's bots at the end of one worker's run.
pub type GroupBots = crate::metrics::groups::GroupBots;

/// Where a worker's bots are, taken once a second.
#[derive(Debug, Default)]
pub struct Census {
    pub phases: PhaseCounts,
    pub waiting: Vec<Waiting>,
    /// Per target, or empty past [`MAX_TARGETS`] targets.
    pub targets: Vec<TargetPoint>,
    /// More than [`MAX_TARGETS`] targets: no per-target figures this second.
    pub too_many_targets: bool,
}

pub(super) struct Slot {
    bot: Box<dyn Bot>,
    /// The bot's group: which recorder its figures go to.
    group: usize,
    /// The server the bot plays on (a relink without an address returns to it).
    peer: SocketAddr,
    /// The address its sockets bind to (`engine.source_addresses`), relinks included.
    source_ip: Option<IpAddr>,
    /// The transport source carrying this bot.
    source: Source,
    /// The bot's place in the worker's timer queue.
    timer: TimerEntry,
    ever_connected: bool,
    /// The transport never came up (its handshake failed), so the bot never started.
    transport_failed: bool,
    /// The transport was asked to close the bot's session.
    closing: bool,
    /// Application bytes sent and received in the current second.
    second_up: u64,
    second_down: u64,
    /// Snapshots the server sent the bot in the current second (`Recorder::snapshots_sent`
    /// as the bot moved it), and whether its protocol counts them at all.
    second_snapshots: u32,
    counts_snapshots: bool,
    /// In play when the current second began: only such a second is a whole second of a
    /// bot's traffic for the per-bot bytes/s histograms (the second a bot connects in holds
    /// a fraction of one, and drew their low percentiles down).
    in_play_at_second_start: bool,
    /// When the bot last received anything.
    last_rx: Option<Instant>,
    /// The engine is stopping this bot (ramp-down or the end of the run).
    stopping: bool,
    /// In play, then its session ended without the engine stopping it.
    lost: bool,
    /// When the transport was asked for a session that needs its own handshake (ENet), until
    /// the bot is first in play: the transport and protocol handshakes are timed apart.
    opened_at: Option<Instant>,
    /// A new transport session was asked for (relink) and is not up yet.
    relinking: bool,
    /// A storm's reconnection: when its bot's old session was dropped, until it is in play
    /// again (then the way back is timed and counted, see [`count_comeback`]).
    back_from: Option<Instant>,
    /// The phase (and awaited message) the last once-a-second census saw, and since when.
    seen: (Phase, Option<&'static str>),
    seen_since: Instant,
}

impl Slot {
    /// The bot's phase: the protocol's view, with what only the engine sees (the transport's
    /// handshake and failures, a relink under way) laid over it.
    fn life_phase(&self) -> Phase {
        match self.bot.life_phase() {
            Phase::Connecting if self.transport_failed => Phase::Failed,
            Phase::Connecting if self.closing => Phase::Closed,
            Phase::Connecting if self.opened_at.is_some() => Phase::TransportHandshake,
            p if self.relinking && !matches!(p, Phase::Failed | Phase::Closed) => {
                Phase::Reconnecting
            }
            p => p,
        }
    }

    /// The phase and, on the way in, the message the bot waits for.
    fn observed(&self) -> (Phase, Option<&'static str>) {
        let phase = self.life_phase();
        let what = match phase {
            Phase::ProtocolHandshake | Phase::Content | Phase::Reconnecting => {
                self.bot.waiting_for()
            }
            _ => None,
        };
        (phase, what)
    }
}

/// A bot's or a source's place in the worker's timer queue: the deadline it asked for, and the
/// generation of its current entry there. Entries are never removed from the queue; one whose
/// generation is no longer current is stale and skipped when it comes due.
#[derive(Default, Clone, Copy)]
struct TimerEntry {
    generation: u32,
    scheduled: Option<Instant>,
}

impl TimerEntry {
    /// Ask for `next` instead: `Some((generation, at))` when a new entry is to be armed;
    /// `None` when the deadline is unchanged or gone (a changed one makes older entries stale).
    fn reschedule(&mut self, next: Option<Instant>) -> Option<(u32, Instant)> {
        if next == self.scheduled {
            return None;
        }
        self.cancel();
        self.scheduled = next;
        next.map(|at| (self.generation, at))
    }

    /// The entry of `generation` came due: `true`, and the deadline spent, if it is the
    /// current one.
    fn fire(&mut self, generation: u32) -> bool {
        let current = self.generation == generation;
        if current {
            self.scheduled = None;
        }
        current
    }

    /// No deadline: every entry in the queue is stale.
    fn cancel(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.scheduled = None;
    }
}

/// A bot in play that has heard nothing for this long when the run ends is counted silent:
/// every protocol here streams snapshots many times a second.
const SILENT_AT_END: Duration = Duration::from_secs(1);

/// Longest a worker waits at the end for its sessions to close.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Timer targets: a bot slot, or a transport source with this bit set.
const SOURCE_BIT: u32 = 1 << 31;

pub(super) struct Shared<T> {
    slots: RefCell<Vec<Slot>>,
    sources: RefCell<Vec<TimerEntry>>,
    /// A source has asked for a timer at least once (`sources` holds something).
    source_timers: Cell<bool>,
    transport: RefCell<T>,
    /// One recorder per group: a bot's figures go to its group's, a source's to the group of
    /// its bots (transports never mix groups on one source).
    recs: RefCell<Vec<Recorder>>,
    /// The group of each source.
    source_groups: RefCell<Vec<usize>>,
    /// Every armed `(target, generation)`: a heap by deadline, or with a step a wheel by step.
    timers: RefCell<TimerQueue>,
    /// The deadline the timer task sleeps until; an earlier one must wake it.
    timer_target: Cell<Option<Instant>>,
    timer_wake: Notify,
    tx_buf: RefCell<Vec<u8>>,
    rx: RefCell<BotRx>,
    /// Link events from the transport before the bots handle them (reused).
    events: RefCell<LinkEvents>,
    /// The task watching each source, to stop when the transport retires it.
    watchers: RefCell<Vec<Option<tokio::task::AbortHandle>>>,
    /// The thread's CPU clock (ns) at its last reading: the interval task reads it once a
    /// second and the worker's end once more, each handing in the CPU used since.
    cpu_read: Cell<Option<u64>>,
}

impl<T: BotTransport + 'static> Shared<T> {
    /// The CPU time this thread used since the last call (ns), and the clock read for the
    /// next: one `clock_gettime` a call, made once a second and once at the end. `None` when
    /// the clock could not be read, now or last time.
    fn cpu_since_last_read(&self) -> Option<u64> {
        let now = super::health::thread_cpu_ns();
        let before = self.cpu_read.replace(now);
        now.zip(before).map(|(n, b)| n.saturating_sub(b))
    }

    /// Group `g`'s recorder.
    fn rec(&self, g: usize) -> std::cell::RefMut<'_, Recorder> {
        std::cell::RefMut::map(self.recs.borrow_mut(), |v| {
            let last = v.len().saturating_sub(1);
            &mut v[g.min(last)]
        })
    }

    /// The group of bot `idx`.
    fn group_of_slot(&self, idx: usize) -> usize {
        self.slots.borrow().get(idx).map_or(0, |s| s.group)
    }

    /// The group of source `src`'s bots.
    fn group_of_source(&self, src: Source) -> usize {
        self.source_groups.borrow().get(src).copied().unwrap_or(0)
    }

    /// Remember that `src` carries bots of group `g`.
    fn set_source_group(&self, src: Source, g: usize) {
        let mut v = self.source_groups.borrow_mut();
        if v.len() <= src {
            v.resize(src + 1, 0);
        }
        v[src] = g;
    }

    fn arm(&self, target: u32, generation: u32, at: Instant) {
        // Compared as the timer loop will serve it: a deadline in the step already armed
        // needs no wake-up (it would only re-arm the same instant).
        let served = self.timers.borrow_mut().push(at, (target, generation));
        if self.timer_target.get().is_none_or(|t| served < t) {
            self.timer_wake.notify_one();
        }
    }

    /// Run `f` on bot `idx`, hand what it queued to the transport, and re-arm its timers.
    fn drive(
        self: &Rc<Self>,
        idx: usize,
        now: Instant,
        f: impl FnOnce(&mut dyn Bot, &mut Recorder),
    ) {
        let (source, relink) = {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(idx) else {
                return;
            };
            let mut rec = self.rec(slot.group);
            let sent_before = rec.snapshots_sent;
            f(slot.bot.as_mut(), &mut rec);
            let sent = rec.snapshots_sent.wrapping_sub(sent_before);
            if sent > 0 {
                slot.second_snapshots = slot.second_snapshots.saturating_add(sent as u32);
                slot.counts_snapshots = true;
            }
            let mut buf = self.tx_buf.borrow_mut();
            let mut transport = self.transport.borrow_mut();
            while let Some(t) = slot.bot.poll_transmit(&mut buf) {
                let bytes = &buf[..t.len.min(buf.len())];
                slot.second_up += bytes.len() as u64;
                transport.send(idx, &t, bytes, now, &mut rec);
            }
            transport.flush(idx, now, &mut rec);
            // A bot that ended closes its session politely, after its last words.
            let ended = matches!(slot.bot.phase(), BotPhase::Failed | BotPhase::Closed);
            if ended && !slot.closing {
                slot.closing = true;
                transport.close(idx, now, &mut rec);
            }
            if slot.bot.phase() == BotPhase::Connected {
                if let Some(dropped_at) = slot.back_from.take() {
                    count_comeback(&mut rec, slot.bot.resumed(), dropped_at, now);
                }
                if !slot.ever_connected {
                    if let Some(at) = slot.opened_at.take() {
                        // Transport handshake plus protocol handshake: what a player waits.
                        rec.record_extra(
                            "connect_total_us",
                            now.saturating_duration_since(at).as_micros() as u64,
                        );
                    }
                }
                slot.ever_connected = true;
            }
            if ended && slot.ever_connected && !slot.stopping {
                slot.lost = true;
            }
            let next = slot.bot.poll_timeout();
            if let Some((generation, at)) = slot.timer.reschedule(next) {
                self.arm(idx as u32, generation, at);
            }
            let relink = if ended { None } else { slot.bot.poll_relink() };
            (slot.source, relink.map(|r| r.to.unwrap_or(slot.peer)))
        };
        self.rearm_source(source);
        if let Some(to) = relink {
            self.relink(idx, to, now);
        }
    }

    /// Move bot `idx` to a new link to `to` (a reconnection, or a zone handoff).
    fn relink(self: &Rc<Self>, idx: usize, to: SocketAddr, now: Instant) {
        let source_ip = self.slots.borrow().get(idx).and_then(|s| s.source_ip);
        let group = self.group_of_slot(idx);
        let opened = {
            let mut rec = self.rec(group);
            self.transport
                .borrow_mut()
                .relink(idx, group, to, source_ip, now, &mut rec)
        };
        self.retire_sources();
        match opened {
            Ok(opened) => {
                self.set_source_group(opened.source, group);
                if let Some(s) = self.slots.borrow_mut().get_mut(idx) {
                    s.peer = to;
                    s.source = opened.source;
                    s.relinking = !opened.up;
                    // A new session to close at the end, even if the old one ended.
                    s.closing = false;
                }
                self.watch(opened.source, opened.watch);
                if opened.up {
                    self.drive(idx, now, |bot, rec| bot.handle_relinked(now, rec));
                }
                self.rearm_source(opened.source);
            }
            Err(e) => {
                self.rec(group)
                    .connect_failures
                    .add2("relink", error_name(&e), 1);
                self.drive(idx, now, |bot, rec| bot.handle_transport_closed(now, rec));
            }
        }
    }

    /// Start watching a new source.
    fn watch(self: &Rc<Self>, src: Source, watch: Option<Watch>) {
        let task = match watch {
            Some(Watch::Socket(sock)) => {
                tokio::task::spawn_local(recv_loop(self.clone(), src, sock))
            }
            None => return,
        };
        let mut w = self.watchers.borrow_mut();
        if w.len() <= src {
            w.resize(src + 1, None);
        }
        w[src] = Some(task.abort_handle());
    }

    /// Stop watching the sources the transport no longer uses.
    fn retire_sources(&self) {
        loop {
            let Some(src) = self.transport.borrow_mut().poll_retired() else {
                break;
            };
            if let Some(task) = self
                .watchers
                .borrow_mut()
                .get_mut(src)
                .and_then(Option::take)
            {
                task.abort();
            }
        }
    }

    fn rearm_source(&self, src: Source) {
        let next = self.transport.borrow().poll_timeout(src);
        // No source has had a timer yet (raw UDP without `network:`): nothing to arm or
        // cancel, and the table (a cache miss per bot per tick) stays untouched.
        if next.is_none() && !self.source_timers.get() {
            return;
        }
        self.source_timers.set(true);
        let mut sources = self.sources.borrow_mut();
        if sources.len() <= src {
            sources.resize(src + 1, TimerEntry::default());
        }
        if let Some((generation, at)) = sources[src].reschedule(next) {
            self.arm(src as u32 | SOURCE_BIT, generation, at);
        }
    }

    /// The end of a wake-up, before the worker waits: the transport puts what it batched on
    /// the wire (one system call for many bots' datagrams) and counts it.
    fn submit(&self) {
        let mut recs = self.recs.borrow_mut();
        self.transport.borrow_mut().submit(&mut recs);
    }

    /// Hand the events the transport produced to their bots.
    fn dispatch(self: &Rc<Self>, now: Instant) {
        let mut events = std::mem::take(&mut *self.events.borrow_mut());
        for i in 0..events.len() {
            let Some((idx, ev, bytes)) = events.get(i) else {
                break;
            };
            match ev {
                LinkEvent::Up => {
                    let first = self
                        .slots
                        .borrow()
                        .get(idx)
                        .is_some_and(|s| s.bot.phase() == BotPhase::Idle);
                    if first {
                        let opened = self.slots.borrow().get(idx).and_then(|s| s.opened_at);
                        if let Some(at) = opened {
                            self.rec(self.group_of_slot(idx)).record_extra(
                                "transport_handshake_us",
                                now.saturating_duration_since(at).as_micros() as u64,
                            );
                        }
                        self.drive(idx, now, |bot, rec| bot.start(now, rec));
                    } else {
                        if let Some(s) = self.slots.borrow_mut().get_mut(idx) {
                            s.relinking = false;
                        }
                        self.drive(idx, now, |bot, rec| bot.handle_relinked(now, rec));
                    }
                }
                LinkEvent::Data(_) => {
                    // A bot that has ended has left the session: what still arrives for it is
                    // not its business.
                    let live = self.slots.borrow_mut().get_mut(idx).is_some_and(|s| {
                        s.second_down += bytes.len() as u64;
                        s.last_rx = Some(now);
                        !matches!(s.bot.phase(), BotPhase::Failed | BotPhase::Closed)
                    });
                    if live {
                        self.drive(idx, now, |bot, rec| {
                            rec.datagram_down(bytes.len());
                            bot.handle_datagram(now, bytes, rec)
                        });
                    }
                }
                LinkEvent::Stream(_) => {
                    // As a datagram: bytes the bot's login stream carried.
                    let live = self.slots.borrow_mut().get_mut(idx).is_some_and(|s| {
                        s.second_down += bytes.len() as u64;
                        s.last_rx = Some(now);
                        !matches!(s.bot.phase(), BotPhase::Failed | BotPhase::Closed)
                    });
                    if live {
                        self.drive(idx, now, |bot, rec| bot.handle_stream(now, bytes, rec));
                    }
                }
                LinkEvent::Down(why) => {
                    let never_started = self
                        .slots
                        .borrow()
                        .get(idx)
                        .is_some_and(|s| s.bot.phase() == BotPhase::Idle);
                    let ended = self.slots.borrow().get(idx).is_some_and(|s| {
                        matches!(s.bot.phase(), BotPhase::Failed | BotPhase::Closed)
                    });
                    if ended {
                        // The close it asked for, or the end of a session it already left.
                        continue;
                    }
                    let timed_out = self
                        .slots
                        .borrow()
                        .get(idx)
                        .is_some_and(|s| s.transport_failed);
                    if timed_out {
                        // Already counted when its handshake_timeout passed.
                        continue;
                    }
                    if never_started {
                        if let Some(s) = self.slots.borrow_mut().get_mut(idx) {
                            s.transport_failed = true;
                            s.closing = true;
                        }
                        self.rec(self.group_of_slot(idx)).connect_failures.add2(
                            T::NAME,
                            why.as_str(),
                            1,
                        );
                    } else {
                        if let Some(s) = self.slots.borrow_mut().get_mut(idx) {
                            // The session is gone: nothing left to close.
                            s.closing = true;
                            s.relinking = false;
                        }
                        self.drive(idx, now, |bot, rec| bot.handle_transport_closed(now, rec));
                    }
                }
            }
        }
        events.clear();
        *self.events.borrow_mut() = events;
    }

    /// Datagrams for source `src`, then the events they caused.
    fn on_datagrams(self: &Rc<Self>, src: Source, now: Instant, n: usize) {
        {
            let rx = self.rx.borrow();
            let mut rec = self.rec(self.group_of_source(src));
            for size in rx.sizes(n) {
                rec.wire_down(size);
            }
            let (cut, bytes) = rx.truncated(n);
            if cut > 0 {
                // Counted by its own reason at its real size, never as the server's malformed
                // message: the bot never sees it.
                rec.send_errors.add2("recv", "truncated", cut);
                rec.events.add("truncated_bytes", bytes);
            }
            let mut events = self.events.borrow_mut();
            self.transport.borrow_mut().on_datagrams(
                src,
                now,
                rx.datagrams(n),
                &mut rec,
                &mut events,
            );
        }
        self.dispatch(now);
        self.rearm_source(src);
    }

    /// Count the bots per phase, group those on their way in by what they wait for, and
    /// count both per target with the second's bytes (read before the interval resets them):
    /// once a second, one pass over the bots (two virtual calls each), nothing per packet.
    fn census(&self, now: Instant) -> Census {
        let mut counts = PhaseCounts::default();
        let mut groups: Vec<(Phase, Option<&'static str>, u64, Instant)> = Vec::new();
        let mut targets: Vec<(SocketAddr, PhaseCounts, u64, u64)> = Vec::new();
        let mut too_many_targets = false;
        for s in self.slots.borrow_mut().iter_mut() {
            let (phase, what) = s.observed();
            counts.add(phase, 1);
            if !too_many_targets {
                let at = match targets.iter().position(|t| t.0 == s.peer) {
                    Some(i) => Some(i),
                    None if targets.len() < MAX_TARGETS => {
                        targets.push((s.peer, PhaseCounts::default(), 0, 0));
                        Some(targets.len() - 1)
                    }
                    None => None,
                };
                match at.and_then(|i| targets.get_mut(i)) {
                    Some(t) => {
                        t.1.add(phase, 1);
                        t.2 += s.second_up;
                        t.3 += s.second_down;
                    }
                    None => too_many_targets = true,
                }
            }
            if !phase.is_waiting() {
                s.seen = (phase, None);
                continue;
            }
            if s.seen != (phase, what) {
                s.seen = (phase, what);
                s.seen_since = now;
            }
            match groups.iter_mut().find(|g| g.0 == phase && g.1 == what) {
                Some(g) => {
                    g.2 += 1;
                    g.3 = g.3.min(s.seen_since);
                }
                None => groups.push((phase, what, 1, s.seen_since)),
            }
        }
        let waiting = groups
            .into_iter()
            .map(|(phase, what, bots, since)| Waiting {
                phase,
                what: what.map(str::to_string),
                bots,
                // Seen once a second: to the nearest second.
                longest_s: now.saturating_duration_since(since).as_secs_f64().round() as u64,
            })
            .collect();
        let targets = if too_many_targets {
            Vec::new()
        } else {
            targets
                .into_iter()
                .map(|(addr, phases, up, down)| TargetPoint {
                    target: addr.to_string(),
                    phases,
                    bytes_up: up,
                    bytes_down: down,
                })
                .collect()
        };
        Census {
            phases: counts,
            waiting,
            targets,
            too_many_targets,
        }
    }

    fn on_source_timer(self: &Rc<Self>, src: Source, now: Instant) {
        {
            let mut rec = self.rec(self.group_of_source(src));
            let mut events = self.events.borrow_mut();
            self.transport
                .borrow_mut()
                .on_timer(src, now, &mut rec, &mut events);
        }
        self.dispatch(now);
        self.rearm_source(src);
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
                worker: spec.id,
                rec: Recorder::new(),
                groups: Vec::new(),
                ever_connected: 0,
                failed: spec.bots.len() as u64,
                connected_now: 0,
                lost: 0,
                silent_at_end: 0,
                census: Census::default(),
                connected_by_source: Vec::new(),
                cpu_ns: None,
            });
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let needs = spec.protocol.transport();
    let opts = spec.transport.clone();
    let start = WorkerStart { spec, tx, stop };
    io::run_bots(
        needs,
        opts,
        RunOn {
            rt: &rt,
            local: &local,
            start,
        },
    );
}

struct WorkerStart {
    spec: WorkerSpec,
    tx: Sender<WorkerMsg>,
    stop: watch::Receiver<bool>,
}

/// Runs the worker with the transport the protocol needs, on this thread's runtime.
struct RunOn<'a> {
    rt: &'a tokio::runtime::Runtime,
    local: &'a tokio::task::LocalSet,
    start: WorkerStart,
}

impl WithBotTransport for RunOn<'_> {
    type Output = ();
    fn run<T: BotTransport + 'static>(self, transport: T) {
        let WorkerStart { spec, tx, stop } = self.start;
        self.local
            .block_on(self.rt, worker_main(spec, transport, tx, stop));
    }
}

async fn worker_main<T: BotTransport + 'static>(
    spec: WorkerSpec,
    transport: T,
    tx: Sender<WorkerMsg>,
    mut stop: watch::Receiver<bool>,
) {
    let shared = Rc::new(Shared {
        slots: RefCell::new(Vec::with_capacity(spec.bots.len())),
        sources: RefCell::new(Vec::new()),
        source_timers: Cell::new(false),
        transport: RefCell::new(transport),
        recs: RefCell::new((0..spec.groups.max(1)).map(|_| Recorder::new()).collect()),
        source_groups: RefCell::new(Vec::new()),
        timers: RefCell::new(TimerQueue::new(
            spec.run_start,
            spec.timer_step,
            spec.bots.len() * 2,
        )),
        timer_target: Cell::new(None),
        timer_wake: Notify::new(),
        tx_buf: RefCell::new(vec![
            0u8;
            MAX_DATAGRAM.max(MAX_ENET_DATAGRAM).max(MAX_MESSAGE)
        ]),
        rx: RefCell::new(BotRx::default()),
        events: RefCell::new(LinkEvents::default()),
        watchers: RefCell::new(Vec::new()),
        cpu_read: Cell::new(super::health::thread_cpu_ns()),
    });

    tokio::task::spawn_local(timer_loop(shared.clone()));
    let intervals = tokio::task::spawn_local(interval_loop(
        shared.clone(),
        spec.run_start,
        tx.clone(),
        spec.id,
    ));

    // Spawn bots on schedule; stop them on ramp-down; end at run_end or on the stop signal.
    let mut stops: Vec<(Instant, usize, StopKind, u32)> = Vec::new();
    // Bots the storm dropped, by bot index, until their reconnection starts: what the bot
    // needs to resume its session (`Bot::resume_state`), and when it was dropped. The plan
    // deals a reconnection to the worker of the session it replaces (engine/mod.rs).
    let mut dropped: HashMap<u32, (Option<Vec<u8>>, Instant)> = HashMap::new();
    // Bots that got no socket (a source address not on this machine, no descriptors left):
    // counted here, since the recorder's counters are handed over every second.
    let groups = spec.groups.max(1);
    let mut socket_failures = vec![0u64; groups];
    // Transport handshakes (ENet's connect) still pending: the bot fails at its protocol's
    // handshake_timeout, not at the transport's own (ENet gives up after up to 30 s).
    let mut connect_deadlines: Vec<(Instant, usize)> = Vec::new();
    let mut pending = spec.bots.into_iter().peekable();
    let protocol = spec.protocol;
    loop {
        // A stop that came before this worker subscribed is seen here, not as a change.
        if *stop.borrow_and_update() {
            break;
        }
        let next_spawn = pending
            .peek()
            .map(|(ev, _, _, _)| spec.run_start + ev.start);
        let next_stop = (stops.iter().map(|s| s.0))
            .chain(connect_deadlines.iter().map(|s| s.0))
            .min();
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
        // Stops first: a session the storm drops, or one ending, leaves before its
        // reconnection or replacement (due at the same time) arrives.
        let due: Vec<(usize, StopKind, u32)> = (stops.iter())
            .filter(|s| s.0 <= now)
            .map(|s| (s.1, s.2, s.3))
            .collect();
        stops.retain(|s| s.0 > now);
        for (idx, kind, index) in due {
            let group = shared.group_of_slot(idx);
            match kind {
                StopKind::End => stop_bot(&shared, idx, now),
                StopKind::SessionEnd => {
                    shared.rec(group).event("lifecycle_session_ends");
                    stop_bot(&shared, idx, now);
                }
                StopKind::Drop => {
                    shared.rec(group).event("lifecycle_storm_drops");
                    let state = drop_bot(&shared, idx, now);
                    dropped.insert(index, (state, now));
                }
            }
        }
        while pending
            .peek()
            .is_some_and(|(ev, _, _, _)| spec.run_start + ev.start <= now)
        {
            let Some((ev, params, peer, source_ip)) = pending.next() else {
                break;
            };
            let handshake_timeout = params.handshake_timeout;
            let mut bot = protocol.make_bot(params);
            let back_from = match ev.kind {
                SpawnKind::Reconnect => dropped.remove(&ev.index).map(|(state, at)| {
                    if let Some(state) = state {
                        bot.resume_from(&state);
                    }
                    at
                }),
                _ => None,
            };
            let group = usize::from(ev.group).min(groups - 1);
            count_spawn(&mut shared.rec(group), &ev, now, spec.run_start);
            match spawn_bot(&shared, bot, group, peer, source_ip, now) {
                Ok(idx) => {
                    if let Some(s) = shared.slots.borrow_mut().get_mut(idx) {
                        s.back_from = back_from;
                    }
                    let pending_transport =
                        shared.slots.borrow().get(idx).is_some_and(|s| {
                            s.opened_at.is_some() && s.bot.phase() == BotPhase::Idle
                        });
                    if pending_transport {
                        connect_deadlines.push((now + handshake_timeout, idx));
                    }
                    if let Some(stop_at) = ev.stop {
                        stops.push((spec.run_start + stop_at, idx, ev.stop_kind, ev.index));
                    }
                }
                Err(e) => {
                    socket_failures[group] += 1;
                    let mut rec = shared.rec(group);
                    rec.connect_failures.add2("socket", error_name(&e), 1);
                }
            }
        }
        let due: Vec<usize> = connect_deadlines
            .iter()
            .filter(|s| s.0 <= now)
            .map(|s| s.1)
            .collect();
        connect_deadlines.retain(|s| s.0 > now);
        for idx in due {
            transport_connect_timeout(&shared, idx, now);
        }
        // The first datagrams of the bots that started, the goodbyes of those that ended.
        shared.submit();
    }

    // Let the receive tasks read what is already waiting before bots are judged silent: on a
    // busy machine the end of the run can come before they ran.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    // Polite shutdown: every bot sends its goodbye now.
    let now = Instant::now();
    // Per group: bots in play at the end, and of those the silent ones.
    let mut by_group = vec![GroupBots::default(); groups];
    for s in shared.slots.borrow().iter() {
        if s.bot.phase() != BotPhase::Connected {
            continue;
        }
        let g = &mut by_group[s.group.min(groups - 1)];
        g.connected_now += 1;
        if s.last_rx
            .is_none_or(|t| now.saturating_duration_since(t) >= SILENT_AT_END)
        {
            g.silent_at_end += 1;
        }
    }
    let census = shared.census(now);
    let count = shared.slots.borrow().len();
    for idx in 0..count {
        stop_bot(&shared, idx, now);
    }
    {
        // The goodbyes of every group's bots: counted in the first group's recorder (they
        // leave after the run's figures; the whole run's totals hold them either way).
        let mut rec = shared.rec(0);
        shared.transport.borrow_mut().finish(now, &mut rec);
    }
    shared.submit();
    intervals.abort();
    // Let the sessions close properly (ENet: the protocol's goodbye acknowledged, then ENet's
    // disconnect), so the server frees every slot at once instead of at its timeout; the
    // receive and timer tasks keep running meanwhile. Bounded: a dead server cannot hold the
    // run's end hostage.
    let deadline = now + CLOSE_GRACE;
    while !shared.transport.borrow().is_idle() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for s in shared.slots.borrow().iter() {
        let g = &mut by_group[s.group.min(groups - 1)];
        g.sessions += 1;
        if s.ever_connected {
            g.connected += 1;
        } else if s.transport_failed || s.bot.phase() == BotPhase::Failed {
            g.failed += 1;
        }
        if s.lost {
            g.lost += 1;
        }
    }
    for (g, n) in by_group.iter_mut().zip(&socket_failures) {
        g.failed += n;
        g.sessions += n;
    }
    let total = GroupBots::sum(&by_group);
    // Sorted, then counted per run of equal addresses (per group): a /8 pool gives every
    // bot its own.
    let mut ips: Vec<(usize, IpAddr)> = (shared.slots.borrow().iter())
        .filter(|s| s.ever_connected)
        .filter_map(|s| Some((s.group, s.source_ip?)))
        .collect();
    ips.sort_unstable();
    let mut connected_by_source: Vec<(usize, IpAddr, u64)> = Vec::new();
    for (g, ip) in ips {
        match connected_by_source.last_mut() {
            Some((lg, last, n)) if *lg == g && *last == ip => *n += 1,
            _ => connected_by_source.push((g, ip, 1)),
        }
    }
    let (rec, groups) = take_recorders(&shared.recs);
    let cpu_ns = shared.cpu_since_last_read();
    let _ = tx.send(WorkerMsg::Done {
        worker: spec.id,
        rec,
        groups: groups.into_iter().zip(by_group).collect(),
        ever_connected: total.connected,
        failed: total.failed,
        connected_now: total.connected_now,
        lost: total.lost,
        silent_at_end: total.silent_at_end,
        census,
        connected_by_source,
        cpu_ns,
    });
}

/// What every group recorded since the last call, all together and (with more than one
/// group) per group; the recorders start afresh. Once a second, off the hot path.
fn take_recorders(recs: &RefCell<Vec<Recorder>>) -> (Recorder, Vec<Recorder>) {
    let mut recs = recs.borrow_mut();
    if recs.len() == 1 {
        return (recs[0].take_interval(), Vec::new());
    }
    let per_group: Vec<Recorder> = recs.iter_mut().map(Recorder::take_interval).collect();
    let mut whole = Recorder::new();
    for r in &per_group {
        whole.merge(r);
    }
    (whole, per_group)
}

/// Give the bot a link to its server; it starts now (raw UDP) or when the transport's
/// session comes up.
fn spawn_bot<T: BotTransport + 'static>(
    shared: &Rc<Shared<T>>,
    bot: Box<dyn Bot>,
    group: usize,
    peer: SocketAddr,
    source_ip: Option<IpAddr>,
    now: Instant,
) -> std::io::Result<usize> {
    let idx = shared.slots.borrow().len();
    let opened = {
        let mut rec = shared.rec(group);
        shared
            .transport
            .borrow_mut()
            .open(idx, group, peer, source_ip, now, &mut rec)?
    };
    shared.set_source_group(opened.source, group);
    shared.slots.borrow_mut().push(Slot {
        bot,
        group,
        peer,
        source_ip,
        source: opened.source,
        timer: TimerEntry::default(),
        ever_connected: false,
        transport_failed: false,
        closing: false,
        second_up: 0,
        second_down: 0,
        second_snapshots: 0,
        counts_snapshots: false,
        in_play_at_second_start: false,
        last_rx: None,
        stopping: false,
        lost: false,
        opened_at: (!opened.up).then_some(now),
        relinking: false,
        back_from: None,
        seen: (Phase::Connecting, None),
        seen_since: now,
    });
    shared.watch(opened.source, opened.watch);
    if opened.up {
        shared.drive(idx, now, |bot, rec| bot.start(now, rec));
    }
    // Waiting starts now, not at the next census.
    if let Some(s) = shared.slots.borrow_mut().get_mut(idx) {
        s.seen = s.observed();
        s.seen_since = now;
    }
    shared.rearm_source(opened.source);
    Ok(idx)
}

/// A bot whose transport never came up within its handshake_timeout: counted failed
/// ("transport connect timed out") and its transport session abandoned.
fn transport_connect_timeout<T: BotTransport + 'static>(
    shared: &Rc<Shared<T>>,
    idx: usize,
    now: Instant,
) {
    let src = {
        let mut slots = shared.slots.borrow_mut();
        let Some(s) = slots.get_mut(idx) else { return };
        if s.bot.phase() != BotPhase::Idle || s.transport_failed || s.closing {
            return;
        }
        s.transport_failed = true;
        s.closing = true;
        s.opened_at = None;
        s.source
    };
    {
        let mut rec = shared.rec(shared.group_of_slot(idx));
        rec.connect_failures.add("transport connect timed out", 1);
        shared.transport.borrow_mut().close(idx, now, &mut rec);
    }
    shared.rearm_source(src);
}

/// Count a session the group's lifecycle started: an arrival (late if the generator started
/// it more than [`LATE_JOIN`] after its time), a replacement, a storm's reconnection.
fn count_spawn(rec: &mut Recorder, ev: &SpawnEvent, now: Instant, run_start: Instant) {
    match ev.kind {
        SpawnKind::Stage => {}
        SpawnKind::Arrival => {
            rec.event("lifecycle_arrivals");
            if now.saturating_duration_since(run_start + ev.start) > LATE_JOIN {
                rec.event("lifecycle_arrivals_late");
            }
        }
        SpawnKind::Replacement => rec.event("lifecycle_replacements"),
        SpawnKind::Reconnect => rec.event("lifecycle_storm_reconnects"),
    }
}

/// A storm's reconnection is in play again, `dropped_at` after its old session was dropped:
/// counted as resumed (the server took the old session back, `lifecycle_resume_us`) or, for a
/// bot whose token was refused and that joined anew or one whose protocol does not resume,
/// as rejoined (`lifecycle_rejoin_us`); `resumed` is the bot's [`Bot::resumed`].
fn count_comeback(rec: &mut Recorder, resumed: Option<bool>, dropped_at: Instant, now: Instant) {
    let us = now.saturating_duration_since(dropped_at).as_micros() as u64;
    match resumed {
        Some(true) => {
            rec.event("lifecycle_storm_resumed");
            rec.record_extra("lifecycle_resume_us", us);
        }
        refused => {
            if refused == Some(false) {
                rec.event("lifecycle_storm_resume_refused");
            }
            rec.event("lifecycle_storm_rejoined");
            rec.record_extra("lifecycle_rejoin_us", us);
        }
    }
}

/// A bot that has left without a word (the reconnect storm): nothing more goes out or comes
/// in for it, and it counts as closed.
struct Dropped;

impl Bot for Dropped {
    fn start(&mut self, _: Instant, _: &mut Recorder) {}
    fn handle_datagram(&mut self, _: Instant, _: &[u8], _: &mut Recorder) {}
    fn handle_timeout(&mut self, _: Instant, _: &mut Recorder) {}
    fn stop(&mut self, _: Instant, _: &mut Recorder) {}
    fn poll_transmit(&mut self, _: &mut [u8]) -> Option<crate::protocol::Transmit> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn phase(&self) -> BotPhase {
        BotPhase::Closed
    }
}

/// Drop a bot at once, as a player whose connection broke: no protocol goodbye (the server
/// sees it go silent). The transport's session is released (over ENet that sends ENet's own
/// disconnect, the only way to free the peer; over raw UDP nothing is sent and the socket
/// stays open to the end, its late datagrams counted on the wire but never by a bot).
/// Returns what the bot needs to resume its session ([`Bot::resume_state`]), if anything.
fn drop_bot<T: BotTransport + 'static>(
    shared: &Rc<Shared<T>>,
    idx: usize,
    now: Instant,
) -> Option<Vec<u8>> {
    let mut state = None;
    let close = match shared.slots.borrow_mut().get_mut(idx) {
        Some(s) => {
            s.stopping = true;
            state = s.bot.resume_state();
            s.bot = Box::new(Dropped);
            s.timer.cancel();
            (!std::mem::replace(&mut s.closing, true)).then_some((s.source, s.group))
        }
        None => None,
    };
    if let Some((src, group)) = close {
        {
            let mut rec = shared.rec(group);
            shared.transport.borrow_mut().close(idx, now, &mut rec);
        }
        shared.rearm_source(src);
    }
    state
}

/// Stop a bot: the protocol's goodbye, then the transport's.
fn stop_bot<T: BotTransport + 'static>(shared: &Rc<Shared<T>>, idx: usize, now: Instant) {
    if let Some(s) = shared.slots.borrow_mut().get_mut(idx) {
        s.stopping = true;
    }
    shared.drive(idx, now, |bot, rec| bot.stop(now, rec));
    let close = match shared.slots.borrow_mut().get_mut(idx) {
        Some(s) if !s.closing => {
            s.closing = true;
            Some(s.source)
        }
        _ => None,
    };
    if let Some(src) = close {
        {
            let mut rec = shared.rec(shared.group_of_slot(idx));
            shared.transport.borrow_mut().close(idx, now, &mut rec);
        }
        shared.rearm_source(src);
    }
}

use super::io::RECV_TURN_DATAGRAMS;
/// Time a receive task spends handling datagrams before it gives the other tasks their turn.
pub const RECV_TURN: Duration = Duration::from_millis(5);

/// Receive on a source's socket: one clock read per batch.
///
/// A turn ends after [`RECV_TURN_DATAGRAMS`] datagrams or [`RECV_TURN`] of handling them,
/// whichever comes first, even with more waiting: the task then goes back to the runtime,
/// so the timers, the stop signal and the end of the run are seen between turns. Before
/// issue 35 a socket that never ran dry (a server flooding the bots) kept this loop, and so
/// the whole worker thread, from everything else: the run never ended, Ctrl-C did nothing.
pub(super) async fn recv_loop<T: BotTransport + 'static>(
    shared: Rc<Shared<T>>,
    src: Source,
    sock: Rc<BotSocket>,
) {
    loop {
        let Ok(mut ready) = sock.readable().await else {
            return;
        };
        let turn_start = Instant::now();
        let mut handled = 0usize;
        let mut turn_over = false;
        loop {
            let got = {
                let mut rx = shared.rx.borrow_mut();
                ready.recv(&mut rx)
            };
            match got {
                Ok(n) => {
                    let now = Instant::now();
                    shared.on_datagrams(src, now, n);
                    handled += n;
                    if n < RECV_BATCH {
                        break;
                    }
                    if handled >= RECV_TURN_DATAGRAMS
                        || now.saturating_duration_since(turn_start) >= RECV_TURN
                    {
                        // More may be waiting: the readiness stays set, so the next turn
                        // starts as soon as the other tasks had theirs.
                        turn_over = true;
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Connected UDP reports ICMP errors (closed port) here, once each.
                    shared.rec(shared.group_of_source(src)).send_errors.add2(
                        "recv",
                        error_name(&e),
                        1,
                    );
                }
            }
        }
        // What the bots answered to these datagrams.
        shared.submit();
        if turn_over {
            tokio::task::yield_now().await;
        }
    }
}

async fn timer_loop<T: BotTransport + 'static>(shared: Rc<Shared<T>>) {
    let precise = PreciseTimer::new().ok();
    // The timer entries of one wake-up (reused).
    let mut due: Vec<(u32, u32)> = Vec::with_capacity(1024);
    loop {
        // Already at the end of its step when the worker has one.
        let next = shared.timers.borrow().next_due();
        shared.timer_target.set(next);
        if next.is_some_and(|n| n <= Instant::now()) {
            // Behind: the deadline has already passed, so no timer is armed for it. Instead
            // the thread goes back to the runtime first: without this an overloaded worker's
            // timer task never returned to it (an expired timer is always ready), so the
            // receive tasks and the once-a-second interval task starved: one run's seconds
            // came out as one interval holding seconds' worth of datagrams, then zeros, then
            // nothing until the end. `yield_now` resumes this task after the runtime has
            // polled its driver, so those tasks run within one wake-up of their time.
            tokio::task::yield_now().await;
        } else {
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
        }
        let now = Instant::now();
        // Every entry due at `now` (with a step: of every step that ended by `now`), then
        // served; again for what serving them armed for a step already over.
        loop {
            due.clear();
            shared.timers.borrow_mut().take_due(now, &mut due);
            if due.is_empty() {
                break;
            }
            for (i, &(target, generation)) in due.iter().enumerate() {
                shared.prefetch(due.get(i + 1).map(|d| d.0), due.get(i + 2).map(|d| d.0));
                shared.on_timer(target, generation, now);
            }
        }
        // Every bot due at `now` has queued its datagrams: out with them together.
        shared.submit();
    }
}

/// Bytes of a bot's state prefetched before it is served: where a protocol keeps what every
/// tick reads (the cafe bot's first five cache lines, see its layout).
const PREFETCH_BOT: usize = 5 * 64;

/// Ask the CPU to start loading `len` bytes from `p` (a hint: nothing is read or checked).
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut off = 0;
        while off < len {
            // SAFETY: a prefetch never faults and reads nothing the program sees, whatever
            // the address (`wrapping_add` keeps even the arithmetic defined).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast::<i8>()) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

impl<T: BotTransport + 'static> Shared<T> {
    /// A timer entry (`target`, `generation`) came due at `now`: serve it if it is still
    /// the target's current one.
    fn on_timer(self: &Rc<Self>, target: u32, generation: u32, now: Instant) {
        if target & SOURCE_BIT != 0 {
            let src = (target & !SOURCE_BIT) as usize;
            let current =
                (self.sources.borrow_mut().get_mut(src)).is_some_and(|s| s.fire(generation));
            if current {
                self.on_source_timer(src, now);
            }
            return;
        }
        let idx = target as usize;
        let current =
            (self.slots.borrow_mut().get_mut(idx)).is_some_and(|s| s.timer.fire(generation));
        if current {
            self.drive(idx, now, |bot, rec| bot.handle_timeout(now, rec));
        }
    }

    /// While one timer is served, start loading what the next ones will touch: the state of
    /// the bot of `next` (its slot was asked for one step earlier) and the slot of `after`.
    /// With thousands of bots each is a cache miss per tick otherwise (measured: the first
    /// read of a cafe bot's state was three quarters of its `handle_timeout`).
    fn prefetch(&self, next: Option<u32>, after: Option<u32>) {
        let slots = self.slots.borrow();
        if let Some(s) = next
            .filter(|t| t & SOURCE_BIT == 0)
            .and_then(|t| slots.get(t as usize))
        {
            let bot: &dyn Bot = &*s.bot;
            let len = std::mem::size_of_val(bot).min(PREFETCH_BOT);
            prefetch((bot as *const dyn Bot).cast::<u8>(), len);
        }
        if let Some(s) = after
            .filter(|t| t & SOURCE_BIT == 0)
            .and_then(|t| slots.get(t as usize))
        {
            prefetch((s as *const Slot).cast::<u8>(), std::mem::size_of::<Slot>());
        }
    }
}

async fn interval_loop<T: BotTransport + 'static>(
    shared: Rc<Shared<T>>,
    run_start: Instant,
    tx: Sender<WorkerMsg>,
    worker: usize,
) {
    let mut index = 0u64;
    let mut read_before = Instant::now();
    let mut connected_by_group: Vec<u64> = Vec::new();
    loop {
        let at = run_start + Duration::from_secs(index + 1);
        tokio::time::sleep_until(at.into()).await;
        // Before the loop below resets each bot's bytes of the second.
        let census = shared.census(Instant::now());
        let connected_now = {
            let mut slots = shared.slots.borrow_mut();
            let transport = shared.transport.borrow();
            let mut recs = shared.recs.borrow_mut();
            let last = recs.len().saturating_sub(1);
            let mut connected = 0u64;
            connected_by_group.clear();
            if recs.len() > 1 {
                connected_by_group.resize(recs.len(), 0);
            }
            for (idx, s) in slots.iter_mut().enumerate() {
                let (up, down) = (s.second_up, s.second_down);
                let snapshots = std::mem::take(&mut s.second_snapshots);
                s.second_up = 0;
                s.second_down = 0;
                let in_play = s.bot.phase() == BotPhase::Connected;
                let whole = std::mem::replace(&mut s.in_play_at_second_start, in_play);
                if !in_play {
                    continue;
                }
                connected += 1;
                if let Some(n) = connected_by_group.get_mut(s.group.min(last)) {
                    *n += 1;
                }
                let rec = &mut recs[s.group.min(last)];
                if whole {
                    rec.record_bot_second(up, down);
                    if s.counts_snapshots {
                        rec.record_bot_snapshot_second(u64::from(snapshots));
                    }
                }
                // The transport's own view, next to the protocol's: one sample per bot a second.
                transport.sample(idx, rec);
            }
            connected
        };
        // One clock read a second: this thread's CPU time, all its bots included.
        let cpu_ns = shared.cpu_since_last_read();
        let read_now = Instant::now();
        let span_us = (read_now - read_before).as_micros() as u64;
        read_before = read_now;
        let (rec, groups) = take_recorders(&shared.recs);
        if tx
            .send(WorkerMsg::Interval {
                index,
                rec,
                groups,
                connected_now,
                connected_by_group: std::mem::take(&mut connected_by_group),
                census,
                worker,
                cpu_ns,
                span_us,
            })
            .is_err()
        {
            return;
        }
        index += 1;
    }
}
