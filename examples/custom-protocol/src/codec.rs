//! The wire constants and the world both ends keep (the message layouts are in the crate's
//! documentation).

/// A decode failure's reason, counted as `datagram.<reason>` (wire errors convert with `?`).
pub(crate) type Decoded = Result<(), &'static str>;

/// Wire version in the Hello.
pub const VERSION: u8 = 1;
/// Players one server takes: a full snapshot (22 + 200 × 6 bytes) fits one datagram.
pub const MAX_PLAYERS: usize = 200;
/// Worlds kept by both ends, so a delta's baseline is at most this many ticks old.
pub const HISTORY: usize = 32;
#[allow(missing_docs)]
pub mod msg {
    pub const HELLO: u8 = 1;
    pub const INPUT: u8 = 2;
    pub const PING: u8 = 3;
    pub const BYE: u8 = 4;
    pub const WELCOME: u8 = 0x81;
    pub const SNAPSHOT: u8 = 0x82;
    pub const PONG: u8 = 0x83;
}
pub(crate) const GONE: i16 = i16::MIN;

/// One world: every player slot's position, or `None` for an empty slot.
pub(crate) type World = [Option<(i16, i16)>; MAX_PLAYERS];
pub(crate) const EMPTY: World = [None; MAX_PLAYERS];
