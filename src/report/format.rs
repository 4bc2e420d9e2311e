//! Numbers as tickswarm prints them, on the console and in the report alike: times in µs/ms
//! (`995 µs`, `1.25 ms`: the unit switches at 1000 µs everywhere), percentages, bytes,
//! grouped integers, compact counts (`7.17k`, `12.4k`), and protocol metrics in the unit
//! their protocol declared. One module, so the console and the report never disagree on how
//! a figure reads.
//!
//! Every function returns plain text (never HTML): the template escapes it, and the SVG code
//! escapes what it puts into a chart.

use crate::metrics::MetricInfo;

/// What a number measures, which decides how it is printed and how a chart axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    /// Whole things (bots, packets).
    Count,
    /// Microseconds.
    Micros,
    /// A fraction, shown as a percentage.
    Rate,
    Bytes,
    BytesPerSec,
    /// Per second: a rate of events (snapshots per bot per second).
    Hertz,
    /// A number without a known unit.
    Plain,
}

/// The unit of a metric from its dotted name (`rtt_us.p99`, `loss.downstream.rate`), for
/// metrics that no protocol described (the summary's own fields, thresholds).
pub fn metric_unit(metric: &str) -> Unit {
    let m = metric.to_ascii_lowercase();
    let parts: Vec<&str> = m.split('.').collect();
    if parts.iter().any(|p| p.ends_with("_us")) {
        Unit::Micros
    } else if parts.iter().any(|p| p.ends_with("_hz")) {
        Unit::Hertz
    } else if parts
        .iter()
        .any(|p| p.contains("rate") || p.starts_with("loss"))
    {
        Unit::Rate
    } else if parts
        .iter()
        .any(|p| p.contains("bytes_per_s") || p.ends_with("_bps"))
    {
        Unit::BytesPerSec
    } else if parts.iter().any(|p| p.contains("bytes")) {
        Unit::Bytes
    } else {
        Unit::Plain
    }
}

pub fn fmt_unit(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Count | Unit::Plain => fmt_plain(v),
        Unit::Micros => fmt_us(v),
        Unit::Rate => fmt_pct(v),
        Unit::Bytes => fmt_bytes(v),
        Unit::BytesPerSec => format!("{}/s", fmt_bytes(v)),
        Unit::Hertz => fmt_hz(v),
    }
}

/// A recorded value of a protocol metric as its protocol wants it read: divided by the
/// declared scale, then as a time (`us`), a bare number (`count`), or with the display unit
/// appended (`0.250 tiles` for 250 recorded at scale 1000). The unit and scale come from
/// summary.json, so a zero scale is read as 1 rather than dividing by it.
pub fn metric_value(info: &MetricInfo, v: f64) -> String {
    let scale = info.scale.max(1);
    let shown = v / f64::from(scale);
    match info.unit.as_str() {
        "us" => fmt_us(shown),
        "count" | "" => fmt_plain(shown),
        unit if scale == 1 => format!("{} {unit}", fmt_plain(shown)),
        // As many decimals as the scale has digits after the first: 1000 → 0.001 steps.
        unit => {
            let decimals = f64::from(scale).log10().ceil() as usize;
            format!("{} {unit}", group_f(shown, decimals))
        }
    }
}

/// A rate per second: `20 Hz`, `19.87 Hz` (two decimals, none when whole).
pub fn fmt_hz(v: f64) -> String {
    fmt_hz_to(v, 2)
}

/// A rate per second to `decimals` decimals, none when whole after rounding.
pub fn fmt_hz_to(v: f64, decimals: i32) -> String {
    let scale = 10f64.powi(decimals);
    let r = (v * scale).round() / scale;
    if r.fract() == 0.0 {
        format!("{r:.0} Hz")
    } else {
        format!("{r:.*} Hz", decimals.max(0) as usize)
    }
}

/// A change of the snapshot rate as the console and the report say it:
/// `20 Hz → 10 Hz at 6 s, 196 players`.
pub fn rate_change(c: &crate::metrics::snapshot_rate::RateChangeAt) -> String {
    format!(
        "{} → {} at {} s, {} players",
        fmt_hz_to(c.from_hz, 1),
        fmt_hz_to(c.to_hz, 1),
        c.t,
        c.bots_in_game
    )
}

/// Microseconds: `850 µs`, `12.3 µs`, or `1.25 ms` from 1000 µs up. The unit is chosen on
/// the value as printed: 999.97 µs (a scraped 0.00099997 s) would print as `1000 µs`, so it
/// is `1.00 ms`.
pub fn fmt_us(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if (v * 10.0).round().abs() >= 10_000.0 {
        format!("{} ms", group_f(v / 1000.0, 2))
    } else {
        let s = format!("{v:.1}");
        format!("{} µs", s.strip_suffix(".0").unwrap_or(&s))
    }
}

/// A fraction as a percentage, with enough decimals to show small rates.
pub fn fmt_pct(r: f64) -> String {
    if !r.is_finite() {
        return "n/a".into();
    }
    let p = r * 100.0;
    if p == 0.0 {
        "0.00%".into()
    } else if p.abs() < 0.01 {
        format!("{p:.4}%")
    } else if p.abs() < 10.0 {
        format!("{p:.2}%")
    } else {
        format!("{p:.1}%")
    }
}

/// Bytes with decimal (SI) prefixes and three significant digits: `812 B`, `1.23 MB`.
pub fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    if !b.is_finite() {
        return "n/a".into();
    }
    if b.abs() < 1000.0 {
        return format!("{b:.0} B");
    }
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    let digits = if v.abs() < 10.0 {
        2
    } else if v.abs() < 100.0 {
        1
    } else {
        0
    };
    format!("{v:.digits$} {}", UNITS[i])
}

/// A number of unknown unit: grouped integer, or up to three decimals.
pub fn fmt_plain(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        group_f(v, 0)
    } else {
        let s = group_f(v, 3);
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A run's length: `20.0 s`, `4 min 05 s`, `1 h 02 min 05 s`.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "n/a".into();
    }
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let total = secs.round() as u64;
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    if h == 0 {
        format!("{m} min {s:02} s")
    } else {
        format!("{h} h {m:02} min {s:02} s")
    }
}

/// A count or a rate for narrow places (the console's progress line, chart labels): exact
/// below 1000, then three significant digits with an SI suffix: `716`, `7.17k`, `12.4k`,
/// `1.23M`. Every count on the console reads this way, so `7166` and `12.4k` never sit side
/// by side.
pub fn fmt_count(v: f64) -> String {
    const UNITS: [&str; 5] = ["", "k", "M", "G", "T"];
    if !v.is_finite() {
        return "n/a".into();
    }
    if v.abs() < 1000.0 {
        return if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            let s = format!("{v:.1}");
            s.strip_suffix(".0").unwrap_or(&s).to_string()
        };
    }
    let mut x = v;
    let mut i = 0;
    // Round first, so 999.96k becomes 1.00M rather than "1000k".
    while i < UNITS.len() - 1 && x.abs() >= 999.5 {
        x /= 1000.0;
        i += 1;
    }
    let digits = if x.abs() < 9.995 {
        2
    } else if x.abs() < 99.95 {
        1
    } else {
        0
    };
    format!("{x:.digits$}{}", UNITS[i])
}

/// Join `parts` with ` · ` into at most `width` columns (characters: the text is ASCII plus
/// `µ` and `·`, one column each): the parts are in order of importance, so those at the end
/// are dropped first, and a first part that alone is too wide is cut with `…`. A line wider
/// than the terminal wraps, and `\r` then returns only to the start of its last row, leaving
/// a fragment behind on each update.
pub fn fit_line(parts: &[String], width: usize) -> String {
    const SEP: &str = " · ";
    let mut out = String::new();
    let mut cols = 0;
    for (i, p) in parts.iter().enumerate() {
        let add = p.chars().count() + if i == 0 { 0 } else { SEP.chars().count() };
        if cols + add > width {
            if i == 0 {
                return cut(p, width);
            }
            break;
        }
        if i > 0 {
            out.push_str(SEP);
        }
        out.push_str(p);
        cols += add;
    }
    out
}

/// `s` in at most `width` columns, ending with `…` when cut.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// An integer with thousands separators: `1,234,567`.
/// Counters by reason as a person reads them, in name order: `recv.connection_refused: 12,
/// timeout: 1` (the console, the report's reasons and the unreachable-target error alike).
pub fn fmt_counts(m: &std::collections::BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}: {}", group_int(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn group_int(n: u64) -> String {
    group_digits(&n.to_string())
}

/// Thousands separators in a run of ASCII digits.
fn group_digits(digits: &str) -> String {
    let len = digits.len();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (len - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `v` with `decimals` decimals and thousands separators.
pub fn group_f(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s.as_str(), None),
    };
    // No "-0.00": a value that rounds to zero has no sign.
    let negative = v < 0.0 && s.bytes().any(|b| (b'1'..=b'9').contains(&b));
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    out.push_str(&group_digits(int));
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_rate_changes_read_as_people_write_them() {
        assert_eq!(fmt_hz(60.0), "60 Hz");
        assert_eq!(fmt_hz(1e6 / 16_667.0), "60 Hz");
        assert_eq!(fmt_hz(19.87), "19.87 Hz");
        let c = crate::metrics::snapshot_rate::RateChangeAt {
            t: 5.0,
            from_hz: 20.0,
            to_hz: 9.94,
            bots_in_game: 196,
        };
        assert_eq!(rate_change(&c), "20 Hz → 9.9 Hz at 5 s, 196 players");
        let c = crate::metrics::snapshot_rate::RateChangeAt { to_hz: 10.0, ..c };
        assert_eq!(rate_change(&c), "20 Hz → 10 Hz at 5 s, 196 players");
    }
    use crate::metrics::describe::Display;

    fn info(unit: &str, scale: u32) -> MetricInfo {
        MetricInfo {
            label: "x".into(),
            about: String::new(),
            unit: unit.into(),
            scale,
            display: Display::Card,
            per_bot_minute: false,
        }
    }

    #[test]
    fn times_switch_to_ms_at_one_thousand_us() {
        assert_eq!(fmt_us(999.0), "999 µs");
        // A value that rounds to 1000 µs is a millisecond, never "1000 µs".
        assert_eq!(fmt_us(999.96), "1.00 ms");
        assert_eq!(fmt_us(0.000_999_999_9 * 1e6), "1.00 ms");
        assert_eq!(fmt_us(-999.96), "-1.00 ms");
        assert_eq!(fmt_us(999.94), "999.9 µs");
        assert_eq!(fmt_us(12.34), "12.3 µs");
        assert_eq!(fmt_us(1234.0), "1.23 ms");
        assert_eq!(fmt_us(12_345_678.0), "12,345.68 ms");
        assert_eq!(fmt_us(f64::NAN), "n/a");
    }

    #[test]
    fn percentages_keep_small_rates_visible() {
        assert_eq!(fmt_pct(0.0), "0.00%");
        assert_eq!(fmt_pct(0.000_01), "0.0010%");
        assert_eq!(fmt_pct(0.0123), "1.23%");
        assert_eq!(fmt_pct(0.5), "50.0%");
        assert_eq!(fmt_pct(f64::INFINITY), "n/a");
    }

    #[test]
    fn bytes_integers_and_durations() {
        assert_eq!(fmt_bytes(1_234_567.0), "1.23 MB");
        assert_eq!(fmt_bytes(999.0), "999 B");
        assert_eq!(group_int(1_234_567), "1,234,567");
        assert_eq!(group_int(0), "0");
        assert_eq!(group_f(-0.001, 2), "0.00");
        assert_eq!(group_f(-1234.5, 1), "-1,234.5");
        assert_eq!(fmt_plain(0.125), "0.125");
        assert_eq!(fmt_plain(152_340.0), "152,340");
        assert_eq!(fmt_duration(20.0), "20.0 s");
        assert_eq!(fmt_duration(245.0), "4 min 05 s");
        assert_eq!(fmt_duration(3725.0), "1 h 02 min 05 s");
    }

    #[test]
    fn metric_units_from_dotted_names() {
        assert_eq!(metric_unit("rtt_us.p99"), Unit::Micros);
        assert_eq!(metric_unit("loss.downstream.rate"), Unit::Rate);
        assert_eq!(metric_unit("bandwidth.up_bytes"), Unit::Bytes);
        assert_eq!(metric_unit("orders_placed"), Unit::Plain);
    }

    /// A protocol metric is divided by its scale and printed in its declared unit.
    #[test]
    fn protocol_metric_values_follow_their_description() {
        assert_eq!(metric_value(&info("us", 1), 1500.0), "1.50 ms");
        assert_eq!(metric_value(&info("count", 1), 42.0), "42");
        assert_eq!(metric_value(&info("tiles", 1000), 250.0), "0.250 tiles");
        assert_eq!(metric_value(&info("tiles", 1000), 1.0), "0.001 tiles");
        assert_eq!(metric_value(&info("ppm", 1), 12_500.0), "12,500 ppm");
        // A damaged summary.json with scale 0 must not divide by zero.
        assert_eq!(metric_value(&info("ticks", 0), 3.0), "3 ticks");
    }

    #[test]
    fn counts_are_compact_with_three_significant_digits() {
        assert_eq!(fmt_count(0.0), "0");
        assert_eq!(fmt_count(716.0), "716");
        assert_eq!(fmt_count(999.0), "999");
        assert_eq!(fmt_count(1000.0), "1.00k");
        assert_eq!(fmt_count(7166.0), "7.17k");
        assert_eq!(fmt_count(12_400.0), "12.4k");
        assert_eq!(fmt_count(123_456.0), "123k");
        assert_eq!(fmt_count(999_960.0), "1.00M");
        assert_eq!(fmt_count(1_234_567.0), "1.23M");
        assert_eq!(fmt_count(2.5), "2.5");
    }

    #[test]
    fn times_read_the_same_on_both_sides_of_one_millisecond() {
        assert_eq!(fmt_us(995.0), "995 µs");
        assert_eq!(fmt_us(990.0), "990 µs");
        assert_eq!(fmt_us(1250.0), "1.25 ms");
    }

    #[test]
    fn a_line_fits_its_width_dropping_the_least_important_parts() {
        let parts: Vec<String> = [
            "[  12s] bots 20/20",
            "rtt p50 995 µs p99 1.25 ms",
            "loss 0.00%",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let full = fit_line(&parts, 200);
        assert_eq!(
            full,
            "[  12s] bots 20/20 · rtt p50 995 µs p99 1.25 ms · loss 0.00%"
        );
        assert_eq!(full.chars().count(), 60);
        // One column short of the whole: the last part goes, not half of it.
        assert_eq!(
            fit_line(&parts, 59),
            "[  12s] bots 20/20 · rtt p50 995 µs p99 1.25 ms"
        );
        assert_eq!(fit_line(&parts, 20), "[  12s] bots 20/20");
        // Too narrow for even the first part: cut, with a mark.
        assert_eq!(fit_line(&parts, 10), "[  12s] b…");
        for w in 0..80 {
            assert!(fit_line(&parts, w).chars().count() <= w, "width {w}");
        }
    }
}
