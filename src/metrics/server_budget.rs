//! How much of a target's `/metrics` a run keeps: hard caps on what a scrape may add to the
//! run's memory and to summary.json, whatever the endpoint sends.
//!
//! The endpoint is the server under test, and it may be broken or hostile: a family with a
//! label per player, new names on every scrape, a multi-megabyte label value. Everything it
//! sends past a cap is counted, never kept, so the run's memory and the summary's size are
//! bounded by these figures and not by the endpoint (see docs/guide/server-metrics.md).

use std::sync::atomic::{AtomicU64, Ordering};

/// Series kept per endpoint when the scenario names its families (`series:`). A game
/// server's own families (tick time by phase, memory, sessions by map) come to tens; a
/// family with a label per session or per player is not a series a chart or threshold can
/// read, and is what exhausted memory before (500,000 label values, 2.43 GB).
pub const MAX_NAMED_SERIES_PER_ENDPOINT: usize = 512;

/// Series (label sets) kept per family: tens of maps, shards or phases fit; a label per
/// player does not.
pub const MAX_SERIES_PER_FAMILY: usize = 128;

/// The longest series key (`name{label="value",...}`) kept. Keys are stored once per series
/// and written into summary.json; a longer one is a label carrying a payload, not a name.
pub const MAX_KEY_BYTES: usize = 256;

/// Distinct left-out series remembered per endpoint, to count each once
/// (`series_left_out`). As 64-bit hashes, this is at most about 0.5 MB an endpoint; before,
/// the names themselves were kept without bound (1.71 GB in 38 s of new names each scrape).
/// Past it, `series_left_out` stays at this figure and `dropped.samples_left_out` still
/// counts every sample left out.
pub const MAX_LEFT_OUT_NAMES: usize = 10_000;

/// Series kept over the whole run, all endpoints together: 16 endpoints of 64.
pub const MAX_SERIES_PER_RUN: u64 = 1024;

/// Points kept over the whole run, all series together. A histogram's point is about 90
/// bytes of JSON, so this keeps the block under about 23 MB, well inside the 64 MiB summary
/// that `merge` and `compare` read; it is an hour of 64 series at 1 s, with room.
pub const MAX_POINTS_PER_RUN: u64 = 250_000;

/// What one run may still keep, shared by its scrapers (one per endpoint).
#[derive(Debug)]
pub struct RunBudget {
    series: AtomicU64,
    points: AtomicU64,
}

impl Default for RunBudget {
    fn default() -> Self {
        Self::new(MAX_SERIES_PER_RUN, MAX_POINTS_PER_RUN)
    }
}

impl RunBudget {
    pub fn new(series: u64, points: u64) -> Self {
        Self {
            series: AtomicU64::new(series),
            points: AtomicU64::new(points),
        }
    }

    /// Take room for one more series; `false` when the run has none left.
    pub fn take_series(&self) -> bool {
        take(&self.series)
    }

    /// Take room for one more point; `false` when the run has none left.
    pub fn take_point(&self) -> bool {
        take(&self.points)
    }
}

fn take(left: &AtomicU64) -> bool {
    left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_gives_exactly_its_room() {
        let b = RunBudget::new(2, 1);
        assert_eq!(
            (b.take_series(), b.take_series(), b.take_series()),
            (true, true, false)
        );
        assert_eq!((b.take_point(), b.take_point()), (true, false));
    }
}
