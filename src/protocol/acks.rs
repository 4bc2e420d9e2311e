//! Inputs waiting for the server's acknowledgement: input-to-ack latency, and upstream loss as
//! "acknowledged within the wait, or not" (City's InputAck, ZergCity's InputAck).
//!
//! Ids are sent in increasing order (a tick or an input sequence), so the queue is ordered and
//! an ack finds its entry by offset from the oldest one still waiting, with no search.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::metrics::Recorder;

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u32,
    sent: Instant,
    acked: bool,
}

/// Sent inputs, oldest first, until their wait is over.
#[derive(Debug, Clone)]
pub struct PendingAcks {
    queue: VecDeque<Pending>,
    wait: Duration,
}

impl PendingAcks {
    /// An input not acknowledged within `wait` counts as lost upstream.
    pub fn new(wait: Duration) -> Self {
        Self {
            // Grows to what one round trip (or, unanswered, one wait) holds at the input rate,
            // a few reallocations per session; reserving 128 entries up front was 3 KiB per
            // bot, most of it never used.
            queue: VecDeque::new(),
            wait,
        }
    }

    /// Input `id` (greater than every id before it) left now.
    pub fn sent(&mut self, id: u32, now: Instant) {
        self.queue.push_back(Pending {
            id,
            sent: now,
            acked: false,
        });
    }

    /// The server acknowledged `id`: its latency as `input_ack_latency_us`; a late,
    /// duplicate or unknown ack is counted by name.
    pub fn ack(&mut self, id: u32, now: Instant, rec: &mut Recorder) {
        let Some(front) = self.queue.front() else {
            rec.event("input_ack_unexpected");
            return;
        };
        let Some(i) = id.checked_sub(front.id).map(|i| i as usize) else {
            rec.event("input_ack_late");
            return;
        };
        match self.queue.get_mut(i) {
            Some(p) if p.id == id && !p.acked => {
                p.acked = true;
                rec.record_extra(
                    "input_ack_latency_us",
                    now.saturating_duration_since(p.sent).as_micros() as u64,
                );
            }
            Some(p) if p.id == id => rec.event("input_ack_duplicate"),
            _ => rec.event("input_ack_unexpected"),
        }
    }

    /// Count the inputs whose wait is over: one expected each, received when acknowledged.
    pub fn age(&mut self, now: Instant, rec: &mut Recorder) {
        while let Some(p) = self.queue.front() {
            if now.saturating_duration_since(p.sent) < self.wait {
                break;
            }
            rec.loss_up.add(1, u64::from(p.acked));
            self.queue.pop_front();
        }
    }

    /// The session these inputs went out on is gone (dropped on purpose): the acknowledged
    /// ones count as received, the others cannot be judged. Returns how many were not.
    pub fn abandon(&mut self, rec: &mut Recorder) -> u64 {
        let mut unacked = 0;
        for p in self.queue.drain(..) {
            if p.acked {
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
        let lat = &rec
            .extra
            .iter()
            .find(|(n, _)| *n == "input_ack_latency_us")
            .unwrap()
            .1;
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
