//! ZergCity's replicated state: entities and their components (§7), the FullSnapshot section
//! payload (§5.1) and the DeltaSnapshot payload (§5.2). The bot and the reference server share
//! this module, so what one writes the other reads with the same rules.
//!
//! # Components (§7.3; type ids from §7.2, layouts of 4-9 defined here; all version 1)
//! ```text
//! 1 Position   (12) grid_x i32 · grid_y i32 · elevation i32
//! 2 Ownership  (12) owner_id u8 (0 Game Master, else slot + 1) · state u8 · padding u16
//!                   · state_changed_at u64
//! 3 Building   (16) building_type u32 · state u8 · level u8 (1-3) · padding u16
//!                   · construction_tick u32 · population u32
//! 4 Zone        (8) zone_type u8 · density u8 · width u8 · height u8 · development u16
//!                   · padding u16
//! 5 Energy      (8) demand u32 · supplied u32
//! 6 Fluid       (8) demand u32 · supplied u32
//! 7 Transport   (4) kind u8 (6 road, 7 conduit, 8 pipe) · padding u8 · traffic u16
//! 8 Population  (8) residents u32 · jobs u32
//! 9 Treasury   (16) funds i64 · tribute_rate u8 · padding [3] · population u32
//! ```
//! An entity's component mask (§7.1) is `mask_len` bytes, little-endian: bit `t - 1` set
//! means component type `t` is present. The reference server writes `mask_len = 2`.
//!
//! # Archetypes (the reference server's)
//! 1 Player (Ownership, Treasury) · 2 Building (Position, Ownership, Building, Energy,
//! Population) · 3 Zone lot (Position, Ownership, Zone, Population) · 4 Road, 5 Conduit,
//! 6 Pipe (Position, Ownership, Transport; conduits add Energy, pipes Fluid) · 7 Parcel, a
//! purchased tile (Position, Ownership).
//!
//! # FullSnapshot payload (decompressed)
//! `section_count u32 · section_count × (section_type u32 · offset u32 · length u32) ·
//! section_data`; `offset` is from the start of section_data. Sections:
//! ```text
//! 1 Metadata   (28) tick u64 · tick_rate u32 · map_width u32 · map_height u32 · rng_state u64
//! 2 Players         count u8 · count × (slot u8 · connected u8 · name [32])
//! 3 Terrain         map_width × map_height bytes, row-major (0 land, 1 water, 2 hill)
//! 4 Entities        count u32 · count × §7.1 header (entity_id u32 · archetype_id u32
//!                   · mask_len u8 · mask [mask_len])
//! 5 Components      for each entity in Entities order, for each mask bit ascending, a §7.2
//!                   record: type_id u16 · version u16 · data_length u16 · data
//! 6 DenseGrids      map_width × map_height bytes: land value per tile
//! ```
//! §5.1 defines only the frame (count, 12-byte headers, offsets into section_data): a broken
//! frame is [`FullError::Malformed`]; contents not in this layout (another implementation's
//! choice where the spec is silent) are [`FullError::Foreign`], which the bot keeps as an
//! opaque baseline by tick.
//!
//! Metadata, Entities and Components are required; Terrain and DenseGrids, when present,
//! must be exactly one byte per tile; unknown section types are skipped. A component record
//! whose type the bot does not know, or whose version is not 1, is skipped by its
//! `data_length` (§9.2's forward compatibility); a known type at version 1 must have its
//! layout's length.
//!
//! # DeltaSnapshot payload (§5.2)
//! Entity updates (`entity_id u32 · operation u8 · archetype_id u32 if created`), then
//! component updates (`entity_id u32 · component_type_id u16 · operation u8 · data_length u16
//! · data unless removed`), exactly `entity_count` and `component_count` of them and nothing
//! after. The reference server writes `created` and `destroyed` entity operations (a created
//! entity's components follow as `added`); a changed component is `modified` with its whole
//! layout. A delta is applied to a copy of its baseline and only committed when every update
//! applied.

use crate::protocol::prelude::wire::{Le, Reader, WireError, Writer};

use super::codec::EncodeError;

pub const COMP_POSITION: u16 = 1;
pub const COMP_OWNERSHIP: u16 = 2;
pub const COMP_BUILDING: u16 = 3;
pub const COMP_ZONE: u16 = 4;
pub const COMP_ENERGY: u16 = 5;
pub const COMP_FLUID: u16 = 6;
pub const COMP_TRANSPORT: u16 = 7;
pub const COMP_POPULATION: u16 = 8;
pub const COMP_TREASURY: u16 = 9;
/// Highest component type this build knows.
pub const COMP_KNOWN: u16 = 9;
pub const COMPONENT_VERSION: u16 = 1;

pub const ARCH_PLAYER: u32 = 1;
pub const ARCH_BUILDING: u32 = 2;
pub const ARCH_ZONE: u32 = 3;
pub const ARCH_ROAD: u32 = 4;
pub const ARCH_CONDUIT: u32 = 5;
pub const ARCH_PIPE: u32 = 6;
pub const ARCH_PARCEL: u32 = 7;

pub const SECTION_METADATA: u32 = 1;
pub const SECTION_PLAYERS: u32 = 2;
pub const SECTION_TERRAIN: u32 = 3;
pub const SECTION_ENTITIES: u32 = 4;
pub const SECTION_COMPONENTS: u32 = 5;
pub const SECTION_DENSE_GRIDS: u32 = 6;

pub const OP_CREATED: u8 = 0;
pub const OP_DESTROYED: u8 = 1;
pub const OP_MODIFIED: u8 = 2;
pub const OP_ADDED: u8 = 0;
pub const OP_REMOVED: u8 = 1;

/// (offset, size) of each known component's data inside [`Entity::data`], by type id − 1.
const LAYOUT: [(usize, usize); COMP_KNOWN as usize] = [
    (0, 12),
    (12, 12),
    (24, 16),
    (40, 8),
    (48, 8),
    (56, 8),
    (64, 4),
    (68, 8),
    (76, 16),
];
const DATA_LEN: usize = 92;

/// The data size of a known component type (version 1).
pub fn component_size(type_id: u16) -> Option<usize> {
    let i = usize::from(type_id).checked_sub(1)?;
    LAYOUT.get(i).map(|&(_, n)| n)
}

/// One entity with the known components it has. Fixed size, so a world is one flat vector
/// that can be copied into a reused one without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entity {
    pub id: u32,
    pub archetype: u32,
    /// Bit `t - 1`: component type `t` present.
    pub mask: u16,
    data: [u8; DATA_LEN],
}

impl Entity {
    pub fn new(id: u32, archetype: u32) -> Self {
        Self {
            id,
            archetype,
            mask: 0,
            data: [0; DATA_LEN],
        }
    }

    pub fn has(&self, t: u16) -> bool {
        (1..=COMP_KNOWN).contains(&t) && self.mask & (1 << (t - 1)) != 0
    }

    /// The component's bytes, if present.
    pub fn get(&self, t: u16) -> Option<&[u8]> {
        if !self.has(t) {
            return None;
        }
        let (o, n) = LAYOUT[usize::from(t - 1)];
        Some(&self.data[o..o + n])
    }

    /// Set a known component; `false` for an unknown type or a wrong length.
    pub fn set(&mut self, t: u16, bytes: &[u8]) -> bool {
        match component_size(t) {
            Some(n) if n == bytes.len() => {
                let (o, _) = LAYOUT[usize::from(t - 1)];
                self.data[o..o + n].copy_from_slice(bytes);
                self.mask |= 1 << (t - 1);
                true
            }
            _ => false,
        }
    }

    pub fn remove(&mut self, t: u16) {
        if (1..=COMP_KNOWN).contains(&t) {
            self.mask &= !(1 << (t - 1));
            let (o, n) = LAYOUT[usize::from(t - 1)];
            self.data[o..o + n].fill(0);
        }
    }

    /// Present component types, ascending.
    pub fn components(&self) -> impl Iterator<Item = u16> + '_ {
        (1..=COMP_KNOWN).filter(|&t| self.has(t))
    }

    // Typed views the bot and server use.

    /// Position `(x, y)`.
    pub fn position(&self) -> Option<(i32, i32)> {
        let b = self.get(COMP_POSITION)?;
        let mut r = Reader::<Le>::new(b);
        Some((r.i32().ok()?, r.i32().ok()?))
    }

    /// Ownership's `owner_id` (0 Game Master, else slot + 1).
    pub fn owner(&self) -> Option<u8> {
        self.get(COMP_OWNERSHIP).map(|b| b[0])
    }

    /// Population's residents (or Treasury's population for a player).
    pub fn population(&self) -> Option<u32> {
        let b = self
            .get(COMP_POPULATION)
            .or_else(|| self.get(COMP_TREASURY).map(|b| &b[12..16]))?;
        let mut r = Reader::<Le>::new(b);
        r.u32().ok()
    }

    /// Treasury's funds.
    pub fn funds(&self) -> Option<i64> {
        let b = self.get(COMP_TREASURY)?;
        Reader::<Le>::new(b).i64().ok()
    }
}

/// Entities sorted by id, at one tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct World {
    pub tick: u64,
    pub entities: Vec<Entity>,
}

impl World {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            tick: 0,
            entities: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.entities.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    fn find(&self, id: u32) -> Result<usize, usize> {
        self.entities.binary_search_by_key(&id, |e| e.id)
    }

    pub fn get(&self, id: u32) -> Option<&Entity> {
        self.find(id).ok().map(|i| &self.entities[i])
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Entity> {
        self.find(id).ok().map(|i| &mut self.entities[i])
    }

    /// Insert a new entity; `false` when its id exists.
    pub fn insert(&mut self, e: Entity) -> bool {
        match self.find(e.id) {
            Ok(_) => false,
            Err(i) => {
                self.entities.insert(i, e);
                true
            }
        }
    }

    pub fn remove(&mut self, id: u32) -> bool {
        match self.find(id) {
            Ok(i) => {
                self.entities.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Become a copy of `o`, reusing this world's allocation.
    pub fn copy_from(&mut self, o: &World) {
        self.tick = o.tick;
        self.entities.clear();
        self.entities.extend_from_slice(&o.entities);
    }
}

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
    const SECTIONS: usize = 6;
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
fn parse_sections(
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

/// Why a delta could not be applied.
pub type DeltaError = &'static str;

/// The reason a snapshot whose world would hold more than its entity limit is refused.
pub const TOO_MANY_ENTITIES: &str = "too_many_entities";

/// Room in `v` (cleared) for `n` entities: a quarter more than needed, so a world that grows
/// slowly reallocates rarely, but never room for more than `limit`, so a vector's capacity
/// (what a bot's budget counts) stays within one world's limit.
pub fn reserve_within(v: &mut Vec<Entity>, n: usize, limit: usize) {
    let n = n.min(limit);
    if v.capacity() < n {
        v.reserve_exact(n.saturating_add(n / 4).min(limit) - v.len());
    }
}

/// An entity operation of a delta: `(entity_id, wire order, operation, archetype)`.
type EntityOp = (u32, u32, u8, u32);

/// Applies DeltaSnapshot payloads. Its scratch (the entity operations sorted by id) is reused,
/// so applying allocates nothing once it has grown.
///
/// The new world is merged from the baseline in one pass: the entity operations are sorted
/// by id (`k log k`), runs of baseline entities between two named ids are copied in bulk
/// (found by binary search), and component updates find their entity by binary search: a
/// delta costs `O((k + c) log n)` plus one copy of the baseline whatever its ids, never an
/// insert into the middle of the world, whose cost grows with the entities held.
#[derive(Debug, Default)]
pub struct DeltaApplier {
    ops: Vec<EntityOp>,
}

impl DeltaApplier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes the scratch holds (by capacity).
    pub fn held_bytes(&self) -> usize {
        self.ops.capacity() * std::mem::size_of::<EntityOp>()
    }

    /// Free the scratch if it holds more than `bytes`.
    pub fn shrink_over(&mut self, bytes: usize) {
        if self.held_bytes() > bytes {
            self.ops = Vec::new();
        }
    }

    /// Build into `out` (replaced; its allocation reused) `base` with a DeltaSnapshot
    /// payload applied, at most `limit` entities ([`TOO_MANY_ENTITIES`] beyond). On error
    /// `out` is half-built: the caller discards it. Operations on one entity apply in wire
    /// order; on different entities they are independent, so the result is the one applying
    /// them all in wire order gives.
    pub fn apply(
        &mut self,
        base: &World,
        out: &mut World,
        d: (u16, u16, &[u8]),
        limit: usize,
        skipped: &mut u32,
    ) -> Result<(), DeltaError> {
        let (entity_count, component_count, payload) = d;
        let mut r = Reader::<Le>::new(payload);
        self.ops.clear();
        for seq in 0..u32::from(entity_count) {
            let id = r.u32()?;
            let op = r.u8()?;
            let archetype = match op {
                OP_CREATED => r.u32()?,
                OP_DESTROYED | OP_MODIFIED => 0,
                _ => return Err("bad_operation"),
            };
            self.ops.push((id, seq, op, archetype));
        }
        self.ops.sort_unstable_by_key(|o| (o.0, o.1));
        out.tick = base.tick;
        out.entities.clear();
        let base = &base.entities;
        reserve_within(&mut out.entities, base.len() + self.ops.len(), limit);
        let ents = &mut out.entities;
        let (mut b, mut u) = (0usize, 0usize);
        while let Some(&(next, ..)) = self.ops.get(u) {
            let run = base[b..].partition_point(|e| e.id < next);
            if ents.len() + run > limit {
                return Err(TOO_MANY_ENTITIES);
            }
            ents.extend_from_slice(&base[b..b + run]);
            b += run;
            let mut e = match base.get(b) {
                Some(e) if e.id == next => {
                    b += 1;
                    Some(*e)
                }
                _ => None,
            };
            while let Some(&(_, _, op, archetype)) = self.ops.get(u).filter(|o| o.0 == next) {
                match (op, e.is_some()) {
                    (OP_CREATED, false) => e = Some(Entity::new(next, archetype)),
                    (OP_CREATED, true) => return Err("entity_exists"),
                    (OP_DESTROYED, true) => e = None,
                    (_, false) => return Err("unknown_entity"),
                    _ => {}
                }
                u += 1;
            }
            if let Some(e) = e {
                if ents.len() >= limit {
                    return Err(TOO_MANY_ENTITIES);
                }
                ents.push(e);
            }
        }
        let rest = &base[b..];
        if ents.len() + rest.len() > limit {
            return Err(TOO_MANY_ENTITIES);
        }
        ents.extend_from_slice(rest);
        for _ in 0..component_count {
            let id = r.u32()?;
            let t = r.u16()?;
            let op = r.u8()?;
            let e = out.get_mut(id).ok_or("unknown_entity")?;
            match op {
                OP_REMOVED => e.remove(t),
                OP_ADDED | OP_MODIFIED => {
                    let len = usize::from(r.u16()?);
                    let d = r.take(len)?;
                    if t == 0 || t > COMP_KNOWN {
                        *skipped += 1;
                    } else if !e.set(t, d) {
                        return Err("component_bad_length");
                    }
                }
                _ => return Err("bad_operation"),
            }
        }
        r.expect_end().map_err(|e: WireError| e.reason())
    }
}

/// Apply a DeltaSnapshot payload to `world` (a copy of the baseline), with no entity limit
/// and fresh scratch (tests). On error the world is half-changed: the caller discards it.
pub fn apply_delta(
    world: &mut World,
    entity_count: u16,
    component_count: u16,
    payload: &[u8],
    skipped: &mut u32,
) -> Result<(), DeltaError> {
    let base = std::mem::take(world);
    DeltaApplier::new().apply(
        &base,
        world,
        (entity_count, component_count, payload),
        usize::MAX,
        skipped,
    )
}

/// Check a DeltaSnapshot payload against §5.2 alone (operations, lengths, exact counts)
/// without a world: for deltas onto an opaque baseline, whose contents are not held.
pub fn check_delta(
    entity_count: u16,
    component_count: u16,
    payload: &[u8],
) -> Result<(), DeltaError> {
    let mut r = Reader::<Le>::new(payload);
    for _ in 0..entity_count {
        r.u32()?;
        match r.u8()? {
            OP_CREATED => {
                r.u32()?;
            }
            OP_DESTROYED | OP_MODIFIED => {}
            _ => return Err("bad_operation"),
        }
    }
    for _ in 0..component_count {
        r.u32()?;
        r.u16()?;
        match r.u8()? {
            OP_REMOVED => {}
            OP_ADDED | OP_MODIFIED => {
                let len = usize::from(r.u16()?);
                r.take(len)?;
            }
            _ => return Err("bad_operation"),
        }
    }
    r.expect_end().map_err(|e: WireError| e.reason())
}

/// Write the DeltaSnapshot payload that turns `base` into `target`; returns
/// `(entity_count, component_count, bytes)`.
pub fn write_delta(
    out: &mut [u8],
    base: &World,
    target: &World,
) -> Result<(u16, u16, usize), EncodeError> {
    let mut w = Writer::<Le>::new(out);
    let mut ents: u32 = 0;
    let mut comps: u32 = 0;
    // Entities created or destroyed (both lists sorted by id).
    merge(base, target, |b, t| -> Result<(), EncodeError> {
        match (b, t) {
            (None, Some(t)) => {
                w.u32(t.id)?;
                w.u8(OP_CREATED)?;
                w.u32(t.archetype)?;
                ents += 1;
            }
            (Some(b), None) => {
                w.u32(b.id)?;
                w.u8(OP_DESTROYED)?;
                ents += 1;
            }
            _ => {}
        }
        Ok(())
    })?;
    merge(base, target, |b, t| -> Result<(), EncodeError> {
        let Some(t) = t else { return Ok(()) };
        for ty in 1..=COMP_KNOWN {
            let (old, new) = (b.and_then(|b| b.get(ty)), t.get(ty));
            let op = match (old, new) {
                (None, Some(_)) => OP_ADDED,
                (Some(o), Some(n)) if o != n => OP_MODIFIED,
                (Some(_), None) => OP_REMOVED,
                _ => continue,
            };
            w.u32(t.id)?;
            w.u16(ty)?;
            w.u8(op)?;
            if let Some(n) = new {
                w.u16(n.len() as u16)?;
                w.bytes(n)?;
            }
            comps += 1;
        }
        Ok(())
    })?;
    let ents = u16::try_from(ents).map_err(|_| EncodeError::FieldTooLong)?;
    let comps = u16::try_from(comps).map_err(|_| EncodeError::FieldTooLong)?;
    Ok((ents, comps, w.position()))
}

/// Walk two sorted worlds together: `f(base, target)` for every id in either.
fn merge<E>(
    base: &World,
    target: &World,
    mut f: impl FnMut(Option<&Entity>, Option<&Entity>) -> Result<(), E>,
) -> Result<(), E> {
    let (mut i, mut j) = (0, 0);
    let (b, t) = (&base.entities, &target.entities);
    while i < b.len() || j < t.len() {
        match (b.get(i), t.get(j)) {
            (Some(x), Some(y)) if x.id == y.id => {
                f(Some(x), Some(y))?;
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.id < y.id => {
                f(Some(x), None)?;
                i += 1;
            }
            (Some(_), Some(y)) => {
                f(None, Some(y))?;
                j += 1;
            }
            (Some(x), None) => {
                f(Some(x), None)?;
                i += 1;
            }
            (None, Some(y)) => {
                f(None, Some(y))?;
                j += 1;
            }
            (None, None) => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(id: u32, x: i32, pop: u32) -> Entity {
        let mut e = Entity::new(id, ARCH_BUILDING);
        let mut p = [0u8; 12];
        p[..4].copy_from_slice(&x.to_le_bytes());
        assert!(e.set(COMP_POSITION, &p));
        let mut q = [0u8; 8];
        q[..4].copy_from_slice(&pop.to_le_bytes());
        assert!(e.set(COMP_POPULATION, &q));
        e
    }

    #[test]
    fn delta_turns_base_into_target_and_full_round_trips() {
        let mut base = World::default();
        for i in 1..=5 {
            base.insert(ent(i, i as i32, 0));
        }
        let mut target = base.clone();
        target.tick = 7;
        target.remove(2);
        target.insert(ent(9, 9, 3));
        target
            .get_mut(4)
            .unwrap()
            .set(COMP_POPULATION, &[5, 0, 0, 0, 0, 0, 0, 0]);
        target.get_mut(5).unwrap().remove(COMP_POPULATION);
        let mut buf = vec![0u8; 4096];
        let (e, c, n) = write_delta(&mut buf, &base, &target).unwrap();
        assert_eq!(
            (e, c),
            (2, 4),
            "created + destroyed; 2 added, 1 modified, 1 removed"
        );
        let mut w = base.clone();
        let mut skipped = 0;
        apply_delta(&mut w, e, c, &buf[..n], &mut skipped).unwrap();
        w.tick = 7;
        assert_eq!(w, target);

        let meta = Metadata {
            tick: 7,
            tick_rate: 20,
            map_width: 2,
            map_height: 2,
            rng_state: 1,
        };
        let players = [PlayerInfo {
            slot: 0,
            connected: true,
            name: "p",
        }];
        let n = write_full(&mut buf, &meta, &players, &[0; 4], &[1; 4], &target).unwrap();
        let mut back = World::default();
        let mut terrain = Vec::new();
        let info = parse_full(&buf[..n], &mut back, &mut terrain).unwrap();
        assert_eq!(info.meta, meta);
        assert_eq!(info.players, 1);
        assert_eq!(back, target);
    }

    /// The plain definition: the baseline, each entity operation in wire order (new ids
    /// inserted in place), then each component update.
    fn apply_plainly(
        world: &mut World,
        ec: u16,
        cc: u16,
        payload: &[u8],
    ) -> Result<(), DeltaError> {
        let mut r = Reader::<Le>::new(payload);
        for _ in 0..ec {
            let id = r.u32()?;
            match r.u8()? {
                OP_CREATED => {
                    let archetype = r.u32()?;
                    if !world.insert(Entity::new(id, archetype)) {
                        return Err("entity_exists");
                    }
                }
                OP_DESTROYED => {
                    if !world.remove(id) {
                        return Err("unknown_entity");
                    }
                }
                OP_MODIFIED => {
                    if world.get(id).is_none() {
                        return Err("unknown_entity");
                    }
                }
                _ => return Err("bad_operation"),
            }
        }
        for _ in 0..cc {
            let id = r.u32()?;
            let t = r.u16()?;
            let op = r.u8()?;
            let e = world.get_mut(id).ok_or("unknown_entity")?;
            match op {
                OP_REMOVED => e.remove(t),
                _ => {
                    let len = usize::from(r.u16()?);
                    let d = r.take(len)?;
                    if !e.set(t, d) {
                        return Err("component_bad_length");
                    }
                }
            }
        }
        r.expect_end().map_err(|e: WireError| e.reason())
    }

    #[test]
    fn a_merged_delta_equals_applying_its_operations_in_wire_order() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(26);
        let mut applier = DeltaApplier::new();
        let mut base = World::default();
        let mut out = World::default();
        let (mut oks, mut errs) = (0, 0);
        for round in 0..400 {
            // Mostly valid operations (what exists is tracked as they are written), now and
            // then a wrong one: both outcomes are compared.
            let mut exists: std::collections::BTreeSet<u32> =
                base.entities.iter().map(|e| e.id).collect();
            let mut payload = Vec::new();
            let ec = rng.random_range(0..30u16);
            for _ in 0..ec {
                let id = rng.random_range(0..60u32);
                let valid = rng.random_bool(0.995);
                let op = match (exists.contains(&id), valid) {
                    (true, true) => [OP_DESTROYED, OP_MODIFIED][rng.random_range(0..2)],
                    (false, true) | (true, false) => OP_CREATED,
                    (false, false) => OP_MODIFIED,
                };
                match op {
                    OP_CREATED => exists.insert(id),
                    OP_DESTROYED => exists.remove(&id),
                    _ => true,
                };
                payload.extend_from_slice(&id.to_le_bytes());
                payload.push(op);
                if op == OP_CREATED {
                    payload.extend_from_slice(&ARCH_ROAD.to_le_bytes());
                }
            }
            let cc = rng.random_range(0..4u16);
            let held: Vec<u32> = exists.iter().copied().collect();
            for _ in 0..cc {
                let id = if held.is_empty() || rng.random_bool(0.02) {
                    rng.random_range(0..60u32)
                } else {
                    held[rng.random_range(0..held.len())]
                };
                payload.extend_from_slice(&id.to_le_bytes());
                payload.extend_from_slice(&COMP_TRANSPORT.to_le_bytes());
                payload.push(OP_MODIFIED);
                payload.extend_from_slice(&4u16.to_le_bytes());
                payload.extend_from_slice(&[6, 0, round as u8, 0]);
            }
            let mut skipped = 0;
            let got = applier.apply(
                &base,
                &mut out,
                (ec, cc, &payload),
                usize::MAX,
                &mut skipped,
            );
            let mut want = base.clone();
            let plain = apply_plainly(&mut want, ec, cc, &payload);
            assert_eq!(
                got.is_ok(),
                plain.is_ok(),
                "round {round}: {got:?} / {plain:?}"
            );
            if got.is_ok() {
                assert_eq!(out, want, "round {round}");
                std::mem::swap(&mut base, &mut out);
                oks += 1;
            } else {
                errs += 1;
            }
        }
        assert!(
            oks > 100 && errs > 20,
            "both paths exercised: {oks} / {errs}"
        );
    }

    #[test]
    fn a_world_past_the_entity_limit_is_refused() {
        let mut base = World::default();
        for i in 1..=3 {
            base.insert(ent(i, 0, 0));
        }
        let mut payload = Vec::new();
        for id in [0u32, 9] {
            payload.extend_from_slice(&id.to_le_bytes());
            payload.push(OP_CREATED);
            payload.extend_from_slice(&ARCH_ROAD.to_le_bytes());
        }
        let (mut a, mut out, mut skipped) = (DeltaApplier::new(), World::default(), 0);
        assert_eq!(
            a.apply(&base, &mut out, (2, 0, &payload), 4, &mut skipped),
            Err(TOO_MANY_ENTITIES)
        );
        assert_eq!(
            a.apply(&base, &mut out, (2, 0, &payload), 5, &mut skipped),
            Ok(())
        );
        assert_eq!(
            out.entities.iter().map(|e| e.id).collect::<Vec<_>>(),
            [0, 1, 2, 3, 9]
        );
        assert!(out.entities.capacity() <= 5, "never room past the limit");
    }
}
