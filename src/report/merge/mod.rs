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
//!
//! Three files, each above the one before: `add.rs` adds one run's figures into the merged
//! ones (the checked sums, a group's histograms), [`staircase`] merges the shards of a
//! sharded capacity search with them, and this file reads the run folders and merges runs.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde_json::Value;
use thiserror::Error;

mod add;
pub mod staircase;

pub use add::MAX_GROUPS;
use add::{add_intervals, add_summary, finish_groups, start_second};
use staircase::merge_staircases;

use super::build::{evaluate_with, quantile_of};
use super::hlog_read::{self, Decoder, HlogError, Project, Sparse, MAX_TAGS};
use super::summary::{IntervalPoint, MergedShards, Summary, ThresholdResult};
use crate::metrics::threshold::{TimeMetric, Unmeasurable};
use crate::metrics::HistSummary;
use crate::metrics::Threshold;

/// The largest summary.json read (64 MiB): an hour-long run's is a few MB.
pub const MAX_SUMMARY_BYTES: u64 = 64 << 20;

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
    // The machines' CPU (summed in `add_summary`) over their datagrams, summed likewise.
    let (cpu, sent, received) = (
        m.generator.cpu_ns,
        m.bandwidth.wire_up_packets,
        m.bandwidth.wire_down_packets,
    );
    m.generator.set_cpu(cpu, sent, received);
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
/// step by step ([`merge_staircases`]); the rest of the merged summary is the
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
    let merged = merge_staircases(&stairs).map_err(|e| input_err(&at(0), e))?;
    let Some(first) = runs.first() else {
        return Err(MergeError::Empty);
    };
    let mut m = first.clone();
    m.shard = None;
    m.staircase = None;
    m.merged_shards = shards.clone();
    m.intervals = Vec::new();
    m.snapshot_rate = None;
    m.groups = super::summary::Groups::default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Recorder;
    use std::time::SystemTime;

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
