//! Maps keyed by small integer entity ids. Bots keep an entity table each and update it for
//! every record of every snapshot, so the default SipHash (built against hash flooding, a
//! threat a bot talking to the server under test does not face) showed in the hot path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of an integer key: one multiply, high bits well mixed for hashbrown.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0 ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A HashMap keyed by entity id.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// An empty map with room for `n` entries.
pub fn id_map_with_capacity<K, V>(n: usize) -> IdMap<K, V> {
    HashMap::with_capacity_and_hasher(n, BuildHasherDefault::default())
}
