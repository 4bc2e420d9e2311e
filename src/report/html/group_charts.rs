//! The per-group charts: each group's round-trip time and loss second by second
//! (`groups.NAME.intervals`), on the whole run's time axis, with the conditions the group's
//! simulated link was given drawn across them: the injected latency both ways under the RTT,
//! the injected loss rate beside the measured loss and the link's own drops. So "mobile sees
//! 9 % loss: 5 % from the link, 4 % from the server" is read off one chart, second by second.

use super::chart::Figure;
use super::chart::{line_chart_with, Expected, Mark, Opts, Overlay, Series, PURPLE, RED};
use super::timeline::{clip, op_text, rtt_series};
use crate::metrics::groups::GroupPoint;
use crate::metrics::{Metric, Threshold};
use crate::netsim::{Conditions, NetworkConditions};
use crate::report::format::Unit;
use crate::report::groups::injected;
use crate::report::summary::GroupSummary;
use crate::report::summary::Summary;

/// The link's own drops: a lighter red beside the measured loss's.
const LINK_DOWN: &str = "#f87171";
/// The link's upstream drops, beside the measured upstream loss (purple).
const LINK_UP: &str = "#c4b5fd";

/// Two charts per group that has seconds: RTT p50/p99 and loss per second. Empty without
/// groups (or for a summary written before groups had seconds).
pub(super) fn figures(s: &Summary) -> Vec<Figure> {
    s.groups
        .0
        .iter()
        .filter(|g| !g.intervals.is_empty())
        .flat_map(|g| {
            let link = link_of(g);
            [
                rtt_figure(s, g, link.as_ref()),
                loss_figure(s, g, link.as_ref()),
            ]
        })
        .collect()
}

/// Each direction's injected conditions, read back from the group's `network` as written
/// (summary.json keeps them so, and a report may be drawn from a file); `None` on the real
/// link, or conditions this version cannot read.
fn link_of(g: &GroupSummary) -> Option<(Conditions, Conditions)> {
    use serde::Deserialize as _;
    let n = NetworkConditions::deserialize(g.network.as_ref()?).ok()?;
    Some(n.directions())
}

/// The group's bots in play, on the right axis: it also spans the chart over the whole run's
/// seconds (a group has a point every second the run has), so its charts share the run's
/// time axis.
fn bots(g: &GroupSummary) -> Overlay {
    Overlay {
        name: "bots (right axis)".into(),
        points: g
            .intervals
            .iter()
            .map(|p| (p.t, p.bots_connected as f64))
            .collect(),
    }
}

/// The scenario's thresholds that name this group and `want` the metric.
fn marks(s: &Summary, g: &GroupSummary, want: impl Fn(&Metric) -> bool) -> Vec<Mark> {
    s.thresholds
        .iter()
        .filter_map(|t| Threshold::parse(&t.condition).ok())
        .filter(|t| t.group.as_deref() == Some(g.name.as_str()) && want(&t.metric))
        .map(|t| Mark {
            label: match t.metric {
                Metric::Time(_, stat) => format!("threshold {} {}", stat.name(), op_text(&t)),
                _ => format!("threshold {}", op_text(&t)),
            },
            value: t.limit,
        })
        .collect()
}

fn known(g: &GroupSummary, f: impl Fn(&GroupPoint) -> Option<f64>) -> Vec<(f64, f64)> {
    g.intervals
        .iter()
        .filter_map(|p| f(p).map(|v| (p.t, v)))
        .collect()
}

fn rtt_figure(s: &Summary, g: &GroupSummary, link: Option<&(Conditions, Conditions)>) -> Figure {
    let p50 = known(g, |p| p.rtt_p50_us.map(|v| v as f64));
    let p99 = known(g, |p| p.rtt_p99_us.map(|v| v as f64));
    let top = |v: &[(f64, f64)]| v.iter().map(|p| p.1).fold(0.0, f64::max);
    // The fixed latency both ways: a floor no round trip goes under (jitter only adds).
    let floor_us = link
        .map(|(up, down)| {
            let l = |c: &Conditions| c.latency.map_or(0.0, |d| d.0.as_secs_f64() * 1e6);
            l(up) + l(down)
        })
        .filter(|v| *v > 0.0);
    let opts = Opts {
        clip_at: clip(top(&p50) * 2.0, top(&p99)),
        marks: marks(
            s,
            g,
            |m| matches!(m, Metric::Time(t, _) if t.hlog_tag() == "rtt_us"),
        ),
        expected: floor_us
            .map(|v| Expected {
                id: "injected-latency",
                label: "injected latency, up + down".into(),
                value: v,
            })
            .into_iter()
            .collect(),
        overlay: Some(bots(g)),
    };
    let title = format!("{}: round-trip time", g.name);
    let svg = line_chart_with(&title, &rtt_series(p50, p99), Unit::Micros, &opts);
    Figure {
        id: format!("group-rtt-{}", g.name),
        title,
        svg,
        caption: format!(
            "Per-second RTT percentiles of the group's bots. Injected: {}.{}",
            injected(g.network.as_ref()),
            if floor_us.is_some() {
                " The dashed line is the link's fixed latency both ways: no round trip is \
                 faster, jitter and the server add to it."
            } else {
                ""
            }
        ),
    }
}

/// The share `part / whole` of a second, `None` when `whole` is 0 (no data, never 0 %).
fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn loss_figure(s: &Summary, g: &GroupSummary, link: Option<&(Conditions, Conditions)>) -> Figure {
    let mut series = vec![Series {
        name: "loss down",
        color: RED,
        points: known(g, |p| p.loss_down.rate),
    }];
    let up = known(g, |p| p.loss_up.rate);
    if !up.is_empty() {
        series.push(Series {
            name: "loss up",
            color: PURPLE,
            points: up,
        });
    }
    let mut expected = Vec::new();
    if link.is_some() {
        series.push(Series {
            name: "link drop down",
            color: LINK_DOWN,
            points: known(g, |p| share(p.link.down_dropped, p.link.down_offered)),
        });
        series.push(Series {
            name: "link drop up",
            color: LINK_UP,
            points: known(g, |p| share(p.link.up_dropped, p.link.up_offered)),
        });
    }
    let rate = |c: &Conditions| c.loss.as_ref().map_or(0.0, |l| l.mean_rate());
    if let Some((u, d)) = link {
        let (u, d) = (rate(u), rate(d));
        if u > 0.0 && u == d {
            expected.push(Expected {
                id: "injected-loss",
                label: "injected loss, each way".into(),
                value: d,
            });
        } else {
            if d > 0.0 {
                expected.push(Expected {
                    id: "injected-loss-down",
                    label: "injected loss down".into(),
                    value: d,
                });
            }
            if u > 0.0 {
                expected.push(Expected {
                    id: "injected-loss-up",
                    label: "injected loss up".into(),
                    value: u,
                });
            }
        }
    }
    let opts = Opts {
        clip_at: None,
        marks: marks(s, g, |m| {
            matches!(m, Metric::DownstreamLoss | Metric::UpstreamLoss)
        }),
        expected,
        overlay: Some(bots(g)),
    };
    let title = format!("{}: loss per second", g.name);
    let svg = line_chart_with(&title, &series, Unit::Rate, &opts);
    Figure {
        id: format!("group-loss-{}", g.name),
        title,
        svg,
        caption: format!(
            "Loss down (up): what the group's bots counted missing of what the server sent \
             (and, where the protocol reports it, of what they sent). Link drop: the share of \
             the group's datagrams its simulated link dropped that second (loss, outage, full \
             queue); loss minus link drop is what the server or the real path lost. Dashed: \
             the loss rate the link was given. Injected: {}.",
            injected(g.network.as_ref())
        ),
    }
}
