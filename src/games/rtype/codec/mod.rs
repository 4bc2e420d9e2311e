//! The R-Type wire format (`docs/protocols/rtype.md`): every byte rule of
//! the protocol lives in this file.
//!
//! Big-endian integers, packed structs, one packet per datagram, a 4-byte header on every
//! packet:
//!
//! ```text
//! header          type u8 · version u8 = 1 · size u16 (total datagram size, header included)
//! CONNECT     (1) clientId u32                               8 bytes
//! INPUT       (2) entity u32 · dx f32 · dy f32 · shooting u8 17 bytes
//! PING        (3) -                                           4 bytes
//! DISCONNECT  (4) -                                           4 bytes
//! ACCEPT     (10) -                                           4 bytes
//! REJECT     (11) -                                           4 bytes
//! PONG       (12) timestamp u32                               8 bytes
//! GAMEOVER   (13) -                                           4 bytes
//! ENTITY_CREATE  (20) id u32 · x f32 · y f32 · sprite u16    18 bytes
//! ENTITY_DESTROY (21) id u32                                  8 bytes
//! DAMAGE_EVENT   (22) id u32 · amount u16                    10 bytes
//! SNAPSHOT       (23) tick u32 · entityCount u16 ·           10 + 22 × entityCount bytes
//!                     entityCount × (id u32 · x f32 · y f32 · vx f32 · vy f32 · sprite u16)
//! ```
//!
//! Validation (§8, and the rules every protocol shares), in this order; each failure is a
//! [`DecodeError`] counted as `message.reason`:
//! 1. fewer than 4 bytes: `header.truncated`;
//! 2. `version != 1`: `header.bad_version`;
//! 3. a type outside the twelve: `header.unknown_type` (§8 says "ignore silently"; the shared
//!    rules say count it: it is ignored *and* counted);
//! 4. declared `size` above the bytes received: `<type>.truncated`; below: `<type>.oversized`
//!    (§8: "header.size != received_bytes: ignore packet");
//! 5. a fixed-size packet whose (consistent) size is not its struct's size: `<type>.bad_size`;
//!    a snapshot shorter than its 10 fixed bytes: `snapshot.bad_size`; a snapshot whose size is
//!    not `10 + 22 × entityCount`: `snapshot.count_mismatch`.
//!
//! Spec gaps and the reading taken here (README's protocol notes repeat them):
//! - **Header size** is the total datagram size including the 4-byte header (§2). §7's hex
//!   example declares `00 14` (20) for an 18-byte ENTITY_CREATE; the example is wrong, §8's
//!   rule is right, so an ENTITY_CREATE declares 18.
//! - **Float byte order**: §2 says "bitwise copied (no endian conversion)", §7 shows
//!   `42 C8 00 00` for 100.0 (big-endian), and the real implementation byte-swaps floats to
//!   network order. Default [`FloatOrder::Big`]; [`FloatOrder::Little`] is the native x86 copy.
//!   Integers are big-endian in both.
//! - **Fixed-size packets must have exactly their size**: a longer, self-consistent packet is
//!   malformed (`bad_size`), not padded; a load tool must notice a peer that sends junk.
//! - **`shooting`**: any non-zero byte means shooting (a C `if (shooting)`); the encoder
//!   writes 0 or 1.
//! - **Floats are not range-checked** by the codec (NaN and infinities decode as such); the
//!   reference server clamps input axes, see `server.rs`.
//! - **Snapshot `tick`** is big-endian like every integer.
//! - **Snapshot entity count** is bounded only by the u16 size field (at most 2978 entities in
//!   65535 bytes); the reference server caps what it sends to fit one 1400-byte datagram.
//!
//! Decoding never allocates: a [`Snapshot`] borrows its entity records from the datagram.
//! Encoders write into a caller's buffer.

use thiserror::Error;

pub mod inspect;

use crate::protocol::prelude::wire::{self, Be, Order, WireError};

pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 4;
/// `sizeof(SnapshotEntity)`.
pub const SNAPSHOT_ENTITY_LEN: usize = 22;
/// `sizeof(PacketSnapshot)`: header, tick, entityCount.
pub const SNAPSHOT_FIXED_LEN: usize = 10;

pub const CONNECT_LEN: usize = 8;
pub const INPUT_LEN: usize = 17;
pub const PING_LEN: usize = 4;
pub const DISCONNECT_LEN: usize = 4;
pub const ACCEPT_LEN: usize = 4;
pub const REJECT_LEN: usize = 4;
pub const PONG_LEN: usize = 8;
pub const GAMEOVER_LEN: usize = 4;
pub const ENTITY_CREATE_LEN: usize = 18;
pub const ENTITY_DESTROY_LEN: usize = 8;
pub const DAMAGE_LEN: usize = 10;

/// Size of a snapshot carrying `count` entities (§5.8's encoding rule).
pub const fn snapshot_len(count: usize) -> usize {
    SNAPSHOT_FIXED_LEN + SNAPSHOT_ENTITY_LEN * count
}

/// Byte order of `float` fields (integers are always big-endian): both readings exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FloatOrder {
    /// Network order, as §7's hex example and the real implementation (default).
    #[default]
    Big,
    /// Bitwise copy of the native x86 float, as §2's "no endian conversion" reads.
    Little,
}

impl FloatOrder {
    pub fn as_str(self) -> &'static str {
        match self {
            FloatOrder::Big => "big",
            FloatOrder::Little => "little",
        }
    }

    /// The same order as the wire module names it.
    fn order(self) -> Order {
        match self {
            FloatOrder::Big => Order::Big,
            FloatOrder::Little => Order::Little,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    Connect = 1,
    Input = 2,
    Ping = 3,
    Disconnect = 4,
    Accept = 10,
    Reject = 11,
    Pong = 12,
    GameOver = 13,
    EntityCreate = 20,
    EntityDestroy = 21,
    DamageEvent = 22,
    Snapshot = 23,
}

impl PacketType {
    pub const ALL: [PacketType; 12] = [
        PacketType::Connect,
        PacketType::Input,
        PacketType::Ping,
        PacketType::Disconnect,
        PacketType::Accept,
        PacketType::Reject,
        PacketType::Pong,
        PacketType::GameOver,
        PacketType::EntityCreate,
        PacketType::EntityDestroy,
        PacketType::DamageEvent,
        PacketType::Snapshot,
    ];

    /// Stable name used in counters (`message` of a [`DecodeError`]).
    pub fn name(self) -> &'static str {
        match self {
            PacketType::Connect => "connect",
            PacketType::Input => "input",
            PacketType::Ping => "ping",
            PacketType::Disconnect => "disconnect",
            PacketType::Accept => "accept",
            PacketType::Reject => "reject",
            PacketType::Pong => "pong",
            PacketType::GameOver => "gameover",
            PacketType::EntityCreate => "entity_create",
            PacketType::EntityDestroy => "entity_destroy",
            PacketType::DamageEvent => "damage_event",
            PacketType::Snapshot => "snapshot",
        }
    }

    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => PacketType::Connect,
            2 => PacketType::Input,
            3 => PacketType::Ping,
            4 => PacketType::Disconnect,
            10 => PacketType::Accept,
            11 => PacketType::Reject,
            12 => PacketType::Pong,
            13 => PacketType::GameOver,
            20 => PacketType::EntityCreate,
            21 => PacketType::EntityDestroy,
            22 => PacketType::DamageEvent,
            23 => PacketType::Snapshot,
            _ => return None,
        })
    }

    /// The struct size of a fixed-size packet; `None` for the variable SNAPSHOT.
    pub fn fixed_len(self) -> Option<usize> {
        Some(match self {
            PacketType::Connect => CONNECT_LEN,
            PacketType::Input => INPUT_LEN,
            PacketType::Ping => PING_LEN,
            PacketType::Disconnect => DISCONNECT_LEN,
            PacketType::Accept => ACCEPT_LEN,
            PacketType::Reject => REJECT_LEN,
            PacketType::Pong => PONG_LEN,
            PacketType::GameOver => GAMEOVER_LEN,
            PacketType::EntityCreate => ENTITY_CREATE_LEN,
            PacketType::EntityDestroy => ENTITY_DESTROY_LEN,
            PacketType::DamageEvent => DAMAGE_LEN,
            PacketType::Snapshot => return None,
        })
    }

    /// Client to server (CONNECT, INPUT, PING, DISCONNECT).
    pub fn is_client_to_server(self) -> bool {
        matches!(
            self,
            PacketType::Connect | PacketType::Input | PacketType::Ping | PacketType::Disconnect
        )
    }
}

/// Why a datagram was dropped: `message` is the packet type name (or `header`), `reason` a
/// short stable name. Both are counted as `message.reason` in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("malformed rtype {message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

fn err(message: &'static str, reason: &'static str) -> DecodeError {
    DecodeError { message, reason }
}

/// One `SnapshotEntity` (22 bytes on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SnapshotEntity {
    pub id: u32,
    pub x: f32,
    pub y: f32,
    pub vx: f32,
    pub vy: f32,
    pub sprite: u16,
}

/// A decoded SNAPSHOT that borrows its entity records from the datagram (no allocation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot<'a> {
    pub tick: u32,
    /// Exactly `entity_count × 22` bytes (validated).
    records: &'a [u8],
    float_order: FloatOrder,
}

impl<'a> Snapshot<'a> {
    pub fn entity_count(&self) -> usize {
        self.records.len() / SNAPSHOT_ENTITY_LEN
    }

    pub fn float_order(&self) -> FloatOrder {
        self.float_order
    }

    pub fn entities(&self) -> impl Iterator<Item = SnapshotEntity> + 'a {
        let order = self.float_order;
        self.records
            .chunks_exact(SNAPSHOT_ENTITY_LEN)
            .map(move |r| read_entity(r, order))
    }
}

/// Every packet of the protocol.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Packet<'a> {
    Connect {
        client_id: u32,
    },
    Input {
        entity: u32,
        dx: f32,
        dy: f32,
        shooting: bool,
    },
    Ping,
    Disconnect,
    Accept,
    Reject,
    Pong {
        timestamp: u32,
    },
    GameOver,
    EntityCreate {
        id: u32,
        x: f32,
        y: f32,
        sprite: u16,
    },
    EntityDestroy {
        id: u32,
    },
    Damage {
        id: u32,
        amount: u16,
    },
    Snapshot(Snapshot<'a>),
}

impl Packet<'_> {
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect { .. } => PacketType::Connect,
            Packet::Input { .. } => PacketType::Input,
            Packet::Ping => PacketType::Ping,
            Packet::Disconnect => PacketType::Disconnect,
            Packet::Accept => PacketType::Accept,
            Packet::Reject => PacketType::Reject,
            Packet::Pong { .. } => PacketType::Pong,
            Packet::GameOver => PacketType::GameOver,
            Packet::EntityCreate { .. } => PacketType::EntityCreate,
            Packet::EntityDestroy { .. } => PacketType::EntityDestroy,
            Packet::Damage { .. } => PacketType::DamageEvent,
            Packet::Snapshot(_) => PacketType::Snapshot,
        }
    }
}

/// R-Type's integers are big-endian; floats follow the runtime [`FloatOrder`].
type Reader<'a> = wire::Reader<'a, Be>;
type Writer<'b> = wire::Writer<'b, Be>;

/// Reads of fields whose length was checked beforehand cannot fail; should one ever, it is
/// counted as the packet's `bad_size` rather than a panic.
fn short(message: &'static str) -> impl Fn(WireError) -> DecodeError {
    move |_| err(message, "bad_size")
}

/// `r` is exactly SNAPSHOT_ENTITY_LEN bytes (from `chunks_exact`).
fn read_entity(r: &[u8], order: FloatOrder) -> SnapshotEntity {
    let b: &[u8; SNAPSHOT_ENTITY_LEN] = match r.try_into() {
        Ok(b) => b,
        Err(_) => return SnapshotEntity::default(),
    };
    read_entity_exact(b, order.order()).unwrap_or_default()
}

/// A fixed-size array lets the compiler drop the per-field bounds checks.
#[inline]
fn read_entity_exact(
    b: &[u8; SNAPSHOT_ENTITY_LEN],
    order: Order,
) -> Result<SnapshotEntity, WireError> {
    let mut r = Reader::new(b);
    Ok(SnapshotEntity {
        id: r.u32()?,
        x: r.f32_in(order)?,
        y: r.f32_in(order)?,
        vx: r.f32_in(order)?,
        vy: r.f32_in(order)?,
        sprite: r.u16()?,
    })
}

/// Validate the header against the datagram: steps 1–4 of the module docs. Returns the type.
pub fn decode_header(buf: &[u8]) -> Result<PacketType, DecodeError> {
    let mut r = Reader::new(buf);
    let (Ok(type_byte), Ok(version), Ok(size)) = (r.u8(), r.u8(), r.u16()) else {
        return Err(err("header", "truncated"));
    };
    if version != VERSION {
        return Err(err("header", "bad_version"));
    }
    let ty = PacketType::from_u8(type_byte).ok_or(err("header", "unknown_type"))?;
    let declared = usize::from(size);
    if declared > buf.len() {
        return Err(err(ty.name(), "truncated"));
    }
    if declared < buf.len() {
        return Err(err(ty.name(), "oversized"));
    }
    Ok(ty)
}

/// Decode one datagram (all of it: the header's size must equal `buf.len()`).
pub fn decode(buf: &[u8], float_order: FloatOrder) -> Result<Packet<'_>, DecodeError> {
    let ty = decode_header(buf)?;
    if let Some(n) = ty.fixed_len() {
        if buf.len() != n {
            return Err(err(ty.name(), "bad_size"));
        }
    }
    let order = float_order.order();
    let short = short(ty.name());
    let mut r = Reader::new(buf);
    r.skip(HEADER_LEN).map_err(&short)?;
    Ok(match ty {
        PacketType::Connect => Packet::Connect {
            client_id: r.u32().map_err(&short)?,
        },
        PacketType::Input => Packet::Input {
            entity: r.u32().map_err(&short)?,
            dx: r.f32_in(order).map_err(&short)?,
            dy: r.f32_in(order).map_err(&short)?,
            shooting: r.u8().map_err(&short)? != 0,
        },
        PacketType::Ping => Packet::Ping,
        PacketType::Disconnect => Packet::Disconnect,
        PacketType::Accept => Packet::Accept,
        PacketType::Reject => Packet::Reject,
        PacketType::Pong => Packet::Pong {
            timestamp: r.u32().map_err(&short)?,
        },
        PacketType::GameOver => Packet::GameOver,
        PacketType::EntityCreate => Packet::EntityCreate {
            id: r.u32().map_err(&short)?,
            x: r.f32_in(order).map_err(&short)?,
            y: r.f32_in(order).map_err(&short)?,
            sprite: r.u16().map_err(&short)?,
        },
        PacketType::EntityDestroy => Packet::EntityDestroy {
            id: r.u32().map_err(&short)?,
        },
        PacketType::DamageEvent => Packet::Damage {
            id: r.u32().map_err(&short)?,
            amount: r.u16().map_err(&short)?,
        },
        PacketType::Snapshot => {
            if buf.len() < SNAPSHOT_FIXED_LEN {
                return Err(err("snapshot", "bad_size"));
            }
            let tick = r.u32().map_err(&short)?;
            let count = usize::from(r.u16().map_err(&short)?);
            if buf.len() != snapshot_len(count) {
                return Err(err("snapshot", "count_mismatch"));
            }
            Packet::Snapshot(Snapshot {
                tick,
                records: r.rest(),
                float_order,
            })
        }
    })
}

/// The buffer given to an encoder was too small for the packet (or a snapshot would exceed
/// the 65535 bytes the size field can state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("buffer too small for rtype packet")]
pub struct BufferTooSmall;

impl From<WireError> for BufferTooSmall {
    fn from(_: WireError) -> Self {
        BufferTooSmall
    }
}

/// Header with a placeholder size, patched by [`finish`].
fn write_header(w: &mut Writer<'_>, ty: PacketType) -> Result<(), WireError> {
    w.u8(ty as u8)?;
    w.u8(VERSION)?;
    w.u16(0)
}

/// Patch the header's size with the bytes written; returns the datagram length.
fn finish(mut w: Writer<'_>) -> Result<usize, BufferTooSmall> {
    let size = u16::try_from(w.position()).map_err(|_| BufferTooSmall)?;
    w.patch_u16(2, size)?;
    Ok(w.position())
}

fn write_entity(w: &mut Writer<'_>, e: &SnapshotEntity, order: Order) -> Result<(), WireError> {
    w.u32(e.id)?;
    w.f32_in(order, e.x)?;
    w.f32_in(order, e.y)?;
    w.f32_in(order, e.vx)?;
    w.f32_in(order, e.vy)?;
    w.u16(e.sprite)
}

/// Encode a packet into `buf`; returns the datagram length. Snapshots can also be built in
/// place entity by entity with [`SnapshotEncoder`].
pub fn encode(
    buf: &mut [u8],
    packet: &Packet<'_>,
    float_order: FloatOrder,
) -> Result<usize, BufferTooSmall> {
    let order = float_order.order();
    let mut w = Writer::new(buf);
    write_header(&mut w, packet.packet_type())?;
    match *packet {
        Packet::Connect { client_id } => w.u32(client_id)?,
        Packet::Input {
            entity,
            dx,
            dy,
            shooting,
        } => {
            w.u32(entity)?;
            w.f32_in(order, dx)?;
            w.f32_in(order, dy)?;
            w.u8(u8::from(shooting))?;
        }
        Packet::Ping | Packet::Disconnect | Packet::Accept | Packet::Reject | Packet::GameOver => {}
        Packet::Pong { timestamp } => w.u32(timestamp)?,
        Packet::EntityCreate { id, x, y, sprite } => {
            w.u32(id)?;
            w.f32_in(order, x)?;
            w.f32_in(order, y)?;
            w.u16(sprite)?;
        }
        Packet::EntityDestroy { id } => w.u32(id)?,
        Packet::Damage { id, amount } => {
            w.u32(id)?;
            w.u16(amount)?;
        }
        Packet::Snapshot(s) => {
            let count = u16::try_from(s.entity_count()).map_err(|_| BufferTooSmall)?;
            w.u32(s.tick)?;
            w.u16(count)?;
            for e in s.entities() {
                write_entity(&mut w, &e, order)?;
            }
        }
    }
    finish(w)
}

/// Builds a SNAPSHOT in place: header and tick, then entities one by one; `finish` patches
/// `entityCount` and `size`. The buffer's length is the datagram cap: hand it a 1400-byte
/// slice to stay within one unfragmented datagram.
pub struct SnapshotEncoder<'b> {
    w: Writer<'b>,
    order: Order,
    count: u16,
}

impl<'b> SnapshotEncoder<'b> {
    pub fn begin(
        buf: &'b mut [u8],
        tick: u32,
        float_order: FloatOrder,
    ) -> Result<Self, BufferTooSmall> {
        let mut w = Writer::new(buf);
        write_header(&mut w, PacketType::Snapshot)?;
        w.u32(tick)?;
        w.u16(0)?;
        Ok(Self {
            w,
            order: float_order.order(),
            count: 0,
        })
    }

    /// How many more entities fit (in the buffer and under the u16 size field).
    pub fn room(&self) -> usize {
        let cap = self.w.capacity().min(usize::from(u16::MAX));
        cap.saturating_sub(self.w.position()) / SNAPSHOT_ENTITY_LEN
    }

    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    pub fn entity(&mut self, e: &SnapshotEntity) -> Result<(), BufferTooSmall> {
        if self.room() == 0 {
            return Err(BufferTooSmall);
        }
        write_entity(&mut self.w, e, self.order)?;
        self.count += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Result<usize, BufferTooSmall> {
        self.w.patch_u16(8, self.count)?;
        finish(self.w)
    }
}

/// Greatest number of entities a snapshot of at most `datagram_len` bytes carries.
pub const fn max_snapshot_entities(datagram_len: usize) -> usize {
    if datagram_len < SNAPSHOT_FIXED_LEN {
        0
    } else {
        (datagram_len - SNAPSHOT_FIXED_LEN) / SNAPSHOT_ENTITY_LEN
    }
}
