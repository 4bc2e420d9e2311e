//! summary.json's `groups` block ([`GroupSummary`], defined with the rest of the contract in
//! [`super::summary`]): every figure of the run, per group of the population (`groups:` in
//! the scenario), beside the conditions the group was given. Here: how a group's figures
//! are made, kept (histograms encoded) and shown.
//!
//! A group's figures are summarized exactly as the whole run's are (the same code, on the
//! group's own recorder), so `groups.mobile.rtt_us.p99` means what `rtt_us.p99` means. Each
//! group also carries its whole-run histograms (`histograms`: compressed HdrHistogram V2,
//! base64, as in histograms.hlog), so `tickswarm merge` rebuilds its percentiles exactly
//! from the shards instead of averaging them. A run without `groups:` has no block.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde_json::{Map, Value};

use super::summary::{Bandwidth, BotCounts, GroupSummary, LifecycleSummary, Loss, Summary};
use crate::metrics::groups::GroupOutcome;
use crate::metrics::{HistSummary, Recorder, RunOutcome};

/// Most histograms one group may carry into a merge (the time and size histograms and the
/// protocol's own).
pub const MAX_GROUP_HISTOGRAMS: usize = 32;

/// A run of one group, as [`super::build::summarize`] reads a whole run.
fn as_run(run: &RunOutcome, g: &GroupOutcome) -> RunOutcome {
    RunOutcome {
        total: g.total.clone(),
        intervals: Vec::new(),
        planned: g.planned,
        ever_connected: g.bots.connected,
        failed: g.bots.failed,
        bots_lost: g.bots.lost,
        bots_silent_at_end: g.bots.silent_at_end,
        started_at: run.started_at,
        elapsed: run.elapsed,
        interrupted: run.interrupted,
        workers: run.workers,
        unfinished_workers: run.unfinished_workers.clone(),
        // The workers serve every group at once: their CPU is the whole run's only.
        worker_cpu_ns: None,
        timer_step: run.timer_step,
        tail: Recorder::new(),
        server: None,
        target: run.target.clone(),
        sources: None,
        groups: Vec::new(),
        server_metrics: None,
    }
}

/// The group's part of a summary of its own run.
pub fn project(name: &str, size: &str, network: Option<Value>, s: Summary) -> GroupSummary {
    GroupSummary {
        name: name.to_string(),
        size: size.to_string(),
        network,
        bots: s.bots,
        rtt_us: s.rtt_us,
        handshake_us: s.handshake_us,
        snapshot_interarrival_us: s.snapshot_interarrival_us,
        generator: s.generator,
        loss: s.loss,
        bandwidth: s.bandwidth,
        inputs_sent: s.inputs_sent,
        snapshots_applied: s.snapshots_applied,
        errors: s.errors,
        protocol_metrics: s.protocol_metrics,
        lifecycle: None,
        histograms: BTreeMap::new(),
        source_addresses: None,
        intervals: Vec::new(),
    }
}

/// A summary holding only the group's figures, for reading a threshold's value from it as
/// from a whole run's.
pub fn as_summary(g: &GroupSummary) -> Summary {
    let mut s = Summary::default();
    set_figures(&mut s, g);
    s
}

/// Put the group's figures in `s` under the whole run's keys, leaving the rest of `s` (what
/// was run, its thresholds, its series) as it is.
pub fn set_figures(s: &mut Summary, g: &GroupSummary) {
    s.bots = g.bots.clone();
    s.rtt_us = g.rtt_us;
    s.handshake_us = g.handshake_us;
    s.snapshot_interarrival_us = g.snapshot_interarrival_us;
    s.generator = g.generator.clone();
    s.loss = g.loss.clone();
    s.bandwidth = g.bandwidth.clone();
    s.inputs_sent = g.inputs_sent;
    s.snapshots_applied = g.snapshots_applied;
    s.errors = g.errors.clone();
    s.protocol_metrics = g.protocol_metrics.clone();
}

/// Each group's summary (with its histograms) and how its upstream loss was measured (or
/// why it was not), in the scenario's order. `summarize` is the whole run's summarizer,
/// without thresholds.
pub fn summarize_groups(
    run: &RunOutcome,
    summarize: impl Fn(&RunOutcome) -> Summary,
) -> Vec<(GroupSummary, String)> {
    run.groups
        .iter()
        .map(|g| {
            let s = summarize(&as_run(run, g));
            let upstream = s.loss_method.upstream.clone();
            let mut gs = project(&g.name, &g.size, g.network.clone(), s);
            gs.histograms = encode_all(&g.total);
            gs.intervals = g.intervals.clone();
            gs.source_addresses = g.sources.clone();
            gs.lifecycle = g.lifecycle.map(|planned| LifecycleSummary {
                planned,
                done: crate::metrics::groups::LifecycleDone::of(&g.total),
            });
            (gs, upstream)
        })
        .collect()
}

/// The recorder's histograms by their hlog tags, the empty ones left out.
fn tagged(rec: &Recorder) -> Vec<(&str, &Histogram<u64>)> {
    let mut v: Vec<(&str, &Histogram<u64>)> = vec![
        ("rtt_us", &rec.rtt_us),
        ("handshake_us", &rec.handshake_us),
        ("snapshot_interarrival_us", &rec.snapshot_interarrival_us),
        ("send_lateness_us", &rec.send_lateness_us),
        ("bot_up_bytes_per_s", &rec.bot_up_bytes_per_s),
        ("bot_down_bytes_per_s", &rec.bot_down_bytes_per_s),
        ("packet_size_up_bytes", &rec.packet_size_up),
        ("packet_size_down_bytes", &rec.packet_size_down),
    ];
    v.extend(rec.extra.iter().map(|(n, h)| (*n, h)));
    v.retain(|(_, h)| !h.is_empty());
    v.truncate(MAX_GROUP_HISTOGRAMS);
    v
}

/// Every non-empty histogram of `rec`, encoded by its hlog tag (at most
/// [`MAX_GROUP_HISTOGRAMS`]): a window's histograms kept in summary.json, as a group's are.
pub fn encode_all(rec: &Recorder) -> BTreeMap<String, String> {
    tagged(rec)
        .into_iter()
        .filter_map(|(tag, h)| Some((tag.to_string(), encode(h)?)))
        .collect()
}

/// Compressed V2, base64 (as one histogram of histograms.hlog).
pub fn encode(h: &Histogram<u64>) -> Option<String> {
    use base64::Engine as _;
    let bytes = super::hlog::encode_compressed(h).ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A histogram written by [`encode`], read through the bounded decoder (run folders from
/// other machines are untrusted input).
pub fn decode(text: &str) -> Result<Histogram<u64>, String> {
    use base64::Engine as _;
    if text.len() > super::hlog_read::MAX_LINE_BYTES {
        return Err("a group histogram longer than an hlog line may be".into());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("a group histogram is not base64: {e}"))?;
    let mut d = super::hlog_read::Decoder::default();
    let decoded = d.decode(&bytes)?;
    let mut h = super::hlog_read::Project::default().histogram();
    super::hlog_read::add_counts(&mut h, decoded.counts, decoded.samples)?;
    Ok(h)
}

/// The group's time histogram for a threshold on a percentile the summary does not list.
pub fn time_histogram(
    g: &GroupSummary,
    m: crate::metrics::threshold::TimeMetric,
) -> Option<Histogram<u64>> {
    g.histograms.get(m.hlog_tag()).and_then(|t| decode(t).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_round_trip_exactly() {
        let mut h = crate::metrics::new_histogram();
        for v in [1u64, 150, 150_000, 2_000_000] {
            h.record(v).unwrap();
        }
        let back = decode(&encode(&h).unwrap()).unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(
            HistSummary::of(&back),
            HistSummary::of(&h),
            "the same statistics after a round trip"
        );
        assert!(decode("not base64!").is_err());
        assert!(decode("AAAA").is_err());
    }

    #[test]
    fn groups_are_written_by_name_in_order_and_read_back() {
        use crate::report::summary::Groups;
        let g = |n: &str| GroupSummary {
            name: n.into(),
            size: "share 50%".into(),
            ..GroupSummary::default()
        };
        let groups = Groups(vec![g("wifi"), g("broadband")]);
        let json = serde_json::to_string(&groups).unwrap();
        assert!(json.find("\"wifi\"") < json.find("\"broadband\""), "{json}");
        let back: Groups = serde_json::from_str(&json).unwrap();
        assert_eq!(back, groups);
    }
}

/// One line of report.html's per-group table (the whole run's last), every cell formatted.
#[derive(Debug, Clone)]
pub struct GroupRow {
    pub name: String,
    pub size: String,
    /// The injected conditions, in a line (`latency 75ms, jitter …`), or `real link`.
    pub injected: String,
    pub bots: String,
    pub rtt: String,
    pub loss_down: String,
    pub loss_up: String,
    pub payload: String,
    pub handshake: String,
    /// The protocol's prediction error p99 and corrections, where it has them.
    pub prediction: String,
    /// The simulated link's own drops, both ways.
    pub link_drops: String,
    /// What the lifecycle did, against its schedule (`—` without one).
    pub lifecycle: String,
    pub whole: bool,
}

/// The conditions as written, on one line: `latency: 75ms, loss: 2%, down: {loss: 5%}`.
pub fn injected(network: Option<&Value>) -> String {
    crate::netsim::describe_written(network)
}

/// What the table shows of a run's (or group's) figures.
struct Cells<'a> {
    bots: &'a BotCounts,
    rtt: &'a HistSummary,
    handshake: &'a HistSummary,
    loss: &'a Loss,
    bandwidth: &'a Bandwidth,
    protocol: &'a Map<String, Value>,
}

impl Cells<'_> {
    fn row(&self, name: &str, size: &str, injected: String, whole: bool) -> GroupRow {
        use super::format::{fmt_pct, fmt_us};
        // A figure and its unit never part at a line break: the table's cells may wrap
        // between figures (`4.21 ms / 4.56 ms / 33.82 ms`) to fit a desktop's width.
        let fmt_us = |v: f64| fmt_us(v).replace(' ', "\u{a0}");
        let fmt_bytes = |v: f64| super::format::fmt_bytes(v).replace(' ', "\u{a0}");
        let hist = |h: &HistSummary| {
            if h.count == 0 {
                "no data".to_string()
            } else {
                format!(
                    "{} / {} / {}",
                    fmt_us(h.min as f64),
                    fmt_us(h.p50 as f64),
                    fmt_us(h.p99 as f64)
                )
            }
        };
        let rate = |l: Option<crate::metrics::LossSummary>| match l {
            Some(l) if l.expected > 0 => format!("{} of {}", fmt_pct(l.rate), l.expected),
            _ => "not measured".into(),
        };
        let count = |k: &str| self.protocol.get(k).and_then(Value::as_u64);
        let p99 = |k: &str| {
            self.protocol
                .get(k)
                .and_then(|v| v.get("p99"))
                .and_then(Value::as_f64)
        };
        let prediction = match (p99("prediction_error"), count("corrections")) {
            (None, None) => "—".into(),
            (e, c) => format!(
                "{} p99{}",
                e.map_or("no data".into(), |e| format!("{:.2}", e / 1000.0)),
                c.map_or(String::new(), |c| format!(", {c} corrections"))
            ),
        };
        let drops = |dir: &str| -> u64 {
            ["loss", "outage", "queue"]
                .iter()
                .filter_map(|w| count(&format!("netsim_{dir}_lost_{w}")))
                .sum()
        };
        let link_drops = if self.protocol.keys().any(|k| k.starts_with("netsim_")) {
            format!("{} up, {} down", drops("up"), drops("down"))
        } else {
            "—".into()
        };
        let b = self.bots;
        GroupRow {
            name: name.to_string(),
            size: size.to_string(),
            injected,
            bots: format!(
                "{} planned, {} connected, {} failed, {} lost",
                b.planned, b.connected, b.failed, b.lost
            ),
            rtt: hist(self.rtt),
            loss_down: rate(self.loss.downstream),
            loss_up: rate(self.loss.upstream),
            payload: format!(
                "{} up, {} down",
                fmt_bytes(self.bandwidth.up_bytes as f64),
                fmt_bytes(self.bandwidth.down_bytes as f64)
            ),
            handshake: hist(self.handshake),
            prediction,
            link_drops,
            lifecycle: "—".into(),
            whole,
        }
    }
}

/// report.html's per-group table: a row per group, then the whole run's; empty without
/// groups.
pub fn rows(s: &Summary) -> Vec<GroupRow> {
    if s.groups.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<GroupRow> = s
        .groups
        .0
        .iter()
        .map(|g| {
            let mut row = Cells {
                bots: &g.bots,
                rtt: &g.rtt_us,
                handshake: &g.handshake_us,
                loss: &g.loss,
                bandwidth: &g.bandwidth,
                protocol: &g.protocol_metrics,
            }
            .row(&g.name, &g.size, injected(g.network.as_ref()), false);
            if let Some(l) = &g.lifecycle {
                let (p, d) = (l.planned, l.done);
                row.lifecycle = format!(
                    "arrivals {} of {} ({} late, {} dropped at max_bots); sessions ended {} of {}; \
                     replaced {} of {}; storm dropped {} of {}, {} back ({} resumed, {} refused \
                     and rejoined)",
                    d.arrivals,
                    p.arrivals,
                    d.arrivals_late,
                    p.arrivals_dropped,
                    d.session_ends,
                    p.session_ends,
                    d.replacements,
                    p.replacements,
                    d.storm_drops,
                    p.storm_drops,
                    d.storm_reconnects,
                    d.storm_resumed,
                    d.storm_resume_refused
                );
            }
            row
        })
        .collect();
    out.push(
        Cells {
            bots: &s.bots,
            rtt: &s.rtt_us,
            handshake: &s.handshake_us,
            loss: &s.loss,
            bandwidth: &s.bandwidth,
            protocol: &s.protocol_metrics,
        }
        .row("whole run", "", String::new(), true),
    );
    out
}

/// The groups' key figures as `groups.NAME.PATH` = value pairs (junit.xml's properties):
/// bots, RTT, loss both ways, payload, handshake, and the injected conditions.
pub fn figures(s: &Summary) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let opt = |v: Option<f64>| v.map_or("null".to_string(), |v| v.to_string());
    for g in &s.groups.0 {
        let k = |p: &str| format!("groups.{}.{p}", g.name);
        out.push((k("size"), g.size.clone()));
        out.push((k("network"), injected(g.network.as_ref())));
        out.push((k("bots.planned"), g.bots.planned.to_string()));
        out.push((k("bots.connected"), g.bots.connected.to_string()));
        out.push((k("bots.failed"), g.bots.failed.to_string()));
        out.push((k("bots.lost"), g.bots.lost.to_string()));
        let h = |h: &HistSummary, q: fn(&HistSummary) -> u64| (h.count > 0).then(|| q(h) as f64);
        out.push((k("rtt_us.p50"), opt(h(&g.rtt_us, |h| h.p50))));
        out.push((k("rtt_us.p99"), opt(h(&g.rtt_us, |h| h.p99))));
        out.push((k("handshake_us.p99"), opt(h(&g.handshake_us, |h| h.p99))));
        let rate =
            |l: Option<crate::metrics::LossSummary>| l.filter(|l| l.expected > 0).map(|l| l.rate);
        out.push((k("loss.downstream.rate"), opt(rate(g.loss.downstream))));
        out.push((k("loss.upstream.rate"), opt(rate(g.loss.upstream))));
        out.push((k("bandwidth.up_bytes"), g.bandwidth.up_bytes.to_string()));
        out.push((
            k("bandwidth.down_bytes"),
            g.bandwidth.down_bytes.to_string(),
        ));
    }
    out
}
