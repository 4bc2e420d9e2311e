//! One worker: an OS thread with a current-thread tokio runtime that owns a shard of bots,
//! their sockets, one timer heap and one metric recorder.
//!
//! Nothing here is shared with other threads except the channel to the collector and the
//! stop signal. Bots are driven synchronously from two kinds of tasks: one receive task per
//! socket (woken by readiness) and one timer task per worker (woken by the earliest
//! deadline). Each wake-up reads the clock once for the whole batch it handles.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::bot_socket::{BotRx, BotSocket, RECV_BATCH};
use super::factory::make_bot;
use super::timer::{self, PreciseTimer};
use super::udp::error_name;
use crate::metrics::Recorder;
use crate::protocol::{Bot, BotParams, BotPhase, MAX_DATAGRAM};
use crate::scenario::{ProtocolSection, SpawnEvent};

/// What a worker runs.
pub struct WorkerSpec {
    /// Sorted by start time.
    pub bots: Vec<(SpawnEvent, BotParams, SocketAddr)>,
    pub protocol: ProtocolSection,
    pub run_start: Instant,
    pub run_end: Instant,
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
        spawned: u64,
    },
}

struct Slot {
    bot: Box<dyn Bot>,
    sock: Rc<BotSocket>,
    /// Generation of the timer entry that is current for this bot.
    timer_gen: u32,
    scheduled: Option<Instant>,
    ever_connected: bool,
}

struct Shared {
    slots: RefCell<Vec<Slot>>,
    rec: RefCell<Recorder>,
    timers: RefCell<BinaryHeap<Reverse<(Instant, u32, u32)>>>,
    /// The deadline the timer task sleeps until; an earlier one must wake it.
    timer_target: Cell<Option<Instant>>,
    timer_wake: Notify,
    tx_buf: RefCell<Vec<u8>>,
    rx: RefCell<BotRx>,
}

impl Shared {
    /// Run `f` on bot `idx`, send what it queued, and re-arm its timer.
    fn drive(&self, idx: usize, f: impl FnOnce(&mut dyn Bot, &mut Recorder)) {
        let mut slots = self.slots.borrow_mut();
        let mut rec = self.rec.borrow_mut();
        let Some(slot) = slots.get_mut(idx) else {
            return;
        };
        f(slot.bot.as_mut(), &mut rec);
        let mut buf = self.tx_buf.borrow_mut();
        while let Some(t) = slot.bot.poll_transmit(&mut buf) {
            let bytes = &buf[..t.len.min(buf.len())];
            match slot.sock.send(bytes) {
                Ok(()) => rec.datagram_up(bytes.len()),
                Err(e) => rec.send_errors.add(error_name(&e), 1),
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
                self.timers
                    .borrow_mut()
                    .push(Reverse((at, idx as u32, slot.timer_gen)));
                if self.timer_target.get().is_none_or(|t| at < t) {
                    self.timer_wake.notify_one();
                }
            }
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
                spawned: 0,
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
        rec: RefCell::new(Recorder::new()),
        timers: RefCell::new(BinaryHeap::with_capacity(spec.bots.len() * 2)),
        timer_target: Cell::new(None),
        timer_wake: Notify::new(),
        tx_buf: RefCell::new(vec![0u8; MAX_DATAGRAM]),
        rx: RefCell::new(BotRx::default()),
    });

    tokio::task::spawn_local(timer_loop(shared.clone()));
    let intervals =
        tokio::task::spawn_local(interval_loop(shared.clone(), spec.run_start, tx.clone()));

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
            match BotSocket::connect_to(peer) {
                Ok(sock) => {
                    let sock = Rc::new(sock);
                    let idx = {
                        let mut slots = shared.slots.borrow_mut();
                        slots.push(Slot {
                            bot: make_bot(&protocol, params),
                            sock: sock.clone(),
                            timer_gen: 0,
                            scheduled: None,
                            ever_connected: false,
                        });
                        slots.len() - 1
                    };
                    shared.drive(idx, |bot, rec| bot.start(now, rec));
                    tokio::task::spawn_local(recv_loop(shared.clone(), idx, sock));
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
            shared.drive(idx, |bot, rec| bot.stop(now, rec));
        }
    }

    // Polite shutdown: every bot sends its goodbye now.
    let now = Instant::now();
    let count = shared.slots.borrow().len();
    for idx in 0..count {
        shared.drive(idx, |bot, rec| bot.stop(now, rec));
    }
    intervals.abort();
    let (ever_connected, failed) = {
        let slots = shared.slots.borrow();
        let ever = slots.iter().filter(|s| s.ever_connected).count() as u64;
        let failed = slots
            .iter()
            .filter(|s| !s.ever_connected && s.bot.phase() == BotPhase::Failed)
            .count() as u64;
        (ever, failed)
    };
    let socket_failures = shared.rec.borrow().connect_failures.get_prefix("socket");
    let rec = shared.rec.borrow_mut().take_interval();
    let _ = tx.send(WorkerMsg::Done {
        rec,
        ever_connected,
        failed: failed + socket_failures,
        spawned: count as u64,
    });
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
                        shared.drive(idx, |bot, rec| bot.handle_datagram(now, d, rec));
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
            let Some(Reverse((at, idx, generation))) = top else {
                break;
            };
            if at > now {
                break;
            }
            shared.timers.borrow_mut().pop();
            let idx = idx as usize;
            let current = shared
                .slots
                .borrow()
                .get(idx)
                .is_some_and(|s| s.timer_gen == generation);
            if current {
                if let Some(s) = shared.slots.borrow_mut().get_mut(idx) {
                    s.scheduled = None;
                }
                shared.drive(idx, |bot, rec| bot.handle_timeout(now, rec));
            }
        }
    }
}

async fn interval_loop(shared: Rc<Shared>, run_start: Instant, tx: Sender<WorkerMsg>) {
    let mut index = 0u64;
    loop {
        let at = run_start + Duration::from_secs(index + 1);
        tokio::time::sleep_until(at.into()).await;
        let connected_now = shared
            .slots
            .borrow()
            .iter()
            .filter(|s| s.bot.phase() == BotPhase::Connected)
            .count() as u64;
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
