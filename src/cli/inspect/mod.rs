//! `tickswarm inspect CAPTURE`: which protocol and dialect each flow of a capture speaks,
//! its messages and the client's behaviour (`crate::capture` does the reading).

use std::path::{Path, PathBuf};

use crate::capture::analyse::{FlowReport, Inspection};

mod scenario;

#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// A pcap or pcapng capture (tcpdump, Wireshark, `tickswarm relay --record`).
    capture: PathBuf,
    /// Print the whole inspection as JSON on stdout, for machines.
    #[arg(long)]
    json: bool,
    /// Also write a commented scenario to FILE: the protocol, dialect and server the
    /// captured clients spoke to, their rates, and one client's keys as `pattern: replay`.
    #[arg(long, value_name = "FILE")]
    write_scenario: Option<PathBuf>,
    /// Replace FILE when it exists (without it, an existing file is refused).
    #[arg(long, requires = "write_scenario")]
    force: bool,
}

pub(crate) fn cmd_inspect(a: &InspectArgs) -> anyhow::Result<u8> {
    let file = match std::fs::File::open(&a.capture) {
        Ok(f) => f,
        Err(e) => {
            say!("error: {}: {e}", a.capture.display());
            return Ok(crate::cli::EXIT_USAGE);
        }
    };
    let ins = match crate::capture::inspect(std::io::BufReader::new(file)) {
        Ok(i) => i,
        Err(e) => {
            say!("error: {}: {e}", a.capture.display());
            return Ok(crate::cli::EXIT_FAIL);
        }
    };
    if a.json {
        out!("{}", serde_json::to_string_pretty(&ins)?);
    } else {
        print_text(&ins);
    }
    match &a.write_scenario {
        Some(path) => write_scenario(a, &ins, path),
        None => Ok(crate::cli::EXIT_PASS),
    }
}

/// `--write-scenario FILE`: the scenario written (a file that exists is kept unless
/// `--force`, as `init` keeps one), then read back as `validate` reads it (a
/// file the scenario reader refuses is a bug here, and says so).
fn write_scenario(a: &InspectArgs, ins: &Inspection, path: &Path) -> anyhow::Result<u8> {
    let capture = a.capture.file_name().map_or_else(
        || a.capture.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let name = path
        .file_stem()
        .map_or_else(|| "capture".into(), |n| n.to_string_lossy().into_owned());
    let w = match scenario::write_scenario(ins, &capture, &name) {
        Ok(w) => w,
        Err(e) => {
            say!("error: --write-scenario: {e}");
            return Ok(crate::cli::EXIT_FAIL);
        }
    };
    if let Err(e) = crate::cli::init::write_new(path, w.yaml.as_bytes(), a.force) {
        say!("error: {e}");
        return Ok(crate::cli::EXIT_USAGE);
    }
    if let Err(e) = crate::scenario::load(path) {
        say!("error: the written scenario does not read back (a bug, please report it): {e}");
        return Ok(crate::cli::EXIT_FAIL);
    }
    let replay = if w.replay_steps > 0 {
        format!("replaying {} key changes", w.replay_steps)
    } else {
        "no keys to replay (random walk)".to_string()
    };
    say!(
        "wrote {}: {} bots of {}, dialect {}, against {}, {replay}",
        path.display(),
        w.bots,
        w.protocol,
        w.dialect,
        w.target
    );
    Ok(crate::cli::EXIT_PASS)
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2} {unit}"))
}

fn print_text(ins: &Inspection) {
    let r = &ins.read;
    out!(
        "capture: {} frames, {} UDP/TCP packets, {} flows",
        r.frames,
        r.packets,
        ins.flows.len()
    );
    if let Some(at) = r.truncated_at {
        out!("  the file ends inside a block at byte {at} (a capture cut short): read up to there");
    }
    for (what, n) in [
        ("cut by the snap length (capture with -s 0)", r.snaplen_cut),
        ("IP fragments (not reassembled)", r.ip_fragments),
        ("malformed frames", r.malformed),
        ("neither UDP nor TCP", r.other),
        ("packets of flows past the limit", ins.packets_not_followed),
    ] {
        if n > 0 {
            out!("  not read: {n} {what}");
        }
    }
    for f in &ins.flows {
        print_flow(f);
    }
}

fn print_flow(f: &FlowReport) {
    out!();
    out!(
        "flow {} {} -> {} ({:.1} s): to server {} datagrams ({:.1}/s, {} bytes), to client {} ({:.1}/s, {} bytes)",
        f.carrier,
        f.client,
        f.server,
        f.duration_s,
        f.to_server.datagrams,
        f.to_server.rate_hz,
        f.to_server.bytes,
        f.to_client.datagrams,
        f.to_client.rate_hz,
        f.to_client.bytes
    );
    match (&f.protocol, &f.dialect) {
        (Some(p), Some(d)) => out!("  protocol: {p}, dialect {d}"),
        _ => out!(
            "  protocol: none tickswarm knows reads this flow (rates above are the flow's own)"
        ),
    }
    out!("  candidates (share of datagrams read):");
    for c in &f.candidates {
        if let Some(why) = &c.cannot {
            out!(
                "    {:>9} {:<16} cannot inspect: {why}",
                c.protocol,
                c.dialect
            );
            continue;
        }
        out!(
            "    {:>9} {:<16} {:>6.1} % ({} of {})",
            c.protocol,
            c.dialect,
            c.share * 100.0,
            c.decoded,
            c.of
        );
        if let Some(x) = &c.first_failure {
            out!(
                "        first failure: datagram {} ({}, {:.3} s), {} byte {}: expected {}",
                x.datagram,
                x.direction,
                x.at_s,
                x.layer,
                x.offset,
                x.expected
            );
            out!("        {}", x.hex);
        }
    }
    if let Some(best) = f.candidates.first().filter(|_| f.protocol.is_some()) {
        out!("  messages:");
        for m in &best.messages {
            out!(
                "    {:<9} {:<20} {:>8} × {}..{} bytes (mean {:.1})",
                m.direction,
                m.kind,
                m.count,
                m.min_bytes,
                m.max_bytes,
                m.mean_bytes
            );
        }
    }
    if let Some(b) = &f.behaviour {
        out!(
            "  client: {} inputs at {} (jitter {}), {} pings every {}",
            b.inputs,
            opt(b.input_rate_hz, "Hz"),
            opt(b.input_jitter_ms, "ms"),
            b.pings,
            opt(b.ping_interval_ms, "ms")
        );
        let sizes = b.snapshot_bytes.map_or_else(
            || "-".into(),
            |(a, m, z)| format!("{a}..{z} bytes, mean {m:.1}"),
        );
        out!(
            "  server: {} snapshots at {} ({sizes})",
            b.snapshots,
            opt(b.snapshot_rate_hz, "Hz")
        );
        let rtt = b.rtt_ms.map_or_else(
            || "-".into(),
            |(n, lo, mid, hi)| {
                format!("{n} pairs, min {lo:.2} ms, median {mid:.2} ms, max {hi:.2} ms")
            },
        );
        out!(
            "  rtt: {rtt}; loss: downstream {}, upstream {}",
            b.downstream_loss
                .map_or_else(|| "-".into(), |l| format!("{:.2} %", l * 100.0)),
            b.upstream_loss
                .map_or_else(|| "-".into(), |l| format!("{:.2} %", l * 100.0))
        );
    }
}
