//! Counters keyed by static names, for the open-ended sets (decode errors by reason,
//! protocol events). A handful of names per run, so a linear scan beats hashing and nothing is
//! allocated once a name has been seen.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedCounters {
    entries: Vec<(&'static str, &'static str, u64)>,
}

impl NamedCounters {
    /// Add `n` to counter `name`.
    pub fn add(&mut self, name: &'static str, n: u64) {
        self.add2(name, "", n);
    }

    /// A counter named `a.b` (message and reason, say) without building the string.
    pub fn add2(&mut self, a: &'static str, b: &'static str, n: u64) {
        match self.entries.iter_mut().find(|(x, y, _)| *x == a && *y == b) {
            Some((_, _, v)) => *v += n,
            None => self.entries.push((a, b, n)),
        }
    }

    /// Value of a counter by its full name (`a` or `a.b`).
    pub fn get(&self, full: &str) -> u64 {
        self.iter().filter(|(k, _)| k == full).map(|(_, v)| v).sum()
    }

    /// Sum of the counters whose first name part is `a`.
    pub fn get_prefix(&self, a: &str) -> u64 {
        self.entries.iter().filter(|e| e.0 == a).map(|e| e.2).sum()
    }

    /// The sum of every counter.
    pub fn total(&self) -> u64 {
        self.entries.iter().map(|e| e.2).sum()
    }

    /// Add every counter of `o`.
    pub fn merge(&mut self, o: &NamedCounters) {
        for &(a, b, n) in &o.entries {
            self.add2(a, b, n);
        }
    }

    /// Set every counter to 0, keeping the names.
    pub fn zero(&mut self) {
        for e in &mut self.entries {
            e.2 = 0;
        }
    }

    /// `(full name, value)` pairs, non-zero only, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        let mut v: Vec<(String, u64)> = self
            .entries
            .iter()
            .filter(|e| e.2 > 0)
            .map(|&(a, b, n)| {
                (
                    if b.is_empty() {
                        a.to_string()
                    } else {
                        format!("{a}.{b}")
                    },
                    n,
                )
            })
            .collect();
        v.sort();
        v.into_iter()
    }
}
