//! `tickswarm merge`: one result from runs on several load machines.
//!
//! Counters add up. Histograms are rebuilt exactly from each run's `histograms.hlog` (the
//! per-second interval histograms, added), so merged percentiles are true percentiles of all
//! samples, not averages of percentiles. Thresholds are evaluated again on the merged result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;
use thiserror::Error;

use super::build::evaluate;
use super::summary::{IntervalPoint, Summary};
use crate::metrics::Threshold;
use crate::metrics::{new_histogram, HistSummary, LossSummary};

#[derive(Debug, Error)]
pub enum MergeError {
    #[error("{path}: {message}")]
    Input { path: PathBuf, message: String },
    #[error("nothing to merge: give at least one run folder")]
    Empty,
}

fn input_err(path: &Path, message: impl Into<String>) -> MergeError {
    MergeError::Input {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// One run's histograms from its hlog: totals by tag, and by second and tag.
#[derive(Default)]
struct RunHistograms {
    total: BTreeMap<String, Histogram<u64>>,
    by_second: BTreeMap<u64, BTreeMap<String, Histogram<u64>>>,
}

fn add_into(map: &mut BTreeMap<String, Histogram<u64>>, tag: &str, h: &Histogram<u64>) {
    let e = map.entry(tag.to_string()).or_insert_with(new_histogram);
    // Both sides have the project's bounds; a foreign log with wider values saturates.
    if e.add(h).is_err() {
        for v in h.iter_recorded() {
            e.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

/// Every histogram in a run's `histograms.hlog`, all intervals added up, by tag: the run's
/// exact totals (what `tickswarm compare` reads percentiles from).
pub fn hlog_totals(path: &Path) -> Result<BTreeMap<String, Histogram<u64>>, MergeError> {
    read_hlog(path).map(|h| h.total)
}

fn read_hlog(path: &Path) -> Result<RunHistograms, MergeError> {
    let bytes = std::fs::read(path).map_err(|e| input_err(path, e.to_string()))?;
    let mut de = Deserializer::new();
    let mut out = RunHistograms::default();
    for (i, entry) in IntervalLogIterator::new(&bytes).enumerate() {
        let entry = entry.map_err(|e| input_err(path, format!("entry {i}: {e:?}")))?;
        let LogEntry::Interval(iv) = entry else {
            continue;
        };
        let tag = iv.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(iv.encoded_histogram())
            .map_err(|e| input_err(path, format!("entry {i}: {e}")))?;
        let h: Histogram<u64> = de
            .deserialize(&mut raw.as_slice())
            .map_err(|e| input_err(path, format!("entry {i}: {e:?}")))?;
        add_into(&mut out.total, &tag, &h);
        let sec = iv.start_timestamp().as_secs();
        add_into(out.by_second.entry(sec).or_default(), &tag, &h);
    }
    Ok(out)
}

/// A run's `summary.json`, with a message that names the file when it is not one.
pub fn read_summary(path: &Path) -> Result<Summary, MergeError> {
    let text = std::fs::read_to_string(path).map_err(|e| input_err(path, e.to_string()))?;
    serde_json::from_str(&text)
        .map_err(|e| input_err(path, format!("not a tickswarm summary: {e}")))
}

fn add_maps(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn add_loss(a: Option<LossSummary>, b: Option<LossSummary>) -> Option<LossSummary> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let expected = a.expected + b.expected;
            let received = a.received + b.received;
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
    }
}

/// What shards say alike: their common value, or `None` when any two differ (`rtt_source`:
/// the merged `rtt_us` mixes sources then, and must not be labelled as one of them).
fn agreed(merged: Option<String>, shard: &Option<String>) -> Option<String> {
    merged.filter(|m| Some(m) == shard.as_ref())
}

/// The merged result: its summary, and its histograms by second and tag (for its own hlog,
/// so merged results can be merged again).
pub struct Merged {
    pub summary: Summary,
    pub by_second: BTreeMap<u64, BTreeMap<String, Histogram<u64>>>,
}

/// Merge the runs in `dirs` (each with summary.json and histograms.hlog).
pub fn merge_runs(dirs: &[PathBuf]) -> Result<Merged, MergeError> {
    // The same folder twice would count its bots and samples twice.
    let mut seen = std::collections::BTreeSet::new();
    for d in dirs {
        let key = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        if !seen.insert(key) {
            return Err(input_err(d, "given twice: each run folder is merged once"));
        }
    }
    let mut runs = Vec::new();
    for d in dirs {
        let s = read_summary(&d.join("summary.json"))?;
        let h = read_hlog(&d.join("histograms.hlog"))?;
        runs.push((s, h));
    }
    let Some((first, _)) = runs.first() else {
        return Err(MergeError::Empty);
    };
    let mut m = first.clone();
    for (s, _) in runs.iter().skip(1) {
        if s.protocol != m.protocol {
            return Err(MergeError::Input {
                path: dirs[0].clone(),
                message: format!(
                    "runs speak different protocols ({} and {})",
                    m.protocol, s.protocol
                ),
            });
        }
        m.rtt_source = agreed(m.rtt_source.take(), &s.rtt_source);
        m.bots.planned += s.bots.planned;
        m.bots.connected += s.bots.connected;
        m.bots.failed += s.bots.failed;
        m.duration_s = m.duration_s.max(s.duration_s);
        m.interrupted |= s.interrupted;
        if !m.target.split(" + ").any(|t| t == s.target) {
            m.target = format!("{} + {}", m.target, s.target);
        }
        m.generator.inputs_skipped += s.generator.inputs_skipped;
        m.generator.lateness_p99_of_period = match (
            m.generator.lateness_p99_of_period,
            s.generator.lateness_p99_of_period,
        ) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        m.generator.workers += s.generator.workers;
        add_maps(&mut m.generator.send_errors, &s.generator.send_errors);
        m.loss.downstream = add_loss(m.loss.downstream, s.loss.downstream);
        m.loss.upstream = add_loss(m.loss.upstream, s.loss.upstream);
        m.bandwidth.up_bytes += s.bandwidth.up_bytes;
        m.bandwidth.down_bytes += s.bandwidth.down_bytes;
        m.bandwidth.up_packets += s.bandwidth.up_packets;
        m.bandwidth.down_packets += s.bandwidth.down_packets;
        m.bandwidth.wire_up_bytes += s.bandwidth.wire_up_bytes;
        m.bandwidth.wire_down_bytes += s.bandwidth.wire_down_bytes;
        m.bandwidth.wire_up_packets += s.bandwidth.wire_up_packets;
        m.bandwidth.wire_down_packets += s.bandwidth.wire_down_packets;
        m.inputs_sent += s.inputs_sent;
        m.snapshots_applied += s.snapshots_applied;
        add_maps(&mut m.errors.decode, &s.errors.decode);
        add_maps(&mut m.errors.connect, &s.errors.connect);
        m.source_addresses = crate::scenario::source_pool::merge_counts(
            m.source_addresses.take(),
            s.source_addresses.as_ref(),
        );
        for (k, v) in &s.protocol_metrics {
            if let (Some(Value::Number(a)), Value::Number(b)) = (m.protocol_metrics.get(k), v) {
                if let (Some(a), Some(b)) = (a.as_u64(), b.as_u64()) {
                    m.protocol_metrics.insert(k.clone(), Value::from(a + b));
                }
            } else if !m.protocol_metrics.contains_key(k) {
                m.protocol_metrics.insert(k.clone(), v.clone());
            }
        }
    }

    // Histograms: exact, from the logs.
    let mut total: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut by_second: BTreeMap<u64, BTreeMap<String, Histogram<u64>>> = BTreeMap::new();
    for (_, h) in &runs {
        for (tag, hist) in &h.total {
            add_into(&mut total, tag, hist);
        }
        for (sec, tags) in &h.by_second {
            let slot = by_second.entry(*sec).or_default();
            for (tag, hist) in tags {
                add_into(slot, tag, hist);
            }
        }
    }
    let digest = |tag: &str| total.get(tag).map(HistSummary::of).unwrap_or_default();
    m.rtt_us = digest("rtt_us");
    m.handshake_us = digest("handshake_us");
    m.snapshot_interarrival_us = digest("snapshot_interarrival_us");
    m.generator.send_lateness_us = digest("send_lateness_us");
    // The saturation rule again on the merged counts (lateness: the worst machine's).
    let due = m.inputs_sent + m.generator.inputs_skipped;
    m.generator.skipped_share = (due > 0).then(|| m.generator.inputs_skipped as f64 / due as f64);
    m.generator.saturated = m
        .generator
        .skipped_share
        .is_some_and(|x| x > super::summary::SATURATION_SKIPPED_SHARE)
        || m.generator
            .lateness_p99_of_period
            .is_some_and(|x| x > super::summary::SATURATION_LATENESS_OF_PERIOD);
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

    // Intervals: counters add up; percentiles come from the merged second's histograms; the
    // per-second loss rate is weighted by the packets each run received that second.
    let mut points: BTreeMap<u64, IntervalPoint> = BTreeMap::new();
    let mut loss_weight: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    for (s, _) in &runs {
        for p in &s.intervals {
            // Each run's last, partial interval ends at its own time: they merge into one last
            // point, at the latest end.
            let k = if p.partial {
                u64::MAX
            } else {
                p.t.round() as u64
            };
            let e = points.entry(k).or_insert_with(|| IntervalPoint {
                t: p.t,
                partial: p.partial,
                ..IntervalPoint::default()
            });
            e.t = e.t.max(p.t);
            e.bots_connected += p.bots_connected;
            e.packets_up += p.packets_up;
            e.packets_down += p.packets_down;
            e.bytes_up += p.bytes_up;
            e.bytes_down += p.bytes_down;
            e.inputs_sent += p.inputs_sent;
            e.snapshots_applied += p.snapshots_applied;
            // Each run's bots are its own: phases, waiting groups and targets add up.
            e.phases.merge(&p.phases);
            crate::metrics::phases::merge_waiting(&mut e.waiting, &p.waiting);
            crate::metrics::phases::merge_targets(&mut e.targets, &p.targets);
            let w = loss_weight.entry(k).or_default();
            w.0 += p.loss_down_rate * p.packets_down as f64;
            w.1 += p.packets_down;
        }
    }
    for (k, p) in points.iter_mut() {
        // Interval k (ending at t = k s) started at k - 1 s; a partial one at the last whole
        // second before its end.
        let start = if p.partial {
            (p.t - 1e-9).floor().max(0.0) as u64
        } else {
            k.saturating_sub(1)
        };
        if let Some(tags) = by_second.get(&start) {
            p.set_percentiles(tags.get("rtt_us"), tags.get("send_lateness_us"));
        }
        if let Some((sum, n)) = loss_weight.get(k) {
            p.loss_down_rate = if *n == 0 { 0.0 } else { sum / *n as f64 };
        }
    }
    m.intervals = points.into_values().collect();

    // Verdict again, from the merged figures.
    let mut results = Vec::new();
    for t in &first.thresholds {
        let th = Threshold::parse(&t.condition).map_err(|e| input_err(&dirs[0], e))?;
        results.push(evaluate(&th, &m));
    }
    m.thresholds = results;
    m.verdict = if m.thresholds.iter().all(|t| t.ok) {
        "pass".into()
    } else {
        "fail".into()
    };
    Ok(Merged {
        summary: m,
        by_second,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Recorder;
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
