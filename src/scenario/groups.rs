//! `groups:`: the population as a mix of players, each group with its own size, behaviour,
//! network conditions, target and source addresses.
//!
//! A group's size is a `share` of the population or a fixed `count`. The fixed counts are
//! taken first; the shares divide what is left, rounded to whole bots by the largest
//! remainder (each group gets the whole part of its share, and the bots left over go one
//! each to the groups with the largest fractional parts, the earlier group first on a tie),
//! so the sizes always add up to the population. Which bot is in which group is a shuffle of
//! those sizes seeded by the scenario's seed: the same seed puts the same bots in the same
//! groups, in every run and every shard.
//!
//! A scenario without `groups:` is one implicit group (named [`IMPLICIT`]) with the
//! scenario's own settings, and its summary.json has no `groups` block.

use serde::{Deserialize, Serialize};

use super::bot::{BehaviourOverride, Target};
use super::lifecycle::Lifecycle;
use super::share::Share;
use super::SourcePool;
use crate::netsim::NetworkConditions;

/// The most groups a scenario may have (defined with the metrics, which keep a recorder per
/// group, so that reports can check it without reaching up to scenarios).
pub use crate::metrics::groups::MAX_GROUPS;

/// The name of the one group of a scenario without `groups:`.
pub const IMPLICIT: &str = "all";

/// One entry of `groups:` as written.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(try_from = "GroupRaw")]
pub struct GroupSpec {
    /// Letters, digits, `_` and `-`: thresholds name it (`rtt{group=mobile} p99 < 250ms`)
    /// and summary.json keys by it.
    pub name: String,
    pub size: GroupSize,
    /// Keys set here replace the scenario's `behaviour:` for this group.
    #[serde(skip_serializing_if = "BehaviourOverride::is_empty")]
    pub behaviour: BehaviourOverride,
    /// Replaces the scenario's `network:` for this group (`{}`: the real link only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConditions>,
    /// This group's servers instead of the scenario's `target:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    /// This group's source addresses instead of `engine.source_addresses`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_addresses: Option<SourcePool>,
    /// Arrivals, session lengths and a reconnect storm (see [`super::lifecycle`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

/// How many bots a group has.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum GroupSize {
    /// A fraction (0 to 1) of the population left after the fixed counts.
    Share(f64),
    /// Exactly this many bots.
    Count(u64),
    /// As many as its arrival rate brings (`lifecycle.arrival`): not part of the population
    /// the stages ramp.
    Arrivals,
}

/// The keys an entry may have; [`GroupSpec`] checks the combination, so a mistake is
/// reported at the entry's own line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupRaw {
    name: String,
    #[serde(default)]
    share: Option<Share>,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    behaviour: BehaviourOverride,
    #[serde(default, deserialize_with = "super::bot::network")]
    network: Option<NetworkConditions>,
    #[serde(default, deserialize_with = "super::bot::group_target")]
    target: Option<Target>,
    #[serde(default)]
    source_addresses: Option<SourcePool>,
    #[serde(default)]
    lifecycle: Option<Lifecycle>,
}

impl TryFrom<GroupRaw> for GroupSpec {
    type Error = String;
    fn try_from(r: GroupRaw) -> Result<Self, String> {
        check_name(&r.name)?;
        let arrivals = r.lifecycle.as_ref().is_some_and(|l| l.arrival.is_some());
        if let Some(l) = &r.lifecycle {
            l.check().map_err(|m| format!("group `{}`: {m}", r.name))?;
        }
        let size = match (r.share, r.count, arrivals) {
            (Some(_), Some(_), _) => {
                return Err(format!(
                    "group `{}` has both `share` and `count`: give one",
                    r.name
                ))
            }
            (Some(_), None, true) | (None, Some(_), true) => {
                return Err(format!(
                    "group `{}` arrives at a rate (lifecycle.arrival): its size is what the \
                     rate brings, so it takes no `share` or `count`",
                    r.name
                ))
            }
            (Some(Share(s)), None, false) => GroupSize::Share(s),
            (None, Some(c), false) => GroupSize::Count(c),
            (None, None, true) => GroupSize::Arrivals,
            (None, None, false) => {
                return Err(format!(
                    "group `{}` needs a size: `share: 20%` of the population or `count: 50` bots",
                    r.name
                ))
            }
        };
        Ok(GroupSpec {
            name: r.name,
            size,
            behaviour: r.behaviour,
            network: r.network,
            target: r.target,
            source_addresses: r.source_addresses,
            lifecycle: r.lifecycle,
        })
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "group name `{name}`: use 1 to 32 letters, digits, `_` or `-` (thresholds and \
             summary.json name groups by it)"
        ))
    }
}

/// `groups:` as a whole, checked where it is read (so the message points at it): at most
/// [`MAX_GROUPS`], names unique, shares adding up to 1.
pub fn check_groups(groups: &[GroupSpec]) -> Result<(), String> {
    if groups.is_empty() {
        return Err("groups: is empty; leave it out for one group of every bot".into());
    }
    if groups.len() > MAX_GROUPS {
        return Err(format!(
            "{} groups: at most {MAX_GROUPS} (each keeps its own histograms in every worker)",
            groups.len()
        ));
    }
    for (i, g) in groups.iter().enumerate() {
        if groups[..i].iter().any(|o| o.name == g.name) {
            return Err(format!("group `{}` is named twice", g.name));
        }
    }
    let shares: Vec<f64> = groups
        .iter()
        .filter_map(|g| match g.size {
            GroupSize::Share(s) => Some(s),
            _ => None,
        })
        .collect();
    let sum: f64 = shares.iter().sum();
    if !shares.is_empty() && (sum - 1.0).abs() > 1e-6 {
        return Err(format!(
            "the groups' shares add up to {}%, not 100%: they divide the population left after \
             the fixed counts",
            (sum * 1e4).round() / 1e2
        ));
    }
    Ok(())
}

/// Bots per group for a population of `total`: fixed counts first, then the shares of the
/// rest by the largest remainder; arrival-rate groups get 0 here. `Err` when the counts
/// need more bots than there are, or when counts alone do not make up the population.
pub fn sizes(groups: &[GroupSpec], total: u64) -> Result<Vec<u64>, String> {
    let fixed: u64 = groups
        .iter()
        .map(|g| match g.size {
            GroupSize::Count(c) => c,
            _ => 0,
        })
        .sum();
    let has_shares = groups.iter().any(|g| matches!(g.size, GroupSize::Share(_)));
    if fixed > total {
        return Err(format!(
            "the groups' counts add up to {fixed} bots, more than the population's {total}"
        ));
    }
    if !has_shares && fixed != total {
        return Err(format!(
            "the groups' counts add up to {fixed} bots but the population is {total}: give \
             the counts that make it up, or a group a `share` of the rest"
        ));
    }
    let rest = total - fixed;
    let mut out: Vec<u64> = Vec::with_capacity(groups.len());
    let mut remainders: Vec<(f64, usize)> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        match g.size {
            GroupSize::Count(c) => out.push(c),
            GroupSize::Arrivals => out.push(0),
            GroupSize::Share(s) => {
                let exact = s * rest as f64;
                let whole = exact.floor();
                out.push(whole as u64);
                remainders.push((exact - whole, i));
            }
        }
    }
    let given: u64 = out.iter().sum();
    let mut left = total.saturating_sub(given);
    // Largest fractional part first; on a tie, the group written first.
    remainders.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in remainders.iter().cycle().take(remainders.len() * 2) {
        if left == 0 {
            break;
        }
        out[*i] += 1;
        left -= 1;
    }
    Ok(out)
}

/// The group of each of `sizes.iter().sum()` bots, by index: each group's size exactly, in
/// an order shuffled by `seed` (Fisher-Yates on SplitMix64).
pub fn assign(sizes: &[u64], seed: u64) -> Vec<u16> {
    let mut out: Vec<u16> = Vec::with_capacity(sizes.iter().sum::<u64>() as usize);
    for (g, n) in sizes.iter().enumerate() {
        out.extend(std::iter::repeat_n(g as u16, *n as usize));
    }
    let mut state = seed ^ 0x6772_6F75_7073; // "groups"
    for i in (1..out.len()).rev() {
        state = super::spawn::mix_seed(state, i as u64);
        let j = (state % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, size: GroupSize) -> GroupSpec {
        GroupSpec {
            name: name.into(),
            size,
            behaviour: BehaviourOverride::default(),
            network: None,
            target: None,
            source_addresses: None,
            lifecycle: None,
        }
    }

    /// 70/20/10 of 101 bots: 70.7, 20.2, 10.1 -> 70, 20, 10 and the one left over goes to
    /// the largest remainder (0.7: the first group).
    #[test]
    fn shares_round_by_the_largest_remainder_and_add_up() {
        let g = [
            spec("a", GroupSize::Share(0.7)),
            spec("b", GroupSize::Share(0.2)),
            spec("c", GroupSize::Share(0.1)),
        ];
        assert_eq!(sizes(&g, 101).unwrap(), vec![71, 20, 10]);
        assert_eq!(sizes(&g, 100).unwrap(), vec![70, 20, 10]);
        assert_eq!(sizes(&g, 1).unwrap(), vec![1, 0, 0]);
        for n in 0..500 {
            assert_eq!(sizes(&g, n).unwrap().iter().sum::<u64>(), n);
        }
        // Thirds of 10: 3.33 each, the one left over to the first.
        let t = [
            spec("a", GroupSize::Share(1.0 / 3.0)),
            spec("b", GroupSize::Share(1.0 / 3.0)),
            spec("c", GroupSize::Share(1.0 / 3.0)),
        ];
        assert_eq!(sizes(&t, 10).unwrap(), vec![4, 3, 3]);
    }

    #[test]
    fn counts_come_first_and_must_fit() {
        let g = [
            spec("bosses", GroupSize::Count(5)),
            spec("rest", GroupSize::Share(1.0)),
        ];
        assert_eq!(sizes(&g, 100).unwrap(), vec![5, 95]);
        assert!(sizes(&g, 4).unwrap_err().contains("more than"));
        let only = [
            spec("a", GroupSize::Count(5)),
            spec("b", GroupSize::Count(5)),
        ];
        assert_eq!(sizes(&only, 10).unwrap(), vec![5, 5]);
        assert!(sizes(&only, 11).unwrap_err().contains("make it up"));
    }

    #[test]
    fn assignment_is_exact_and_seeded() {
        let a = assign(&[70, 20, 10], 42);
        assert_eq!(a.len(), 100);
        for (g, n) in [(0u16, 70), (1, 20), (2, 10)] {
            assert_eq!(a.iter().filter(|x| **x == g).count(), n);
        }
        assert_eq!(a, assign(&[70, 20, 10], 42));
        assert_ne!(a, assign(&[70, 20, 10], 43));
        // Mixed, not in blocks.
        assert!(a[..70].iter().any(|g| *g != 0));
    }

    #[test]
    fn the_whole_list_is_checked() {
        let g = [
            spec("a", GroupSize::Share(0.7)),
            spec("b", GroupSize::Share(0.2)),
        ];
        assert!(check_groups(&g).unwrap_err().contains("add up to 90%"));
        let g = [
            spec("a", GroupSize::Share(0.5)),
            spec("a", GroupSize::Share(0.5)),
        ];
        assert!(check_groups(&g).unwrap_err().contains("named twice"));
        let many: Vec<GroupSpec> = (0..17)
            .map(|i| spec(&format!("g{i}"), GroupSize::Count(1)))
            .collect();
        assert!(check_groups(&many).unwrap_err().contains("at most 16"));
    }
}

/// `groups:` as scenarios write it, through the parser and the plan.
#[cfg(test)]
mod scenario_tests {
    use std::path::Path;

    use crate::scenario::{parse, Overrides, Plan};

    const HEAD: &str = "name: g\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 100\n      over: 1s\n    - hold: 2s\nbehaviour:\n  input_rate: 30\n";

    fn plan(groups: &str) -> Result<Plan, String> {
        let text = format!("{HEAD}{groups}");
        let p = Path::new("s.yaml");
        let f = parse(&text, p).map_err(|e| e.to_string())?;
        Plan::build(f, p, &Overrides::default()).map_err(|e| e.to_string())
    }

    const MIXED: &str = "groups:\n  - name: broadband\n    share: 70%\n  - name: mobile\n    share: 0.2\n    behaviour:\n      input_rate: 20\n      pattern: idle\n    network:\n      latency: 75ms\n  - name: wifi\n    share: 10%\n    source_addresses: 127.0.2.0/24\n";

    #[test]
    fn groups_get_their_sizes_behaviour_network_and_sources() {
        let p = plan(MIXED).unwrap();
        let names: Vec<&str> = p.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["broadband", "mobile", "wifi"]);
        let planned: Vec<u64> = p.groups.iter().map(|g| g.planned).collect();
        assert_eq!(planned, [70, 20, 10]);
        assert_eq!(p.planned, 100);
        // Every bot is in the group the assignment says, and gets its group's behaviour.
        let mut seen = [0u64; 3];
        for ev in &p.spawns {
            assert_eq!(usize::from(ev.group), p.group_of(ev.index));
            seen[usize::from(ev.group)] += 1;
            let params = p.bot_params(ev.index);
            let want = if ev.group == 1 { 20.0 } else { 30.0 };
            assert_eq!(params.input_rate_hz, want);
            let source = p.source_of(ev.index);
            assert_eq!(source.is_some(), ev.group == 2, "bot {}", ev.index);
        }
        assert_eq!(seen, [70, 20, 10]);
        assert!(p.groups[0].network.is_none());
        assert!(p.groups[1].network.is_some());
        // The wifi group's ten bots take the pool's first ten addresses.
        let mut wifi: Vec<_> = (p.spawns.iter())
            .filter(|e| e.group == 2)
            .filter_map(|e| p.source_of(e.index))
            .collect();
        wifi.sort();
        wifi.dedup();
        assert_eq!(wifi.len(), 10);
        let d = p.describe();
        assert!(
            d.contains("groups     3") && d.contains("largest remainder"),
            "{d}"
        );
        assert!(
            d.contains("mobile") && d.contains("20 bots (share 20%)"),
            "{d}"
        );
    }

    #[test]
    fn the_same_seed_puts_the_same_bots_in_the_same_groups_in_every_shard() {
        let whole = plan(MIXED).unwrap();
        let text = format!("{HEAD}{MIXED}");
        let p = Path::new("s.yaml");
        for index in 0..3 {
            let ov = Overrides {
                shard: Some(crate::scenario::Shard { index, count: 3 }),
                ..Overrides::default()
            };
            let part = Plan::build(parse(&text, p).unwrap(), p, &ov).unwrap();
            for ev in &part.spawns {
                assert_eq!(ev.group, whole.spawns[ev.index as usize].group);
            }
        }
    }

    #[test]
    fn a_scenario_without_groups_is_one_implicit_group() {
        let p = plan("").unwrap();
        assert_eq!(p.groups.len(), 1);
        assert!(p.groups[0].implicit);
        assert_eq!(p.groups[0].planned, 100);
        assert!(p.spawns.iter().all(|e| e.group == 0));
        assert!(!p.describe().contains("groups "));
    }

    /// Mistakes name the file, line and column.
    #[test]
    fn bad_groups_are_refused_at_their_line() {
        let e = plan(
            "groups:\n  - name: a\n    share: 50%\n    count: 3\n  - name: b\n    share: 50%\n",
        )
        .unwrap_err();
        assert!(
            e.contains("s.yaml:12:") && e.contains("both `share` and `count`"),
            "{e}"
        );
        let e = plan("groups:\n  - name: a\n    share: 50%\n  - name: b\n    share: 40%\n")
            .unwrap_err();
        assert!(
            e.contains("s.yaml:12:") && e.contains("add up to 90%"),
            "{e}"
        );
        let e = plan("groups:\n  - name: a\n    share: 150%\n").unwrap_err();
        assert!(
            e.contains("s.yaml:13:") && e.contains("at most 100%"),
            "{e}"
        );
        let e = plan("groups:\n  - name: a\n    sharee: 1\n").unwrap_err();
        assert!(
            e.contains("s.yaml:") && e.contains("did you mean `share`"),
            "{e}"
        );
        let e = plan("groups:\n  - name: a b\n    share: 1\n").unwrap_err();
        assert!(e.contains("s.yaml:12:") && e.contains("group name"), "{e}");
        let e = plan("groups:\n  - name: a\n    behaviour:\n      input_rate: 0\n    share: 1\n")
            .unwrap_err();
        assert!(e.contains("s.yaml:14:") && e.contains("input_rate"), "{e}");
        // Counts that do not fit the population: a rule over several keys, named.
        let e =
            plan("groups:\n  - name: a\n    count: 200\n  - name: b\n    share: 1\n").unwrap_err();
        assert!(e.contains("more than the population's 100"), "{e}");
    }
}

#[cfg(test)]
mod threshold_tests {
    use std::path::Path;

    use crate::scenario::parse;

    #[test]
    fn a_threshold_on_an_unknown_group_names_its_line_and_column() {
        let head = "name: g\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 1s\n";
        let groups = "groups:\n  - name: a\n    share: 1\n";
        let text = format!(
            "{head}{groups}thresholds:\n  - rtt p99 < 1s\n  - rtt{{group=b}} p99 < 250ms\n"
        );
        let e = parse(&text, Path::new("s.yaml")).unwrap_err().to_string();
        assert!(
            e.starts_with("s.yaml:13:5: threshold `rtt{group=b} p99 < 250ms` names group `b`")
                && e.contains("its groups are a"),
            "{e}"
        );
        let text = format!("{head}thresholds:\n  - rtt{{group=a}} p99 < 250ms\n");
        let e = parse(&text, Path::new("s.yaml")).unwrap_err().to_string();
        assert!(
            e.starts_with("s.yaml:9:5:") && e.contains("no `groups:`"),
            "{e}"
        );
        let text = format!("{head}{groups}thresholds:\n  - rtt{{group=a}} p99 < 250ms\n");
        assert!(parse(&text, Path::new("s.yaml")).is_ok());
    }
}
