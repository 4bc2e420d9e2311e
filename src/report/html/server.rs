//! The server's side of the run (`server_metrics:`): the target's own histograms (tick time)
//! as per-second p50/p99 against the bots in play, its resident memory per player, and a
//! reference server's sessions, bytes and datagrams per second and send errors, on the run's
//! time axis like the client charts beside them; and, for the other side of the same
//! question, the generator's own health per second (its busiest worker's CPU).

use super::chart::{
    line_chart_with, Figure, Mark, Opts, Overlay, Series, AMBER, BLUE, ORANGE, PURPLE, RED, TEAL,
};
use crate::metrics::server_series::{Kind, Series as Scraped};
use crate::metrics::threshold::{Metric, Threshold};
use crate::report::format::Unit;
use crate::report::summary::Summary;

/// Histograms charted per endpoint at most (a game server exposes a few; the rest are in
/// summary.json).
const MAX_HISTOGRAMS: usize = 4;

/// The resident-memory gauge Prometheus' client libraries (and node exporters' process
/// collectors) export.
const RSS: &str = "process_resident_memory_bytes";

pub(super) fn figures(s: &Summary, overlay: impl Fn() -> Option<Overlay>) -> Vec<Figure> {
    let Some(sm) = &s.server_metrics else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, e) in sm.endpoints.iter().enumerate() {
        let hists = e
            .series
            .iter()
            .filter(|(_, v)| v.kind == Kind::Histogram)
            .take(MAX_HISTOGRAMS);
        for (name, series) in hists {
            out.push(histogram_figure(s, i, &e.url, name, series, overlay()));
        }
        if let Some(rss) = e.series.get(RSS) {
            out.push(rss_per_player(s, i, &e.url, rss));
        }
        for c in COUNTERS {
            out.extend(counters_figure(i, &e.url, c, &e.series, overlay()));
        }
    }
    out
}

/// One chart of a reference server's own counts (what `tickswarm serve --metrics-listen` and
/// the embedded server export): the families it draws, each series a line named by its
/// family and labels.
struct CountChart {
    id: &'static str,
    title: &'static str,
    unit: Unit,
    /// `(family, name of its line)`: a family with labels (`direction`) draws a line per
    /// series, the label's value after the name.
    families: &'static [(&'static str, &'static str)],
    caption: &'static str,
}

/// The server's sessions, traffic and errors, as its `/metrics` counts them: gauges as
/// scraped, counters as rates per second.
const COUNTERS: &[CountChart] = &[
    CountChart {
        id: "sessions",
        title: "Server sessions",
        unit: Unit::Count,
        families: &[
            ("tickswarm_server_sessions", "sessions open"),
            ("tickswarm_server_connections", "connections open"),
        ],
        caption: "Sessions (and transport connections) the server held at each scrape, \
                  against the bots in game: a server that drops or refuses players shows \
                  fewer sessions than bots.",
    },
    CountChart {
        id: "bytes",
        title: "Server traffic, bytes per second",
        unit: Unit::BytesPerSec,
        families: &[("tickswarm_server_bytes_total", "bytes")],
        caption: "Bytes the server received (in) and sent (out) per second, from its own \
                  counters: beside the bots' bandwidth chart, what left one side and reached \
                  the other.",
    },
    CountChart {
        id: "datagrams",
        title: "Server datagrams per second",
        unit: Unit::Count,
        families: &[("tickswarm_server_datagrams_total", "datagrams")],
        caption: "Datagrams (or messages) the server received (in) and sent (out) per \
                  second, from its own counters.",
    },
    CountChart {
        id: "errors",
        title: "Server send errors and drops per second",
        unit: Unit::Count,
        families: &[
            ("tickswarm_server_send_errors_total", "send errors"),
            ("tickswarm_server_dropped_total", "datagrams dropped"),
            (
                "tickswarm_server_admission_refused_total",
                "handshakes refused",
            ),
            (
                "tickswarm_server_sessions_timed_out_total",
                "sessions timed out",
            ),
        ],
        caption: "Per second, from the server's own counters: batches it failed to send, \
                  malformed or unexpected datagrams it dropped (by reason), handshakes it \
                  refused and sessions it dropped for silence. Flat at 0 is a clean run.",
    },
];

/// The series of `family` in an endpoint's scrapes, each with the text its labels add to the
/// line's name (`in` for `{direction="in"}`, `reason=x` for other labels).
fn family<'a>(
    series: &'a std::collections::BTreeMap<String, Scraped>,
    family: &str,
) -> Vec<(String, &'a Scraped)> {
    series
        .iter()
        .filter_map(|(key, v)| {
            let (name, labels) = match key.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (key.as_str(), ""),
            };
            if name != family {
                return None;
            }
            let said: Vec<String> = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .filter_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    let v = v.trim_matches('"');
                    Some(if k == "direction" {
                        v.to_string()
                    } else {
                        format!("{k}={v}")
                    })
                })
                .collect();
            Some((said.join(", "), v))
        })
        .collect()
}

/// Colours of a count chart's lines, in order.
const LINE_COLORS: [&str; 6] = [BLUE, ORANGE, TEAL, RED, PURPLE, AMBER];

/// One [`CountChart`] of endpoint `endpoint`; `None` when it exposes none of its families.
fn counters_figure(
    endpoint: usize,
    url: &str,
    c: &CountChart,
    series: &std::collections::BTreeMap<String, Scraped>,
    overlay: Option<Overlay>,
) -> Option<Figure> {
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (fam, what) in c.families {
        for (labels, sc) in family(series, fam) {
            if sc.kind == Kind::Histogram {
                continue;
            }
            let name = if labels.is_empty() {
                (*what).to_string()
            } else {
                format!("{what} {labels}")
            };
            let points = sc
                .points
                .iter()
                .filter_map(|p| p.value.map(|v| (p.t, v)))
                .collect();
            lines.push((name, points));
        }
    }
    if lines.is_empty() {
        return None;
    }
    let drawn: Vec<Series> = lines
        .iter()
        .enumerate()
        .map(|(k, (name, points))| Series {
            name,
            color: LINE_COLORS[k % LINE_COLORS.len()],
            points: points.clone(),
        })
        .collect();
    let title = c.title.to_string();
    Some(Figure {
        svg: line_chart_with(
            &title,
            &drawn,
            c.unit,
            &Opts {
                overlay,
                ..Opts::default()
            },
        ),
        title,
        caption: format!("{} Scraped from {url}.", c.caption),
        id: format!("server-{endpoint}-{}", c.id),
    })
}

/// The name a `server.NAME` threshold uses for the series `name`.
fn short(name: &str) -> &str {
    name.strip_prefix("tickswarm_server_").unwrap_or(name)
}

fn histogram_figure(
    s: &Summary,
    endpoint: usize,
    url: &str,
    name: &str,
    series: &Scraped,
    overlay: Option<Overlay>,
) -> Figure {
    // Prometheus names say their unit: `_seconds` is charted in µs like the RTT.
    let seconds = name.ends_with("_seconds");
    let (unit, scale) = if seconds {
        (Unit::Micros, 1e6)
    } else {
        (Unit::Plain, 1.0)
    };
    let pts = |f: &dyn Fn(&crate::metrics::server_series::Point) -> Option<f64>| {
        series
            .points
            .iter()
            .filter_map(|p| f(p).map(|v| (p.t, v * scale)))
            .collect::<Vec<_>>()
    };
    let marks: Vec<Mark> = s
        .thresholds
        .iter()
        .filter_map(|t| Threshold::parse(&t.condition).ok())
        .filter_map(|t| match t.metric {
            Metric::Server(f) if f.name == short(name) || f.name == name => Some(Mark {
                label: format!("threshold {}", f.stat.name()),
                value: if f.time == seconds {
                    t.limit
                } else {
                    t.limit * scale
                },
            }),
            _ => None,
        })
        .collect();
    let title = format!("Server {} (p50, p99)", short(name));
    let svg = line_chart_with(
        &title,
        &[
            Series {
                name: "p50",
                color: BLUE,
                points: pts(&|p| p.p50),
            },
            Series {
                name: "p99",
                color: ORANGE,
                points: pts(&|p| p.p99),
            },
        ],
        unit,
        &Opts {
            marks,
            overlay,
            ..Opts::default()
        },
    );
    Figure {
        title,
        svg,
        caption: format!(
            "Scraped from {url}: the quantiles of the observations between two scrapes, from \
             the histogram's bucket deltas (linear inside a bucket), on the run's clock."
        ),
        id: format!("server-{endpoint}-{}", short(name)),
    }
}

fn rss_per_player(s: &Summary, endpoint: usize, url: &str, rss: &Scraped) -> Figure {
    // The bots in play at the same second of the run's clock.
    let players = |t: f64| {
        s.intervals
            .iter()
            .find(|p| (p.t - t).abs() < 1e-9)
            .map(|p| p.bots_connected)
            .filter(|n| *n > 0)
    };
    let points: Vec<(f64, f64)> = rss
        .points
        .iter()
        .filter_map(|p| Some((p.t, p.value? / players(p.t)? as f64)))
        .collect();
    let title = "Server memory per player (RSS / bots connected)".to_string();
    Figure {
        svg: line_chart_with(
            &title,
            &[Series {
                name: "RSS per player",
                color: TEAL,
                points,
            }],
            Unit::Bytes,
            &Opts::default(),
        ),
        title,
        caption: format!(
            "{RSS} scraped from {url}, divided by the bots connected at the same second."
        ),
        id: format!("server-{endpoint}-rss-per-player"),
    }
}

/// The generator's busiest worker per second (share of one core) with the 90 % line of the
/// CPU-bound rule, against the bots in play; `None` when no second carries health figures.
pub(super) fn generator_figure(s: &Summary, overlay: Option<Overlay>) -> Option<Figure> {
    let cpu: Vec<(f64, f64)> = s
        .intervals
        .iter()
        .filter_map(|p| Some((p.t, p.generator.as_ref()?.max_cpu()?)))
        .collect();
    if cpu.is_empty() {
        return None;
    }
    let title = "Generator health: busiest worker's CPU".to_string();
    let svg = line_chart_with(
        &title,
        &[Series {
            name: "busiest worker (share of a core)",
            color: ORANGE,
            points: cpu,
        }],
        Unit::Rate,
        &Opts {
            marks: vec![Mark {
                label: "CPU-bound at 90 % with slots skipped".into(),
                value: crate::metrics::run::CPU_BOUND_SHARE,
            }],
            overlay,
            ..Opts::default()
        },
    );
    Some(Figure {
        title,
        svg,
        caption: format!(
            "CPU time of the busiest worker thread in each second (one clock read a second). \
             A second with a worker at 90 % or more while input slots were skipped counts as \
             CPU-bound: {} such second(s) in this run. Process RSS peaked at {}, open descriptors at {}.",
            s.generator.cpu_bound_seconds,
            s.generator
                .rss_max_bytes
                .map_or("n/a".into(), |b| crate::report::format::fmt_unit(Unit::Bytes, b as f64)),
            s.generator
                .open_fds_max
                .map_or("n/a".into(), |n| n.to_string()),
        ) + &cpu_per_datagram(&s.generator),
        id: "generator-cpu".into(),
    })
}

/// The workers' CPU over the run and per datagram, for the caption (empty without it): the
/// figure to set beside a bare `send()` loop's on the same machine.
fn cpu_per_datagram(g: &crate::report::summary::Generator) -> String {
    let Some(cpu) = g.cpu_ns else {
        return String::new();
    };
    let per = |x: Option<f64>| x.map_or("n/a".into(), |ns| format!("{:.0} ns", ns));
    format!(
        " The worker threads used {:.2} s of CPU over the run: {} per datagram sent, {} per \
         datagram received (the same CPU divided by each; kernel time in the workers included).",
        cpu as f64 / 1e9,
        per(g.cpu_ns_per_datagram_sent),
        per(g.cpu_ns_per_datagram_received),
    )
}

/// How hard the generator works to send: system calls per second and the most datagrams one
/// carried, per second, with the path (io_uring batches or one `send()` per datagram) and
/// the run's mean batch in the caption; `None` when the transport does not count its sends.
pub(super) fn send_io_figure(s: &Summary, overlay: Option<Overlay>) -> Option<Figure> {
    let io = s.generator.send_io.as_ref()?;
    let calls: Vec<(f64, f64)> = (s.intervals.iter())
        .filter_map(|p| Some((p.t, p.generator.as_ref()?.send_syscalls? as f64)))
        .collect();
    let max: Vec<(f64, f64)> = (s.intervals.iter())
        .filter_map(|p| Some((p.t, p.generator.as_ref()?.send_batch_max? as f64)))
        .collect();
    if calls.is_empty() {
        return None;
    }
    let title = "Generator health: send system calls per second".to_string();
    let svg = line_chart_with(
        &title,
        &[
            Series {
                name: "send system calls per second",
                color: ORANGE,
                points: calls,
            },
            Series {
                name: "most datagrams in one call",
                color: BLUE,
                points: max,
            },
        ],
        Unit::Count,
        &Opts {
            overlay,
            ..Opts::default()
        },
    );
    let path = match io.path.as_str() {
        "io_uring" => "io_uring, many bots' datagrams per system call".to_string(),
        "send" => "one send() per datagram".to_string(),
        _ => format!(
            "mixed: {} worker(s) on io_uring, {} on send()",
            io.workers_uring, io.workers_plain
        ),
    };
    Some(Figure {
        title,
        svg,
        caption: format!(
            "Send path: {path}. {} system calls carried {} datagrams: {} per call on average, \
             {} at most; {} calls per second over the run. Fewer calls per datagram is less \
             of the generator's CPU spent entering the kernel.",
            io.syscalls,
            io.datagrams,
            io.batch_mean.map_or("n/a".into(), |m| format!("{m:.1}")),
            io.batch_max,
            io.syscalls_per_s.round(),
        ),
        id: "generator-send-io".into(),
    })
}
