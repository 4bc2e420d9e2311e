//! SVG charts drawn in code: per-second time series and a protocol metric's percentiles.
//!
//! Each function returns one `<svg>` element as a string that the template inserts
//! unescaped (`|safe`), so everything textual that goes into the SVG (titles, series names,
//! formatted values, which carry units from summary.json) passes through [`esc`] here.

use std::fmt::Write as _;

use crate::metrics::HistSummary;
use crate::report::format::{fmt_plain, fmt_unit, group_f, Unit};

/// `write!` into a `String`, which cannot fail.
macro_rules! w {
    ($dst:expr, $($arg:tt)*) => {{
        let _ = write!($dst, $($arg)*);
    }};
}

/// Escape text for SVG element content and quoted attribute values. The template escapes
/// everything else; this is the one escaper left, for markup built in code.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) const BLUE: &str = "#2563eb";
pub(super) const ORANGE: &str = "#ea580c";
pub(super) const RED: &str = "#dc2626";
pub(super) const PURPLE: &str = "#7c3aed";
pub(super) const TEAL: &str = "#0d9488";
/// A step that held (knee charts).
const GREEN: &str = "#16a34a";
pub(super) const AMBER: &str = "#b45309";
/// The active-bots overlay (its stroke is set in the style sheet; this is its legend swatch).
const OVERLAY: &str = "#9ca3af";

/// Chart geometry in SVG user units (the SVG scales to its container's width).
const CW: f64 = 600.0;
const CH: f64 = 250.0;
pub(super) const ML: f64 = 78.0;
/// Room on the right for the active-bots axis's labels.
const MR: f64 = 44.0;
pub(super) const MT: f64 = 30.0;
const MB: f64 = 42.0;
pub(super) const PW: f64 = CW - ML - MR;
pub(super) const PH: f64 = CH - MT - MB;

/// Up to this many points per series, draw dots (with hover titles) on each point.
const DOTS_UP_TO: usize = 60;

/// A chart with its title and caption (plain text); `svg` is markup drawn here.
pub(super) struct Figure {
    pub title: String,
    pub svg: String,
    pub caption: String,
    /// Stable id for the chart (`data-chart`), so tests and readers can find it.
    pub id: String,
}

impl Figure {
    pub(super) fn new(
        id: &str,
        title: impl Into<String>,
        svg: String,
        caption: impl Into<String>,
    ) -> Self {
        Self {
            title: title.into(),
            svg,
            caption: caption.into(),
            id: id.to_string(),
        }
    }
}

/// One line of a time-series chart.
pub(super) struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    /// `(seconds since start, value)`; non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
}

impl Unit {
    /// Smallest y-axis span, so flat or near-zero series don't blow up noise.
    fn min_span(self) -> f64 {
        match self {
            Unit::Count | Unit::Plain | Unit::Hertz => 5.0,
            Unit::Micros => 100.0,
            Unit::Rate => 0.001,
            Unit::Bytes | Unit::BytesPerSec => 1000.0,
        }
    }

    /// Whether axis ticks must be whole numbers.
    fn integral(self) -> bool {
        matches!(self, Unit::Count | Unit::Bytes | Unit::BytesPerSec)
    }
}

/// A step of 1, 2, 2.5 or 5 × 10ⁿ giving about `target` intervals over `span` (> 0); without
/// `quarter`, 2.5 is skipped (time axes read better in whole 2s and 5s).
fn nice_step(span: f64, target: usize, quarter: bool) -> f64 {
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if quarter && norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Axis `0..top` covering `max`, with tick step `step` (both nice).
fn axis_range(max: f64, min_span: f64, target: usize, integral: bool) -> (f64, f64) {
    let m = if max.is_finite() && max > min_span {
        max
    } else {
        min_span
    };
    let mut step = nice_step(m, target, true);
    if integral && step < 1.0 {
        step = 1.0;
    }
    let n = (m / step - 1e-9).ceil().max(1.0);
    (n * step, step)
}

/// Decimals needed to print multiples of `step` exactly.
fn decimals_for(step: f64) -> usize {
    for d in 0..6 {
        let x = step * 10f64.powi(d);
        if (x - x.round()).abs() < 1e-6 * x.abs().max(1.0) {
            return d as usize;
        }
    }
    6
}

/// Label of a y tick; the unit scale is chosen from the axis top so all labels agree.
fn tick_label(unit: Unit, v: f64, step: f64, top: f64) -> String {
    match unit {
        Unit::Count | Unit::Plain => group_f(v, decimals_for(step)),
        Unit::Hertz => format!("{} Hz", group_f(v, decimals_for(step))),
        Unit::Micros if top >= 1000.0 => {
            format!("{} ms", group_f(v / 1000.0, decimals_for(step / 1000.0)))
        }
        Unit::Micros => format!("{} µs", group_f(v, decimals_for(step))),
        Unit::Rate => format!("{}%", group_f(v * 100.0, decimals_for(step * 100.0))),
        Unit::Bytes | Unit::BytesPerSec => {
            const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
            let mut div = 1.0;
            let mut i = 0;
            while top / div >= 1000.0 && i < UNITS.len() - 1 {
                div *= 1000.0;
                i += 1;
            }
            let suffix = if unit == Unit::BytesPerSec { "/s" } else { "" };
            format!(
                "{} {}{}",
                group_f(v / div, decimals_for(step / div)),
                UNITS[i],
                suffix
            )
        }
    }
}

/// A horizontal line drawn across a chart: a threshold's limit.
#[derive(Clone)]
pub(super) struct Mark {
    pub label: String,
    pub value: f64,
}

/// A value the run should show when all is well, drawn across a chart as a dashed line of its
/// own colour: the snapshot spacing the scenario's snapshot rate implies, the input interval,
/// no loss.
pub(super) struct Expected {
    /// Stable name for the line (`data-expected`): `snapshot-interval`, `input-interval`,
    /// `loss`.
    pub id: &'static str,
    /// What it is, e.g. `expected 16.67 ms (1 s / 60 Hz)`.
    pub label: String,
    pub value: f64,
}

/// A second series on its own axis at the right: the bots in play, so a change in a figure
/// can be read against the load that made it.
pub(super) struct Overlay {
    pub name: String,
    /// `(seconds since start, bots)`.
    pub points: Vec<(f64, f64)>,
}

/// What a chart adds to its series.
#[derive(Default)]
pub(super) struct Opts {
    /// Cut the y axis here when the data go higher (an outlier must not flatten the rest):
    /// points above are drawn on the top edge with a ▲ and their value in a hover title.
    pub clip_at: Option<f64>,
    /// Threshold lines.
    pub marks: Vec<Mark>,
    /// Expected-value lines.
    pub expected: Vec<Expected>,
    /// Active bots, on the right-hand axis.
    pub overlay: Option<Overlay>,
}

/// The y axis top for data up to `y_max` under `opts`: the clip when the data pass it, and
/// room for threshold lines that are not far above the data (a 50 ms limit over 300 µs data
/// would flatten them: it is named at the top edge instead). Returns the top value to fit.
fn fit_top(y_max: f64, opts: &Opts) -> f64 {
    let data_top = match opts.clip_at {
        Some(c) if c > 0.0 && y_max > c => c,
        _ => y_max,
    };
    let marks = opts
        .marks
        .iter()
        .map(|m| m.value)
        .chain(opts.expected.iter().map(|e| e.value))
        .filter(|&v| v.is_finite() && v <= 3.0 * data_top.max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max);
    data_top.max(marks)
}

/// Horizontal grid lines and y tick labels for `0..top`.
fn y_axis(svg: &mut String, unit: Unit, top: f64, ystep: f64, py: &dyn Fn(f64) -> f64) {
    let ny = (top / ystep).round() as usize;
    for i in 0..=ny {
        let v = i as f64 * ystep;
        let y = py(v);
        let class = if i == 0 { "axis" } else { "grid" };
        w!(
            svg,
            "<line class=\"{class}\" x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"yt\" x=\"{:.1}\" y=\"{y:.1}\" dy=\"0.32em\" text-anchor=\"end\">{}</text>\n",
            ML + PW,
            ML - 8.0,
            esc(&tick_label(unit, v, ystep, top))
        );
    }
}

/// Estimated width in SVG units of `text` at `size` (font size in the same units): per-glyph
/// advances of DejaVu Sans (the widest of the fonts the style sheet may pick, and Chromium's
/// on Debian), rounded up, so a label laid out by this estimate does not run into the next.
pub(super) fn text_width(text: &str, size: f64) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'l' | 'j' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.30,
            ' ' => 0.32,
            'f' | 't' | 'r' | 'I' | '(' | ')' | '[' | ']' | '{' | '}' | '/' | '-' => 0.42,
            'm' | 'w' | 'M' | 'W' | '%' | '—' => 0.98,
            '0'..='9' => 0.64,
            'A'..='Z' | '→' | '≤' | '≥' | '<' | '>' | '▲' | '=' | '+' => 0.84,
            _ => 0.63,
        })
        .sum();
    em * size * 1.04
}

/// Font sizes (SVG units) of the chart texts the layout places, as the style sheet sets them.
const LEGEND_FONT: f64 = 12.5;
const MARK_FONT: f64 = 11.5;
/// Axis tick labels at phone width (the style sheet's 14px there, 12px on a desktop).
const TICK_FONT_MAX: f64 = 14.0;
/// A text's box reaches this far above its baseline, and below it, as a share of its size.
const ASCENT: f64 = 0.95;
const DESCENT: f64 = 0.25;
/// One legend row, and one row of a label named above the plot.
const LEGEND_ROW: f64 = 18.0;
const ABOVE_ROW: f64 = 15.0;

/// A line's label that could not sit at its value (the value is above the axis): named in a
/// row of its own between the legend and the plot.
struct Above {
    /// `class` and data attributes of the `<text>`.
    attrs: String,
    text: String,
    /// Right-aligned at the plot's right edge (thresholds), else left-aligned (expected).
    right: bool,
}

/// The labels of a chart's lines, placed so that no two overprint: those of lines inside the
/// plot beside their line (above it, below it, or stacked further off), those above the axis
/// in rows above the plot.
#[derive(Default)]
pub(super) struct Labels {
    above: Vec<Above>,
    /// Boxes (x0, y0, x1, y1) of the labels placed inside the plot so far.
    placed: Vec<(f64, f64, f64, f64)>,
}

impl Labels {
    /// The baseline for a label `width` wide spanning `x0..x0 + width`, for a line at `y`:
    /// just above the line when that is free, else just below, else the nearest free row
    /// either way; always inside the plot.
    fn place(&mut self, x0: f64, width: f64, y: f64) -> f64 {
        let (asc, desc) = (ASCENT * MARK_FONT, DESCENT * MARK_FONT);
        let lo = MT + asc + 1.0;
        let hi = MT + PH - desc - 1.0;
        let step = asc + desc + 1.0;
        let above = y - 4.0;
        let below = y + asc + 3.0;
        let mut tries = vec![above, below];
        for k in 1..12 {
            tries.push(above - k as f64 * step);
            tries.push(below + k as f64 * step);
        }
        let free = |b: f64, placed: &[(f64, f64, f64, f64)]| {
            placed.iter().all(|&(a0, b0, a1, b1)| {
                x0 + width <= a0 || x0 >= a1 || b + desc <= b0 || b - asc >= b1
            })
        };
        let base = tries
            .iter()
            .copied()
            .filter(|b| (lo..=hi).contains(b))
            .find(|&b| free(b, &self.placed))
            .unwrap_or_else(|| above.clamp(lo, hi));
        self.placed.push((x0, base - asc, x0 + width, base + desc));
        base
    }
}

/// Threshold lines: dashed, labelled at the right end (stacked clear of the other labels);
/// one above the axis is named above the plot with an arrow.
fn draw_marks(
    svg: &mut String,
    labels: &mut Labels,
    unit: Unit,
    top: f64,
    marks: &[Mark],
    py: &dyn Fn(f64) -> f64,
) {
    for m in marks {
        if !m.value.is_finite() {
            continue;
        }
        let text = format!("{} {}", m.label, fmt_unit(unit, m.value));
        if m.value > top {
            labels.above.push(Above {
                attrs: "class=\"thr\" data-mark=\"above\"".into(),
                text: format!("▲ {text} (above the axis)"),
                right: true,
            });
            continue;
        }
        let y = py(m.value);
        let width = text_width(&text, MARK_FONT);
        let x1 = ML + PW - 2.0;
        let base = labels.place(x1 - width, width, y);
        w!(
            svg,
            "<line class=\"thr\" data-mark=\"{}\" x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"thr\" x=\"{x1:.1}\" y=\"{base:.1}\" text-anchor=\"end\">{}</text>\n",
            esc(&m.label),
            ML + PW,
            esc(&text)
        );
    }
}

/// Expected-value lines: dashed, in their own colour, labelled at the left end (threshold
/// labels sit at the right); one above the axis is named above the plot, at the left.
fn draw_expected(
    svg: &mut String,
    labels: &mut Labels,
    unit: Unit,
    top: f64,
    expected: &[Expected],
    py: &dyn Fn(f64) -> f64,
) {
    for e in expected {
        if !e.value.is_finite() {
            continue;
        }
        let text = format!("{} {}", e.label, fmt_unit(unit, e.value));
        if e.value > top {
            labels.above.push(Above {
                attrs: format!(
                    "class=\"expected\" data-expected=\"{}\" data-above=\"true\"",
                    e.id
                ),
                text: format!("▲ {text} (above the axis)"),
                right: false,
            });
            continue;
        }
        let y = py(e.value);
        let x0 = ML + 4.0;
        // A line at 0 sits on the axis: its label goes above it all the same.
        let base = labels.place(x0, text_width(&text, MARK_FONT), y);
        w!(
            svg,
            "<line class=\"expected\" data-expected=\"{}\" data-value=\"{}\" x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"expected\" x=\"{x0:.1}\" y=\"{base:.1}\">{}</text>\n",
            e.id,
            e.value,
            ML + PW,
            esc(&text)
        );
    }
}

/// The active-bots series on its own axis at the right (0 .. a nice top), drawn under the
/// chart's own series, with its tick labels right of the plot.
fn draw_overlay(svg: &mut String, o: &Overlay, xa: &TimeAxis) {
    let pts: Vec<(f64, f64)> = o
        .points
        .iter()
        .copied()
        .filter(|(t, v)| t.is_finite() && v.is_finite())
        .collect();
    let max = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let (top, step) = axis_range(max, Unit::Count.min_span(), 5, true);
    let py = |v: f64| MT + PH - (v / top).clamp(0.0, 1.0) * PH;
    let n = (top / step).round() as usize;
    for i in 0..=n {
        let v = i as f64 * step;
        w!(
            svg,
            "<text class=\"yt2\" x=\"{:.1}\" y=\"{:.1}\" dy=\"0.32em\">{}</text>\n",
            ML + PW + 6.0,
            py(v),
            esc(&group_f(v, 0))
        );
    }
    if pts.is_empty() {
        return;
    }
    let pts = decimate(&pts, xa.x0, xa.span, PW as usize);
    let coords: Vec<String> = pts
        .iter()
        .map(|&(t, v)| format!("{:.1},{:.1}", xa.px(t), py(v)))
        .collect();
    w!(
        svg,
        "<polyline class=\"overlay\" data-overlay=\"active-bots\" data-top=\"{top}\" \
         fill=\"none\" points=\"{}\"><title>{}</title></polyline>\n",
        coords.join(" "),
        esc(&o.name)
    );
}

/// The legend's items laid out in rows from the plot's left edge, wrapping before an item
/// would pass the chart's right edge: `(x, row, name, colour)`.
fn legend_rows<'a>(names: &[(&'a str, &'a str)]) -> Vec<(f64, usize, &'a str, &'a str)> {
    let mut out = Vec::new();
    let (mut lx, mut row) = (ML, 0);
    for &(name, color) in names {
        let width = 22.0 + text_width(name, LEGEND_FONT);
        if lx > ML && lx + width > CW - 4.0 {
            lx = ML;
            row += 1;
        }
        // An item too long for a row of its own starts further left.
        let x = if lx + width > CW - 4.0 {
            (CW - 4.0 - width).max(4.0)
        } else {
            lx
        };
        out.push((x, row, name, color));
        lx = x + width + 18.0;
    }
    out
}

/// The whole `<svg>`: the legend above, the labels of lines above the axis in rows under it,
/// and `body` (drawn for a plot at [`MT`]) moved down by what they take beyond the top margin.
fn frame(class: &str, label: &str, names: &[(&str, &str)], labels: &Labels, body: &str) -> String {
    let items = legend_rows(names);
    let rows = items.iter().map(|i| i.1 + 1).max().unwrap_or(1);
    let dy = (rows - 1) as f64 * LEGEND_ROW + labels.above.len() as f64 * ABOVE_ROW;
    let mut svg = String::new();
    w!(
        svg,
        "<svg class=\"lc {class}\" viewBox=\"0 0 {CW} {}\" role=\"img\" aria-label=\"{}\" \
         preserveAspectRatio=\"xMidYMid meet\">\n",
        CH + dy,
        esc(label)
    );
    for (x, row, name, color) in items {
        let y = 14.0 + row as f64 * LEGEND_ROW;
        w!(
            svg,
            "<line x1=\"{x:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"3\" \
             stroke-linecap=\"round\"/><text class=\"lg\" x=\"{:.1}\" y=\"{y:.1}\" dy=\"0.32em\">{}</text>\n",
            x + 16.0,
            esc(color),
            x + 22.0,
            esc(name)
        );
    }
    let n = labels.above.len();
    for (i, a) in labels.above.iter().enumerate() {
        let y = MT + dy - 4.0 - (n - 1 - i) as f64 * ABOVE_ROW;
        let (x, anchor) = if a.right {
            (ML + PW, " text-anchor=\"end\"")
        } else {
            (ML + 2.0, "")
        };
        w!(
            svg,
            "<text {} x=\"{x:.1}\" y=\"{y:.1}\"{anchor}>{}</text>\n",
            a.attrs,
            esc(&a.text)
        );
    }
    if dy > 0.0 {
        w!(svg, "<g transform=\"translate(0 {dy:.1})\">\n{body}</g>\n");
    } else {
        svg.push_str(body);
    }
    svg.push_str("</svg>\n");
    svg
}

fn no_data(svg: &mut String) {
    w!(
        svg,
        "<text class=\"nodata\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">no data</text>\n",
        ML + PW / 2.0,
        MT + PH / 2.0
    );
}

/// A ▲ on the top edge at `x` for a value above the axis, with the value in its title.
fn off_scale(svg: &mut String, x: f64, title: &str) {
    w!(
        svg,
        "<path class=\"off\" d=\"M{:.1},{:.1}l-4.5,8h9z\"><title>{}</title></path>\n",
        x,
        MT - 1.0,
        esc(title)
    );
}

/// The time axis (x) of the per-second charts: 0 (or the earliest point) .. the last point.
struct TimeAxis {
    x0: f64,
    span: f64,
    xdiv: f64,
    xunit: &'static str,
    xstep: f64,
    /// What the axis counts: `time since start (s)`, or `players`.
    title: &'static str,
}

impl TimeAxis {
    fn of(x0: f64, x_max: f64) -> Self {
        let x1 = if x_max > x0 { x_max } else { x0 + 1.0 };
        let span = x1 - x0;
        let (xdiv, xunit) = if span < 300.0 {
            (1.0, "s")
        } else if span < 3.0 * 3600.0 {
            (60.0, "min")
        } else {
            (3600.0, "h")
        };
        let mut xstep = nice_step(span / xdiv, 8, false);
        if xdiv == 1.0 && xstep < 1.0 {
            xstep = 1.0;
        }
        Self {
            x0,
            span,
            xdiv,
            xunit,
            xstep,
            title: "time since start",
        }
    }

    /// An axis of players (whole numbers) from 0 to past `x_max`.
    fn players(x_max: f64) -> Self {
        let span = if x_max > 0.0 { x_max * 1.05 } else { 1.0 };
        Self {
            x0: 0.0,
            span,
            xdiv: 1.0,
            xunit: "",
            xstep: nice_step(span, 8, false).max(1.0),
            title: "players",
        }
    }

    /// An axis of runs, 1 to `n`, in the trend's order, with half a run of room either side.
    fn runs(n: usize) -> Self {
        let span = n.max(1) as f64 + 1.0;
        Self {
            x0: 0.0,
            span,
            xdiv: 1.0,
            xunit: "",
            xstep: nice_step(span, 8, false).max(1.0),
            title: "run",
        }
    }

    fn px(&self, t: f64) -> f64 {
        ML + (t - self.x0) / self.span * PW
    }

    fn draw(&self, svg: &mut String) {
        let xdec = decimals_for(self.xstep);
        let x1 = self.x0 + self.span;
        let first = (self.x0 / self.xdiv / self.xstep).ceil() as i64;
        let last = (x1 / self.xdiv / self.xstep + 1e-9).floor() as i64;
        for k in first..=last {
            let tv = k as f64 * self.xstep;
            let x = self.px(tv * self.xdiv);
            w!(
                svg,
                "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{MT}\" y2=\"{:.1}\"/>\
                 <line class=\"axis\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
                 <text class=\"xt\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                MT + PH,
                MT + PH,
                MT + PH + 4.0,
                MT + PH + 18.0,
                group_f(tv, xdec)
            );
        }
        w!(
            svg,
            "<line class=\"axis\" x1=\"{ML}\" x2=\"{ML}\" y1=\"{MT}\" y2=\"{:.1}\"/>\n\
             <text class=\"xl\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            MT + PH,
            ML + PW / 2.0,
            CH - 6.0,
            if self.xunit.is_empty() {
                self.title.to_string()
            } else {
                format!("{} ({})", self.title, self.xunit)
            }
        );
    }
}

/// One SVG line chart: axes with nice ticks, a legend, one polyline per series. The y axis
/// starts at zero; the x axis is seconds since the start of the run.
pub(super) fn line_chart(label: &str, series: &[Series], unit: Unit) -> String {
    line_chart_with(label, series, unit, &Opts::default())
}

/// [`line_chart`] with threshold lines and an outlier clip.
pub(super) fn line_chart_with(label: &str, series: &[Series], unit: Unit, opts: &Opts) -> String {
    let finite: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|(t, v)| t.is_finite() && v.is_finite())
                .collect()
        })
        .collect();
    let all = || finite.iter().flatten();
    let has_data = all().next().is_some();

    let overlay_t = || {
        opts.overlay
            .iter()
            .flat_map(|o| o.points.iter().map(|p| p.0))
            .filter(|t| t.is_finite())
    };
    let x0 = all().map(|p| p.0).chain(overlay_t()).fold(0.0, f64::min);
    let x_max = all()
        .map(|p| p.0)
        .chain(overlay_t())
        .fold(f64::NEG_INFINITY, f64::max);
    let xa = TimeAxis::of(x0, x_max);

    // y: 0 .. a nice top above the largest value (or the clip, or a near threshold).
    let y_max = all().map(|p| p.1).fold(0.0, f64::max);
    let (top, ystep) = axis_range(fit_top(y_max, opts), unit.min_span(), 5, unit.integral());

    let py = |v: f64| MT + PH - (v / top).clamp(0.0, 1.0) * PH;

    let mut svg = String::new();
    let mut labels = Labels::default();
    y_axis(&mut svg, unit, top, ystep, &py);
    xa.draw(&mut svg);
    let mut names: Vec<(&str, &str)> = series.iter().map(|s| (s.name, s.color)).collect();
    if let Some(o) = &opts.overlay {
        names.push((o.name.as_str(), OVERLAY));
        draw_overlay(&mut svg, o, &xa);
    }

    // Series.
    let cols = PW as usize;
    for (s, pts) in series.iter().zip(&finite) {
        if pts.is_empty() {
            continue;
        }
        let pts = decimate(pts, xa.x0, xa.span, cols);
        let coords: Vec<String> = pts
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", xa.px(t), py(v)))
            .collect();
        w!(
            svg,
            "<polyline data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
             stroke-linejoin=\"round\" stroke-linecap=\"round\" points=\"{}\"/>\n",
            esc(s.name),
            esc(s.color),
            coords.join(" ")
        );
        let title = |t: f64, v: f64| {
            format!(
                "{} at {} s: {}",
                s.name,
                fmt_plain((t * 10.0).round() / 10.0),
                fmt_unit(unit, v)
            )
        };
        for &(t, v) in pts.iter().filter(|p| p.1 > top) {
            off_scale(&mut svg, xa.px(t), &format!("{} (off scale)", title(t, v)));
        }
        if pts.len() <= DOTS_UP_TO {
            for &(t, v) in &pts {
                w!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\"><title>{}</title></circle>\n",
                    xa.px(t),
                    py(v),
                    esc(s.color),
                    esc(&title(t, v))
                );
            }
        }
    }
    draw_expected(&mut svg, &mut labels, unit, top, &opts.expected, &py);
    draw_marks(&mut svg, &mut labels, unit, top, &opts.marks, &py);
    if !has_data {
        no_data(&mut svg);
    }
    frame("ts", label, &names, &labels, &svg)
}

/// One point of a knee chart: a step's population, its figure, and whether it held.
pub(super) struct KneePoint {
    pub players: f64,
    pub value: f64,
    pub held: bool,
}

/// A figure against the players of each step of a capacity search: a grey line through the
/// steps in population order, each step a dot (green where the objective held, red where it
/// failed), the objective's limit as a threshold line.
pub(super) fn knee_chart(label: &str, points: &[KneePoint], unit: Unit, marks: &[Mark]) -> String {
    let mut pts: Vec<&KneePoint> = points
        .iter()
        .filter(|p| p.players.is_finite() && p.value.is_finite())
        .collect();
    pts.sort_by(|a, b| a.players.total_cmp(&b.players));
    let xa = TimeAxis::players(pts.iter().map(|p| p.players).fold(0.0, f64::max));
    let opts = Opts {
        marks: marks.to_vec(),
        ..Opts::default()
    };
    let y_max = pts.iter().map(|p| p.value).fold(0.0, f64::max);
    let (top, ystep) = axis_range(fit_top(y_max, &opts), unit.min_span(), 5, unit.integral());
    let py = |v: f64| MT + PH - (v / top).clamp(0.0, 1.0) * PH;
    let mut svg = String::new();
    let mut labels = Labels::default();
    y_axis(&mut svg, unit, top, ystep, &py);
    xa.draw(&mut svg);
    let coords: Vec<String> = pts
        .iter()
        .map(|p| format!("{:.1},{:.1}", xa.px(p.players), py(p.value)))
        .collect();
    if !coords.is_empty() {
        w!(
            svg,
            "<polyline data-series=\"steps\" fill=\"none\" stroke=\"{OVERLAY}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            coords.join(" ")
        );
    }
    for p in &pts {
        let (color, word) = if p.held {
            (GREEN, "held")
        } else {
            (RED, "failed")
        };
        w!(
            svg,
            "<circle data-step=\"{word}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{color}\"><title>{} players: {} ({word})</title></circle>\n",
            xa.px(p.players),
            py(p.value.min(top)),
            fmt_plain(p.players),
            esc(&fmt_unit(unit, p.value))
        );
    }
    draw_marks(&mut svg, &mut labels, unit, top, &opts.marks, &py);
    if pts.is_empty() {
        no_data(&mut svg);
    }
    frame(
        "knee",
        label,
        &[("held", GREEN), ("failed", RED)],
        &labels,
        &svg,
    )
}

/// One run on a trend chart: its figure, its spread over its seconds, and what it links to.
pub(super) struct TrendPoint {
    /// Position in the trend, from 1.
    pub run: usize,
    pub value: f64,
    /// 10th to 90th percentile of the run's per-second values.
    pub spread: Option<(f64, f64)>,
    /// The run failed its thresholds (a red dot).
    pub failed: bool,
    /// The value left the noise band of the runs before it (a ring).
    pub changed: bool,
    pub href: String,
    pub title: String,
}

/// A figure across runs: a grey line through the runs in order, each run a dot (blue when it
/// passed, red when it failed, a ring when its figure left the noise band) linking to its
/// report, its per-second spread as a bar, the scenario's limits as threshold lines.
pub(super) fn trend_chart(
    label: &str,
    points: &[TrendPoint],
    unit: Unit,
    marks: &[Mark],
) -> String {
    let pts: Vec<&TrendPoint> = points.iter().filter(|p| p.value.is_finite()).collect();
    let xa = TimeAxis::runs(points.iter().map(|p| p.run).max().unwrap_or(1));
    let opts = Opts {
        marks: marks.to_vec(),
        ..Opts::default()
    };
    let y_max = pts
        .iter()
        .map(|p| p.spread.map_or(p.value, |s| s.1.max(p.value)))
        .fold(0.0, f64::max);
    let (top, ystep) = axis_range(fit_top(y_max, &opts), unit.min_span(), 5, unit.integral());
    let py = |v: f64| MT + PH - (v / top).clamp(0.0, 1.0) * PH;
    let mut svg = String::new();
    let mut labels = Labels::default();
    y_axis(&mut svg, unit, top, ystep, &py);
    xa.draw(&mut svg);
    let coords: Vec<String> = pts
        .iter()
        .map(|p| format!("{:.1},{:.1}", xa.px(p.run as f64), py(p.value)))
        .collect();
    if coords.len() > 1 {
        w!(
            svg,
            "<polyline data-series=\"runs\" fill=\"none\" stroke=\"{OVERLAY}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            coords.join(" ")
        );
    }
    for p in &pts {
        let x = xa.px(p.run as f64);
        if let Some((lo, hi)) = p.spread {
            w!(
                svg,
                "<line data-spread=\"{}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{BLUE}\" stroke-opacity=\"0.35\" stroke-width=\"5\"/>\n",
                p.run,
                py(lo),
                py(hi)
            );
        }
        let color = if p.failed { RED } else { BLUE };
        let ring = if p.changed {
            format!(
                "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"8\" fill=\"none\" stroke=\"{ORANGE}\" stroke-width=\"2.5\"/>",
                py(p.value.min(top))
            )
        } else {
            String::new()
        };
        w!(
            svg,
            "<a href=\"{}\"><circle data-run=\"{}\" data-failed=\"{}\" data-changed=\"{}\" cx=\"{x:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{color}\"><title>{}</title></circle>{ring}</a>\n",
            esc(&p.href),
            p.run,
            p.failed,
            p.changed,
            py(p.value.min(top)),
            esc(&p.title)
        );
    }
    draw_marks(&mut svg, &mut labels, unit, top, &opts.marks, &py);
    if pts.is_empty() {
        no_data(&mut svg);
    }
    frame(
        "trend",
        label,
        &[
            ("passed", BLUE),
            ("failed", RED),
            ("beyond the noise", ORANGE),
        ],
        &labels,
        &svg,
    )
}

/// Layers stacked on each other, second by second (bots per phase): each layer is an area
/// between the sum of the layers below and that sum plus its own value. Layers that are
/// zero throughout are left out of the legend.
pub(super) fn stacked_chart(label: &str, layers: &[Series], unit: Unit) -> String {
    let times: Vec<f64> = layers
        .first()
        .map(|l| l.points.iter().map(|p| p.0).collect())
        .unwrap_or_default();
    let has_data = !times.is_empty();
    let x0 = times.iter().copied().fold(0.0, f64::min);
    let x_max = times.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let xa = TimeAxis::of(x0, x_max);
    let mut base = vec![0.0; times.len()];
    let totals: Vec<f64> = (0..times.len())
        .map(|i| {
            layers
                .iter()
                .map(|l| l.points.get(i).map_or(0.0, |p| p.1))
                .filter(|v| v.is_finite())
                .sum()
        })
        .collect();
    let y_max = totals.iter().copied().fold(0.0, f64::max);
    let (top, ystep) = axis_range(y_max, unit.min_span(), 5, unit.integral());
    let py = |v: f64| MT + PH - (v / top).clamp(0.0, 1.0) * PH;
    let mut svg = String::new();
    y_axis(&mut svg, unit, top, ystep, &py);
    xa.draw(&mut svg);
    let shown: Vec<(&str, &str)> = layers
        .iter()
        .filter(|l| l.points.iter().any(|p| p.1 > 0.0))
        .map(|l| (l.name, l.color))
        .collect();
    for l in layers {
        if !l.points.iter().any(|p| p.1 > 0.0) {
            continue;
        }
        let mut upper = Vec::with_capacity(times.len());
        let mut lower = Vec::with_capacity(times.len());
        for (i, &t) in times.iter().enumerate() {
            let v = l.points.get(i).map_or(0.0, |p| p.1);
            let v = if v.is_finite() { v } else { 0.0 };
            lower.push(format!("{:.1},{:.1}", xa.px(t), py(base[i])));
            base[i] += v;
            upper.push(format!("{:.1},{:.1}", xa.px(t), py(base[i])));
        }
        lower.reverse();
        w!(
            svg,
            "<polygon data-series=\"{}\" fill=\"{}\" fill-opacity=\"0.85\" stroke=\"{}\" \
             stroke-width=\"0.5\" points=\"{} {}\"><title>{}</title></polygon>\n",
            esc(l.name),
            esc(l.color),
            esc(l.color),
            upper.join(" "),
            lower.join(" "),
            esc(l.name)
        );
    }
    if !has_data {
        no_data(&mut svg);
    }
    frame("st", label, &shown, &Labels::default(), &svg)
}

/// x of a percentile on the HdrHistogram plot: log10 of 1/(1-p), so 90 % is 1, 99 % is 2,
/// 99.9 % is 3; `p` of 1 (the max) is drawn at `x_max`.
fn nines(p: f64, x_max: f64) -> f64 {
    if p >= 1.0 {
        x_max
    } else {
        (1.0 / (1.0 - p.max(0.0))).log10().min(x_max)
    }
}

/// A latency (or size) distribution as HdrHistogram plots it: value against percentile, the
/// percentile axis logarithmic in 1/(1-p) so the tail (99 %, 99.9 %, ...) gets as much room
/// as the body. `curves` hold `(percentile 0..=1, value)` points; `count` (the samples) sets
/// how far the axis goes (no further nines than the data resolve). The y axis is clipped
/// per `opts` with off-scale points marked.
pub(super) fn percentile_plot(
    label: &str,
    curves: &[Series],
    count: u64,
    unit: Unit,
    opts: &Opts,
) -> String {
    let x_max = (count.max(10) as f64).log10().ceil().clamp(2.0, 7.0);
    let px = |x: f64| ML + x / x_max * PW;
    let pts: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|c| {
            c.points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|&(p, v)| (nines(p, x_max), v))
                .collect()
        })
        .collect();
    let has_data = pts.iter().any(|c| !c.is_empty());
    let y_max = pts.iter().flatten().map(|p| p.1).fold(0.0, f64::max);
    let (top, ystep) = axis_range(fit_top(y_max, opts), unit.min_span(), 5, unit.integral());
    let py = |v: f64| MT + PH - (v / top).clamp(0.0, 1.0) * PH;
    let mut svg = String::new();
    let mut labels = Labels::default();
    y_axis(&mut svg, unit, top, ystep, &py);
    // Percentile ticks: 0 %, 50 %, then one per nine.
    let mut ticks = vec![(0.0, "0%".to_string()), (2f64.log10(), "50%".to_string())];
    for k in 1..=(x_max as i32) {
        let p = 100.0 - 100.0 / 10f64.powi(k);
        let text = format!("{}%", group_f(p, (k - 2).max(0) as usize));
        ticks.push((f64::from(k), text));
    }
    // A label that would run into the one before it (50 % beside 0 % on an axis of many
    // nines) keeps its grid line and loses its text; widths at the phone's larger size.
    let mut last_right = f64::NEG_INFINITY;
    for (x, text) in &ticks {
        // The last label ends at the plot's edge rather than running past the chart; the
        // first starts at the axis, clear of the value axis's 0 in the corner.
        let (end, start) = (*x >= x_max, *x <= 0.0);
        let anchor = if end {
            "end"
        } else if start {
            "start"
        } else {
            "middle"
        };
        let x = px(*x);
        let width = text_width(text, TICK_FONT_MAX);
        let left = if end {
            x - width
        } else if start {
            x
        } else {
            x - width / 2.0
        };
        w!(
            svg,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{MT}\" y2=\"{:.1}\"/>",
            MT + PH
        );
        if left > last_right + 4.0 {
            last_right = left + width;
            w!(
                svg,
                "<text class=\"xt\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
                MT + PH + 18.0,
                esc(text)
            );
        }
        svg.push('\n');
    }
    w!(
        svg,
        "<line class=\"axis\" x1=\"{ML}\" x2=\"{ML}\" y1=\"{MT}\" y2=\"{:.1}\"/>\n\
         <text class=\"xl\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile (log scale of 1/(1−p))</text>\n",
        MT + PH,
        ML + PW / 2.0,
        CH - 6.0
    );
    let names: Vec<(&str, &str)> = curves.iter().map(|c| (c.name, c.color)).collect();
    for (c, p) in curves.iter().zip(&pts) {
        if p.is_empty() {
            continue;
        }
        let coords: Vec<String> = p
            .iter()
            .map(|&(x, v)| format!("{:.1},{:.1}", px(x), py(v)))
            .collect();
        w!(
            svg,
            "<polyline data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
             stroke-linejoin=\"round\" points=\"{}\"/>\n",
            esc(c.name),
            esc(c.color),
            coords.join(" ")
        );
        // Where the tail leaves the axis, titled with how far it goes.
        let peak = p.iter().map(|q| q.1).fold(0.0, f64::max);
        if let Some(&(x, _)) = p.iter().find(|q| q.1 > top) {
            off_scale(
                &mut svg,
                px(x),
                &format!("{}: up to {} (off scale)", c.name, fmt_unit(unit, peak)),
            );
        }
    }
    draw_marks(&mut svg, &mut labels, unit, top, &opts.marks, &py);
    if !has_data {
        no_data(&mut svg);
    }
    frame("pp", label, &names, &labels, &svg)
}

/// Thin a long series to about two points per pixel column (each column's min and max, in
/// order), so hour-long runs stay small without hiding spikes.
fn decimate(pts: &[(f64, f64)], x0: f64, span: f64, cols: usize) -> Vec<(f64, f64)> {
    if pts.len() <= 2 * cols {
        return pts.to_vec();
    }
    let col = |t: f64| (((t - x0) / span) * cols as f64) as i64;
    let mut out = Vec::new();
    let mut i = 0;
    while i < pts.len() {
        let c = col(pts[i].0);
        let start = i;
        while i < pts.len() && col(pts[i].0) == c {
            i += 1;
        }
        let bucket = &pts[start..i];
        let (mut lo, mut hi) = (0, 0);
        for (j, p) in bucket.iter().enumerate() {
            if p.1 < bucket[lo].1 {
                lo = j;
            }
            if p.1 > bucket[hi].1 {
                hi = j;
            }
        }
        out.push(bucket[lo.min(hi)]);
        if lo != hi {
            out.push(bucket[lo.max(hi)]);
        }
    }
    out
}

/// Percentile bar chart geometry: five bars in a short, wide box that fits a double card.
const BW: f64 = 360.0;
const BH: f64 = 130.0;
/// Top of the tallest bar (room for its value above it) and the baseline (room for names).
const BTOP: f64 = 22.0;
const BBASE: f64 = 108.0;
const BSLOT: f64 = BW / 5.0;
const BBAR: f64 = 34.0;

/// A histogram's tail as five bars (p50, p90, p99, p99.9, max) on one linear scale, each
/// with its value above it, printed by `fmt` (the metric's own unit). `label` names the
/// metric for screen readers and hover titles.
pub(super) fn percentile_chart(
    label: &str,
    h: &HistSummary,
    fmt: &dyn Fn(u64) -> String,
) -> String {
    let bars = [
        ("p50", h.p50),
        ("p90", h.p90),
        ("p99", h.p99),
        ("p99.9", h.p999),
        ("max", h.max),
    ];
    let top = bars.iter().map(|b| b.1).max().unwrap_or(0).max(1) as f64;
    let mut svg = String::new();
    w!(
        svg,
        "<svg class=\"pc\" viewBox=\"0 0 {BW} {BH}\" role=\"img\" aria-label=\"{}: percentiles\" \
         preserveAspectRatio=\"xMidYMid meet\">\n",
        esc(label)
    );
    w!(
        svg,
        "<line class=\"axis\" x1=\"0\" x2=\"{BW}\" y1=\"{BBASE}\" y2=\"{BBASE}\"/>\n"
    );
    for (i, (name, v)) in bars.iter().enumerate() {
        let cx = BSLOT * (i as f64 + 0.5);
        // A non-zero value keeps at least a 1-unit sliver, so it never reads as zero.
        let height = match (*v as f64 / top * (BBASE - BTOP), *v) {
            (_, 0) => 0.0,
            (hgt, _) => hgt.max(1.0),
        };
        let color = if *name == "max" { ORANGE } else { BLUE };
        let value = esc(&fmt(*v));
        w!(
            svg,
            "<rect data-p=\"{name}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{BBAR}\" height=\"{height:.1}\" \
             fill=\"{color}\"><title>{} {name}: {value}</title></rect>\
             <text class=\"pv\" x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{value}</text>\
             <text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{name}</text>\n",
            cx - BBAR / 2.0,
            BBASE - height,
            esc(label),
            BBASE - height - 6.0,
            BBASE + 16.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The `points` of the polyline for series `name`, as (x, y) pairs.
#[cfg(test)]
pub(super) fn polyline(doc: &str, name: &str) -> Vec<(f64, f64)> {
    let start = doc
        .find(&format!("data-series=\"{name}\""))
        .unwrap_or_else(|| panic!("no series {name}"));
    let rest = &doc[start..];
    let p = rest.find("points=\"").expect("polyline has points") + 8;
    let end = rest[p..].find('"').expect("points attribute is closed");
    rest[p..p + end]
        .split(' ')
        .map(|xy| {
            let (x, y) = xy.split_once(',').expect("x,y pair");
            (x.parse().expect("x"), y.parse().expect("y"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_both_quotes() {
        assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
        assert_eq!(esc("plain µs"), "plain µs");
    }

    #[test]
    fn nice_ticks() {
        assert_eq!(axis_range(1000.0, 5.0, 5, true), (1000.0, 200.0));
        assert_eq!(axis_range(0.0, 5.0, 5, true), (5.0, 1.0));
        assert_eq!(axis_range(730.0, 100.0, 5, false), (800.0, 200.0));
        assert_eq!(axis_range(0.021, 0.001, 5, false), (0.025, 0.005));
        assert_eq!(decimals_for(2.5), 1);
        assert_eq!(decimals_for(0.005 * 100.0), 1);
    }

    #[test]
    fn chart_with_two_series_shares_one_scale() {
        let svg = line_chart(
            "rtt",
            &[
                Series {
                    name: "a",
                    color: BLUE,
                    points: vec![(1.0, 300.0), (2.0, 300.0)],
                },
                Series {
                    name: "b",
                    color: RED,
                    points: vec![(1.0, 1500.0), (2.0, 2000.0)],
                },
            ],
            Unit::Micros,
        );
        // 2000 µs → axis top 2 ms: 300 µs sits at 15 % of the height.
        let a = polyline(&svg, "a");
        assert!((a[0].1 - (MT + PH - 0.15 * PH)).abs() < 0.06);
        assert_eq!(polyline(&svg, "b")[1].1, MT);
        assert!(svg.contains(">2.0 ms</text>") && svg.contains(">0.5 ms</text>"));
    }

    #[test]
    fn long_series_is_decimated_but_keeps_spikes() {
        let mut pts: Vec<(f64, f64)> = (0..20_000).map(|i| (i as f64, 10.0)).collect();
        pts[12_345].1 = 999.0;
        let svg = line_chart(
            "long",
            &[Series {
                name: "x",
                color: BLUE,
                points: pts,
            }],
            Unit::Plain,
        );
        let line = polyline(&svg, "x");
        assert!(line.len() <= 2 * PW as usize + 2);
        assert!(line.iter().any(|p| p.1 < MT + 1.0));
        assert!(!svg.contains("<circle"));
    }

    #[test]
    fn series_names_and_labels_are_escaped_inside_svg() {
        let svg = line_chart(
            "<x>",
            &[Series {
                name: "a&b",
                color: BLUE,
                points: vec![(1.0, 1.0)],
            }],
            Unit::Count,
        );
        assert!(svg.contains("aria-label=\"&lt;x&gt;\""));
        assert!(svg.contains("data-series=\"a&amp;b\""));
        assert!(!svg.contains("a&b") && !svg.contains("<x>"));
    }

    /// Five bars on one scale: the largest (max) reaches the top, the rest in proportion,
    /// each labelled with its value in the metric's unit, escaped.
    #[test]
    fn percentile_chart_scales_bars_to_the_max() {
        let h = HistSummary {
            count: 10,
            min: 1,
            mean: 2.0,
            p50: 100,
            p90: 200,
            p99: 400,
            p999: 400,
            max: 800,
        };
        let svg = percentile_chart("Lag <ms>", &h, &|v| format!("{v} <u>"));
        let height = |p: &str| -> f64 {
            let at = svg.find(&format!("data-p=\"{p}\"")).expect("bar");
            let rest = &svg[at..];
            let h0 = rest.find("height=\"").expect("height") + 8;
            let h1 = rest[h0..].find('"').expect("closed");
            rest[h0..h0 + h1].parse().expect("number")
        };
        assert_eq!(height("max"), BBASE - BTOP);
        assert!((height("p50") - (BBASE - BTOP) / 8.0).abs() < 0.06);
        assert!((height("p99") - (BBASE - BTOP) / 2.0).abs() < 0.06);
        assert!(svg.contains(">800 &lt;u&gt;</text>"));
        assert!(svg.contains("aria-label=\"Lag &lt;ms&gt;: percentiles\""));
        assert!(!svg.contains("<u>") && !svg.contains("<ms>"));
        // All zero: no bars, no division by zero.
        let flat = percentile_chart("z", &HistSummary::default(), &|v| v.to_string());
        assert!(flat.contains("height=\"0.0\"") && !flat.contains("NaN"));
    }

    /// The percentile axis puts each nine one step right (log of 1/(1-p)); an outlier past
    /// the clip is drawn on the top edge and marked, not allowed to flatten the body.
    #[test]
    fn percentile_plot_spaces_nines_evenly_and_marks_the_clipped_tail() {
        let svg = percentile_plot(
            "rtt",
            &[Series {
                name: "a",
                color: BLUE,
                points: vec![
                    (0.5, 100.0),
                    (0.9, 200.0),
                    (0.99, 400.0),
                    (0.999, 100_000.0),
                ],
            }],
            1000,
            Unit::Micros,
            &Opts {
                clip_at: Some(600.0),
                ..Default::default()
            },
        );
        let line = polyline(&svg, "a");
        // 1000 samples: the axis ends at 99.9 % (three nines).
        let x = |nines: f64| ML + nines / 3.0 * PW;
        assert!((line[1].0 - x(1.0)).abs() < 0.06, "{line:?}");
        assert!((line[2].0 - x(2.0)).abs() < 0.06, "{line:?}");
        assert!((line[3].0 - x(3.0)).abs() < 0.06, "{line:?}");
        // The axis stops at the clip (600 µs, already a nice top): 400 µs is two thirds up.
        assert!((line[2].1 - (MT + PH / 3.0)).abs() < 0.06, "{line:?}");
        assert_eq!(line[3].1, MT);
        assert!(svg.contains("class=\"off\""));
        assert!(svg.contains("up to 100.00 ms (off scale)"));
        assert!(svg.contains(">99.9%</text>"));
    }

    /// A threshold near the data is a dashed line at its value; one far above is named at
    /// the top instead of squashing the data into the bottom of the chart.
    #[test]
    fn threshold_lines_sit_at_their_value_or_are_named_above() {
        let data = [Series {
            name: "p99",
            color: BLUE,
            points: vec![(1.0, 800.0), (2.0, 900.0)],
        }];
        let near = line_chart_with(
            "rtt",
            &data,
            Unit::Micros,
            &Opts {
                clip_at: None,
                marks: vec![Mark {
                    label: "threshold p99 <".into(),
                    value: 1000.0,
                }],
                ..Default::default()
            },
        );
        // Axis top 1 ms: the line is at the top of the plot.
        assert!(near.contains(&format!("class=\"thr\" data-mark=\"threshold p99 &lt;\" x1=\"{ML}\" x2=\"{:.1}\" y1=\"{MT:.1}\"", ML + PW)), "{near}");
        assert!(near.contains("threshold p99 &lt; 1.00 ms"));
        let far = line_chart_with(
            "rtt",
            &data,
            Unit::Micros,
            &Opts {
                clip_at: None,
                marks: vec![Mark {
                    label: "threshold p99 <".into(),
                    value: 50_000.0,
                }],
                ..Default::default()
            },
        );
        assert!(far.contains("data-mark=\"above\""));
        assert!(far.contains("threshold p99 &lt; 50.00 ms (above the axis)"));
        // The data still fill the chart: 900 µs under a 1 ms top.
        assert!(polyline(&far, "p99")[1].1 < MT + 0.2 * PH);
    }

    /// Labels never overprint (issue 37): two thresholds a few pixels apart are stacked,
    /// each limit above the axis gets a row of its own between the legend and the plot (the
    /// plot moves down), and a legend too long for one row wraps inside the chart.
    #[test]
    fn labels_are_stacked_and_legends_wrap() {
        let names = [
            "a rather long series name",
            "another long series name",
            "third",
        ];
        let series: Vec<Series> = names
            .iter()
            .map(|n| Series {
                name: n,
                color: BLUE,
                points: vec![(1.0, 0.05), (2.0, 0.07)],
            })
            .collect();
        let mark = |label: &str, value| Mark {
            label: label.into(),
            value,
        };
        let svg = line_chart_with(
            "loss",
            &series,
            Unit::Rate,
            &Opts {
                marks: vec![
                    mark("threshold <", 0.08),
                    mark("threshold ≤", 0.081),
                    mark("threshold < ", 1.0),
                ],
                expected: vec![Expected {
                    id: "input-interval",
                    label: "far".into(),
                    value: 2.0,
                }],
                overlay: Some(Overlay {
                    name: "bots in game (right axis)".into(),
                    points: vec![(1.0, 5.0), (2.0, 5.0)],
                }),
                ..Default::default()
            },
        );
        let at = svg
            .find("<g transform=\"translate(0 ")
            .expect("the plot moved down");
        let shift: f64 = svg[at + 26..].split(')').next().unwrap().parse().unwrap();
        // Two legend rows, two labels above the axis.
        assert!(
            (shift - (LEGEND_ROW + 2.0 * ABOVE_ROW)).abs() < 0.01,
            "{shift}"
        );
        assert!(svg.contains(&format!("viewBox=\"0 0 {CW} {}\"", CH + shift)));
        // Text boxes as the layout estimates them, in the SVG's units: (text, x0, y0, x1, y1).
        let mut boxes = Vec::new();
        for part in svg.split("<text ").skip(1) {
            let attr = |k: &str| -> f64 {
                let at = part.find(&format!(" {k}=\"")).expect("attribute") + k.len() + 3;
                part[at..at + part[at..].find('"').unwrap()]
                    .parse()
                    .unwrap()
            };
            let text = &part[part.find('>').unwrap() + 1..part.find("</text>").unwrap()];
            let legend = part.starts_with("class=\"lg\"");
            if !(legend
                || part.starts_with("class=\"thr\"")
                || part.starts_with("class=\"expected\""))
            {
                continue;
            }
            let (size, mut y) = if legend {
                (LEGEND_FONT, attr("y") + 0.32 * LEGEND_FONT)
            } else {
                (MARK_FONT, attr("y"))
            };
            // A label in the plot is drawn in the plot's coordinates, moved down by `shift`.
            if !legend && !part.contains("data-mark=\"above\"") && !part.contains("data-above") {
                y += shift;
            }
            let w = text_width(text, size);
            let x0 = if part.contains("text-anchor=\"end\"") {
                attr("x") - w
            } else {
                attr("x")
            };
            assert!(
                x0 >= 0.0 && x0 + w <= CW,
                "{text} runs out of the chart: {x0} + {w}"
            );
            boxes.push((
                text.to_string(),
                x0,
                y - ASCENT * size,
                x0 + w,
                y + DESCENT * size,
            ));
        }
        assert_eq!(boxes.len(), 4 + 2 + 2, "{boxes:?}");
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                let overlap = a.1 < b.3 && b.1 < a.3 && a.2 < b.4 && b.2 < a.4;
                assert!(!overlap, "{a:?} overprints {b:?}");
            }
        }
    }

    /// Layers stack: the second layer's upper edge is at the sum of both.
    #[test]
    fn stacked_layers_add_up() {
        let svg = stacked_chart(
            "phases",
            &[
                Series {
                    name: "content",
                    color: AMBER,
                    points: vec![(1.0, 10.0), (2.0, 0.0)],
                },
                Series {
                    name: "in_game",
                    color: BLUE,
                    points: vec![(1.0, 30.0), (2.0, 40.0)],
                },
                Series {
                    name: "failed",
                    color: RED,
                    points: vec![(1.0, 0.0), (2.0, 0.0)],
                },
            ],
            Unit::Count,
        );
        let top = polyline(&svg, "in_game");
        // Axis 0..40: both seconds total 40 bots, so the upper edge is at the top.
        assert_eq!(top[0].1, MT);
        assert_eq!(top[1].1, MT);
        // Its lower edge at second 1 is the 10 bots of `content`: a quarter up.
        assert!((top[3].1 - (MT + PH * 0.75)).abs() < 0.06, "{top:?}");
        // A layer that never had a bot is neither drawn nor in the legend.
        assert!(!svg.contains("failed"));
    }

    /// The active bots ride on their own axis at the right (0 .. a nice top over their
    /// peak), under the chart's series; an expected value is a dashed line at its value, or
    /// named above the axis when it is far over the data.
    #[test]
    fn overlay_on_its_own_axis_and_expected_lines() {
        let svg = line_chart_with(
            "snapshots",
            &[Series {
                name: "p50",
                color: BLUE,
                points: vec![(1.0, 16_000.0), (2.0, 17_000.0)],
            }],
            Unit::Micros,
            &Opts {
                expected: vec![
                    Expected {
                        id: "snapshot-interval",
                        label: "expected spacing (1 s / 60 Hz)".into(),
                        value: 1e6 / 60.0,
                    },
                    Expected {
                        id: "input-interval",
                        label: "input interval".into(),
                        value: 1e6,
                    },
                ],
                overlay: Some(Overlay {
                    name: "bots in game (right axis)".into(),
                    points: vec![(1.0, 50.0), (2.0, 100.0)],
                }),
                ..Default::default()
            },
        );
        // Bots 0..100: 50 is half way up, 100 at the top, whatever the left axis says.
        let at = svg.find("data-overlay=\"active-bots\"").expect("overlay");
        let p = at + svg[at..].find("points=\"").expect("points") + 8;
        let bots: Vec<(f64, f64)> = svg[p..p + svg[p..].find('"').expect("closed")]
            .split(' ')
            .map(|xy| {
                let (x, y) = xy.split_once(',').expect("x,y");
                (x.parse().expect("x"), y.parse().expect("y"))
            })
            .collect();
        assert!((bots[0].1 - (MT + PH / 2.0)).abs() < 0.06, "{bots:?}");
        assert_eq!(bots[1].1, MT);
        assert!(svg.contains("bots in game (right axis)"), "in the legend");
        assert!(svg.contains(&format!("class=\"yt2\" x=\"{:.1}\"", ML + PW + 6.0)));
        // The data's axis: 0 .. 20 ms; the expected spacing's line at 16.67 ms.
        let at = svg
            .find("data-expected=\"snapshot-interval\"")
            .expect("snapshot line");
        let y = MT + PH - (1e6 / 60.0) / 20_000.0 * PH;
        assert!(svg[at..].contains(&format!("y1=\"{y:.1}\"")), "{svg}");
        assert!(svg.contains("expected spacing (1 s / 60 Hz) 16.67 ms"));
        // One second is far above 17 ms of data: named at the top, not squashing the data.
        assert!(svg.contains("data-expected=\"input-interval\" data-above=\"true\""));
        assert!(polyline(&svg, "p50")[1].1 < MT + 0.2 * PH);
    }
}
