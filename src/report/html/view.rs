//! The report's view model for the run-wide sections: header, thresholds, key figures,
//! latency percentiles, errors. Every field is plain text that the template escapes; the
//! template decides the markup.

use crate::metrics::{HistSummary, LossSummary};
use crate::report::format::{fmt_bytes, fmt_duration, fmt_pct, fmt_unit, fmt_us, group_int, Unit};
use crate::report::summary::{IntervalPoint, Summary, ThresholdResult};

/// The verdict badge: its CSS class and its text.
pub(super) struct Verdict {
    pub class: &'static str,
    pub label: String,
}

impl Verdict {
    pub fn of(v: &str) -> Self {
        let (class, label) = match v.to_ascii_lowercase().as_str() {
            "pass" => ("pass", "PASS".to_string()),
            "fail" => ("fail", "FAIL".to_string()),
            "" => ("other", "NO VERDICT".to_string()),
            _ => ("other", v.to_uppercase()),
        };
        Self { class, label }
    }
}

/// One `dt`/`dd` pair in the header.
pub(super) struct Meta {
    pub key: &'static str,
    /// "—" when the summary has nothing.
    pub value: String,
    /// Shown as code (a path).
    pub code: bool,
}

/// The run's identity under the title: protocol stack, target, start, duration, seed, file.
pub(super) fn meta(s: &Summary) -> Vec<Meta> {
    let stack: Vec<&str> = [&s.protocol, &s.transport, &s.dialect]
        .into_iter()
        .map(|x| x.as_str())
        .filter(|x| !x.is_empty())
        .collect();
    let text = |key, value: String| Meta {
        key,
        value: if value.is_empty() {
            "—".into()
        } else {
            value
        },
        code: false,
    };
    let mut meta = vec![
        text("Protocol / transport / dialect", stack.join(" / ")),
        text("Target", s.target.clone()),
        text("Started", s.started_at.clone()),
        text("Duration", fmt_duration(s.duration_s)),
        text("Seed", s.seed.to_string()),
    ];
    // The build it ran against (`run --label`), as the trend page names the run; a label
    // from a summary written elsewhere is cut as the run cuts its own.
    if let Some(label) = s.label.as_deref().filter(|l| !l.is_empty()) {
        meta.push(text("Label", label.chars().take(128).collect()));
    }
    if !s.scenario_file.is_empty() {
        meta.push(Meta {
            key: "Scenario file",
            value: s.scenario_file.clone(),
            code: true,
        });
    }
    meta
}

/// The simulated network the run's datagrams went through (`network:`, a group's
/// `network:`), for the header: `(who, conditions)`, one entry for the whole run or one per
/// group; empty when every bot was on the real link.
pub(super) fn injected_network(s: &Summary) -> Vec<(String, String)> {
    use crate::report::groups::injected;
    const REAL: &str = "real link";
    let out: Vec<(String, String)> = if s.groups.is_empty() {
        vec![("all bots".into(), injected(s.network.as_ref()))]
    } else {
        s.groups
            .0
            .iter()
            .map(|g| (format!("group {}", g.name), injected(g.network.as_ref())))
            .collect()
    };
    if out.iter().all(|(_, n)| n == REAL) {
        return Vec::new();
    }
    out
}

/// A sentence as runs of plain text and `code` (what the sentence wrote between
/// backticks, as the console shows it): the template prints the code runs in `<code>`,
/// both escaped. An unpaired backtick is kept as text.
#[derive(Debug, PartialEq)]
pub(super) struct Run {
    pub code: bool,
    pub text: String,
}

pub(super) fn code_spans(sentence: &str) -> Vec<Run> {
    let parts: Vec<&str> = sentence.split('`').collect();
    // An odd number of backticks: the last one opens nothing.
    let paired = parts.len() % 2 == 1;
    let mut out: Vec<Run> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let code = i % 2 == 1 && (paired || i + 1 < parts.len());
        let text = if i % 2 == 1 && !code {
            format!("`{part}")
        } else {
            (*part).to_string()
        };
        if text.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if !last.code && !code => last.text.push_str(&text),
            _ => out.push(Run { code, text }),
        }
    }
    out
}

/// A threshold as a table row, the observed value in the metric's unit.
pub(super) struct ThresholdRow {
    pub metric: String,
    pub condition: String,
    pub observed: String,
    pub ok: bool,
    /// Left out of the verdict: the run could not measure it and the scenario skips such.
    pub skipped: bool,
}

pub(super) fn thresholds(ts: &[ThresholdResult]) -> Vec<ThresholdRow> {
    ts.iter()
        .map(|t| ThresholdRow {
            metric: t.metric.clone(),
            condition: t.condition.clone(),
            observed: match (t.observed, &t.unmeasurable) {
                (_, Some(why)) => format!("not measurable against this server ({why})"),
                // The console's and junit.xml's formatter: one figure, one text.
                (v, None) => crate::report::build::format_observed(&t.metric, v),
            },
            ok: t.ok,
            skipped: t.skipped,
        })
        .collect()
}

/// A figure card: a name, a large value, a sub-line.
pub(super) struct Card {
    pub key: String,
    pub value: String,
    /// The value is an explanation ("not measurable"), not a figure: shown muted.
    pub value_na: bool,
    pub sub: String,
    /// How the figure is measured, on its own line under the sub-line: its first clause,
    /// with the whole description as the hover text (the chart's caption gives it in full).
    pub method: Option<String>,
    /// The whole description of how the figure is measured, when `method` is cut short.
    pub method_title: Option<String>,
    /// An SVG drawn by [`super::chart`], shown under the figure (the card is then wider).
    pub chart: Option<String>,
    /// The value is a problem (shown in red).
    pub bad: bool,
    /// The sub-line is a problem.
    pub bad_sub: bool,
}

impl Card {
    pub fn new(key: impl Into<String>, value: String, sub: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value,
            value_na: false,
            sub: sub.into(),
            method: None,
            method_title: None,
            chart: None,
            bad: false,
            bad_sub: false,
        }
    }
}

/// The card that shows each threshold metric (its summary.json path), so a failed threshold
/// turns its card red.
const CARD_OF_METRIC: &[(&str, &str)] = &[
    ("bots.failed", "Bots failed"),
    ("bots.connect_rate", "Bots connected"),
    ("rtt_us.p50", "RTT p50"),
    ("rtt_us.p99", "RTT p99"),
    ("rtt_us.max", "RTT max"),
    ("handshake_us.p50", "Handshake p50"),
    ("handshake_us.p99", "Handshake p99"),
    ("loss.downstream.rate", "Downstream loss"),
    ("loss.upstream.rate", "Upstream loss"),
    ("snapshots_applied", "Snapshots applied"),
    ("generator.inputs_skipped", "Inputs sent"),
];

/// `cards` with the ones whose metric failed a threshold shown as a problem.
pub(super) fn mark_failed(mut cards: Vec<Card>, ts: &[ThresholdResult]) -> Vec<Card> {
    for t in ts.iter().filter(|t| !t.ok) {
        let Some((_, key)) = CARD_OF_METRIC.iter().find(|(m, _)| *m == t.metric) else {
            continue;
        };
        for c in cards.iter_mut().filter(|c| c.key == *key) {
            c.bad = true;
        }
    }
    cards
}

/// Where the run's RTT samples come from (`rtt_source`), as the report says it beside every
/// RTT figure; `None` when the summary names no source.
pub(super) fn rtt_source_label(s: &Summary) -> Option<&'static str> {
    match s.rtt_source.as_deref() {
        Some("protocol_ping") => Some("from the bots' pings"),
        Some("enet_acks") => Some("from ENet acks"),
        _ => None,
    }
}

/// The figures read first: bots, RTT, handshake, loss, bandwidth, inputs, snapshots.
pub(super) fn key_figures(s: &Summary) -> Vec<Card> {
    let mut cards: Vec<Card> = Vec::new();
    let b = &s.bots;
    cards.push(Card::new("Bots planned", group_int(b.planned), ""));
    let pct = if b.planned > 0 {
        format!(
            "{} of planned",
            fmt_pct(b.connected as f64 / b.planned as f64)
        )
    } else {
        String::new()
    };
    cards.push(Card::new("Bots connected", group_int(b.connected), pct));
    let mut failed = Card::new("Bots failed", group_int(b.failed), "handshake failures");
    failed.bad = b.failed > 0;
    cards.push(failed);

    let rtt = &s.rtt_us;
    let rtt_n = match rtt_source_label(s) {
        Some(from) => format!("{} samples {from}", group_int(rtt.count)),
        None => format!("{} samples", group_int(rtt.count)),
    };
    cards.push(Card::new("RTT p50", hist_value(rtt, rtt.p50), &rtt_n));
    cards.push(Card::new("RTT p99", hist_value(rtt, rtt.p99), &rtt_n));
    cards.push(Card::new("RTT max", hist_value(rtt, rtt.max), rtt_n));
    let hs = &s.handshake_us;
    let hs_n = format!("{} handshakes", group_int(hs.count));
    cards.push(Card::new("Handshake p50", hist_value(hs, hs.p50), &hs_n));
    cards.push(Card::new("Handshake p99", hist_value(hs, hs.p99), hs_n));

    cards.push(loss_card(
        "Downstream loss",
        s.loss.downstream.as_ref(),
        &s.loss_method.downstream,
        "no data",
    ));
    cards.push(loss_card(
        "Upstream loss",
        s.loss.upstream.as_ref(),
        &s.loss_method.upstream,
        "not measurable",
    ));

    let bot_seconds = bot_seconds(s);
    let per_bot = |bytes: u64| match bot_seconds {
        Some(bs) => format!("≈ {}/s per bot", fmt_bytes(bytes as f64 / bs)),
        None => "per bot: n/a".into(),
    };
    let bw = &s.bandwidth;
    // On the wire (what crosses the sockets, transport overhead included) when it was
    // measured; the protocol's own payload beside it, with one bot's second as a distribution.
    let side = |wire: u64, wire_packets: u64, payload: u64, packets: u64, per_s: &HistSummary| {
        let per_bot_dist = if per_s.count > 0 {
            format!(
                " · one bot p50 {}/s p99 {}/s",
                fmt_bytes(per_s.p50 as f64),
                fmt_bytes(per_s.p99 as f64)
            )
        } else {
            String::new()
        };
        if wire_packets > 0 {
            let sub = format!(
                "{} on the wire · {} datagrams · payload {} in {} messages{}",
                per_bot(wire),
                group_int(wire_packets),
                fmt_bytes(payload as f64),
                group_int(packets),
                per_bot_dist
            );
            (fmt_bytes(wire as f64), sub)
        } else {
            let sub = format!(
                "{} · {} packets{}",
                per_bot(payload),
                group_int(packets),
                per_bot_dist
            );
            (fmt_bytes(payload as f64), sub)
        }
    };
    let (up, up_sub) = side(
        bw.wire_up_bytes,
        bw.wire_up_packets,
        bw.up_bytes,
        bw.up_packets,
        &bw.per_bot_up_bytes_per_s,
    );
    let (down, down_sub) = side(
        bw.wire_down_bytes,
        bw.wire_down_packets,
        bw.down_bytes,
        bw.down_packets,
        &bw.per_bot_down_bytes_per_s,
    );
    // The card's figure is a rate over the run (a total read where a rate is expected
    // misleads); the total is in its sub-line.
    let rate = |total: String, bytes: u64, sub: String| {
        if s.duration_s.is_finite() && s.duration_s > 0.0 {
            (
                format!("{}/s", fmt_bytes(bytes as f64 / s.duration_s)),
                format!(
                    "{total} in total over {} · {sub}",
                    fmt_duration(s.duration_s)
                ),
            )
        } else {
            (total, format!("in total · {sub}"))
        }
    };
    // The bytes the card shows: on the wire when measured, as `side` chose.
    let shown = |wire_packets: u64, wire: u64, payload: u64| {
        if wire_packets > 0 {
            wire
        } else {
            payload
        }
    };
    let up_bytes = shown(bw.wire_up_packets, bw.wire_up_bytes, bw.up_bytes);
    let down_bytes = shown(bw.wire_down_packets, bw.wire_down_bytes, bw.down_bytes);
    let (up, up_sub) = rate(up, up_bytes, up_sub);
    let (down, down_sub) = rate(down, down_bytes, down_sub);
    cards.push(Card::new("Bandwidth up", up, up_sub));
    cards.push(Card::new("Bandwidth down", down, down_sub));
    let skipped = s.generator.inputs_skipped;
    let mut inputs = Card::new(
        "Inputs sent",
        group_int(s.inputs_sent),
        format!("{} skipped (generator behind)", group_int(skipped)),
    );
    // The same rule as the console and summary.json (`generator.saturated`).
    inputs.bad_sub = s.generator.saturated || s.generator.cpu_bound_seconds > 0;
    if s.generator.cpu_bound_seconds > 0 {
        // The console's rule too: a worker at 90 % of a core while slots were skipped.
        inputs.sub = format!(
            "{}; the generator, not the server, was the limit in {} s (a worker at ≥ 90 % CPU \
             while slots were skipped)",
            inputs.sub, s.generator.cpu_bound_seconds
        );
    }
    cards.push(inputs);
    cards.push(Card::new(
        "Snapshots applied",
        group_int(s.snapshots_applied),
        "",
    ));
    cards
}

/// A percentile of a time histogram, or "—" when it has no samples.
fn hist_value(h: &HistSummary, v: u64) -> String {
    if h.count == 0 {
        "—".into()
    } else {
        fmt_us(v as f64)
    }
}

/// A loss card; a direction the protocol cannot measure says so, with the reason.
/// `none`: what the card says when nothing was measured ("no data" downstream, "not
/// measurable" where the protocol has no way to measure it).
fn loss_card(key: &'static str, loss: Option<&LossSummary>, method: &str, none: &str) -> Card {
    // "not measurable: why" under a card whose value says "not measurable": the why.
    let shown = match loss {
        None => method
            .strip_prefix(none)
            .map(|rest| rest.trim_start_matches([':', ' ']))
            .unwrap_or(method),
        Some(_) => method,
    };
    let (short, title) = match first_clause(shown) {
        Some(head) if head != method.trim() => (Some(head), Some(method.to_string())),
        Some(head) => (Some(head), None),
        None => (None, None),
    };
    match loss {
        Some(l) => {
            let lost = l.expected.saturating_sub(l.received);
            let sub = format!("{} of {} lost", group_int(lost), group_int(l.expected));
            Card {
                method: short,
                method_title: title,
                ..Card::new(key, fmt_pct(l.rate), sub)
            }
        }
        None => Card {
            value_na: true,
            method: short,
            method_title: title,
            ..Card::new(key, none.into(), "")
        },
    }
}

/// A measuring method's first clause, short enough for a card (a protocol's description can
/// run to a paragraph): up to the first `;`, `:` or ` (`, then at most 60 characters.
fn first_clause(method: &str) -> Option<String> {
    let method = method.trim();
    if method.is_empty() {
        return None;
    }
    let end = [method.find(';'), method.find(':'), method.find(" (")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(method.len());
    let head = method[..end].trim_end();
    const MAX: usize = 60;
    if head.chars().count() <= MAX {
        return Some(if end < method.len() {
            format!("{head}…")
        } else {
            head.to_string()
        });
    }
    let cut: String = head.chars().take(MAX).collect();
    let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(a, _)| a);
    Some(format!("{cut}…"))
}

/// Connected-bot seconds over the run (the integral of the bots-connected series), used for
/// per-bot bandwidth. Falls back to connected × duration when there are no intervals.
fn bot_seconds(s: &Summary) -> Option<f64> {
    let from_intervals: f64 = interval_widths(&s.intervals)
        .zip(&s.intervals)
        .map(|(dt, p)| dt * p.bots_connected as f64)
        .sum();
    let bs = if from_intervals > 0.0 {
        from_intervals
    } else {
        s.bots.connected as f64 * s.duration_s
    };
    (bs.is_finite() && bs > 0.0).then_some(bs)
}

/// Length in seconds of each interval (`t` is the end of the interval). The run's last,
/// partial interval can be much shorter than a second, or take no time at all (the goodbyes
/// sent at the stop, stamped with the same `t` as the last whole second): its width is what
/// it is, 0 included, never a made-up second.
pub(super) fn interval_widths(iv: &[IntervalPoint]) -> impl Iterator<Item = f64> + '_ {
    iv.iter().enumerate().map(|(i, p)| {
        let prev = if i == 0 { 0.0 } else { iv[i - 1].t };
        let dt = p.t - prev;
        if dt.is_finite() && dt > 0.0 {
            dt
        } else {
            0.0
        }
    })
}

/// What a protocol says about one of its metrics, shown beside the metric's key.
pub(super) struct Described {
    pub label: String,
    pub about: String,
}

/// A histogram as a row of the percentile tables: count, min, mean, p50, p90, p99, p99.9, max.
pub(super) struct HistRow {
    pub name: String,
    pub described: Option<Described>,
    pub count: String,
    /// Seven formatted cells, "—" each when the histogram is empty.
    pub cells: Vec<String>,
}

impl HistRow {
    /// A row whose values are printed by `fmt` (a unit's or a protocol metric's formatter).
    pub fn new(name: String, h: &HistSummary, fmt: &dyn Fn(f64) -> String) -> Self {
        let values = [
            h.min as f64,
            h.mean,
            h.p50 as f64,
            h.p90 as f64,
            h.p99 as f64,
            h.p999 as f64,
            h.max as f64,
        ];
        let cells = values
            .iter()
            .map(|&v| if h.count == 0 { "—".into() } else { fmt(v) })
            .collect();
        Self {
            name,
            described: None,
            count: group_int(h.count),
            cells,
        }
    }
}

/// The run-wide histograms, all times.
pub(super) fn latency(s: &Summary) -> Vec<HistRow> {
    let micros = |v| fmt_unit(Unit::Micros, v);
    [
        ("rtt_us", &s.rtt_us),
        ("handshake_us", &s.handshake_us),
        ("snapshot_interarrival_us", &s.snapshot_interarrival_us),
        ("generator.send_lateness_us", &s.generator.send_lateness_us),
    ]
    .into_iter()
    .map(|(name, h)| HistRow::new(name.to_string(), h, &micros))
    .collect()
}

/// One error reason and its count.
pub(super) struct ErrorRow {
    pub kind: &'static str,
    /// What the kind means (a hover title).
    pub what: &'static str,
    pub reason: String,
    pub count: String,
}

/// Errors by kind and reason, and their total; `None` when the run had none.
pub(super) fn errors(s: &Summary) -> Option<(Vec<ErrorRow>, String)> {
    let groups = [
        ("decode", "malformed datagram dropped", &s.errors.decode),
        ("connect", "handshake failed", &s.errors.connect),
        ("send", "local send failure", &s.generator.send_errors),
    ];
    if groups.iter().all(|(_, _, m)| m.is_empty()) {
        return None;
    }
    let total: u64 = groups.iter().flat_map(|(_, _, m)| m.values()).sum();
    let rows = groups
        .into_iter()
        .flat_map(|(kind, what, m)| {
            m.iter().map(move |(reason, n)| ErrorRow {
                kind,
                what,
                reason: reason.clone(),
                count: group_int(*n),
            })
        })
        .collect();
    Some((rows, group_int(total)))
}

#[cfg(test)]
mod tests {
    use super::first_clause;

    #[test]
    fn a_card_shows_the_method_s_first_clause() {
        assert_eq!(first_clause(""), None);
        assert_eq!(first_clause("tick gaps").as_deref(), Some("tick gaps"));
        assert_eq!(
            first_clause("per-connection header seq gaps (reordering, duplicates); otherwise")
                .as_deref(),
            Some("per-connection header seq gaps…")
        );
        assert_eq!(
            first_clause("implementation dialect: snapshot ticks").as_deref(),
            Some("implementation dialect…")
        );
        let long = "a ".repeat(50);
        let cut = first_clause(&long).expect("cut");
        assert!(cut.ends_with('…') && cut.chars().count() <= 61, "{cut}");
    }
}
