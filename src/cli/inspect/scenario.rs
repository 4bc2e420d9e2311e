//! A scenario from a capture (`tickswarm inspect CAPTURE --write-scenario FILE`): the
//! protocol, dialect and server the captured clients spoke to, their input and ping rates,
//! and the key stream of one of them as `pattern: replay`, so a swarm behaves like them.
//!
//! The clients chosen are the flows of the most common (protocol, dialect, server) the
//! capture names; the file says in comments what it was written from and what it left out
//! (other servers, a key stream cut at its bound, figures the capture could not give).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use crate::capture::analyse::{candidates, FlowReport, Inspection};
use crate::cli::init::yaml_string;
use crate::duration::format_duration;
use crate::protocol::TransportNeeds;
use crate::report::compare::median;

/// What a group of flows speaks and to whom: protocol, dialect, server.
type GroupKey = (String, String, SocketAddr);

/// Replay steps written at most; a longer stream is cut (the file says so).
pub const MAX_WRITTEN_STEPS: usize = 10_000;

/// What [`write_scenario`] chose, for the console.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The scenario's text.
    pub yaml: String,
    /// Protocol name.
    pub protocol: String,
    /// Dialect name.
    pub dialect: String,
    /// The target as the scenario names it.
    pub target: String,
    /// Bots: one per captured client of that server.
    pub bots: usize,
    /// Steps in the replayed key stream (0: the clients' inputs carry no keys).
    pub replay_steps: usize,
}

/// Why no scenario can be written.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WriteScenarioError {
    /// No flow was read as any protocol.
    #[error("no flow of the capture reads as a protocol tickswarm knows, so there is nothing to write a scenario for")]
    NothingNamed,
}

/// A commented scenario for the capture's most common (protocol, dialect, server), `name`
/// its `name:` and `capture` the file it came from (for the comments).
pub(super) fn write_scenario(
    ins: &Inspection,
    capture: &str,
    name: &str,
) -> Result<Written, WriteScenarioError> {
    // Group the named flows by what they speak and to whom; the biggest group wins (ties:
    // the one seen first).
    let mut groups: Vec<(GroupKey, Vec<(usize, &FlowReport)>)> = Vec::new();
    for (i, f) in ins.flows.iter().enumerate() {
        let (Some(p), Some(d)) = (&f.protocol, &f.dialect) else {
            continue;
        };
        let key = (p.clone(), d.clone(), f.server);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push((i, f)),
            None => groups.push((key, vec![(i, f)])),
        }
    }
    // A UDP group before a TCP one (a TCP login is part of a UDP session), then the largest.
    let Some(best) = (0..groups.len()).max_by_key(|&g| {
        let (_, flows) = &groups[g];
        let udp = flows.iter().all(|(_, f)| f.carrier == "udp");
        (udp, flows.len(), std::cmp::Reverse(g))
    }) else {
        return Err(WriteScenarioError::NothingNamed);
    };
    let ((protocol, dialect, server), flows) = &groups[best];
    let dialect_key = flows
        .first()
        .and_then(|(_, f)| f.dialect_key.clone())
        .unwrap_or_else(|| "dialect".into());

    // The target: for a protocol that logs in over TCP, the TCP port the scenario names.
    let offset = candidates()
        .into_iter()
        .find(|c| c.protocol.as_str() == protocol && c.dialect == *dialect)
        .and_then(|c| match c.section.transport() {
            TransportNeeds::UdpTcpLogin { udp_port_offset } => Some(udp_port_offset),
            _ => None,
        });
    let target = match offset {
        Some(o) if flows.iter().all(|(_, f)| f.carrier == "udp") => {
            SocketAddr::new(server.ip(), server.port().saturating_sub(o))
        }
        _ => *server,
    };

    let behaviours: Vec<_> = flows
        .iter()
        .filter_map(|(_, f)| f.behaviour.as_ref())
        .collect();
    let input_rate = median(behaviours.iter().filter_map(|b| b.input_rate_hz).collect());
    let ping_ms = median(
        behaviours
            .iter()
            .filter_map(|b| b.ping_interval_ms)
            .collect(),
    );
    let jitter_ms = median(
        behaviours
            .iter()
            .filter_map(|b| b.input_jitter_ms)
            .collect(),
    );
    let duration_s = median(flows.iter().map(|(_, f)| f.duration_s).collect()).unwrap_or(0.0);
    // The replay: the longest key stream among the chosen clients.
    let replayed = flows
        .iter()
        .filter_map(|(i, f)| f.behaviour.as_ref().map(|b| (*i, f, b)))
        .filter(|(_, _, b)| !b.key_steps.is_empty())
        .max_by_key(|(_, _, b)| b.key_steps.len());

    let mut y = String::new();
    let w = &mut y;
    let _ = writeln!(
        w,
        "# Written by `tickswarm inspect {capture} --write-scenario`."
    );
    let _ = writeln!(
        w,
        "# From {} captured client flow(s) to {server}, read as {protocol}, dialect {dialect}.",
        flows.len()
    );
    for (_, ((p, d, s), other)) in groups
        .iter()
        .enumerate()
        .filter(|(g, _)| *g != best)
        // The TCP logins of the same sessions are not left out: the target names them.
        .filter(|(_, ((p, d, s), _))| !(p == protocol && d == dialect && *s == target))
    {
        let _ = writeln!(
            w,
            "# Left out: {} flow(s) to {s} read as {p}, dialect {d} (one scenario per server).",
            other.len()
        );
    }
    let _ = writeln!(
        w,
        "# Check it with `tickswarm validate FILE`, then run it against a staging server."
    );
    let _ = writeln!(w, "name: {}", yaml_string(name));
    let _ = writeln!(w);
    let _ = writeln!(w, "protocol:");
    let _ = writeln!(w, "  {protocol}:");
    let _ = writeln!(w, "    {dialect_key}: {dialect}");
    let _ = writeln!(w);
    let _ = writeln!(w, "# The server the clients were captured talking to.");
    let _ = writeln!(w, "target: \"{target}\"");
    let _ = writeln!(w);
    let hold = Duration::from_secs((duration_s.ceil() as u64).clamp(5, 600));
    let _ = writeln!(
        w,
        "# One bot per captured client; held as long as the median flow lasted ({duration_s:.1} s, at least 5 s)."
    );
    let _ = writeln!(w, "population:");
    let _ = writeln!(w, "  stages:");
    let _ = writeln!(w, "    - ramp_to: {}", flows.len());
    let _ = writeln!(w, "      over: 2s");
    let _ = writeln!(w, "    - hold: {}", format_duration(hold));
    let _ = writeln!(w);
    let _ = writeln!(w, "behaviour:");
    match input_rate {
        Some(r) => {
            let rate = (r * 10.0).round() / 10.0;
            let jitter = jitter_ms.map_or_else(String::new, |j| format!(", jitter {j:.2} ms"));
            let _ = writeln!(
                w,
                "  input_rate: {}   # the captured clients' median input rate{jitter}",
                fmt_num(rate.clamp(0.1, 1000.0))
            );
        }
        None => {
            let _ = writeln!(
                w,
                "  # The captured clients sent no inputs this protocol reads; tickswarm's default rate:"
            );
            let _ = writeln!(w, "  input_rate: 60");
        }
    }
    match ping_ms {
        Some(ms) => {
            let every = Duration::from_millis((ms.round() as u64).max(10));
            let _ = writeln!(
                w,
                "  ping_interval: {}   # the captured clients' median",
                format_duration(every)
            );
        }
        None => {
            let _ = writeln!(
                w,
                "  # The captured clients sent no pings this protocol reads (RTT may come from the transport)."
            );
        }
    }
    let mut replay_steps = 0;
    match replayed {
        Some((i, f, b)) => {
            let steps = &b.key_steps[..b.key_steps.len().min(MAX_WRITTEN_STEPS)];
            replay_steps = steps.len();
            let covered: Duration = steps.iter().map(|(_, d)| *d).sum();
            let _ = writeln!(w, "  pattern:");
            let _ = writeln!(w, "    replay:");
            let _ = writeln!(
                w,
                "      from: {}",
                yaml_string(&format!(
                    "{capture}, flow {} ({} -> {})",
                    i + 1,
                    f.client,
                    f.server
                ))
            );
            if steps.len() < b.key_steps.len() || b.key_stream_cut {
                let _ = writeln!(
                    w,
                    "      # cut: the first {} key changes, {} of the client's inputs",
                    steps.len(),
                    format_duration(covered)
                );
            }
            let _ = writeln!(
                w,
                "      # {} key changes over {}; each bot plays them looped from its own offset",
                steps.len(),
                format_duration(covered)
            );
            let _ = writeln!(w, "      steps:");
            for (k, d) in steps {
                let ms = Duration::from_millis((d.as_micros() as u64).div_ceil(1000).max(1));
                let _ = writeln!(
                    w,
                    "        - {{ keys: [{}], for: {} }}",
                    k.names().join(", "),
                    format_duration(ms)
                );
            }
        }
        None => {
            let _ = writeln!(
                w,
                "  # The captured inputs carry no keys tickswarm can replay; the bots walk at random."
            );
            let _ = writeln!(w, "  pattern:");
            let _ = writeln!(w, "    random_walk:");
            let _ = writeln!(w, "      change_every: 500ms");
        }
    }
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "duration: {}",
        format_duration(hold + Duration::from_secs(2))
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "# CI gate; add the RTT and loss limits your game needs (docs: thresholds)."
    );
    if let Some((_, _, mid, hi)) = behaviours.iter().filter_map(|b| b.rtt_ms).next() {
        let _ = writeln!(
            w,
            "# The captured RTT at the capture point: median {mid:.2} ms, max {hi:.2} ms."
        );
    }
    let _ = writeln!(w, "thresholds:");
    let _ = writeln!(w, "  - connect_success > 99%");
    Ok(Written {
        yaml: y,
        protocol: protocol.clone(),
        dialect: dialect.clone(),
        target: target.to_string(),
        bots: flows.len(),
        replay_steps,
    })
}

/// A number as YAML reads it: no trailing `.0`.
fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}
