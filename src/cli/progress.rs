//! Console output: one progress line a second, and the result at the end.

use std::io::IsTerminal;

use crate::metrics::describe::Display;
use crate::report::build::describe_outcome;
use crate::report::format::{fit_line, fmt_count, fmt_counts, fmt_pct, fmt_us, group_int};
use crate::report::summary::{IntervalPoint, Summary};
use crate::scenario::plan::StageSpan;

/// A group of bots stuck on their way in is reported once it has waited this long...
const WAIT_REPORT_AFTER_S: u64 = 5;
/// ...and again every this many seconds while it stays stuck.
const WAIT_REPORT_EVERY_S: f64 = 5.0;
/// Width assumed when stderr is a terminal whose size cannot be read.
const FALLBACK_COLUMNS: usize = 80;

/// The bar's width in cells at most, and the fewest spare columns that make it worth showing.
const BAR_MAX: usize = 30;
const BAR_MIN: usize = 10;

pub struct Progress {
    planned: u64,
    /// The run's planned length (s) and its population stages.
    total_s: f64,
    stages: Vec<StageSpan>,
    tty: bool,
    /// When the "waiting for" lines were last printed (run seconds).
    waiting_printed_at: Option<f64>,
}

/// A time of the second, or a dash when the second had no sample (empty is not zero).
fn ms(us: Option<u64>) -> String {
    us.map_or_else(|| "–".to_string(), |us| fmt_us(us as f64))
}

/// The progress line's parts, most important first: `fit_line` drops from the end, so on a
/// narrow terminal the figures go in this order: lateness, packets, stage, time left, loss,
/// RTT; elapsed/total with its percentage and the bots stay.
fn progress_parts(
    p: &IntervalPoint,
    connected: u64,
    planned: u64,
    total_s: f64,
    stages: &[StageSpan],
) -> Vec<String> {
    let in_game = p.phases.in_game;
    let pct = if total_s > 0.0 {
        (p.t / total_s * 100.0).clamp(0.0, 100.0)
    } else {
        100.0
    };
    let head = format!(
        "[{:>4.0}s/{}s {:>3.0}%]",
        p.t,
        total_s.round() as u64,
        pct.floor()
    );
    let bots = if p.phases.is_empty() || in_game == connected {
        format!("{head} bots {connected}/{planned}")
    } else {
        // Connected but not playing (City's content transfer): say so on the line itself.
        format!("{head} bots {connected}/{planned}, {in_game} in game")
    };
    vec![
        bots,
        format!("rtt p50 {} p99 {}", ms(p.rtt_p50_us), ms(p.rtt_p99_us)),
        format!(
            "loss {}",
            p.loss_down_rate.map_or_else(|| "–".to_string(), fmt_pct)
        ),
        format!("{}s left", (total_s - p.t).max(0.0).round() as u64),
        stage_text(p.t, stages),
        format!(
            "pkt/s up {} down {}",
            fmt_count(p.packets_up as f64),
            fmt_count(p.packets_down as f64)
        ),
        format!("lateness p99 {}", ms(p.lateness_p99_us)),
    ]
}

/// "stage 2/3 hold 100" for the stage under way at `t` seconds ("after the stages" once they
/// are over and the run's `duration` goes on).
fn stage_text(t: f64, stages: &[StageSpan]) -> String {
    match stages.iter().position(|s| t < s.end_s - 1e-9) {
        Some(i) => format!("stage {}/{} {}", i + 1, stages.len(), stages[i].label),
        None => "after the stages".to_string(),
    }
}

/// A bar of `cells` cells, filled to `fraction`, in whole and eighth blocks.
fn bar(fraction: f64, cells: usize) -> String {
    const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let eighths = (fraction.clamp(0.0, 1.0) * (cells * 8) as f64).round() as usize;
    let full = eighths / 8;
    let mut out = String::with_capacity(cells * 3 + 2);
    out.push('▕');
    out.extend(std::iter::repeat_n('█', full));
    if full < cells {
        out.push(EIGHTHS[eighths % 8]);
        out.extend(std::iter::repeat_n(' ', cells - full - 1));
    }
    out.push('▏');
    out
}

/// The terminal's line: the parts that fit `width`, and a bar after the elapsed/total when
/// at least [`BAR_MIN`] cells are spare.
fn terminal_line(parts: &[String], width: usize, fraction: f64) -> String {
    let line = fit_line(parts, width);
    let used = line.chars().count();
    // The bar takes its cells plus its two ends and a space.
    let spare = width.saturating_sub(used + 3);
    if spare < BAR_MIN {
        return line;
    }
    let cells = spare.min(BAR_MAX);
    // Right after the bracketed elapsed/total.
    match line.find(']') {
        Some(end) => format!(
            "{} {}{}",
            &line[..=end],
            bar(fraction, cells),
            &line[end + 1..]
        ),
        None => line,
    }
}

/// "20 bots waiting for ContentManifest for 15 s" for the groups that have waited at least
/// [`WAIT_REPORT_AFTER_S`], most bots first (three at most).
fn waiting_lines(p: &IntervalPoint) -> Vec<String> {
    p.waiting
        .iter()
        .filter(|w| w.longest_s >= WAIT_REPORT_AFTER_S)
        .take(3)
        .map(|w| format!("waiting  {}", w.sentence()))
        .collect()
}

/// Columns of the terminal on stderr: its window size, else `$COLUMNS`, else 80.
fn terminal_columns() -> usize {
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own; a failure leaves it
    // zeroed and is checked.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        return usize::from(ws.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .filter(|&c| c > 0)
        .unwrap_or(FALLBACK_COLUMNS)
}

impl Progress {
    pub fn new(planned: u64, total: std::time::Duration, stages: Vec<StageSpan>) -> Self {
        Self {
            planned,
            total_s: total.as_secs_f64(),
            stages,
            tty: std::io::stderr().is_terminal(),
            waiting_printed_at: None,
        }
    }

    /// At most one line per second (called by the collector once per completed interval).
    /// On a terminal the line is rewritten in place and fits its width (one column spare, so
    /// it never wraps); otherwise every second is a plain line, whole.
    pub fn line(&mut self, p: &IntervalPoint, connected: u64) {
        let parts = progress_parts(p, connected, self.planned, self.total_s, &self.stages);
        let waiting = waiting_lines(p);
        let due = self
            .waiting_printed_at
            .is_none_or(|t| p.t - t >= WAIT_REPORT_EVERY_S - 1e-9);
        if !waiting.is_empty() && due {
            self.waiting_printed_at = Some(p.t);
            if self.tty {
                super::term::raw_stderr("\r\x1b[2K");
            }
            for w in &waiting {
                say!("{w}");
            }
        }
        if self.tty {
            let width = terminal_columns().saturating_sub(1).max(1);
            let fraction = if self.total_s > 0.0 {
                p.t / self.total_s
            } else {
                1.0
            };
            super::term::raw_stderr(&format!(
                "\r\x1b[2K{}",
                super::term::clean(&terminal_line(&parts, width, fraction))
            ));
        } else {
            say!("{}", parts.join(" · "));
        }
    }
}

pub fn print_result(s: &Summary) {
    if std::io::stderr().is_terminal() {
        say!();
    }
    say!(
        "bots     {} planned, {} connected, {} failed, {} lost mid-run, {} silent at the end",
        s.bots.planned,
        s.bots.connected,
        s.bots.failed,
        s.bots.lost,
        s.bots.silent_at_end
    );
    if s.rtt_us.count == 0 {
        // Empty is not zero: no sample has no percentile.
        say!("rtt      no samples");
    } else {
        say!(
            "rtt      p50 {} p99 {} max {} ({} samples)",
            ms(Some(s.rtt_us.p50)),
            ms(Some(s.rtt_us.p99)),
            ms(Some(s.rtt_us.max)),
            group_int(s.rtt_us.count)
        );
    }
    say!(
        "loss     downstream {}; upstream {}",
        match s.loss.downstream {
            // Nothing expected: not measurable, never 0 %.
            Some(l) => format!(
                "{:.3}% ({} of {} missing)",
                l.rate * 100.0,
                group_int(l.expected.saturating_sub(l.received)),
                group_int(l.expected)
            ),
            None if s.loss_method.downstream.starts_with("not measurable") => {
                "not measurable".into()
            }
            None => "no data".into(),
        },
        match s.loss.upstream {
            Some(u) => format!("{:.3}%", u.rate * 100.0),
            None => "not measurable".into(),
        }
    );
    // The server's snapshot rate, and when it changed: a server that lowers its rate on
    // purpose shows here, not as loss.
    if let Some(r) = &s.snapshot_rate {
        let hz = crate::report::format::fmt_hz;
        let changes: Vec<String> = r
            .changes
            .iter()
            .map(crate::report::format::rate_change)
            .collect();
        say!(
            "rate     {} snapshots per bot (slowest second {}, fastest {}){}",
            hz(r.mean_hz),
            hz(r.min_hz),
            hz(r.max_hz),
            if changes.is_empty() {
                String::new()
            } else {
                format!("; rate changed {}", changes.join("; "))
            }
        );
    }
    // No input due, no lateness: "–", never "0 µs".
    let lateness = Some(&s.generator.send_lateness_us).filter(|h| h.count > 0);
    say!(
        "inputs   {} sent, send lateness p50 {} p99 {} max {}, {} grid slots skipped",
        group_int(s.inputs_sent),
        ms(lateness.map(|h| h.p50)),
        ms(lateness.map(|h| h.p99)),
        ms(lateness.map(|h| h.max)),
        group_int(s.generator.inputs_skipped)
    );
    // The protocol's own counters it wants read first (cards), when they fired: e.g. a shared
    // sequence counter detected, or snapshots that fit another dialect.
    let notable: Vec<String> = s
        .protocol_metric_info
        .iter()
        .filter(|(_, i)| i.display != Display::Table && !i.is_micros())
        .filter_map(|(k, i)| {
            let n = s.protocol_metrics.get(k)?.as_u64().filter(|&n| n > 0)?;
            Some(format!("{} {n}", i.label))
        })
        .collect();
    if !notable.is_empty() {
        say!("protocol {}", notable.join(" · "));
    }
    // Bots still on their way in when the run ended, and what they waited for.
    if let Some(last) = s.intervals.last() {
        for w in last
            .waiting
            .iter()
            .filter(|w| w.longest_s >= WAIT_REPORT_AFTER_S)
            .take(3)
        {
            say!("waiting  {} when the run ended", w.sentence());
        }
    }
    if s.generator.saturated {
        say!(
            "warning  the generator was saturated ({} of the grid's slots skipped, send lateness \
             p99 at {} of the input period): figures measure this machine as much as the server",
            s.generator
                .skipped_share
                .map_or("none".into(), |x| format!("{:.2}%", x * 100.0)),
            s.generator
                .lateness_p99_of_period
                .map_or("n/a".into(), |x| format!("{:.0}%", x * 100.0)),
        );
    }
    if s.generator.cpu_bound_seconds > 0 {
        say!(
            "warning  the generator, not the server, was the limit in {} second{}: a worker used \
             {:.0}% of a core or more while input slots were skipped (busiest worker {:.0}%); \
             add workers or machines (--shard)",
            s.generator.cpu_bound_seconds,
            if s.generator.cpu_bound_seconds == 1 {
                ""
            } else {
                "s"
            },
            crate::metrics::run::CPU_BOUND_SHARE * 100.0,
            s.generator.worker_cpu_max.unwrap_or(0.0) * 100.0
        );
    }
    let socket: u64 = s.generator.send_errors.values().sum();
    if socket > 0 {
        // Local socket errors (e.g. `recv.connection_refused`: the server's port is closed).
        say!(
            "sockets  {socket} send/receive errors: {}",
            fmt_counts(&s.generator.send_errors)
        );
    }
    let decode: u64 = s.errors.decode.values().sum();
    if decode > 0 {
        say!(
            "decode   {decode} malformed datagrams dropped: {}",
            fmt_counts(&s.errors.decode)
        );
    }
    // PASS green, FAIL red, on a terminal that takes colour (not with NO_COLOR, not in a
    // pipe or a CI log). The text is cleaned before it is painted.
    use super::term::{paint, Colour};
    let colour = super::term::stderr_colour();
    for t in &s.thresholds {
        let (word, c) = match (t.skipped, t.ok) {
            (true, _) => ("SKIP", Colour::Yellow),
            (false, true) => ("PASS", Colour::Green),
            (false, false) => ("FAIL", Colour::Red),
        };
        super::term::raw_stderr(&format!(
            "{}  {}\n",
            paint(word, c, colour),
            super::term::clean(&format!("{:<28} {}", t.condition, describe_outcome(t)))
        ));
    }
    let verdict = s.verdict.to_uppercase();
    let c = if s.verdict == "pass" {
        Colour::Green
    } else {
        Colour::Red
    };
    let interrupted = if s.interrupted {
        format!(
            " ({})",
            paint(
                &format!(
                    "INTERRUPTED after {}",
                    crate::report::format::fmt_duration(s.duration_s)
                ),
                Colour::Yellow,
                colour
            )
        )
    } else {
        String::new()
    };
    super::term::raw_stderr(&format!(
        "verdict  {}{interrupted}\n",
        paint(&verdict, c, colour)
    ));
    for r in crate::report::reasons::verdict_reasons(s) {
        say!("why      {r}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Phase, PhaseCounts, Waiting};

    fn point() -> IntervalPoint {
        IntervalPoint {
            t: 15.0,
            rtt_p50_us: Some(995),
            rtt_p99_us: Some(1250),
            packets_up: 7166,
            packets_down: 12_400,
            lateness_p99_us: Some(40),
            loss_down_rate: Some(0.0),
            ..IntervalPoint::default()
        }
    }

    /// A 5 s ramp to 20 then a 25 s hold: a 30 s run.
    fn stages() -> Vec<StageSpan> {
        vec![
            StageSpan {
                end_s: 5.0,
                label: "ramp to 20".into(),
            },
            StageSpan {
                end_s: 30.0,
                label: "hold 20".into(),
            },
        ]
    }

    fn parts(p: &IntervalPoint) -> Vec<String> {
        progress_parts(p, 20, 20, 30.0, &stages())
    }

    #[test]
    fn a_second_with_nothing_expected_shows_no_loss_figure() {
        let p = IntervalPoint {
            loss_down_rate: None,
            ..point()
        };
        assert!(parts(&p).contains(&"loss –".to_string()));
    }

    #[test]
    fn one_unit_style_on_the_progress_line() {
        let line = parts(&point()).join(" · ");
        assert_eq!(
            line,
            "[  15s/30s  50%] bots 20/20 · rtt p50 995 µs p99 1.25 ms · loss 0.00% \
             · 15s left · stage 2/2 hold 20 · pkt/s up 7.17k down 12.4k · lateness p99 40 µs"
        );
    }

    #[test]
    fn the_stage_under_way_and_after_the_stages() {
        assert_eq!(stage_text(0.0, &stages()), "stage 1/2 ramp to 20");
        assert_eq!(stage_text(4.9, &stages()), "stage 1/2 ramp to 20");
        assert_eq!(stage_text(5.0, &stages()), "stage 2/2 hold 20");
        assert_eq!(stage_text(30.0, &stages()), "after the stages");
    }

    /// On a terminal: the figures drop from the end as the width shrinks, the bar comes
    /// after the head when 10 cells or more are spare, and no line is wider than asked.
    #[test]
    fn the_terminal_line_fits_and_shows_a_bar_where_there_is_room() {
        let ps = parts(&point());
        let wide = terminal_line(&ps, 199, 0.5);
        assert!(
            wide.starts_with("[  15s/30s  50%] ▕███████████████               ▏ bots"),
            "{wide}"
        );
        assert!(wide.ends_with("lateness p99 40 µs"), "{wide}");
        for width in [20, 40, 60, 79, 99, 120, 160, 199] {
            let line = terminal_line(&ps, width, 0.5);
            assert!(line.chars().count() <= width, "{width}: {line}");
        }
        // 79 columns: no room for the bar; the head, bots, rtt and loss stay.
        let narrow = terminal_line(&ps, 79, 0.5);
        assert!(!narrow.contains('▕'), "{narrow}");
        assert!(
            narrow.starts_with("[  15s/30s  50%] bots 20/20 · rtt p50"),
            "{narrow}"
        );
        assert_eq!(bar(0.0, 4), "▕    ▏");
        assert_eq!(bar(1.0, 4), "▕████▏");
        assert_eq!(bar(0.5625, 4), "▕██▎ ▏");
    }

    #[test]
    fn connected_but_not_in_game_is_on_the_line() {
        let mut p = point();
        p.phases = PhaseCounts {
            content: 20,
            ..Default::default()
        };
        let parts = parts(&p);
        assert_eq!(parts[0], "[  15s/30s  50%] bots 20/20, 0 in game");
        // Even at 40 columns the bot count survives.
        assert_eq!(
            fit_line(&parts, 40),
            "[  15s/30s  50%] bots 20/20, 0 in game"
        );
    }

    #[test]
    fn stuck_groups_are_named_once_they_waited() {
        let mut p = point();
        p.waiting = vec![
            Waiting {
                phase: Phase::Content,
                what: Some("ContentManifest".into()),
                bots: 20,
                longest_s: 15,
            },
            Waiting {
                phase: Phase::ProtocolHandshake,
                what: Some("ServerHello".into()),
                bots: 2,
                longest_s: 1,
            },
        ];
        assert_eq!(
            waiting_lines(&p),
            vec!["waiting  20 bots waiting for ContentManifest for 15 s (content)"]
        );
    }
}
