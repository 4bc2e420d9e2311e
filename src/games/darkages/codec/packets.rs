//! The packets, decoded (borrowing the datagram) and to encode, and their names.

use super::*;

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

    pub(super) fn payload_len(&self) -> usize {
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
    pub(super) fn write_typed(&self, w: &mut Writer<'_, Le>) -> WireResult {
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

    pub(super) fn write_payload(&self, w: &mut Writer<'_, Le>) -> WireResult {
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
    pub(super) fn parse<'p>(
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
    pub(super) entries: &'a [u8],
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

pub(super) fn read_coalesced_entry<'a>(
    r: &mut Reader<'a, Le>,
) -> Result<EventBody<'a>, DecodeError> {
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
    pub(super) records: &'a [u8],
    /// A delta's removed ids, 4 bytes each.
    pub(super) removed: &'a [u8],
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
    pub(super) r: Reader<'a, Le>,
    pub(super) left: usize,
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
