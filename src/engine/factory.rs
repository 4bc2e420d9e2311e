//! The one place that maps a scenario's protocol section to state machines.

use std::time::Instant;

use crate::protocol::cafe::{CafeBot, CafeServer, CafeServerConfig};
use crate::protocol::city::{self, CityBot, CityServer, CityServerConfig};
use crate::protocol::rtype::{RtypeBot, RtypeServer, RtypeServerConfig};
use crate::protocol::{Bot, BotParams, Server};
use crate::scenario::{ProtocolSection, ServerSection};

/// The transport a protocol runs over; the engine, not the protocol, owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// One datagram per protocol message, one socket per bot.
    Udp,
    /// ENet sessions with this many channels, `bots_per_socket` peers per socket.
    Enet { channels: usize },
}

pub fn transport_for(protocol: &ProtocolSection) -> TransportKind {
    match protocol {
        ProtocolSection::Cafe(_) | ProtocolSection::Rtype(_) => TransportKind::Udp,
        ProtocolSection::City(_) => TransportKind::Enet {
            channels: city::CHANNELS,
        },
    }
}

pub fn make_bot(protocol: &ProtocolSection, params: BotParams) -> Box<dyn Bot> {
    match protocol {
        ProtocolSection::Cafe(o) => Box::new(CafeBot::new(params, o.clone())),
        ProtocolSection::Rtype(o) => Box::new(RtypeBot::new(params, o.clone())),
        ProtocolSection::City(o) => Box::new(CityBot::new(params, o.clone())),
    }
}

pub fn make_server(protocol: &ProtocolSection, s: &ServerSection, now: Instant) -> Box<dyn Server> {
    match protocol {
        ProtocolSection::Cafe(o) => {
            let mut cfg = CafeServerConfig::for_dialect(o.dialect);
            cfg.tick_rate = s.tick_rate;
            cfg.full_every = s.full_every;
            cfg.max_clients = s.max_clients;
            cfg.client_timeout = s.client_timeout.0;
            if let Some(r) = s.room_size {
                cfg.room_size = r;
            }
            Box::new(CafeServer::new(cfg, now))
        }
        ProtocolSection::Rtype(_) => {
            Box::new(RtypeServer::new(rtype_server_config(protocol, s), now))
        }
        ProtocolSection::City(_) => Box::new(CityServer::new(city_server_config(protocol, s), now)),
    }
}

/// The City reference server's configuration from a scenario's sections.
pub fn city_server_config(protocol: &ProtocolSection, s: &ServerSection) -> CityServerConfig {
    let mut cfg = match protocol {
        ProtocolSection::City(o) => CityServerConfig::for_dialect(o.dialect),
        _ => CityServerConfig::default(),
    };
    cfg.max_players = s.players_per_instance.unwrap_or(city::MAX_PLAYERS).max(1);
    cfg
}

/// Players one reference server instance takes (only City runs several instances).
pub fn players_per_instance(protocol: &ProtocolSection, s: &ServerSection) -> Option<usize> {
    match protocol {
        ProtocolSection::City(_) => {
            Some(s.players_per_instance.unwrap_or(city::MAX_PLAYERS).max(1))
        }
        _ => None,
    }
}

/// The rtype reference server's configuration from a scenario's sections.
pub fn rtype_server_config(protocol: &ProtocolSection, s: &ServerSection) -> RtypeServerConfig {
    let mut cfg = RtypeServerConfig {
        sim_hz: u32::from(s.tick_rate),
        max_clients: s.max_clients,
        client_timeout: s.client_timeout.0,
        ..RtypeServerConfig::default()
    };
    if let Some(r) = s.snapshot_rate {
        cfg.snapshot_hz = r;
    }
    if let Some(r) = s.room_size {
        cfg.room_size = r;
    }
    if let ProtocolSection::Rtype(o) = protocol {
        cfg.float_order = o.float_order;
    }
    cfg
}
