//! The 0xCAFE wire format (`shared/specs/cafe.md`, read with NOTES.md): every byte rule of
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

use thiserror::Error;

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

/// Which reading of the protocol to speak (NOTES.md lists the known variant).
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

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_bits(u32_at(b, at))
}

/// `r` is exactly RECORD_LEN bytes (from `chunks_exact`).
fn read_record(r: &[u8]) -> EntityRecord {
    EntityRecord {
        entity_id: u16_at(r, 0),
        x: f32_at(r, 2),
        y: f32_at(r, 6),
        vx: f32_at(r, 10),
        vy: f32_at(r, 14),
        hp_cur: i16_at(r, 18),
        hp_max: i16_at(r, 20),
        sprite_id: u16_at(r, 22),
        owner_id: u16_at(r, 24),
        lives_cur: i16_at(r, 26),
        lives_max: i16_at(r, 28),
        is_spectating: r[30],
        ultimate_frame: r[31],
        ultimate_ready: r[32],
    }
}

/// Read the header only (type byte and seq), validating magic and version.
pub fn decode_header(buf: &[u8], dialect: Dialect) -> Result<(MsgType, u32), DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(err("header", "truncated"));
    }
    if u16_at(buf, 0) != MAGIC {
        return Err(err("header", "bad_magic"));
    }
    if buf[2] != VERSION {
        return Err(err("header", "bad_version"));
    }
    let ty = MsgType::from_u8(buf[3], dialect).ok_or(err("header", "unknown_type"))?;
    Ok((ty, u32_at(buf, 4)))
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
    let msg = match ty {
        MsgType::Hello => {
            exact(NAME_LEN)?;
            let mut player_name = [0u8; NAME_LEN];
            player_name.copy_from_slice(body);
            Message::Hello { player_name }
        }
        MsgType::Welcome => {
            exact(4)?;
            Message::Welcome {
                player_id: u16_at(body, 0),
                tick_rate: u16_at(body, 2),
            }
        }
        MsgType::Input => {
            exact(8)?;
            Message::Input {
                player_id: u16_at(body, 0),
                input_mask: u16_at(body, 2),
                client_time_ms: u32_at(body, 4),
            }
        }
        MsgType::Ping => {
            exact(4)?;
            Message::Ping {
                timestamp_ms: u32_at(body, 0),
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

fn decode_snapshot(body: &[u8], dialect: Dialect) -> Result<Snapshot<'_>, DecodeError> {
    let fixed = dialect.snapshot_fixed_len();
    if body.len() < fixed + STATS_LEN {
        return Err(err("snapshot", "truncated"));
    }
    let blob_len = body.len() - fixed - STATS_LEN;
    if blob_len % RECORD_LEN != 0 {
        return Err(err("snapshot", "bad_blob_size"));
    }
    let last_input = match dialect {
        Dialect::Spec => None,
        Dialect::Implementation => {
            let count = usize::from(u16_at(body, 10));
            if count * RECORD_LEN != blob_len {
                return Err(err("snapshot", "count_mismatch"));
            }
            Some(u32_at(body, 6))
        }
    };
    let records = &body[fixed..fixed + blob_len];
    let s = &body[fixed + blob_len..];
    Ok(Snapshot {
        tick: u32_at(body, 0),
        flags: body[4],
        paused: body[5],
        last_input,
        records,
        stats: GameStats {
            score: u32_at(s, 0),
            wave: u16_at(s, 4),
            current_level: u16_at(s, 6),
            kills_this_level: u16_at(s, 8),
            kills_to_next: u16_at(s, 10),
            total_kills: u16_at(s, 12),
        },
    })
}

/// The buffer given to an encoder was too small for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("buffer too small for cafe message")]
pub struct BufferTooSmall;

/// A little-endian writer over a caller's buffer.
struct Writer<'b> {
    buf: &'b mut [u8],
    at: usize,
}

impl<'b> Writer<'b> {
    fn new(buf: &'b mut [u8]) -> Self {
        Self { buf, at: 0 }
    }
    fn bytes(&mut self, b: &[u8]) -> Result<(), BufferTooSmall> {
        let end = self.at + b.len();
        self.buf
            .get_mut(self.at..end)
            .ok_or(BufferTooSmall)?
            .copy_from_slice(b);
        self.at = end;
        Ok(())
    }
    fn u8(&mut self, v: u8) -> Result<(), BufferTooSmall> {
        self.bytes(&[v])
    }
    fn u16(&mut self, v: u16) -> Result<(), BufferTooSmall> {
        self.bytes(&v.to_le_bytes())
    }
    fn i16(&mut self, v: i16) -> Result<(), BufferTooSmall> {
        self.bytes(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> Result<(), BufferTooSmall> {
        self.bytes(&v.to_le_bytes())
    }
    fn f32(&mut self, v: f32) -> Result<(), BufferTooSmall> {
        self.u32(v.to_bits())
    }
    fn header(&mut self, ty: MsgType, seq: u32) -> Result<(), BufferTooSmall> {
        self.u16(MAGIC)?;
        self.u8(VERSION)?;
        self.u8(ty as u8)?;
        self.u32(seq)
    }
}

/// Encode a fixed-size message (anything but Snapshot, which has [`SnapshotEncoder`]).
/// Returns the datagram length.
pub fn encode(buf: &mut [u8], seq: u32, msg: &Message<'_>) -> Result<usize, BufferTooSmall> {
    let mut w = Writer::new(buf);
    w.header(msg.msg_type(), seq)?;
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
    Ok(w.at)
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
        w.header(MsgType::Snapshot, seq)?;
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
                let at = w.at;
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
        self.w.buf.len().saturating_sub(self.w.at + STATS_LEN) / RECORD_LEN
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
            self.w.buf[at..at + 2].copy_from_slice(&self.count.to_le_bytes());
        }
        Ok(self.w.at)
    }
}

/// Overwrite the `seq` of an encoded datagram (the server encodes a room's snapshot once and
/// stamps each client's own sequence into its copy).
pub fn patch_seq(datagram: &mut [u8], seq: u32) {
    if let Some(s) = datagram.get_mut(4..8) {
        s.copy_from_slice(&seq.to_le_bytes());
    }
}

/// Overwrite `last_input` of an encoded implementation-dialect snapshot.
pub fn patch_last_input(datagram: &mut [u8], last_input: u32) {
    let at = HEADER_LEN + SNAPSHOT_FIXED_LEN;
    if let Some(s) = datagram.get_mut(at..at + 4) {
        s.copy_from_slice(&last_input.to_le_bytes());
    }
}
