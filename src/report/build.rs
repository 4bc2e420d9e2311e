//! From a run's measurements to the [`Summary`] and its verdict.

use std::collections::BTreeMap;

use serde_json::{json, Map};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::summary::*;
use crate::metrics::threshold::{Metric, Stat, Threshold, TimeMetric, Unmeasurable};
use crate::metrics::{HistSummary, LossSummary, MetricDesc, NamedCounters, RunOutcome};

/// summary.json schema version.
pub const SCHEMA: u32 = 1;

fn counters(c: &NamedCounters) -> BTreeMap<String, u64> {
    c.iter().collect()
}

/// What the report needs to know about a run besides its measurements: the scenario and the
/// protocol as the caller (the CLI) resolved them, so the report depends on no layer above
/// the metrics.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub scenario: String,
    pub scenario_file: String,
    pub protocol: String,
    pub transport: String,
    pub dialect: String,
    /// Where `rtt_us` comes from (`summary.json`'s `rtt_source`).
    pub rtt_source: Option<String>,
    pub seed: u64,
    /// This run's shard (`--shard I/N`), if it is one.
    pub shard: Option<ShardId>,
    /// See [`Summary::scenario_hash`].
    pub scenario_hash: Option<String>,
    /// See [`Summary::label`] (checked by [`super::summary::check_label`]).
    pub label: Option<String>,
    /// How each loss direction is measured (or why it cannot be).
    pub loss_method: LossMethod,
    /// The protocol's and the transport's own metrics.
    pub metrics: Vec<MetricDesc>,
    pub thresholds: Vec<Threshold>,
    /// Inputs per second each bot was asked to send (the grid's rate), for the saturation rule
    /// and the report's input-interval line.
    pub input_rate_hz: f64,
    /// Snapshots per second the scenario states the server sends (`server.snapshot_rate`),
    /// for the report's expected snapshot spacing; `None` when it states none.
    pub snapshot_rate_hz: Option<f64>,
    /// Figures this protocol configuration cannot take, with why (from the protocol).
    pub cannot_measure: Vec<(Metric, String)>,
    /// What a threshold on such a figure does to the verdict.
    pub unmeasurable: Unmeasurable,
    /// The scenario's `network:` as written, if the run simulated a link.
    pub network: Option<serde_json::Value>,
}

impl RunInfo {
    /// Why the protocol cannot take `metric` (any statistic of a time metric), if it cannot.
    fn cannot_measure(&self, metric: Metric) -> Option<&str> {
        if metric == Metric::Capacity {
            return Some(
                "a capacity is what `tickswarm capacity` finds; a run of one population has none",
            );
        }
        self.cannot_measure
            .iter()
            .find(|(m, _)| m.same_figure(metric))
            .map(|(_, why)| why.as_str())
    }
}

/// The run's summary, with its groups' (if the scenario has `groups:`) and its verdict.
/// A threshold that names a group is judged on the group's figures.
pub fn summarize(info: &RunInfo, run: &RunOutcome) -> Summary {
    let whole = RunInfo {
        thresholds: info
            .thresholds
            .iter()
            .filter(|t| t.group.is_none())
            .cloned()
            .collect(),
        ..info.clone()
    };
    let mut summary = summarize_one(&whole, run);
    if run.groups.is_empty() && whole.thresholds.len() == info.thresholds.len() {
        return summary;
    }
    let plain = RunInfo {
        thresholds: Vec::new(),
        ..info.clone()
    };
    let groups = super::groups::summarize_groups(run, |r| summarize_one(&plain, r));
    let mut whole_results = std::mem::take(&mut summary.thresholds).into_iter();
    let mut results = Vec::with_capacity(info.thresholds.len());
    for th in &info.thresholds {
        let Some(name) = &th.group else {
            results.extend(whole_results.next());
            continue;
        };
        let found = groups
            .iter()
            .zip(&run.groups)
            .find(|((g, _), _)| &g.name == name);
        results.push(match found {
            Some(((g, upstream_method), outcome)) => {
                let t = &outcome.total;
                let exact = |m: TimeMetric, q: f64| quantile_of(t.time_histogram(m), q);
                let why = info
                    .cannot_measure(th.metric)
                    .map(str::to_string)
                    .or_else(|| {
                        (th.metric == Metric::UpstreamLoss)
                            .then(|| upstream_method.strip_prefix("not measurable: "))
                            .flatten()
                            .map(str::to_string)
                    });
                evaluate_with(
                    th,
                    &super::groups::as_summary(g),
                    &exact,
                    why,
                    info.unmeasurable,
                )
            }
            // The scenario refuses an unknown group; a plan built otherwise has no figure.
            None => no_such_group(th),
        });
    }
    summary.thresholds = results;
    summary.verdict = verdict_of(&summary.thresholds);
    summary.groups = super::summary::Groups(groups.into_iter().map(|(g, _)| g).collect());
    summary
}

pub use super::summary::verdict_of;

/// A threshold on a group the run does not have: failed, with no data.
pub fn no_such_group(th: &Threshold) -> ThresholdResult {
    ThresholdResult {
        metric: th.path(),
        condition: th.text.clone(),
        observed: None,
        ok: false,
        default: th.default,
        unmeasurable: th
            .group
            .as_ref()
            .map(|g| format!("the run has no group `{g}`")),
        skipped: false,
    }
}

/// One run's (or one group's) summary and verdict.
fn summarize_one(info: &RunInfo, run: &RunOutcome) -> Summary {
    let t = &run.total;
    let mut loss_method = info.loss_method.clone();
    if let Some(why) = info.cannot_measure(Metric::UpstreamLoss) {
        loss_method.upstream = format!("not measurable: {why}");
    }
    if let Some(why) = info.cannot_measure(Metric::DownstreamLoss) {
        loss_method.downstream = format!("not measurable: {why}");
    }
    let mut upstream_measurable = !loss_method.upstream.starts_with("not measurable");
    // Upstream loss is read from the server's acknowledgements. A server that acknowledged
    // nothing at all while inputs went out (it does not send acks, or speaks another dialect)
    // cannot be told apart from one that lost every input: not measurable, never 100 %.
    if upstream_measurable && t.loss_up.expected > 0 && t.loss_up.received == 0 {
        upstream_measurable = false;
        loss_method.upstream = format!(
            "not measurable: the server acknowledged none of the {} inputs sent (it sends no \
             acknowledgements, or not in this dialect); measured as: {}",
            t.loss_up.expected, info.loss_method.upstream
        );
    }
    let mut protocol_metrics = Map::new();
    for (name, h) in &t.extra {
        protocol_metrics.insert((*name).to_string(), json!(HistSummary::of(h)));
    }
    for (name, v) in t.events.iter() {
        protocol_metrics.insert(name, json!(v));
    }
    // Counters the protocol wants read as a rate (City's corrections per bot-minute).
    for m in info.metrics.iter().filter(|m| m.per_bot_minute) {
        // A declared counter that never fired is a measured 0, not a missing figure.
        protocol_metrics
            .entry(m.key.to_string())
            .or_insert(json!(t.events.get(m.key)));
        if let Some(r) = per_bot_minute(t.events.get(m.key), run.ever_connected, run.elapsed) {
            protocol_metrics.insert(format!("{}_per_bot_minute", m.key), json!(r));
        }
    }
    let protocol_metric_info = info
        .metrics
        .iter()
        .map(|m| (m.key.to_string(), m.info()))
        .collect();
    if let Some(s) = &run.server {
        protocol_metrics.insert(
            "embedded_server".into(),
            json!({
                "accepted": s.accepted,
                "refused": s.refused,
                "timed_out": s.timed_out,
                "disconnected": s.disconnected,
                "datagrams_in": s.datagrams_in,
                "datagrams_out": s.datagrams_out,
                "dropped": counters(&s.dropped),
                "events": counters(&s.events),
            }),
        );
    }
    let started = OffsetDateTime::from(run.started_at);
    let started = started
        .replace_nanosecond(0)
        .unwrap_or(started)
        .format(&Rfc3339)
        .unwrap_or_default();
    let mut summary = Summary {
        schema: SCHEMA,
        protocol: info.protocol.clone(),
        transport: info.transport.clone(),
        dialect: info.dialect.clone(),
        scenario: info.scenario.clone(),
        scenario_file: info.scenario_file.clone(),
        target: run.target.clone(),
        started_at: started,
        duration_s: (run.elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        interrupted: run.interrupted,
        aborted: None,
        seed: info.seed,
        shard: info.shard,
        scenario_hash: info.scenario_hash.clone(),
        label: info.label.clone(),
        tool_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        merged_shards: None,
        bots: BotCounts {
            planned: run.planned,
            connected: run.ever_connected,
            failed: run.failed,
            lost: run.bots_lost,
            silent_at_end: run.bots_silent_at_end,
        },
        rtt_us: HistSummary::of(&t.rtt_us),
        rtt_source: info.rtt_source.clone(),
        handshake_us: HistSummary::of(&t.handshake_us),
        snapshot_interarrival_us: HistSummary::of(&t.snapshot_interarrival_us),
        generator: Generator {
            send_lateness_us: HistSummary::of(&t.send_lateness_us),
            inputs_skipped: t.inputs_skipped,
            workers: run.workers,
            send_errors: counters(&t.send_errors),
            // Judged below, once the totals are in.
            skipped_share: None,
            lateness_p99_of_period: None,
            saturated: false,
            cpu_bound_seconds: run
                .intervals
                .iter()
                .filter(|p| p.generator.as_ref().is_some_and(|g| g.cpu_bound()))
                .count() as u64,
            worker_cpu_max: run
                .intervals
                .iter()
                .filter_map(|p| p.generator.as_ref()?.max_cpu())
                .reduce(f64::max),
            rss_max_bytes: run
                .intervals
                .iter()
                .filter_map(|p| p.generator.as_ref()?.rss_bytes)
                .max(),
            open_fds_max: run
                .intervals
                .iter()
                .filter_map(|p| p.generator.as_ref()?.open_fds)
                .max(),
            send_io: super::summary::SendIoSummary::of(&t.send_io, run.elapsed.as_secs_f64()),
            // Set below, from `run.worker_cpu_ns` and the wire counts.
            cpu_ns: None,
            timer_step_us: run.timer_step.as_micros() as u64,
            cpu_ns_per_datagram_sent: None,
            cpu_ns_per_datagram_received: None,
        },
        loss: Loss {
            // Nothing expected is no data, never 0 %.
            downstream: (t.loss_down.expected > 0).then(|| LossSummary::from(t.loss_down)),
            upstream: upstream_measurable.then(|| LossSummary::from(t.loss_up)),
        },
        loss_method,
        bandwidth: Bandwidth {
            up_bytes: t.bytes_up,
            down_bytes: t.bytes_down,
            up_packets: t.packets_up,
            down_packets: t.packets_down,
            wire_up_bytes: t.wire.bytes_up,
            wire_down_bytes: t.wire.bytes_down,
            wire_up_packets: t.wire.packets_up,
            wire_down_packets: t.wire.packets_down,
            per_bot_up_bytes_per_s: HistSummary::of(&t.bot_up_bytes_per_s),
            per_bot_down_bytes_per_s: HistSummary::of(&t.bot_down_bytes_per_s),
            packet_size_up_bytes: HistSummary::of(&t.packet_size_up),
            packet_size_down_bytes: HistSummary::of(&t.packet_size_down),
        },
        inputs_sent: t.inputs_sent,
        snapshots_applied: t.snapshots_applied,
        snapshot_rate: crate::metrics::snapshot_rate::SnapshotRate::of(&run.intervals),
        errors: Errors {
            decode: counters(&t.decode_errors),
            connect: counters(&t.connect_failures),
        },
        source_addresses: run.sources.clone(),
        network: info.network.clone(),
        server_metrics: run.server_metrics.clone(),
        groups: Default::default(),
        protocol_metrics,
        protocol_metric_info,
        expected: Some(Expected::from_rates(
            info.input_rate_hz,
            info.snapshot_rate_hz,
        )),
        thresholds: Vec::new(),
        verdict: String::new(),
        intervals: run.intervals.clone(),
        capacity: None,
        staircase: None,
    };
    summary
        .generator
        .judge_saturation(summary.inputs_sent, info.input_rate_hz);
    summary
        .generator
        .set_cpu(run.worker_cpu_ns, t.wire.packets_up, t.wire.packets_down);
    let exact = |m: TimeMetric, q: f64| quantile_of(t.time_histogram(m), q);
    summary.thresholds = info
        .thresholds
        .iter()
        .map(|th| {
            let why = info
                .cannot_measure(th.metric)
                .map(str::to_string)
                .or_else(|| {
                    // Found out during the run: a server that acknowledged no input at all.
                    (th.metric == Metric::UpstreamLoss && !upstream_measurable).then(|| {
                        summary
                            .loss_method
                            .upstream
                            .trim_start_matches("not measurable: ")
                            .to_string()
                    })
                });
            // A shard that scraped none of `server_metrics:` (another shard did): its server
            // thresholds are judged on the merged run, not failed here.
            if matches!(th.metric, Metric::Server(_))
                && info.shard.is_some()
                && summary.server_metrics.is_none()
            {
                return evaluate_with(
                    th,
                    &summary,
                    &exact,
                    Some("scraped by another shard: judged on the merged run".into()),
                    Unmeasurable::Skip,
                );
            }
            evaluate_with(th, &summary, &exact, why, info.unmeasurable)
        })
        .collect();
    record_server_figures(&mut summary);
    summary.verdict = verdict_of(&summary.thresholds);
    summary
}

/// `count` per bot per minute over the run, to two decimals; `None` without bots or time.
fn per_bot_minute(count: u64, bots: u64, elapsed: std::time::Duration) -> Option<f64> {
    let bot_minutes = bots as f64 * elapsed.as_secs_f64() / 60.0;
    (bot_minutes > 0.0).then(|| (count as f64 / bot_minutes * 100.0).round() / 100.0)
}

/// A percentile of a time metric that summary.json does not list (`rtt p95`), read from the
/// run's own histogram by whoever holds it: `(metric, quantile in 0..=1)` to its value, `None`
/// without samples.
pub type Exact<'a> = &'a dyn Fn(TimeMetric, f64) -> Option<f64>;

/// `q` of `h` as summary.json reads its percentiles (HdrHistogram's value at the quantile).
pub fn quantile_of(h: &hdrhistogram::Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64)
}

fn stat(h: &HistSummary, s: Stat, exact: &dyn Fn(f64) -> Option<f64>) -> Option<f64> {
    if h.count == 0 {
        return None;
    }
    Some(match s {
        Stat::Min => h.min as f64,
        Stat::Mean => h.mean,
        Stat::Max => h.max as f64,
        // The percentiles the summary lists are read from it, so a threshold's observed value
        // is the figure summary.json shows next to it.
        Stat::P50 => h.p50 as f64,
        Stat::P90 => h.p90 as f64,
        Stat::P99 => h.p99 as f64,
        Stat::P999 => h.p999 as f64,
        Stat::Quantile(m) => {
            if m >= 1_000_000 {
                h.max as f64
            } else {
                exact(f64::from(m) / 1e6)?
            }
        }
    })
}

/// Observed value of a threshold's metric; `None` when nothing was measured (which fails:
/// a gate must not pass on no data). `exact` reads the percentiles summary.json does not list.
pub fn observe(metric: Metric, s: &Summary, exact: Exact<'_>) -> Option<f64> {
    match metric {
        Metric::Time(m, st) => {
            let h = match m {
                TimeMetric::Rtt => &s.rtt_us,
                TimeMetric::Handshake => &s.handshake_us,
                TimeMetric::SendLateness => &s.generator.send_lateness_us,
                TimeMetric::SnapshotInterarrival => &s.snapshot_interarrival_us,
            };
            stat(h, st, &|q| exact(m, q))
        }
        Metric::DownstreamLoss => s.loss.downstream.filter(|l| l.expected > 0).map(|l| l.rate),
        Metric::UpstreamLoss => s.loss.upstream.filter(|l| l.expected > 0).map(|l| l.rate),
        Metric::ConnectSuccess => {
            (s.bots.planned > 0).then(|| s.bots.connected as f64 / s.bots.planned as f64)
        }
        Metric::DecodeErrors => Some(s.errors.decode.values().sum::<u64>() as f64),
        Metric::BotsFailed => Some(s.bots.failed as f64),
        Metric::BotsNeverConnected => Some(s.bots.never_connected() as f64),
        Metric::InputsSkipped => Some(s.generator.inputs_skipped as f64),
        Metric::SnapshotsApplied => Some(s.snapshots_applied as f64),
        Metric::GeneratorSaturated => Some(if s.generator.saturated { 1.0 } else { 0.0 }),
        Metric::BotsLost => Some(s.bots.lost as f64),
        Metric::BotsSilentAtEnd => Some(s.bots.silent_at_end as f64),
        Metric::Capacity => s.capacity.as_ref()?.players.map(|p| p as f64),
        Metric::SnapshotRate(st) => {
            let r = s.snapshot_rate.as_ref()?;
            match st {
                Stat::Min => Some(r.min_hz),
                Stat::Mean => Some(r.mean_hz),
                Stat::Max => Some(r.max_hz),
                Stat::P50 => Some(r.p50_hz),
                Stat::Quantile(_) => None,
            }
        }
        Metric::Server(f) => {
            let series = s.server_metrics.as_ref()?.find(f.name)?;
            let v = match f.stat {
                Stat::Min => series.min,
                Stat::Mean => series.mean,
                Stat::Max => series.max,
                Stat::Quantile(_) => series.quantile(f.stat.quantile()?),
            }?;
            Some(if f.time { v * 1e6 } else { v })
        }
    }
}

/// The observed values of the `server.NAME STAT` thresholds, where their `metric` path says
/// (`server_metrics.figures.NAME.STAT`), so each threshold's figure sits in summary.json.
pub fn record_server_figures(s: &mut Summary) {
    let found: Vec<(String, f64)> = s
        .thresholds
        .iter()
        .filter_map(|t| {
            Some((
                t.metric
                    .strip_prefix("server_metrics.figures.")?
                    .to_string(),
                t.observed?,
            ))
        })
        .collect();
    let Some(sm) = s.server_metrics.as_mut() else {
        return;
    };
    for (path, v) in found {
        if let Some((name, stat)) = path.rsplit_once('.') {
            sm.figures
                .entry(name.to_string())
                .or_default()
                .insert(stat.to_string(), v);
        }
    }
}

/// A threshold's result. A metric the run cannot take (`unmeasurable` says why) has no
/// observed value, and the threshold fails or is skipped as `policy` says.
pub fn evaluate_with(
    th: &Threshold,
    s: &Summary,
    exact: Exact<'_>,
    unmeasurable: Option<String>,
    policy: Unmeasurable,
) -> ThresholdResult {
    let observed = if unmeasurable.is_some() {
        None
    } else {
        observe(th.metric, s, exact)
    };
    let skipped = unmeasurable.is_some() && policy == Unmeasurable::Skip;
    ThresholdResult {
        metric: th.path(),
        condition: th.text.clone(),
        observed,
        ok: skipped || observed.is_some_and(|v| th.op.holds(v, th.limit)),
        default: th.default,
        unmeasurable,
        skipped,
    }
}

/// A threshold's outcome in words, for the console, junit.xml and report.html alike:
/// "observed 1.25 ms", "not measurable against this server (why)", "skipped: ...".
pub fn describe_outcome(t: &ThresholdResult) -> String {
    match (&t.unmeasurable, t.skipped) {
        (Some(why), true) => format!("skipped: not measurable against this server ({why})"),
        (Some(why), false) => format!("not measurable against this server ({why})"),
        (None, _) => format!("observed {}", format_observed(&t.metric, t.observed)),
    }
}

/// Render `observed` in the unit a person expects for this metric.
pub fn format_observed(metric_path: &str, v: Option<f64>) -> String {
    let Some(v) = v else {
        return "no data".into();
    };
    if metric_path == super::interruption::METRIC {
        return super::format::fmt_duration(v);
    }
    // The report's formatter, so the console, junit.xml and report.html print one figure alike.
    super::format::fmt_unit(super::format::metric_unit(metric_path), v)
}

/// Seconds since the epoch to a compact UTC stamp for folder names: 20261125T221530Z.
pub fn folder_stamp(t: std::time::SystemTime) -> String {
    let d = OffsetDateTime::from(t);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn info() -> RunInfo {
        RunInfo {
            scenario: "s".into(),
            scenario_file: "s.yaml".into(),
            protocol: "p".into(),
            transport: "udp".into(),
            dialect: "spec".into(),
            rtt_source: Some("protocol_ping".into()),
            seed: 1,
            shard: None,
            scenario_hash: None,
            label: None,
            loss_method: LossMethod {
                downstream: "ticks".into(),
                upstream: "acks".into(),
            },
            metrics: Vec::new(),
            thresholds: Vec::new(),
            input_rate_hz: 60.0,
            snapshot_rate_hz: None,
            cannot_measure: Vec::new(),
            unmeasurable: Unmeasurable::Fail,
            network: None,
        }
    }

    fn outcome(rec: crate::metrics::Recorder) -> RunOutcome {
        RunOutcome {
            total: rec,
            intervals: Vec::new(),
            planned: 1,
            ever_connected: 1,
            failed: 0,
            bots_lost: 0,
            bots_silent_at_end: 0,
            started_at: std::time::SystemTime::UNIX_EPOCH,
            elapsed: Duration::from_secs(1),
            interrupted: false,
            workers: 1,
            unfinished_workers: Vec::new(),
            worker_cpu_ns: None,
            timer_step: Duration::ZERO,
            tail: crate::metrics::Recorder::new(),
            server: None,
            target: "t".into(),
            sources: None,
            server_metrics: None,
            groups: Vec::new(),
        }
    }

    /// Two groups: 500 µs and 50 ms round trips. Each group's threshold reads its own
    /// figure (a listed percentile from the summary, another from the group's histogram);
    /// the whole run's reads both.
    #[test]
    fn thresholds_that_name_a_group_read_the_groups_figures() {
        use crate::metrics::groups::{GroupBots, GroupOutcome};
        use crate::metrics::Recorder;
        let group = |name: &str, rtt_us: u64| {
            let mut total = Recorder::new();
            for _ in 0..100 {
                total.record_rtt(rtt_us);
            }
            GroupOutcome {
                name: name.into(),
                size: "share 50%".into(),
                planned: 1,
                total,
                bots: GroupBots {
                    sessions: 1,
                    connected: 1,
                    ..GroupBots::default()
                },
                network: None,
                lifecycle: None,
                intervals: Vec::new(),
                tail_rtt: crate::metrics::new_histogram(),
                sources: None,
            }
        };
        let (a, b) = (group("a", 500), group("b", 50_000));
        let mut whole = Recorder::new();
        whole.merge(&a.total);
        whole.merge(&b.total);
        let mut run = outcome(whole);
        run.planned = 2;
        run.ever_connected = 2;
        run.groups = vec![a, b];
        let mut i = info();
        i.thresholds = [
            "rtt{group=a} p99 < 1ms",
            "rtt p99 < 1ms",
            "rtt{group=b} p95 < 1ms",
            "connect_success{group=b} >= 100%",
        ]
        .iter()
        .map(|t| Threshold::parse(t).unwrap())
        .collect();
        let s = summarize(&i, &run);
        let got: Vec<(&str, bool)> = s
            .thresholds
            .iter()
            .map(|t| (t.metric.as_str(), t.ok))
            .collect();
        assert_eq!(
            got,
            [
                ("groups.a.rtt_us.p99", true),
                ("rtt_us.p99", false),
                ("groups.b.rtt_us.p95", false),
                ("groups.b.bots.connect_rate", true),
            ]
        );
        assert_eq!(s.thresholds[2].observed, Some(50_015.0));
        assert_eq!(s.verdict, "fail");
        let names: Vec<&str> = s.groups.0.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(s.groups.get("b").map(|g| g.rtt_us.count), Some(100));
    }

    #[test]
    fn a_server_that_acks_nothing_makes_upstream_loss_not_measurable_not_100_percent() {
        let mut rec = crate::metrics::Recorder::new();
        rec.loss_up.add(16_109, 0);
        let s = summarize(&info(), &outcome(rec));
        assert_eq!(s.loss.upstream, None);
        assert!(
            s.loss_method.upstream.starts_with("not measurable")
                && s.loss_method.upstream.contains("16109"),
            "{}",
            s.loss_method.upstream
        );
        // One ack is enough to measure: then missing acks are loss.
        let mut rec = crate::metrics::Recorder::new();
        rec.loss_up.add(100, 1);
        let s = summarize(&info(), &outcome(rec));
        assert_eq!(s.loss.upstream.map(|l| l.received), Some(1));
    }

    #[test]
    fn one_saturation_rule() {
        use crate::metrics::Recorder;
        let judge = |sent: u64, skipped: u64, lateness_us: u64| {
            let mut rec = Recorder::new();
            rec.inputs_sent = sent;
            rec.inputs_skipped = skipped;
            rec.record_lateness(lateness_us);
            summarize(&info(), &outcome(rec)).generator
        };
        // 1 slot in 1000 skipped is the limit; lateness is judged against 1/60 s.
        assert!(!judge(999, 1, 100).saturated);
        assert!(judge(998, 2, 100).saturated);
        assert!(!judge(1000, 0, 8_000).saturated);
        let late = judge(1000, 0, 9_000);
        assert!(late.saturated);
        assert!((late.lateness_p99_of_period.unwrap() - 0.54).abs() < 0.01);
        assert_eq!(judge(0, 0, 1).skipped_share, None);
    }

    #[test]
    fn rate_per_bot_minute() {
        // 300 corrections by 10 bots over 30 s = 60 per bot-minute.
        assert_eq!(per_bot_minute(300, 10, Duration::from_secs(30)), Some(60.0));
        assert_eq!(per_bot_minute(1, 3, Duration::from_secs(60)), Some(0.33));
        assert_eq!(per_bot_minute(5, 0, Duration::from_secs(60)), None);
    }

    #[test]
    fn observed_values_in_their_units() {
        assert_eq!(format_observed("rtt_us.p99", Some(1500.0)), "1.50 ms");
        assert_eq!(format_observed("rtt_us.p99", Some(150.0)), "150 µs");
        assert_eq!(
            format_observed("loss.downstream.rate", Some(0.0125)),
            "1.25%"
        );
        assert_eq!(format_observed("bots.failed", None), "no data");
    }

    /// A percentile the summary does not list is read from the run's own histogram: RTT
    /// samples 1..=1000 µs have p95 = 950 µs and p99.5 = 995 µs exactly.
    #[test]
    fn any_percentile_threshold_is_judged_on_the_histogram() {
        let mut rec = crate::metrics::Recorder::new();
        for us in 1..=1000 {
            rec.rtt_us.record(us).unwrap();
        }
        let mut i = info();
        i.thresholds = [
            "rtt p95 < 951us",
            "rtt p95 < 950us",
            "rtt p99.5 <= 995us",
            "rtt p99 <= 990us",
        ]
        .iter()
        .map(|t| Threshold::parse(t).unwrap())
        .collect();
        let s = summarize(&i, &outcome(rec));
        let got: Vec<(&str, &str, Option<f64>, bool)> = s
            .thresholds
            .iter()
            .map(|t| (t.condition.as_str(), t.metric.as_str(), t.observed, t.ok))
            .collect();
        assert_eq!(
            got,
            [
                ("rtt p95 < 951us", "rtt_us.p95", Some(950.0), true),
                ("rtt p95 < 950us", "rtt_us.p95", Some(950.0), false),
                ("rtt p99.5 <= 995us", "rtt_us.p99_5", Some(995.0), true),
                ("rtt p99 <= 990us", "rtt_us.p99", Some(990.0), true),
            ]
        );
        assert_eq!(s.verdict, "fail");
        // No samples: no data, whatever the percentile.
        let mut i = info();
        i.thresholds = vec![Threshold::parse("send_lateness p95 < 1s").unwrap()];
        let s = summarize(&i, &outcome(crate::metrics::Recorder::new()));
        assert_eq!(
            (s.thresholds[0].observed, s.thresholds[0].ok),
            (None, false)
        );
    }

    /// The interrupted run's check reads its figure as a duration (its metric is the
    /// summary's own `duration_s`).
    #[test]
    fn the_interrupted_check_is_described_as_a_duration() {
        let mut s = Summary {
            interrupted: true,
            duration_s: 5.0,
            ..Summary::default()
        };
        super::super::interruption::apply(
            &mut s,
            Duration::from_secs(30),
            crate::metrics::threshold::Interrupted::default(),
        );
        assert_eq!(describe_outcome(&s.thresholds[0]), "observed 5.0 s");
    }
}
