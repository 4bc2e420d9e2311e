//! The last `N` states of a game world, by tick: what both ends of a protocol with deltas on
//! acknowledged baselines keep.
//!
//! The server encodes a delta against the newest tick the client acknowledged, and the client
//! applies it onto its copy of that tick; either may no longer hold it (too old, or never
//! received), and then the server sends a full state and the client refuses the delta. Held
//! in a fixed ring indexed by `tick % N`, so memory is fixed whatever a peer sends, and a
//! lookup checks the tick so an overwritten slot is never taken for the one asked for.

/// The last `N` states by tick (see the module docs). Tick 0 is never held: protocols use it
/// for "no baseline".
///
/// ```
/// use tickswarm::api::baselines::Baselines;
/// let mut worlds: Baselines<[i16; 2], 4> = Baselines::new();
/// worlds.put(7, [1, 2]);
/// assert_eq!(worlds.get(7), Some(&[1, 2]));
/// worlds.put(11, [3, 4]); // 11 % 4 == 7 % 4: tick 7 is gone
/// assert_eq!((worlds.get(7), worlds.get(11)), (None, Some(&[3, 4])));
/// assert_eq!(worlds.get(0), None);
/// ```
#[derive(Debug, Clone)]
pub struct Baselines<T, const N: usize> {
    slots: Box<[Option<(u32, T)>]>,
}

impl<T, const N: usize> Default for Baselines<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> Baselines<T, N> {
    /// Holding nothing; allocates the `N` slots once.
    ///
    /// # Panics
    /// If `N` is 0 (caught at the first construction).
    pub fn new() -> Self {
        assert!(N > 0, "Baselines of no slot");
        Self {
            slots: (0..N).map(|_| None).collect(),
        }
    }

    /// Keep `state` as tick `tick`, in place of the tick `N` (or a multiple of `N`) before
    /// it. Tick 0 is not kept.
    pub fn put(&mut self, tick: u32, state: T) {
        if tick != 0 {
            self.slots[tick as usize % N] = Some((tick, state));
        }
    }

    /// The state of `tick`, if it is still held.
    pub fn get(&self, tick: u32) -> Option<&T> {
        match &self.slots[tick as usize % N] {
            Some((t, s)) if *t == tick && tick != 0 => Some(s),
            _ => None,
        }
    }
}
