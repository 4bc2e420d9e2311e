//! The kernel memory a plan's sockets may take: the buffer each bot socket asks for, and the
//! total `tickswarm validate` prints. The plan counts its sockets as the engine opens them
//! ([`SocketMemory`]); this file is the arithmetic and the words, below the plan.
//!
//! A bot socket's buffers are sized for what its server can send it in a burst
//! ([`crate::protocol::Protocol::receive_burst`]: the largest datagram × a count), not a flat
//! megabyte: at 10,000 bots a flat 1 MiB each way is 20 GiB the kernel would let the sockets
//! fill. `engine.socket_buffer` replaces the derived size. Linux doubles every `SO_RCVBUF` /
//! `SO_SNDBUF` request (the extra half is its own bookkeeping per datagram) and charges a
//! buffer only for what waits in it, so the figure is a ceiling, reached only when every
//! socket is full at once.

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

/// Bytes each bot socket asks the kernel for, each way: `set` (`engine.socket_buffer`), or
/// what the server can send the `sharing` bots of one socket in a burst (`burst` bytes each;
/// more than one only on a shared ENet host), at most [`MAX_DERIVED_BUFFER`].
pub fn bot_socket_buffer(set: Option<usize>, burst: usize, sharing: usize) -> usize {
    match set {
        Some(b) => b,
        None => burst.saturating_mul(sharing).min(MAX_DERIVED_BUFFER),
    }
}

/// The `sockets` line(s) a plan's description prints: the sockets `m`, and where their size
/// came from (`source`).
pub fn describe(m: &SocketMemory, source: &str) -> String {
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
