//! `tickswarm serve <protocol>`: a reference server as a standalone process.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::path::{Path, PathBuf};

use crate::duration::{format_duration, parse_duration, Dur};
use crate::engine::server_driver::{spawn_reference_server_logged, TickSecond, TickSeconds};
use crate::metrics::run::TickHistogram;
use crate::protocol::{ProtocolName, ProtocolSection, ServerParams, ServerStats};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Protocol to serve (see `tickswarm protocols`).
    #[arg(value_parser = parse_protocol)]
    protocol: ProtocolName,
    /// UDP port (default: the protocol's usual port; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// Address to bind.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    /// Take the protocol options and the `server:` section from this scenario file; the flags
    /// below override its server values.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Protocol dialect (see `tickswarm protocols`): shorthand for the protocol's dialect
    /// option (cafe and city `dialect`, rtype `float_order`).
    #[arg(long)]
    dialect: Option<String>,
    /// A protocol option as a scenario writes it, e.g. `--option chat_rate=2` (repeatable);
    /// parsed and checked exactly as the scenario's `protocol:` section.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Simulation and snapshot rate.
    #[arg(long, value_name = "HZ")]
    tick_rate: Option<u16>,
    /// Refuse clients beyond this many.
    #[arg(long, value_name = "N")]
    max_clients: Option<usize>,
    /// A full snapshot every N ticks (deltas in between).
    #[arg(long, value_name = "N")]
    full_every: Option<u32>,
    /// Drop clients silent for this long.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    client_timeout: Option<Duration>,
    /// Snapshots per second, where the protocol sends them slower than it ticks (rtype: 20-30).
    #[arg(long, value_name = "HZ")]
    snapshot_rate: Option<u32>,
    /// Players per room (default per protocol).
    #[arg(long, value_name = "N")]
    room_size: Option<usize>,
    /// Server instances on consecutive ports.
    #[arg(long, value_name = "N", default_value_t = 1)]
    instances: usize,
    /// Players per instance (protocols with a per-instance cap; city: default 100).
    #[arg(long, value_name = "N")]
    max_players: Option<usize>,
    /// Keep ENet's unreliable-packet throttle (C ENet's default), which drops unreliable
    /// packets when a peer's RTT rises; off by default so loss seen on loopback is the network's.
    #[arg(long)]
    enet_throttle: bool,
    /// Serve the server's own metrics (tick time, sessions, datagrams and bytes, send errors,
    /// refusals) in Prometheus' text format at `http://ADDR/metrics`, summed over instances.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// A target for measuring the generator, not the server (city): sessions are admitted
    /// (handshake, a one-chunk download, FullState), pings answered, inputs counted and
    /// dropped; no world, no snapshots. One instance takes thousands of bots.
    #[arg(long)]
    sink: bool,
    /// A test aid that burns CPU on purpose, never for production load: simulated work per
    /// player per tick (`50us`, `1ms`; at most 100ms), so the tick time grows linearly with
    /// the players and the server's capacity is known (the scenario's
    /// `server.tick_cost_per_player`).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    tick_cost_per_player: Option<Duration>,
    /// Write one line per second to FILE: `t_s players ticks tick_p50_us tick_p99_us
    /// tick_max_us over_budget`, over the ticks that began in that second (all instances
    /// together); `over_budget` counts the ticks longer than the tick period.
    #[arg(long, value_name = "FILE")]
    tick_log: Option<PathBuf>,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    duration: Option<Duration>,
}

fn parse_protocol(s: &str) -> Result<ProtocolName, String> {
    s.parse()
}

/// The protocol section and server parameters `serve` runs with, parsed through the same
/// typed path as a scenario's `protocol:` section.
fn configure(a: &ServeArgs) -> Result<(ProtocolSection, ServerParams), String> {
    let (mut section, mut server) = match &a.scenario {
        Some(path) => {
            let file = crate::scenario::load(path).map_err(|e| e.to_string())?;
            if file.protocol.name() != a.protocol {
                return Err(format!(
                    "{}: the scenario is for `{}`, not `{}`",
                    path.display(),
                    file.protocol.name(),
                    a.protocol
                ));
            }
            (file.protocol, file.server)
        }
        None => (a.protocol.default_section(), ServerParams::default()),
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(d) = &a.dialect {
        pairs.push(dialect_option(a.protocol, &section, d)?);
    }
    for o in &a.options {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| format!("--option `{o}`: expected KEY=VALUE"))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    if !pairs.is_empty() {
        section = with_options(&section, &pairs)?;
    }
    if let Some(v) = a.tick_rate {
        server.tick_rate = v;
    }
    if let Some(v) = a.max_clients {
        server.max_clients = v;
    }
    if let Some(v) = a.full_every {
        server.full_every = v;
    }
    if let Some(v) = a.client_timeout {
        server.client_timeout = Dur(v);
    }
    if a.snapshot_rate.is_some() {
        server.snapshot_rate = a.snapshot_rate;
    }
    if a.room_size.is_some() {
        server.room_size = a.room_size;
    }
    if a.max_players.is_some() {
        server.players_per_instance = a.max_players;
    }
    if let Some(v) = a.tick_cost_per_player {
        server.tick_cost_per_player = Some(Dur(v));
    }
    server.instances = Some(a.instances);
    if a.sink && !section.has_sink() {
        return Err(format!(
            "--sink: the {} reference server has no sink mode (city has)",
            section.name()
        ));
    }
    server.sink = a.sink;
    server.enet_throttle |= a.enet_throttle;
    section.validate(&server)?;
    if let Err(why) = section.transport().check_servable() {
        return Err(unservable(a.protocol, &section, &why));
    }
    Ok((section, server))
}

/// The dialects `tickswarm protocols` lists for `protocol`.
pub(crate) fn dialects(protocol: ProtocolName) -> Vec<&'static str> {
    protocol.info().dialects.iter().map(|(d, _)| *d).collect()
}

/// `--dialect D` as the protocol option that selects it: the protocol's dialect key (cafe and
/// city `dialect`, rtype `float_order`), else `dialect` itself (rtype's implementation
/// dialect is `dialect: implementation`, beside its float orders). A dialect `protocols` does
/// not list is refused with the ones it does.
pub(crate) fn dialect_option(
    protocol: ProtocolName,
    section: &ProtocolSection,
    d: &str,
) -> Result<(String, String), String> {
    let listed = dialects(protocol);
    if !listed.contains(&d) {
        return Err(format!(
            "--dialect {d}: {protocol} has no dialect `{d}`; its dialects are {} (see \
             `tickswarm protocols`)",
            listed.join(", ")
        ));
    }
    [protocol.dialect_key(), "dialect"]
        .into_iter()
        .map(|k| (k.to_string(), d.to_string()))
        .find(|pair| with_options(section, std::slice::from_ref(pair)).is_ok())
        .ok_or_else(|| {
            format!(
                "--dialect {d}: {protocol} lists the dialect `{d}` but neither its `{}` nor \
                 its `dialect` option takes it",
                protocol.dialect_key()
            )
        })
}

/// Why `serve` cannot run `section`'s dialect, in words, with the dialects it can.
fn unservable(protocol: ProtocolName, section: &ProtocolSection, why: &str) -> String {
    let base = protocol.default_section();
    let servable: Vec<&str> = dialects(protocol)
        .into_iter()
        .filter(|d| {
            dialect_option(protocol, &base, d)
                .and_then(|pair| with_options(&base, &[pair]))
                .is_ok_and(|s| s.transport().check_servable().is_ok())
        })
        .collect();
    let can = if servable.is_empty() {
        format!("no dialect of {protocol} can be served")
    } else {
        format!(
            "`tickswarm serve {protocol}` serves the dialect{} {}",
            if servable.len() == 1 { "" } else { "s" },
            servable.join(", ")
        )
    };
    format!(
        "the {protocol} reference server cannot serve dialect `{}`: {why}; {can}",
        section.dialect_name()
    )
}

/// `serve --tick-log`: the servers' whole seconds, added up over the instances, one line each
/// once every instance has sent it.
struct TickLog {
    path: PathBuf,
    /// The tick period in µs: a tick longer than it is over the budget.
    budget_us: u64,
    file: std::fs::File,
    rx: mpsc::Receiver<TickSecond>,
    instances: usize,
    /// Seconds some instances have sent: how many did, their players, their ticks.
    pending: BTreeMap<u64, (usize, usize, TickHistogram)>,
}

impl TickLog {
    /// Create `path` (truncated), write its header, and the sink the drivers send to.
    fn create(
        path: &Path,
        section: &ProtocolSection,
        server: &ServerParams,
        instances: usize,
    ) -> std::io::Result<(Self, TickSeconds)> {
        let mut file = std::fs::File::create(path)?;
        let cost = server
            .tick_cost_per_player
            .map_or_else(|| "none".to_string(), |d| format_duration(d.0));
        let budget_us = 1_000_000 / u64::from(server.tick_rate.max(1));
        file.write_all(
            format!(
                "# tickswarm serve {}: tick_rate {} Hz (budget {budget_us} us), \
                 tick_cost_per_player {cost}, {instances} instance(s); one line per second, \
                 over the ticks that began in it\n\
                 # t_s players ticks tick_p50_us tick_p99_us tick_max_us over_budget\n",
                section.name(),
                server.tick_rate,
            )
            .as_bytes(),
        )?;
        let (to, rx) = mpsc::channel();
        let log = Self {
            path: path.to_path_buf(),
            budget_us,
            file,
            rx,
            instances,
            pending: BTreeMap::new(),
        };
        let seconds = TickSeconds {
            origin: Instant::now(),
            to,
        };
        Ok((log, seconds))
    }

    /// Take what the drivers sent and write the seconds every instance has sent, in order.
    /// A log that cannot be written is reported once and closed; the servers go on.
    fn write_due(log: &mut Option<TickLog>) {
        let Some(l) = log.as_mut() else {
            return;
        };
        if let Err(e) = l.write() {
            say!("error: --tick-log {}: {e}; no more lines", l.path.display());
            *log = None;
        }
    }

    fn write(&mut self) -> std::io::Result<()> {
        while let Ok(s) = self.rx.try_recv() {
            let e = self
                .pending
                .entry(s.t_s)
                .or_insert_with(|| (0, 0, TickHistogram::default()));
            e.0 += 1;
            e.1 += s.players;
            // Same bounds on both sides: the add cannot fail.
            let _ = e.2 .0.add(&s.tick_us.0);
        }
        // Each instance sends its seconds in order, so a second all have sent is preceded
        // by seconds all have sent.
        while let Some(first) = self.pending.first_entry() {
            if first.get().0 < self.instances {
                break;
            }
            let (t, (_, players, h)) = first.remove_entry();
            let h = &h.0;
            let line = if h.is_empty() {
                format!("{t} {players} 0 - - - 0\n")
            } else {
                // Counted off the histogram (at its precision), not read off a percentile:
                // the share of ticks over the period is what decides whether a p99 fits it.
                let over = h
                    .iter_recorded()
                    .filter(|v| h.lowest_equivalent(v.value_iterated_to()) > self.budget_us)
                    .map(|v| v.count_at_value())
                    .sum::<u64>();
                format!(
                    "{t} {players} {} {} {} {} {over}\n",
                    h.len(),
                    h.value_at_quantile(0.5),
                    h.value_at_quantile(0.99),
                    h.max()
                )
            };
            // One write a line, unbuffered: a reader (or a killed process) sees whole lines.
            self.file.write_all(line.as_bytes())?;
        }
        Ok(())
    }
}

/// `section` with `pairs` set, through serde: the section is written out as YAML, the pairs
/// replace its keys, and the result is parsed as a scenario's `protocol:` section would be
/// (unknown keys and bad values are refused with the scenario's messages, naming the pair).
pub(crate) fn with_options(
    section: &ProtocolSection,
    pairs: &[(String, String)],
) -> Result<ProtocolSection, String> {
    let name = section.name();
    set_options(section, pairs).map_err(|what| {
        // The parser's place is in a document the user never saw (and is the section's first
        // key for some mistakes): the pair that fails alone is the one to name.
        match pairs.iter().find_map(|p| {
            set_options(section, std::slice::from_ref(p))
                .err()
                .map(|w| (p, w))
        }) {
            Some(((k, v), what)) => format!("{name} option {k}={v}: {what}"),
            None => format!("{name} options: {what}"),
        }
    })
}

/// [`with_options`]' parse; the error is the parser's message without its place.
fn set_options(
    section: &ProtocolSection,
    pairs: &[(String, String)],
) -> Result<ProtocolSection, String> {
    let name = section.name();
    let mut yaml = serde_saphyr::to_string(section).map_err(|e| e.to_string())?;
    let mut doc = format!("{name}:\n");
    let body = yaml.split_off(yaml.find('\n').map_or(yaml.len(), |i| i + 1));
    for line in body.lines() {
        let key = line.trim_start().split(':').next().unwrap_or_default();
        if !pairs.iter().any(|(k, _)| k == key) {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    for (k, v) in pairs {
        doc.push_str(&format!("  {k}: {v}\n"));
    }
    serde_saphyr::from_str::<ProtocolSection>(&doc).map_err(|e| {
        let e = e.to_string();
        let first = e.lines().next().unwrap_or_default();
        let first = first.trim_start_matches("error: ");
        // "line 2 column 3: what" -> "what"
        first
            .strip_prefix("line ")
            .and_then(|r| r.split_once(": "))
            .map_or(first, |(_, what)| what)
            .to_string()
    })
}

pub fn cmd_serve(a: &ServeArgs, console: super::Console) -> anyhow::Result<u8> {
    let (section, server) = match configure(a) {
        Ok(v) => v,
        Err(m) => {
            say!("error: {m}");
            return Ok(super::EXIT_USAGE);
        }
    };
    let name = section.name();
    let info = name.info();
    let first_port = a.port.unwrap_or(info.default_port);
    let instances = a.instances.max(1);
    if first_port != 0 && usize::from(first_port) + instances - 1 > usize::from(u16::MAX) {
        say!(
            "error: {instances} instances from port {first_port} run past port 65535; \
             pick a lower --port or fewer --instances"
        );
        return Ok(super::EXIT_USAGE);
    }
    let (mut tick_log, seconds) = match &a.tick_log {
        Some(path) => {
            let (log, seconds) = TickLog::create(path, &section, &server, instances)
                .map_err(|e| anyhow::anyhow!("--tick-log {}: {e}", path.display()))?;
            (Some(log), Some(seconds))
        }
        None => (None, None),
    };
    let mut handles: Vec<crate::engine::ServerHandle> = Vec::new();
    for i in 0..instances {
        // Consecutive ports after the first (after the first one picked, when it is 0).
        let port = match (first_port, handles.first()) {
            (0, Some(h)) => h.addr.port().checked_add(i as u16),
            (0, None) => Some(0),
            (p, _) => p.checked_add(i as u16),
        };
        let Some(port) = port else {
            anyhow::bail!("instance {i} would need a port past 65535");
        };
        let bind = SocketAddr::new(a.bind, port);
        let params = crate::protocol::ServerParams {
            instance: i,
            ..server.clone()
        };
        let handle = spawn_reference_server_logged(bind, &section, &params, seconds.clone())
            .map_err(|e| anyhow::anyhow!("cannot bind {bind}: {e}"))?;
        out!(
            "tickswarm {} reference server listening on {} ({})",
            name,
            handle.addr,
            info.transport
        );
        handles.push(handle);
    }
    let _metrics = match a.metrics_listen {
        Some(addr) => {
            let m = server_metrics_endpoint(addr, name.as_str(), &handles)?;
            out!("metrics  http://{}/metrics", m.addr());
            Some(m)
        }
        None => None,
    };
    let stop = crate::engine::StopSignal::new();
    super::install_ctrl_c(stop.clone());
    let start = Instant::now();
    let mut last_out = 0;
    let total = |handles: &[crate::engine::ServerHandle]| {
        handles
            .iter()
            .map(|h| h.stats())
            .fold(ServerStats::default(), |mut a, b| {
                a.merge(&b);
                a
            })
    };
    while !stop.is_stopped() {
        std::thread::sleep(Duration::from_millis(200));
        TickLog::write_due(&mut tick_log);
        if a.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        let s = total(&handles);
        let secs = start.elapsed().as_secs();
        if secs != last_out && !console.quiet {
            last_out = secs;
            say!(
                "[{secs:>4}s] clients {} · accepted {} refused {} timed out {} · in {} out {} datagrams · dropped {}",
                s.clients,
                s.accepted,
                s.refused,
                s.timed_out,
                s.datagrams_in,
                s.datagrams_out,
                s.dropped.total()
            );
        }
    }
    let s = total(&handles);
    drop(handles);
    // The servers have stopped: every whole second they saw is in.
    TickLog::write_due(&mut tick_log);
    // The server's and its transport's counters (refusals, ENet admission, superseded
    // sessions): what a soak reads to tell what happened over thousands of sessions.
    let listed = |c: &crate::metrics::NamedCounters| {
        let parts: Vec<String> = c.iter().map(|(k, n)| format!("{k} {n}")).collect();
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    };
    out!(
        "served {} clients; {} datagrams in, {} out; malformed dropped: {}; events: {}",
        s.accepted,
        s.datagrams_in,
        s.datagrams_out,
        listed(&s.dropped),
        listed(&s.events)
    );
    Ok(super::EXIT_PASS)
}

/// A `/metrics` endpoint on `addr` that renders the counters of `handles` (summed) on each
/// scrape: `serve --metrics-listen`, and the embedded server of a run.
pub(super) fn server_metrics_endpoint(
    addr: SocketAddr,
    protocol: &str,
    handles: &[crate::engine::ServerHandle],
) -> anyhow::Result<super::metrics_listen::MetricsServer> {
    let sources: Vec<crate::engine::StatsSource> =
        handles.iter().map(|h| h.stats_source()).collect();
    live_endpoint(addr, protocol, sources)
}

/// The same over live views of the servers' counters.
pub(super) fn live_endpoint(
    addr: SocketAddr,
    protocol: &str,
    sources: Vec<crate::engine::StatsSource>,
) -> anyhow::Result<super::metrics_listen::MetricsServer> {
    let protocol = protocol.to_string();
    super::metrics_listen::MetricsServer::start_live(addr, move || {
        let total = sources
            .iter()
            .map(|s| s.get())
            .fold(ServerStats::default(), |mut a, b| {
                a.merge(&b);
                a
            });
        crate::report::prometheus::render_server(&protocol, &total)
    })
}
