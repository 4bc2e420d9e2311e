//! The trend page (`trend.html`): the changes beyond the noise first, then a chart per figure
//! across the runs, then the runs themselves, each linking to its report.

use askama::Template;

use super::chart::{trend_chart, Figure, Mark, TrendPoint};
use crate::report::format::fmt_unit;
use crate::report::trend::{Trend, FIGURES, RELATIVE_FLOOR, WINDOW};

#[derive(Template)]
#[template(path = "trend.html")]
struct Page {
    headline: String,
    scenario: String,
    meta: Vec<(String, String)>,
    rule: String,
    changes: Vec<ChangeRow>,
    warnings: Vec<String>,
    figures: Vec<Figure>,
    runs: Vec<RunRow>,
}

struct ChangeRow {
    run: usize,
    figure: &'static str,
    name: String,
    href: String,
    title: &'static str,
    value: String,
    expected: String,
    band: String,
    state: &'static str,
}

struct RunRow {
    n: usize,
    href: String,
    label: String,
    started: String,
    verdict: String,
    version: String,
}

/// The page, as one self-contained HTML document.
pub fn render(t: &Trend) -> Result<String, askama::Error> {
    let changes: Vec<ChangeRow> = t
        .changes()
        .into_iter()
        .map(|c| {
            let r = &t.runs[c.run];
            let u = c.figure.unit_kind();
            ChangeRow {
                run: c.run + 1,
                figure: c.figure.id,
                name: r.name(c.run),
                href: r.report.clone(),
                title: c.figure.title,
                value: fmt_unit(u, c.value),
                expected: fmt_unit(u, c.judged.expected),
                band: fmt_unit(u, c.judged.band),
                state: c.judged.state,
            }
        })
        .collect();
    let mut figures = Vec::new();
    for f in FIGURES {
        let points: Vec<TrendPoint> = t
            .runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let v = r.value(f.id)?;
                Some(TrendPoint {
                    run: i + 1,
                    value: v.value,
                    spread: v.spread,
                    failed: r.verdict != "pass",
                    changed: r.judged(f.id).is_some_and(|j| j.state != "within"),
                    href: r.report.clone(),
                    title: format!("{}: {} ({})", r.name(i), f.format(v.value), r.verdict),
                })
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let marks: Vec<Mark> = t
            .limits
            .iter()
            .filter(|l| l.figure == f.id)
            .map(|l| Mark {
                label: format!("threshold {}", l.condition),
                value: l.value,
            })
            .collect();
        let n = points.len();
        let svg = trend_chart(f.title, &points, f.unit_kind(), &marks);
        let caption = if points.iter().any(|p| p.spread.is_some()) {
            format!("{n} runs; a bar is the run's spread over its seconds (10th to 90th percentile of the per-second values); a ring is a value beyond the noise of the runs before it.")
        } else {
            format!("{n} runs; a ring is a value beyond the noise of the runs before it.")
        };
        figures.push(Figure::new(f.id, f.title, svg, caption));
    }
    let runs: Vec<RunRow> = t
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| RunRow {
            n: i + 1,
            href: r.report.clone(),
            label: r.label.clone().unwrap_or_default(),
            started: r.started_at.clone(),
            verdict: r.verdict.clone(),
            version: r.tool_version.clone().unwrap_or_default(),
        })
        .collect();
    let scenarios: Vec<&str> =
        t.runs
            .iter()
            .map(|r| r.scenario.as_str())
            .fold(Vec::new(), |mut v, s| {
                if !v.contains(&s) {
                    v.push(s);
                }
                v
            });
    let failed = t.runs.iter().filter(|r| r.verdict != "pass").count();
    let headline = match changes.len() {
        0 => "no change beyond the noise".to_string(),
        1 => "1 change beyond the noise".to_string(),
        n => format!("{n} changes beyond the noise"),
    };
    Page {
        headline: headline.clone(),
        scenario: scenarios.join(", "),
        meta: vec![
            ("runs".into(), t.runs.len().to_string()),
            ("failed runs".into(), failed.to_string()),
            ("ordered by".into(), t.order.to_string()),
            ("changes".into(), headline),
        ],
        rule: format!(
            "Each run is judged against the up to {WINDOW} runs before it that have the figure \
             (at least {}): outside the widest of their 99.9 % prediction interval (Student's \
             t from how many they are, times their standard deviation), {:.0} % of their mean, \
             and the figure's own resolution, its figure is a change. Identical runs leave it \
             about once in a thousand judgements.",
            t.min_history,
            RELATIVE_FLOOR * 100.0
        ),
        changes,
        warnings: t
            .warnings
            .iter()
            .map(|w| format!("{}: {}", t.runs[w.run].name(w.run), w.text))
            .collect(),
        figures,
        runs,
    }
    .render()
}
