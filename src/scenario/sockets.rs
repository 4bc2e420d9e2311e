//! The kernel memory a plan's sockets may take: how many sockets the bots open, the buffer
//! each asks for, and the total `tickswarm validate` prints.
//!
//! A bot socket's buffers are sized for what its server can send it in a burst
//! ([`crate::protocol::Protocol::receive_burst`]: the largest datagram × a count), not a flat
//! megabyte: at 10,000 bots a flat 1 MiB each way is 20 GiB the kernel would let the sockets
//! fill. `engine.socket_buffer` replaces the derived size. Linux doubles every `SO_RCVBUF` /
//! `SO_SNDBUF` request (the extra half is its own bookkeeping per datagram) and charges a
//! buffer only for what waits in it, so the figure is a ceiling, reached only when every
//! socket is full at once.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use super::plan::{Plan, Targets};
use crate::protocol::TransportNeeds;

/// The most a derived buffer asks for (an ENet host shared by very many bots); a scenario
/// wanting more says so with `engine.socket_buffer`.
pub const MAX_DERIVED_BUFFER: usize = 16 * 1024 * 1024;
/// `engine.socket_buffer` bounds: below 4 KiB a single large datagram does not fit; above
/// 256 MiB is a typo.
pub const SOCKET_BUFFER_RANGE: std::ops::RangeInclusive<usize> = 4096..=256 * 1024 * 1024;
/// What a reference server's socket asks for each way (`engine/io/socket/server.rs`).
pub const SERVER_SOCKET_BUFFER: usize = 8 * 1024 * 1024;

/// The plan's sockets and the kernel buffer they may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMemory {
    /// Sockets the bots open: one per bot, or one per ENet host (`bots_per_socket`).
    pub bot_sockets: u64,
    /// Bytes each bot socket asks for, each way (receive and send).
    pub per_socket: usize,
    /// Embedded reference server sockets (one per instance), 0 for a real target.
    pub server_sockets: u64,
}

impl SocketMemory {
    /// What the bot sockets ask for in all: sockets × (receive + send).
    pub fn bot_requested(&self) -> u64 {
        self.bot_sockets * 2 * self.per_socket as u64
    }

    /// The most the kernel lets them hold: twice the request (see the module docs).
    pub fn bot_ceiling(&self) -> u64 {
        2 * self.bot_requested()
    }

    /// The embedded servers' ceiling, the same way.
    pub fn server_ceiling(&self) -> u64 {
        self.server_sockets * 2 * 2 * SERVER_SOCKET_BUFFER as u64
    }
}

impl Plan {
    /// Bytes each bot socket asks the kernel for, each way.
    pub fn bot_socket_buffer(&self) -> usize {
        if let Some(b) = self.socket_buffer {
            return b;
        }
        let per_bot = self.protocol.receive_burst().bytes();
        let bots = match self.protocol.transport() {
            TransportNeeds::Enet(_) => self.bots_per_socket,
            _ => 1,
        };
        per_bot.saturating_mul(bots).min(MAX_DERIVED_BUFFER)
    }

    /// Embedded server instances this plan starts (the engine starts exactly these).
    pub fn embedded_instances(&self) -> usize {
        let per_instance = self.protocol.players_per_instance(&self.server);
        match (self.server.instances, per_instance) {
            (Some(n), _) => n.max(1),
            (None, Some(p)) => (self.planned as usize).div_ceil(p).max(1),
            (None, None) => 1,
        }
    }

    /// The sockets this plan opens and what they ask for. Bot sockets are counted as the
    /// engine opens them: one per session of the schedule on raw UDP; with ENet, one per host,
    /// a host taking up to `bots_per_socket` bots of one worker to one server from one source
    /// address in one group. GNS opens its own sockets (none counted here).
    pub fn socket_memory(&self) -> SocketMemory {
        let (server_sockets, targets) = match &self.targets {
            Targets::Embedded => (self.embedded_instances() as u64, self.embedded_instances()),
            Targets::Addrs(a) => (0, a.len()),
        };
        let bot_sockets = match self.protocol.transport() {
            TransportNeeds::Gns => 0,
            TransportNeeds::Udp | TransportNeeds::UdpTcpLogin { .. } => self.spawns.len() as u64,
            TransportNeeds::Enet(_) => self.enet_hosts(targets),
        };
        SocketMemory {
            bot_sockets,
            per_socket: self.bot_socket_buffer(),
            server_sockets,
        }
    }

    /// ENet hosts the engine opens: bots dealt to workers by their place in the schedule,
    /// each to its target by index, grouped per (worker, target, source, group).
    fn enet_hosts(&self, targets: usize) -> u64 {
        /// A host's key: worker, target (own list of the group, or the scenario's), source,
        /// group.
        type Key = (usize, Option<SocketAddr>, usize, Option<IpAddr>, u16);
        let workers = self.workers.max(1);
        let mut per_host: HashMap<Key, u64> = HashMap::new();
        for (n, ev) in self.spawns.iter().enumerate() {
            let i = ev.index as usize;
            let own = self
                .groups
                .get(usize::from(ev.group))
                .and_then(|g| g.targets.as_ref());
            let (addr, t) = match own {
                Some(own) => (own.get(i % own.len().max(1)).copied(), 0),
                None => (None, i % targets.max(1)),
            };
            let key = (n % workers, addr, t, self.source_of(ev.index), ev.group);
            *per_host.entry(key).or_default() += 1;
        }
        let k = self.bots_per_socket.max(1) as u64;
        per_host.values().map(|c| c.div_ceil(k)).sum()
    }

    /// The plan's `sockets` line(s) for `describe`.
    pub(super) fn describe_sockets(&self) -> String {
        if self.protocol.transport() == TransportNeeds::Gns {
            // GNS opens and sizes its own sockets, bots' and servers' alike.
            return String::new();
        }
        let m = self.socket_memory();
        let source = if self.socket_buffer.is_some() {
            "engine.socket_buffer".to_string()
        } else {
            let b = self.protocol.receive_burst();
            let shared = match self.protocol.transport() {
                TransportNeeds::Enet(_) if self.bots_per_socket > 1 => {
                    format!(" × {} bots per socket", self.bots_per_socket)
                }
                _ => String::new(),
            };
            format!("{} datagrams of {} B{shared}", b.count, b.largest)
        };
        let mut s = format!(
            "sockets    {} bot socket{} × (receive {} + send {}) = {} asked of the kernel \
             ({source}); Linux doubles each request, so at most {} if every buffer filled\n",
            m.bot_sockets,
            if m.bot_sockets == 1 { "" } else { "s" },
            bytes(m.per_socket as u64),
            bytes(m.per_socket as u64),
            bytes(m.bot_requested()),
            bytes(m.bot_ceiling()),
        );
        if m.server_sockets > 0 {
            s.push_str(&format!(
                "           plus {} embedded server socket{} × 2 × {}: at most {}\n",
                m.server_sockets,
                if m.server_sockets == 1 { "" } else { "s" },
                bytes(SERVER_SOCKET_BUFFER as u64),
                bytes(m.server_ceiling()),
            ));
        }
        s
    }
}

/// Bytes in binary units with one decimal (`46.9 KiB`, `1.5 GiB`), exact bytes below 1 KiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::{load, parse, Overrides};

    fn shipped(name: &str, ov: &Overrides) -> Plan {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios")
            .join(name);
        Plan::build(load(&p).unwrap(), &p, ov).unwrap()
    }

    /// quickstart: 100 cafe bots, one socket each, 32 datagrams of 1500 bytes each way, and
    /// the embedded server's one socket.
    #[test]
    fn quickstart_commits_what_its_hundred_sockets_ask_for() {
        let plan = shipped("quickstart.yaml", &Overrides::default());
        let m = plan.socket_memory();
        assert_eq!(
            m,
            SocketMemory {
                bot_sockets: 100,
                per_socket: 48_000,
                server_sockets: 1,
            }
        );
        assert_eq!(m.bot_requested(), 9_600_000);
        assert_eq!(m.bot_ceiling(), 19_200_000);
        assert_eq!(m.server_ceiling(), 33_554_432);
        assert_eq!(
            plan.describe_sockets(),
            "sockets    100 bot sockets × (receive 46.9 KiB + send 46.9 KiB) = 9.2 MiB asked of \
             the kernel (32 datagrams of 1500 B); Linux doubles each request, so at most \
             18.3 MiB if every buffer filled\n           plus 1 embedded server socket × 2 × \
             8.0 MiB: at most 32.0 MiB\n"
        );
    }

    /// City over ENet, 300 bots, 2 workers, 3 embedded instances: one host per bot, and at
    /// 50 bots per socket one host per (worker, instance): 6 sockets of 50 bots' bursts.
    #[test]
    fn enet_hosts_are_counted_as_the_engine_opens_them() {
        let two = Overrides {
            workers: Some(2),
            ..Overrides::default()
        };
        let plan = shipped("city.yaml", &two);
        assert_eq!(plan.embedded_instances(), 3);
        assert_eq!(plan.socket_memory().bot_sockets, 300);
        assert_eq!(plan.socket_memory().per_socket, 48_000);

        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/city.yaml");
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace("bots_per_socket: 1 ", "bots_per_socket: 50 ");
        let plan = Plan::build(parse(&text, &p).unwrap(), &p, &two).unwrap();
        let m = plan.socket_memory();
        assert_eq!(m.bot_sockets, 6);
        assert_eq!(m.per_socket, 50 * 48_000);
        assert_eq!(m.bot_requested(), 6 * 2 * 2_400_000);
    }

    #[test]
    fn the_scenario_sets_the_size_and_is_held_to_its_range() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
        let text = std::fs::read_to_string(&p).unwrap();
        let with = |v: &str| {
            let t = format!("{text}\nengine:\n  socket_buffer: {v}\n");
            Plan::build(parse(&t, &p).unwrap(), &p, &Overrides::default())
        };
        assert_eq!(with("256KiB").unwrap().bot_socket_buffer(), 262_144);
        assert_eq!(with("65536").unwrap().bot_socket_buffer(), 65_536);
        assert_eq!(
            with("1 MiB").unwrap().socket_memory().bot_requested(),
            100 * 2 * 1_048_576
        );
        let e = with("100").unwrap_err().to_string();
        assert!(
            e.contains("engine.socket_buffer: 100 bytes is outside 4096 B"),
            "{e}"
        );
        let e = with("2GB").unwrap_err().to_string();
        assert!(e.contains("unit `GB`"), "{e}");
    }
}
