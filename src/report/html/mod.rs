//! report.html: one self-contained file that a person reads after a run.
//!
//! The page is an askama template (`templates/report.html`), checked when the crate compiles
//! and escaping every value it prints, since scenario names, targets and metric names are
//! user input. This module turns a [`Summary`] into the template's view model:
//!
//! - `view`: header, thresholds, key figures, latency percentiles, errors;
//! - `timeline`: the per-second charts, bots by phase, and the percentile plots;
//! - `hists`: the histograms read back from `histograms.hlog`, when it is beside the report;
//! - `protocol`: the protocol's own metrics, shown as its `protocol_metric_info` says;
//! - `chart`: the SVG drawn in code (the only markup not written in the template);
//!
//! Everything is inline and works offline: CSS in a `<style>` block, charts as SVG (no
//! JavaScript, no fonts, no images, no external references; a Content-Security-Policy forbids
//! fetching anything).

mod capacity;
mod chart;
mod group_charts;
pub mod hists;
mod protocol;
mod server;
mod timeline;
pub mod trend;
mod view;

use askama::Template;

use super::summary::Summary;
use crate::report::format::fmt_duration;
use chart::Figure;
pub use hists::HistLog;
use protocol::Tables;
use timeline::TargetRow;
use view::{Card, ErrorRow, HistRow, Meta, ThresholdRow, Verdict};

/// The whole page, as the template reads it.
#[derive(Template)]
#[template(path = "report.html")]
struct Page<'a> {
    title: &'a str,
    verdict: Verdict,
    meta: Vec<Meta>,
    /// Why the run failed, one sentence each, causes first (empty when it passed), as runs
    /// of text and code.
    reasons: Vec<Vec<view::Run>>,
    /// The simulated network the bots' datagrams went through: `(who, conditions)`.
    network: Vec<(String, String)>,
    /// The run's length when it was interrupted.
    interrupted: Option<String>,
    /// A capacity search's answer, knee charts and steps (`tickswarm capacity`).
    capacity: Option<capacity::CapacityView>,
    thresholds: Vec<ThresholdRow>,
    key_figures: Vec<Card>,
    highlights: Vec<Card>,
    no_intervals: bool,
    figures: Vec<Figure>,
    latency_dists: Vec<Figure>,
    bandwidth_dists: Vec<Figure>,
    target_figures: Vec<Figure>,
    targets: Vec<TargetRow>,
    /// Bots per source address (or network), with a line saying how they are counted.
    sources: Option<(String, &'a [crate::metrics::SourceRow])>,
    latency: Vec<HistRow>,
    /// Per group of the population (`groups:`), then the whole run; empty without groups.
    groups: Vec<crate::report::groups::GroupRow>,
    /// Per group: its RTT and loss second by second, beside its injected conditions.
    group_figures: Vec<Figure>,
    /// Per group with a pool: the group, its pool's line and its bots per address.
    group_sources: Vec<(String, String, &'a [crate::metrics::SourceRow])>,
    /// Error rows and their total, or none at all.
    errors: Option<(Vec<ErrorRow>, String)>,
    protocol: Tables,
    version: &'static str,
    schema: u32,
}

impl<'a> Page<'a> {
    fn of(s: &'a Summary, log: Option<&HistLog>) -> Self {
        let (target_figures, targets) = timeline::per_target(s);
        Self {
            title: if s.scenario.is_empty() {
                "(unnamed scenario)"
            } else {
                &s.scenario
            },
            verdict: Verdict::of(&s.verdict),
            meta: view::meta(s),
            reasons: crate::report::reasons::verdict_reasons(s)
                .iter()
                .map(|r| view::code_spans(r))
                .collect(),
            network: view::injected_network(s),
            interrupted: s.interrupted.then(|| fmt_duration(s.duration_s)),
            capacity: s.capacity.as_ref().map(capacity::view),
            thresholds: view::thresholds(&s.thresholds),
            key_figures: view::mark_failed(view::key_figures(s), &s.thresholds),
            highlights: protocol::highlights(s),
            no_intervals: s.intervals.is_empty(),
            figures: timeline::figures(s, log),
            latency_dists: timeline::latency_distributions(s, log),
            bandwidth_dists: timeline::bandwidth_distributions(s, log),
            target_figures,
            targets,
            sources: s
                .source_addresses
                .as_ref()
                .map(|c| (pool_line(c), c.rows.as_slice())),
            latency: view::latency(s),
            groups: crate::report::groups::rows(s),
            group_figures: group_charts::figures(s),
            group_sources: s
                .groups
                .0
                .iter()
                .filter_map(|g| {
                    let c = g.source_addresses.as_ref()?;
                    Some((g.name.clone(), pool_line(c), c.rows.as_slice()))
                })
                .collect(),
            errors: view::errors(s),
            protocol: protocol::tables(s),
            version: env!("CARGO_PKG_VERSION"),
            schema: s.schema,
        }
    }
}

/// How a source table counts its bots, in a sentence.
fn pool_line(c: &crate::metrics::SourceCounts) -> String {
    match c.grouped_by.as_str() {
        "address" => format!(
            "A pool of {} addresses, bot i on address i mod {}.",
            c.pool_size, c.pool_size
        ),
        net => format!(
            "A pool of {} addresses, bot i on address i mod {}; counted per {net} network (too many addresses for one row each).",
            c.pool_size, c.pool_size
        ),
    }
}

/// Render the whole report as one HTML document.
pub fn render(s: &Summary) -> String {
    render_with(s, None)
}

/// [`render`] with the run's histograms (from `histograms.hlog`), for exact percentile plots
/// and p50/p90/p99/max over time; without them the plots use the summary's statistics.
pub fn render_with(s: &Summary, log: Option<&HistLog>) -> String {
    // Rendering writes into a String and every value's Display is infallible, so an error
    // here is a bug in the template; say so in the page rather than lose the run's report.
    Page::of(s, log)
        .render()
        .unwrap_or_else(|e| format!("<!DOCTYPE html>\n<p>report template failed: {e}</p>\n"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Map, Value};

    use super::chart::{polyline, ML, MT, PH, PW};
    use super::*;
    use crate::metrics::describe::Display;
    use crate::metrics::{HistSummary, LossSummary, MetricInfo};
    use crate::report::summary::{
        Bandwidth, BotCounts, Errors, Generator, IntervalPoint, Loss, LossMethod, ThresholdResult,
    };

    /// A HistSummary as summary.json holds it.
    fn json(h: HistSummary) -> Value {
        serde_json::to_value(h).expect("HistSummary serializes")
    }

    fn hist(p50: u64, p99: u64, max: u64, count: u64) -> HistSummary {
        HistSummary {
            count,
            min: p50 / 3,
            mean: p50 as f64 * 1.1,
            p50,
            p90: (p50 + p99) / 2,
            p99,
            p999: (p99 + max) / 2,
            max,
        }
    }

    fn empty_summary() -> Summary {
        Summary {
            schema: 1,
            protocol: String::new(),
            transport: String::new(),
            dialect: String::new(),
            scenario: String::new(),
            scenario_file: String::new(),
            target: String::new(),
            started_at: String::new(),
            duration_s: 0.0,
            interrupted: false,
            aborted: None,
            seed: 0,
            shard: None,
            scenario_hash: None,
            label: None,
            tool_version: None,
            merged_shards: None,
            bots: BotCounts::default(),
            rtt_us: HistSummary::default(),
            rtt_source: None,
            handshake_us: HistSummary::default(),
            snapshot_interarrival_us: HistSummary::default(),
            generator: Generator::default(),
            loss: Loss::default(),
            loss_method: LossMethod::default(),
            bandwidth: Bandwidth::default(),
            inputs_sent: 0,
            snapshots_applied: 0,
            snapshot_rate: None,
            errors: Errors::default(),
            source_addresses: None,
            network: None,
            server_metrics: None,
            groups: Default::default(),
            protocol_metrics: Map::new(),
            protocol_metric_info: BTreeMap::new(),
            expected: None,
            thresholds: Vec::new(),
            verdict: String::new(),
            intervals: Vec::new(),
            capacity: None,
            staircase: None,
        }
    }

    /// Bots in game, and the next second's 100 still in their handshake during the ramp.
    fn demo_phases(bots: u64) -> crate::metrics::PhaseCounts {
        crate::metrics::PhaseCounts {
            in_game: bots,
            protocol_handshake: if bots < 1000 { 100 } else { 0 },
            ..Default::default()
        }
    }

    /// A realistic 20 s run: 1000 bots ramping up over 10 s, RTT around 0.3 ms with a spike at
    /// 14 s, a little downstream loss, one failed threshold.
    fn sample_summary() -> Summary {
        let mut intervals = Vec::new();
        for i in 1..=20u64 {
            let bots = (i * 100).min(1000);
            let spike = i == 14;
            let near = i == 13 || i == 15;
            let rtt_p50 = if spike {
                2100
            } else if near {
                520
            } else {
                280 + (i % 3) * 15
            };
            let rtt_p99 = if spike {
                24_800
            } else if near {
                3_900
            } else {
                640 + (i % 4) * 40
            };
            intervals.push(IntervalPoint {
                t: i as f64,
                bots_connected: bots,
                rtt_p50_us: Some(rtt_p50),
                rtt_p99_us: Some(rtt_p99),
                loss_down_rate: Some(if spike {
                    0.021
                } else {
                    0.0004 * (i % 3) as f64
                }),
                packets_up: bots * 60,
                packets_down: bots * 30,
                bytes_up: bots * 60 * 42,
                bytes_down: bots * 30 * 410,
                lateness_p99_us: Some(if spike { 3_400 } else { 40 + (i % 5) * 9 }),
                inputs_sent: bots * 60,
                snapshots_applied: bots * 30,
                snapshot_rate_hz: Some(30.0),
                snapshot_rate: crate::metrics::SnapshotRateCounts {
                    bot_seconds: bots,
                    snapshots: bots * 30,
                },
                phases: demo_phases(bots),
                waiting: Vec::new(),
                targets: Vec::new(),
                partial: false,
                generator: None,
            });
        }
        let sum = |f: fn(&IntervalPoint) -> u64| intervals.iter().map(f).sum::<u64>();
        let mut pm = Map::new();
        pm.insert("orders_placed".into(), Value::from(152_340u64));
        pm.insert("resyncs".into(), Value::from(3u64));
        pm.insert("tip_ratio".into(), Value::from(0.125));
        pm.insert("kitchen_us".into(), json(hist(800, 4_200, 12_000, 150_000)));
        let mut tables = Map::new();
        tables.insert("occupied".into(), Value::from(42u64));
        tables.insert("wait_us".into(), json(hist(1_500, 9_000, 31_000, 9_000)));
        pm.insert("tables".into(), Value::Object(tables));
        let mut s = empty_summary();
        s.protocol = "diner".into();
        s.transport = "udp".into();
        s.dialect = "v2".into();
        s.scenario = "lunch rush <1000 bots>".into();
        s.scenario_file = "scenarios/lunch-rush.yaml".into();
        s.target = "127.0.0.1:7777".into();
        s.started_at = "2025-05-01T12:00:00Z".into();
        s.duration_s = 20.0;
        s.seed = 42;
        s.bots = BotCounts {
            planned: 1000,
            connected: 996,
            failed: 4,
            ..BotCounts::default()
        };
        s.rtt_us = hist(300, 1_900, 31_000, 950_000);
        s.handshake_us = hist(1_200, 8_500, 40_000, 1_000);
        s.snapshot_interarrival_us = hist(33_300, 36_100, 80_000, 480_000);
        s.generator = Generator {
            send_lateness_us: hist(12, 180, 3_900, 960_000),
            inputs_skipped: 0,
            workers: 2,
            send_errors: [("socket buffer full".to_string(), 12u64)].into(),
            ..Generator::default()
        };
        s.loss = Loss {
            downstream: Some(LossSummary {
                expected: 480_000,
                received: 479_100,
                rate: 900.0 / 480_000.0,
            }),
            upstream: None,
        };
        s.loss_method = LossMethod {
            downstream: "gaps in snapshot sequence numbers".into(),
            upstream: "the server does not acknowledge inputs".into(),
        };
        s.bandwidth = Bandwidth {
            up_bytes: sum(|p| p.bytes_up),
            down_bytes: sum(|p| p.bytes_down),
            up_packets: sum(|p| p.packets_up),
            down_packets: sum(|p| p.packets_down),
            ..Bandwidth::default()
        };
        s.inputs_sent = sum(|p| p.inputs_sent);
        s.snapshots_applied = sum(|p| p.snapshots_applied);
        s.snapshot_rate = crate::metrics::snapshot_rate::SnapshotRate::of(&intervals);
        s.errors = Errors {
            decode: [("snapshot.truncated".to_string(), 3u64)].into(),
            connect: [("timeout".to_string(), 4u64)].into(),
        };
        s.protocol_metrics = pm;
        s.thresholds = vec![
            ThresholdResult {
                metric: "rtt_us.p99".into(),
                condition: "rtt p99 < 50ms".into(),
                observed: Some(1_900.0),
                ok: true,
                default: false,
                unmeasurable: None,
                skipped: false,
            },
            ThresholdResult {
                metric: "loss.downstream.rate".into(),
                condition: "loss down < 1%".into(),
                observed: Some(900.0 / 480_000.0),
                ok: true,
                default: false,
                unmeasurable: None,
                skipped: false,
            },
            ThresholdResult {
                metric: "generator.send_lateness_us.p99".into(),
                condition: "lateness p99 < 100us".into(),
                observed: Some(180.0),
                ok: false,
                default: false,
                unmeasurable: None,
                skipped: false,
            },
        ];
        s.verdict = "fail".into();
        s.intervals = intervals;
        s
    }

    /// How a made-up protocol describes one of its metrics.
    fn info(label: &str, about: &str, unit: &str, scale: u32, display: Display) -> MetricInfo {
        MetricInfo {
            label: label.into(),
            about: about.into(),
            unit: unit.into(),
            scale,
            display,
            per_bot_minute: false,
        }
    }

    /// The HTML of one section, from its heading to its end.
    fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
        let start = doc
            .find(&format!("<h2>{heading}</h2>"))
            .unwrap_or_else(|| panic!("no section {heading}"));
        let end = doc[start..].find("</section>").expect("section is closed");
        &doc[start..start + end]
    }

    /// A summary whose protocol declared a time card, a scaled card in its own unit, a
    /// counter card with a per-bot-minute rate, and a table-only counter.
    fn with_described_metrics() -> Summary {
        let mut s = sample_summary();
        let m = &mut s.protocol_metrics;
        m.insert("engine_rtt_us".into(), json(hist(1000, 4000, 4000, 10)));
        m.insert("drift".into(), json(hist(1, 250, 250, 10)));
        m.insert("rollbacks".into(), Value::from(42u64));
        m.insert("rollbacks_per_bot_minute".into(), Value::from(1.5));
        m.insert("idle_us".into(), json(HistSummary::default()));
        let i = &mut s.protocol_metric_info;
        i.insert(
            "engine_rtt_us".into(),
            info("Engine RTT", "the engine estimate", "us", 1, Display::Card),
        );
        i.insert(
            "drift".into(),
            info(
                "Drift",
                "model against server",
                "tiles",
                1000,
                Display::Card,
            ),
        );
        let mut rollbacks = info("Rollbacks", "states replayed", "count", 1, Display::Card);
        rollbacks.per_bot_minute = true;
        i.insert("rollbacks".into(), rollbacks);
        i.insert(
            "resyncs".into(),
            info("Resyncs", "full resends", "count", 1, Display::Table),
        );
        // Described but not recorded in this run, or recorded without samples: no card.
        i.insert(
            "absent_us".into(),
            info("Absent", "", "us", 1, Display::Card),
        );
        i.insert("idle_us".into(), info("Idle", "", "us", 1, Display::Card));
        s
    }

    /// Highlight cards are exactly the metrics the protocol marked card or chart and the run
    /// recorded: histograms show p50 large and p99 with the description below, in the
    /// metric's unit and scale; counters show the count and their rate per bot-minute.
    #[test]
    fn protocol_highlights_come_from_metric_info() {
        let doc = render(&with_described_metrics());
        let h = section(&doc, "Protocol highlights");
        assert!(h.contains(
            "<div class=\"k\">Engine RTT</div><div class=\"v\">1.00 ms</div>\
             <div class=\"s\">p50 · p99 4.00 ms · the engine estimate</div>"
        ));
        assert!(h.contains(
            "<div class=\"k\">Drift</div><div class=\"v\">0.001 tiles</div>\
             <div class=\"s\">p50 · p99 0.250 tiles · model against server</div>"
        ));
        assert!(h.contains(
            "<div class=\"k\">Rollbacks</div><div class=\"v\">42</div>\
             <div class=\"s\">1.5 per bot-minute · states replayed</div>"
        ));
        assert_eq!(h.matches("class=\"card\"").count(), 3, "{h}");
        for absent in ["Resyncs", "Absent", "Idle", "kitchen_us"] {
            assert!(!h.contains(absent), "{absent} has no card");
        }
    }

    /// The RTT cards and charts say where the samples come from when the summary names it,
    /// and nothing when it does not.
    #[test]
    fn rtt_figures_name_their_source() {
        let mut s = sample_summary();
        s.rtt_source = Some("enet_acks".into());
        let doc = render(&s);
        let cards = section(&doc, "Key figures");
        assert!(
            cards.contains("<div class=\"s\">950,000 samples from ENet acks</div>"),
            "{cards}"
        );
        assert!(doc.contains("Round-trip time (from ENet acks)"));
        s.rtt_source = Some("protocol_ping".into());
        let doc = render(&s);
        assert!(doc.contains("950,000 samples from the bots"));
        s.rtt_source = None;
        let doc = render(&s);
        assert!(!doc.contains("samples from"));
        assert!(!doc.contains("Round-trip time ("));
    }

    /// Metric keys alone make no cards: without a description the report does not know a
    /// metric is worth highlighting, and everything stays in the tables.
    #[test]
    fn no_highlights_without_metric_info() {
        let mut s = with_described_metrics();
        s.protocol_metric_info.clear();
        let doc = render(&s);
        assert!(!doc.contains("Protocol highlights"));
        assert!(doc.contains("<code>engine_rtt_us</code>"));
        assert!(doc.contains("<code>rollbacks</code></td><td class=\"num\">42</td>"));
    }

    /// A `chart` metric gets a wide card with its percentiles drawn, labelled in its unit;
    /// its description, which is text from summary.json, is escaped inside the SVG too.
    #[test]
    fn chart_metrics_draw_their_percentiles() {
        let mut s = with_described_metrics();
        s.protocol_metric_info.insert(
            "engine_rtt_us".into(),
            info("Lag <&> \"x\"", "", "us", 1, Display::Chart),
        );
        let doc = render(&s);
        let h = section(&doc, "Protocol highlights");
        let wide = h.find("<div class=\"card wide\">").expect("a wide card");
        let card = &h[wide..];
        assert!(card.contains("<svg class=\"pc\""));
        assert!(card.contains("aria-label=\"Lag &lt;&amp;&gt; &quot;x&quot;: percentiles\""));
        assert!(card.contains(">4.00 ms</text>") && card.contains(">p99.9</text>"));
        assert!(!doc.contains("<&>"));
        // The wide card comes after the plain ones, so the grid has no holes.
        assert!(h.rfind("class=\"card\"").expect("plain cards") < wide);
    }

    /// In the tables, a described metric is titled by its label and description beside its
    /// key, and printed in its unit; undescribed metrics keep their bare key.
    #[test]
    fn described_metrics_are_titled_in_tables() {
        let doc = render(&with_described_metrics());
        let t = section(&doc, "Protocol metrics");
        assert!(t.contains(
            "<td>Drift <code>drift</code><div class=\"about\">model against server</div></td>\
             <td class=\"num\">10</td><td class=\"num\">0.000 tiles</td>"
        ));
        assert!(t.contains(
            "<td>Resyncs <code>resyncs</code><div class=\"about\">full resends</div></td>\
             <td class=\"num\">3</td>"
        ));
        assert!(t.contains("<td><code>kitchen_us</code></td>"));
        // Cards show p50 and p99 only; the full distribution stays in the table.
        assert!(t.contains("Engine RTT <code>engine_rtt_us</code>"));
    }

    /// Without histograms.hlog the distributions come from the summary's seven statistics
    /// (and say so); the phases chart stacks the interval counts; a p99 threshold is drawn.
    #[test]
    fn distributions_phases_and_threshold_lines_from_the_summary_alone() {
        let doc = render(&sample_summary());
        let over = section(&doc, "Over time");
        assert!(over.contains("data-chart=\"phases\""));
        assert!(over.contains("data-series=\"in_game\""));
        assert!(over.contains("data-series=\"protocol_handshake\""));
        let lat = section(&doc, "Latency distribution");
        for id in ["dist-rtt_us", "dist-handshake_us", "dist-kitchen_us"] {
            assert!(lat.contains(&format!("data-chart=\"{id}\"")), "{id}");
        }
        assert!(lat.contains("950,000 samples, from summary.json&#39;s percentiles"));
        let bw = section(&doc, "Bandwidth distribution");
        assert!(bw.contains("No per-bot bandwidth"), "{bw}");
        // The sample's `rtt p99 < 50ms` threshold: a line on the RTT charts.
        assert!(doc.matches("data-mark=\"threshold p99 &lt;\"").count() >= 2);
    }

    fn threshold(condition: &str, metric: &str, observed: f64, ok: bool) -> ThresholdResult {
        ThresholdResult {
            metric: metric.into(),
            condition: condition.into(),
            observed: Some(observed),
            ok,
            default: false,
            unmeasurable: None,
            skipped: false,
        }
    }

    /// The markup of chart `id` in `doc`, from its figure to the figure's end.
    fn figure<'a>(doc: &'a str, id: &str) -> &'a str {
        let at = doc
            .find(&format!("data-chart=\"{id}\""))
            .unwrap_or_else(|| panic!("no chart {id}"));
        &doc[at..at + doc[at..].find("</figure>").expect("figure closed")]
    }

    /// The whole run's charts draw the whole run's thresholds only; a group's charts draw
    /// that group's (issue 37: a group's 1 % line was crossed by the whole run's 1.03 %).
    #[test]
    fn each_chart_draws_only_its_own_thresholds() {
        let mut s = sample_summary();
        s.thresholds = vec![
            threshold("rtt p99 < 50ms", "rtt_us.p99", 1_900.0, true),
            threshold("downstream_loss < 5%", "loss.downstream.rate", 0.002, true),
            threshold(
                "rtt{group=mobile} p99 < 30ms",
                "groups.mobile.rtt_us.p99",
                1_900.0,
                true,
            ),
            threshold(
                "downstream_loss{group=mobile} < 1%",
                "groups.mobile.loss.downstream.rate",
                0.002,
                true,
            ),
            threshold(
                "downstream_loss{group=wifi} < 8%",
                "groups.wifi.loss.downstream.rate",
                0.002,
                true,
            ),
        ];
        let point = |t: f64| crate::metrics::groups::GroupPoint {
            t,
            bots_connected: 5,
            rtt_p50_us: Some(1_000),
            rtt_p99_us: Some(2_000),
            loss_down: crate::metrics::groups::SecondLoss {
                expected: 100,
                received: 99,
                rate: Some(0.01),
            },
            ..Default::default()
        };
        for name in ["mobile", "wifi"] {
            s.groups.0.push(crate::report::summary::GroupSummary {
                name: name.into(),
                size: "share 50%".into(),
                intervals: vec![point(1.0), point(2.0)],
                ..Default::default()
            });
        }
        let doc = render(&s);
        let lines = |id: &str| -> Vec<String> {
            let f = figure(&doc, id);
            f.match_indices("class=\"thr\"")
                .map(|(at, _)| {
                    let tail = &f[at..];
                    let text = &tail[tail.find('>').expect("closed") + 1..];
                    text[..text.find('<').expect("text ends")].to_string()
                })
                .filter(|t| !t.is_empty())
                .collect()
        };
        assert_eq!(
            lines("over-time-rtt_us"),
            ["▲ threshold p99 &lt; 50.00 ms (above the axis)"]
        );
        assert_eq!(lines("loss"), ["threshold &lt; 5.00%"]);
        assert_eq!(lines("dist-rtt_us").len(), 1, "{:?}", lines("dist-rtt_us"));
        assert_eq!(
            lines("group-rtt-mobile"),
            ["▲ threshold p99 &lt; 30.00 ms (above the axis)"]
        );
        assert_eq!(lines("group-loss-mobile"), ["threshold &lt; 1.00%"]);
        assert_eq!(
            lines("group-loss-wifi"),
            ["▲ threshold &lt; 8.00% (above the axis)"]
        );
    }

    /// A failing threshold's row is tinted (the docs say failing rows are red); a passing or
    /// skipped one is not.
    #[test]
    fn a_failing_threshold_row_is_tinted() {
        let doc = render(&sample_summary());
        let t = section(&doc, "Thresholds");
        assert_eq!(t.matches("<tr class=\"failed\">").count(), 1, "{t}");
        assert!(
            t.contains("<tr class=\"failed\"><td><code>generator.send_lateness_us.p99</code></td>")
        );
        let css = include_str!("../../../templates/report/report.css");
        assert!(
            css.contains("tr.failed td"),
            "the style sheet tints the row"
        );
    }

    /// The banner's reasons print what the console writes between backticks as `<code>`,
    /// escaped, and no backtick.
    #[test]
    fn why_bullets_render_code_spans() {
        let mut s = sample_summary();
        s.thresholds[2].condition = "lateness p99 < 100us & <b>".into();
        let doc = render(&s);
        let banner = &doc[doc.find("role=\"alert\"").expect("banner")..];
        let banner = &banner[..banner.find("</div>").expect("closed")];
        assert!(
            banner.contains("<li><code>lateness p99 &#60; 100us &#38; &#60;b&#62;</code> failed: observed 180 µs.</li>"),
            "{banner}"
        );
        assert!(!banner.contains('`'), "{banner}");
        assert_eq!(
            view::code_spans("a `b` c `d"),
            [
                view::Run {
                    code: false,
                    text: "a ".into()
                },
                view::Run {
                    code: true,
                    text: "b".into()
                },
                view::Run {
                    code: false,
                    text: " c `d".into()
                },
            ]
        );
        assert_eq!(view::code_spans("``").len(), 0);
    }

    /// An interrupted run says so beside the verdict, in capitals, and in the page title.
    #[test]
    fn an_interrupted_run_says_so_beside_the_verdict() {
        let mut s = sample_summary();
        assert!(!render(&s).contains("INTERRUPTED"));
        s.interrupted = true;
        let doc = render(&s);
        let header =
            &doc[doc.find("<header").expect("header")..doc.find("</header>").expect("end")];
        assert!(header.contains("<div class=\"verdict fail\" role=\"status\">FAIL</div>"));
        assert!(
            header.contains("<div class=\"verdict interrupted\" role=\"status\" title=\"cut short after 20.0 s\">INTERRUPTED</div>"),
            "{header}"
        );
        assert!(doc.contains(
            "<title>lunch rush &#60;1000 bots&#62; · FAIL · INTERRUPTED · tickswarm</title>"
        ));
    }

    /// Injected network conditions are named in the header: the whole run's, or each
    /// group's; nothing on the real link.
    #[test]
    fn the_header_names_injected_network_conditions() {
        let mut s = sample_summary();
        // The run's label (`run --label`), when it has one, beside its other facts.
        assert!(!render(&s).contains("<dt>Label</dt>"));
        s.label = Some("build <1234>".into());
        let doc = render(&s);
        let header = &doc[..doc.find("</header>").expect("header")];
        assert!(
            header.contains("<dt>Label</dt><dd>build &#60;1234&#62;</dd>"),
            "{header}"
        );
        s.label = None;
        assert!(!render(&s).contains("Simulated network"));
        s.network = Some(serde_json::json!({"latency": "75ms", "loss": "2%"}));
        let doc = render(&s);
        let header = &doc[..doc.find("</header>").expect("header")];
        assert!(header.contains("<strong>Simulated network:</strong>"));
        assert!(
            header.contains("<li>all bots: <code>latency: 75ms, loss: 2%</code></li>"),
            "{header}"
        );
        s.network = None;
        s.groups.0.push(crate::report::summary::GroupSummary {
            name: "wifi".into(),
            network: Some(serde_json::json!({"latency": "4ms"})),
            ..Default::default()
        });
        s.groups.0.push(crate::report::summary::GroupSummary {
            name: "lan".into(),
            ..Default::default()
        });
        let doc = render(&s);
        let header = &doc[..doc.find("</header>").expect("header")];
        assert!(
            header.contains("<li>group wifi: <code>latency: 4ms</code></li>"),
            "{header}"
        );
        assert!(
            header.contains("<li>group lan: <code>real link</code></li>"),
            "{header}"
        );
    }

    /// The bandwidth cards show a rate over the run, the total beside it.
    #[test]
    fn bandwidth_cards_show_a_rate_and_the_total() {
        let s = sample_summary();
        let doc = render(&s);
        let cards = section(&doc, "Key figures");
        let total = crate::report::format::fmt_bytes(s.bandwidth.up_bytes as f64);
        let rate = crate::report::format::fmt_bytes(s.bandwidth.up_bytes as f64 / 20.0);
        assert!(
            cards.contains(&format!(
                "<div class=\"k\">Bandwidth up</div><div class=\"v\">{rate}/s</div><div class=\"s\">{total} in total over 20.0 s · "
            )),
            "{cards}"
        );
    }

    /// A reference server's scraped sessions, bytes, datagrams and errors are charted, each
    /// direction a line; its tick time reads in ms like the rest of the report.
    #[test]
    fn server_counts_are_charted() {
        use crate::metrics::server_series::{
            Endpoint, Kind, Point, Series as Scraped, ServerMetrics,
        };
        let series = |kind: Kind, v: f64| Scraped {
            kind,
            points: (1..=3)
                .map(|t| Point {
                    t: f64::from(t),
                    value: Some(v * f64::from(t)),
                    ..Default::default()
                })
                .collect(),
            min: None,
            mean: None,
            max: None,
            buckets: Vec::new(),
            p50: None,
            p99: None,
        };
        let sm: BTreeMap<String, Scraped> = [
            ("tickswarm_server_sessions", Kind::Gauge, 10.0),
            (
                "tickswarm_server_bytes_total{direction=\"in\"}",
                Kind::Counter,
                5_000.0,
            ),
            (
                "tickswarm_server_bytes_total{direction=\"out\"}",
                Kind::Counter,
                90_000.0,
            ),
            (
                "tickswarm_server_datagrams_total{direction=\"in\"}",
                Kind::Counter,
                300.0,
            ),
            (
                "tickswarm_server_datagrams_total{direction=\"out\"}",
                Kind::Counter,
                600.0,
            ),
            ("tickswarm_server_send_errors_total", Kind::Counter, 0.0),
        ]
        .into_iter()
        .map(|(name, kind, v)| (name.to_string(), series(kind, v)))
        .collect();
        let mut s = sample_summary();
        s.server_metrics = Some(ServerMetrics {
            endpoints: vec![Endpoint {
                url: "http://127.0.0.1:9/metrics".into(),
                interval_s: 1.0,
                scrapes: 4,
                failed: Default::default(),
                series_left_out: 0,
                dropped: Default::default(),
                series: sm,
            }],
            figures: BTreeMap::new(),
        });
        s.thresholds.push(threshold(
            "server.tick_seconds p99 < 5ms",
            "server_metrics.figures.tick_seconds.p99_us",
            0.000_999_999_9 * 1e6,
            true,
        ));
        let doc = render(&s);
        for (id, lines) in [
            ("server-0-sessions", &["sessions open"][..]),
            ("server-0-bytes", &["bytes in", "bytes out"]),
            ("server-0-datagrams", &["datagrams in", "datagrams out"]),
            ("server-0-errors", &["send errors"]),
        ] {
            let f = figure(&doc, id);
            for l in lines {
                assert!(f.contains(&format!("data-series=\"{l}\"")), "{id}: no {l}");
            }
            assert!(
                f.contains("data-overlay=\"active-bots\""),
                "{id}: bots in game"
            );
        }
        assert!(figure(&doc, "server-0-bytes").contains(" kB/s</text>"));
        // The values drawn are the scraped ones (5,000 and 90,000 B/s × t, t = 1..3 s): the
        // out line's three points fix the axis (its zero and its pixels per 90,000), and the
        // in line sits at 5,000 / 90,000 of the out line's height at each second.
        let bytes = figure(&doc, "server-0-bytes");
        let (out, inn) = (polyline(bytes, "bytes out"), polyline(bytes, "bytes in"));
        assert_eq!((out.len(), inn.len()), (3, 3));
        let unit = out[0].1 - out[1].1;
        let zero = out[0].1 + unit;
        assert!((zero - out[2].1 - 3.0 * unit).abs() < 0.2, "{out:?}");
        for (k, p) in inn.iter().enumerate() {
            let want = zero - (k + 1) as f64 * unit * 5_000.0 / 90_000.0;
            assert!(
                (p.1 - want).abs() < 0.2,
                "second {}: {p:?} vs y {want}",
                k + 1
            );
        }
        let t = section(&doc, "Thresholds");
        assert!(t.contains("<td class=\"num\">1.00 ms</td>"), "{t}");
        assert!(!doc.contains("1000 µs"));
    }

    /// The loss chart says "not measurable" only when the run could not measure loss; a
    /// protocol that measures it in a run where no bot got in has no data, and names its
    /// method.
    #[test]
    fn the_loss_caption_follows_what_the_run_could_measure() {
        let mut s = empty_summary();
        s.loss_method.downstream = "per-connection header seq gaps".into();
        assert_eq!(
            timeline::loss_caption(&s),
            "No downstream loss was measured: nothing the server sent was expected (no bot \
             was in the game). Measured by: per-connection header seq gaps"
        );
        s.loss_method.downstream = "not measurable: the protocol numbers nothing".into();
        assert_eq!(
            timeline::loss_caption(&s),
            "Downstream loss is not measurable in this run: the protocol numbers nothing"
        );
        s.loss_method.downstream = "tick gaps".into();
        s.loss.downstream = Some(LossSummary {
            expected: 10,
            received: 10,
            rate: 0.0,
        });
        assert_eq!(timeline::loss_caption(&s), "Measured by: tick gaps");
        s.loss_method.downstream.clear();
        assert_eq!(
            timeline::loss_caption(&s),
            "Fraction of expected server datagrams never received."
        );
    }

    /// A distribution says it was drawn from histograms.hlog when the log was read, even if
    /// one of its curves had no sample at all (the unreachable run's message sizes: up in
    /// the log, nothing down); from the summary only when it was.
    #[test]
    fn the_distribution_names_its_source_truly() {
        assert_eq!(timeline::hist_source(true, false), "from histograms.hlog");
        assert!(timeline::hist_source(false, false).contains("no histograms.hlog was read"));
        assert!(timeline::hist_source(true, true).contains("holds none of these samples"));
        let mut s = empty_summary();
        s.bandwidth.packet_size_up_bytes = hist(24, 24, 24, 5);
        let mut total = crate::metrics::new_histogram();
        total.record(24).expect("record");
        let mut log = HistLog::default();
        log.tags.insert(
            "packet_size_up_bytes".into(),
            hists::TagHists {
                total,
                by_second: Vec::new(),
            },
        );
        let doc = render_with(&s, Some(&log));
        let f = figure(&doc, "dist-packet-size");
        assert!(f.contains("1 samples, from histograms.hlog."), "{f}");
        assert!(!doc.contains("was not beside"));
        let doc = render(&s);
        assert!(figure(&doc, "dist-packet-size").contains("no histograms.hlog was read"));
    }

    #[test]
    fn self_contained_no_external_references() {
        let doc = render(&sample_summary());
        assert!(doc.starts_with("<!DOCTYPE html>"));
        for bad in [
            "http://", "https://", "src=", "href=", "url(", "@import", "<script", "<link",
        ] {
            assert!(!doc.contains(bad), "document contains {bad:?}");
        }
    }

    #[test]
    fn text_from_summary_is_escaped() {
        let mut s = sample_summary();
        s.scenario = "<script>alert('x')</script> & co".into();
        s.target = "\"><img src=x>".into();
        s.protocol_metrics
            .insert("<b>bold</b>".into(), Value::from("<i>v</i>"));
        let doc = render(&s);
        assert!(
            doc.contains("<h1>&#60;script&#62;alert(&#39;x&#39;)&#60;/script&#62; &#38; co</h1>")
        );
        assert!(!doc.contains("<script"));
        assert!(!doc.contains("<img"));
        assert!(doc.contains("&#34;&#62;&#60;img src=x&#62;"));
        assert!(doc.contains("&#60;b&#62;bold&#60;/b&#62;"));
        assert!(doc.contains("&#60;i&#62;v&#60;/i&#62;"));
    }

    #[test]
    fn verdict_shown() {
        let mut s = sample_summary();
        s.verdict = "pass".into();
        assert!(render(&s).contains("<div class=\"verdict pass\" role=\"status\">PASS</div>"));
        s.verdict = "fail".into();
        s.interrupted = true;
        let doc = render(&s);
        assert!(doc.contains("<div class=\"verdict fail\" role=\"status\">FAIL</div>"));
        assert!(doc.contains("Interrupted."));
    }

    #[test]
    fn thresholds_formatted_in_metric_units() {
        let doc = render(&sample_summary());
        assert!(doc.contains("<td class=\"num\">1.90 ms</td>"));
        assert!(doc.contains("<td class=\"num\">0.19%</td>"));
        assert!(doc.contains("<td class=\"num\">180 µs</td>"));
        assert!(doc.contains("✓") && doc.contains("✗"));
    }

    #[test]
    fn protocol_metrics_split_into_histograms_and_counters() {
        let doc = render(&sample_summary());
        assert!(doc.contains("<code>tables.wait_us</code>"));
        assert!(doc.contains("<code>kitchen_us</code>"));
        assert!(doc.contains("<code>tables.occupied</code></td><td class=\"num\">42</td>"));
        assert!(doc.contains("<code>orders_placed</code></td><td class=\"num\">152,340</td>"));
        assert!(doc.contains("<td class=\"num\">0.125</td>"));
    }

    /// The generator panel shows how hard the generator works to send: system calls per
    /// second and the largest batch each second, the path and the mean batch in words; a run
    /// whose transport does not count its sends has no such figure.
    /// The generator-health caption states the workers' CPU and its cost per datagram each
    /// way, when the run measured it, and says nothing of it otherwise.
    #[test]
    fn the_generator_panel_states_the_cpu_per_datagram() {
        let mut s = sample_summary();
        for p in &mut s.intervals {
            p.generator = Some(crate::metrics::run::GeneratorHealth {
                worker_cpu: vec![Some(0.5)],
                ..Default::default()
            });
        }
        assert!(!render(&s).contains("per datagram sent"));
        s.generator.set_cpu(Some(2_500_000_000), 1_000_000, 500_000);
        let html = render(&s);
        assert!(
            html.contains("2.50 s of CPU over the run: 2500 ns per datagram sent, 5000 ns per"),
            "no CPU per datagram in the generator caption"
        );
    }

    #[test]
    fn the_generator_panel_shows_send_calls_and_batch_sizes() {
        let mut s = sample_summary();
        assert!(!render(&s).contains("generator-send-io"));
        for p in &mut s.intervals {
            p.generator = Some(crate::metrics::run::GeneratorHealth {
                worker_cpu: vec![Some(0.5)],
                send_syscalls: Some(p.packets_up.div_ceil(100)),
                send_batch_max: Some(128),
                ..Default::default()
            });
        }
        s.generator.send_io = Some(crate::report::summary::SendIoSummary {
            path: "io_uring".into(),
            workers_uring: 2,
            workers_plain: 0,
            syscalls: 9_000,
            datagrams: 900_000,
            syscalls_per_s: 450.0,
            batch_mean: Some(100.0),
            batch_max: 128,
        });
        let doc = render(&s);
        assert!(doc.contains("generator-send-io"));
        assert!(doc.contains("send system calls per second"));
        assert!(doc.contains("Send path: io_uring"));
        assert!(doc.contains("100.0 per call on average, 128 at most; 450 calls per second"));
    }

    #[test]
    fn empty_data_renders_without_nan() {
        let doc = render(&empty_summary());
        assert!(doc.contains("No per-second intervals"));
        assert!(doc.contains("no data"));
        assert!(doc.contains("NO VERDICT"));
        assert!(!doc.contains("NaN") && !doc.contains("inf"));
        assert!(!doc.contains("<polyline"));
    }

    #[test]
    fn single_point_and_flat_zero_series() {
        let mut s = empty_summary();
        s.intervals = vec![IntervalPoint {
            t: 1.0,
            ..Default::default()
        }];
        let doc = render(&s);
        assert!(!doc.contains("NaN") && !doc.contains("inf"));
        let pts = polyline(&doc, "bots connected");
        assert_eq!(pts, vec![(ML + PW, MT + PH)]);
        // Odd inputs: repeated timestamps, non-finite values.
        s.intervals = vec![
            IntervalPoint {
                t: 0.0,
                loss_down_rate: Some(f64::NAN),
                ..Default::default()
            },
            IntervalPoint {
                t: 0.0,
                loss_down_rate: Some(f64::INFINITY),
                ..Default::default()
            },
        ];
        let doc = render(&s);
        assert!(!doc.contains("NaN") && !doc.contains("inf"));
    }

    #[test]
    fn polyline_maps_data_onto_the_axes() {
        let mut s = empty_summary();
        s.intervals = [0u64, 500, 1000]
            .iter()
            .enumerate()
            .map(|(i, &b)| IntervalPoint {
                t: (i + 1) as f64 * 2.0,
                bots_connected: b,
                ..Default::default()
            })
            .collect();
        let doc = render(&s);
        // y axis 0..1000 bots; x axis 0..6 s.
        let pts = polyline(&doc, "bots connected");
        let want = [
            (ML + PW / 3.0, MT + PH),
            (ML + 2.0 * PW / 3.0, MT + PH / 2.0),
            (ML + PW, MT),
        ];
        assert_eq!(pts.len(), want.len());
        for (got, want) in pts.iter().zip(want) {
            assert!((got.0 - want.0).abs() < 0.06, "{got:?} vs {want:?}");
            assert!((got.1 - want.1).abs() < 0.06, "{got:?} vs {want:?}");
        }
        assert!(doc.contains(">1,000</text>"));
    }

    /// The run's last, partial interval holds what was sent at the stop, in no time: it is
    /// neither drawn as a rate (1,100 bytes "per second" made a false plunge at the end) nor
    /// counted as a second of connected bots (which made the per-bot rate a third low here).
    #[test]
    fn a_partial_last_interval_is_not_a_second() {
        let mut s = empty_summary();
        let whole = |t: f64| IntervalPoint {
            t,
            bots_connected: 10,
            bytes_up: 9_600,
            ..Default::default()
        };
        s.intervals = vec![
            whole(1.0),
            whole(2.0),
            IntervalPoint {
                t: 2.0,
                bots_connected: 10,
                bytes_up: 1_100,
                partial: true,
                ..Default::default()
            },
        ];
        s.bots.connected = 10;
        s.duration_s = 2.0;
        s.bandwidth.up_bytes = 9_600 * 2 + 1_100;
        s.bandwidth.up_packets = 1_300;
        let doc = render(&s);
        // Both whole seconds at 9.6 kB/s, level; nothing at the stop.
        let pts = polyline(&doc, "up (bots → server)");
        assert_eq!(pts.len(), 2, "{pts:?}");
        assert!((pts[0].1 - pts[1].1).abs() < 0.01, "{pts:?}");
        // 20,300 bytes over 20 bot-seconds (not 30).
        let per_bot = format!(
            "≈ {}/s per bot",
            crate::report::format::fmt_bytes(20_300.0 / 20.0)
        );
        assert!(doc.contains(&per_bot), "no {per_bot:?}");
    }

    /// A two-hour run stays a small file (charts are thinned per pixel column), and the sample
    /// reports render. Set `TICKSWARM_REPORT_PREVIEW=/tmp/report.html` to keep them for a
    /// visual check in a browser.
    #[test]
    fn previews_render_and_long_runs_stay_small() {
        let dir = tempfile::tempdir().unwrap();
        let keep = std::env::var("TICKSWARM_REPORT_PREVIEW").ok();
        let path = keep.unwrap_or_else(|| dir.path().join("report.html").display().to_string());
        std::fs::write(&path, render(&sample_summary())).unwrap();
        std::fs::write(
            path.replace(".html", "-empty.html"),
            render(&empty_summary()),
        )
        .unwrap();
        // Two hours of seconds: minute ticks and decimated lines.
        let mut long = sample_summary();
        long.duration_s = 7200.0;
        long.intervals = (1..=7200u64)
            .map(|i| IntervalPoint {
                t: i as f64,
                bots_connected: (i * 2).min(5000),
                rtt_p50_us: Some(300 + (i * 7919 % 97)),
                rtt_p99_us: Some(if i % 1800 == 0 {
                    40_000
                } else {
                    900 + (i * 104_729 % 400)
                }),
                loss_down_rate: Some((i % 13) as f64 * 0.0001),
                bytes_up: (i * 2).min(5000) * 2_500,
                bytes_down: (i * 2).min(5000) * 12_000,
                lateness_p99_us: Some(50 + i % 40),
                ..Default::default()
            })
            .collect();
        let long_html = render(&long);
        assert!(
            long_html.len() < 200_000,
            "2 h report is {} bytes",
            long_html.len()
        );
        std::fs::write(path.replace(".html", "-long.html"), long_html).unwrap();
    }
}
