//! `tickswarm merge`: one result from runs on several load machines.
//!
//! Counters add up. Histograms are rebuilt exactly from each run's `histograms.hlog` (the
//! per-second interval histograms, added), so merged percentiles are true percentiles of all
//! samples, not averages of percentiles. Thresholds are evaluated again on the merged result.
//!
//! The run folders come from other machines, so they are read as untrusted input: logs
//! through the bounded reader ([`super::hlog_read`]), summary.json up to
//! [`MAX_SUMMARY_BYTES`], and every counter added with a check (an overflow is an error, not
//! a wrapped figure). Memory follows the files: each run's per-second entries stay as their
//! compressed bytes, and [`Merged::seconds`] merges them one second at a time.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde_json::Value;
use thiserror::Error;

use super::build::{evaluate_with, quantile_of};
use super::hlog_read::{self, Decoder, HlogError, Project, Sparse, MAX_TAGS};
use super::summary::{IntervalPoint, MergedShards, Summary, ThresholdResult};
use crate::metrics::phases::{PhaseCounts, TargetPoint, Waiting};
use crate::metrics::run::GeneratorHealth;
use crate::metrics::threshold::{TimeMetric, Unmeasurable};
use crate::metrics::Threshold;
use crate::metrics::{HistSummary, LossSummary};

/// The largest summary.json read (64 MiB): an hour-long run's is a few MB.
pub const MAX_SUMMARY_BYTES: u64 = 64 << 20;
/// The most targets, and the most waiting groups, in one interval point of a run merged.
pub const MAX_GROUPS: usize = 1024;

#[derive(Debug, Error)]
pub enum MergeError {
    #[error("{path}: {message}")]
    Input { path: PathBuf, message: String },
    #[error(transparent)]
    Hlog(#[from] HlogError),
    /// A second's histograms that do not add up (the message names the file).
    #[error("{0}")]
    Second(String),
    #[error("nothing to merge: give at least one run folder")]
    Empty,
}

fn input_err(path: &Path, message: impl Into<String>) -> MergeError {
    MergeError::Input {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// One per-second entry of a run's log, kept as in the file: its compressed bytes are
/// `RunLog::bytes[start..start + len]`.
struct Stored {
    second: u64,
    tag: u16,
    start: usize,
    len: usize,
}

/// One run's per-second histograms, as their compressed bytes (memory in proportion to the
/// file, not to seconds × tags × a histogram's counts array), sorted by second.
struct RunLog {
    path: PathBuf,
    tags: Vec<String>,
    entries: Vec<Stored>,
    bytes: Vec<u8>,
}

/// At most [`MAX_TAGS`] tags in `map`: `tag` may be added if it is there or there is room.
fn room_for<V>(map: &BTreeMap<String, V>, tag: &str) -> Result<(), String> {
    if map.len() >= MAX_TAGS && !map.contains_key(tag) {
        return Err(format!(
            "more than {MAX_TAGS} distinct tags (metrics) across the runs"
        ));
    }
    Ok(())
}

/// Add an entry into the whole-run histogram of its tag.
fn add_total(
    total: &mut BTreeMap<String, Histogram<u64>>,
    p: &Project,
    e: &hlog_read::Entry<'_>,
) -> Result<(), String> {
    room_for(total, e.tag)?;
    let h = total
        .entry(e.tag.to_string())
        .or_insert_with(|| p.histogram());
    e.add_to(h)
}

/// Every histogram in a run's `histograms.hlog`, all intervals added up, by tag: the run's
/// exact totals (what `tickswarm compare` reads percentiles from).
pub fn hlog_totals(path: &Path) -> Result<BTreeMap<String, Histogram<u64>>, MergeError> {
    let p = Project::default();
    let mut total = BTreeMap::new();
    hlog_read::read(path, |e| add_total(&mut total, &p, &e))?;
    Ok(total)
}

/// Read a run's log: its entries kept compressed, and its totals added into `total`.
fn read_hlog(
    path: &Path,
    p: &Project,
    total: &mut BTreeMap<String, Histogram<u64>>,
) -> Result<RunLog, MergeError> {
    let mut out = RunLog {
        path: path.to_path_buf(),
        tags: Vec::new(),
        entries: Vec::new(),
        bytes: Vec::new(),
    };
    let mut ids: BTreeMap<String, u16> = BTreeMap::new();
    hlog_read::read(path, |e| {
        add_total(total, p, &e)?;
        let tag = match ids.get(e.tag) {
            Some(&id) => id,
            None => {
                // The reader allows at most MAX_TAGS (256) tags: an id fits in u16.
                let id = u16::try_from(out.tags.len()).map_err(|_| "too many tags")?;
                ids.insert(e.tag.to_string(), id);
                out.tags.push(e.tag.to_string());
                id
            }
        };
        out.entries.push(Stored {
            second: e.second,
            tag,
            start: out.bytes.len(),
            len: e.encoded.len(),
        });
        out.bytes.extend_from_slice(e.encoded);
        Ok(())
    })?;
    // Stable: entries of one second keep their order.
    out.entries.sort_by_key(|e| e.second);
    Ok(out)
}

/// A run's `summary.json` (at most [`MAX_SUMMARY_BYTES`]), with a message that names the
/// file when it is not one.
pub fn read_summary(path: &Path) -> Result<Summary, MergeError> {
    let file = std::fs::File::open(path).map_err(|e| input_err(path, e.to_string()))?;
    let too_big = || {
        input_err(
            path,
            format!(
                "larger than {} MiB: not a tickswarm summary",
                MAX_SUMMARY_BYTES >> 20
            ),
        )
    };
    // The size it claims refuses early; the limit on the read is what holds.
    if file.metadata().is_ok_and(|m| m.len() > MAX_SUMMARY_BYTES) {
        return Err(too_big());
    }
    let mut text = String::new();
    file.take(MAX_SUMMARY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| input_err(path, e.to_string()))?;
    if text.len() as u64 > MAX_SUMMARY_BYTES {
        return Err(too_big());
    }
    serde_json::from_str(&text)
        .map_err(|e| input_err(path, format!("not a tickswarm summary: {e}")))
}

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

/// The merged result: its summary, and the runs' per-second histograms (for its own hlog, so
/// merged results can be merged again), merged one second at a time by [`Merged::seconds`].
pub struct Merged {
    pub summary: Summary,
    logs: Vec<RunLog>,
}

impl Merged {
    /// The merged histograms of each second, by tag, in second order: one second is in memory
    /// at a time.
    pub fn seconds(&self) -> Seconds<'_> {
        Seconds {
            logs: &self.logs,
            at: vec![0; self.logs.len()],
            only: None,
            decoder: Decoder::default(),
            project: Project::default(),
        }
    }
}

/// What shards say alike: their common value, or `None` when any two differ (`rtt_source`:
/// the merged `rtt_us` mixes sources then, and must not be labelled as one of them).
fn agreed(merged: Option<String>, shard: &Option<String>) -> Option<String> {
    merged.filter(|m| Some(m) == shard.as_ref())
}

/// The merged seconds of a [`Merged`] (see [`Merged::seconds`]).
pub struct Seconds<'a> {
    logs: &'a [RunLog],
    /// Each run's next entry.
    at: Vec<usize>,
    /// Only these tags (the others are skipped, not decoded).
    only: Option<&'a [&'a str]>,
    decoder: Decoder,
    project: Project,
}

/// One merged second: its start second and its histograms by tag, held sparse (a second of
/// one sample costs one counter, not a counts array).
pub type MergedSecond = (u64, BTreeMap<String, Sparse>);

impl Iterator for Seconds<'_> {
    type Item = Result<MergedSecond, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let second = self
            .logs
            .iter()
            .zip(&self.at)
            .filter_map(|(l, &i)| l.entries.get(i).map(|e| e.second))
            .min()?;
        let mut tags: BTreeMap<String, Sparse> = BTreeMap::new();
        for (log, at) in self.logs.iter().zip(self.at.iter_mut()) {
            while let Some(e) = log.entries.get(*at).filter(|e| e.second == second) {
                *at += 1;
                let tag = log.tags[usize::from(e.tag)].as_str();
                if self.only.is_some_and(|only| !only.contains(&tag)) {
                    continue;
                }
                // Checked when the log was read; decoded again here.
                let added = room_for(&tags, tag).and_then(|()| {
                    let d = self.decoder.decode(&log.bytes[e.start..e.start + e.len])?;
                    tags.entry(tag.to_string())
                        .or_default()
                        .add(&self.project, d.counts, d.samples)
                });
                if let Err(err) = added {
                    return Some(Err(format!("{}: {err}", log.path.display())));
                }
            }
        }
        Some(Ok((second, tags)))
    }
}

/// Merge the runs in `dirs` (each with summary.json and histograms.hlog).
/// Merge the runs in `dirs`. Shards must be shards of one run (same count, seed and scenario
/// hash; each index once) and all be there, unless `allow_missing`: then what is there is
/// merged and the verdict fails, naming the missing shards.
pub fn merge_runs(dirs: &[PathBuf], allow_missing: bool) -> Result<Merged, MergeError> {
    // The same folder twice would count its bots and samples twice.
    let mut seen = std::collections::BTreeSet::new();
    for d in dirs {
        let key = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        if !seen.insert(key) {
            return Err(input_err(d, "given twice: each run folder is merged once"));
        }
    }
    // Histograms: exact, from the logs. Totals by tag; the seconds stay compressed.
    let project = Project::default();
    let mut total: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut runs = Vec::new();
    for d in dirs {
        runs.push(read_summary(&d.join("summary.json"))?);
    }
    let Some(first) = runs.first() else {
        return Err(MergeError::Empty);
    };
    let shards = check_shards(&runs, dirs, allow_missing)?;
    if runs.iter().any(|s| s.staircase.is_some()) {
        return merge_staircase_runs(&runs, dirs, shards);
    }
    let mut logs = Vec::new();
    for d in dirs {
        logs.push(read_hlog(&d.join("histograms.hlog"), &project, &mut total)?);
    }
    let mut m = first.clone();
    m.shard = None;
    m.merged_shards = shards.clone();
    for (s, dir) in runs.iter().zip(dirs).skip(1) {
        add_summary(&mut m, s).map_err(|e| {
            input_err(
                &dir.join("summary.json"),
                format!("cannot be added to the runs before it: {e}"),
            )
        })?;
    }

    let digest = |tag: &str| total.get(tag).map(HistSummary::of).unwrap_or_default();
    m.rtt_us = digest("rtt_us");
    m.handshake_us = digest("handshake_us");
    m.snapshot_interarrival_us = digest("snapshot_interarrival_us");
    m.generator.send_lateness_us = digest("send_lateness_us");
    // The saturation rule again on the merged counts (lateness: the worst machine's).
    let due = m.inputs_sent.saturating_add(m.generator.inputs_skipped);
    m.generator.skipped_share = (due > 0).then(|| m.generator.inputs_skipped as f64 / due as f64);
    m.generator.saturated = m
        .generator
        .skipped_share
        .is_some_and(|x| x > super::summary::SATURATION_SKIPPED_SHARE)
        || m.generator
            .lateness_p99_of_period
            .is_some_and(|x| x > super::summary::SATURATION_LATENESS_OF_PERIOD);
    finish_groups(&mut m.groups).map_err(|e| input_err(&dirs[0], e))?;
    m.bandwidth.per_bot_up_bytes_per_s = digest("bot_up_bytes_per_s");
    m.bandwidth.per_bot_down_bytes_per_s = digest("bot_down_bytes_per_s");
    m.bandwidth.packet_size_up_bytes = digest("packet_size_up_bytes");
    m.bandwidth.packet_size_down_bytes = digest("packet_size_down_bytes");
    for (tag, h) in &total {
        if m.protocol_metrics.get(tag).is_some_and(Value::is_object) {
            m.protocol_metrics
                .insert(tag.clone(), serde_json::json!(HistSummary::of(h)));
        }
    }
    // The time histograms stay for the thresholds on percentiles the summary does not list.
    let time_hists: BTreeMap<String, Histogram<u64>> = total
        .into_iter()
        .filter(|(tag, _)| TimeMetric::ALL.iter().any(|m| m.hlog_tag() == tag))
        .collect();

    // Intervals: counters add up; percentiles come from the merged second's histograms; the
    // per-second loss rate is weighted by the packets each run received that second.
    let mut points: BTreeMap<u64, IntervalPoint> = BTreeMap::new();
    let mut loss_weight: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    for (s, dir) in runs.iter().zip(dirs) {
        add_intervals(&mut points, &mut loss_weight, s).map_err(|e| {
            input_err(
                &dir.join("summary.json"),
                format!("its intervals cannot be merged: {e}"),
            )
        })?;
    }
    // Which interval points each start second's percentiles go to.
    let mut wanted: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (k, p) in points.iter_mut() {
        // Interval k (ending at t = k s) started at k - 1 s; a partial one at the last whole
        // second before its end.
        let start = if p.partial {
            (p.t - 1e-9).floor().max(0.0) as u64
        } else {
            k.saturating_sub(1)
        };
        wanted.entry(start).or_default().push(*k);
        if let Some((sum, n)) = loss_weight.get(k) {
            p.loss_down_rate = (*n > 0).then(|| sum / *n as f64);
        }
    }
    // Each group's seconds: percentiles from its own per-second histograms in the logs
    // (`rtt_us{group=NAME}`), never from one shard's figure; none where no log has one.
    let group_tags: Vec<String> = m
        .groups
        .0
        .iter()
        .map(|g| crate::metrics::groups::rtt_tag(&g.name))
        .collect();
    let mut group_points: Vec<Vec<crate::metrics::groups::GroupPoint>> = m
        .groups
        .0
        .iter_mut()
        .map(|g| std::mem::take(&mut g.intervals))
        .collect();
    for p in group_points.iter_mut().flatten() {
        p.rtt_p50_us = None;
        p.rtt_p99_us = None;
    }
    let merged = Merged { summary: m, logs };
    let mut per_second: Vec<&str> = vec!["rtt_us", "send_lateness_us"];
    per_second.extend(group_tags.iter().map(String::as_str));
    let mut seconds = merged.seconds();
    seconds.only = Some(&per_second);
    for second in seconds {
        let (sec, tags) = second.map_err(MergeError::Second)?;
        for (tag, points) in group_tags.iter().zip(group_points.iter_mut()) {
            let Some(h) = tags.get(tag).filter(|h| !h.is_empty()) else {
                continue;
            };
            for p in points
                .iter_mut()
                .filter(|p| start_second(p.t, p.partial) == sec)
            {
                p.rtt_p50_us = Some(h.quantile(&project, 0.5));
                p.rtt_p99_us = Some(h.quantile(&project, 0.99));
            }
        }
        let Some(ks) = wanted.get(&sec) else { continue };
        // As IntervalPoint::set_percentiles reads them from a histogram: none when empty.
        let q = |tag: &str, q: f64| {
            tags.get(tag)
                .filter(|h| !h.is_empty())
                .map(|h| h.quantile(&project, q))
        };
        let (p50, p99, late99) = (
            q("rtt_us", 0.5),
            q("rtt_us", 0.99),
            q("send_lateness_us", 0.99),
        );
        for k in ks {
            if let Some(p) = points.get_mut(k) {
                p.rtt_p50_us = p50;
                p.rtt_p99_us = p99;
                p.lateness_p99_us = late99;
            }
        }
    }
    let Merged {
        summary: mut m,
        logs,
    } = merged;
    m.intervals = points.into_values().collect();
    // From the merged seconds: every shard's bots in each second.
    m.snapshot_rate = crate::metrics::snapshot_rate::SnapshotRate::of(&m.intervals);
    for (g, points) in m.groups.0.iter_mut().zip(group_points) {
        g.intervals = points;
    }

    // Verdict again, from the merged figures. A threshold the runs could not measure stays
    // so (and skipped where they skipped it).
    let mut results = Vec::new();
    for t in &first.thresholds {
        if super::interruption::is_check(t) {
            // Not a threshold: carried over below from every run.
            continue;
        }
        let mut th = Threshold::parse(&t.condition).map_err(|e| input_err(&dirs[0], e))?;
        th.default = t.default;
        let policy = if t.skipped {
            Unmeasurable::Skip
        } else {
            Unmeasurable::Fail
        };
        // The server's own figures are judged on the merged run whichever shard scraped them
        // (the others skipped them, saying so).
        let (policy, unmeasurable) = if matches!(th.metric, crate::metrics::Metric::Server(_)) {
            (Unmeasurable::Fail, None)
        } else {
            (policy, t.unmeasurable.clone())
        };
        if let Some(name) = &th.group {
            // A group's threshold, judged on the merged group.
            let Some(g) = m.groups.get(name) else {
                results.push(super::build::no_such_group(&th));
                continue;
            };
            let exact = |tm: TimeMetric, q: f64| {
                super::groups::time_histogram(g, tm).and_then(|h| quantile_of(&h, q))
            };
            results.push(evaluate_with(
                &th,
                &super::groups::as_summary(g),
                &exact,
                t.unmeasurable.clone(),
                policy,
            ));
            continue;
        }
        let exact = |tm: TimeMetric, q: f64| {
            time_hists
                .get(tm.hlog_tag())
                .and_then(|h| quantile_of(h, q))
        };
        results.push(evaluate_with(&th, &m, &exact, unmeasurable, policy));
    }
    // Missing shards (`--allow-missing`): the load the run asked for was not all measured.
    if let Some(check) = missing_shards_check(shards.as_ref()) {
        let missing: Vec<String> = shards
            .iter()
            .flat_map(|sh| sh.missing.iter().map(u32::to_string))
            .collect();
        results.push(check);
        m.scenario = format!("{} (shards {} missing)", m.scenario, missing.join(", "));
    }
    // A shard cut short: the merged run covers less than the load asked for, and says so
    // as that shard's own check did (its policy, its figure).
    if let Some(c) = runs
        .iter()
        .flat_map(|r| &r.thresholds)
        .filter(|t| super::interruption::is_check(t))
        .min_by_key(|t| t.ok)
    {
        results.push(c.clone());
    }
    m.thresholds = results;
    super::build::record_server_figures(&mut m);
    m.verdict = super::summary::verdict_of(&m.thresholds);
    Ok(Merged { summary: m, logs })
}

/// The shards of a sharded capacity search: the answer from their staircases' windows added
/// step by step ([`super::capacity::merge_staircases`]); the rest of the merged summary is the
/// merged window of the step the answer stands on. The verdict passes when the staircase
/// found an answer (a server capacity, or a lower bound) and every condition on it holds;
/// a shard missing (`--allow-missing`) fails it, as in any merge.
fn merge_staircase_runs(
    runs: &[Summary],
    dirs: &[PathBuf],
    shards: Option<MergedShards>,
) -> Result<Merged, MergeError> {
    let at = |i: usize| {
        dirs.get(i)
            .cloned()
            .unwrap_or_default()
            .join("summary.json")
    };
    let mut stairs = Vec::new();
    for (i, s) in runs.iter().enumerate() {
        match (&s.staircase, s.shard) {
            (Some(st), Some(_)) => stairs.push(st),
            _ => {
                return Err(input_err(
                    &at(i),
                    "is not a shard of a sharded capacity search, and the others are: merge \
                     the shards of one search",
                ))
            }
        }
    }
    let merged = super::capacity::merge_staircases(&stairs).map_err(|e| input_err(&at(0), e))?;
    let Some(first) = runs.first() else {
        return Err(MergeError::Empty);
    };
    let mut m = first.clone();
    m.shard = None;
    m.staircase = None;
    m.merged_shards = shards.clone();
    m.intervals = Vec::new();
    m.snapshot_rate = None;
    m.groups = super::groups::Groups::default();
    if let Some((w, server)) = merged.window {
        super::groups::set_figures(&mut m, &w);
        m.server_metrics = server;
    }
    let found = matches!(
        merged.capacity.limit,
        Some(
            crate::metrics::capacity::CapacityLimit::Server
                | crate::metrics::capacity::CapacityLimit::MaxPlayers
                | crate::metrics::capacity::CapacityLimit::LoadMachine
        )
    );
    m.thresholds = merged.on_answer;
    m.thresholds.extend(missing_shards_check(shards.as_ref()));
    m.capacity = Some(merged.capacity);
    m.verdict = if found {
        super::summary::verdict_of(&m.thresholds)
    } else {
        "fail".into()
    };
    Ok(Merged {
        summary: m,
        logs: Vec::new(),
    })
}

/// The check a merge with shards missing (`--allow-missing`) fails: the load the run asked
/// for was not all measured. `None` when every shard is there.
fn missing_shards_check(shards: Option<&MergedShards>) -> Option<ThresholdResult> {
    let sh = shards.filter(|sh| !sh.missing.is_empty())?;
    Some(ThresholdResult {
        metric: "merged_shards.missing".into(),
        condition: format!("all {} shards merged", sh.count),
        observed: Some(sh.missing.len() as f64),
        ok: false,
        default: true,
        unmeasurable: None,
        skipped: false,
    })
}

/// Shards of one run, all there (or `allow_missing`), or whole runs of one scenario: anything
/// else is refused, naming the run folder and why.
fn check_shards(
    runs: &[Summary],
    dirs: &[PathBuf],
    allow_missing: bool,
) -> Result<Option<MergedShards>, MergeError> {
    let first = &runs[0];
    let at = |i: usize| dirs[i].join("summary.json");
    for (i, s) in runs.iter().enumerate().skip(1) {
        if let (Some(a), Some(b)) = (&first.scenario_hash, &s.scenario_hash) {
            if a != b {
                return Err(input_err(
                    &at(i),
                    format!(
                        "is a run of another scenario than {} (scenario hash {b}, not {a}: another \
                         file, or other --bots/--duration): not parts of one run",
                        dirs[0].display()
                    ),
                ));
            }
        }
        if s.shard.is_some() != first.shard.is_some() {
            let (shard, whole) = if s.shard.is_some() { (i, 0) } else { (0, i) };
            return Err(input_err(
                &at(shard),
                format!(
                    "is a shard, and {} is a whole run: merge the shards of one run, or whole runs",
                    dirs[whole].display()
                ),
            ));
        }
    }
    let Some(f) = first.shard else {
        return Ok(None);
    };
    let mut merged: Vec<u32> = Vec::new();
    for (i, s) in runs.iter().enumerate() {
        let Some(sh) = s.shard else { continue };
        if sh.count != f.count {
            return Err(input_err(
                &at(i),
                format!(
                    "is shard {}/{}, of a run in {} shards, not {}: not shards of one run",
                    sh.index, sh.count, sh.count, f.count
                ),
            ));
        }
        if s.seed != first.seed {
            return Err(input_err(
                &at(i),
                format!(
                    "has seed {}, not {}: not shards of one run",
                    s.seed, first.seed
                ),
            ));
        }
        if merged.contains(&sh.index) {
            return Err(input_err(
                &at(i),
                format!(
                    "is shard {}/{} again: each shard is merged once",
                    sh.index, sh.count
                ),
            ));
        }
        merged.push(sh.index);
    }
    merged.sort_unstable();
    let missing: Vec<u32> = (0..f.count).filter(|i| !merged.contains(i)).collect();
    if !missing.is_empty() && !allow_missing {
        let list: Vec<String> = missing.iter().map(u32::to_string).collect();
        return Err(MergeError::Input {
            path: dirs[0].clone(),
            message: format!(
                "shard{} {} of {} missing: merge every shard of the run, or add --allow-missing to \
                 merge these and fail the verdict",
                if missing.len() == 1 { "" } else { "s" },
                list.join(", "),
                f.count
            ),
        });
    }
    Ok(Some(MergedShards {
        count: f.count,
        merged,
        missing,
    }))
}

/// Add run `s`'s counters into the merged summary `m` (every addition checked).
fn add_summary(m: &mut Summary, s: &Summary) -> Result<(), String> {
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
    into: &mut super::groups::Groups,
    from: &super::groups::Groups,
) -> Result<(), String> {
    use super::groups::{as_summary, decode, encode, project};
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
                    if histograms.len() >= super::groups::MAX_GROUP_HISTOGRAMS {
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
fn start_second(t: f64, partial: bool) -> u64 {
    if partial {
        (t - 1e-9).floor().max(0.0) as u64
    } else {
        (t.round() as u64).saturating_sub(1)
    }
}

/// Two shards' lifecycle counts added (checked).
fn add_lifecycle(
    a: super::groups::LifecycleSummary,
    b: super::groups::LifecycleSummary,
) -> Result<super::groups::LifecycleSummary, String> {
    let (p, q) = (a.planned, b.planned);
    let (d, e) = (a.done, b.done);
    let s = |x: u64, y: u64| sum(x, y, "groups.lifecycle");
    Ok(super::groups::LifecycleSummary {
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
pub(super) fn finish_groups(groups: &mut super::groups::Groups) -> Result<(), String> {
    for g in &mut groups.0 {
        let mut digests: BTreeMap<String, HistSummary> = BTreeMap::new();
        for (tag, text) in &g.histograms {
            let h = super::groups::decode(text).map_err(|e| format!("group {}: {e}", g.name))?;
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
            .is_some_and(|x| x > super::summary::SATURATION_SKIPPED_SHARE)
            || gen
                .lateness_p99_of_period
                .is_some_and(|x| x > super::summary::SATURATION_LATENESS_OF_PERIOD);
    }
    Ok(())
}

/// Fold run `s`'s interval points into `points` (by end second; the partial last ones into
/// one), every addition checked.
fn add_intervals(
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
    a.send_batch_max = match (a.send_batch_max, b.send_batch_max) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Recorder;

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
    use std::time::SystemTime;

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
            s.generator.send_io = super::super::summary::SendIoSummary::of(&io, 10.0);
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

    /// A log written with its format-version header reads back whole: every sample, by tag.
    #[test]
    fn a_log_with_the_version_header_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("histograms.hlog");
        let mut w = super::super::hlog::HlogWriter::create(&path, SystemTime::now(), "t").unwrap();
        let mut rec = Recorder::new();
        let mut all = crate::metrics::new_histogram();
        for v in 1..=1000 {
            rec.record_rtt(v);
        }
        all.add(&rec.rtt_us).unwrap();
        w.interval(0, &rec).unwrap();
        rec.reset();
        rec.record_rtt(20_000);
        all.add(&rec.rtt_us).unwrap();
        w.interval(1, &rec).unwrap();
        drop(w);
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("\n#[Histogram log format version 1.3]\n"));
        let totals = hlog_totals(&path).unwrap();
        let rtt = &totals["rtt_us"];
        assert_eq!(rtt.len(), 1001);
        assert_eq!(rtt, &all);
        assert!(rtt.max() >= 20_000);
    }
}
