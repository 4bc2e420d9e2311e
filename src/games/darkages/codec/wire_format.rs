//! Reading and writing whole datagrams: [`decode`], [`encode`], and the writers that build a
//! snapshot or a coalesced event packet in place.

use super::*;

pub(super) fn fixed(message: &'static str, data: &[u8], size: usize) -> Result<(), DecodeError> {
    if data.len() == size {
        Ok(())
    } else {
        Err(DecodeError::new(message, "bad_size"))
    }
}

pub(super) fn read_handoff(r: &mut Reader<'_, Le>) -> WireResult<ZoneHandoff> {
    Ok(ZoneHandoff {
        new_zone_id: r.u32()?,
        new_server_address: r.array()?,
        new_server_port: r.u16()?,
        handoff_token: r.array()?,
        handoff_timeout_ms: r.u32()?,
    })
}

pub(super) fn write_handoff(w: &mut Writer<'_, Le>, z: &ZoneHandoff) -> WireResult {
    w.u32(z.new_zone_id)?;
    w.bytes(&z.new_server_address)?;
    w.u16(z.new_server_port)?;
    w.bytes(&z.handoff_token)?;
    w.u32(z.handoff_timeout_ms)
}

/// A `u16`-length-prefixed UTF-8 string running exactly to the end.
pub(super) fn read_text<'a>(
    message: &'static str,
    r: &mut Reader<'a, Le>,
) -> Result<&'a str, DecodeError> {
    let e = wire(message);
    let n = r.u16().map_err(&e)?;
    let b = r.take(usize::from(n)).map_err(&e)?;
    r.expect_end().map_err(&e)?;
    std::str::from_utf8(b).map_err(|_| DecodeError::new(message, "bad_utf8"))
}

pub(super) fn write_text(w: &mut Writer<'_, Le>, s: &str) -> WireResult {
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

pub(super) fn decode_snapshot<'a>(r: &mut Reader<'a, Le>) -> Result<Snapshot<'a>, DecodeError> {
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
    pub(super) w: Writer<'b, Le>,
    pub(super) full: bool,
    pub(super) records: u16,
    pub(super) removed: u16,
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
    pub(super) w: Writer<'b, Le>,
    pub(super) count: u8,
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
