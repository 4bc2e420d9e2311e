//! The protocol's own metrics: highlight cards for the ones its protocol marked `card` or
//! `chart`, and the generic tables that list every metric it reported.
//!
//! Nothing here knows a protocol. What a metric is called, what it measures, its unit and
//! where it goes all come from `protocol_metric_info` in the summary, so a new protocol (or
//! a summary merged from several machines) is shown without a change here.

use serde_json::{Map, Number, Value};

use super::chart::percentile_chart;
use super::view::{Card, Described, HistRow};
use crate::metrics::describe::Display;
use crate::metrics::{HistSummary, MetricInfo};
use crate::report::format::{fmt_plain, fmt_unit, group_int, metric_unit, metric_value, Unit};
use crate::report::summary::Summary;

/// Cards for the metrics the protocol wants read first. Histograms show p50 large, then p99
/// and what the metric measures; counters show the count and, when the protocol asked for
/// it, the rate per bot-minute. Metrics with `chart` get their percentiles drawn too; those
/// wider cards come last so they don't leave holes in the grid. Metrics the run did not
/// record (or histograms without samples) get no card.
pub(super) fn highlights(s: &Summary) -> Vec<Card> {
    let m = &s.protocol_metrics;
    let mut cards = Vec::new();
    let mut counters = Vec::new();
    let mut charts = Vec::new();
    for (key, info) in &s.protocol_metric_info {
        if info.display == Display::Table {
            continue;
        }
        match m.get(key) {
            Some(Value::Object(o)) => {
                let Some(h) = as_hist(o) else { continue };
                if h.count == 0 {
                    continue;
                }
                let fmt = |v: u64| metric_value(info, v as f64);
                let sub = join_dot(&[&format!("p50 · p99 {}", fmt(h.p99)), &info.about]);
                let mut card = Card::new(&info.label, fmt(h.p50), sub);
                if info.display == Display::Chart {
                    card.chart = Some(percentile_chart(&info.label, &h, &fmt));
                    charts.push(card);
                } else {
                    cards.push(card);
                }
            }
            Some(Value::Number(n)) => {
                let rate = if info.per_bot_minute {
                    m.get(&format!("{key}_per_bot_minute"))
                        .and_then(Value::as_f64)
                        .map(|r| format!("{} per bot-minute", fmt_plain(r)))
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                let sub = join_dot(&[&rate, &info.about]);
                counters.push(Card::new(&info.label, number(n, Some(info)), sub));
            }
            _ => {}
        }
    }
    cards.extend(counters);
    cards.extend(charts);
    cards
}

/// The non-empty parts joined by " · ".
fn join_dot(parts: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A named value that is not a histogram.
pub(super) struct CounterRow {
    pub name: String,
    pub described: Option<Described>,
    pub value: String,
}

/// Every protocol metric, split into percentile rows and counter rows.
pub(super) struct Tables {
    pub hists: Vec<HistRow>,
    pub counters: Vec<CounterRow>,
}

impl Tables {
    pub fn is_empty(&self) -> bool {
        self.hists.is_empty() && self.counters.is_empty()
    }
}

/// All of `protocol_metrics` as tables; nested objects become dotted names.
pub(super) fn tables(s: &Summary) -> Tables {
    let mut t = Tables {
        hists: Vec::new(),
        counters: Vec::new(),
    };
    flatten("", &s.protocol_metrics, s, &mut t);
    t
}

/// Walk the protocol_metrics map: objects shaped like [`HistSummary`] become percentile rows,
/// other objects are walked with dotted names, numbers are counters, anything else is shown as
/// JSON text. A metric the protocol described is printed in its unit, under its label.
fn flatten(prefix: &str, m: &Map<String, Value>, s: &Summary, out: &mut Tables) {
    for (k, v) in m {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let info = s.protocol_metric_info.get(&name);
        let described = info.map(|i| Described {
            label: i.label.clone(),
            about: i.about.clone(),
        });
        match v {
            Value::Object(o) => match as_hist(o) {
                Some(h) => {
                    let mut row = match info {
                        Some(info) => HistRow::new(name, &h, &|v| metric_value(info, v)),
                        None => {
                            // A rate is a fraction of one sample, not of a histogram value.
                            let unit = match metric_unit(&name) {
                                Unit::Rate => Unit::Plain,
                                unit => unit,
                            };
                            HistRow::new(name, &h, &|v| fmt_unit(unit, v))
                        }
                    };
                    row.described = described;
                    out.hists.push(row);
                }
                None => flatten(&name, o, s, out),
            },
            other => {
                let value = match other {
                    Value::Number(n) => number(n, info),
                    Value::Null => "—".into(),
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                out.counters.push(CounterRow {
                    name,
                    described,
                    value,
                });
            }
        }
    }
}

/// A JSON number: exact grouped integers for plain counts, the protocol's unit otherwise.
fn number(n: &Number, info: Option<&MetricInfo>) -> String {
    let plain_count = info.is_none_or(|i| i.scale <= 1 && matches!(i.unit.as_str(), "count" | ""));
    if let (Some(info), false) = (info, plain_count) {
        return metric_value(info, n.as_f64().unwrap_or(f64::NAN));
    }
    if let Some(u) = n.as_u64() {
        group_int(u)
    } else if let Some(i) = n.as_i64() {
        format!("-{}", group_int(i.unsigned_abs()))
    } else {
        fmt_plain(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// A histogram summary, if the object has its shape.
fn as_hist(o: &Map<String, Value>) -> Option<HistSummary> {
    let shaped = ["count", "min", "mean", "p50", "p99", "max"]
        .iter()
        .all(|k| o.contains_key(*k));
    if !shaped {
        return None;
    }
    serde_json::from_value(Value::Object(o.clone())).ok()
}
