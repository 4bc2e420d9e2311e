//! The one place that maps a scenario's protocol section to state machines.

use std::time::Instant;

use crate::protocol::cafe::{CafeBot, CafeServer, CafeServerConfig};
use crate::protocol::{Bot, BotParams, Server};
use crate::scenario::{ProtocolSection, ServerSection};

pub fn make_bot(protocol: &ProtocolSection, params: BotParams) -> Box<dyn Bot> {
    match protocol {
        ProtocolSection::Cafe(o) => Box::new(CafeBot::new(params, o.clone())),
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
            cfg.room_size = s.room_size;
            Box::new(CafeServer::new(cfg, now))
        }
    }
}
