//! Adding shards up: one run's figures into the merged ones, every counter added with a
//! check (an overflow is an error, not a wrapped figure), and each group's histograms
//! exactly. The bottom of `merge`: [`super::staircase`] adds a capacity search's windows
//! with [`add_groups`] and [`finish_groups`], and [`super`] adds whole runs.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde_json::Value;

use crate::metrics::phases::{PhaseCounts, TargetPoint, Waiting};
use crate::metrics::run::GeneratorHealth;
use crate::metrics::{HistSummary, LossSummary};
use crate::report::hlog_read;
use crate::report::summary::{IntervalPoint, Summary};

/// The most targets, and the most waiting groups, in one interval point of a run merged.
pub const MAX_GROUPS: usize = 1024;

/// `a + b`, or an error naming the counter that would overflow.
fn sum(a: u64, b: u64, what: &str) -> Result<u64, String> {
    a.checked_add(b)
        .ok_or_else(|| format!("{what} added up overflows u64 ({a} + {b})"))
}

fn add_maps(
    into: &mut BTreeMap<String, u64>,
    from: &BTreeMap<String, u64>,
    what: &str,
) -> Result<(), String> {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_default();
        *e = sum(*e, *v, &format!("{what}.{k}"))?;
    }
    Ok(())
}

/// Refuse bot counts by phase that would overflow when added (the merge itself adds them).
fn check_phases(a: &PhaseCounts, b: &PhaseCounts, what: &str) -> Result<(), String> {
    for p in crate::metrics::phases::Phase::ALL {
        sum(a.get(p), b.get(p), &format!("{what} {}", p.name()))?;
    }
    Ok(())
}

fn check_targets(into: &[TargetPoint], points: &[TargetPoint]) -> Result<(), String> {
    for p in points {
        if let Some(t) = into.iter().find(|t| t.target == p.target) {
            check_phases(&t.phases, &p.phases, "bots by target and phase")?;
            sum(t.bytes_up, p.bytes_up, "bytes up by target")?;
            sum(t.bytes_down, p.bytes_down, "bytes down by target")?;
        }
    }
    Ok(())
}

fn check_waiting(into: &[Waiting], groups: &[Waiting]) -> Result<(), String> {
    for g in groups {
        if let Some(w) = into.iter().find(|w| w.phase == g.phase && w.what == g.what) {
            sum(w.bots, g.bots, "waiting bots")?;
        }
    }
    Ok(())
}

fn add_loss(
    a: Option<LossSummary>,
    b: Option<LossSummary>,
    what: &str,
) -> Result<Option<LossSummary>, String> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => {
            let expected = sum(a.expected, b.expected, &format!("{what}.expected"))?;
            let received = sum(a.received, b.received, &format!("{what}.received"))?;
            let rate = if expected == 0 {
                0.0
            } else {
                expected.saturating_sub(received) as f64 / expected as f64
            };
            Some(LossSummary {
                expected,
                received,
                rate,
            })
        }
        (a, b) => a.or(b),
    })
}

/// What shards say alike: their common value, or `None` when any two differ (`rtt_source`:
/// the merged `rtt_us` mixes sources then, and must not be labelled as one of them).
fn agreed(merged: Option<String>, shard: &Option<String>) -> Option<String> {
    merged.filter(|m| Some(m) == shard.as_ref())
}

/// Add run `s`'s counters into the merged summary `m` (every addition checked).
pub(super) fn add_summary(m: &mut Summary, s: &Summary) -> Result<(), String> {
    if s.protocol != m.protocol {
        return Err(format!(
            "runs speak different protocols ({} and {})",
            m.protocol, s.protocol
        ));
    }
    m.rtt_source = agreed(m.rtt_source.take(), &s.rtt_source);
    // Each endpoint is scraped by one shard (shard 0 unless the scenario says otherwise):
    // the merged run carries every run's endpoints side by side, never summed.
    if let Some(sm) = &s.server_metrics {
        m.server_metrics
            .get_or_insert_with(Default::default)
            .endpoints
            .extend(sm.endpoints.iter().cloned());
    }
    m.source_addresses = crate::metrics::sources::merge_counts(
        m.source_addresses.take(),
        s.source_addresses.as_ref(),
    );
    m.bots.planned = sum(m.bots.planned, s.bots.planned, "bots.planned")?;
    m.bots.connected = sum(m.bots.connected, s.bots.connected, "bots.connected")?;
    m.bots.failed = sum(m.bots.failed, s.bots.failed, "bots.failed")?;
    // Every run's own bots: a server lost under one shard is lost bots of the merged run.
    m.bots.lost = sum(m.bots.lost, s.bots.lost, "bots.lost")?;
    m.bots.silent_at_end = sum(
        m.bots.silent_at_end,
        s.bots.silent_at_end,
        "bots.silent_at_end",
    )?;
    m.duration_s = m.duration_s.max(s.duration_s);
    m.interrupted |= s.interrupted;
    if !m.target.split(" + ").any(|t| t == s.target) {
        m.target = format!("{} + {}", m.target, s.target);
    }
    let g = &mut m.generator;
    g.inputs_skipped = sum(
        g.inputs_skipped,
        s.generator.inputs_skipped,
        "generator.inputs_skipped",
    )?;
    g.lateness_p99_of_period = match (g.lateness_p99_of_period, s.generator.lateness_p99_of_period)
    {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    g.workers = g
        .workers
        .checked_add(s.generator.workers)
        .ok_or("generator.workers added up overflows")?;
    add_maps(
        &mut g.send_errors,
        &s.generator.send_errors,
        "generator.send_errors",
    )?;
    g.timer_step_us = g.timer_step_us.max(s.generator.timer_step_us);
    // The machines' CPU adds up; one run without it leaves the sum unknown. The figures per
    // datagram are derived again once the wire counts are summed (`merge`).
    g.cpu_ns = match (g.cpu_ns, s.generator.cpu_ns) {
        (Some(a), Some(b)) => Some(
            a.checked_add(b)
                .ok_or("generator.cpu_ns added up overflows")?,
        ),
        _ => None,
    };
    g.send_io = match (g.send_io.take(), &s.generator.send_io) {
        (Some(mut a), Some(b)) => {
            a.merge(b, m.duration_s);
            Some(a)
        }
        (a, b) => a.or_else(|| b.clone()),
    };
    m.loss.downstream = add_loss(m.loss.downstream, s.loss.downstream, "loss.downstream")?;
    m.loss.upstream = add_loss(m.loss.upstream, s.loss.upstream, "loss.upstream")?;
    let (b, o) = (&mut m.bandwidth, &s.bandwidth);
    b.up_bytes = sum(b.up_bytes, o.up_bytes, "bandwidth.up_bytes")?;
    b.down_bytes = sum(b.down_bytes, o.down_bytes, "bandwidth.down_bytes")?;
    b.up_packets = sum(b.up_packets, o.up_packets, "bandwidth.up_packets")?;
    b.down_packets = sum(b.down_packets, o.down_packets, "bandwidth.down_packets")?;
    b.wire_up_bytes = sum(b.wire_up_bytes, o.wire_up_bytes, "bandwidth.wire_up_bytes")?;
    b.wire_down_bytes = sum(
        b.wire_down_bytes,
        o.wire_down_bytes,
        "bandwidth.wire_down_bytes",
    )?;
    b.wire_up_packets = sum(
        b.wire_up_packets,
        o.wire_up_packets,
        "bandwidth.wire_up_packets",
    )?;
    b.wire_down_packets = sum(
        b.wire_down_packets,
        o.wire_down_packets,
        "bandwidth.wire_down_packets",
    )?;
    m.inputs_sent = sum(m.inputs_sent, s.inputs_sent, "inputs_sent")?;
    m.snapshots_applied = sum(
        m.snapshots_applied,
        s.snapshots_applied,
        "snapshots_applied",
    )?;
    add_maps(&mut m.errors.decode, &s.errors.decode, "errors.decode")?;
    add_maps(&mut m.errors.connect, &s.errors.connect, "errors.connect")?;
    add_groups(&mut m.groups, &s.groups)?;
    for (k, v) in &s.protocol_metrics {
        if let (Some(Value::Number(a)), Value::Number(b)) = (m.protocol_metrics.get(k), v) {
            if let (Some(a), Some(b)) = (a.as_u64(), b.as_u64()) {
                let total = sum(a, b, &format!("protocol_metrics.{k}"))?;
                m.protocol_metrics.insert(k.clone(), Value::from(total));
            }
        } else if !m.protocol_metrics.contains_key(k) {
            m.protocol_metrics.insert(k.clone(), v.clone());
        }
    }
    Ok(())
}

/// Add run `s`'s groups into the merged ones, by name: counters as the whole run's, and
/// histograms exactly (decoded, added, encoded again).
pub(super) fn add_groups(
    into: &mut crate::report::summary::Groups,
    from: &crate::report::summary::Groups,
) -> Result<(), String> {
    use crate::report::groups::{as_summary, decode, encode, project};
    for g in &from.0 {
        let Some(mine) = into.0.iter_mut().find(|m| m.name == g.name) else {
            if into.0.len() >= crate::metrics::groups::MAX_GROUPS {
                return Err(format!(
                    "more than {} groups across the runs",
                    crate::metrics::groups::MAX_GROUPS
                ));
            }
            into.0.push(g.clone());
            continue;
        };
        let mut a = as_summary(mine);
        add_summary(&mut a, &as_summary(g)).map_err(|e| format!("group {}: {e}", g.name))?;
        let mut histograms = std::mem::take(&mut mine.histograms);
        for (tag, text) in &g.histograms {
            let added = match histograms.get(tag) {
                Some(have) => {
                    let mut h = decode(have).map_err(|e| format!("group {}: {e}", g.name))?;
                    let o = decode(text).map_err(|e| format!("group {}: {e}", g.name))?;
                    hlog_read::add_counts(&mut h, &sparse(&o), o.len())?;
                    encode(&h).ok_or("a group histogram cannot be encoded")?
                }
                None => {
                    if histograms.len() >= crate::report::groups::MAX_GROUP_HISTOGRAMS {
                        return Err(format!("group {}: too many histograms", g.name));
                    }
                    text.clone()
                }
            };
            histograms.insert(tag.clone(), added);
        }
        let network = mine.network.take();
        let size = std::mem::take(&mut mine.size);
        let mut intervals = std::mem::take(&mut mine.intervals);
        add_group_points(&mut intervals, &g.intervals)
            .map_err(|e| format!("group {}: {e}", g.name))?;
        let sources = crate::metrics::sources::merge_counts(
            mine.source_addresses.take(),
            g.source_addresses.as_ref(),
        );
        let lifecycle = match (mine.lifecycle, g.lifecycle) {
            (Some(x), Some(y)) => Some(add_lifecycle(x, y)?),
            (x, y) => x.or(y),
        };
        *mine = project(&g.name, &size, network, a);
        mine.histograms = histograms;
        mine.lifecycle = lifecycle;
        mine.intervals = intervals;
        mine.source_addresses = sources;
    }
    Ok(())
}

/// Add a run's seconds of one group into the merged group's, by end second (the partial
/// last ones into one), every count checked. The percentiles are left to the log (see
/// [`merge_runs`]).
fn add_group_points(
    into: &mut Vec<crate::metrics::groups::GroupPoint>,
    from: &[crate::metrics::groups::GroupPoint],
) -> Result<(), String> {
    use crate::metrics::groups::GroupPoint;
    let key = |p: &GroupPoint| {
        if p.partial {
            u64::MAX
        } else {
            p.t.round() as u64
        }
    };
    let mut by: BTreeMap<u64, GroupPoint> = std::mem::take(into)
        .into_iter()
        .map(|p| (key(&p), p))
        .collect();
    for p in from {
        let at = |what: &str| format!("intervals[t={}].{what}", p.t);
        let e = by.entry(key(p)).or_insert_with(|| GroupPoint {
            t: p.t,
            partial: p.partial,
            ..GroupPoint::default()
        });
        e.t = e.t.max(p.t);
        e.bots_connected = sum(e.bots_connected, p.bots_connected, &at("bots_connected"))?;
        e.packets_up = sum(e.packets_up, p.packets_up, &at("packets_up"))?;
        e.packets_down = sum(e.packets_down, p.packets_down, &at("packets_down"))?;
        e.bytes_up = sum(e.bytes_up, p.bytes_up, &at("bytes_up"))?;
        e.bytes_down = sum(e.bytes_down, p.bytes_down, &at("bytes_down"))?;
        let overflow = |what: &str| format!("{} added up overflows u64", at(what));
        e.loss_down = e
            .loss_down
            .checked_add(&p.loss_down)
            .ok_or_else(|| overflow("loss_down"))?;
        e.loss_up = e
            .loss_up
            .checked_add(&p.loss_up)
            .ok_or_else(|| overflow("loss_up"))?;
        e.link = e
            .link
            .checked_add(&p.link)
            .ok_or_else(|| overflow("link"))?;
    }
    *into = by.into_values().collect();
    Ok(())
}

/// The start second of a point ending at `t` (a partial one: the last whole second before
/// its end), as the log's entries are keyed.
pub(super) fn start_second(t: f64, partial: bool) -> u64 {
    if partial {
        (t - 1e-9).floor().max(0.0) as u64
    } else {
        (t.round() as u64).saturating_sub(1)
    }
}

/// Two shards' lifecycle counts added (checked).
fn add_lifecycle(
    a: crate::report::summary::LifecycleSummary,
    b: crate::report::summary::LifecycleSummary,
) -> Result<crate::report::summary::LifecycleSummary, String> {
    let (p, q) = (a.planned, b.planned);
    let (d, e) = (a.done, b.done);
    let s = |x: u64, y: u64| sum(x, y, "groups.lifecycle");
    Ok(crate::report::summary::LifecycleSummary {
        planned: crate::metrics::groups::LifecyclePlan {
            arrivals: s(p.arrivals, q.arrivals)?,
            arrivals_dropped: s(p.arrivals_dropped, q.arrivals_dropped)?,
            session_ends: s(p.session_ends, q.session_ends)?,
            replacements: s(p.replacements, q.replacements)?,
            storm_drops: s(p.storm_drops, q.storm_drops)?,
        },
        done: crate::metrics::groups::LifecycleDone {
            arrivals: s(d.arrivals, e.arrivals)?,
            arrivals_late: s(d.arrivals_late, e.arrivals_late)?,
            session_ends: s(d.session_ends, e.session_ends)?,
            replacements: s(d.replacements, e.replacements)?,
            storm_drops: s(d.storm_drops, e.storm_drops)?,
            storm_reconnects: s(d.storm_reconnects, e.storm_reconnects)?,
            storm_resumed: s(d.storm_resumed, e.storm_resumed)?,
            storm_resume_refused: s(d.storm_resume_refused, e.storm_resume_refused)?,
        },
    })
}

/// A histogram's non-zero counters as (value, count), for [`hlog_read::add_counts`].
fn sparse(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// After every run is added: each group's statistics again from its merged histograms, and
/// its saturation rule from its merged counts.
pub(super) fn finish_groups(groups: &mut crate::report::summary::Groups) -> Result<(), String> {
    for g in &mut groups.0 {
        let mut digests: BTreeMap<String, HistSummary> = BTreeMap::new();
        for (tag, text) in &g.histograms {
            let h = crate::report::groups::decode(text)
                .map_err(|e| format!("group {}: {e}", g.name))?;
            digests.insert(tag.clone(), HistSummary::of(&h));
        }
        let d = |tag: &str| digests.get(tag).copied().unwrap_or_default();
        g.rtt_us = d("rtt_us");
        g.handshake_us = d("handshake_us");
        g.snapshot_interarrival_us = d("snapshot_interarrival_us");
        g.generator.send_lateness_us = d("send_lateness_us");
        g.bandwidth.per_bot_up_bytes_per_s = d("bot_up_bytes_per_s");
        g.bandwidth.per_bot_down_bytes_per_s = d("bot_down_bytes_per_s");
        g.bandwidth.packet_size_up_bytes = d("packet_size_up_bytes");
        g.bandwidth.packet_size_down_bytes = d("packet_size_down_bytes");
        for (tag, h) in &digests {
            if g.protocol_metrics.get(tag).is_some_and(Value::is_object) {
                g.protocol_metrics.insert(tag.clone(), serde_json::json!(h));
            }
        }
        let gen = &mut g.generator;
        let due = g.inputs_sent.saturating_add(gen.inputs_skipped);
        gen.skipped_share = (due > 0).then(|| gen.inputs_skipped as f64 / due as f64);
        gen.saturated = gen
            .skipped_share
            .is_some_and(|x| x > crate::report::summary::SATURATION_SKIPPED_SHARE)
            || gen
                .lateness_p99_of_period
                .is_some_and(|x| x > crate::report::summary::SATURATION_LATENESS_OF_PERIOD);
    }
    Ok(())
}

/// Fold run `s`'s interval points into `points` (by end second; the partial last ones into
/// one), every addition checked.
pub(super) fn add_intervals(
    points: &mut BTreeMap<u64, IntervalPoint>,
    loss_weight: &mut BTreeMap<u64, (f64, u64)>,
    s: &Summary,
) -> Result<(), String> {
    for p in &s.intervals {
        // Targets and waiting groups merge by a search through those already there: their
        // numbers are kept to what a run has (a few targets, a few groups), not what a file
        // can claim.
        if p.targets.len() > MAX_GROUPS || p.waiting.len() > MAX_GROUPS {
            return Err(format!(
                "intervals[t={}] has {} targets and {} waiting groups (at most {MAX_GROUPS} each)",
                p.t,
                p.targets.len(),
                p.waiting.len()
            ));
        }
        // Each run's last, partial interval ends at its own time: they merge into one last
        // point, at the latest end.
        let k = if p.partial {
            u64::MAX
        } else {
            p.t.round() as u64
        };
        let first = !points.contains_key(&k);
        let e = points.entry(k).or_insert_with(|| IntervalPoint {
            t: p.t,
            partial: p.partial,
            ..IntervalPoint::default()
        });
        // The generators' health: kept for a second every shard reported it in.
        e.generator = if first {
            p.generator.clone()
        } else {
            match (e.generator.take(), &p.generator) {
                (Some(a), Some(b)) => Some(merge_health(a, b)),
                _ => None,
            }
        };
        let at = |what: &str| format!("intervals[t={}].{what}", p.t);
        e.t = e.t.max(p.t);
        e.bots_connected = sum(e.bots_connected, p.bots_connected, &at("bots_connected"))?;
        e.packets_up = sum(e.packets_up, p.packets_up, &at("packets_up"))?;
        e.packets_down = sum(e.packets_down, p.packets_down, &at("packets_down"))?;
        e.bytes_up = sum(e.bytes_up, p.bytes_up, &at("bytes_up"))?;
        e.bytes_down = sum(e.bytes_down, p.bytes_down, &at("bytes_down"))?;
        e.inputs_sent = sum(e.inputs_sent, p.inputs_sent, &at("inputs_sent"))?;
        e.snapshots_applied = sum(
            e.snapshots_applied,
            p.snapshots_applied,
            &at("snapshots_applied"),
        )?;
        e.snapshot_rate.bot_seconds = sum(
            e.snapshot_rate.bot_seconds,
            p.snapshot_rate.bot_seconds,
            &at("snapshot_rate.bot_seconds"),
        )?;
        e.snapshot_rate.snapshots = sum(
            e.snapshot_rate.snapshots,
            p.snapshot_rate.snapshots,
            &at("snapshot_rate.snapshots"),
        )?;
        e.snapshot_rate_hz = e.snapshot_rate.hz();
        // Each run's bots are its own: phases, waiting groups and targets add up (checked
        // first: the merges themselves add unchecked).
        check_phases(&e.phases, &p.phases, &at("phases"))?;
        check_waiting(&e.waiting, &p.waiting)?;
        check_targets(&e.targets, &p.targets)?;
        e.phases.merge(&p.phases);
        crate::metrics::phases::merge_waiting(&mut e.waiting, &p.waiting);
        crate::metrics::phases::merge_targets(&mut e.targets, &p.targets);
        // Seconds with no data in a run weigh nothing (no data is not 0 %).
        if let Some(rate) = p.loss_down_rate {
            let w = loss_weight.entry(k).or_default();
            w.0 += rate * p.packets_down as f64;
            w.1 = sum(w.1, p.packets_down, &at("packets_down"))?;
        }
    }
    Ok(())
}

/// Two shards' generator health in one second: every shard's workers side by side (shard
/// order), and the processes' resident memory, descriptors, errors, skipped slots and send
/// calls added up (the load machines' totals); the largest batch is the largest of any.
/// Each figure stays true of the machines it came from, so the busiest worker and the
/// CPU-bound rule read the same as on the shard that had it.
fn merge_health(mut a: GeneratorHealth, b: &GeneratorHealth) -> GeneratorHealth {
    let add = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        _ => None,
    };
    a.worker_cpu.extend(b.worker_cpu.iter().copied());
    a.rss_bytes = add(a.rss_bytes, b.rss_bytes);
    a.open_fds = add(a.open_fds, b.open_fds);
    a.send_errors = a.send_errors.saturating_add(b.send_errors);
    a.inputs_skipped = a.inputs_skipped.saturating_add(b.inputs_skipped);
    a.send_syscalls = add(a.send_syscalls, b.send_syscalls);
    a.cpu_ns = add(a.cpu_ns, b.cpu_ns);
    a.datagrams_sent = add(a.datagrams_sent, b.datagrams_sent);
    a.cpu_ns_per_datagram_sent =
        crate::metrics::run::per_datagram(a.cpu_ns, a.datagrams_sent.unwrap_or(0));
    a.send_batch_max = match (a.send_batch_max, b.send_batch_max) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Health seconds merge as the machines' totals with every worker kept; a second that
    /// one shard has no health for has none merged (not a part passed off as the whole).
    #[test]
    fn generator_health_of_shards_merges_per_second() {
        let h = |cpu: Vec<Option<f64>>, rss, skipped, calls: Option<u64>, batch| GeneratorHealth {
            worker_cpu: cpu,
            rss_bytes: Some(rss),
            open_fds: Some(rss / 1000),
            send_errors: 1,
            inputs_skipped: skipped,
            send_syscalls: calls,
            send_batch_max: batch,
            ..GeneratorHealth::default()
        };
        let m = merge_health(
            h(vec![Some(0.5), None], 100_000, 0, Some(10), Some(4)),
            &h(vec![Some(0.95)], 50_000, 3, Some(5), Some(9)),
        );
        assert_eq!(m.worker_cpu, vec![Some(0.5), None, Some(0.95)]);
        assert_eq!((m.rss_bytes, m.open_fds), (Some(150_000), Some(150)));
        assert_eq!((m.send_errors, m.inputs_skipped), (2, 3));
        assert_eq!((m.send_syscalls, m.send_batch_max), (Some(15), Some(9)));
        assert_eq!(m.max_cpu(), Some(0.95));
        assert!(m.cpu_bound());
        // ENet shards count no send calls: the sum is unknown, not the other shard's.
        let m = merge_health(
            h(vec![Some(0.1)], 1, 0, None, None),
            &h(vec![Some(0.1)], 1, 0, Some(7), Some(2)),
        );
        assert_eq!((m.send_syscalls, m.send_batch_max), (None, Some(2)));

        let point = |t: f64, g: Option<GeneratorHealth>| IntervalPoint {
            t,
            generator: g,
            ..IntervalPoint::default()
        };
        let shard = |pts: Vec<IntervalPoint>| Summary {
            intervals: pts,
            ..Summary::default()
        };
        let a = shard(vec![
            point(1.0, Some(h(vec![Some(0.2)], 10, 0, Some(1), Some(1)))),
            point(2.0, Some(h(vec![Some(0.2)], 10, 0, Some(1), Some(1)))),
        ]);
        let b = shard(vec![
            point(1.0, Some(h(vec![Some(0.3)], 20, 0, Some(2), Some(1)))),
            point(2.0, None),
        ]);
        let mut points = BTreeMap::new();
        let mut weights = BTreeMap::new();
        add_intervals(&mut points, &mut weights, &a).expect("merges");
        add_intervals(&mut points, &mut weights, &b).expect("merges");
        let one = points[&1].generator.as_ref().expect("both shards had it");
        assert_eq!(one.worker_cpu, vec![Some(0.2), Some(0.3)]);
        assert_eq!(one.rss_bytes, Some(30));
        assert_eq!(points[&2].generator, None);
    }

    #[test]
    fn rtt_source_survives_a_merge_only_when_every_shard_names_the_same() {
        let acks = || Some("enet_acks".to_string());
        let ping = Some("protocol_ping".to_string());
        let shards = |list: &[Option<String>]| {
            let mut m = list[0].clone();
            for s in &list[1..] {
                m = agreed(m, s);
            }
            m
        };
        assert_eq!(shards(&[acks(), acks(), acks()]), acks());
        assert_eq!(shards(&[acks(), ping.clone(), acks()]), None);
        assert_eq!(shards(&[acks(), acks(), ping]), None);
        assert_eq!(shards(&[None, acks()]), None);
        assert_eq!(shards(&[acks(), None]), None);
    }

    /// Shards' send counters add up exactly; the largest batch is the largest of any shard;
    /// the mean and the rate are computed again from the sums; workers on different paths
    /// make a `mixed` run.
    #[test]
    fn send_io_of_shards_adds_up_exactly() {
        let shard = |syscalls, datagrams, max_batch, uring, plain| {
            let io = crate::metrics::SendIo {
                syscalls,
                datagrams,
                max_batch,
                workers_uring: uring,
                workers_plain: plain,
            };
            let mut s = Summary {
                duration_s: 10.0,
                ..Summary::default()
            };
            s.generator.send_io = crate::report::summary::SendIoSummary::of(&io, 10.0);
            s
        };
        let mut m = shard(1_000, 100_000, 128, 2, 0);
        add_summary(&mut m, &shard(3_000, 120_000, 90, 2, 0)).unwrap();
        let io = m.generator.send_io.clone().unwrap();
        assert_eq!(
            (io.syscalls, io.datagrams, io.batch_max),
            (4_000, 220_000, 128)
        );
        assert_eq!((io.workers_uring, io.path.as_str()), (4, "io_uring"));
        assert_eq!(io.batch_mean, Some(55.0));
        assert_eq!(io.syscalls_per_s, 400.0);
        add_summary(&mut m, &shard(500, 500, 1, 0, 1)).unwrap();
        let io = m.generator.send_io.unwrap();
        assert_eq!((io.syscalls, io.path.as_str()), (4_500, "mixed"));
    }

    /// The machines' CPU adds up, and so do the datagrams it is divided by (`merge` divides
    /// again once every run is in); a run from a build before the figure (no `cpu_ns`) leaves
    /// the sum unknown rather than short; the largest timer step is kept.
    #[test]
    fn cpu_of_shards_adds_up_and_a_run_without_it_leaves_it_unknown() {
        let shard = |cpu: Option<u64>, sent, step| {
            let mut s = Summary::default();
            s.bandwidth.wire_up_packets = sent;
            s.generator.set_cpu(cpu, sent, 0);
            s.generator.timer_step_us = step;
            s
        };
        let mut m = shard(Some(3_000_000), 1_000, 1_000);
        add_summary(&mut m, &shard(Some(1_000_000), 1_000, 0)).unwrap();
        assert_eq!(m.generator.cpu_ns, Some(4_000_000));
        assert_eq!(m.generator.timer_step_us, 1_000);
        let (cpu, sent) = (m.generator.cpu_ns, m.bandwidth.wire_up_packets);
        m.generator.set_cpu(cpu, sent, 0);
        assert_eq!(m.generator.cpu_ns_per_datagram_sent, Some(2_000.0));
        // Nothing received: no figure per datagram received (no division by zero).
        assert_eq!(m.generator.cpu_ns_per_datagram_received, None);
        add_summary(&mut m, &shard(None, 1_000, 0)).unwrap();
        assert_eq!(m.generator.cpu_ns, None);
    }

    /// Per second: the shards' CPU and datagrams add up, and the figure per datagram is the
    /// sum over the sum, not either shard's.
    #[test]
    fn cpu_per_datagram_of_a_merged_second_is_the_sums_ratio() {
        let h = |cpu, sent| GeneratorHealth {
            cpu_ns: Some(cpu),
            datagrams_sent: Some(sent),
            cpu_ns_per_datagram_sent: crate::metrics::run::per_datagram(Some(cpu), sent),
            ..GeneratorHealth::default()
        };
        let m = merge_health(h(3_000, 1), &h(1_000, 3));
        assert_eq!((m.cpu_ns, m.datagrams_sent), (Some(4_000), Some(4)));
        assert_eq!(m.cpu_ns_per_datagram_sent, Some(1_000.0));
        let without = GeneratorHealth::default();
        assert_eq!(
            merge_health(h(3_000, 1), &without).cpu_ns_per_datagram_sent,
            None
        );
    }
}
