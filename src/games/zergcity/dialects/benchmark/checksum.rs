//! The benchmark bot's world checksum, kept at a cost bounded by what the datagrams carried,
//! never by the size of the world.
//!
//! The server's checksum is FNV-1a over the whole serialized world ([`codec::fnv1a`]): a
//! chain in which every byte's step depends on all the bytes before it, so a change cannot be
//! folded into it without hashing everything after the change. Hashing the world for every
//! delta (as the bot did until issue 35) made a 26-byte empty delta cost up to 1.5 MiB of
//! hashing: a server streaming them stalled the bot's worker for good.
//!
//! The value compared is still exactly the server's; what is bounded is how often it is
//! computed:
//! - **Known while unchanged.** The hash of a pass is kept until a write changes a byte of
//!   the world. A delta that changes nothing (empty, or rewriting the values the world
//!   already holds) is checked exactly against it, at no cost.
//! - **Paid for by the datagrams.** A new pass costs credit: every datagram earns
//!   [`HASH_ALLOWANCE`] bytes plus the bytes of its body (a FullSnapshot pays for its own
//!   world), and credit is capped at one pass. A delta that changed the world when the
//!   credit is short of a pass is applied and acknowledged but not checked; it is counted
//!   (`checksum_unverified`). Over any run of `k` datagrams the bot hashes at most
//!   `k × HASH_ALLOWANCE` bytes plus the bodies they carried plus one world.
//!
//! The verdicts stay true: a mismatch is only ever counted for a delta whose checksum was
//! compared with the world's real hash. A desync lives in the world until the next
//! FullSnapshot, so the next delta that is checked still finds it; with a world of at most
//! `HASH_ALLOWANCE` bytes (1,365 entities) every delta is checked, as before.

use super::codec;

/// Bytes of hashing every datagram earns besides its body: 32 KiB, so a world of up to
/// 1,365 entities is checked at every delta, and the largest (65,536 entities, 1.5 MiB)
/// about once in 48 deltas, about every 2.4 s at the benchmark's 20 ticks a second.
pub const HASH_ALLOWANCE: usize = 32 << 10;

/// The world's checksum, as far as it is known or affordable.
#[derive(Debug, Clone, Default)]
pub struct WorldChecksum {
    /// FNV-1a of the world as it stands: `None` once a write changed a byte since the pass.
    known: Option<u64>,
    /// Bytes of hashing paid for and not yet spent (at most one pass).
    credit: usize,
    /// Bytes hashed over the bot's life: the instrument of the tests (work, not time).
    hashed: u64,
}

impl WorldChecksum {
    /// A datagram arrived carrying `body` bytes (uncompressed) for a world of `world_len`.
    pub fn earn(&mut self, body: usize, world_len: usize) {
        self.credit = (self.credit)
            .saturating_add(HASH_ALLOWANCE.saturating_add(body))
            .min(world_len);
    }

    /// A write changed the world's bytes: the kept hash no longer holds.
    pub fn changed(&mut self) {
        self.known = None;
    }

    /// The checksum of `world` if it is known or the credit pays for a pass now; `None`
    /// when the delta goes unchecked.
    pub fn current(&mut self, world: &[u8]) -> Option<u64> {
        if let Some(h) = self.known {
            return Some(h);
        }
        if self.credit < world.len() {
            return None;
        }
        self.credit -= world.len();
        self.hashed += world.len() as u64;
        let h = codec::fnv1a(world);
        self.known = Some(h);
        Some(h)
    }

    /// Bytes hashed so far (for tests and debugging: every pass adds the world's size).
    pub fn bytes_hashed(&self) -> u64 {
        self.hashed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_world_is_checked_from_the_kept_hash_without_hashing_again() {
        let world = vec![7u8; 1 << 20];
        let mut c = WorldChecksum::default();
        c.earn(world.len(), world.len());
        assert_eq!(c.current(&world), Some(codec::fnv1a(&world)));
        assert_eq!(c.bytes_hashed(), 1 << 20, "one pass");
        for _ in 0..1000 {
            c.earn(0, world.len());
            assert_eq!(c.current(&world), Some(codec::fnv1a(&world)));
        }
        assert_eq!(c.bytes_hashed(), 1 << 20, "no pass while nothing changed");
    }

    #[test]
    fn a_changed_world_is_hashed_again_only_when_the_datagrams_paid_for_a_pass() {
        let world = vec![1u8; 4 * HASH_ALLOWANCE];
        let mut c = WorldChecksum::default();
        let mut checked = 0;
        for _ in 0..40 {
            c.earn(0, world.len());
            c.changed();
            checked += usize::from(c.current(&world).is_some());
        }
        assert_eq!(checked, 10, "one pass in four datagrams");
        assert_eq!(c.bytes_hashed(), 10 * world.len() as u64);
    }

    #[test]
    fn a_small_world_is_hashed_at_every_change() {
        let world = vec![1u8; HASH_ALLOWANCE];
        let mut c = WorldChecksum::default();
        for _ in 0..5 {
            c.earn(0, world.len());
            c.changed();
            assert_eq!(c.current(&world), Some(codec::fnv1a(&world)));
        }
    }
}
