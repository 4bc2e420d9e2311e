//! Datagrams held until their simulated delivery time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Datagrams waiting for their delivery time, earliest first, ties in the order pushed.
///
/// One per worker and direction. Payloads are copied into buffers kept in a free list, so
/// once the line has grown to its busiest moment, holding a datagram allocates nothing.
pub struct DelayLine<K> {
    /// `(deliver at, push order, slot in bufs)`.
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    bufs: Vec<Held<K>>,
    free: Vec<usize>,
    pushed: u64,
    /// Bytes held now, and the most held at once.
    held_bytes: usize,
    peak_bytes: usize,
    /// The most bytes the line may hold; a datagram that would exceed it is refused.
    max_bytes: usize,
}

struct Held<K> {
    key: Option<K>,
    bytes: Vec<u8>,
}

impl<K> DelayLine<K> {
    /// A line holding at most `max_bytes` of payload at once.
    pub fn new(max_bytes: usize) -> Self {
        DelayLine {
            heap: BinaryHeap::new(),
            bufs: Vec::new(),
            free: Vec::new(),
            pushed: 0,
            held_bytes: 0,
            peak_bytes: 0,
            max_bytes,
        }
    }

    /// Hold `bytes` for `key` until `at`. `false` when the line is full (the caller counts
    /// the datagram as lost to the simulated queue).
    pub fn push(&mut self, at: Instant, key: K, bytes: &[u8]) -> bool {
        if self.held_bytes + bytes.len() > self.max_bytes {
            return false;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.bufs.push(Held {
                    key: None,
                    bytes: Vec::new(),
                });
                self.bufs.len() - 1
            }
        };
        let held = &mut self.bufs[slot];
        held.key = Some(key);
        held.bytes.clear();
        held.bytes.extend_from_slice(bytes);
        self.held_bytes += bytes.len();
        self.peak_bytes = self.peak_bytes.max(self.held_bytes);
        self.heap.push(Reverse((at, self.pushed, slot)));
        self.pushed += 1;
        true
    }

    /// When the earliest held datagram is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The earliest datagram due at or before `now`, handed to `f` with its key; `false` when
    /// none is due.
    pub fn pop_due(&mut self, now: Instant, f: impl FnOnce(K, &[u8])) -> bool {
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= now => {}
            _ => return false,
        }
        let Some(Reverse((_, _, slot))) = self.heap.pop() else {
            return false;
        };
        let held = &mut self.bufs[slot];
        self.held_bytes -= held.bytes.len();
        if let Some(key) = held.key.take() {
            f(key, &held.bytes);
        }
        self.free.push(slot);
        true
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The most payload bytes held at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn datagrams_come_out_in_time_order_then_push_order() {
        let t0 = Instant::now();
        let mut line = DelayLine::new(1 << 20);
        assert!(line.push(t0 + 30 * MS, 'a', b"late"));
        assert!(line.push(t0 + 10 * MS, 'b', b"early"));
        assert!(line.push(t0 + 10 * MS, 'c', b"early too"));
        assert_eq!(line.next_due(), Some(t0 + 10 * MS));
        let mut out = Vec::new();
        while line.pop_due(t0 + 20 * MS, |k, b| out.push((k, b.to_vec()))) {}
        assert_eq!(
            out,
            vec![('b', b"early".to_vec()), ('c', b"early too".to_vec())]
        );
        assert_eq!(line.len(), 1);
        assert!(line.pop_due(t0 + 30 * MS, |k, b| out.push((k, b.to_vec()))));
        assert_eq!(out[2], ('a', b"late".to_vec()));
        assert!(line.is_empty());
    }

    #[test]
    fn buffers_are_reused_and_the_byte_bound_holds() {
        let t0 = Instant::now();
        let mut line = DelayLine::new(100);
        for i in 0..1_000u32 {
            assert!(line.push(t0, i, &[0u8; 60]));
            assert!(line.pop_due(t0, |k, b| assert_eq!((k, b.len()), (i, 60))));
        }
        assert_eq!(line.bufs.len(), 1, "one buffer, reused");
        assert!(line.push(t0, 1, &[0u8; 60]));
        assert!(!line.push(t0, 2, &[0u8; 60]), "100 bytes at most");
        assert_eq!(line.peak_bytes(), 60);
    }
}
