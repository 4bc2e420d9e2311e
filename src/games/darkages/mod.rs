#![doc = include_str!("../../../docs/protocols/darkages.md")]
//!
//! # In the code
//!
//! - [`codec`]: every wire rule.
//! - [`bot`]: the simulated client: baselines, own-entity prediction and reconciliation,
//!   invalid input on purpose, zone handoff.
//! - [`server`]: the reference zone server: players, projectiles, loot, area-of-interest
//!   tiers, per-client deltas, the validation and rate limits of §6, handoff to neighbours.
//! - [`codec::token`]: the handoff token the zones mint and verify.
//! - [`dialects::implementation`]: the public server's own plain-UDP protocol (`dialect:
//!   implementation`): its codec, bot and a small reference server.
//! - `info`: the metric table ([`INFO`]).
//!
//! **Transport** (the page's "Transport"): each packet is marked reliable or not as §2 says
//! ([`transmit`]); GNS honours that, UDP ignores it.
//!
//! ## Zones
//! Zone `i` is server instance `i`; zones lie in a row along x, each `zone_size_m` square
//! with local coordinates `-size/2..size/2` (inside the ±511 m a quantized position holds).
//! Zone `i`'s east border adjoins zone `i + 1`'s west border, and its neighbours listen on
//! its own port ± 1 on the same host (instances start on consecutive ports). A player whose
//! x passes the border towards a neighbour is handed over; with no neighbour there, x is
//! clamped.

pub mod bot;
pub mod codec;
pub mod dialects;
mod info;
pub mod server;

pub use info::INFO;

use crate::protocol::prelude::Metric;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use bot::DarkAgesBot;
pub use codec::Dialect;
pub use server::{DarkAgesServer, DarkAgesServerConfig};

use crate::protocol::prelude::{Bot, BotParams, ProtocolInfo, Server, Transmit};
use crate::protocol::prelude::{Protocol, ServerParams, TransportNeeds};

/// The public server this spec came from listens on 7777.
pub const DEFAULT_PORT: u16 = 7777;

/// The least `max_state_bytes`: the world, the newest state and the spare one, each of up
/// to 65,536 entities (24 bytes each), are never dropped.
pub const MIN_STATE_BYTES: usize = 6 << 20;

/// Walking speed, metres per second.
pub const WALK_SPEED: f32 = 5.0;
/// Speed with INPUT_SPRINT held.
pub const SPRINT_SPEED: f32 = 8.0;
/// One INPUT moves its player by one input period: 1/60 s (§1.2's input rate).
pub const INPUT_DT: f32 = 1.0 / 60.0;

/// What carries DarkAges packets (the scenario's `transport:` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DarkAgesTransport {
    /// Plain UDP, one packet per datagram: every build.
    #[default]
    Udp,
    /// GameNetworkingSockets connections, as the spec says: a build with `--features gns`.
    Gns,
}

/// Whether §2 (and §1.2's table) makes a packet of type `ty` reliable: the handshake
/// (CONNECT, CONNECT_ACK, CONNECTED), events, and the control packets that must not be lost
/// (DISCONNECT, the zone packets). INPUT, SNAPSHOT, HEARTBEAT and the debug packets are
/// unreliable: they are sent again anyway, and PING/PONG must measure the path, not GNS's
/// retransmissions.
pub fn reliable(ty: u8) -> bool {
    use codec::ty;
    matches!(
        ty,
        ty::CONNECT
            | ty::CONNECT_ACK
            | ty::CONNECTED
            | ty::DISCONNECT
            | ty::EVENT
            | ty::COALESCED_EVENTS
            | ty::ZONE_HANDOFF
            | ty::ZONE_ENTER
            | ty::ZONE_LEAVE
    )
}

/// The [`Transmit`] for an encoded packet in `buf[..len]`: reliable as [`reliable`] says for
/// its type byte (transports without reliability ignore the flag).
pub fn transmit(buf: &[u8], len: usize) -> Transmit {
    Transmit {
        reliable: buf.first().is_some_and(|&t| reliable(t)),
        ..Transmit::datagram(len)
    }
}

/// The protocol section of a DarkAges scenario. Bot options first, then the ones the
/// reference server reads (both ends must agree on `zone_size_m`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DarkAgesOptions {
    pub dialect: Dialect,
    /// What carries the packets: `udp` or `gns` (needs the `gns` cargo feature).
    pub transport: DarkAgesTransport,
    /// `client_version` in CONNECT.
    pub client_version: u32,
    /// `protocol_version` in CONNECT (set another to exercise VERSION_MISMATCH).
    pub protocol_version: u32,
    /// `client_id` is `<prefix>-<bot index>`.
    pub client_id_prefix: String,
    /// HEARTBEAT every this many milliseconds (§4.3: 5 s).
    pub heartbeat_interval_ms: u64,
    /// Server ticks between two snapshots, for downstream loss (60 Hz / 20 Hz = 3). Unset:
    /// learned from the first snapshots of each zone session. Set: kept unless those
    /// snapshots contradict it (a tick gap it does not divide), then the learned step is
    /// used and `snapshot_tick_step_contradicted` counted.
    pub snapshot_tick_step: Option<u32>,
    /// Own-entity prediction error (metres) above which the bot snaps and replays.
    pub prediction_error_threshold_m: f32,
    /// Share of bots (0..=1, chosen from the seed) that send invalid input on purpose.
    pub invalid_input_share: f64,
    /// Such a bot breaks one input this often (kinds in turn: out-of-range yaw, conflicting
    /// flags, replayed sequence).
    pub invalid_input_interval_ms: u64,
    /// The bot turns round (yaw + π) this often, so it walks back across the border it
    /// crossed; 0 never turns.
    pub turn_every_ms: u64,
    /// Time a client takes to load the next zone before its CONNECT (0: at once).
    pub handoff_connect_delay_ms: u64,
    /// Side of a zone's square, metres (at most 1000: positions carry ±511 m).
    pub zone_size_m: f32,
    /// New players spawn within this many metres of the border towards a neighbour.
    pub spawn_band_m: f32,
    /// `handoff_timeout_ms` of ZONE_HANDOFF: the token's lifetime.
    pub handoff_timeout_ms: u32,
    /// Seed of the secret the zones share to sign handoff tokens.
    pub handoff_secret: u64,
    /// Host written into ZONE_HANDOFF; unset: the zone's own bind address (127.0.0.1 when
    /// bound to an unspecified address).
    pub advertise_host: Option<String>,
    /// Loot items per zone.
    pub loot_per_zone: usize,
    /// Bytes a bot may hold in snapshot states, all its kept baselines and spare buffers
    /// together (at least 6 MiB). One state holds at most 65,536 entities (1.6 MB); a server
    /// whose states take more than this leaves its bots fewer than 30 baselines (the oldest
    /// are dropped, `baseline_evicted`), and a delta that would take a state past 65,536
    /// entities is refused (`snapshot.too_many_entities`, a decode error).
    pub max_state_bytes: usize,
    /// Where else a ZONE_HANDOFF may send a bot: addresses (`10.1.2.3:7000`), hosts
    /// (`10.1.2.3`, any port) or networks (`10.0.0.0/8`). Any port on a host of the run's
    /// targets (the embedded zones included) is always allowed; a handoff anywhere else is
    /// refused before anything is sent there (`handoff_refused.not_allowed`).
    pub handoff_allow: Vec<String>,
}

impl Default for DarkAgesOptions {
    fn default() -> Self {
        Self {
            dialect: Dialect::Spec,
            transport: DarkAgesTransport::Udp,
            client_version: 1,
            protocol_version: codec::PROTOCOL_VERSION,
            client_id_prefix: "bot".into(),
            heartbeat_interval_ms: 5_000,
            snapshot_tick_step: None,
            prediction_error_threshold_m: 0.05,
            invalid_input_share: 0.0,
            invalid_input_interval_ms: 1_000,
            turn_every_ms: 6_000,
            handoff_connect_delay_ms: 0,
            zone_size_m: 200.0,
            spawn_band_m: 10.0,
            handoff_timeout_ms: 3_000,
            handoff_secret: 0x4441_524B_4147_4553,
            advertise_host: None,
            loot_per_zone: 20,
            max_state_bytes: 8 << 20,
            handoff_allow: Vec::new(),
        }
    }
}

impl DarkAgesOptions {
    /// Range checks; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.zone_size_m >= 10.0 && self.zone_size_m <= 1000.0) {
            return Err(format!(
                "zone_size_m must be within 10..=1000 (a quantized position holds ±511 m), got {}",
                self.zone_size_m
            ));
        }
        if !(self.spawn_band_m > 0.0 && self.spawn_band_m <= self.zone_size_m / 2.0) {
            return Err("spawn_band_m must be above 0 and at most zone_size_m / 2".into());
        }
        if !(0.0..=1.0).contains(&self.invalid_input_share) {
            return Err(format!(
                "invalid_input_share must be within 0..=1, got {}",
                self.invalid_input_share
            ));
        }
        if self.invalid_input_interval_ms == 0 || self.heartbeat_interval_ms == 0 {
            return Err("invalid_input_interval_ms and heartbeat_interval_ms must be > 0".into());
        }
        if self.snapshot_tick_step == Some(0) {
            return Err("snapshot_tick_step must be at least 1 (or left unset to learn it)".into());
        }
        if !(self.prediction_error_threshold_m >= 0.0
            && self.prediction_error_threshold_m.is_finite())
        {
            return Err("prediction_error_threshold_m must be >= 0".into());
        }
        if self.handoff_timeout_ms == 0 {
            return Err("handoff_timeout_ms must be > 0".into());
        }
        for e in &self.handoff_allow {
            bot::allow::AllowRule::parse(e)?;
        }
        if self.max_state_bytes < MIN_STATE_BYTES {
            return Err(format!(
                "max_state_bytes must be at least {MIN_STATE_BYTES} (two states of 65,536 \
                 entities and the spare one), got {}",
                self.max_state_bytes
            ));
        }
        Ok(())
    }

    pub fn zone_half(&self) -> f32 {
        self.zone_size_m / 2.0
    }
}

/// The movement model, shared by the server and the bot's prediction so both compute the
/// same bits: one INPUT moves its player `speed × 1/60 s` along its flags, rotated by `yaw`
/// (yaw 0 faces +x, east; forward is `(cos yaw, sin yaw)` in the x-z plane, right is
/// `(sin yaw, -cos yaw)`), z clamped to the zone, and the result snapped to the wire's 1/64 m
/// grid. Authoritative positions live on that grid, so a client that reads a position off the
/// wire holds the server's exact state and can replay from it bit for bit.
pub fn step(pos: [f32; 3], flags: u8, yaw: f32, half: f32) -> [f32; 3] {
    use codec::input;
    let b = |bit: u8| if flags & bit != 0 { 1.0f32 } else { 0.0 };
    let fwd = b(input::FORWARD) - b(input::BACKWARD);
    let strafe = b(input::RIGHT) - b(input::LEFT);
    if fwd == 0.0 && strafe == 0.0 {
        return pos;
    }
    let speed = if flags & input::SPRINT != 0 {
        SPRINT_SPEED
    } else {
        WALK_SPEED
    };
    let (s, c) = yaw.sin_cos();
    let dx = (fwd * c + strafe * s) * speed * INPUT_DT;
    let dz = (fwd * s - strafe * c) * speed * INPUT_DT;
    let snap = |v: f32| codec::dequantize_pos(codec::quantize_pos(v));
    [
        snap(pos[0] + dx),
        pos[1],
        snap((pos[2] + dz).clamp(-half, half)),
    ]
}

/// Velocity (m/s) of a player holding `flags` at `yaw`, as snapshots carry it.
pub fn velocity(flags: u8, yaw: f32) -> [f32; 3] {
    let p = step([0.0; 3], flags, yaw, f32::MAX);
    [p[0] / INPUT_DT, 0.0, p[2] / INPUT_DT]
}

/// §6.1's validation of one input's values (the sequence is checked separately): `None`
/// when valid, else the reason.
pub fn invalid_reason(flags: u8, yaw: f32, pitch: f32) -> Option<&'static str> {
    use codec::input;
    use std::f32::consts::{FRAC_PI_2, PI};
    if !(-PI..=PI).contains(&yaw) {
        return Some("yaw_out_of_range");
    }
    if !(-FRAC_PI_2..=FRAC_PI_2).contains(&pitch) {
        return Some("pitch_out_of_range");
    }
    if flags & input::FORWARD != 0 && flags & input::BACKWARD != 0 {
        return Some("conflicting_flags");
    }
    if flags & input::LEFT != 0 && flags & input::RIGHT != 0 {
        return Some("conflicting_flags");
    }
    None
}

/// The registry entry.
pub struct DarkAges;

impl DarkAges {
    /// The reference server's configuration: zone `instance` of `instances`, neighbours on
    /// the ports beside its own bind address.
    pub fn server_config(o: &DarkAgesOptions, s: &ServerParams) -> DarkAgesServerConfig {
        let zones = s.instances.unwrap_or(1).max(1);
        let zone = s.instance.min(zones - 1);
        let neighbour = |east: bool| -> Option<SocketAddr> {
            let bind = s.bind?;
            let port = if east {
                (zone + 1 < zones).then(|| bind.port().checked_add(1))??
            } else {
                (zone > 0).then(|| bind.port().checked_sub(1))??
            };
            let ip = if bind.ip().is_unspecified() {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                bind.ip()
            };
            Some(SocketAddr::new(ip, port))
        };
        let snapshot_hz = s.snapshot_rate.unwrap_or(20).max(1);
        DarkAgesServerConfig {
            zone: zone as u32,
            west: neighbour(false),
            east: neighbour(true),
            advertise_host: o.advertise_host.clone(),
            tick_hz: u32::from(s.tick_rate).max(1),
            snapshot_step: (u32::from(s.tick_rate) / snapshot_hz).max(1),
            max_clients: s.max_clients,
            client_timeout: s.client_timeout.0,
            zone_half: o.zone_half(),
            spawn_band: o.spawn_band_m,
            handoff_timeout: Duration::from_millis(u64::from(o.handoff_timeout_ms)),
            secret: codec::token::secret_from_seed(o.handoff_secret),
            loot: o.loot_per_zone,
            seed: 0x4441_0000 ^ zone as u64,
            ..DarkAgesServerConfig::default()
        }
    }
}

impl Protocol for DarkAges {
    type Options = DarkAgesOptions;
    const INFO: ProtocolInfo = INFO;

    /// The `transport` option. A build without the `gns` feature refuses `gns` when the
    /// scenario is validated (`TransportNeeds::check_built`).
    fn transport(o: &DarkAgesOptions) -> TransportNeeds {
        match o.transport {
            DarkAgesTransport::Udp => TransportNeeds::Udp,
            DarkAgesTransport::Gns => TransportNeeds::Gns,
        }
    }

    fn validate(o: &DarkAgesOptions, s: &ServerParams) -> Result<(), String> {
        o.validate()?;
        if o.dialect == Dialect::Implementation && o.transport != DarkAgesTransport::Udp {
            return Err(
                "dialect: implementation runs over plain UDP only (the public server's UDP \
                 build); set transport: udp"
                    .into(),
            );
        }
        let rate = s.snapshot_rate.unwrap_or(20);
        if rate == 0 || u32::from(s.tick_rate) % rate != 0 {
            return Err(format!(
                "server: snapshot_rate ({rate}) must divide tick_rate ({}) so snapshot ticks are \
                 evenly spaced",
                s.tick_rate
            ));
        }
        let step = u32::from(s.tick_rate) / rate;
        if let Some(configured) = o.snapshot_tick_step.filter(|&c| c != step) {
            return Err(format!(
                "snapshot_tick_step ({configured}) must equal server tick_rate / snapshot_rate \
                 ({step})"
            ));
        }
        Ok(())
    }

    fn dialect_name(o: &DarkAgesOptions) -> String {
        o.dialect.as_str().to_string()
    }

    fn make_bot(o: &DarkAgesOptions, params: BotParams) -> Box<dyn Bot> {
        match o.dialect {
            Dialect::Implementation => Box::new(dialects::implementation::ImplementationBot::new(
                params,
                o.clone(),
            )),
            Dialect::Spec | Dialect::StructAsPrinted => {
                Box::new(DarkAgesBot::new(params, o.clone()))
            }
        }
    }

    fn make_server(o: &DarkAgesOptions, s: &ServerParams, now: Instant) -> Box<dyn Server> {
        match o.dialect {
            Dialect::Implementation => Box::new(
                dialects::implementation::ImplementationServer::new(s.max_clients, now),
            ),
            Dialect::Spec | Dialect::StructAsPrinted => {
                Box::new(DarkAgesServer::new(Self::server_config(o, s), now))
            }
        }
    }

    /// The reader of the options' dialect. Over GNS (`transport: gns`) the capture is
    /// encrypted and `inspect` refuses it before reading, so the transport is not looked at.
    fn inspector(
        o: &DarkAgesOptions,
    ) -> Option<Box<dyn crate::protocol::prelude::inspect::Inspect>> {
        Some(match o.dialect {
            Dialect::Implementation => {
                Box::new(dialects::implementation::inspect::ImplementationInspect::new())
            }
            Dialect::Spec | Dialect::StructAsPrinted => {
                Box::new(codec::inspect::DarkAgesInspect::new(o.dialect))
            }
        })
    }

    fn cannot_measure(o: &DarkAgesOptions, metric: Metric) -> Option<&'static str> {
        if metric != Metric::UpstreamLoss {
            return None;
        }
        Some(match o.dialect {
            Dialect::Implementation => {
                "the server's last_input_seq acknowledges only the newest input it applied, \
                 never those before it, so no input is known lost (input_ack_us times the \
                 acknowledged ones)"
            }
            Dialect::Spec | Dialect::StructAsPrinted => {
                "nothing acknowledges inputs; only the server itself counts gaps in their \
                 sequence"
            }
        })
    }

    /// The public server kicks a client that sends more than 65 inputs in one second.
    fn check_input_rate(o: &DarkAgesOptions, hz: f64) -> Result<(), String> {
        if o.dialect == Dialect::Implementation && hz > dialects::implementation::MAX_INPUT_RATE_HZ
        {
            return Err(format!(
                "behaviour.input_rate {hz} is above 60 inputs a second, which dialect: \
                 implementation cannot send: the public DarkAges server kicks a client that \
                 sends more than 65 inputs in one second (\"Rate limit exceeded\"). Set \
                 behaviour.input_rate to 60 or less"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_option_picks_udp_or_gns_and_a_build_without_gns_says_how_to_get_it() {
        let o: DarkAgesOptions = serde_saphyr::from_str("{}").unwrap();
        assert_eq!(DarkAges::transport(&o), TransportNeeds::Udp);
        let o: DarkAgesOptions = serde_saphyr::from_str("transport: gns").unwrap();
        assert_eq!(DarkAges::transport(&o), TransportNeeds::Gns);
        assert!(serde_saphyr::from_str::<DarkAgesOptions>("transport: tcp").is_err());
        let section = crate::protocol::prelude::ProtocolSection::of(&DarkAges, o);
        let checked = section.validate(&ServerParams::default());
        if cfg!(feature = "gns") {
            assert_eq!(checked, Ok(()));
        } else {
            let e = checked.unwrap_err();
            assert!(
                e.starts_with("transport: gns needs GameNetworkingSockets"),
                "{e}"
            );
            assert!(e.contains("--features gns"), "{e}");
        }
    }

    #[test]
    fn handshake_events_and_zone_packets_are_reliable_inputs_snapshots_and_pings_not() {
        use codec::ty;
        for t in [
            ty::CONNECT,
            ty::CONNECT_ACK,
            ty::CONNECTED,
            ty::DISCONNECT,
            ty::EVENT,
        ] {
            assert!(transmit(&[t, 0], 2).reliable, "{t:#x}");
        }
        for t in [ty::INPUT, ty::SNAPSHOT, ty::HEARTBEAT, ty::PING, ty::PONG] {
            assert!(!transmit(&[t, 0], 2).reliable, "{t:#x}");
        }
        assert_eq!(transmit(&[ty::ZONE_HANDOFF], 75).len, 75);
        assert!(!transmit(&[], 0).reliable);
    }

    #[test]
    fn implementation_dialect_refuses_input_rates_the_server_kicks_for_and_gns() {
        let o: DarkAgesOptions = serde_saphyr::from_str("dialect: implementation").unwrap();
        assert_eq!(DarkAges::check_input_rate(&o, 60.0), Ok(()));
        let e = DarkAges::check_input_rate(&o, 61.0).unwrap_err();
        assert!(e.starts_with("behaviour.input_rate 61 is above 60"), "{e}");
        assert!(e.contains("more than 65 inputs in one second"), "{e}");
        let spec = DarkAgesOptions::default();
        assert_eq!(DarkAges::check_input_rate(&spec, 120.0), Ok(()));
        let gns = DarkAgesOptions {
            transport: DarkAgesTransport::Gns,
            ..o.clone()
        };
        let e = DarkAges::validate(&gns, &ServerParams::default()).unwrap_err();
        assert!(e.contains("plain UDP only"), "{e}");
        let why = DarkAges::cannot_measure(&o, Metric::UpstreamLoss).unwrap();
        assert!(why.contains("last_input_seq"), "{why}");
        assert_eq!(DarkAges::dialect_name(&o), "implementation");
    }

    #[test]
    fn neighbours_are_the_ports_beside() {
        let o = DarkAgesOptions::default();
        let mut s = ServerParams {
            instances: Some(3),
            instance: 1,
            bind: Some("0.0.0.0:7000".parse().unwrap()),
            ..ServerParams::default()
        };
        let c = DarkAges::server_config(&o, &s);
        assert_eq!(c.west, Some("127.0.0.1:6999".parse().unwrap()));
        assert_eq!(c.east, Some("127.0.0.1:7001".parse().unwrap()));
        s.instance = 2;
        let c = DarkAges::server_config(&o, &s);
        assert_eq!(c.east, None);
        assert_eq!(c.zone, 2);
        s.bind = None;
        assert_eq!(DarkAges::server_config(&o, &s).west, None);
    }

    #[test]
    fn movement_is_on_the_wire_grid_and_validation_follows_6_1() {
        let p = step([0.0; 3], codec::input::FORWARD, 0.0, 100.0);
        assert_eq!(
            p,
            [codec::dequantize_pos(5), 0.0, 0.0],
            "5/60 m = 5.33 steps -> 5"
        );
        assert_eq!(
            step([1.0, 0.0, 99.99], codec::input::LEFT, 0.0, 100.0)[2],
            100.0
        );
        assert_eq!(invalid_reason(codec::input::FORWARD, 0.5, 0.1), None);
        assert_eq!(invalid_reason(0, 3.2, 0.0), Some("yaw_out_of_range"));
        assert_eq!(
            invalid_reason(codec::input::LEFT | codec::input::RIGHT, 0.0, 0.0),
            Some("conflicting_flags")
        );
        assert_eq!(invalid_reason(0, std::f32::consts::PI, 0.0), None);
    }
}
