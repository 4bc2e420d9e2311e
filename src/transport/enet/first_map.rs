//! [`FirstMap`]: a map that keeps its first entry inline and builds a hash table only for
//! more.
//!
//! A host's per-address tables (the proven addresses of the gate, the sessions the
//! acknowledgement timing knows) hold one key at a bots' host: the server's address. A
//! `HashMap` of one entry allocates its smallest table (about 200 bytes for these keys) and
//! hashes the key with SipHash on every lookup, and a bots' host looks up per datagram. With
//! one host per bot (the default), those tables were about 0.4 KiB of every bot. A server's
//! host holds thousands of addresses and uses the table as before.

use std::collections::HashMap;
use std::hash::Hash;

/// A map whose first entry is inline; a second key goes to a `HashMap`. Lookups compare
/// with the inline entry first, then the table (an empty table allocates nothing and
/// answers without hashing).
#[derive(Debug)]
pub(super) struct FirstMap<K, V> {
    first: Option<(K, V)>,
    rest: HashMap<K, V>,
}

impl<K, V> Default for FirstMap<K, V> {
    fn default() -> Self {
        Self {
            first: None,
            rest: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Copy, V> FirstMap<K, V> {
    pub(super) fn get(&self, k: &K) -> Option<&V> {
        match &self.first {
            Some((fk, v)) if fk == k => Some(v),
            _ => self.rest.get(k),
        }
    }

    pub(super) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match &mut self.first {
            Some((fk, v)) if fk == k => Some(v),
            _ => self.rest.get_mut(k),
        }
    }

    pub(super) fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Insert or replace; returns the value `k` had.
    pub(super) fn insert(&mut self, k: K, v: V) -> Option<V> {
        if let Some(old) = self.get_mut(&k) {
            return Some(std::mem::replace(old, v));
        }
        if self.first.is_none() {
            self.first = Some((k, v));
        } else {
            self.rest.insert(k, v);
        }
        None
    }

    /// The value of `k`, inserted from `make` when absent.
    pub(super) fn get_or_insert_with(&mut self, k: K, make: impl FnOnce() -> V) -> &mut V {
        if self.first.is_none() && !self.rest.contains_key(&k) {
            return &mut self.first.insert((k, make())).1;
        }
        match &mut self.first {
            Some((fk, v)) if *fk == k => v,
            _ => self.rest.entry(k).or_insert_with(make),
        }
    }

    pub(super) fn remove(&mut self, k: &K) -> Option<V> {
        match &self.first {
            Some((fk, _)) if fk == k => self.first.take().map(|(_, v)| v),
            _ => self.rest.remove(k),
        }
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        if let Some((k, v)) = &mut self.first {
            if !keep(k, v) {
                self.first = None;
            }
        }
        self.rest.retain(|k, v| keep(k, v));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// Entries the hash table has room for (0 while every entry so far fit inline).
    #[cfg(test)]
    pub(super) fn table_capacity(&self) -> usize {
        self.rest.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map answers like a `HashMap` through inserts, replacements, removals and retains
    /// of one to five keys, and builds no table while it holds at most one key.
    #[test]
    fn first_map_behaves_as_a_map_and_keeps_one_key_inline() {
        let mut m: FirstMap<u32, u32> = FirstMap::default();
        let mut reference: HashMap<u32, u32> = HashMap::new();
        let steps: [(char, u32, u32); 16] = [
            ('i', 1, 10),
            ('i', 1, 11),
            ('r', 1, 0),
            ('i', 2, 20),
            ('i', 3, 30),
            ('i', 4, 40),
            ('r', 2, 0),
            ('i', 2, 21),
            ('g', 5, 50),
            ('g', 3, 99),
            ('k', 0, 0),
            ('r', 9, 0),
            ('i', 6, 60),
            ('r', 4, 0),
            ('r', 3, 0),
            ('i', 3, 31),
        ];
        for (n, &(op, k, v)) in steps.iter().enumerate() {
            match op {
                'i' => assert_eq!(m.insert(k, v), reference.insert(k, v), "step {n}"),
                'r' => assert_eq!(m.remove(&k), reference.remove(&k), "step {n}"),
                'g' => {
                    let got = *m.get_or_insert_with(k, || v);
                    assert_eq!(got, *reference.entry(k).or_insert(v), "step {n}");
                }
                _ => {
                    // Keep the even values only.
                    m.retain(|_, v| *v % 2 == 0);
                    reference.retain(|_, v| *v % 2 == 0);
                }
            }
            assert_eq!(m.len(), reference.len(), "step {n}");
            for key in 0..10 {
                assert_eq!(m.get(&key), reference.get(&key), "step {n}, key {key}");
                assert_eq!(m.contains_key(&key), reference.contains_key(&key));
            }
        }
        let mut one: FirstMap<u32, u32> = FirstMap::default();
        one.insert(7, 1);
        *one.get_mut(&7).expect("inserted") += 1;
        one.insert(7, 3);
        assert_eq!(one.get(&7), Some(&3));
        assert_eq!(one.table_capacity(), 0, "one key needs no table");
    }
}
