//! The charts: per-second series ("Over time"), bots by phase, and the distributions
//! (HdrHistogram percentile plots) of every histogram metric, latency and bandwidth alike.
//!
//! Distributions and per-second percentiles come from `histograms.hlog` when the report is
//! written next to it ([`HistLog`]); without it they are drawn from the summary's seven
//! statistics per histogram, which is coarser but never invented.

use super::chart::{
    line_chart, line_chart_with, percentile_plot, stacked_chart, Expected, Figure, Mark, Opts,
    Overlay, Series, AMBER, BLUE, ORANGE, PURPLE, RED, TEAL,
};
use super::hists::{percentile_points, HistLog, SecondStats};
use super::view::interval_widths;
use crate::metrics::{HistSummary, Metric, Phase, Threshold};
use crate::report::format::{metric_unit, Unit};
use crate::report::summary::{IntervalPoint, Summary};

const GRAY: &str = "#6b7280";
const GREEN: &str = "#16a34a";
const SLATE: &str = "#94a3b8";
const PINK: &str = "#db2777";

/// Colour of each phase in the stacked chart, in [`Phase::ALL`] order.
fn phase_color(p: Phase) -> &'static str {
    match p {
        Phase::Connecting => SLATE,
        Phase::TransportHandshake => PURPLE,
        Phase::ProtocolHandshake => BLUE,
        Phase::Content => AMBER,
        Phase::InGame => GREEN,
        Phase::Reconnecting => PINK,
        Phase::Failed => RED,
        Phase::Closed => GRAY,
    }
}

/// Threshold lines for histogram `tag` (`rtt_us`, `send_lateness_us`): every time threshold
/// on it, whatever its statistic, labelled with the statistic.
fn time_marks(s: &Summary, tag: &str) -> Vec<Mark> {
    thresholds(s)
        .filter_map(|t| match t.metric {
            Metric::Time(m, stat) if m.key().rsplit('.').next() == Some(tag) => Some(Mark {
                label: format!("threshold {} {}", stat.name(), op_text(&t)),
                value: t.limit,
            }),
            _ => None,
        })
        .collect()
}

pub(super) fn op_text(t: &Threshold) -> &'static str {
    match t.op {
        crate::metrics::threshold::Op::Lt => "<",
        crate::metrics::threshold::Op::Le => "≤",
        crate::metrics::threshold::Op::Gt => ">",
        crate::metrics::threshold::Op::Ge => "≥",
    }
}

/// The scenario's whole-run thresholds as parsed conditions (those that parse): the lines
/// of the whole run's charts. A group's threshold (`rtt{group=mobile} p99 < 250ms`) judges
/// that group's figure, and is drawn on that group's chart only.
fn thresholds(s: &Summary) -> impl Iterator<Item = Threshold> + '_ {
    s.thresholds
        .iter()
        .filter_map(|t| Threshold::parse(&t.condition).ok())
        .filter(|t| t.group.is_none())
}

/// The bots in play at the end of each second, for the right-hand axis of the time-series
/// charts: in game where the run recorded phases, else connected. `None` without intervals.
fn active_bots(iv: &[IntervalPoint]) -> Option<Overlay> {
    if iv.is_empty() {
        return None;
    }
    let phases = iv.iter().any(|p| !p.phases.is_empty());
    Some(Overlay {
        name: if phases {
            "bots in game (right axis)"
        } else {
            "bots connected (right axis)"
        }
        .into(),
        points: iv
            .iter()
            .map(|p| {
                let n = if phases {
                    p.phases.get(Phase::InGame)
                } else {
                    p.bots_connected
                };
                (p.t, n as f64)
            })
            .collect(),
    })
}

/// The expected-value line on histogram `tag`'s chart, where the scenario implies one:
/// snapshots a server-stated snapshot interval apart (`server.snapshot_rate`), inputs one
/// input interval apart (drawn on the send-lateness chart: lateness of a whole interval is a
/// slot missed).
fn expected_for(s: &Summary, tag: &str) -> Vec<Expected> {
    let Some(e) = s.expected else {
        return Vec::new();
    };
    let line = |id: &'static str, what: &str, us: Option<f64>| {
        us.filter(|v| v.is_finite() && *v > 0.0).map(|v| Expected {
            id,
            label: format!("{what} (1 s / {})", crate::report::format::fmt_hz(1e6 / v)),
            value: v,
        })
    };
    match tag {
        "snapshot_interarrival_us" => line(
            "snapshot-interval",
            "expected spacing",
            e.snapshot_interval_us,
        ),
        "send_lateness_us" => line("input-interval", "input interval", e.input_interval_us),
        _ => None,
    }
    .into_iter()
    .collect()
}

/// The clip for a series whose outliers (`max`) are far above its body (`reference`): an
/// axis to 1.5 × the reference, or none when the max is within 3 × of it.
pub(super) fn clip(reference: f64, max: f64) -> Option<f64> {
    (reference > 0.0 && max > 3.0 * reference).then_some(reference * 1.5)
}

/// How a histogram metric reads: its unit, the divisor its protocol declared, and a title.
fn describe(s: &Summary, tag: &str) -> (Unit, f64, String) {
    let builtin = match tag {
        "rtt_us" => Some("Round-trip time"),
        "handshake_us" => Some("Handshake time"),
        "snapshot_interarrival_us" => Some("Snapshot inter-arrival time"),
        "send_lateness_us" => Some("Send lateness (generator)"),
        "bot_up_bytes_per_s" => Some("Per-bot upload, bytes per second"),
        "bot_down_bytes_per_s" => Some("Per-bot download, bytes per second"),
        "packet_size_up_bytes" => Some("Message size up"),
        "packet_size_down_bytes" => Some("Message size down"),
        _ => None,
    };
    if let Some(title) = builtin {
        let title = match super::view::rtt_source_label(s) {
            Some(from) if tag == "rtt_us" => format!("{title} ({from})"),
            _ => title.to_string(),
        };
        return (metric_unit(tag), 1.0, title);
    }
    match s.protocol_metric_info.get(tag) {
        Some(i) if i.is_micros() => (Unit::Micros, 1.0, i.label.clone()),
        Some(i) => (Unit::Plain, f64::from(i.scale.max(1)), i.label.clone()),
        None => (metric_unit(tag), 1.0, tag.to_string()),
    }
}

/// The transport and protocol timings the log holds that are latencies (µs), RTT first.
fn latency_tags(s: &Summary, log: &HistLog) -> Vec<String> {
    let mut tags: Vec<String> = log
        .tags
        .iter()
        .filter(|(_, h)| !h.total.is_empty())
        .map(|(t, _)| t.clone())
        // A group's RTT is drawn in its own section, from its seconds.
        .filter(|t| !crate::metrics::groups::is_group_tag(t))
        .filter(|t| describe(s, t).0 == Unit::Micros)
        .collect();
    tags.sort_by_key(|t| (t != "rtt_us", t.clone()));
    tags
}

/// Bots by phase, second by second: where every bot is (connecting .. in game .. closed).
fn phase_figure(iv: &[IntervalPoint]) -> Option<Figure> {
    if iv.iter().all(|p| p.phases.is_empty()) {
        return None;
    }
    let layers: Vec<Series> = Phase::ALL
        .iter()
        .map(|&ph| Series {
            name: ph.name(),
            color: phase_color(ph),
            points: iv.iter().map(|p| (p.t, p.phases.get(ph) as f64)).collect(),
        })
        .collect();
    let stuck = iv
        .last()
        .and_then(|p| p.waiting.first())
        .filter(|w| w.longest_s >= 1)
        .map(|w| format!(" At the end: {}.", w.sentence()))
        .unwrap_or_default();
    Some(Figure::new(
        "phases",
        "Bots by phase",
        stacked_chart("Bots by phase", &layers, Unit::Count),
        format!(
            "Where each bot is at the end of each second: connecting, transport handshake \
             (ENet), protocol handshake, content (accepted, loading before play), in game, \
             reconnecting, failed, closed.{stuck}"
        ),
    ))
}

/// p50/p90/p99/max of histogram `tag` second by second, from the log.
fn percentiles_over_time(s: &Summary, log: &HistLog, tag: &str) -> Option<Figure> {
    let h = log.tags.get(tag)?;
    if h.total.is_empty() {
        return None;
    }
    let (unit, scale, title) = describe(s, tag);
    let last_t = s.intervals.last().map(|p| p.t);
    let n = h.by_second.len();
    let point_t = |i: usize, sec: u64| -> f64 {
        // The run's last, partial second ends at the run's end, as its interval point does.
        match last_t {
            Some(t) if i + 1 == n && (sec as f64 + 1.0) > t => t,
            _ => sec as f64 + 1.0,
        }
    };
    let q = |f: &dyn Fn(&SecondStats) -> u64| -> Vec<(f64, f64)> {
        h.by_second
            .iter()
            .enumerate()
            .map(|(i, st)| (point_t(i, st.second), f(st) as f64 / scale))
            .collect()
    };
    let series = [
        ("p50", BLUE, q(&|x| x.p50)),
        ("p90", TEAL, q(&|x| x.p90)),
        ("p99", ORANGE, q(&|x| x.p99)),
        ("max", RED, q(&|x| x.max)),
    ];
    let p99_top = series[2].2.iter().map(|p| p.1).fold(0.0, f64::max);
    let max_top = series[3].2.iter().map(|p| p.1).fold(0.0, f64::max);
    let opts = Opts {
        clip_at: clip(p99_top, max_top),
        marks: time_marks(s, tag),
        expected: expected_for(s, tag),
        overlay: active_bots(&s.intervals),
    };
    let series: Vec<Series> = series
        .into_iter()
        .map(|(name, color, points)| Series {
            name,
            color,
            points,
        })
        .collect();
    let clipped = if opts.clip_at.is_some() {
        " The axis stops above the highest p99; ▲ marks a max off the scale (hover for its value)."
    } else {
        ""
    };
    Some(Figure::new(
        &format!("over-time-{tag}"),
        format!("{title}: percentiles over time"),
        line_chart_with(&title, &series, unit, &opts),
        format!("p50, p90, p99 and max of each second.{clipped}"),
    ))
}

/// What the loss chart's caption says of how downstream loss is measured. "Not measurable"
/// only where the run says so (`loss_method.downstream` starts with it: the protocol cannot,
/// or the server gave nothing it is read from); a protocol that measures loss in a run with
/// nothing to measure it on (no bot got in) has no data, and its method is named.
pub(super) fn loss_caption(s: &Summary) -> String {
    let m = s.loss_method.downstream.trim();
    if let Some(why) = m.strip_prefix("not measurable") {
        let why = why.trim_start_matches([':', ' ']);
        return if why.is_empty() {
            "Downstream loss is not measurable in this run.".into()
        } else {
            format!("Downstream loss is not measurable in this run: {why}")
        };
    }
    match (&s.loss.downstream, m) {
        (Some(_), "") => "Fraction of expected server datagrams never received.".into(),
        (Some(_), m) => format!("Measured by: {m}"),
        (None, "") => "No downstream loss was measured: nothing the server sent was expected \
                       (no bot was in the game)."
            .into(),
        (None, m) => format!(
            "No downstream loss was measured: nothing the server sent was expected (no bot \
             was in the game). Measured by: {m}"
        ),
    }
}

/// Where a distribution's curves come from, as its caption says it: `log` is whether the
/// report read histograms.hlog; `from_summary` whether a drawn curve came from summary.json
/// (its tag not in the log).
pub(super) fn hist_source(log: bool, from_summary: bool) -> &'static str {
    match (log, from_summary) {
        (true, false) => "from histograms.hlog",
        (true, true) => {
            "from summary.json's percentiles where histograms.hlog holds none of these samples"
        }
        (false, _) => {
            "from summary.json's percentiles (no histograms.hlog was read for this report)"
        }
    }
}

/// The shortest interval a per-second rate is drawn for (see `figures`).
const MIN_RATE_WIDTH_S: f64 = 0.5;

/// Bots, RTT, loss, bandwidth and generator lateness, second by second; the bot phases; and
/// p50/p90/p99/max over time of every latency the log holds.
pub(super) fn figures(s: &Summary, log: Option<&HistLog>) -> Vec<Figure> {
    let iv = &s.intervals;
    let series = |f: &dyn Fn(&IntervalPoint) -> f64| -> Vec<(f64, f64)> {
        iv.iter().map(|p| (p.t, f(p))).collect()
    };
    // A per-second statistic that may have had no sample: those seconds are left out, not
    // drawn as 0.
    let known = |f: &dyn Fn(&IntervalPoint) -> Option<u64>| -> Vec<(f64, f64)> {
        iv.iter()
            .filter_map(|p| f(p).map(|v| (p.t, v as f64)))
            .collect()
    };
    let widths: Vec<f64> = interval_widths(iv).collect();
    // A rate needs time to be one: a last, partial interval shorter than half a second (often
    // no time at all, holding only the goodbyes sent at the stop) is left out of rate charts.
    // Drawn, it made a plunge (or a spike) at the end that the traffic never had.
    let per_sec = |f: &dyn Fn(&IntervalPoint) -> u64| -> Vec<(f64, f64)> {
        iv.iter()
            .zip(&widths)
            .filter(|(_, dt)| **dt >= MIN_RATE_WIDTH_S)
            .map(|(p, dt)| (p.t, f(p) as f64 / dt))
            .collect()
    };
    let loss_caption = loss_caption(s);
    let loss_marks: Vec<Mark> = thresholds(s)
        .filter(|t| t.metric == Metric::DownstreamLoss)
        .map(|t| Mark {
            label: format!("threshold {}", op_text(&t)),
            value: t.limit,
        })
        .collect();
    let mut out = Vec::new();
    out.push(match phase_figure(iv) {
        Some(f) => f,
        None => Figure::new(
            "bots",
            "Bots connected",
            line_chart(
                "Bots connected",
                &[Series {
                    name: "bots connected",
                    color: BLUE,
                    points: series(&|p| p.bots_connected as f64),
                }],
                Unit::Count,
            ),
            "Bots with a completed handshake at the end of each second.",
        ),
    });
    match log.and_then(|l| percentiles_over_time(s, l, "rtt_us")) {
        Some(f) => out.push(f),
        None => {
            let p99 = known(&|p| p.rtt_p99_us);
            let p50 = known(&|p| p.rtt_p50_us);
            let p50_top = p50.iter().map(|p| p.1).fold(0.0, f64::max);
            let p99_top = p99.iter().map(|p| p.1).fold(0.0, f64::max);
            let opts = Opts {
                clip_at: clip(p50_top * 2.0, p99_top),
                marks: time_marks(s, "rtt_us"),
                expected: Vec::new(),
                overlay: active_bots(iv),
            };
            out.push(Figure::new(
                "over-time-rtt_us",
                describe(s, "rtt_us").2,
                line_chart_with(
                    &describe(s, "rtt_us").2,
                    &rtt_series(p50, p99),
                    Unit::Micros,
                    &opts,
                ),
                match s.rtt_source.as_deref() {
                    Some("enet_acks") => {
                        "Per-second percentiles of the round-trip time: one sample per \
                         acknowledged ENet reliable command (the server answers no ping)."
                    }
                    _ => "Per-second percentiles of the round-trip time measured by the bots.",
                },
            ));
        }
    }
    // The server's own figures (`server_metrics:`) right after the RTT, on the same axis.
    out.extend(super::server::figures(s, || active_bots(iv)));
    out.push(Figure::new(
        "loss",
        "Downstream loss rate",
        line_chart_with(
            "Downstream loss rate",
            &[Series {
                name: "loss (down)",
                color: RED,
                points: iv
                    .iter()
                    .filter_map(|p| p.loss_down_rate.map(|r| (p.t, r)))
                    .collect(),
            }],
            Unit::Rate,
            &Opts {
                clip_at: None,
                marks: loss_marks,
                // Loss is measured against what the protocol says was sent: none is expected.
                expected: s
                    .loss
                    .downstream
                    .is_some()
                    .then(|| Expected {
                        id: "loss",
                        label: "expected".into(),
                        value: 0.0,
                    })
                    .into_iter()
                    .collect(),
                overlay: active_bots(iv),
            },
        ),
        loss_caption,
    ));
    out.extend(snapshot_rate_figure(s, active_bots(iv)));
    out.push(Figure::new(
        "bandwidth",
        "Bandwidth",
        line_chart_with(
            "Bandwidth",
            &[
                Series {
                    name: "up (bots → server)",
                    color: PURPLE,
                    points: per_sec(&|p| p.bytes_up),
                },
                Series {
                    name: "down (server → bots)",
                    color: TEAL,
                    points: per_sec(&|p| p.bytes_down),
                },
            ],
            Unit::BytesPerSec,
            &Opts {
                overlay: active_bots(iv),
                ..Default::default()
            },
        ),
        "Application payload bytes per second, all bots together (the run's last, partial \
         second only when it lasted half a second or more).",
    ));
    out.push(Figure::new(
        "lateness",
        "Generator health: send lateness p99",
        line_chart_with(
            "Generator health: send lateness p99",
            &[Series {
                name: "send lateness p99",
                color: AMBER,
                points: known(&|p| p.lateness_p99_us),
            }],
            Unit::Micros,
            &Opts {
                clip_at: None,
                marks: time_marks(s, "send_lateness_us"),
                expected: expected_for(s, "send_lateness_us"),
                overlay: active_bots(iv),
            },
        ),
        "The coordinated-omission guard: how late inputs left relative to their intended \
         send time on each bot's tick grid. Low values mean the load was applied as \
         planned; high values mean the load generator itself was the bottleneck, and \
         latencies measured during those seconds understate what a real client would see.",
    ));
    // Beside the lateness: the workers' CPU per second and the CPU-bound rule.
    out.extend(super::server::generator_figure(s, active_bots(iv)));
    out.extend(super::server::send_io_figure(s, active_bots(iv)));
    if let Some(log) = log {
        for tag in latency_tags(s, log) {
            if tag == "rtt_us" || tag == "send_lateness_us" {
                continue;
            }
            // A one-off timing (a handshake) has too few seconds to draw a line through.
            if log.tags.get(&tag).is_some_and(|h| h.by_second.len() >= 2) {
                out.extend(percentiles_over_time(s, log, &tag));
            }
        }
    }
    out
}

/// The server's snapshot rate per bot, second by second, with the bots in game on the right
/// axis, the scenario's `snapshot_rate` thresholds as lines and each sustained change named
/// in the caption. `None` when the run has no rate (a protocol that counts no snapshots).
fn snapshot_rate_figure(s: &Summary, overlay: Option<Overlay>) -> Option<Figure> {
    let rate = s.snapshot_rate.as_ref()?;
    let points: Vec<(f64, f64)> = s
        .intervals
        .iter()
        .filter(|p| !p.partial)
        .filter_map(|p| Some((p.t, p.snapshot_rate.hz()?)))
        .collect();
    if points.is_empty() {
        return None;
    }
    let marks: Vec<Mark> = thresholds(s)
        .filter_map(|t| match t.metric {
            Metric::SnapshotRate(stat) => Some(Mark {
                label: format!("threshold {} {}", stat.name(), op_text(&t)),
                value: t.limit,
            }),
            _ => None,
        })
        .collect();
    let expected: Vec<Expected> = s
        .expected
        .and_then(|e| e.snapshot_interval_us)
        .filter(|us| *us > 0.0)
        .map(|us| Expected {
            id: "snapshot-rate",
            label: format!("stated {}", crate::report::format::fmt_hz(1e6 / us)),
            value: 1e6 / us,
        })
        .into_iter()
        .collect();
    let changes = if rate.changes.is_empty() {
        "The rate held through the run.".to_string()
    } else {
        let said: Vec<String> = rate
            .changes
            .iter()
            .map(crate::report::format::rate_change)
            .collect();
        format!("The rate changed: {}.", said.join("; "))
    };
    Some(Figure::new(
        "snapshot-rate",
        "Snapshot rate per bot",
        line_chart_with(
            "Snapshot rate per bot",
            &[Series {
                name: "snapshots per bot per second",
                color: TEAL,
                points,
            }],
            Unit::Hertz,
            &Opts {
                clip_at: None,
                marks,
                expected,
                overlay,
            },
        ),
        format!(
            "Snapshots the server sent each bot per second (received, or counted lost), over              the bots in game for the whole second: a server that lowers its rate shows here,              not as loss. {changes}"
        ),
    ))
}

/// The summary's seven statistics as percentile points (no log to read).
fn summary_points(h: &HistSummary) -> Vec<(f64, f64)> {
    if h.count == 0 {
        return Vec::new();
    }
    vec![
        (0.0, h.min as f64),
        (0.5, h.p50 as f64),
        (0.9, h.p90 as f64),
        (0.99, h.p99 as f64),
        (0.999, h.p999 as f64),
        (1.0, h.max as f64),
    ]
}

/// One percentile plot of `curves` (`(name, colour, tag)`), from the log or the summary.
fn distribution(
    s: &Summary,
    log: Option<&HistLog>,
    id: &str,
    title: &str,
    curves: &[(&'static str, &'static str, &str, Option<HistSummary>)],
) -> Option<Figure> {
    let mut count = 0;
    let mut p999: f64 = 0.0;
    let mut max: f64 = 0.0;
    let mut series = Vec::new();
    let mut unit = Unit::Plain;
    let mut from_summary = false;
    let mut marks = Vec::new();
    for (name, color, tag, fallback) in curves {
        let (u, scale, _) = describe(s, tag);
        unit = u;
        marks.extend(time_marks(s, tag));
        let (points, n, tail, top) = match log.and_then(|l| l.tags.get(*tag)) {
            Some(h) if !h.total.is_empty() => {
                let t = &h.total;
                let reference = if t.len() >= 1000 {
                    t.value_at_quantile(0.999)
                } else {
                    t.value_at_quantile(0.99)
                };
                (
                    percentile_points(t),
                    t.len(),
                    reference as f64,
                    t.max() as f64,
                )
            }
            _ => {
                let h = fallback.unwrap_or_default();
                let reference = if h.count >= 1000 { h.p999 } else { h.p99 };
                let points = summary_points(&h);
                // Only a curve drawn from the summary makes the caption say so: an empty
                // one (a direction with no sample) is drawn from nothing.
                from_summary |= !points.is_empty();
                (points, h.count, reference as f64, h.max as f64)
            }
        };
        if points.is_empty() {
            continue;
        }
        count = count.max(n);
        p999 = p999.max(tail / scale);
        max = max.max(top / scale);
        series.push(Series {
            name,
            color,
            points: points.into_iter().map(|(p, v)| (p, v / scale)).collect(),
        });
    }
    if series.is_empty() {
        return None;
    }
    let opts = Opts {
        clip_at: clip(p999, max),
        marks,
        ..Default::default()
    };
    let source = hist_source(log.is_some(), from_summary);
    let clipped = if opts.clip_at.is_some() {
        " The value axis stops above p99.9; ▲ marks where the tail leaves it (hover for the max)."
    } else {
        ""
    };
    Some(Figure::new(
        id,
        title,
        percentile_plot(title, &series, count, unit, &opts),
        format!(
            "Value at each percentile, {} samples, {source}. The percentile axis is \
             logarithmic in 1/(1−p): each step right is one more nine.{clipped}",
            crate::report::format::group_int(count)
        ),
    ))
}

/// Percentile plots of every latency: RTT, handshake, snapshot inter-arrival, lateness,
/// and the protocol's and transport's own timings.
pub(super) fn latency_distributions(s: &Summary, log: Option<&HistLog>) -> Vec<Figure> {
    let mut tags: Vec<(String, Option<HistSummary>)> = vec![
        ("rtt_us".into(), Some(s.rtt_us)),
        ("handshake_us".into(), Some(s.handshake_us)),
        (
            "snapshot_interarrival_us".into(),
            Some(s.snapshot_interarrival_us),
        ),
        (
            "send_lateness_us".into(),
            Some(s.generator.send_lateness_us),
        ),
    ];
    let extra: Vec<String> = match log {
        Some(l) => latency_tags(s, l),
        None => s
            .protocol_metrics
            .iter()
            .filter(|(k, v)| describe(s, k).0 == Unit::Micros && v.get("p50").is_some())
            .map(|(k, _)| k.clone())
            .collect(),
    };
    for t in extra {
        if !tags.iter().any(|(x, _)| *x == t) {
            let fallback = s
                .protocol_metrics
                .get(&t)
                .and_then(|v| serde_json::from_value::<HistSummary>(v.clone()).ok());
            tags.push((t, fallback));
        }
    }
    tags.iter()
        .filter_map(|(tag, fb)| {
            let (_, _, title) = describe(s, tag);
            distribution(
                s,
                log,
                &format!("dist-{tag}"),
                &title,
                &[("all samples", BLUE, tag, *fb)],
            )
        })
        .collect()
}

/// Per-bot bandwidth (bytes per second, one sample per bot per second) and message sizes,
/// up and down, as percentile plots.
pub(super) fn bandwidth_distributions(s: &Summary, log: Option<&HistLog>) -> Vec<Figure> {
    let b = &s.bandwidth;
    [
        distribution(
            s,
            log,
            "dist-bot-bytes-per-s",
            "Per-bot bandwidth (bytes per second)",
            &[
                (
                    "up",
                    PURPLE,
                    "bot_up_bytes_per_s",
                    Some(b.per_bot_up_bytes_per_s),
                ),
                (
                    "down",
                    TEAL,
                    "bot_down_bytes_per_s",
                    Some(b.per_bot_down_bytes_per_s),
                ),
            ],
        ),
        distribution(
            s,
            log,
            "dist-packet-size",
            "Message sizes",
            &[
                (
                    "up",
                    PURPLE,
                    "packet_size_up_bytes",
                    Some(b.packet_size_up_bytes),
                ),
                (
                    "down",
                    TEAL,
                    "packet_size_down_bytes",
                    Some(b.packet_size_down_bytes),
                ),
            ],
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// One target's row in the per-target table (plain text).
pub(super) struct TargetRow {
    pub target: String,
    pub in_game_end: String,
    pub in_game_max: String,
    pub waiting_end: String,
    pub failed_end: String,
    pub bytes_up: String,
    pub bytes_down: String,
}

/// Per target (game instance), when the bots played on two or more: bots in game second by
/// second, and a table of each target's bots and payload. Empty otherwise.
pub(super) fn per_target(s: &Summary) -> (Vec<Figure>, Vec<TargetRow>) {
    use crate::report::format::{fmt_bytes, group_int};
    let mut names: Vec<&str> = s
        .intervals
        .iter()
        .flat_map(|p| p.targets.iter().map(|t| t.target.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 2 {
        return (Vec::new(), Vec::new());
    }
    const COLORS: [&str; 8] = [BLUE, ORANGE, TEAL, PURPLE, RED, AMBER, GREEN, PINK];
    let of = |p: &IntervalPoint, name: &str| p.targets.iter().find(|t| t.target == name).cloned();
    let series: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            name,
            color: COLORS[i % COLORS.len()],
            points: s
                .intervals
                .iter()
                .filter(|p| !p.targets.is_empty())
                .map(|p| (p.t, of(p, name).map_or(0.0, |t| t.phases.in_game as f64)))
                .collect(),
        })
        .collect();
    let last = s.intervals.iter().rev().find(|p| !p.targets.is_empty());
    let rows = names
        .iter()
        .map(|name| {
            let end = last.and_then(|p| of(p, name)).unwrap_or_default();
            let all = s.intervals.iter().filter_map(|p| of(p, name));
            let max = all.clone().map(|t| t.phases.in_game).max().unwrap_or(0);
            let up: u64 = all.clone().map(|t| t.bytes_up).sum();
            let down: u64 = all.map(|t| t.bytes_down).sum();
            let waiting: u64 = Phase::ALL
                .iter()
                .filter(|p| p.is_waiting())
                .map(|&p| end.phases.get(p))
                .sum();
            TargetRow {
                target: name.to_string(),
                in_game_end: group_int(end.phases.in_game),
                in_game_max: group_int(max),
                waiting_end: group_int(waiting),
                failed_end: group_int(end.phases.failed),
                bytes_up: fmt_bytes(up as f64),
                bytes_down: fmt_bytes(down as f64),
            }
        })
        .collect();
    let fig = Figure::new(
        "targets",
        "Bots in game per target",
        line_chart("Bots in game per target", &series, Unit::Count),
        "Bots playing on each server address at the end of each second: an instance that \
         refuses or drops players shows apart from the others.",
    );
    (vec![fig], rows)
}

/// The RTT chart's two lines, p50 and p99 per second, in the report's colours for them (the
/// whole run's chart and each group's).
pub(super) fn rtt_series<'a>(p50: Vec<(f64, f64)>, p99: Vec<(f64, f64)>) -> [Series<'a>; 2] {
    [
        Series {
            name: "RTT p50",
            color: BLUE,
            points: p50,
        },
        Series {
            name: "RTT p99",
            color: ORANGE,
            points: p99,
        },
    ]
}
