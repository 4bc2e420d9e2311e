//! The "Over time" section: one line chart per per-second series of the run.

use super::chart::{line_chart, Series, AMBER, BLUE, ORANGE, PURPLE, RED, TEAL};
use super::view::interval_widths;
use crate::report::format::Unit;
use crate::report::summary::{IntervalPoint, Summary};

/// A chart with its title and caption (plain text); `svg` is markup from [`super::chart`].
pub(super) struct Figure {
    pub title: &'static str,
    pub svg: String,
    pub caption: String,
}

impl Figure {
    fn new(title: &'static str, series: &[Series], unit: Unit, caption: impl Into<String>) -> Self {
        Self {
            title,
            svg: line_chart(title, series, unit),
            caption: caption.into(),
        }
    }
}

/// Bots, RTT, loss, bandwidth and generator lateness, second by second.
pub(super) fn figures(s: &Summary) -> Vec<Figure> {
    let iv = &s.intervals;
    let series = |f: &dyn Fn(&IntervalPoint) -> f64| -> Vec<(f64, f64)> {
        iv.iter().map(|p| (p.t, f(p))).collect()
    };
    let widths: Vec<f64> = interval_widths(iv).collect();
    let per_sec = |f: &dyn Fn(&IntervalPoint) -> u64| -> Vec<(f64, f64)> {
        iv.iter()
            .zip(&widths)
            .map(|(p, dt)| (p.t, f(p) as f64 / dt))
            .collect()
    };
    let loss_caption = match (&s.loss.downstream, s.loss_method.downstream.as_str()) {
        (None, "") => "Downstream loss is not measurable for this protocol.".into(),
        (None, m) => format!("Downstream loss is not measurable for this protocol: {m}"),
        (Some(_), "") => "Fraction of expected server datagrams never received.".into(),
        (Some(_), m) => format!("Measured by: {m}"),
    };
    vec![
        Figure::new(
            "Bots connected",
            &[Series {
                name: "bots connected",
                color: BLUE,
                points: series(&|p| p.bots_connected as f64),
            }],
            Unit::Count,
            "Bots with a completed handshake at the end of each second.",
        ),
        Figure::new(
            "Round-trip time",
            &[
                Series {
                    name: "RTT p50",
                    color: BLUE,
                    points: series(&|p| p.rtt_p50_us as f64),
                },
                Series {
                    name: "RTT p99",
                    color: ORANGE,
                    points: series(&|p| p.rtt_p99_us as f64),
                },
            ],
            Unit::Micros,
            "Per-second percentiles of the round-trip time measured by the bots.",
        ),
        Figure::new(
            "Downstream loss rate",
            &[Series {
                name: "loss (down)",
                color: RED,
                points: series(&|p| p.loss_down_rate),
            }],
            Unit::Rate,
            loss_caption,
        ),
        Figure::new(
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
            "Bytes per second on the wire, all bots together.",
        ),
        Figure::new(
            "Generator health: send lateness p99",
            &[Series {
                name: "send lateness p99",
                color: AMBER,
                points: series(&|p| p.lateness_p99_us as f64),
            }],
            Unit::Micros,
            "The coordinated-omission guard: how late inputs left relative to their intended \
             send time on each bot's tick grid. Low values mean the load was applied as \
             planned; high values mean the load generator itself was the bottleneck, and \
             latencies measured during those seconds understate what a real client would see.",
        ),
    ]
}
