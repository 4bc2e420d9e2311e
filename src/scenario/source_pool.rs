//! `engine.source_addresses`: the local addresses bots bind their sockets to.
//!
//! Game servers cap connections per address and per subnet (a server admitting at most 5
//! clients per address and 20 per /24 refuses the 21st bot of a one-address load machine),
//! so a swarm that stands for many players must come from many addresses. A pool is a list
//! of addresses and CIDR ranges of one family; bot `i` binds to the pool's `i % len`-th
//! address, in list order, so the spread is round-robin and the same in every run and shard.
//!
//! Ranges are never expanded: an entry is a network and a count, and an index is found by
//! arithmetic (a /8 is 16 M addresses and costs a few integers). IPv4 ranges wider than /31
//! leave out their network and broadcast addresses; IPv6 ranges wider than /127 leave out
//! their first address (the subnet-router anycast address); `127.0.0.0` is never used.
//!
//! Within a range wider than a /24 (IPv4) or a /64 (IPv6) consecutive bots go to
//! consecutive /24s (/64s), not to consecutive addresses: servers also cap connections per
//! subnet (20 per /24 for the server above), and 2,000 bots over `127.1.0.0/16` in address
//! order would be 255 to a /24, while interleaved they are 7 or 8 per /24, each on its own
//! address. Index `k` of such a range is position `k + 1` in the order "first address of
//! every block, then the second of every block, ..."; position 0 is the network address and
//! the last position the broadcast address, so both are left out as in address order.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

pub use crate::metrics::sources::{count_by_group, merge_counts, Grouping, MAX_COUNTED_GROUPS};

/// One entry of the list, written as `text`: `count` addresses of the network `net` (an
/// integer of its family), from position `skip` of its order, spread over `blocks` blocks of
/// `2^block_bits` addresses (one block: address order).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    text: String,
    net: u128,
    /// The network's last address (for overlap checks).
    last: u128,
    skip: u128,
    count: u128,
    blocks: u128,
    block_bits: u32,
}

impl Entry {
    /// The entry's `k`-th address (`k < count`) as an integer.
    fn nth(&self, k: u128) -> u128 {
        let p = k + self.skip;
        if self.blocks <= 1 {
            self.net + p
        } else {
            self.net + ((p % self.blocks) << self.block_bits) + p / self.blocks
        }
    }
}

/// The validated pool. Serialized back as the list it was written as.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "OneOrMany", into = "Vec<String>")]
pub struct SourcePool {
    v6: bool,
    entries: Vec<Entry>,
    /// Running totals: entry `i` holds pool indices `ends[i-1] .. ends[i]`.
    ends: Vec<u128>,
}

/// `source_addresses: 10.0.0.5` or `source_addresses: [10.0.0.5, 10.1.0.0/16]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl TryFrom<OneOrMany> for SourcePool {
    type Error = String;
    fn try_from(v: OneOrMany) -> Result<Self, String> {
        match v {
            OneOrMany::One(s) => SourcePool::parse_list(&s),
            OneOrMany::Many(v) => SourcePool::from_entries(v.iter().map(String::as_str)),
        }
    }
}

impl From<SourcePool> for Vec<String> {
    fn from(p: SourcePool) -> Self {
        p.entries.into_iter().map(|e| e.text).collect()
    }
}

impl SourcePool {
    /// A comma-separated list (`--source-addresses 10.0.0.5,10.0.1.0/24`).
    pub fn parse_list(s: &str) -> Result<Self, String> {
        Self::from_entries(s.split(',').map(str::trim).filter(|e| !e.is_empty()))
    }

    /// Entries of one family that do not overlap.
    pub fn from_entries<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut entries = Vec::new();
        let mut family: Option<(bool, String)> = None;
        for item in items {
            let (v6, mut entry) = parse_entry(item.trim())?;
            entry.text = item.trim().to_string();
            match &family {
                Some((f, other)) if *f != v6 => {
                    return Err(format!(
                        "source_addresses mixes IPv4 and IPv6 (`{other}` and `{item}`): a bot \
                         reaches its target from an address of the target's family, so list \
                         one family"
                    ))
                }
                Some(_) => {}
                None => family = Some((v6, item.to_string())),
            }
            entries.push(entry);
        }
        let Some((v6, _)) = family else {
            return Err(
                "source_addresses is empty: list addresses or ranges, or leave the \
                        key out to bind the wildcard address"
                    .into(),
            );
        };
        let mut sorted: Vec<&Entry> = entries.iter().collect();
        sorted.sort_by_key(|e| e.net);
        for w in sorted.windows(2) {
            if w[0].last >= w[1].net {
                return Err(format!(
                    "source_addresses: `{}` and `{}` overlap; an address listed twice would \
                     get twice the bots",
                    w[0].text, w[1].text
                ));
            }
        }
        let mut ends = Vec::with_capacity(entries.len());
        let mut total: u128 = 0;
        for e in &entries {
            total = total
                .checked_add(e.count)
                .ok_or("source_addresses: the pool is larger than 2^128 addresses")?;
            ends.push(total);
        }
        Ok(Self { v6, entries, ends })
    }

    /// Addresses in the pool (at least 1).
    pub fn len(&self) -> u128 {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// Some range is spread over its /24s (/64s) rather than taken in address order.
    pub fn interleaved(&self) -> bool {
        self.entries.iter().any(|e| e.blocks > 1)
    }

    /// The pool's `k`-th address, `k` taken modulo its size (entries in list order).
    pub fn get(&self, k: u128) -> IpAddr {
        let k = k % self.len().max(1);
        let i = self.ends.partition_point(|&end| end <= k);
        let Some(e) = self.entries.get(i) else {
            return self.addr(0);
        };
        let before = if i == 0 { 0 } else { self.ends[i - 1] };
        self.addr(e.nth(k - before))
    }

    /// Bot `index`'s source address: round-robin over the pool.
    pub fn for_bot(&self, index: u32) -> IpAddr {
        self.get(u128::from(index))
    }

    pub fn first(&self) -> IpAddr {
        self.get(0)
    }

    /// The pool's last address in bot order (in a range wider than a /24 or /64, not the
    /// highest one).
    pub fn last(&self) -> IpAddr {
        self.get(self.len().saturating_sub(1))
    }

    fn addr(&self, n: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(n))
        } else {
            IpAddr::V4(Ipv4Addr::from(n as u32))
        }
    }

    /// The list as written, comma-separated.
    pub fn text(&self) -> String {
        self.entries
            .iter()
            .map(|e| e.text.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How the report groups the bots of `bots` (their source addresses): per address for a
    /// pool of up to [`MAX_COUNTED_GROUPS`] addresses, else per /24 (/64), or /16 (/48) when
    /// that still leaves more groups than that.
    pub fn grouping(&self, bots: impl Iterator<Item = IpAddr> + Clone) -> Grouping {
        if self.len() <= MAX_COUNTED_GROUPS as u128 {
            return Grouping::Address;
        }
        let fine = if self.v6 {
            Grouping::Prefix(64)
        } else {
            Grouping::Prefix(24)
        };
        let groups: std::collections::BTreeSet<IpAddr> = bots.map(|a| fine.network(a)).collect();
        match (groups.len() > MAX_COUNTED_GROUPS, self.v6) {
            (false, _) => fine,
            (true, false) => Grouping::Prefix(16),
            (true, true) => Grouping::Prefix(48),
        }
    }

    /// How bot `index` of `count` bots comes out per group, for `validate`: the groups that
    /// get the most and the fewest bots.
    pub fn share(&self, count: u64) -> (u64, u64) {
        let n = self.len();
        let c = u128::from(count);
        let most = c.div_ceil(n.max(1));
        let fewest = c / n.max(1);
        (most as u64, fewest as u64)
    }
}

/// One entry: whether it is IPv6, and the entry (without its text).
fn parse_entry(s: &str) -> Result<(bool, Entry), String> {
    let (addr_text, prefix_text) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = addr_text.trim().parse().map_err(|_| {
        format!(
            "source address `{s}`: not an IP address or CIDR range (write e.g. 10.0.0.5, \
             127.0.1.0/24 or fd00::/120)"
        )
    })?;
    let bits: u32 = if addr.is_ipv6() { 128 } else { 32 };
    let prefix: u32 = match prefix_text {
        None => bits,
        Some(p) => p
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&p| p <= bits)
            .ok_or_else(|| {
                format!("source range `{s}`: the prefix length must be a number from 0 to {bits}")
            })?,
    };
    let n: u128 = match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    let host_mask: u128 = if bits - prefix >= 128 {
        u128::MAX
    } else {
        (1u128 << (bits - prefix)) - 1
    };
    if n & host_mask != 0 {
        let net = n & !host_mask;
        let shown = match addr {
            IpAddr::V4(_) => Ipv4Addr::from(net as u32).to_string(),
            IpAddr::V6(_) => Ipv6Addr::from(net).to_string(),
        };
        return Err(format!(
            "source range `{s}` has host bits set: write `{shown}/{prefix}` for the whole \
             network, or the address alone"
        ));
    }
    let last = n | host_mask;
    // Blocks a wide range is spread over: /24s (IPv4), /64s (IPv6).
    let block_prefix: u32 = if addr.is_ipv6() { 64 } else { 24 };
    let (blocks, block_bits) = if prefix < block_prefix {
        (1u128 << (block_prefix - prefix), bits - block_prefix)
    } else {
        (1, 0)
    };
    let entry = |skip: u128, count: u128| Entry {
        text: String::new(),
        net: n,
        last,
        skip,
        count,
        blocks,
        block_bits,
    };
    match addr {
        IpAddr::V4(_) => {
            let (first4, last4) = (Ipv4Addr::from(n as u32), Ipv4Addr::from(last as u32));
            if first4.octets()[0] == 0 {
                return Err(format!(
                    "source address `{s}`: 0.0.0.0/8 is not an address a socket can send from \
                     (0.0.0.0 binds every address: leave source_addresses out for that)"
                ));
            }
            if last4.octets()[0] >= 224 {
                return Err(format!(
                    "source address `{s}`: multicast and reserved addresses (224.0.0.0 and \
                     above) cannot be a source"
                ));
            }
            // Network and broadcast addresses of real subnets are not hosts; /31 (RFC 3021)
            // and /32 have none. They are the first and last positions in either order.
            let (skip, count) = if prefix <= 30 {
                (1, host_mask - 1)
            } else {
                (0, host_mask + 1)
            };
            // 127.0.0.0 is the loopback network's own address, never a host.
            if skip == 0 && n == u128::from(u32::from(Ipv4Addr::new(127, 0, 0, 0))) {
                if count == 1 {
                    return Err(format!(
                        "source address `{s}`: 127.0.0.0 is the loopback network's own \
                         address; use 127.0.0.1 or any other 127.x.y.z"
                    ));
                }
                return Ok((false, entry(1, count - 1)));
            }
            Ok((false, entry(skip, count)))
        }
        IpAddr::V6(a) => {
            if a.is_unspecified() && prefix == 128 {
                return Err(format!(
                    "source address `{s}`: `::` binds every address: leave source_addresses \
                     out for that"
                ));
            }
            // The rule that refuses ::/0 is coverage, judged on the range's every address
            // (its last as well as its first), so it holds for any list: no entry reaches
            // into ff00::/8, and entries do not overlap, so no pool covers any of it.
            // `::/1` with `8000::/1` (the whole space in two halves) is refused by the second.
            if last >> 120 == 0xff {
                return Err(format!(
                    "source range `{s}` reaches into ff00::/8: multicast addresses cannot be \
                     a source (list unicast ranges; the widest that avoids it from the top is \
                     8000::/2)"
                ));
            }
            if let Some(mapped) = reaches_ipv4_mapped(n, last) {
                return Err(format!(
                    "source range `{s}` covers {mapped}: an IPv4-mapped address is an IPv4 \
                     source, not an IPv6 one (list it as IPv4)"
                ));
            }
            // The all-zero interface id is the subnet-router anycast address (RFC 4291).
            let (skip, count) = if prefix <= 126 {
                (1, host_mask)
            } else {
                (0, host_mask + 1)
            };
            Ok((true, entry(skip, count)))
        }
    }
}

/// IPv4-mapped addresses, `::ffff:0:0/96`, when `[n, last]` reaches them.
fn reaches_ipv4_mapped(n: u128, last: u128) -> Option<&'static str> {
    const MAPPED: u128 = 0xffff << 32;
    const MAPPED_LAST: u128 = MAPPED | 0xffff_ffff;
    (n <= MAPPED_LAST && last >= MAPPED).then_some("::ffff:0:0/96")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{SourceCounts, SourceRow};
    use std::collections::BTreeMap;

    fn pool(entries: &[&str]) -> SourcePool {
        SourcePool::from_entries(entries.iter().copied()).expect("a valid pool")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    /// A /8 is indexed by arithmetic: 16,777,214 addresses without 127.0.0.0 and the
    /// broadcast address, the k-th found at once, consecutive bots on consecutive /24s.
    #[test]
    fn an_ipv4_slash_8_is_indexed_without_expanding_it() {
        let p = pool(&["127.0.0.0/8"]);
        assert!(p.interleaved());
        assert_eq!(p.len(), (1 << 24) - 2);
        // Position 0 (127.0.0.0) is left out: bot 0 is on the second /24's first address.
        assert_eq!(p.first(), ip("127.0.1.0"));
        assert_eq!(p.get(1), ip("127.0.2.0"));
        assert_eq!(p.get(65_534), ip("127.255.255.0"));
        assert_eq!(p.get(65_535), ip("127.0.0.1"));
        // 1,000,001 = 15 * 65,536 + 16,961: the 16,961st /24 (127.66.65.0/24), host 15.
        assert_eq!(p.for_bot(1_000_000), ip("127.66.65.15"));
        // The broadcast address is the last position, left out.
        assert_eq!(p.last(), ip("127.255.254.255"));
        // Round-robin: the index wraps at the pool's size.
        assert_eq!(p.get(p.len()), p.first());
        assert_eq!(p.for_bot(u32::MAX), p.get(u128::from(u32::MAX) % p.len()));
        let all: std::collections::HashSet<IpAddr> = (0..200_000).map(|k| p.get(k)).collect();
        assert_eq!(all.len(), 200_000, "no address twice");
        assert!(!all.contains(&ip("127.0.0.0")));
    }

    /// The motivating limit: at most 20 connections per /24. 2,000 bots over a /16 are 7 or
    /// 8 per /24, each on its own address; a /24 or narrower is in address order.
    #[test]
    fn bots_over_a_wide_range_are_spread_over_its_slash_24s() {
        let p = pool(&["127.1.0.0/16"]);
        let mut per_24: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for i in 0..2000 {
            let a = p.for_bot(i);
            assert!(seen.insert(a), "{a} twice");
            *per_24.entry(Grouping::Prefix(24).label(a)).or_default() += 1;
        }
        assert_eq!(per_24.len(), 256);
        assert_eq!(per_24.values().max(), Some(&8));
        assert_eq!(per_24.values().min(), Some(&7));
        let narrow = pool(&["127.0.1.0/24"]);
        assert!(!narrow.interleaved());
        assert_eq!(narrow.first(), ip("127.0.1.1"));
        assert_eq!(narrow.get(1), ip("127.0.1.2"));
        assert_eq!(narrow.last(), ip("127.0.1.254"));
        let v6 = pool(&["fd00::/63"]);
        assert_eq!(
            (0..3).map(|k| v6.get(k)).collect::<Vec<_>>(),
            ["fd00:0:0:1::", "fd00::1", "fd00:0:0:1::1"]
                .map(ip)
                .to_vec()
        );
    }

    #[test]
    fn a_slash_31_has_both_addresses_and_a_slash_32_one() {
        let p = pool(&["10.0.0.0/31"]);
        assert_eq!(
            (p.len(), p.first(), p.last()),
            (2, ip("10.0.0.0"), ip("10.0.0.1"))
        );
        let p = pool(&["10.0.0.7/32"]);
        assert_eq!((p.len(), p.first()), (1, ip("10.0.0.7")));
        assert_eq!(p.for_bot(5), ip("10.0.0.7"));
        // A /30 is its two hosts.
        let p = pool(&["10.0.0.4/30"]);
        assert_eq!(
            (p.len(), p.first(), p.last()),
            (2, ip("10.0.0.5"), ip("10.0.0.6"))
        );
    }

    #[test]
    fn the_loopback_network_address_is_never_used() {
        let p = pool(&["127.0.0.0/31"]);
        assert_eq!((p.len(), p.first()), (1, ip("127.0.0.1")));
        let e = SourcePool::parse_list("127.0.0.0").unwrap_err();
        assert!(e.contains("loopback network's own address"), "{e}");
    }

    #[test]
    fn an_ipv6_slash_120_leaves_out_its_anycast_address() {
        let p = pool(&["fd00::/120"]);
        assert!(p.is_ipv6());
        assert_eq!(p.len(), 255);
        assert_eq!(p.first(), ip("fd00::1"));
        assert_eq!(p.last(), ip("fd00::ff"));
        assert_eq!(pool(&["fd00::7/128"]).first(), ip("fd00::7"));
        assert_eq!(pool(&["fd00::/127"]).len(), 2);
    }

    /// Entries are taken in list order: single addresses and ranges alike.
    #[test]
    fn a_mixed_list_is_round_robin_in_list_order() {
        let p = pool(&["10.0.0.5", "10.0.1.0/30", "10.0.0.9"]);
        assert_eq!(p.len(), 4);
        let spread: Vec<IpAddr> = (0..6).map(|i| p.for_bot(i)).collect();
        assert_eq!(
            spread,
            ["10.0.0.5", "10.0.1.1", "10.0.1.2", "10.0.0.9", "10.0.0.5", "10.0.1.1"]
                .map(ip)
                .to_vec()
        );
        assert_eq!(
            SourcePool::parse_list("10.0.0.5, 10.0.1.0/30,10.0.0.9"),
            Ok(p)
        );
    }

    #[test]
    fn mistakes_are_refused_with_the_reason() {
        let cases = [
            ("10.0.0.0/33", "prefix length must be a number from 0 to 32"),
            ("10.0.0.1/24", "write `10.0.0.0/24`"),
            ("10.0.0", "not an IP address or CIDR range"),
            ("0.0.0.0", "leave source_addresses out"),
            ("224.0.0.1", "multicast"),
            ("::", "leave source_addresses out"),
            ("ff02::1", "multicast"),
        ];
        for (text, why) in cases {
            let e = SourcePool::parse_list(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let e = SourcePool::parse_list("10.0.0.5, fd00::1").unwrap_err();
        assert!(e.contains("mixes IPv4 and IPv6"), "{e}");
        let e = SourcePool::parse_list("10.0.0.0/24, 10.0.0.7").unwrap_err();
        assert!(e.contains("overlap"), "{e}");
        assert!(SourcePool::parse_list(" , ").unwrap_err().contains("empty"));
    }

    /// ::/0 is refused for what it covers, so any list covering the same is refused too,
    /// however it is cut: every range is judged on its last address as well as its first.
    #[test]
    fn a_list_covering_what_a_range_may_not_is_refused_like_the_range() {
        let refused = [
            ("::/0", "ff00::/8"),
            // The first half is refused for the IPv4-mapped block, the second for ff00::/8.
            ("::/1, 8000::/1", "::ffff:0:0/96"),
            ("4000::/2, 8000::/1", "ff00::/8"),
            ("8000::/1", "ff00::/8"),
            ("fe00::/7", "ff00::/8"),
            ("f000::/4", "ff00::/8"),
            ("::/1", "::ffff:0:0/96"),
            ("::/64", "::ffff:0:0/96"),
            ("::ffff:10.0.0.0/120", "::ffff:0:0/96"),
        ];
        for (list, covered) in refused {
            match SourcePool::parse_list(list) {
                Ok(p) => panic!("`{list}` accepted as a pool of {} addresses", p.len()),
                Err(e) => assert!(e.contains(covered), "`{list}`: {e}"),
            }
        }
        // Wide unicast lists that avoid both stay pools, whatever their size.
        let p = pool(&["8000::/2", "c000::/3", "2000::/3"]);
        assert_eq!(
            p.len(),
            (1u128 << 126) - 1 + (1u128 << 125) - 1 + (1u128 << 125) - 1
        );
        assert_eq!(pool(&["fe80::/10"]).len(), (1u128 << 118) - 1);
    }

    /// Shards of one run (bots 0, 2, 4, ... and 1, 3, 5, ...) merge into the whole run's
    /// counts; a shard counted per /24 takes the other to /24 too.
    #[test]
    fn shard_counts_merge_row_by_row() {
        let row = |s: &str, p, c| SourceRow {
            source: s.into(),
            planned: p,
            connected: c,
        };
        let by = |g: &str, rows: Vec<SourceRow>| SourceCounts {
            grouped_by: g.into(),
            pool_size: 14,
            rows,
        };
        let a = by(
            "address",
            vec![row("127.0.1.1", 2, 2), row("127.0.1.3", 1, 0)],
        );
        let b = by(
            "address",
            vec![row("127.0.1.2", 1, 1), row("127.0.1.1", 1, 1)],
        );
        let m = merge_counts(Some(a.clone()), Some(&b)).unwrap();
        assert_eq!(m.grouped_by, "address");
        assert_eq!(
            m.rows,
            vec![
                row("127.0.1.1", 3, 3),
                row("127.0.1.2", 1, 1),
                row("127.0.1.3", 1, 0)
            ]
        );
        let c = by("/24", vec![row("127.0.2.0/24", 5, 4)]);
        let m = merge_counts(Some(a.clone()), Some(&c)).unwrap();
        assert_eq!(m.grouped_by, "/24");
        assert_eq!(
            m.rows,
            vec![row("127.0.1.0/24", 3, 2), row("127.0.2.0/24", 5, 4)]
        );
        assert_eq!(merge_counts(None, Some(&a)), Some(a.clone()));
        assert_eq!(merge_counts(None, None), None);
    }

    #[test]
    fn large_pools_are_counted_per_network() {
        let small = pool(&["127.0.1.0/28"]);
        let bots = (0..30).map(|i| small.for_bot(i));
        assert_eq!(small.grouping(bots.clone()), Grouping::Address);
        let rows = count_by_group(Grouping::Address, bots, [(ip("127.0.1.1"), 2)].into_iter());
        assert_eq!(rows.len(), 14);
        assert_eq!(rows[0], ("127.0.1.1".into(), 3, 2));
        assert_eq!(rows[13], ("127.0.1.14".into(), 2, 0));

        let wide = pool(&["127.1.0.0/16"]);
        let bots = (0..2000).map(|i| wide.for_bot(i));
        let g = wide.grouping(bots.clone());
        assert_eq!(g, Grouping::Prefix(24));
        let rows = count_by_group(g, bots, [(ip("127.1.1.0"), 1)].into_iter());
        assert_eq!(rows.len(), 256);
        assert_eq!(rows[0], ("127.1.0.0/24".into(), 7, 0));
        assert_eq!(rows[1], ("127.1.1.0/24".into(), 8, 1));
        assert_eq!(rows.iter().map(|r| r.1).sum::<u64>(), 2000);
        // Spread over more /24s than a table holds: per /16.
        let big = pool(&["127.0.0.0/8"]);
        let bots = (0..2000).map(|i| big.for_bot(i));
        assert_eq!(big.grouping(bots), Grouping::Prefix(16));
        let v6 = pool(&["fd00::/112"]);
        assert_eq!(v6.grouping((0..10).map(|i| v6.for_bot(i))).name(), "/64");
    }
}
