//! Admission: why a reference server cannot be used to amplify traffic at a third party.
//!
//! UDP does not prove who sent a datagram: a handshake with a forged source address would
//! make a server that streams snapshots at every new session send 60 snapshots a second to a
//! victim that never asked (measured before this existed, from one handshake over 5 s: cafe
//! 360×, R-Type 1,239×, City 5.5× the bytes the attacker sent). So every reference server
//! follows the same rules, keyed by [`ConnId`](super::ConnId) (one per source address for
//! raw UDP):
//!
//! 1. **No more bytes than it sent, and no stream, until the address is proven.** A new
//!    session is *unproven*. The server answers its handshake with the handshake reply only
//!    (cafe Welcome 12 bytes for a 24-byte Hello, R-Type ACCEPT 4 for an 8-byte CONNECT,
//!    DarkAges CONNECT_ACK 90 + challenge HEARTBEAT 5 for a 105-byte CONNECT) and holds back
//!    snapshots, entity creates, heartbeats and events. Whatever it does send an unproven
//!    session is within a byte budget: bytes sent to it never exceed bytes received from it
//!    ([`SessionTable::spend`](super::session::SessionTable::spend)), so even a lucky guess
//!    at the proof (rule 2) gains nothing before it succeeds.
//! 2. **What proves an address: a value only a receiver of the reply knows.** The server
//!    draws it at random ([`proof_rng`]: ChaCha8 seeded from the OS once per server), puts it
//!    in a field of its reply that the client already echoes, and takes a datagram as proof
//!    only when it carries that value. A forger who cannot read the reply must guess it:
//!    - cafe: Welcome's `player_id`, which every Input carries (16 bits: ids are drawn from
//!      1..=65535 among the ids not in use). Too narrow to be unguessable alone, so a wrong id
//!      from an unproven session ends it: one guess per forged Hello (and its Welcome), each
//!      costing the forger more bytes than it is sent.
//!    - DarkAges: a HEARTBEAT sent right after CONNECT_ACK whose timestamp is the challenge
//!      (32 bits); §4.3 has the other side answer a HEARTBEAT with its timestamp. More than
//!      four wrong HEARTBEATs end the unproven session.
//!    - R-Type: **no such field exists.** ACCEPT is a bare header, PONG's timestamp is not
//!      echoed, and the only client field naming anything the server chose (INPUT's `entity`)
//!      names the ship, whose id is the client's own `clientId`. So R-Type's proof stays the
//!      client's first datagram after ACCEPT (INPUT or PING), and an attacker who forges
//!      the handshake *and* a blind first INPUT gets a stream until `client_timeout` (5 s by
//!      default). Closing that needs a protocol change (a nonce in ACCEPT echoed in INPUT).
//!    - ENet protocols (City, ZergCity) are proven by ENet's own handshake (see "Admission"
//!      in [`crate::transport::enet`]): the acknowledgement of the server's VERIFY_CONNECT
//!      must echo, exactly, the 16-bit sent time of a datagram that carried it, from the
//!      address it went to, for the session's connect id; the host's clock starts at a
//!      random phase so that sent time is not predictable from the server's age; a wrong
//!      echo ends the half-open connect (one guess per CONNECT). 16 bits, plus the peer id
//!      and 2 session bits, against a forger that never talked to the server; one that did
//!      can read the clock off its own traffic, so the byte budget is what bounds it.
//! 3. **Handshake replies are rate-limited per source**: at most [`MAX_UNPROVEN_REPLIES`] to
//!    one unproven session, so repeated handshakes from one source cost the server at most
//!    that many replies, each smaller than its request.
//! 4. **Unproven sessions expire quickly**: [`UNPROVEN_TIMEOUT`] after the handshake, however
//!    often it is repeated, and a full server gives the slot of the oldest unproven session
//!    to a new client, so forged handshakes cannot keep real players out. A session younger
//!    than its *protection window* keeps its slot (a real client between its reply and its
//!    first input must not be pushed out by the next handshake). The window is
//!    [`EVICTABLE_AFTER`] on a calm server and shrinks under a flood of new sources to half
//!    the time the flood takes to turn the table over (sessions held ÷ sessions admitted a
//!    second), never below [`MIN_EVICTABLE_AFTER`] ([`protection_window`]). A fixed 500 ms
//!    locked every newcomer out once forged handshakes came faster than the table's size
//!    every 500 ms (3,000 a second against 1,000 places): each session became evictable just
//!    as the next forged one arrived to take its place. With the window at half the turnover
//!    the oldest half of the table is always evictable, and a newcomer keeps its place for a
//!    whole turnover (333 ms in that case); what still locks it out is a flood that turns the
//!    table over faster than the client proves its address (its first input: one input
//!    interval), or faster than [`MIN_EVICTABLE_AFTER`] twice over.
//!
//! `tests/it/amplification.rs` measures each protocol's factor (bytes sent to an address that
//! never answers ÷ bytes received from it, over 5 s of simulated time), for forged
//! handshakes and for blind spoofing: a forged handshake followed, without reading the
//! reply, by what a real client sent after it against the attacker's own server (cafe
//! 197× and DarkAges 275× when any first datagram proved the address; 0.12 and 0.48 now).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// How long a session may stay unproven. Real clients send their first input within one
/// input interval of the reply (a few ms to 100 ms); two seconds leave room for a lost first
/// input and a slow client without letting forged sessions pile up.
pub const UNPROVEN_TIMEOUT: Duration = Duration::from_secs(2);

/// A full server evicts an unproven session only once it is this old, so a real client
/// between its reply and its first input is not pushed out by the next handshake.
pub const EVICTABLE_AFTER: Duration = Duration::from_millis(500);

/// The shortest protection window a flood can push an unproven session's down to (rule 4):
/// a client at 10 inputs a second still proves its address within it.
pub const MIN_EVICTABLE_AFTER: Duration = Duration::from_millis(100);

/// Rule 4's protection window: how old an unproven session must be before a full server
/// gives its slot to a newcomer, for a table holding `held` sessions into which
/// `admitted_per_s` new sessions came in the last second. Half the table's turnover time
/// (`held / admitted_per_s`), within [`MIN_EVICTABLE_AFTER`]..=[`EVICTABLE_AFTER`].
pub fn protection_window(held: usize, admitted_per_s: u64) -> Duration {
    if admitted_per_s == 0 {
        return EVICTABLE_AFTER;
    }
    let half_turnover = Duration::from_secs_f64(held as f64 / admitted_per_s as f64 / 2.0);
    half_turnover.clamp(MIN_EVICTABLE_AFTER, EVICTABLE_AFTER)
}

/// Handshake replies an unproven session gets (its first and up to three answers to retries,
/// which a client sends when a reply was lost).
pub const MAX_UNPROVEN_REPLIES: u32 = 4;

/// A generator for the values a server puts in its handshake reply as the address proof
/// (cafe's player id, DarkAges' heartbeat challenge): ChaCha8 seeded once from the OS.
///
/// The seed comes from the standard library's `RandomState`, whose keys the OS's random
/// source sets per process, hashed with a process-wide counter and the time, so two servers
/// in one process draw different streams and nothing outside the process can predict them.
/// `seed` pins the stream instead (simulations that must replay exactly).
pub fn proof_rng(seed: Option<u64>) -> ChaCha8Rng {
    if let Some(seed) = seed {
        return ChaCha8Rng::seed_from_u64(seed);
    }
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 32];
    let n = DRAWS.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let h = RandomState::new().hash_one((n, i, t));
        chunk.copy_from_slice(&h.to_le_bytes());
    }
    ChaCha8Rng::from_seed(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn os_seeded_streams_differ_and_pinned_ones_repeat() {
        let a: u64 = proof_rng(None).random();
        let b: u64 = proof_rng(None).random();
        assert_ne!(a, b);
        let c: u64 = proof_rng(Some(7)).random();
        let d: u64 = proof_rng(Some(7)).random();
        assert_eq!(c, d);
    }
}
