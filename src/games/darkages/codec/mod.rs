//! Every DarkAges wire rule (`docs/protocols/darkages.md`).
//!
//! - **Byte order**: little-endian (packed C++ structs on x86). Floats are IEEE 754
//!   `f32` little-endian.
//! - **Sizes**: the spec's "Size" lines exclude the 1-byte type. With the type byte:
//!   CONNECT 105, CONNECT_ACK 90, CONNECTED 1, HEARTBEAT 5, INPUT 26 (22 as printed), PING and
//!   PONG 5, ZONE_HANDOFF 75, ZONE_ENTER / ZONE_LEAVE 9. A fixed-size packet of any other size
//!   is malformed (`<type>.bad_size`): padding is not accepted, so a server and a bot that
//!   disagree on a layout find out at once instead of reading shifted fields.
//! - **INPUT**: the struct as printed, then `last_received_tick u32` (§3.3 needs the
//!   ack and the struct has no field for it). The decoder takes both sizes: 22 bytes decode
//!   with `last_received_tick: None`, and a server then sends full snapshots only.
//! - **SNAPSHOT** (0x21): full when `baseline_tick == server_tick` (`entity_count u16`, then
//!   records), else a delta (`changed_count u16, removed_count u16`, changed records, then
//!   `removed_count` entity ids). A record is `entity_id u32, entity_type u8, present_mask
//!   u16`, then only the present fields, in mask-bit order: position x, y, z (`i16` each, one
//!   bit each), rotation x, y, z, w (`i8` each), velocity x, y, z (`i16` each), health, anim,
//!   team (`u8` each). Mask bits 13-15 name no field, so their size is unknown and the record
//!   cannot be skipped: `snapshot.unknown_field_bits`.
//! - **EVENT** (0x22) and **COALESCED_EVENTS** (0x23, §5.3): the payload length must match
//!   what follows exactly. Payload layouts the spec gives (damage 30 bytes, death 13, zone
//!   handoff 74) are checked; SPAWN / DESPAWN are defined here as `entity_id u32,
//!   entity_type u8`; CHAT and SYSTEM payloads are UTF-8 text; any other event type is opaque
//!   and only counted.
//! - **DISCONNECT**: `reason u8`, then `message` as a `u16` length and UTF-8 bytes;
//!   DEBUG_TEXT is the same string alone.
//! - **ZONE_HANDOFF** (0x30): the spec defines no layout for the packet; it carries the
//!   `ZoneHandoffEventPayload` of §2.6 (the same bytes as an EVENT of type 0x06).
//!   ZONE_ENTER / ZONE_LEAVE (also undefined) carry `zone_id u32, entity_id u32`.
//! - **Quantization** (§2.5): see [`quantize_pos`] and [`quantize_unit`].
//!
//! Decoding never panics and never allocates: a decoded [`Packet`] borrows the datagram, and
//! a snapshot is validated whole (every record's length walked) before its records are
//! handed out, so a malformed tail can never leave a half-applied snapshot behind.

use thiserror::Error;

use crate::protocol::prelude::wire::{Le, Reader, WireError, WireResult, Writer};

pub mod inspect;
mod packets;
mod quant;
mod records;
#[cfg(test)]
mod tests;
pub mod token;
mod wire_format;

pub use packets::*;
pub use quant::*;
pub use records::*;
pub use wire_format::*;

/// `PROTOCOL_VERSION` of §1.3: 1.0.
pub const PROTOCOL_VERSION: u32 = 0x0001_0000;
/// §1.1's MTU: the reference server keeps every datagram at or under it.
pub const MTU: usize = 1200;

/// Packet types of §2.1, and §5.3's COALESCED_EVENTS.
pub mod ty {
    pub const CONNECT: u8 = 0x10;
    pub const CONNECT_ACK: u8 = 0x11;
    pub const CONNECTED: u8 = 0x12;
    pub const DISCONNECT: u8 = 0x13;
    pub const HEARTBEAT: u8 = 0x14;
    pub const INPUT: u8 = 0x20;
    pub const SNAPSHOT: u8 = 0x21;
    pub const EVENT: u8 = 0x22;
    pub const COALESCED_EVENTS: u8 = 0x23;
    pub const ZONE_HANDOFF: u8 = 0x30;
    pub const ZONE_ENTER: u8 = 0x31;
    pub const ZONE_LEAVE: u8 = 0x32;
    pub const DEBUG_TEXT: u8 = 0xF0;
    pub const PING: u8 = 0xF1;
    pub const PONG: u8 = 0xF2;
}

/// Whole-datagram sizes of the fixed layouts (type byte included).
pub mod len {
    pub const CONNECT: usize = 105;
    pub const CONNECT_ACK: usize = 90;
    pub const CONNECTED: usize = 1;
    pub const HEARTBEAT: usize = 5;
    /// INPUT as §2.4 prints it.
    pub const INPUT_PRINTED: usize = 22;
    /// INPUT with `last_received_tick` appended (the default).
    pub const INPUT: usize = 26;
    pub const ZONE_HANDOFF_PAYLOAD: usize = 74;
    pub const ZONE_HANDOFF: usize = 1 + ZONE_HANDOFF_PAYLOAD;
    pub const ZONE_ENTER: usize = 9;
    pub const PING: usize = 5;
    pub const DAMAGE_PAYLOAD: usize = 30;
    pub const DEATH_PAYLOAD: usize = 13;
    pub const SPAWN_PAYLOAD: usize = 5;
    /// `type, server_tick, baseline_tick, entity_count`.
    pub const FULL_HEADER: usize = 11;
    /// `type, server_tick, baseline_tick, changed_count, removed_count`.
    pub const DELTA_HEADER: usize = 13;
    /// `entity_id, entity_type, present_mask`.
    pub const RECORD_HEADER: usize = 7;
    /// A record with every field present.
    pub const RECORD_FULL: usize = 26;
    /// `type, event_id, timestamp, event_type, payload_length`.
    pub const EVENT_HEADER: usize = 12;
}

/// Input flags of §2.4.
pub mod input {
    pub const FORWARD: u8 = 1 << 0;
    pub const BACKWARD: u8 = 1 << 1;
    pub const LEFT: u8 = 1 << 2;
    pub const RIGHT: u8 = 1 << 3;
    pub const JUMP: u8 = 1 << 4;
    pub const ATTACK: u8 = 1 << 5;
    pub const BLOCK: u8 = 1 << 6;
    pub const SPRINT: u8 = 1 << 7;
}

/// Present-mask bits of §2.5.
pub mod field {
    pub const POS_X: u16 = 1 << 0;
    pub const POS_Y: u16 = 1 << 1;
    pub const POS_Z: u16 = 1 << 2;
    pub const ROT_X: u16 = 1 << 3;
    pub const ROT_Y: u16 = 1 << 4;
    pub const ROT_Z: u16 = 1 << 5;
    pub const ROT_W: u16 = 1 << 6;
    pub const VEL_X: u16 = 1 << 7;
    pub const VEL_Y: u16 = 1 << 8;
    pub const VEL_Z: u16 = 1 << 9;
    pub const HEALTH: u16 = 1 << 10;
    pub const ANIM: u16 = 1 << 11;
    pub const TEAM: u16 = 1 << 12;
    /// Every field the spec defines.
    pub const ALL: u16 = (1 << 13) - 1;
}

/// Entity types of §2.5.
pub mod entity {
    pub const PLAYER: u8 = 0;
    pub const PROJECTILE: u8 = 1;
    pub const LOOT: u8 = 2;
}

/// Event types of §2.6.
pub mod event {
    pub const DAMAGE: u8 = 0x01;
    pub const DEATH: u8 = 0x02;
    pub const SPAWN: u8 = 0x03;
    pub const DESPAWN: u8 = 0x04;
    pub const ABILITY_COOLDOWN: u8 = 0x05;
    pub const ZONE_HANDOFF: u8 = 0x06;
    pub const CHAT: u8 = 0x07;
    pub const SYSTEM: u8 = 0x08;

    /// Counter name of an event type (`events` are counted by type).
    pub fn name(t: u8) -> &'static str {
        match t {
            DAMAGE => "event_damage",
            DEATH => "event_death",
            SPAWN => "event_spawn",
            DESPAWN => "event_despawn",
            ABILITY_COOLDOWN => "event_ability_cooldown",
            ZONE_HANDOFF => "event_zone_handoff",
            CHAT => "event_chat",
            SYSTEM => "event_system",
            _ => "event_unknown_type",
        }
    }
}

/// CONNECT_ACK results of §2.3.
pub mod result {
    pub const SUCCESS: u8 = 0;
    pub const VERSION_MISMATCH: u8 = 1;
    pub const AUTH_FAILED: u8 = 2;
    pub const SERVER_FULL: u8 = 3;
}

/// Disconnect reasons of §4.2.
pub mod reason {
    pub const NORMAL: u8 = 0x00;
    pub const TIMEOUT: u8 = 0x01;
    pub const KICK: u8 = 0x02;
    pub const BAN: u8 = 0x03;
    pub const SERVER_SHUTDOWN: u8 = 0x04;
    pub const ZONE_HANDOFF: u8 = 0x05;
    pub const PROTOCOL_ERROR: u8 = 0x06;
    pub const CHEAT_DETECTED: u8 = 0x07;
    pub const RATE_LIMITED: u8 = 0x08;
    pub const SERVER_FULL: u8 = 0x09;

    /// Counter name of a reason.
    pub fn name(r: u8) -> &'static str {
        match r {
            NORMAL => "normal",
            TIMEOUT => "timeout",
            KICK => "kick",
            BAN => "ban",
            SERVER_SHUTDOWN => "server_shutdown",
            ZONE_HANDOFF => "zone_handoff",
            PROTOCOL_ERROR => "protocol_error",
            CHEAT_DETECTED => "cheat_detected",
            RATE_LIMITED => "rate_limited",
            SERVER_FULL => "server_full",
            _ => "unknown",
        }
    }
}

/// Which INPUT layout a bot sends (docs/protocols/darkages.md, "Dialects").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// INPUT with `last_received_tick` appended (26 bytes): the server deltas against it.
    #[default]
    Spec,
    /// INPUT exactly as §2.4 prints it (22 bytes): no ack, so the server sends full
    /// snapshots only.
    StructAsPrinted,
    /// The public server's own plain-UDP protocol: another wire altogether
    /// ([`super::dialects::implementation`]).
    Implementation,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Spec => "spec",
            Dialect::StructAsPrinted => "struct_as_printed",
            Dialect::Implementation => "implementation",
        }
    }
}

/// A datagram that failed validation: counted as `message.reason` and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

impl DecodeError {
    fn new(message: &'static str, reason: &'static str) -> Self {
        Self { message, reason }
    }

    /// A type byte this codec does not know (counted and ignored, not a malformed packet).
    pub fn is_unknown_type(&self) -> bool {
        self.reason == "unknown_type"
    }
}

/// A wire read failed inside `message`: the wire error's stable reason name.
fn wire(message: &'static str) -> impl Fn(WireError) -> DecodeError {
    move |e| DecodeError::new(message, e.reason())
}
