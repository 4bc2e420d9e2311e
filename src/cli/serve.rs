//! `tickswarm serve <protocol>`: a reference server as a standalone process.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::engine::{make_server, players_per_instance, spawn_server_on, transport_for};
use crate::protocol::{ProtocolName, ServerStats};
use crate::scenario::{parse_duration, Dur, ProtocolSection, ServerSection};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Protocol to serve.
    #[arg(value_enum)]
    protocol: ServeProtocol,
    /// UDP port (default: the protocol's usual port; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// Address to bind.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    /// Simulation and snapshot rate.
    #[arg(long, value_name = "HZ", default_value_t = 60)]
    tick_rate: u16,
    /// Refuse clients beyond this many.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_clients: usize,
    /// A full snapshot every N ticks (deltas in between).
    #[arg(long, value_name = "N", default_value_t = 60)]
    full_every: u32,
    /// Drop clients silent for this long.
    #[arg(long, value_name = "D", value_parser = parse_duration, default_value = "5s")]
    client_timeout: Duration,
    /// Snapshots per second, where the protocol sends them slower than it ticks (rtype: 20-30).
    #[arg(long, value_name = "HZ")]
    snapshot_rate: Option<u32>,
    /// Players per room (default per protocol).
    #[arg(long, value_name = "N")]
    room_size: Option<usize>,
    /// Protocol dialect (see `tickswarm protocols`): cafe and city `spec`|`implementation`,
    /// rtype `big`|`little` (float byte order).
    #[arg(long)]
    dialect: Option<String>,
    /// Server instances on consecutive ports (city: each takes --max-players).
    #[arg(long, value_name = "N", default_value_t = 1)]
    instances: usize,
    /// Players per instance (city; default 100).
    #[arg(long, value_name = "N")]
    max_players: Option<usize>,
    /// Keep ENet's unreliable-packet throttle (C ENet's default), which drops unreliable
    /// packets when a peer's RTT rises; off by default so loss seen on loopback is the network's.
    #[arg(long)]
    enet_throttle: bool,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    duration: Option<Duration>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ServeProtocol {
    Cafe,
    Rtype,
    City,
}

pub fn cmd_serve(a: &ServeArgs) -> anyhow::Result<u8> {
    let dialect = a.dialect.as_deref();
    let (name, section) = match a.protocol {
        ServeProtocol::Cafe => {
            let dialect = match dialect.unwrap_or("spec") {
                "spec" => crate::protocol::cafe::Dialect::Spec,
                "implementation" => crate::protocol::cafe::Dialect::Implementation,
                other => {
                    eprintln!("error: unknown cafe dialect `{other}` (spec, implementation)");
                    return Ok(super::EXIT_USAGE);
                }
            };
            (
                ProtocolName::Cafe,
                ProtocolSection::Cafe(crate::protocol::cafe::CafeOptions {
                    dialect,
                    ..Default::default()
                }),
            )
        }
        ServeProtocol::City => {
            let dialect = match dialect.unwrap_or("spec") {
                "spec" => crate::protocol::city::Dialect::Spec,
                "implementation" => crate::protocol::city::Dialect::Implementation,
                other => {
                    eprintln!("error: unknown city dialect `{other}` (spec, implementation)");
                    return Ok(super::EXIT_USAGE);
                }
            };
            (
                ProtocolName::City,
                ProtocolSection::City(crate::protocol::city::CityOptions {
                    dialect,
                    ..Default::default()
                }),
            )
        }
        ServeProtocol::Rtype => {
            let float_order = match dialect.unwrap_or("big") {
                "big" => crate::protocol::rtype::FloatOrder::Big,
                "little" => crate::protocol::rtype::FloatOrder::Little,
                other => {
                    eprintln!("error: unknown rtype float order `{other}` (big, little)");
                    return Ok(super::EXIT_USAGE);
                }
            };
            (
                ProtocolName::Rtype,
                ProtocolSection::Rtype(crate::protocol::rtype::RtypeOptions {
                    float_order,
                    ..Default::default()
                }),
            )
        }
    };
    let server = ServerSection {
        tick_rate: a.tick_rate,
        full_every: a.full_every,
        max_clients: a.max_clients,
        client_timeout: Dur(a.client_timeout),
        snapshot_rate: a.snapshot_rate,
        room_size: a.room_size,
        players_per_instance: a.max_players,
        instances: Some(a.instances),
        enet_throttle: a.enet_throttle,
    };
    if let ProtocolSection::Rtype(_) = &section {
        if let Err(m) = crate::engine::rtype_server_config(&section, &server).validate() {
            eprintln!("error: {m}");
            return Ok(super::EXIT_USAGE);
        }
    }
    let transport = transport_for(&section);
    let peers = players_per_instance(&section, &server).unwrap_or(server.max_clients);
    let first_port = a.port.unwrap_or(name.info().default_port);
    let mut handles: Vec<crate::engine::ServerHandle> = Vec::new();
    for i in 0..a.instances.max(1) {
        // Consecutive ports after the first (after the first one picked, when it is 0).
        let port = match (first_port, handles.first()) {
            (0, Some(h)) => h.addr.port().wrapping_add(i as u16),
            (0, None) => 0,
            (p, _) => p.wrapping_add(i as u16),
        };
        let bind = SocketAddr::new(a.bind, port);
        let (section, server) = (section.clone(), server.clone());
        let handle = spawn_server_on(bind, transport, peers, a.enet_throttle, move |now| {
            make_server(&section, &server, now)
        })
        .map_err(|e| anyhow::anyhow!("cannot bind {bind}: {e}"))?;
        println!(
            "tickswarm {} reference server listening on {} ({})",
            name,
            handle.addr,
            name.info().transport
        );
        handles.push(handle);
    }
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
        if a.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        let s = total(&handles);
        let secs = start.elapsed().as_secs();
        if secs != last_out {
            last_out = secs;
            eprintln!(
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
    println!(
        "served {} clients; {} datagrams in, {} out; malformed dropped: {:?}",
        s.accepted,
        s.datagrams_in,
        s.datagrams_out,
        s.dropped.iter().collect::<Vec<_>>()
    );
    Ok(super::EXIT_PASS)
}
