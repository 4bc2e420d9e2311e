//! Per-source-address bot counts (`summary.json`'s `source_addresses`): how rows group
//! addresses, and how two runs' counts add up (`tickswarm merge`). Here, below the report and
//! the scenario, because both use it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{SourceCounts, SourceRow};

/// Pools up to this many addresses are counted per address in the report; larger ones per
/// /24 (IPv4) or /64 (IPv6), and coarser still (/16, /48) if that leaves more groups.
pub const MAX_COUNTED_GROUPS: usize = 1024;

/// What a row of the per-source counts stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    Address,
    /// A network of this prefix length.
    Prefix(u8),
}

impl Grouping {
    /// `address`, `/24`, `/64`, ... for summary.json.
    pub fn name(self) -> String {
        match self {
            Grouping::Address => "address".into(),
            Grouping::Prefix(p) => format!("/{p}"),
        }
    }

    /// The first address of the row `a` is counted in (its network, or itself).
    pub fn network(self, a: IpAddr) -> IpAddr {
        match (self, a) {
            (Grouping::Address, a) => a,
            (Grouping::Prefix(p), IpAddr::V4(v)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(p)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v) & mask))
            }
            (Grouping::Prefix(p), IpAddr::V6(v)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v) & mask))
            }
        }
    }

    /// The row an address is counted in, as the report names it.
    pub fn label(self, a: IpAddr) -> String {
        match self {
            Grouping::Address => a.to_string(),
            Grouping::Prefix(p) => format!("{}/{p}", self.network(a)),
        }
    }
}

/// Bots per group: planned and connected, in address order.
pub fn count_by_group(
    grouping: Grouping,
    planned: impl Iterator<Item = IpAddr>,
    connected: impl Iterator<Item = (IpAddr, u64)>,
) -> Vec<(String, u64, u64)> {
    let mut rows: BTreeMap<IpAddr, (String, u64, u64)> = BTreeMap::new();
    for a in planned {
        rows.entry(grouping.network(a))
            .or_insert_with(|| (grouping.label(a), 0, 0))
            .1 += 1;
    }
    for (a, n) in connected {
        rows.entry(grouping.network(a))
            .or_insert_with(|| (grouping.label(a), 0, 0))
            .2 += n;
    }
    rows.into_values().collect()
}

/// The per-source counts of two runs of one pool (shards, for `tickswarm merge`), added row
/// by row. Shards that grouped differently are both counted at the coarser grouping, and a
/// union of more than [`MAX_COUNTED_GROUPS`] rows is coarsened again, so the table stays
/// small and every row is the sum over the runs.
pub fn merge_counts(a: Option<SourceCounts>, b: Option<&SourceCounts>) -> Option<SourceCounts> {
    let (a, b) = match (a, b) {
        (None, None) => return None,
        (Some(a), None) => return Some(a),
        (None, Some(b)) => return Some(b.clone()),
        (Some(a), Some(b)) => (a, b),
    };
    let parse = |g: &str| match g.strip_prefix('/') {
        Some(p) => p.parse().ok().map(Grouping::Prefix),
        None => Some(Grouping::Address),
    };
    let prefix = |g: Grouping, v6: bool| match g {
        Grouping::Address if v6 => 128,
        Grouping::Address => 32,
        Grouping::Prefix(p) => p,
    };
    let (Some(ga), Some(gb)) = (parse(&a.grouped_by), parse(&b.grouped_by)) else {
        return Some(a);
    };
    let rows: Vec<(IpAddr, u64, u64)> = a
        .rows
        .iter()
        .chain(b.rows.iter())
        .filter_map(|r| {
            let ip: IpAddr = r.source.split('/').next()?.parse().ok()?;
            Some((ip, r.planned, r.connected))
        })
        .collect();
    let v6 = rows.first().is_some_and(|r| r.0.is_ipv6());
    let mut grouping = if prefix(ga, v6) <= prefix(gb, v6) {
        ga
    } else {
        gb
    };
    loop {
        let mut merged: BTreeMap<IpAddr, (String, u64, u64)> = BTreeMap::new();
        for &(ip, planned, connected) in &rows {
            let e = merged
                .entry(grouping.network(ip))
                .or_insert_with(|| (grouping.label(ip), 0, 0));
            e.1 = e.1.saturating_add(planned);
            e.2 = e.2.saturating_add(connected);
        }
        let coarser = match (grouping, v6) {
            (Grouping::Address, false) => Some(Grouping::Prefix(24)),
            (Grouping::Address, true) => Some(Grouping::Prefix(64)),
            (Grouping::Prefix(24), false) => Some(Grouping::Prefix(16)),
            (Grouping::Prefix(64), true) => Some(Grouping::Prefix(48)),
            _ => None,
        };
        match coarser {
            Some(c) if merged.len() > MAX_COUNTED_GROUPS => grouping = c,
            _ => {
                return Some(SourceCounts {
                    grouped_by: grouping.name(),
                    pool_size: a.pool_size.max(b.pool_size),
                    rows: merged
                        .into_values()
                        .map(|(source, planned, connected)| SourceRow {
                            source,
                            planned,
                            connected,
                        })
                        .collect(),
                })
            }
        }
    }
}
