//! A capacity search's section: the answer first, a knee chart per objective (its figure
//! against each step's players, the limit as a line, held and broken steps marked), and the
//! steps in the order they ran.

use super::chart::Figure;
use super::chart::{knee_chart, KneePoint, Mark};
use super::timeline::op_text;
use crate::metrics::capacity::Capacity;
use crate::metrics::threshold::Threshold;
use crate::report::build::format_observed;
use crate::report::format::metric_unit;

/// The section's view model.
pub(super) struct CapacityView {
    pub answer: String,
    pub figures: Vec<Figure>,
    pub steps: Vec<StepRow>,
}

pub(super) struct StepRow {
    pub n: usize,
    pub players: u64,
    pub in_game: u64,
    pub verdict: String,
    pub held: bool,
    pub why: String,
}

/// Count checks that hold at every step of a healthy search are not charted unless one broke.
fn always_charted(metric: &str) -> bool {
    !(metric.starts_with("bots.")
        || metric == "errors.decode_total"
        || metric == "snapshots_applied")
}

pub(super) fn view(c: &Capacity) -> CapacityView {
    let mut figures = Vec::new();
    let conditions: Vec<(String, String)> = c
        .steps
        .iter()
        .flat_map(|s| {
            s.objectives
                .iter()
                .map(|o| (o.condition.clone(), o.metric.clone()))
        })
        .fold(Vec::new(), |mut v, k| {
            if !v.contains(&k) {
                v.push(k);
            }
            v
        });
    for (i, (condition, metric)) in conditions.iter().enumerate() {
        let results = || {
            c.steps.iter().filter_map(|s| {
                let o = s.objectives.iter().find(|o| &o.condition == condition)?;
                Some((s, o))
            })
        };
        let broke_somewhere = results().any(|(_, o)| !o.ok);
        if !always_charted(metric) && !broke_somewhere {
            continue;
        }
        let points: Vec<KneePoint> = results()
            .filter(|(s, _)| s.verdict == "held" || s.verdict == "broke")
            .filter_map(|(s, o)| {
                // Red where this objective failed, whatever the step's other objectives did.
                Some(KneePoint {
                    players: s.players as f64,
                    value: o.observed?,
                    held: o.ok,
                })
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let marks: Vec<Mark> = Threshold::parse(condition)
            .ok()
            .map(|t| Mark {
                label: format!("objective {}", op_text(&t)),
                value: t.limit,
            })
            .into_iter()
            .collect();
        let unit = metric_unit(metric);
        let worst = points
            .iter()
            .filter(|p| !p.held)
            .map(|p| p.players)
            .fold(f64::INFINITY, f64::min);
        let caption = if worst.is_finite() {
            let observed = results()
                .find(|(s, o)| s.players as f64 == worst && !o.ok)
                .and_then(|(_, o)| o.observed);
            format!(
                "{condition}, per step, judged on each step's window: failed first at {worst} \
                 players ({}).",
                format_observed(metric, observed)
            )
        } else {
            format!("{condition}, per step, judged on each step's window: held at every step.")
        };
        figures.push(Figure {
            title: condition.clone(),
            svg: knee_chart(condition, &points, unit, &marks),
            caption,
            id: format!("knee-{i}"),
        });
    }
    CapacityView {
        answer: c.answer.clone(),
        figures,
        steps: c
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| StepRow {
                n: i + 1,
                players: s.players,
                in_game: s.in_game,
                verdict: s.verdict.replace('_', " "),
                held: s.verdict == "held",
                why: s.why.clone(),
            })
            .collect(),
    }
}
