//! Decode-only reading of a protocol's messages, for `tickswarm inspect` (a capture of a
//! real client, split into flows, each tried against every protocol and dialect).
//!
//! A protocol that can be inspected returns an [`Inspect`] from
//! [`Protocol::inspector`](super::registry::Protocol::inspector): it is handed each message
//! of one flow in order, with its [`Direction`] (ENet framing, when the protocol runs over
//! ENet, is already removed: the inspector sees what a bot's `handle_datagram` sees), and says
//! what the message is ([`Seen`]: its type, its [`Role`] in the client's behaviour, and the
//! sequence number, tick or ping token the behaviour figures need), or where it stops reading
//! as this protocol ([`Mismatch`]: the byte offset and what was expected there). It keeps
//! whatever state its protocol needs (a dictionary, a decompressor), bounded.
//!
//! ```
//! use tickswarm::api::inspect::{Direction, Inspect, Mismatch, Role, Seen};
//! struct Echo;
//! impl Inspect for Echo {
//!     fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
//!         match (dir, data.first()) {
//!             (Direction::ToServer, Some(b'I')) => Ok(Seen::new("input", Role::Input)),
//!             (Direction::ToClient, Some(b'S')) => Ok(Seen::new("snapshot", Role::Snapshot)),
//!             _ => Err(Mismatch::at(0, "'I' from the client or 'S' from the server")),
//!         }
//!     }
//! }
//! let mut e = Echo;
//! assert_eq!(e.message(Direction::ToServer, b"I1").map(|s| s.role), Ok(Role::Input));
//! assert_eq!(e.message(Direction::ToServer, b"S").unwrap_err().offset, 0);
//! ```

use super::pattern::Keys;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// From the client (the side that sent first) to the server.
    ToServer,
    /// From the server to the client.
    ToClient,
}

impl Direction {
    /// `"to_server"` or `"to_client"`, as `inspect --json` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::ToServer => "to_server",
            Direction::ToClient => "to_client",
        }
    }
}

/// What a message is for in the client's behaviour, which `inspect` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Player input (the input rate and its jitter).
    Input,
    /// A round-trip probe; [`Seen::ping`] names it so its answer pairs up (ping interval, RTT).
    Ping,
    /// The answer to a [`Role::Ping`] with the same [`Seen::ping`].
    Pong,
    /// World state from the server (the snapshot rate and sizes; loss from [`Seen::seq`]).
    Snapshot,
    /// Anything else: handshake, acknowledgements, chat, disconnect.
    Other,
}

/// One message read as this protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The message type, in the protocol's own words (`"input"`, `"Snapshot"`).
    pub kind: &'static str,
    /// Its part in the client's behaviour.
    pub role: Role,
    /// A sequence number or tick that grows by one per message of this direction and
    /// role, when the protocol has one: gaps in it are loss.
    pub seq: Option<u64>,
    /// The token that pairs a [`Role::Ping`] with its [`Role::Pong`].
    pub ping: Option<u64>,
    /// The keys a [`Role::Input`] holds, as the scenario's key patterns name them, when the
    /// protocol's input maps onto them: `inspect` turns a flow's inputs into a replayable key
    /// stream (`pattern: replay`).
    pub keys: Option<Keys>,
}

impl Seen {
    /// A message of `kind` and `role`, with no sequence number or ping token.
    pub fn new(kind: &'static str, role: Role) -> Self {
        Self {
            kind,
            role,
            seq: None,
            ping: None,
            keys: None,
        }
    }

    /// The same, with the sequence number or tick `seq`.
    pub fn seq(mut self, seq: u64) -> Self {
        self.seq = Some(seq);
        self
    }

    /// The same, with the ping token `token`.
    pub fn ping(mut self, token: u64) -> Self {
        self.ping = Some(token);
        self
    }

    /// The same, with the keys `keys` held (an input).
    pub fn keys(mut self, keys: Keys) -> Self {
        self.keys = Some(keys);
        self
    }
}

/// Where a message stops reading as this protocol: the byte offset into the message and what
/// was expected there, in words (`"magic 0xCAFE (FE CA)"`, `"a body of 8 bytes"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset of the first byte that does not fit, from the message's start (its length when
    /// the message ends too early).
    pub offset: usize,
    /// What the protocol expected there.
    pub expected: String,
}

impl Mismatch {
    /// A mismatch at `offset`, where `expected` was expected.
    pub fn at(offset: usize, expected: impl Into<String>) -> Self {
        Self {
            offset,
            expected: expected.into(),
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: expected {}", self.offset, self.expected)
    }
}

/// A decode-only reader of one flow of one protocol (see the module docs).
pub trait Inspect: Send {
    /// One message (one datagram, or one ENet packet with ENet's framing removed).
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch>;

    /// Several messages in one datagram, for a protocol that packs them (City): each is
    /// handed to `out`. The default reads the datagram as one [`Inspect::message`].
    fn messages(
        &mut self,
        dir: Direction,
        data: &[u8],
        out: &mut dyn FnMut(Seen),
    ) -> Result<(), Mismatch> {
        out(self.message(dir, data)?);
        Ok(())
    }

    /// Bytes of a TCP stream, for a protocol that logs in over TCP
    /// ([`TransportNeeds::UdpTcpLogin`](super::registry::TransportNeeds::UdpTcpLogin)): a
    /// piece of the stream, not a message; the inspector frames it. The default says the
    /// protocol has no stream.
    fn stream(
        &mut self,
        _dir: Direction,
        _data: &[u8],
        _out: &mut dyn FnMut(Seen),
    ) -> Result<(), Mismatch> {
        Err(Mismatch::at(
            0,
            "no TCP stream: this protocol plays over UDP only",
        ))
    }
}

/// Messages packed one after another in `data`, for a protocol's [`Inspect::messages`]:
/// `one(at)` reads the message that starts at `at` and says where it ends; each is handed to
/// `out`. An empty `data` fails at byte 0, expecting `what`.
pub fn packed(
    data: &[u8],
    what: &str,
    mut one: impl FnMut(usize) -> Result<(Seen, usize), Mismatch>,
    out: &mut dyn FnMut(Seen),
) -> Result<(), Mismatch> {
    if data.is_empty() {
        return Err(Mismatch::at(0, format!("{what} (an empty packet)")));
    }
    let mut at = 0;
    while at < data.len() {
        let (seen, end) = one(at)?;
        out(seen);
        // A reader that reads nothing would never reach the end.
        if end <= at {
            return Err(Mismatch::at(at, what));
        }
        at = end;
    }
    Ok(())
}

/// Read `N` bytes at `at`, or say where the message ended and what `what` needed.
pub fn field<const N: usize>(data: &[u8], at: usize, what: &str) -> Result<[u8; N], Mismatch> {
    data.get(at..at + N)
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or_else(|| {
            Mismatch::at(
                data.len().min(at),
                format!(
                    "{what} ({N} bytes at {at}; the message ends at {})",
                    data.len()
                ),
            )
        })
}

/// The message's length is exactly `len`, or the mismatch says where it differs.
pub fn exact_len(data: &[u8], len: usize, kind: &str) -> Result<(), Mismatch> {
    match data.len().cmp(&len) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(Mismatch::at(
            data.len(),
            format!("{kind} of {len} bytes (it ends at {})", data.len()),
        )),
        std::cmp::Ordering::Greater => Err(Mismatch::at(
            len,
            format!(
                "the end of a {len}-byte {kind} ({} bytes more)",
                data.len() - len
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_message_fails_where_it_ends_and_a_long_one_where_it_should_have() {
        assert_eq!(exact_len(&[0; 3], 5, "ping").unwrap_err().offset, 3);
        assert_eq!(exact_len(&[0; 7], 5, "ping").unwrap_err().offset, 5);
        assert!(exact_len(&[0; 5], 5, "ping").is_ok());
        assert_eq!(field::<2>(&[1, 2, 3], 1, "x"), Ok([2, 3]));
        assert_eq!(field::<4>(&[1, 2, 3], 1, "x").unwrap_err().offset, 1);
    }
}
