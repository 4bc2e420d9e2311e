//! Downstream loss of one cafe session: from the header `seq`, from snapshot ticks, and which
//! of the two the bot may trust.
//!
//! A header `seq` numbers every server datagram, so on a server that keeps one counter per
//! client a gap is a lost datagram, of any type. A server may instead number every client's
//! datagrams with ONE counter: each client then sees gaps of about N-1 with N clients, and N
//! grows while a swarm ramps up, so neither the first datagrams nor any one moment tell the
//! two kinds of server apart for good. The snapshot ticks give a second count that holds on
//! both: a gap in the ticks (one snapshot every `step` ticks, step configured or learned) is a
//! lost snapshot.
//!
//! With `seq` as the source ([`DownLoss::new`] with `by_sequence`), both are followed side by
//! side and nothing from `seq` reaches the recorder before it is explained. Every
//! [`CHUNK`] of at least [`MIN_CHUNK_SNAPSHOTS`] snapshots (closed at a snapshot, so that both
//! counts have seen the same datagrams, and only once the tick step is known) and at the end
//! of the session, the chunk's header-seq gaps are compared with its tick gaps plus the
//! datagrams other than snapshots that may have gone missing in it (the pongs of the bot's
//! pings sent since the previous chunk began and still unanswered, and of those it gave up
//! on; heartbeats: one a chunk, more when the server was seen sending them faster; Welcomes
//! answering a resent Hello, in the first chunk):
//! - explained by the ticks alone: the chunk's `seq` counts are committed (exact for a
//!   per-connection counter, and what a lone client on a shared one sees);
//! - explained only with that allowance: held until the next chunk is settled, because a
//!   second client appearing on a shared counter looks the same at first. The next chunk
//!   commits it by `seq` if it is explained too, by tick otherwise;
//! - not explained: the counter is shared. The chunk's tick counts (and a held chunk's) are
//!   committed instead, and every later snapshot is counted by tick at once
//!   (`shared_sequence_detected`), for good.
//!
//! So a per-second figure never holds a gap that turned out to be another client's datagram:
//! a commit lands in the second it was made, half a second to a second after the datagrams.
//! What can still slip through is a shared counter's first gaps within the allowance in the
//! session's last chunk (nothing follows to tell). A per-connection server losing more
//! non-snapshot datagrams in one chunk than the allowance is taken for a shared one: its
//! loss is then counted by tick, a sound measure of snapshots, and the report says so.

use std::time::{Duration, Instant};

use crate::protocol::prelude::seqwindow::{SeqOutcome, SeqWindow, TickNews, TickStep};
use crate::protocol::prelude::{LossCounts, Recorder};

/// How much a chunk of `seq` accounting covers before it is checked against the ticks.
pub const CHUNK: Duration = Duration::from_millis(500);
/// Snapshots a chunk holds at least (a slow server's chunks last longer): with a second client
/// on a shared counter, a chunk shows at least this many unexplained gaps, more than the
/// non-snapshot datagrams it may have lost.
pub const MIN_CHUNK_SNAPSHOTS: u64 = 16;
/// Heartbeats closer together than this are not taken as the server's heartbeat period
/// (two arriving back to back after a delay would otherwise make the allowance unbounded).
const MIN_HEARTBEAT_PERIOD: Duration = Duration::from_millis(100);

/// How a chunk was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The header seq's gaps were explained: its counts were committed.
    Sequence,
    /// They were not: the counter is shared. Tick counts were committed, and are from now on.
    SharedDetected,
}

/// The server heartbeats seen, for how many of them a chunk may have lost.
#[derive(Debug, Clone, Copy, Default)]
struct Heartbeats {
    last: Option<Instant>,
    period: Option<Duration>,
}

impl Heartbeats {
    fn seen(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let d = now
                .saturating_duration_since(last)
                .max(MIN_HEARTBEAT_PERIOD);
            self.period = Some(self.period.map_or(d, |p| p.min(d)));
        }
        self.last = Some(now);
    }

    /// Heartbeats a span may have held: one, or as many periods as fit when known.
    fn allowance(&self, span: Duration) -> u64 {
        let more = self
            .period
            .map_or(0, |p| (span.as_nanos() / p.as_nanos().max(1)) as u64);
        1 + more
    }
}

/// One session's downstream loss (see the module doc).
#[derive(Debug, Clone)]
pub struct DownLoss {
    /// `seq` gaps still count (after they are explained); false: ticks count at once.
    by_seq: bool,
    window: SeqWindow,
    ticks: TickStep,
    /// What the header seq counted since the last commit.
    seq_chunk: LossCounts,
    /// What the snapshot ticks counted since the last commit.
    tick_chunk: LossCounts,
    /// When the open chunk began (its first datagram).
    chunk_start: Option<Instant>,
    /// When the chunk settled last began.
    previous_start: Option<Instant>,
    /// Snapshots in the open chunk.
    chunk_snapshots: u64,
    /// No chunk was committed yet (the first one may hold extra Welcomes).
    first_chunk: bool,
    /// Hellos resent before Welcome: each may bring one more Welcome, which may be lost.
    extra_welcomes: u64,
    heartbeats: Heartbeats,
    /// A settled chunk whose gaps only the allowance explained, waiting for the next one.
    held: Option<Chunk>,
}

/// One chunk's counts by header seq and by tick.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    seq: LossCounts,
    tick: LossCounts,
}

impl DownLoss {
    /// `by_sequence`: the header seq is the source (checked against the ticks); otherwise the
    /// snapshot ticks alone. `tick_step`: the configured step, or learned when `None`.
    pub fn new(by_sequence: bool, tick_step: Option<u32>) -> Self {
        Self {
            by_seq: by_sequence,
            window: SeqWindow::new(),
            ticks: TickStep::new(tick_step),
            seq_chunk: LossCounts::default(),
            tick_chunk: LossCounts::default(),
            chunk_start: None,
            previous_start: None,
            chunk_snapshots: 0,
            first_chunk: true,
            extra_welcomes: 0,
            heartbeats: Heartbeats::default(),
            held: None,
        }
    }

    /// Whether header seqs are (still) accounted: feed every server datagram to
    /// [`Self::on_seq`] while this holds.
    pub fn by_sequence(&self) -> bool {
        self.by_seq
    }

    /// The snapshot tick step, once configured or learned.
    pub fn tick_step(&self) -> Option<u32> {
        self.ticks.step()
    }

    /// One server datagram's header seq (held in the open chunk until it is settled).
    pub fn on_seq(&mut self, now: Instant, seq: u32) -> SeqOutcome {
        let outcome = self.window.on_seq(seq);
        let (e, r) = outcome.deltas();
        self.seq_chunk.add(e, r);
        self.chunk_start.get_or_insert(now);
        outcome
    }

    /// One snapshot's tick: counted at once when ticks are the source, held in the open chunk
    /// otherwise.
    pub fn on_tick(&mut self, tick: u32, rec: &mut Recorder) -> TickNews {
        let news = self.ticks.on_tick(tick);
        self.count_ticks(news.loss, rec);
        news.record_rate(rec);
        self.chunk_snapshots += 1;
        news
    }

    /// Since when a lost pong may show as a gap in the open chunk: the start of the chunk
    /// before it (`None`: the whole session). A pong answers a ping within a round trip, so
    /// older pings are not counted however long they stay unanswered.
    pub fn pongs_since(&self) -> Option<Instant> {
        self.previous_start
    }

    fn count_ticks(&mut self, (e, r): (u64, u64), rec: &mut Recorder) {
        if self.by_seq {
            self.tick_chunk.add(e, r);
        } else {
            rec.loss_down.add(e, r);
        }
    }

    /// The bot resent its Hello: the server may answer it with one more Welcome.
    pub fn on_hello_retry(&mut self) {
        self.extra_welcomes += 1;
    }

    /// A heartbeat from the server (a Ping the bot did not issue) arrived.
    pub fn on_heartbeat(&mut self, now: Instant) {
        self.heartbeats.seen(now);
    }

    /// After a snapshot: settle the open chunk if it spans [`CHUNK`] and
    /// [`MIN_CHUNK_SNAPSHOTS`], and the tick step is known. `pongs_possibly_lost`: the bot's
    /// pongs that may have been lost in it (pings sent since [`Self::pongs_since`] still in
    /// flight, plus those given up since the last settle).
    pub fn settle_if_due(
        &mut self,
        now: Instant,
        pongs_possibly_lost: u64,
        rec: &mut Recorder,
    ) -> Option<Settled> {
        let start = self.chunk_start?;
        // Not while the ticks hold snapshots that may be a new snapshot rate: their gaps are in
        // neither count yet, and the chunk's two counts must have seen the same datagrams.
        if !self.by_seq
            || self.ticks.step().is_none()
            || self.ticks.held() > 0
            || self.chunk_snapshots < MIN_CHUNK_SNAPSHOTS
            || now.saturating_duration_since(start) < CHUNK
        {
            return None;
        }
        Some(self.settle(now, pongs_possibly_lost, false, rec))
    }

    /// The session ended: the ticks still held back for learning the step are counted, and
    /// the open chunk settled whatever its span. `None` when ticks were the source already.
    pub fn finish(
        &mut self,
        now: Instant,
        pongs_possibly_lost: u64,
        rec: &mut Recorder,
    ) -> Option<Settled> {
        let news = self.ticks.finish();
        self.count_ticks(news.loss, rec);
        news.record_rate(rec);
        if !self.by_seq {
            return None;
        }
        Some(self.settle(now, pongs_possibly_lost, true, rec))
    }

    /// Commit the open chunk by `seq` if its gaps are explained by the ticks and the other
    /// datagrams it may have lost, by tick (for good) otherwise. A chunk explained only by
    /// that allowance is held until the next one tells: it may be the first sign of a second
    /// client on a shared counter. At the end of the session (`last`) nothing is held.
    fn settle(
        &mut self,
        now: Instant,
        pongs_possibly_lost: u64,
        last: bool,
        rec: &mut Recorder,
    ) -> Settled {
        let span = self
            .chunk_start
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        let missing = |c: &LossCounts| c.expected.saturating_sub(c.received);
        let seq = std::mem::take(&mut self.seq_chunk);
        let tick = std::mem::take(&mut self.tick_chunk);
        let excess = missing(&seq).saturating_sub(missing(&tick));
        let allowance = pongs_possibly_lost
            + self.heartbeats.allowance(span)
            + u64::from(self.first_chunk) * self.extra_welcomes;
        self.previous_start = self.chunk_start.take().or(self.previous_start);
        self.chunk_snapshots = 0;
        self.first_chunk = false;
        let held = self.held.take();
        if excess > allowance {
            if let Some(h) = held {
                rec.loss_down.merge(&h.tick);
            }
            rec.loss_down.merge(&tick);
            self.by_seq = false;
            return Settled::SharedDetected;
        }
        if let Some(h) = held {
            rec.loss_down.merge(&h.seq);
        }
        if excess > 0 && !last {
            self.held = Some(Chunk { seq, tick });
        } else {
            rec.loss_down.merge(&seq);
        }
        Settled::Sequence
    }
}
