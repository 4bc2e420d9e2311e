//! The datagram queues a host's socket is made of: a FIFO of datagrams stored back to back
//! in one buffer, bounded in count, that gives memory back after a burst.
//!
//! A queue is empty between the engine's calls (it pushes what it received and services
//! the host at once; it drains what a flush or service sent right after it), so a drained
//! queue hands its storage to a per-thread spare list ([`SPARE_STORAGE`]) and the next
//! queue that fills on that thread takes it from there. A worker with thousands of hosts
//! (one bot each, the default) so holds a few blocks rather than two per host (measured
//! 1.46 KiB a host at 1,000 one-bot hosts), and no push allocates once the spares have
//! grown to the usual burst.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// FIFO of datagrams stored back to back in one byte buffer: no allocation per datagram.
///
/// One block that grows with a burst and, once drained, keeps [`QUEUE_KEEP_BYTES`], rather
/// than a recycled `Vec` per datagram: such a free list kept as many blocks as the deepest burst ever queued (up to the limit),
/// each as large as the largest datagram it ever held (up to twice that, by `Vec`'s
/// doubling), and hundreds of small long-lived blocks scattered through the heap among the
/// short-lived ones keep the allocator from returning pages (README's "Server memory under
/// reconnect storms" has the figures).
#[derive(Debug, Default)]
pub(super) struct DatagramQueue {
    /// Sender or destination, start in `bytes`, length.
    pub(super) queue: VecDeque<(SocketAddr, usize, usize)>,
    pub(super) bytes: Vec<u8>,
    /// `bytes[..head]` were popped already.
    pub(super) head: usize,
    pub(super) limit: usize,
}

/// Popped bytes a never-empty queue may hold before it moves the rest to the front.
const QUEUE_COMPACT_BYTES: usize = 64 * 1024;

/// Bytes a drained queue keeps for the next burst: a City storm's usual burst (about 700
/// datagrams, 1 MB) grows past it and gives the rest back once it drains.
const QUEUE_KEEP_BYTES: usize = 256 * 1024;

/// Drained queues' storage kept per thread: more queues than this non-empty at once on a
/// thread (a server behind on several hosts) allocate their own and free it when drained.
const SPARE_STORAGE: usize = 8;

/// A drained queue's index and byte buffers, empty, for the next queue that fills.
type Storage = (VecDeque<(SocketAddr, usize, usize)>, Vec<u8>);

thread_local! {
    static SPARE: RefCell<Vec<Storage>> = const { RefCell::new(Vec::new()) };
}

/// Storage for a queue that starts filling: a spare one of this thread if any.
fn take_spare() -> Option<Storage> {
    SPARE.with(|s| s.borrow_mut().pop())
}

/// Keep a drained queue's (empty) storage for the next queue, unless enough are kept.
fn give_spare(storage: Storage) {
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_STORAGE {
            s.push(storage);
        }
    });
}

/// Spare storage blocks this thread holds.
#[cfg(test)]
pub(super) fn spare_count() -> usize {
    SPARE.with(|s| s.borrow().len())
}

impl DatagramQueue {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// False when the queue is full (the datagram is dropped).
    pub(super) fn push(&mut self, addr: SocketAddr, data: &[u8]) -> bool {
        if self.queue.len() >= self.limit {
            return false;
        }
        if self.queue.capacity() == 0 && self.bytes.capacity() == 0 {
            if let Some((queue, bytes)) = take_spare() {
                self.queue = queue;
                self.bytes = bytes;
            }
        }
        if self.head >= QUEUE_COMPACT_BYTES && self.head * 2 >= self.bytes.len() {
            // Only when the queue never drains: amortised, as every byte moves at most once
            // per doubling of what was popped.
            let head = self.head;
            self.bytes.drain(..head);
            for (_, start, _) in &mut self.queue {
                *start -= head;
            }
            self.head = 0;
        }
        self.queue.push_back((addr, self.bytes.len(), data.len()));
        self.bytes.extend_from_slice(data);
        true
    }

    /// Copy the oldest datagram into `out`; `None` when empty. Panics when `out` is too small.
    pub(super) fn pop_into(&mut self, out: &mut [u8]) -> Option<(SocketAddr, usize)> {
        let (addr, start, len) = self.queue.pop_front()?;
        assert!(
            out.len() >= len,
            "buffer of {} bytes is too small for a {len}-byte ENet datagram",
            out.len()
        );
        out[..len].copy_from_slice(&self.bytes[start..start + len]);
        self.head = start + len;
        if self.queue.is_empty() {
            self.bytes.clear();
            self.head = 0;
            // A burst deeper than usual (a server falling behind) does not pin its block
            // for the rest of the process: a few reallocations per such burst, none per
            // datagram.
            self.bytes.shrink_to(QUEUE_KEEP_BYTES);
            give_spare((
                std::mem::take(&mut self.queue),
                std::mem::take(&mut self.bytes),
            ));
        }
        Some((addr, len))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Bytes held for queued datagrams and kept for the next burst.
    #[cfg(test)]
    pub(super) fn capacity_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::enet::MAX_ENET_DATAGRAM;

    const A: &str = "10.0.0.1:5000";
    const B: &str = "10.0.0.2:7777";

    /// Datagram `i` of a queue test: its length (1..=1400) and bytes both follow from `i`.
    fn numbered(i: usize) -> Vec<u8> {
        let len = 1 + (i * 7919) % 1400;
        (0..len).map(|k| (i + k) as u8).collect()
    }

    #[test]
    fn datagram_queue_is_fifo_and_refuses_beyond_its_limit() {
        let (a, b): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
        let mut q = DatagramQueue::new(2);
        assert!(q.push(a, &[1, 2, 3]));
        assert!(q.push(b, &[4]));
        assert!(!q.push(a, &[5]), "a third datagram is over the limit of 2");
        let mut out = [0u8; 8];
        assert_eq!(q.pop_into(&mut out), Some((a, 3)));
        assert_eq!(out[..3], [1, 2, 3]);
        assert!(q.push(a, &[6, 7]), "popping one made room");
        assert_eq!(q.pop_into(&mut out), Some((b, 1)));
        assert_eq!(out[..1], [4]);
        assert_eq!(q.pop_into(&mut out), Some((a, 2)));
        assert_eq!(out[..2], [6, 7]);
        assert_eq!(q.pop_into(&mut out), None);
        assert!(q.is_empty());
    }

    /// A queue that never empties (three datagrams always waiting) moves its bytes to the
    /// front now and then: 10,000 datagrams (about 7 MB) pass through, in order and intact,
    /// and the queue never holds more than a small multiple of the compaction threshold.
    #[test]
    fn datagram_queue_that_never_drains_stays_bounded() {
        let a: SocketAddr = A.parse().unwrap();
        let mut q = DatagramQueue::new(16);
        let mut out = [0u8; MAX_ENET_DATAGRAM];
        let (mut pushed, mut popped, mut most) = (0usize, 0usize, 0usize);
        while popped < 10_000 {
            while pushed - popped < 4 {
                assert!(q.push(a, &numbered(pushed)));
                pushed += 1;
            }
            let (from, len) = q.pop_into(&mut out).expect("four are queued");
            assert_eq!(
                (from, &out[..len]),
                (a, &numbered(popped)[..]),
                "datagram {popped}"
            );
            popped += 1;
            most = most.max(q.capacity_bytes());
        }
        assert!(
            most <= 4 * QUEUE_COMPACT_BYTES,
            "held {most} bytes for at most 4 datagrams of at most 1400"
        );
    }

    /// Bursts of different depths and sizes, each drained: a queue that held a burst of
    /// megabytes keeps at most [`QUEUE_KEEP_BYTES`] once it drains, not the burst's block
    /// (nor, as a free list of per-datagram buffers would, one buffer per datagram).
    #[test]
    fn datagram_queue_gives_back_a_deep_burst_once_drained() {
        let a: SocketAddr = A.parse().unwrap();
        let mut q = DatagramQueue::new(4096);
        let mut out = [0u8; MAX_ENET_DATAGRAM];
        let mut largest = 0usize;
        for (round, depth) in [(0usize, 700usize), (1, 50), (2, 4000), (3, 300)] {
            let burst: Vec<Vec<u8>> = (0..depth).map(|i| numbered(round * 10_000 + i)).collect();
            largest = largest.max(burst.iter().map(Vec::len).sum());
            for d in &burst {
                assert!(q.push(a, d));
            }
            for d in &burst {
                let (_, len) = q.pop_into(&mut out).expect("queued");
                assert_eq!(&out[..len], &d[..]);
            }
            assert!(q.is_empty());
            assert!(
                q.capacity_bytes() <= QUEUE_KEEP_BYTES,
                "round {round}: {} bytes kept after a burst of up to {largest}",
                q.capacity_bytes()
            );
        }
        assert!(
            largest > 4 * QUEUE_KEEP_BYTES,
            "the bursts exceed what is kept"
        );
    }
}

#[cfg(test)]
mod spare_tests {
    use super::*;
    use crate::transport::enet::MAX_ENET_DATAGRAM;

    /// A thousand queues (one-bot hosts) that each fill and drain in turn hold no storage
    /// between turns: the one block moves from queue to queue through the thread's spare
    /// list, grown to the largest datagram and never allocated again.
    #[test]
    fn drained_queues_pass_one_block_between_them() {
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let mut queues: Vec<DatagramQueue> = (0..1000).map(|_| DatagramQueue::new(16)).collect();
        let mut out = [0u8; MAX_ENET_DATAGRAM];
        assert_eq!(spare_count(), 0);
        for round in 0..3u8 {
            for (i, q) in queues.iter_mut().enumerate() {
                let len = 1 + (i * 7) % 1000;
                let datagram = vec![round; len];
                assert!(q.push(a, &datagram));
                assert!(q.push(a, &datagram[..1]));
                assert_eq!(spare_count(), 0, "queue {i} took the spare block");
                if round > 0 {
                    // Round 0's largest datagram (1000 bytes, with a 1-byte one) grew the block.
                    assert!(q.capacity_bytes() > 1000, "queue {i}: the spare block");
                }
                assert_eq!(q.pop_into(&mut out), Some((a, len)));
                assert_eq!(&out[..len], &datagram[..]);
                assert_eq!(q.pop_into(&mut out), Some((a, 1)));
                assert_eq!(q.capacity_bytes(), 0, "queue {i} gave its storage back");
                assert_eq!(spare_count(), 1);
            }
        }
        // More queues non-empty at once than spares are kept: each has its own block, and
        // at most SPARE_STORAGE of them are kept once they drain.
        for q in queues.iter_mut().take(20) {
            assert!(q.push(a, &[1, 2, 3]));
        }
        assert_eq!(spare_count(), 0);
        for q in queues.iter_mut().take(20) {
            assert_eq!(q.pop_into(&mut out), Some((a, 3)));
        }
        assert_eq!(spare_count(), SPARE_STORAGE);
    }
}
