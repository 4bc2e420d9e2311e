//! Console output: one progress line a second, and the result at the end.

use std::io::IsTerminal;

use crate::metrics::describe::Display;
use crate::report::build::format_observed;
use crate::report::summary::{IntervalPoint, Summary};

pub struct Progress {
    planned: u64,
    tty: bool,
}

fn ms(us: u64) -> String {
    format!("{:.2}ms", us as f64 / 1000.0)
}

fn rate(n: u64) -> String {
    if n >= 10_000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

impl Progress {
    pub fn new(planned: u64) -> Self {
        Self {
            planned,
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// At most one line per second (called by the collector once per completed interval).
    pub fn line(&mut self, p: &IntervalPoint, connected: u64) {
        let text = format!(
            "[{:>4.0}s] bots {}/{} · rtt p50 {} p99 {} · loss {:.2}% · pkt/s up {} down {} · lateness p99 {}",
            p.t,
            connected,
            self.planned,
            ms(p.rtt_p50_us),
            ms(p.rtt_p99_us),
            p.loss_down_rate * 100.0,
            rate(p.packets_up),
            rate(p.packets_down),
            ms(p.lateness_p99_us),
        );
        if self.tty {
            eprint!("\r\x1b[2K{text}");
        } else {
            eprintln!("{text}");
        }
    }
}

pub fn print_result(s: &Summary) {
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    let l = s.loss.downstream.unwrap_or_default();
    eprintln!(
        "bots     {} planned, {} connected, {} failed, {} lost mid-run, {} silent at the end",
        s.bots.planned, s.bots.connected, s.bots.failed, s.bots.lost, s.bots.silent_at_end
    );
    eprintln!(
        "rtt      p50 {} p99 {} max {} ({} samples)",
        ms(s.rtt_us.p50),
        ms(s.rtt_us.p99),
        ms(s.rtt_us.max),
        s.rtt_us.count
    );
    eprintln!(
        "loss     downstream {:.3}% ({} of {} missing); upstream {}",
        l.rate * 100.0,
        l.expected.saturating_sub(l.received),
        l.expected,
        match s.loss.upstream {
            Some(u) => format!("{:.3}%", u.rate * 100.0),
            None => "not measurable".into(),
        }
    );
    eprintln!(
        "inputs   {} sent, send lateness p50 {} p99 {} max {}, {} grid slots skipped",
        s.inputs_sent,
        ms(s.generator.send_lateness_us.p50),
        ms(s.generator.send_lateness_us.p99),
        ms(s.generator.send_lateness_us.max),
        s.generator.inputs_skipped
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
        eprintln!("protocol {}", notable.join(" · "));
    }
    if s.generator.saturated {
        eprintln!(
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
    let socket: u64 = s.generator.send_errors.values().sum();
    if socket > 0 {
        // Local socket errors (e.g. `recv.connection_refused`: the server's port is closed).
        eprintln!(
            "sockets  {socket} send/receive errors: {:?}",
            s.generator.send_errors
        );
    }
    let decode: u64 = s.errors.decode.values().sum();
    if decode > 0 {
        eprintln!(
            "decode   {decode} malformed datagrams dropped: {:?}",
            s.errors.decode
        );
    }
    for t in &s.thresholds {
        eprintln!(
            "{}  {:<28} observed {}",
            if t.ok { "PASS" } else { "FAIL" },
            t.condition,
            format_observed(&t.metric, t.observed)
        );
    }
    eprintln!("verdict  {}", s.verdict.to_uppercase());
}
