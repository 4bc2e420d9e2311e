//! The FullSnapshot payload: its sections written from a world, checked, and parsed back
//! (see the module docs, "FullSnapshot payload").

use super::*;

/// Snapshot metadata (the Metadata section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Metadata {
    pub tick: u64,
    pub tick_rate: u32,
    pub map_width: u32,
    pub map_height: u32,
    pub rng_state: u64,
}

/// A player record of the Players section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlayerInfo<'a> {
    pub slot: u8,
    pub connected: bool,
    pub name: &'a str,
}

/// What a parsed FullSnapshot held besides its entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FullInfo {
    pub meta: Metadata,
    pub players: usize,
    pub terrain_bytes: usize,
    pub grid_bytes: usize,
    /// Component records skipped (unknown type or version).
    pub skipped_components: u32,
    pub unknown_sections: u32,
}

/// Write a FullSnapshot payload into `out`; returns its length.
pub fn write_full(
    out: &mut [u8],
    meta: &Metadata,
    players: &[PlayerInfo<'_>],
    terrain: &[u8],
    land_value: &[u8],
    world: &World,
) -> Result<usize, EncodeError> {
    pub(super) const SECTIONS: usize = 6;
    let mut w = Writer::<Le>::new(out);
    w.u32(SECTIONS as u32)?;
    let table = w.position();
    for _ in 0..SECTIONS * 3 {
        w.u32(0)?;
    }
    let data_start = w.position();
    let mut spans = [(0u32, 0usize, 0usize); SECTIONS];

    let s = w.position();
    w.u64(meta.tick)?;
    w.u32(meta.tick_rate)?;
    w.u32(meta.map_width)?;
    w.u32(meta.map_height)?;
    w.u64(meta.rng_state)?;
    spans[0] = (SECTION_METADATA, s, w.position());

    let s = w.position();
    w.u8(u8::try_from(players.len()).map_err(|_| EncodeError::FieldTooLong)?)?;
    for p in players {
        w.u8(p.slot)?;
        w.u8(u8::from(p.connected))?;
        let name = p.name.as_bytes();
        let n = name.len().min(32);
        w.bytes(&name[..n])?;
        for _ in n..32 {
            w.u8(0)?;
        }
    }
    spans[1] = (SECTION_PLAYERS, s, w.position());

    let s = w.position();
    w.bytes(terrain)?;
    spans[2] = (SECTION_TERRAIN, s, w.position());

    let s = w.position();
    w.u32(world.len() as u32)?;
    for e in &world.entities {
        w.u32(e.id)?;
        w.u32(e.archetype)?;
        w.u8(2)?;
        w.u16(e.mask)?;
    }
    spans[3] = (SECTION_ENTITIES, s, w.position());

    let s = w.position();
    for e in &world.entities {
        for t in e.components() {
            let d = e.get(t).unwrap_or(&[]);
            w.u16(t)?;
            w.u16(COMPONENT_VERSION)?;
            w.u16(d.len() as u16)?;
            w.bytes(d)?;
        }
    }
    spans[4] = (SECTION_COMPONENTS, s, w.position());

    let s = w.position();
    w.bytes(land_value)?;
    spans[5] = (SECTION_DENSE_GRIDS, s, w.position());

    for (i, (ty, s, e)) in spans.iter().enumerate() {
        let at = table + i * 12;
        w.patch_u32(at, *ty)?;
        w.patch_u32(at + 4, (s - data_start) as u32)?;
        w.patch_u32(at + 8, (e - s) as u32)?;
    }
    Ok(w.position())
}

/// Why a FullSnapshot payload was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullError {
    /// What §5.1 defines is broken: the section count, the section table, or a section
    /// outside the data. A decode error.
    Malformed(&'static str),
    /// The section table is sound but the sections' contents, which the spec leaves open, are
    /// not in this build's layout (another implementation's choice). Not a decode error: the
    /// snapshot can still serve as an opaque baseline by its tick.
    Foreign(&'static str),
    /// The world would hold more entities than the bot tracks: refused, a decode error.
    TooLarge(&'static str),
}

/// Check §5.1's frame of a FullSnapshot payload (section count, 12-byte headers, every
/// section inside the data) without reading the sections; returns the section count.
pub fn check_sections(data: &[u8]) -> Result<usize, &'static str> {
    let mut r = Reader::<Le>::new(data);
    let count = r.u32()? as usize;
    if count > r.remaining() / 12 {
        return Err("section_count_mismatch");
    }
    let table = r.take(count * 12)?;
    let section_data = r.rest();
    for h in table.chunks_exact(12) {
        let mut hr = Reader::<Le>::new(h);
        let (_, off, len) = (hr.u32()?, hr.u32()? as usize, hr.u32()? as usize);
        section_data
            .get(off..off.checked_add(len).ok_or("section_out_of_bounds")?)
            .ok_or("section_out_of_bounds")?;
    }
    Ok(count)
}

/// Parse a FullSnapshot payload into `world` (replaced; its allocation reused) and `terrain`
/// (the Terrain section's bytes, replaced). The section table is checked first (§5.1:
/// [`FullError::Malformed`]); contents not in this build's layout are
/// [`FullError::Foreign`] (`world` is then left empty).
pub fn parse_full(
    data: &[u8],
    world: &mut World,
    terrain: &mut Vec<u8>,
) -> Result<FullInfo, FullError> {
    parse_full_within(data, world, terrain, usize::MAX)
}

/// [`parse_full`] holding at most `limit` entities: a snapshot with more is
/// [`FullError::TooLarge`].
pub fn parse_full_within(
    data: &[u8],
    world: &mut World,
    terrain: &mut Vec<u8>,
    limit: usize,
) -> Result<FullInfo, FullError> {
    check_sections(data).map_err(FullError::Malformed)?;
    parse_sections(data, world, terrain, limit).map_err(|e| {
        world.entities.clear();
        terrain.clear();
        if e == TOO_MANY_ENTITIES {
            FullError::TooLarge(e)
        } else {
            FullError::Foreign(e)
        }
    })
}

/// The contents of a FullSnapshot whose section table [`check_sections`] accepted.
pub(super) fn parse_sections(
    data: &[u8],
    world: &mut World,
    terrain: &mut Vec<u8>,
    limit: usize,
) -> Result<FullInfo, &'static str> {
    let mut r = Reader::<Le>::new(data);
    let count = r.u32()? as usize;
    let table = r.take(count * 12)?;
    let section_data = r.rest();
    let mut info = FullInfo::default();
    let mut meta = None;
    let mut entities = None;
    let mut components = None;
    let mut players = None;
    let mut terrain_s = None;
    let mut grid = None;
    for h in table.chunks_exact(12) {
        let mut hr = Reader::<Le>::new(h);
        let (ty, off, len) = (hr.u32()?, hr.u32()? as usize, hr.u32()? as usize);
        let s = section_data
            .get(off..off.checked_add(len).ok_or("section_out_of_bounds")?)
            .ok_or("section_out_of_bounds")?;
        let slot = match ty {
            SECTION_METADATA => &mut meta,
            SECTION_PLAYERS => &mut players,
            SECTION_TERRAIN => &mut terrain_s,
            SECTION_ENTITIES => &mut entities,
            SECTION_COMPONENTS => &mut components,
            SECTION_DENSE_GRIDS => &mut grid,
            _ => {
                info.unknown_sections += 1;
                continue;
            }
        };
        if slot.replace(s).is_some() {
            return Err("duplicate_section");
        }
    }
    let mut m = Reader::<Le>::new(meta.ok_or("missing_metadata")?);
    info.meta = Metadata {
        tick: m.u64()?,
        tick_rate: m.u32()?,
        map_width: m.u32()?,
        map_height: m.u32()?,
        rng_state: m.u64()?,
    };
    m.expect_end()?;
    let tiles = (info.meta.map_width as usize).saturating_mul(info.meta.map_height as usize);
    if let Some(p) = players {
        let mut pr = Reader::<Le>::new(p);
        let n = usize::from(pr.u8()?);
        if pr.remaining() != n * 34 {
            return Err("players_count_mismatch");
        }
        info.players = n;
    }
    terrain.clear();
    if let Some(t) = terrain_s {
        if t.len() != tiles {
            return Err("terrain_size_mismatch");
        }
        terrain.extend_from_slice(t);
        info.terrain_bytes = t.len();
    }
    if let Some(g) = grid {
        if g.len() != tiles {
            return Err("grid_size_mismatch");
        }
        info.grid_bytes = g.len();
    }
    let mut er = Reader::<Le>::new(entities.ok_or("missing_entities")?);
    let mut cr = Reader::<Le>::new(components.ok_or("missing_components")?);
    let n = er.u32()? as usize;
    // The smallest entity header is 9 bytes.
    if n > er.remaining() / 9 {
        return Err("entity_count_mismatch");
    }
    if n > limit {
        return Err(TOO_MANY_ENTITIES);
    }
    world.entities.clear();
    reserve_within(&mut world.entities, n, limit);
    world.tick = info.meta.tick;
    let mut last_id = None;
    for _ in 0..n {
        let id = er.u32()?;
        let archetype = er.u32()?;
        let mask_len = usize::from(er.u8()?);
        if mask_len == 0 || mask_len > 8 {
            return Err("bad_mask_len");
        }
        let mut mask_bytes = [0u8; 8];
        mask_bytes[..mask_len].copy_from_slice(er.take(mask_len)?);
        let mask = u64::from_le_bytes(mask_bytes);
        if last_id.is_some_and(|l| id <= l) {
            return Err("entities_not_sorted");
        }
        last_id = Some(id);
        let mut e = Entity::new(id, archetype);
        for bit in 0..64u16 {
            if mask & (1 << bit) == 0 {
                continue;
            }
            let t = bit + 1;
            let ty = cr.u16()?;
            let version = cr.u16()?;
            let len = usize::from(cr.u16()?);
            let d = cr.take(len)?;
            if ty != t {
                return Err("component_mask_mismatch");
            }
            if t > COMP_KNOWN || version != COMPONENT_VERSION {
                info.skipped_components += 1;
                continue;
            }
            if !e.set(t, d) {
                return Err("component_bad_length");
            }
        }
        world.entities.push(e);
    }
    er.expect_end()?;
    cr.expect_end()?;
    Ok(info)
}
