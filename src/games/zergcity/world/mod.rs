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

mod delta;
mod full;
#[cfg(test)]
mod tests;

pub use delta::*;
pub use full::*;

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
