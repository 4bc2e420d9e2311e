//! Entity state: one entity as the wire carries it, the delta mask against a baseline, and
//! the records that carry it.

use super::*;

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
pub(super) fn skip_records(r: &mut Reader<'_, Le>, count: usize) -> Result<(), DecodeError> {
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
