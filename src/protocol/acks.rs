//! Inputs waiting for the server's acknowledgement: input-to-ack latency, and upstream loss as
//! "acknowledged within the wait, or not" (City's InputAck, ZergCity's InputAck).
//!
//! Ids are sent in increasing order (a tick or an input sequence), so the queue is ordered and
//! an ack finds its entry by offset from the oldest one still waiting, with no search.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::metrics::Recorder;

/// One input waiting: 12 bytes (with an `Instant` and a flag it was 24). Its send time is
/// kept as nanoseconds since the queue's first send, so every age and latency is exactly what
/// the `Instant`s would give; the top bit (292 years of nanoseconds away) is the
/// acknowledgement. Packed to 4-byte alignment, so the 64-bit stamp adds no padding.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct Pending {
    id: u32,
    stamp: u64,
}

/// `Pending::stamp`'s acknowledged bit.
const ACKED: u64 = 1 << 63;

impl Pending {
    fn sent_ns(self) -> u64 {
        self.stamp & !ACKED
    }

    fn acked(self) -> bool {
        self.stamp & ACKED != 0
    }
}

/// Sent inputs, oldest first, until their wait is over.
#[derive(Debug, Clone)]
pub struct PendingAcks {
    queue: VecDeque<Pending>,
    wait: Duration,
    /// The first send: what `Pending::sent_ns` counts from.
    epoch: Option<Instant>,
}

impl PendingAcks {
    /// An input not acknowledged within `wait` counts as lost upstream.
    pub fn new(wait: Duration) -> Self {
        // Grows to what one wait holds at the input rate, a few reallocations per session.
        Self::with_capacity(wait, 0)
    }

    /// As [`Self::new`], with room for `capacity` inputs reserved once. Every input stays for
    /// its whole wait, acknowledged or not, so a bot that knows its input period reserves
    /// what one wait holds: growing to it by doubling left the smaller blocks behind, and a
    /// power of two above it (128 entries for City's 120).
    pub fn with_capacity(wait: Duration, capacity: usize) -> Self {
        Self {
            queue: VecDeque::with_capacity(capacity),
            wait,
            epoch: None,
        }
    }

    /// Nanoseconds from the first send to `t` (0 before it).
    fn nanos(&self, t: Instant) -> u64 {
        self.epoch
            .map_or(0, |e| t.saturating_duration_since(e).as_nanos() as u64)
    }

    /// Heap bytes held for waiting inputs (what a bot's footprint counts).
    pub fn reserved_bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<Pending>()
    }

    /// Input `id` (greater than every id before it) left now.
    pub fn sent(&mut self, id: u32, now: Instant) {
        self.epoch.get_or_insert(now);
        let sent_ns = self.nanos(now);
        self.queue.push_back(Pending {
            id,
            stamp: sent_ns & !ACKED,
        });
    }

    /// The server acknowledged `id`: its latency as `input_ack_latency_us`; a late,
    /// duplicate or unknown ack is counted by name.
    pub fn ack(&mut self, id: u32, now: Instant, rec: &mut Recorder) {
        let now_ns = self.nanos(now);
        let Some(front) = self.queue.front() else {
            rec.event("input_ack_unexpected");
            return;
        };
        let front_id = front.id;
        let Some(i) = id.checked_sub(front_id).map(|i| i as usize) else {
            rec.event("input_ack_late");
            return;
        };
        match self.queue.get_mut(i) {
            Some(p) if { p.id } == id && !p.acked() => {
                p.stamp = p.sent_ns() | ACKED;
                rec.record_extra(
                    "input_ack_latency_us",
                    now_ns.saturating_sub(p.sent_ns()) / 1_000,
                );
            }
            Some(p) if { p.id } == id => rec.event("input_ack_duplicate"),
            _ => rec.event("input_ack_unexpected"),
        }
    }

    /// Count the inputs whose wait is over: one expected each, received when acknowledged.
    pub fn age(&mut self, now: Instant, rec: &mut Recorder) {
        let now_ns = self.nanos(now);
        let wait_ns = self.wait.as_nanos();
        while let Some(p) = self.queue.front() {
            if u128::from(now_ns.saturating_sub(p.sent_ns())) < wait_ns {
                break;
            }
            rec.loss_up.add(1, u64::from(p.acked()));
            self.queue.pop_front();
        }
    }

    /// The session these inputs went out on is gone (dropped on purpose): the acknowledged
    /// ones count as received, the others cannot be judged. Returns how many were not.
    pub fn abandon(&mut self, rec: &mut Recorder) -> u64 {
        let mut unacked = 0;
        for p in self.queue.drain(..) {
            if p.acked() {
                rec.loss_up.add(1, 1);
            } else {
                unacked += 1;
            }
        }
        unacked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Send times are kept as nanoseconds from the first send: ages and latencies are what
    /// the `Instant`s give, truncated to the microsecond from the nanoseconds (1,999 ns is
    /// 1 µs, 2,000 ns is 2 µs), and an input is lost exactly when its whole wait has passed.
    #[test]
    fn ages_and_latencies_are_exact_to_the_nanosecond() {
        let ns = Duration::from_nanos;
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut p = PendingAcks::with_capacity(100 * MS, 4);
        p.sent(1, t0 + ns(1_500));
        p.sent(2, t0 + ns(2_000));
        p.ack(1, t0 + ns(1_500 + 1_999), &mut rec);
        p.ack(2, t0 + ns(2_000 + 2_000), &mut rec);
        let lat = rec.extra("input_ack_latency_us").expect("latency samples");
        assert_eq!((lat.len(), lat.min(), lat.max()), (2, 1, 2));
        p.age(t0 + ns(1_500) + 100 * MS - ns(1), &mut rec);
        assert_eq!(rec.loss_up.expected, 0, "one nanosecond short of the wait");
        p.age(t0 + ns(1_500) + 100 * MS, &mut rec);
        assert_eq!((rec.loss_up.expected, rec.loss_up.received), (1, 1));
        assert_eq!(p.reserved_bytes(), 4 * 12, "12 bytes an input, as reserved");
    }

    #[test]
    fn acks_within_the_wait_are_received_the_rest_lost() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut p = PendingAcks::new(100 * MS);
        for id in 10..14 {
            p.sent(id, t0);
        }
        p.ack(11, t0 + 5 * MS, &mut rec);
        p.ack(11, t0 + 6 * MS, &mut rec);
        p.ack(13, t0 + 7 * MS, &mut rec);
        p.ack(9, t0 + 7 * MS, &mut rec);
        p.age(t0 + 99 * MS, &mut rec);
        assert_eq!((rec.loss_up.expected, rec.loss_up.received), (0, 0));
        p.age(t0 + 100 * MS, &mut rec);
        assert_eq!((rec.loss_up.expected, rec.loss_up.received), (4, 2));
        assert_eq!(rec.events.get("input_ack_duplicate"), 1);
        assert_eq!(rec.events.get("input_ack_late"), 1);
        let lat = rec.extra("input_ack_latency_us").expect("latency samples");
        assert_eq!(lat.len(), 2);
    }

    #[test]
    fn an_abandoned_session_counts_only_what_was_acknowledged() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut p = PendingAcks::new(100 * MS);
        p.sent(1, t0);
        p.sent(2, t0);
        p.ack(1, t0, &mut rec);
        assert_eq!(p.abandon(&mut rec), 1);
        assert_eq!((rec.loss_up.expected, rec.loss_up.received), (1, 1));
        p.ack(2, t0, &mut rec);
        assert_eq!(rec.events.get("input_ack_unexpected"), 1);
    }
}
