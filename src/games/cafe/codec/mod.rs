//! The 0xCAFE wire format (`docs/protocols/cafe.md`): every byte rule of
//! the protocol lives in this file.
//!
//! Little-endian throughout. One message per datagram:
//!
//! ```text
//! header   magic u16 = 0xCAFE (bytes FE CA) · version u8 = 1 · type u8 · seq u32
//! Hello      (0) player_name [u8; 16], UTF-8, zero-padded
//! Welcome    (1) player_id u16 · tick_rate u16
//! Input      (2) player_id u16 · input_mask u16 · client_time_ms u32
//! Snapshot   (3) tick u32 · flags u8 (bit 0 = full) · paused u8
//!                [implementation dialect: last_input u32 · count u16]
//!                N × entity record (33 bytes) · stats trailer (14 bytes), to the datagram's end
//! Ping       (4) timestamp_ms u32, echoed unchanged
//! Disconnect (5) no body (absent from the implementation dialect)
//! ```
//!
//! Decisions where the spec is silent (also in README's protocol notes):
//! - Fixed-size messages must have exactly their size; a longer datagram is malformed, not
//!   padded (a load tool must notice a server that sends junk).
//! - Hello's name is taken up to its first NUL; bytes after it are ignored.
//! - Disconnect sent by a server in answer to Hello is its refusal (server full): the spec
//!   defines no Reject, and the reference server needs a defined one.
//! - Implementation dialect: Hello may carry `start_level u16, difficulty u8` after the name
//!   (19 bytes); both 16 and 19 are accepted, the extra fields ignored.
//! - Snapshots have no size cap: the records run to the datagram's end, whatever its length.
//!   The size checks are exact: `(body - fixed - 14) % 33 == 0`, and in the implementation
//!   dialect `count * 33` equals the records' bytes.
//! - A snapshot that fails its own dialect's size rule but fits the other dialect's exactly
//!   is reported as `snapshot.fits_implementation_dialect` (or `fits_spec_dialect`): the
//!   scenario names the wrong dialect, and the report says which one the server speaks. The
//!   two grids never overlap (a spec body is `20 + 33n`, an implementation body `26 + 33n`:
//!   6 bytes apart on a 33-byte grid).

pub mod inspect;

use thiserror::Error;

use crate::protocol::prelude::wire::{self, Le, WireError};

pub const MAGIC: u16 = 0xCAFE;
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 8;
pub const NAME_LEN: usize = 16;
pub const RECORD_LEN: usize = 33;
pub const STATS_LEN: usize = 14;
/// Snapshot body before the records: tick, flags, paused.
pub const SNAPSHOT_FIXED_LEN: usize = 6;
/// ...and in the implementation dialect: + last_input u32 + count u16.
pub const SNAPSHOT_FIXED_LEN_IMPL: usize = 12;
/// Implementation-dialect Hello extension: `start_level u16, difficulty u8`.
pub const HELLO_EXT_LEN: usize = 3;
/// Decode-error reason of a snapshot that fits the implementation dialect, not the spec one.
pub const FITS_IMPLEMENTATION: &str = "fits_implementation_dialect";
/// Decode-error reason of a snapshot that fits the spec dialect, not the implementation one.
pub const FITS_SPEC: &str = "fits_spec_dialect";

/// Which reading of the protocol to speak (docs/protocols/cafe.md, "Dialects").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// cafe.md as written.
    #[default]
    Spec,
    /// The implementation cafe.md documents: snapshots carry `last_input u32, count u16`
    /// after `paused`, there is no Disconnect, the server drops clients after 2 s of silence
    /// and listens on 4242.
    Implementation,
}

impl Dialect {
    pub fn has_disconnect(self) -> bool {
        self == Dialect::Spec
    }

    fn snapshot_fixed_len(self) -> usize {
        match self {
            Dialect::Spec => SNAPSHOT_FIXED_LEN,
            Dialect::Implementation => SNAPSHOT_FIXED_LEN_IMPL,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Spec => "spec",
            Dialect::Implementation => "implementation",
        }
    }

    fn other(self) -> Dialect {
        match self {
            Dialect::Spec => Dialect::Implementation,
            Dialect::Implementation => Dialect::Spec,
        }
    }
}

impl DecodeError {
    /// The dialect a snapshot that failed to decode fits instead, if any (see the module
    /// notes): the scenario speaks the wrong dialect to this server.
    pub fn dialect_hint(&self) -> Option<Dialect> {
        match (self.message, self.reason) {
            ("snapshot", FITS_IMPLEMENTATION) => Some(Dialect::Implementation),
            ("snapshot", FITS_SPEC) => Some(Dialect::Spec),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgType {
    Hello = 0,
    Welcome = 1,
    Input = 2,
    Snapshot = 3,
    Ping = 4,
    Disconnect = 5,
}

impl MsgType {
    pub fn name(self) -> &'static str {
        match self {
            MsgType::Hello => "hello",
            MsgType::Welcome => "welcome",
            MsgType::Input => "input",
            MsgType::Snapshot => "snapshot",
            MsgType::Ping => "ping",
            MsgType::Disconnect => "disconnect",
        }
    }

    fn from_u8(v: u8, dialect: Dialect) -> Option<Self> {
        Some(match v {
            0 => MsgType::Hello,
            1 => MsgType::Welcome,
            2 => MsgType::Input,
            3 => MsgType::Snapshot,
            4 => MsgType::Ping,
            5 if dialect.has_disconnect() => MsgType::Disconnect,
            _ => return None,
        })
    }
}

/// Why a datagram was dropped: `message` is the message type (or `header`), `reason` a short
/// stable name. Both are counted as `message.reason` in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("malformed cafe {message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

fn err(message: &'static str, reason: &'static str) -> DecodeError {
    DecodeError { message, reason }
}

/// One entity as the snapshot blob packs it (33 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EntityRecord {
    pub entity_id: u16,
    pub x: f32,
    pub y: f32,
    pub vx: f32,
    pub vy: f32,
    pub hp_cur: i16,
    pub hp_max: i16,
    pub sprite_id: u16,
    pub owner_id: u16,
    pub lives_cur: i16,
    pub lives_max: i16,
    pub is_spectating: u8,
    pub ultimate_frame: u8,
    pub ultimate_ready: u8,
}

/// The trailer after the records (14 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GameStats {
    pub score: u32,
    pub wave: u16,
    pub current_level: u16,
    pub kills_this_level: u16,
    pub kills_to_next: u16,
    pub total_kills: u16,
}

/// A decoded snapshot that borrows its records from the datagram (no allocation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot<'a> {
    pub tick: u32,
    pub flags: u8,
    pub paused: u8,
    /// Implementation dialect only.
    pub last_input: Option<u32>,
    records: &'a [u8],
    pub stats: GameStats,
}

impl<'a> Snapshot<'a> {
    pub fn is_full(&self) -> bool {
        self.flags & 1 != 0
    }

    pub fn record_count(&self) -> usize {
        self.records.len() / RECORD_LEN
    }

    pub fn records(&self) -> impl Iterator<Item = EntityRecord> + 'a {
        self.records.chunks_exact(RECORD_LEN).map(read_record)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Message<'a> {
    Hello {
        player_name: [u8; NAME_LEN],
    },
    Welcome {
        player_id: u16,
        tick_rate: u16,
    },
    Input {
        player_id: u16,
        input_mask: u16,
        client_time_ms: u32,
    },
    Snapshot(Snapshot<'a>),
    Ping {
        timestamp_ms: u32,
    },
    Disconnect,
}

impl Message<'_> {
    pub fn msg_type(&self) -> MsgType {
        match self {
            Message::Hello { .. } => MsgType::Hello,
            Message::Welcome { .. } => MsgType::Welcome,
            Message::Input { .. } => MsgType::Input,
            Message::Snapshot(_) => MsgType::Snapshot,
            Message::Ping { .. } => MsgType::Ping,
            Message::Disconnect => MsgType::Disconnect,
        }
    }
}

/// The readable part of a Hello name: bytes up to the first NUL.
pub fn name_str(name: &[u8; NAME_LEN]) -> std::borrow::Cow<'_, str> {
    let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
    String::from_utf8_lossy(&name[..end])
}

/// A Hello name from a string: truncated to 16 bytes on a character boundary, zero-padded.
pub fn make_name(s: &str) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    let mut end = s.len().min(NAME_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].copy_from_slice(&s.as_bytes()[..end]);
    out
}

/// Type of the wire reader and writer: cafe is little-endian throughout.
type Reader<'a> = wire::Reader<'a, Le>;
type Writer<'b> = wire::Writer<'b, Le>;

/// Reads of fields whose length was checked beforehand cannot fail; should one ever, it is
/// counted as the message's truncation rather than a panic.
fn short(message: &'static str) -> impl Fn(WireError) -> DecodeError {
    move |_| err(message, "truncated")
}

/// `r` is exactly RECORD_LEN bytes (from `chunks_exact`).
fn read_record(r: &[u8]) -> EntityRecord {
    let b: &[u8; RECORD_LEN] = match r.try_into() {
        Ok(b) => b,
        Err(_) => return EntityRecord::default(),
    };
    read_record_exact(b).unwrap_or_default()
}

/// A fixed-size array lets the compiler drop the per-field bounds checks on the hot path.
#[inline]
fn read_record_exact(b: &[u8; RECORD_LEN]) -> Result<EntityRecord, WireError> {
    let mut r = Reader::new(b);
    Ok(EntityRecord {
        entity_id: r.u16()?,
        x: r.f32()?,
        y: r.f32()?,
        vx: r.f32()?,
        vy: r.f32()?,
        hp_cur: r.i16()?,
        hp_max: r.i16()?,
        sprite_id: r.u16()?,
        owner_id: r.u16()?,
        lives_cur: r.i16()?,
        lives_max: r.i16()?,
        is_spectating: r.u8()?,
        ultimate_frame: r.u8()?,
        ultimate_ready: r.u8()?,
    })
}

/// Read the header only (type byte and seq), validating magic and version.
pub fn decode_header(buf: &[u8], dialect: Dialect) -> Result<(MsgType, u32), DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(err("header", "truncated"));
    }
    let mut r = Reader::new(buf);
    let short = short("header");
    if r.u16().map_err(&short)? != MAGIC {
        return Err(err("header", "bad_magic"));
    }
    if r.u8().map_err(&short)? != VERSION {
        return Err(err("header", "bad_version"));
    }
    let ty =
        MsgType::from_u8(r.u8().map_err(&short)?, dialect).ok_or(err("header", "unknown_type"))?;
    Ok((ty, r.u32().map_err(&short)?))
}

/// Decode one datagram. Returns the header's `seq` and the message.
pub fn decode(buf: &[u8], dialect: Dialect) -> Result<(u32, Message<'_>), DecodeError> {
    let (ty, seq) = decode_header(buf, dialect)?;
    let body = &buf[HEADER_LEN..];
    let exact = |n: usize| {
        if body.len() == n {
            Ok(())
        } else if body.len() < n {
            Err(err(ty.name(), "truncated"))
        } else {
            Err(err(ty.name(), "trailing_bytes"))
        }
    };
    let mut r = Reader::new(body);
    let short = short(ty.name());
    let msg = match ty {
        MsgType::Hello => {
            if !(dialect == Dialect::Implementation && body.len() == NAME_LEN + HELLO_EXT_LEN) {
                exact(NAME_LEN)?;
            }
            Message::Hello {
                player_name: r.array().map_err(&short)?,
            }
        }
        MsgType::Welcome => {
            exact(4)?;
            Message::Welcome {
                player_id: r.u16().map_err(&short)?,
                tick_rate: r.u16().map_err(&short)?,
            }
        }
        MsgType::Input => {
            exact(8)?;
            Message::Input {
                player_id: r.u16().map_err(&short)?,
                input_mask: r.u16().map_err(&short)?,
                client_time_ms: r.u32().map_err(&short)?,
            }
        }
        MsgType::Ping => {
            exact(4)?;
            Message::Ping {
                timestamp_ms: r.u32().map_err(&short)?,
            }
        }
        MsgType::Disconnect => {
            exact(0)?;
            Message::Disconnect
        }
        MsgType::Snapshot => Message::Snapshot(decode_snapshot(body, dialect)?),
    };
    Ok((seq, msg))
}

/// Whether a snapshot body has exactly the size `dialect` requires (with the implementation
/// dialect's `count` agreeing). Bounded: reads two bytes at most.
fn fits(body: &[u8], dialect: Dialect) -> bool {
    let fixed = dialect.snapshot_fixed_len();
    let Some(blob_len) = body.len().checked_sub(fixed + STATS_LEN) else {
        return false;
    };
    if blob_len % RECORD_LEN != 0 {
        return false;
    }
    match dialect {
        Dialect::Spec => true,
        Dialect::Implementation => body
            .get(SNAPSHOT_FIXED_LEN + 4..SNAPSHOT_FIXED_LEN_IMPL)
            .and_then(|c| <[u8; 2]>::try_from(c).ok())
            .is_some_and(|c| usize::from(u16::from_le_bytes(c)) * RECORD_LEN == blob_len),
    }
}

/// A snapshot that failed `dialect` with `reason`: named after the other dialect when it
/// fits that one exactly.
fn snapshot_err(body: &[u8], dialect: Dialect, reason: &'static str) -> DecodeError {
    if fits(body, dialect.other()) {
        match dialect.other() {
            Dialect::Implementation => err("snapshot", FITS_IMPLEMENTATION),
            Dialect::Spec => err("snapshot", FITS_SPEC),
        }
    } else {
        err("snapshot", reason)
    }
}

fn decode_snapshot(body: &[u8], dialect: Dialect) -> Result<Snapshot<'_>, DecodeError> {
    let fixed = dialect.snapshot_fixed_len();
    if body.len() < fixed + STATS_LEN {
        return Err(snapshot_err(body, dialect, "truncated"));
    }
    let blob_len = body.len() - fixed - STATS_LEN;
    if blob_len % RECORD_LEN != 0 {
        return Err(snapshot_err(body, dialect, "bad_blob_size"));
    }
    let short = short("snapshot");
    let mut r = Reader::new(body);
    let tick = r.u32().map_err(&short)?;
    let flags = r.u8().map_err(&short)?;
    let paused = r.u8().map_err(&short)?;
    let last_input = match dialect {
        Dialect::Spec => None,
        Dialect::Implementation => {
            let last_input = r.u32().map_err(&short)?;
            let count = usize::from(r.u16().map_err(&short)?);
            if count * RECORD_LEN != blob_len {
                return Err(snapshot_err(body, dialect, "count_mismatch"));
            }
            Some(last_input)
        }
    };
    let records = r.take(blob_len).map_err(&short)?;
    Ok(Snapshot {
        tick,
        flags,
        paused,
        last_input,
        records,
        stats: GameStats {
            score: r.u32().map_err(&short)?,
            wave: r.u16().map_err(&short)?,
            current_level: r.u16().map_err(&short)?,
            kills_this_level: r.u16().map_err(&short)?,
            kills_to_next: r.u16().map_err(&short)?,
            total_kills: r.u16().map_err(&short)?,
        },
    })
}

/// The buffer given to an encoder was too small for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("buffer too small for cafe message")]
pub struct BufferTooSmall;

impl From<WireError> for BufferTooSmall {
    fn from(_: WireError) -> Self {
        BufferTooSmall
    }
}

fn write_header(w: &mut Writer<'_>, ty: MsgType, seq: u32) -> Result<(), WireError> {
    w.u16(MAGIC)?;
    w.u8(VERSION)?;
    w.u8(ty as u8)?;
    w.u32(seq)
}

/// Encode a fixed-size message (anything but Snapshot, which has [`SnapshotEncoder`]).
/// Returns the datagram length.
pub fn encode(buf: &mut [u8], seq: u32, msg: &Message<'_>) -> Result<usize, BufferTooSmall> {
    let mut w = Writer::new(buf);
    write_header(&mut w, msg.msg_type(), seq)?;
    match msg {
        Message::Hello { player_name } => w.bytes(player_name)?,
        Message::Welcome {
            player_id,
            tick_rate,
        } => {
            w.u16(*player_id)?;
            w.u16(*tick_rate)?;
        }
        Message::Input {
            player_id,
            input_mask,
            client_time_ms,
        } => {
            w.u16(*player_id)?;
            w.u16(*input_mask)?;
            w.u32(*client_time_ms)?;
        }
        Message::Ping { timestamp_ms } => w.u32(*timestamp_ms)?,
        Message::Disconnect => {}
        Message::Snapshot(s) => {
            let mut e = SnapshotEncoder::begin_at(w, s.tick, s.flags, s.paused, s.last_input)?;
            for r in s.records() {
                e.record(&r)?;
            }
            return e.finish(&s.stats);
        }
    }
    Ok(w.position())
}

/// Builds a snapshot in place: header and fixed fields, then records one by one, then the
/// stats trailer. The record count of the implementation dialect is patched at `finish`.
pub struct SnapshotEncoder<'b> {
    w: Writer<'b>,
    count_at: Option<usize>,
    count: u16,
}

impl<'b> SnapshotEncoder<'b> {
    /// `last_input` is written (with a record count) only when given, i.e. in the
    /// implementation dialect.
    pub fn begin(
        buf: &'b mut [u8],
        seq: u32,
        tick: u32,
        full: bool,
        paused: bool,
        last_input: Option<u32>,
    ) -> Result<Self, BufferTooSmall> {
        let mut w = Writer::new(buf);
        write_header(&mut w, MsgType::Snapshot, seq)?;
        Self::begin_at(w, tick, u8::from(full), u8::from(paused), last_input)
    }

    fn begin_at(
        mut w: Writer<'b>,
        tick: u32,
        flags: u8,
        paused: u8,
        last_input: Option<u32>,
    ) -> Result<Self, BufferTooSmall> {
        w.u32(tick)?;
        w.u8(flags)?;
        w.u8(paused)?;
        let count_at = match last_input {
            Some(li) => {
                w.u32(li)?;
                let at = w.position();
                w.u16(0)?;
                Some(at)
            }
            None => None,
        };
        Ok(Self {
            w,
            count_at,
            count: 0,
        })
    }

    /// Room left for records, keeping space for the trailer.
    pub fn records_room(&self) -> usize {
        self.w.remaining().saturating_sub(STATS_LEN) / RECORD_LEN
    }

    pub fn record(&mut self, r: &EntityRecord) -> Result<(), BufferTooSmall> {
        if self.records_room() == 0 {
            return Err(BufferTooSmall);
        }
        let w = &mut self.w;
        w.u16(r.entity_id)?;
        w.f32(r.x)?;
        w.f32(r.y)?;
        w.f32(r.vx)?;
        w.f32(r.vy)?;
        w.i16(r.hp_cur)?;
        w.i16(r.hp_max)?;
        w.u16(r.sprite_id)?;
        w.u16(r.owner_id)?;
        w.i16(r.lives_cur)?;
        w.i16(r.lives_max)?;
        w.u8(r.is_spectating)?;
        w.u8(r.ultimate_frame)?;
        w.u8(r.ultimate_ready)?;
        self.count += 1;
        Ok(())
    }

    pub fn finish(mut self, s: &GameStats) -> Result<usize, BufferTooSmall> {
        self.w.u32(s.score)?;
        self.w.u16(s.wave)?;
        self.w.u16(s.current_level)?;
        self.w.u16(s.kills_this_level)?;
        self.w.u16(s.kills_to_next)?;
        self.w.u16(s.total_kills)?;
        if let Some(at) = self.count_at {
            self.w.patch_u16(at, self.count)?;
        }
        Ok(self.w.position())
    }
}

/// Overwrite the `seq` of an encoded datagram (the server encodes a room's snapshot once and
/// stamps each client's own sequence into its copy).
pub fn patch_seq(datagram: &mut [u8], seq: u32) {
    wire::patch_u32_at::<Le>(datagram, 4, seq);
}

/// Overwrite `last_input` of an encoded implementation-dialect snapshot.
pub fn patch_last_input(datagram: &mut [u8], last_input: u32) {
    wire::patch_u32_at::<Le>(datagram, HEADER_LEN + SNAPSHOT_FIXED_LEN, last_input);
}
