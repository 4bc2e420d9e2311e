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
    /// ([`super::implementation`]).
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

// ---------------------------------------------------------------------------------------------
// Quantization (§2.5)

/// `QuantizedVec3` scale: 1/64 m per step (§2.5: "Actual = x / 64.0").
pub const POS_SCALE: f32 = 64.0;
/// `QuantizedQuat` scale: a component of 1.0 is 127.
pub const UNIT_SCALE: f32 = 127.0;
/// Largest magnitude a position or velocity component can carry: 32767 / 64 ≈ 511.98.
pub const POS_MAX: f32 = 32767.0 / POS_SCALE;

/// Metres to the wire's 1/64 m steps: `round(v × 64)`, rounding half away from zero (so
/// ±0.5/64 go outward symmetrically), clamped to `-32768..=32767`; NaN is 0. Multiplying by
/// a power of two is exact in `f32`, so the only rounding is the documented one.
#[inline]
pub fn quantize_pos(v: f32) -> i16 {
    if v.is_nan() {
        return 0;
    }
    (v * POS_SCALE).round().clamp(-32768.0, 32767.0) as i16
}

/// The wire's 1/64 m steps back to metres (exact: every `i16 / 64` is an `f32`).
#[inline]
pub fn dequantize_pos(q: i16) -> f32 {
    f32::from(q) / POS_SCALE
}

/// A quaternion component (-1..=1) to `int8`: `round(c × 127)`, half away from zero, clamped
/// to `-127..=127` (the spec's range; -128 is never sent, so the code stays symmetric); NaN is 0.
#[inline]
pub fn quantize_unit(c: f32) -> i8 {
    if c.is_nan() {
        return 0;
    }
    (c * UNIT_SCALE).round().clamp(-127.0, 127.0) as i8
}

/// `int8` back to a component: `q / 127`, with a received -128 read as -1.0.
#[inline]
pub fn dequantize_unit(q: i8) -> f32 {
    (f32::from(q) / UNIT_SCALE).max(-1.0)
}

/// The rotation of a body facing `yaw` radians about the vertical (y) axis, quantized:
/// `(0, sin(yaw/2), 0, cos(yaw/2))`.
pub fn yaw_quat(yaw: f32) -> [i8; 4] {
    let h = yaw * 0.5;
    [0, quantize_unit(h.sin()), 0, quantize_unit(h.cos())]
}

/// A position or velocity (metres, metres per second) quantized per component.
#[inline]
pub fn quantize_vec3(v: [f32; 3]) -> [i16; 3] {
    [quantize_pos(v[0]), quantize_pos(v[1]), quantize_pos(v[2])]
}

// ---------------------------------------------------------------------------------------------
// Entity state

/// One entity as the wire carries it (quantized). Bots and the server keep these, so a delta
/// is a field-by-field comparison of integers and applying one is a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct EntityState {
    pub id: u32,
    pub kind: u8,
    pub pos: [i16; 3],
    pub rot: [i8; 4],
    pub vel: [i16; 3],
    pub health: u8,
    pub anim: u8,
    pub team: u8,
}

impl EntityState {
    /// Present-mask bits of the fields where `self` differs from `base` (§3.2's
    /// `calculateDelta`). The entity type is not a field: an id keeps its type.
    pub fn diff_mask(&self, base: &EntityState) -> u16 {
        let mut m = 0;
        for i in 0..3 {
            if self.pos[i] != base.pos[i] {
                m |= field::POS_X << i;
            }
            if self.vel[i] != base.vel[i] {
                m |= field::VEL_X << i;
            }
        }
        for i in 0..4 {
            if self.rot[i] != base.rot[i] {
                m |= field::ROT_X << i;
            }
        }
        if self.health != base.health {
            m |= field::HEALTH;
        }
        if self.anim != base.anim {
            m |= field::ANIM;
        }
        if self.team != base.team {
            m |= field::TEAM;
        }
        m
    }
}

/// Bytes of a record with `mask` present (mask bits beyond [`field::ALL`] ignored).
pub const fn record_len(mask: u16) -> usize {
    let pos = (mask & 0x0007).count_ones() as usize * 2;
    let rot = (mask & 0x0078).count_ones() as usize;
    let vel = (mask & 0x0380).count_ones() as usize * 2;
    let small = (mask & 0x1C00).count_ones() as usize;
    len::RECORD_HEADER + pos + rot + vel + small
}

/// A record as decoded: the id, type and mask, and the present fields (absent ones 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntityUpdate {
    pub mask: u16,
    pub state: EntityState,
}

impl EntityUpdate {
    /// Copy the present fields onto `dst` (a delta on its baseline's record). The type is
    /// taken as well: a record always carries it.
    #[inline]
    pub fn apply_to(&self, dst: &mut EntityState) {
        let (m, s) = (self.mask, &self.state);
        dst.id = s.id;
        dst.kind = s.kind;
        if m == field::ALL {
            *dst = *s;
            return;
        }
        for i in 0..3 {
            if m & (field::POS_X << i) != 0 {
                dst.pos[i] = s.pos[i];
            }
            if m & (field::VEL_X << i) != 0 {
                dst.vel[i] = s.vel[i];
            }
        }
        for i in 0..4 {
            if m & (field::ROT_X << i) != 0 {
                dst.rot[i] = s.rot[i];
            }
        }
        if m & field::HEALTH != 0 {
            dst.health = s.health;
        }
        if m & field::ANIM != 0 {
            dst.anim = s.anim;
        }
        if m & field::TEAM != 0 {
            dst.team = s.team;
        }
    }
}

/// Write one record: header, then the fields `mask` names.
pub fn write_record(w: &mut Writer<'_, Le>, e: &EntityState, mask: u16) -> WireResult {
    let start = w.position();
    let r = (|| {
        w.u32(e.id)?;
        w.u8(e.kind)?;
        w.u16(mask & field::ALL)?;
        for i in 0..3 {
            if mask & (field::POS_X << i) != 0 {
                w.i16(e.pos[i])?;
            }
        }
        for i in 0..4 {
            if mask & (field::ROT_X << i) != 0 {
                w.i8(e.rot[i])?;
            }
        }
        for i in 0..3 {
            if mask & (field::VEL_X << i) != 0 {
                w.i16(e.vel[i])?;
            }
        }
        if mask & field::HEALTH != 0 {
            w.u8(e.health)?;
        }
        if mask & field::ANIM != 0 {
            w.u8(e.anim)?;
        }
        if mask & field::TEAM != 0 {
            w.u8(e.team)?;
        }
        Ok(())
    })();
    if r.is_err() {
        w.rewind(start);
    }
    r
}

/// Read one record (bounds-checked; unknown mask bits refused).
#[inline]
pub fn read_record(r: &mut Reader<'_, Le>) -> Result<EntityUpdate, DecodeError> {
    let e = wire("snapshot");
    let id = r.u32().map_err(&e)?;
    let kind = r.u8().map_err(&e)?;
    let mask = r.u16().map_err(&e)?;
    if mask & !field::ALL != 0 {
        return Err(DecodeError::new("snapshot", "unknown_field_bits"));
    }
    let mut s = EntityState {
        id,
        kind,
        ..EntityState::default()
    };
    for i in 0..3 {
        if mask & (field::POS_X << i) != 0 {
            s.pos[i] = r.i16().map_err(&e)?;
        }
    }
    for i in 0..4 {
        if mask & (field::ROT_X << i) != 0 {
            s.rot[i] = r.i8().map_err(&e)?;
        }
    }
    for i in 0..3 {
        if mask & (field::VEL_X << i) != 0 {
            s.vel[i] = r.i16().map_err(&e)?;
        }
    }
    if mask & field::HEALTH != 0 {
        s.health = r.u8().map_err(&e)?;
    }
    if mask & field::ANIM != 0 {
        s.anim = r.u8().map_err(&e)?;
    }
    if mask & field::TEAM != 0 {
        s.team = r.u8().map_err(&e)?;
    }
    Ok(EntityUpdate { mask, state: s })
}

/// Walk `count` records from `r` checking only their lengths (validation before use).
fn skip_records(r: &mut Reader<'_, Le>, count: usize) -> Result<(), DecodeError> {
    let e = wire("snapshot");
    for _ in 0..count {
        r.skip(4).map_err(&e)?;
        r.skip(1).map_err(&e)?;
        let mask = r.u16().map_err(&e)?;
        if mask & !field::ALL != 0 {
            return Err(DecodeError::new("snapshot", "unknown_field_bits"));
        }
        r.skip(record_len(mask) - len::RECORD_HEADER).map_err(&e)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Packets

/// CONNECT (§2.2). `client_id` and `auth_token` are fixed byte fields (zero padded); a
/// handoff token is its 32 bytes, verbatim, at the start of `auth_token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    pub protocol_version: u32,
    pub client_version: u32,
    pub client_id: [u8; 32],
    pub auth_token: [u8; 64],
}

/// CONNECT_ACK (§2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectAck {
    pub server_protocol_version: u32,
    pub entity_id: u32,
    pub zone_id: u32,
    pub server_tick: u32,
    pub server_time_ms: u64,
    pub result: u8,
    pub message: [u8; 64],
}

/// INPUT (§2.4), with the appended `last_received_tick` (`None`: the 22-byte layout).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Input {
    pub sequence: u32,
    pub timestamp: u32,
    pub flags: u8,
    pub yaw: f32,
    pub pitch: f32,
    pub target_entity: u32,
    pub last_received_tick: Option<u32>,
}

/// `ZoneHandoffEventPayload` (§2.6), also the body of the ZONE_HANDOFF packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneHandoff {
    pub new_zone_id: u32,
    /// NUL-padded host, as text (the reference server writes an IP literal).
    pub new_server_address: [u8; 32],
    pub new_server_port: u16,
    pub handoff_token: [u8; 32],
    pub handoff_timeout_ms: u32,
}

impl ZoneHandoff {
    /// The address text up to its first NUL, if it is UTF-8.
    pub fn address_text(&self) -> Option<&str> {
        let end = self
            .new_server_address
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(32);
        std::str::from_utf8(&self.new_server_address[..end]).ok()
    }
}

/// `DamageEventPayload` (§2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    pub target_id: u32,
    pub attacker_id: u32,
    pub damage: i32,
    pub hit_type: u8,
    pub remaining_health: u8,
    pub ability_name: [u8; 16],
}

/// `DeathEventPayload` (§2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Death {
    pub victim_id: u32,
    pub killer_id: u32,
    pub respawn_time_ms: u32,
    pub kill_type: u8,
}

/// An event's payload, by type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventBody<'a> {
    Damage(Damage),
    Death(Death),
    /// SPAWN (0x03) or DESPAWN (0x04): `entity_id u32, entity_type u8` (layout defined here).
    Spawn {
        despawn: bool,
        entity_id: u32,
        entity_type: u8,
    },
    ZoneHandoff(ZoneHandoff),
    /// CHAT, SYSTEM, ABILITY_COOLDOWN and unknown types: the payload as is.
    Other {
        event_type: u8,
        payload: &'a [u8],
    },
}

impl EventBody<'_> {
    pub fn event_type(&self) -> u8 {
        match self {
            EventBody::Damage(_) => event::DAMAGE,
            EventBody::Death(_) => event::DEATH,
            EventBody::Spawn { despawn: false, .. } => event::SPAWN,
            EventBody::Spawn { despawn: true, .. } => event::DESPAWN,
            EventBody::ZoneHandoff(_) => event::ZONE_HANDOFF,
            EventBody::Other { event_type, .. } => *event_type,
        }
    }

    fn payload_len(&self) -> usize {
        match self {
            EventBody::Damage(_) => len::DAMAGE_PAYLOAD,
            EventBody::Death(_) => len::DEATH_PAYLOAD,
            EventBody::Spawn { .. } => len::SPAWN_PAYLOAD,
            EventBody::ZoneHandoff(_) => len::ZONE_HANDOFF_PAYLOAD,
            EventBody::Other { payload, .. } => payload.len(),
        }
    }

    /// `event_type u8, payload_length u16, payload` (the shared tail of EVENT and a
    /// coalesced entry).
    fn write_typed(&self, w: &mut Writer<'_, Le>) -> WireResult {
        w.u8(self.event_type())?;
        let n = u16::try_from(self.payload_len()).map_err(|_| WireError::Overflow {
            what: "payload_length",
            at: w.position(),
            needed: self.payload_len(),
            available: usize::from(u16::MAX),
        })?;
        w.u16(n)?;
        self.write_payload(w)
    }

    fn write_payload(&self, w: &mut Writer<'_, Le>) -> WireResult {
        match self {
            EventBody::Damage(d) => {
                w.u32(d.target_id)?;
                w.u32(d.attacker_id)?;
                w.i32(d.damage)?;
                w.u8(d.hit_type)?;
                w.u8(d.remaining_health)?;
                w.bytes(&d.ability_name)
            }
            EventBody::Death(d) => {
                w.u32(d.victim_id)?;
                w.u32(d.killer_id)?;
                w.u32(d.respawn_time_ms)?;
                w.u8(d.kill_type)
            }
            EventBody::Spawn {
                entity_id,
                entity_type,
                ..
            } => {
                w.u32(*entity_id)?;
                w.u8(*entity_type)
            }
            EventBody::ZoneHandoff(z) => write_handoff(w, z),
            EventBody::Other { payload, .. } => w.bytes(payload),
        }
    }

    /// Parse a payload of `event_type` (exactly `payload`'s bytes).
    fn parse<'p>(
        message: &'static str,
        event_type: u8,
        payload: &'p [u8],
    ) -> Result<EventBody<'p>, DecodeError> {
        let bad = || DecodeError::new(message, "bad_payload");
        let mut r = Reader::<Le>::new(payload);
        let body = match event_type {
            event::DAMAGE => {
                if payload.len() != len::DAMAGE_PAYLOAD {
                    return Err(bad());
                }
                EventBody::Damage(Damage {
                    target_id: r.u32().map_err(|_| bad())?,
                    attacker_id: r.u32().map_err(|_| bad())?,
                    damage: r.i32().map_err(|_| bad())?,
                    hit_type: r.u8().map_err(|_| bad())?,
                    remaining_health: r.u8().map_err(|_| bad())?,
                    ability_name: r.array().map_err(|_| bad())?,
                })
            }
            event::DEATH => {
                if payload.len() != len::DEATH_PAYLOAD {
                    return Err(bad());
                }
                EventBody::Death(Death {
                    victim_id: r.u32().map_err(|_| bad())?,
                    killer_id: r.u32().map_err(|_| bad())?,
                    respawn_time_ms: r.u32().map_err(|_| bad())?,
                    kill_type: r.u8().map_err(|_| bad())?,
                })
            }
            event::SPAWN | event::DESPAWN => {
                if payload.len() != len::SPAWN_PAYLOAD {
                    return Err(bad());
                }
                EventBody::Spawn {
                    despawn: event_type == event::DESPAWN,
                    entity_id: r.u32().map_err(|_| bad())?,
                    entity_type: r.u8().map_err(|_| bad())?,
                }
            }
            event::ZONE_HANDOFF => {
                if payload.len() != len::ZONE_HANDOFF_PAYLOAD {
                    return Err(bad());
                }
                EventBody::ZoneHandoff(read_handoff(&mut r).map_err(|_| bad())?)
            }
            _ => EventBody::Other {
                event_type,
                payload,
            },
        };
        Ok(body)
    }
}

/// EVENT (§2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub event_id: u32,
    pub timestamp: u32,
    pub body: EventBody<'a>,
}

/// COALESCED_EVENTS (§5.3): validated entries, read again on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalesced<'a> {
    pub count: u8,
    entries: &'a [u8],
}

impl<'a> Coalesced<'a> {
    /// The entries in order (validated when the packet was decoded).
    pub fn events(&self) -> impl Iterator<Item = EventBody<'a>> + 'a {
        let mut r = Reader::<Le>::new(self.entries);
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            read_coalesced_entry(&mut r).ok()
        })
    }
}

fn read_coalesced_entry<'a>(r: &mut Reader<'a, Le>) -> Result<EventBody<'a>, DecodeError> {
    let e = wire("coalesced_events");
    let t = r.u8().map_err(&e)?;
    let n = r.u16().map_err(&e)?;
    let payload = r.take(usize::from(n)).map_err(&e)?;
    EventBody::parse("coalesced_events", t, payload)
}

/// Full or delta (§2.5: `baseline_tick == server_tick` means full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotKind {
    Full {
        entity_count: u16,
    },
    Delta {
        changed_count: u16,
        removed_count: u16,
    },
}

/// A validated SNAPSHOT borrowing the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot<'a> {
    pub server_tick: u32,
    pub baseline_tick: u32,
    pub kind: SnapshotKind,
    /// The records (entities of a full snapshot, changed ones of a delta).
    records: &'a [u8],
    /// A delta's removed ids, 4 bytes each.
    removed: &'a [u8],
}

impl<'a> Snapshot<'a> {
    pub fn is_full(&self) -> bool {
        matches!(self.kind, SnapshotKind::Full { .. })
    }

    /// Records carried: a full snapshot's entities or a delta's changed ones.
    pub fn record_count(&self) -> usize {
        match self.kind {
            SnapshotKind::Full { entity_count } => usize::from(entity_count),
            SnapshotKind::Delta { changed_count, .. } => usize::from(changed_count),
        }
    }

    /// The records in wire order.
    pub fn records(&self) -> RecordIter<'a> {
        RecordIter {
            r: Reader::new(self.records),
            left: self.record_count(),
        }
    }

    /// A delta's removed entity ids (none for a full snapshot).
    pub fn removed(&self) -> impl Iterator<Item = u32> + 'a {
        self.removed
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    pub fn removed_count(&self) -> usize {
        self.removed.len() / 4
    }
}

/// Records of a validated snapshot.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    r: Reader<'a, Le>,
    left: usize,
}

impl Iterator for RecordIter<'_> {
    type Item = EntityUpdate;

    #[inline]
    fn next(&mut self) -> Option<EntityUpdate> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        read_record(&mut self.r).ok()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// One decoded DarkAges packet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Packet<'a> {
    Connect(Connect),
    ConnectAck(ConnectAck),
    Connected,
    Disconnect { reason: u8, message: &'a str },
    Heartbeat { timestamp: u32 },
    Input(Input),
    Snapshot(Snapshot<'a>),
    Event(Event<'a>),
    Coalesced(Coalesced<'a>),
    ZoneHandoff(ZoneHandoff),
    ZoneEnter { zone_id: u32, entity_id: u32 },
    ZoneLeave { zone_id: u32, entity_id: u32 },
    DebugText(&'a str),
    Ping { timestamp: u32 },
    Pong { timestamp: u32 },
}

impl Packet<'_> {
    pub fn type_byte(&self) -> u8 {
        match self {
            Packet::Connect(_) => ty::CONNECT,
            Packet::ConnectAck(_) => ty::CONNECT_ACK,
            Packet::Connected => ty::CONNECTED,
            Packet::Disconnect { .. } => ty::DISCONNECT,
            Packet::Heartbeat { .. } => ty::HEARTBEAT,
            Packet::Input(_) => ty::INPUT,
            Packet::Snapshot(_) => ty::SNAPSHOT,
            Packet::Event(_) => ty::EVENT,
            Packet::Coalesced(_) => ty::COALESCED_EVENTS,
            Packet::ZoneHandoff(_) => ty::ZONE_HANDOFF,
            Packet::ZoneEnter { .. } => ty::ZONE_ENTER,
            Packet::ZoneLeave { .. } => ty::ZONE_LEAVE,
            Packet::DebugText(_) => ty::DEBUG_TEXT,
            Packet::Ping { .. } => ty::PING,
            Packet::Pong { .. } => ty::PONG,
        }
    }

    pub fn name(&self) -> &'static str {
        type_name(self.type_byte())
    }
}

/// Counter name of a packet type.
pub fn type_name(t: u8) -> &'static str {
    match t {
        ty::CONNECT => "connect",
        ty::CONNECT_ACK => "connect_ack",
        ty::CONNECTED => "connected",
        ty::DISCONNECT => "disconnect",
        ty::HEARTBEAT => "heartbeat",
        ty::INPUT => "input",
        ty::SNAPSHOT => "snapshot",
        ty::EVENT => "event",
        ty::COALESCED_EVENTS => "coalesced_events",
        ty::ZONE_HANDOFF => "zone_handoff",
        ty::ZONE_ENTER => "zone_enter",
        ty::ZONE_LEAVE => "zone_leave",
        ty::DEBUG_TEXT => "debug_text",
        ty::PING => "ping",
        ty::PONG => "pong",
        _ => "packet",
    }
}

fn fixed(message: &'static str, data: &[u8], size: usize) -> Result<(), DecodeError> {
    if data.len() == size {
        Ok(())
    } else {
        Err(DecodeError::new(message, "bad_size"))
    }
}

fn read_handoff(r: &mut Reader<'_, Le>) -> WireResult<ZoneHandoff> {
    Ok(ZoneHandoff {
        new_zone_id: r.u32()?,
        new_server_address: r.array()?,
        new_server_port: r.u16()?,
        handoff_token: r.array()?,
        handoff_timeout_ms: r.u32()?,
    })
}

fn write_handoff(w: &mut Writer<'_, Le>, z: &ZoneHandoff) -> WireResult {
    w.u32(z.new_zone_id)?;
    w.bytes(&z.new_server_address)?;
    w.u16(z.new_server_port)?;
    w.bytes(&z.handoff_token)?;
    w.u32(z.handoff_timeout_ms)
}

/// A `u16`-length-prefixed UTF-8 string running exactly to the end.
fn read_text<'a>(message: &'static str, r: &mut Reader<'a, Le>) -> Result<&'a str, DecodeError> {
    let e = wire(message);
    let n = r.u16().map_err(&e)?;
    let b = r.take(usize::from(n)).map_err(&e)?;
    r.expect_end().map_err(&e)?;
    std::str::from_utf8(b).map_err(|_| DecodeError::new(message, "bad_utf8"))
}

fn write_text(w: &mut Writer<'_, Le>, s: &str) -> WireResult {
    let n = u16::try_from(s.len()).map_err(|_| WireError::Overflow {
        what: "text",
        at: w.position(),
        needed: s.len(),
        available: usize::from(u16::MAX),
    })?;
    w.u16(n)?;
    w.bytes(s.as_bytes())
}

/// Decode one datagram. Validation order: empty; unknown type (`packet.unknown_type`,
/// counted and ignored by callers); fixed sizes (`<type>.bad_size`); then fields, lengths
/// and counts (`<type>.truncated`, `.trailing_bytes`, `.count_overrun`, ...).
pub fn decode(data: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let Some(&t) = data.first() else {
        return Err(DecodeError::new("packet", "empty"));
    };
    let name = type_name(t);
    let e = wire(name);
    let mut r = Reader::<Le>::new(data);
    r.skip(1).map_err(&e)?;
    let p = match t {
        ty::CONNECT => {
            fixed(name, data, len::CONNECT)?;
            Packet::Connect(Connect {
                protocol_version: r.u32().map_err(&e)?,
                client_version: r.u32().map_err(&e)?,
                client_id: r.array().map_err(&e)?,
                auth_token: r.array().map_err(&e)?,
            })
        }
        ty::CONNECT_ACK => {
            fixed(name, data, len::CONNECT_ACK)?;
            Packet::ConnectAck(ConnectAck {
                server_protocol_version: r.u32().map_err(&e)?,
                entity_id: r.u32().map_err(&e)?,
                zone_id: r.u32().map_err(&e)?,
                server_tick: r.u32().map_err(&e)?,
                server_time_ms: r.u64().map_err(&e)?,
                result: r.u8().map_err(&e)?,
                message: r.array().map_err(&e)?,
            })
        }
        ty::CONNECTED => {
            fixed(name, data, len::CONNECTED)?;
            Packet::Connected
        }
        ty::DISCONNECT => {
            let reason = r.u8().map_err(&e)?;
            let message = read_text(name, &mut r)?;
            Packet::Disconnect { reason, message }
        }
        ty::HEARTBEAT | ty::PING | ty::PONG => {
            fixed(name, data, len::PING)?;
            let timestamp = r.u32().map_err(&e)?;
            match t {
                ty::HEARTBEAT => Packet::Heartbeat { timestamp },
                ty::PING => Packet::Ping { timestamp },
                _ => Packet::Pong { timestamp },
            }
        }
        ty::INPUT => {
            if data.len() != len::INPUT && data.len() != len::INPUT_PRINTED {
                return Err(DecodeError::new(name, "bad_size"));
            }
            Packet::Input(Input {
                sequence: r.u32().map_err(&e)?,
                timestamp: r.u32().map_err(&e)?,
                flags: r.u8().map_err(&e)?,
                yaw: r.f32().map_err(&e)?,
                pitch: r.f32().map_err(&e)?,
                target_entity: r.u32().map_err(&e)?,
                last_received_tick: if r.is_empty() {
                    None
                } else {
                    Some(r.u32().map_err(&e)?)
                },
            })
        }
        ty::SNAPSHOT => Packet::Snapshot(decode_snapshot(&mut r)?),
        ty::EVENT => {
            let event_id = r.u32().map_err(&e)?;
            let timestamp = r.u32().map_err(&e)?;
            let event_type = r.u8().map_err(&e)?;
            let n = usize::from(r.u16().map_err(&e)?);
            if n != r.remaining() {
                return Err(DecodeError::new(
                    name,
                    if n > r.remaining() {
                        "length_overrun"
                    } else {
                        "trailing_bytes"
                    },
                ));
            }
            let payload = r.rest();
            Packet::Event(Event {
                event_id,
                timestamp,
                body: EventBody::parse(name, event_type, payload)?,
            })
        }
        ty::COALESCED_EVENTS => {
            let count = r.u8().map_err(&e)?;
            let start = r.position();
            for _ in 0..count {
                read_coalesced_entry(&mut r)?;
            }
            r.expect_end().map_err(&e)?;
            Packet::Coalesced(Coalesced {
                count,
                entries: data.get(start..).unwrap_or_default(),
            })
        }
        ty::ZONE_HANDOFF => {
            fixed(name, data, len::ZONE_HANDOFF)?;
            Packet::ZoneHandoff(read_handoff(&mut r).map_err(&e)?)
        }
        ty::ZONE_ENTER | ty::ZONE_LEAVE => {
            fixed(name, data, len::ZONE_ENTER)?;
            let zone_id = r.u32().map_err(&e)?;
            let entity_id = r.u32().map_err(&e)?;
            if t == ty::ZONE_ENTER {
                Packet::ZoneEnter { zone_id, entity_id }
            } else {
                Packet::ZoneLeave { zone_id, entity_id }
            }
        }
        ty::DEBUG_TEXT => Packet::DebugText(read_text(name, &mut r)?),
        _ => return Err(DecodeError::new("packet", "unknown_type")),
    };
    Ok(p)
}

fn decode_snapshot<'a>(r: &mut Reader<'a, Le>) -> Result<Snapshot<'a>, DecodeError> {
    let e = wire("snapshot");
    let server_tick = r.u32().map_err(&e)?;
    let baseline_tick = r.u32().map_err(&e)?;
    let full = baseline_tick == server_tick;
    let (kind, count, removed_n) = if full {
        let n = r.u16().map_err(&e)?;
        (SnapshotKind::Full { entity_count: n }, n, 0u16)
    } else {
        let c = r.u16().map_err(&e)?;
        let d = r.u16().map_err(&e)?;
        (
            SnapshotKind::Delta {
                changed_count: c,
                removed_count: d,
            },
            c,
            d,
        )
    };
    // Cheap refusal of counts that cannot fit before walking anything.
    let least = usize::from(count) * len::RECORD_HEADER + usize::from(removed_n) * 4;
    if least > r.remaining() {
        return Err(DecodeError::new("snapshot", "count_overrun"));
    }
    let start = r.position();
    skip_records(r, usize::from(count))?;
    let records = r.since(start);
    let removed_len = usize::from(removed_n) * 4;
    if r.remaining() < removed_len {
        return Err(DecodeError::new("snapshot", "count_overrun"));
    }
    let removed = r.take(removed_len).map_err(&e)?;
    r.expect_end().map_err(&e)?;
    Ok(Snapshot {
        server_tick,
        baseline_tick,
        kind,
        records,
        removed,
    })
}

/// Encode every packet but SNAPSHOT (see [`SnapshotWriter`]) and COALESCED_EVENTS (see
/// [`CoalescedWriter`]) into `buf`; the length written.
pub fn encode(buf: &mut [u8], p: &Packet<'_>) -> WireResult<usize> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(p.type_byte())?;
    match p {
        Packet::Connect(c) => {
            w.u32(c.protocol_version)?;
            w.u32(c.client_version)?;
            w.bytes(&c.client_id)?;
            w.bytes(&c.auth_token)?;
        }
        Packet::ConnectAck(a) => {
            w.u32(a.server_protocol_version)?;
            w.u32(a.entity_id)?;
            w.u32(a.zone_id)?;
            w.u32(a.server_tick)?;
            w.u64(a.server_time_ms)?;
            w.u8(a.result)?;
            w.bytes(&a.message)?;
        }
        Packet::Connected => {}
        Packet::Disconnect { reason, message } => {
            w.u8(*reason)?;
            write_text(&mut w, message)?;
        }
        Packet::Heartbeat { timestamp }
        | Packet::Ping { timestamp }
        | Packet::Pong { timestamp } => w.u32(*timestamp)?,
        Packet::Input(i) => {
            w.u32(i.sequence)?;
            w.u32(i.timestamp)?;
            w.u8(i.flags)?;
            w.f32(i.yaw)?;
            w.f32(i.pitch)?;
            w.u32(i.target_entity)?;
            if let Some(t) = i.last_received_tick {
                w.u32(t)?;
            }
        }
        Packet::Snapshot(s) => {
            w.u32(s.server_tick)?;
            w.u32(s.baseline_tick)?;
            match s.kind {
                SnapshotKind::Full { entity_count } => w.u16(entity_count)?,
                SnapshotKind::Delta {
                    changed_count,
                    removed_count,
                } => {
                    w.u16(changed_count)?;
                    w.u16(removed_count)?;
                }
            }
            w.bytes(s.records)?;
            w.bytes(s.removed)?;
        }
        Packet::Event(ev) => {
            w.u32(ev.event_id)?;
            w.u32(ev.timestamp)?;
            ev.body.write_typed(&mut w)?;
        }
        Packet::Coalesced(c) => {
            w.u8(c.count)?;
            w.bytes(c.entries)?;
        }
        Packet::ZoneHandoff(z) => write_handoff(&mut w, z)?,
        Packet::ZoneEnter { zone_id, entity_id } | Packet::ZoneLeave { zone_id, entity_id } => {
            w.u32(*zone_id)?;
            w.u32(*entity_id)?;
        }
        Packet::DebugText(s) => write_text(&mut w, s)?,
    }
    Ok(w.position())
}

/// Builds a SNAPSHOT in a caller's buffer without allocating: header first, records as they
/// come, removed ids after the changed records, counts patched at the end.
#[derive(Debug)]
pub struct SnapshotWriter<'b> {
    w: Writer<'b, Le>,
    full: bool,
    records: u16,
    removed: u16,
}

impl<'b> SnapshotWriter<'b> {
    /// A full snapshot of tick `server_tick` (`baseline_tick` = `server_tick`).
    pub fn full(buf: &'b mut [u8], server_tick: u32) -> WireResult<Self> {
        let mut w = Writer::new(buf);
        w.u8(ty::SNAPSHOT)?;
        w.u32(server_tick)?;
        w.u32(server_tick)?;
        w.u16(0)?;
        Ok(Self {
            w,
            full: true,
            records: 0,
            removed: 0,
        })
    }

    /// A delta of `server_tick` against `baseline_tick` (which must differ from it, or the
    /// packet reads as full).
    pub fn delta(buf: &'b mut [u8], server_tick: u32, baseline_tick: u32) -> WireResult<Self> {
        let mut w = Writer::new(buf);
        w.u8(ty::SNAPSHOT)?;
        w.u32(server_tick)?;
        w.u32(baseline_tick)?;
        w.u16(0)?;
        w.u16(0)?;
        Ok(Self {
            w,
            full: false,
            records: 0,
            removed: 0,
        })
    }

    /// One record with the fields of `mask`. Must come before any [`SnapshotWriter::removed`].
    pub fn record(&mut self, e: &EntityState, mask: u16) -> WireResult {
        if self.removed > 0 || self.records == u16::MAX {
            return Err(WireError::Overflow {
                what: "record",
                at: self.w.position(),
                needed: 1,
                available: 0,
            });
        }
        write_record(&mut self.w, e, mask)?;
        self.records += 1;
        Ok(())
    }

    /// One removed id (deltas only).
    pub fn removed(&mut self, id: u32) -> WireResult {
        if self.full || self.removed == u16::MAX {
            return Err(WireError::Overflow {
                what: "removed",
                at: self.w.position(),
                needed: 4,
                available: 0,
            });
        }
        self.w.u32(id)?;
        self.removed += 1;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.w.position()
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0 && self.removed == 0
    }

    /// Patch the counts; the datagram's length.
    pub fn finish(mut self) -> WireResult<usize> {
        self.w.patch_u16(9, self.records)?;
        if !self.full {
            self.w.patch_u16(11, self.removed)?;
        }
        Ok(self.w.position())
    }
}

/// Builds COALESCED_EVENTS (§5.3) in a caller's buffer.
#[derive(Debug)]
pub struct CoalescedWriter<'b> {
    w: Writer<'b, Le>,
    count: u8,
}

impl<'b> CoalescedWriter<'b> {
    pub fn new(buf: &'b mut [u8]) -> WireResult<Self> {
        let mut w = Writer::new(buf);
        w.u8(ty::COALESCED_EVENTS)?;
        w.u8(0)?;
        Ok(Self { w, count: 0 })
    }

    /// Add one event; on `Err` (full, or 255 already) nothing was written.
    pub fn push(&mut self, e: &EventBody<'_>) -> WireResult {
        let start = self.w.position();
        if self.count == u8::MAX {
            return Err(WireError::Overflow {
                what: "event_count",
                at: start,
                needed: 1,
                available: 0,
            });
        }
        e.write_typed(&mut self.w)
            .inspect_err(|_| self.w.rewind(start))?;
        self.count += 1;
        Ok(())
    }

    pub fn count(&self) -> u8 {
        self.count
    }

    pub fn finish(mut self) -> WireResult<usize> {
        // The count is the byte after the type: patch both as one little-endian u16.
        self.w
            .patch_u16(0, u16::from_le_bytes([ty::COALESCED_EVENTS, self.count]))?;
        Ok(self.w.position())
    }
}

/// Text as a fixed NUL-padded byte field (`client_id`, `message`): cut at the field's size.
pub fn fixed_text<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// A fixed NUL-padded byte field as text, up to its first NUL (lossy where not UTF-8).
pub fn text_of(b: &[u8]) -> &str {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    std::str::from_utf8(&b[..end]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_lengths_follow_the_mask() {
        assert_eq!(record_len(0), 7);
        assert_eq!(record_len(field::ALL), len::RECORD_FULL);
        assert_eq!(record_len(field::POS_X | field::POS_Z), 11);
        assert_eq!(record_len(field::ROT_Y | field::HEALTH), 9);
    }

    #[test]
    fn coalesced_roundtrip() {
        let mut buf = [0u8; 64];
        let mut c = CoalescedWriter::new(&mut buf).unwrap();
        c.push(&EventBody::Spawn {
            despawn: true,
            entity_id: 9,
            entity_type: entity::LOOT,
        })
        .unwrap();
        c.push(&EventBody::Other {
            event_type: event::SYSTEM,
            payload: b"hi",
        })
        .unwrap();
        let n = c.finish().unwrap();
        let Ok(Packet::Coalesced(p)) = decode(&buf[..n]) else {
            panic!("not coalesced");
        };
        assert_eq!(p.count, 2);
        assert_eq!(p.events().count(), 2);
    }
}
