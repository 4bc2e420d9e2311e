//! A server's history across runs (`tickswarm trend`): each key figure of each run, with the
//! run's own spread second by second, and the runs whose figure moved beyond the noise of
//! the runs before them.
//!
//! # What counts as a change
//! A run's figure is judged against the up to [`WINDOW`] runs before it that have the figure
//! (at least [`MIN_HISTORY`]; the first runs of a history are not judged). The earlier runs'
//! mean is the expected value, and the band around it is the widest of:
//! - the two-sided 99.9 % prediction interval for one more run like them: Student's t at
//!   0.9995 with k - 1 degrees of freedom, times their standard deviation, times
//!   √(1 + 1/k). It is the measured run-to-run noise, widened for how few runs measured it
//!   (a spread taken from 5 runs is itself uncertain: t is 8.6 there, 4.8 from 10). So a
//!   figure that swings from run to run (a p99 on a shared CI runner) gets a wide band, and
//!   identical runs leave it about once in a thousand judgements whatever their noise (a
//!   band from the median absolute deviation of a few runs, tried first, was left by 15 to
//!   20 % of identical runs with 10 % noise: a few runs that happen to agree understate it);
//! - [`RELATIVE_FLOOR`] of the expected value;
//! - the figure's own floor (a few µs, a tenth of a percent of loss): a change below what the
//!   figure resolves is not one.
//!
//! A figure outside the band is a change, `regressed` in the direction that is worse for the
//! figure (more RTT, loss, handshake or tick time; fewer players held), `improved` in the
//! other; bandwidth per bot has no better direction and is `changed`. One wild run among the
//! earlier ones widens the band of the runs after it (they are judged less sharply until it
//! leaves the window), never narrows it: the rule errs towards silence.
//!
//! A percentile taken from too few samples is charted but not judged: at least
//! [`MIN_SAMPLES_BEYOND`] samples must lie beyond it (a p99 needs 1,000). On 30 identical
//! runs of 8 bots (`scripts/trend_noise.sh`), the handshake p99 (of 8 handshakes: the slowest
//! one) ranged from 0.5 to 9 ms and the RTT p99 (of 240 pings) from 0.34 to 5.3 ms, the
//! machine's scheduling, not the server's: judged, they made 3 false alarms in 125
//! judgements.
//!
//! Bounded for folders from elsewhere: at most [`MAX_RUNS`] runs; each summary is read through
//! [`read_summary`] (size-limited); labels and other strings from the files are shown through
//! [`shown_label`] and escaped by the page.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{fmt_unit, Unit};
use super::merge::read_summary;
use super::summary::{shown_label, Summary};
use crate::metrics::threshold::Threshold;

/// Earlier runs a run is judged against.
pub const WINDOW: usize = 10;
/// Earlier runs needed before a run is judged at all.
pub const MIN_HISTORY: usize = 5;
/// The narrowest band, as a share of the expected value.
pub const RELATIVE_FLOOR: f64 = 0.05;
/// Student's t at 0.9995 for 4 to 9 degrees of freedom (earlier runs - 1; [`MIN_HISTORY`] to
/// [`WINDOW`] runs).
const T_9995: [f64; 6] = [8.610, 6.869, 5.959, 5.408, 5.041, 4.781];
/// Runs one trend takes at most.
pub const MAX_RUNS: usize = 1000;

/// Samples a percentile must have beyond it to be judged: a p99 of fewer than 1,000 samples
/// rests on its top few (of 8 handshakes it is the slowest one); it is charted, not judged.
pub const MIN_SAMPLES_BEYOND: f64 = 10.0;

/// How runs are put in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// By `started_at` (ISO 8601 UTC, so text order is time order).
    Start,
    /// By label (a build number, a date-stamped id), then by start; runs without one first.
    Label,
}

/// Which way is worse for a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Worse {
    Higher,
    Lower,
    /// No better direction (bandwidth per bot: a change is a change).
    Either,
}

/// One key figure a trend follows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// Stable id (`rtt_p99`), in trend.json and the page's `data-chart`.
    pub id: &'static str,
    pub title: &'static str,
    /// `us`, `rate`, `bytes_per_s` or `players`.
    pub unit: &'static str,
    pub worse: Worse,
    /// The smallest change the figure resolves, in its unit.
    pub floor: f64,
    /// The summary path thresholds on it name (`rtt_us.p99`), for drawing their limits.
    pub threshold_metric: &'static str,
    /// For a percentile of samples: which (0.99), so that one from too few samples is not
    /// judged ([`MIN_SAMPLES_BEYOND`]).
    pub quantile: Option<f64>,
}

impl Figure {
    /// The unit a value of this figure is printed in.
    pub fn unit_kind(&self) -> Unit {
        match self.unit {
            "us" => Unit::Micros,
            "rate" => Unit::Rate,
            "bytes_per_s" => Unit::BytesPerSec,
            _ => Unit::Count,
        }
    }

    /// A value of this figure as the console and the page print it (`1.2 ms`, `0.5 %`).
    pub fn format(&self, v: f64) -> String {
        fmt_unit(self.unit_kind(), v)
    }
}

/// The figures, in the page's order.
pub const FIGURES: &[Figure] = &[
    Figure {
        id: "rtt_p50",
        title: "RTT p50",
        unit: "us",
        worse: Worse::Higher,
        floor: 20.0,
        threshold_metric: "rtt_us.p50",
        quantile: Some(0.5),
    },
    Figure {
        id: "rtt_p99",
        title: "RTT p99",
        unit: "us",
        worse: Worse::Higher,
        floor: 50.0,
        threshold_metric: "rtt_us.p99",
        quantile: Some(0.99),
    },
    Figure {
        id: "loss_down",
        title: "Downstream loss",
        unit: "rate",
        worse: Worse::Higher,
        floor: 0.001,
        threshold_metric: "loss.downstream.rate",
        quantile: None,
    },
    Figure {
        id: "handshake_p99",
        title: "Handshake p99",
        unit: "us",
        worse: Worse::Higher,
        floor: 50.0,
        threshold_metric: "handshake_us.p99",
        quantile: Some(0.99),
    },
    Figure {
        id: "bandwidth_down_per_bot",
        title: "Downstream bandwidth per bot",
        unit: "bytes_per_s",
        worse: Worse::Either,
        floor: 16.0,
        threshold_metric: "",
        quantile: None,
    },
    Figure {
        id: "server_tick_p99",
        title: "Server tick time p99",
        unit: "us",
        worse: Worse::Higher,
        floor: 10.0,
        threshold_metric: "",
        quantile: None,
    },
    Figure {
        id: "capacity",
        title: "Capacity (players held)",
        unit: "players",
        worse: Worse::Lower,
        floor: 1.0,
        threshold_metric: "",
        quantile: None,
    },
];

/// A run's value of one figure, and its spread over the run's seconds (10th and 90th
/// percentile of the per-second values) where the summary has them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Value {
    pub value: f64,
    /// For a percentile: the samples it is taken from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<(f64, f64)>,
}

/// What became of a run's figure against the runs before it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    /// `regressed`, `improved`, `changed` (no better direction) or `within` (inside the band).
    pub state: &'static str,
    /// The median of the earlier runs.
    pub expected: f64,
    /// The band's half-width.
    pub band: f64,
    /// The earlier runs judged against (by their position in the trend, from 0).
    pub against: Vec<usize>,
}

/// One run in the trend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub dir: PathBuf,
    /// The run's report, relative to the trend's own folder when it can be, for the links.
    pub report: String,
    pub label: Option<String>,
    pub started_at: String,
    pub verdict: String,
    pub tool_version: Option<String>,
    pub scenario_hash: Option<String>,
    pub scenario: String,
    /// By figure id: the run's value, absent when it did not measure the figure.
    pub values: Vec<(&'static str, Value)>,
    /// By figure id: the judgement, absent for the first runs of the history.
    pub judged: Vec<(&'static str, Judged)>,
}

impl Run {
    /// The run's value of a figure.
    pub fn value(&self, id: &str) -> Option<Value> {
        self.values.iter().find(|(i, _)| *i == id).map(|(_, v)| *v)
    }

    /// How the console and the page name the run at `index` (from 0) of the trend: its
    /// position from 1, and its label when it has one (`#7 build-1234`).
    pub fn name(&self, index: usize) -> String {
        match &self.label {
            Some(l) => format!("#{} {l}", index + 1),
            None => format!("#{}", index + 1),
        }
    }

    /// The run's judgement on a figure.
    pub fn judged(&self, id: &str) -> Option<&Judged> {
        self.judged.iter().find(|(i, _)| *i == id).map(|(_, j)| j)
    }
}

/// A threshold line on a figure: its limit, in the figure's unit, and how the scenario wrote
/// it; from the newest run that had it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    pub figure: &'static str,
    pub condition: String,
    pub value: f64,
}

/// Something that differs between consecutive runs and may explain a change: the tool's
/// version, the scenario, the protocol or dialect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warning {
    /// The later of the two runs (its position in the trend).
    pub run: usize,
    pub text: String,
}

/// The whole trend: trend.json as written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    pub schema: u32,
    pub order: &'static str,
    pub window: usize,
    pub min_history: usize,
    pub relative_floor: f64,
    pub figures: Vec<Figure>,
    pub runs: Vec<Run>,
    pub limits: Vec<Limit>,
    pub warnings: Vec<Warning>,
}

/// A change found: which run, which figure, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Change<'a> {
    pub run: usize,
    pub figure: &'static Figure,
    pub value: f64,
    pub judged: &'a Judged,
}

impl Trend {
    /// Every figure of every run outside its band, in run order.
    pub fn changes(&self) -> Vec<Change<'_>> {
        let mut out = Vec::new();
        for (i, r) in self.runs.iter().enumerate() {
            for f in FIGURES {
                if let (Some(j), Some(v)) = (r.judged(f.id), r.value(f.id)) {
                    if j.state != "within" {
                        out.push(Change {
                            run: i,
                            figure: f,
                            value: v.value,
                            judged: j,
                        });
                    }
                }
            }
        }
        out
    }
}

/// Why a trend could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TrendError {
    #[error("{0}")]
    Input(String),
    #[error("{0} runs: a trend takes at most {MAX_RUNS} (give fewer folders, the newest ones)")]
    TooMany(usize),
}

/// The run folders under `paths`: each path that holds a summary.json is a run; any other
/// folder is searched one level down for runs (a CI job's folder of kept runs). At most
/// [`MAX_RUNS`]; folders without a summary are passed over, and named in the second list.
pub fn find_runs(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), TrendError> {
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for p in paths {
        if p.join("summary.json").is_file() {
            runs.push(p.clone());
        } else if p.is_dir() {
            let entries = std::fs::read_dir(p)
                .map_err(|e| TrendError::Input(format!("{}: {e}", p.display())))?;
            let mut children: Vec<PathBuf> = Vec::new();
            for e in entries.flatten() {
                let c = e.path();
                if c.join("summary.json").is_file() {
                    children.push(c);
                } else if c.is_dir() {
                    skipped.push(c);
                }
                if runs.len() + children.len() > MAX_RUNS {
                    return Err(TrendError::TooMany(runs.len() + children.len()));
                }
            }
            if children.is_empty() {
                return Err(TrendError::Input(format!(
                    "{}: neither a run folder (no summary.json) nor a folder of runs",
                    p.display()
                )));
            }
            children.sort();
            runs.extend(children);
        } else {
            return Err(TrendError::Input(format!(
                "{}: no such run folder",
                p.display()
            )));
        }
        if runs.len() > MAX_RUNS {
            return Err(TrendError::TooMany(runs.len()));
        }
    }
    Ok((runs, skipped))
}

/// Read the runs' summaries and make the trend; `out` is where the page will be, for the
/// links to each run's report. A run named in `named` (given on the command line) whose
/// summary cannot be read is an error; one found in a folder of runs is passed over and
/// returned with why (a CI job's half-written artifact must not cost the whole history).
pub fn build(
    dirs: &[PathBuf],
    named: &[PathBuf],
    order: Order,
    out: &Path,
) -> Result<(Trend, Vec<(PathBuf, String)>), TrendError> {
    if dirs.len() > MAX_RUNS {
        return Err(TrendError::TooMany(dirs.len()));
    }
    let mut read: Vec<(PathBuf, Summary)> = Vec::with_capacity(dirs.len());
    let mut unreadable = Vec::new();
    for d in dirs {
        match read_summary(&d.join("summary.json")) {
            Ok(s) => read.push((d.clone(), s)),
            Err(e) if !named.contains(d) => unreadable.push((d.clone(), e.to_string())),
            Err(e) => return Err(TrendError::Input(e.to_string())),
        }
    }
    if read.is_empty() {
        let why = unreadable
            .first()
            .map_or_else(String::new, |(_, e)| format!(": {e}"));
        return Err(TrendError::Input(format!(
            "no run's summary.json could be read{why}"
        )));
    }
    Ok((from_summaries(read, order, out), unreadable))
}

/// The trend of summaries already read (tests give them directly).
pub fn from_summaries(mut read: Vec<(PathBuf, Summary)>, order: Order, out: &Path) -> Trend {
    match order {
        Order::Start => read.sort_by(|a, b| a.1.started_at.cmp(&b.1.started_at)),
        Order::Label => read.sort_by(|a, b| {
            label_key(a.1.label.as_deref())
                .cmp(&label_key(b.1.label.as_deref()))
                .then_with(|| a.1.started_at.cmp(&b.1.started_at))
        }),
    }
    let mut runs: Vec<Run> = read
        .iter()
        .map(|(dir, s)| Run {
            dir: dir.clone(),
            report: report_link(dir, out),
            label: s.label.as_deref().map(shown_label),
            started_at: shown_label(&s.started_at),
            verdict: shown_label(&s.verdict),
            tool_version: s.tool_version.as_deref().map(shown_label),
            scenario_hash: s.scenario_hash.as_deref().map(shown_label),
            scenario: shown_label(&s.scenario),
            values: FIGURES
                .iter()
                .filter_map(|f| Some((f.id, value_of(f.id, s)?)))
                .collect(),
            judged: Vec::new(),
        })
        .collect();
    for i in 0..runs.len() {
        let mut judged = Vec::new();
        for f in FIGURES {
            let Some(v) = runs[i].value(f.id) else {
                continue;
            };
            if let (Some(q), Some(n)) = (f.quantile, v.samples) {
                if (n as f64) * (1.0 - q) < MIN_SAMPLES_BEYOND {
                    continue;
                }
            }
            let earlier: Vec<(usize, f64)> = (0..i)
                .rev()
                .filter_map(|k| Some((k, runs[k].value(f.id)?.value)))
                .take(WINDOW)
                .collect();
            if earlier.len() < MIN_HISTORY {
                continue;
            }
            let vals: Vec<f64> = earlier.iter().map(|e| e.1).collect();
            let (expected, band) = band_of(&vals, f.floor);
            let state = if (v.value - expected).abs() <= band {
                "within"
            } else {
                match (f.worse, v.value > expected) {
                    (Worse::Either, _) => "changed",
                    (Worse::Higher, true) | (Worse::Lower, false) => "regressed",
                    _ => "improved",
                }
            };
            let mut against: Vec<usize> = earlier.iter().map(|e| e.0).collect();
            against.sort_unstable();
            judged.push((
                f.id,
                Judged {
                    state,
                    expected,
                    band,
                    against,
                },
            ));
        }
        runs[i].judged = judged;
    }
    Trend {
        schema: 1,
        order: match order {
            Order::Start => "start",
            Order::Label => "label",
        },
        window: WINDOW,
        min_history: MIN_HISTORY,
        relative_floor: RELATIVE_FLOOR,
        figures: FIGURES.to_vec(),
        limits: limits_of(read.iter().rev().map(|(_, s)| s)),
        warnings: warnings_of(&read),
        runs,
    }
}

/// The expected value (mean) of earlier runs' values and the band's half-width (see the
/// module docs); fewer than [`MIN_HISTORY`] values give a band of the floors only.
pub fn band_of(values: &[f64], floor: f64) -> (f64, f64) {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let k = v.len();
    if k == 0 {
        return (0.0, floor);
    }
    let mean = v.iter().sum::<f64>() / k as f64;
    let noise = if k >= MIN_HISTORY {
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
        let t = T_9995[(k - MIN_HISTORY).min(T_9995.len() - 1)];
        t * var.sqrt() * (1.0 + 1.0 / k as f64).sqrt()
    } else {
        0.0
    };
    (mean, noise.max(RELATIVE_FLOOR * mean.abs()).max(floor))
}

/// Labels that are numbers (build numbers) in numeric order, before any other text.
fn label_key(label: Option<&str>) -> (u8, u64, String) {
    match label {
        None => (0, 0, String::new()),
        Some(l) => match l.parse::<u64>() {
            Ok(n) => (1, n, String::new()),
            Err(_) => (2, 0, l.to_string()),
        },
    }
}

/// The link from the trend page in `out` to the run in `dir`'s report, percent-encoded (a
/// run folder named `build #7` or `a?b` must not end the path at its `#` or `?`).
fn report_link(dir: &Path, out: &Path) -> String {
    percent_encoded(&report_path(dir, out))
}

/// `path` with every byte but URL-unreserved ones and `/` as `%XX`.
fn percent_encoded(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn report_path(dir: &Path, out: &Path) -> String {
    let report = dir.join("report.html");
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (r, o) = (abs(&report), abs(out));
    // Relative when the run sits beside or below the trend's folder's parent: CI artifacts
    // keep both in one tree, and a relative link survives the tree being moved.
    let mut up = PathBuf::new();
    let mut base = o.as_path();
    for _ in 0..4 {
        if let Ok(rest) = r.strip_prefix(base) {
            return up.join(rest).to_string_lossy().into_owned();
        }
        match base.parent() {
            Some(p) => {
                base = p;
                up.push("..");
            }
            None => break,
        }
    }
    r.to_string_lossy().into_owned()
}

/// The 10th and 90th percentiles of per-second values.
fn spread(mut per_second: Vec<f64>) -> Option<(f64, f64)> {
    per_second.retain(|v| v.is_finite());
    if per_second.len() < 2 {
        return None;
    }
    per_second.sort_by(f64::total_cmp);
    let at = |q: f64| per_second[((per_second.len() - 1) as f64 * q).round() as usize];
    Some((at(0.10), at(0.90)))
}

/// A run's value of a figure, from its summary.
pub fn value_of(id: &str, s: &Summary) -> Option<Value> {
    // Whole seconds only: the last, partial one holds a fraction of a second's traffic.
    let whole: Vec<&crate::metrics::IntervalPoint> =
        s.intervals.iter().filter(|p| !p.partial).collect();
    let iv = &whole;
    let with = |value: f64, per_second: Vec<f64>| Value {
        value,
        samples: None,
        spread: spread(per_second),
    };
    let rtt = |v: Value| Value {
        samples: Some(s.rtt_us.count),
        ..v
    };
    match id {
        "rtt_p50" => (s.rtt_us.count > 0).then(|| {
            rtt(with(
                s.rtt_us.p50 as f64,
                iv.iter()
                    .filter_map(|p| Some(p.rtt_p50_us? as f64))
                    .collect(),
            ))
        }),
        "rtt_p99" => (s.rtt_us.count > 0).then(|| {
            rtt(with(
                s.rtt_us.p99 as f64,
                iv.iter()
                    .filter_map(|p| Some(p.rtt_p99_us? as f64))
                    .collect(),
            ))
        }),
        "loss_down" => {
            let l = s.loss.downstream.filter(|l| l.expected > 0)?;
            Some(with(
                l.rate,
                iv.iter().filter_map(|p| p.loss_down_rate).collect(),
            ))
        }
        "handshake_p99" => (s.handshake_us.count > 0).then_some(Value {
            value: s.handshake_us.p99 as f64,
            samples: Some(s.handshake_us.count),
            spread: None,
        }),
        "bandwidth_down_per_bot" => {
            let bots = s.bots.connected;
            (bots > 0 && s.duration_s > 0.0).then(|| {
                with(
                    s.bandwidth.down_bytes as f64 / s.duration_s / bots as f64,
                    iv.iter()
                        .filter(|p| p.bots_connected > 0)
                        .map(|p| p.bytes_down as f64 / p.bots_connected as f64)
                        .collect(),
                )
            })
        }
        "server_tick_p99" => {
            let series = s.server_metrics.as_ref()?.find("tick_seconds")?;
            let p99 = series.p99?;
            Some(with(
                p99 * 1e6,
                series
                    .points
                    .iter()
                    .filter_map(|p| Some(p.p99? * 1e6))
                    .collect(),
            ))
        }
        "capacity" => s.capacity.as_ref()?.players.map(|n| Value {
            value: n as f64,
            samples: None,
            spread: None,
        }),
        _ => None,
    }
}

/// Threshold limits on the figures, from the newest run that has each.
fn limits_of<'a>(newest_first: impl Iterator<Item = &'a Summary>) -> Vec<Limit> {
    let mut out: Vec<Limit> = Vec::new();
    for s in newest_first {
        for t in &s.thresholds {
            let Some(f) = FIGURES
                .iter()
                .find(|f| !f.threshold_metric.is_empty() && f.threshold_metric == t.metric)
            else {
                continue;
            };
            if out
                .iter()
                .any(|l| l.figure == f.id && l.condition == t.condition)
            {
                continue;
            }
            if let Ok(th) = Threshold::parse(&t.condition) {
                out.push(Limit {
                    figure: f.id,
                    condition: shown_label(&t.condition),
                    value: th.limit,
                });
            }
        }
        if out.len() > 64 {
            break;
        }
    }
    out
}

/// What differs between consecutive runs, besides what they measured.
fn warnings_of(read: &[(PathBuf, Summary)]) -> Vec<Warning> {
    let mut out = Vec::new();
    for (i, pair) in read.windows(2).enumerate() {
        let (a, b) = (&pair[0].1, &pair[1].1);
        let mut say = |what: &str, x: Option<&str>, y: Option<&str>| {
            if x != y {
                out.push(Warning {
                    run: i + 1,
                    text: format!(
                        "{what} changed: {} → {}",
                        x.map_or("(not recorded)".into(), shown_label),
                        y.map_or("(not recorded)".into(), shown_label)
                    ),
                });
            }
        };
        say(
            "tool version",
            a.tool_version.as_deref(),
            b.tool_version.as_deref(),
        );
        say(
            "scenario (hash)",
            a.scenario_hash.as_deref(),
            b.scenario_hash.as_deref(),
        );
        say("protocol", Some(&a.protocol), Some(&b.protocol));
        say("dialect", Some(&a.dialect), Some(&b.dialect));
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_report_link_survives_a_folder_named_with_url_characters() {
        let link = report_link(Path::new("/ci/runs/build #7 ?x/ü"), Path::new("/ci/trend"));
        assert_eq!(link, "../runs/build%20%237%20%3Fx/%C3%BC/report.html");
    }

    use super::*;

    /// Five runs that agree closely make a band of the relative floor; noisier ones a band of
    /// t(0.9995, 4) × their standard deviation × √1.2.
    #[test]
    fn the_band_is_the_prediction_interval_or_the_floor_whichever_is_wider() {
        let (m, band) = band_of(&[1000.0, 1001.0, 999.0, 1000.0, 1000.0], 1.0);
        assert_eq!(m, 1000.0);
        assert_eq!(band, 50.0, "5 % of the mean");
        let (m, band) = band_of(&[900.0, 1100.0, 1000.0, 950.0, 1050.0], 1.0);
        assert_eq!(m, 1000.0);
        // Standard deviation √(25 000 / 4) ≈ 79.06.
        let sd = (25_000.0f64 / 4.0).sqrt();
        assert!((band - 8.610 * sd * 1.2f64.sqrt()).abs() < 1e-6, "{band}");
    }

    /// One wild earlier run widens the band (the runs after it are judged less sharply), it
    /// never narrows it.
    #[test]
    fn one_wild_run_widens_the_band() {
        let (_, calm) = band_of(&[1000.0, 1010.0, 990.0, 1005.0, 995.0], 1.0);
        let (_, wild) = band_of(&[1000.0, 1010.0, 50_000.0, 1005.0, 995.0], 1.0);
        assert!(wild > calm * 10.0);
    }

    #[test]
    fn numeric_labels_sort_as_numbers() {
        let mut l = vec![Some("10"), Some("9"), None, Some("b7")];
        l.sort_by_key(|x| label_key(*x));
        assert_eq!(l, vec![None, Some("9"), Some("10"), Some("b7")]);
    }

    #[test]
    fn spread_is_the_tenth_to_ninetieth_percentile() {
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        assert_eq!(spread(v), Some((2.0, 10.0)));
        assert_eq!(spread(vec![3.0]), None);
    }
}
