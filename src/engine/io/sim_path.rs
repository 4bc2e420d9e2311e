//! A bot socket's simulated network path: the scenario's `network:` applied to every datagram
//! between the transport and the socket, so ENet's retransmissions and RTT estimates react to
//! the simulated link as to a real one.
//!
//! One per socket (a bot's UDP socket, or an ENet host's socket shared by bots with the same
//! conditions), with its own seed. Datagrams that are delayed are copied into the path's
//! [`DelayLine`]s (buffers reused) and sent or delivered when the source's timer fires. The
//! lines are bounded by count and by the memory they hold, not by payload (an empty
//! datagram has none, but costs its bookkeeping): a peer flooding a delayed path costs at
//! most `MAX_HELD` per direction, and what does not fit is counted as lost to the queue.

use std::time::Instant;

use crate::metrics::Recorder;
use crate::netsim::{Conditions, DelayLine, DropReason, Fate, HeldBound, Link, NetworkConditions};

/// What one path may hold in each direction: 4 MiB of memory (buffers' capacity and each
/// datagram's bookkeeping), far above what a link in play holds (a second of a 1 Mbit/s
/// stream is 125 KB), and 16,384 datagrams (a second of 64 bots sharing an ENet socket at
/// 256 Hz); past either a datagram is lost to the queue.
const MAX_HELD: HeldBound = HeldBound {
    datagrams: 16_384,
    bytes: 4 << 20,
};

/// The two directions of one socket's simulated path.
pub struct SimPath(Box<Path>);

/// A [`SimPath`]'s state, on the heap: two links with their generators and two delay lines,
/// hundreds of bytes that a transport keeping an `Option<SimPath>` per bot would otherwise
/// carry inline for every bot, with a `network:` or without.
struct Path {
    up: Link,
    down: Link,
    up_line: DelayLine<()>,
    down_line: DelayLine<()>,
    /// What happened since the last [`SimPath::record`], by event name.
    counts: [u64; EVENTS.len()],
}

/// The path's counters, as events in the recorder: what each direction was given (so the
/// report can set the link's own loss share beside what the bots measured), what it dropped
/// and why, and what it duplicated or reordered.
const EVENTS: [&str; 12] = [
    "netsim_up_lost_loss",
    "netsim_up_lost_outage",
    "netsim_up_lost_queue",
    "netsim_down_lost_loss",
    "netsim_down_lost_outage",
    "netsim_down_lost_queue",
    "netsim_up_duplicated",
    "netsim_down_duplicated",
    "netsim_up_reordered",
    "netsim_down_reordered",
    "netsim_up_offered",
    "netsim_down_offered",
];

/// Each direction's conditions, resolved once per run.
#[derive(Debug, Clone)]
pub struct PathConditions {
    pub up: Conditions,
    pub down: Conditions,
    pub seed: u64,
}

impl PathConditions {
    pub fn new(n: &NetworkConditions, seed: u64) -> Self {
        let (up, down) = n.directions();
        PathConditions { up, down, seed }
    }
}

/// Index in [`EVENTS`] of a loss.
fn lost(up: bool, why: DropReason) -> usize {
    let base = if up { 0 } else { 3 };
    base + match why {
        DropReason::Loss => 0,
        DropReason::Outage => 1,
        DropReason::Queue => 2,
    }
}

impl SimPath {
    /// The path of source number `source`, starting at `now`.
    pub fn new(c: &PathConditions, source: u64, now: Instant) -> Self {
        let seed = c.seed ^ source.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        SimPath(Box::new(Path {
            up: Link::new(&c.up, seed, now),
            down: Link::new(&c.down, seed ^ 0xD0D0_D0D0, now),
            up_line: DelayLine::new(MAX_HELD),
            down_line: DelayLine::new(MAX_HELD),
            counts: [0; EVENTS.len()],
        }))
    }

    /// Add what the path did since the last call to `rec`'s events.
    pub fn record(&mut self, rec: &mut Recorder) {
        for (name, n) in EVENTS.iter().zip(self.0.counts.iter_mut()) {
            if *n > 0 {
                rec.events.add(name, std::mem::take(n));
            }
        }
    }

    /// A datagram the transport sends at `now`: `send` is called with it now if the link
    /// delivers it at once; otherwise it is held (or lost, counted).
    pub fn send(&mut self, now: Instant, bytes: &[u8], send: impl FnMut(&[u8])) {
        let counts = &mut self.0.counts;
        Self::pass(
            &mut self.0.up,
            &mut self.0.up_line,
            true,
            now,
            bytes,
            counts,
            send,
        );
    }

    /// A datagram that arrived at `now`: `deliver` is called with it now if the link delivers
    /// it at once; otherwise it is held (or lost, counted).
    pub fn receive(&mut self, now: Instant, bytes: &[u8], deliver: impl FnMut(&[u8])) {
        let counts = &mut self.0.counts;
        Self::pass(
            &mut self.0.down,
            &mut self.0.down_line,
            false,
            now,
            bytes,
            counts,
            deliver,
        );
    }

    fn pass(
        link: &mut Link,
        line: &mut DelayLine<()>,
        up: bool,
        now: Instant,
        bytes: &[u8],
        counts: &mut [u64; EVENTS.len()],
        mut now_fn: impl FnMut(&[u8]),
    ) {
        let reordered = link.stats().reordered;
        counts[if up { 10 } else { 11 }] += 1;
        match link.submit(now, bytes.len()) {
            Fate::Dropped(why) => counts[lost(up, why)] += 1,
            Fate::Deliver { at, copy_at } => {
                if at <= now {
                    now_fn(bytes);
                } else if !line.push(at, (), bytes) {
                    counts[lost(up, DropReason::Queue)] += 1;
                }
                if let Some(c) = copy_at {
                    counts[if up { 6 } else { 7 }] += 1;
                    if !line.push(c, (), bytes) {
                        counts[lost(up, DropReason::Queue)] += 1;
                    }
                }
            }
        }
        if link.stats().reordered > reordered {
            counts[if up { 8 } else { 9 }] += 1;
        }
    }

    /// When the next held datagram is due, either way.
    pub fn next_due(&self) -> Option<Instant> {
        match (self.0.up_line.next_due(), self.0.down_line.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Send the held datagrams due at `now`.
    pub fn send_due(&mut self, now: Instant, mut send: impl FnMut(&[u8])) {
        while self.0.up_line.pop_due(now, |(), b| send(b)) {}
    }

    /// Deliver the held datagrams due at `now`.
    pub fn deliver_due(&mut self, now: Instant, mut deliver: impl FnMut(&[u8])) {
        while self.0.down_line.pop_due(now, |(), b| deliver(b)) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Issue 35, break 5, in the engine: a server flooding a bot behind a 10 s delay with
    /// 100,000 empty datagrams. Payload counted, all were held (0 bytes of a 4 MiB bound);
    /// now the path holds what its count and memory bounds allow, each direction's memory
    /// under 4 MiB by its own account, and the rest is counted as lost to the queue.
    #[test]
    fn a_flood_of_empty_datagrams_is_bounded_and_counted() {
        let n: NetworkConditions = serde_saphyr::from_str("latency: 10s").expect("network");
        let t0 = Instant::now();
        let mut path = SimPath::new(&PathConditions::new(&n, 1), 0, t0);
        let mut at_once = 0;
        for _ in 0..100_000 {
            path.receive(t0, &[], |_| at_once += 1);
        }
        let mut rec = Recorder::new();
        path.record(&mut rec);
        let line = &path.0.down_line;
        let held = line.len() as u64;
        let lost = rec.events.get("netsim_down_lost_queue");
        assert_eq!(at_once, 0, "all delayed");
        assert_eq!(held, MAX_HELD.datagrams as u64, "the count bound binds");
        assert_eq!(lost, 100_000 - held, "every one past it counted");
        assert_eq!(rec.events.get("netsim_down_offered"), 100_000);
        assert!(
            line.memory() <= MAX_HELD.bytes,
            "{held} held in {} bytes, bound {}",
            line.memory(),
            MAX_HELD.bytes
        );
        // And none is lost once it is due.
        let mut delivered = 0;
        path.deliver_due(t0 + Duration::from_secs(10), |_| delivered += 1);
        assert_eq!(delivered, held);
    }
}
