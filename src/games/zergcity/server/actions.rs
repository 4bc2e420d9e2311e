//! The players' actions: each InputMessage's action validated (tiles, ownership, money)
//! and applied to the world, and the component bytes it writes.

use super::*;

impl ZergCityServer {
    pub(super) fn alloc_entity(&mut self) -> u32 {
        let id = self.next_entity;
        self.next_entity = self.next_entity.wrapping_add(1).max(1);
        id
    }

    pub(super) fn write_treasury(&mut self, p: usize) {
        let Some(pl) = self.players[p].as_ref() else {
            return;
        };
        let owner = p as u8 + 1;
        let population: u32 = self
            .world
            .entities
            .iter()
            .filter(|e| e.owner() == Some(owner) && e.archetype != world::ARCH_PLAYER)
            .filter_map(|e| e.get(world::COMP_POPULATION).map(|b| read_u32(b, 0)))
            .sum();
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&pl.funds.to_le_bytes());
        b[8] = pl.tribute;
        b[12..16].copy_from_slice(&population.to_le_bytes());
        let id = pl.entity;
        if let Some(e) = self.world.get_mut(id) {
            e.set(world::COMP_TREASURY, &b);
        }
    }

    /// Remove a structure or parcel and free the tiles it covered.
    pub(super) fn destroy(&mut self, id: u32) {
        let Some(e) = self.world.get(id).copied() else {
            return;
        };
        let owner = e.owner().unwrap_or(0);
        let slot = usize::from(owner).checked_sub(1);
        if let Some((x, y)) = e.position() {
            let (w, h) = match e.get(world::COMP_ZONE) {
                Some(z) => (i32::from(z[2]), i32::from(z[3])),
                None => (1, 1),
            };
            if e.archetype == world::ARCH_PARCEL {
                if let Some(i) = self.idx(x, y) {
                    self.owner[i] = 0;
                }
            } else {
                for ty in y..y + h {
                    for tx in x..x + w {
                        if let Some(i) = self.idx(tx, ty) {
                            if self.occupant[i] == id {
                                self.occupant[i] = 0;
                            }
                        }
                    }
                }
            }
        }
        if let Some(pl) = slot
            .and_then(|s| self.players.get_mut(s))
            .and_then(Option::as_mut)
        {
            if e.archetype == world::ARCH_PARCEL {
                pl.parcels = pl.parcels.saturating_sub(1);
            } else {
                pl.structures = pl.structures.saturating_sub(1);
            }
        }
        self.world.remove(id);
    }

    /// Check one tile for a structure of player `p`.
    pub(super) fn check_build_tile(&self, p: usize, x: i32, y: i32) -> Result<usize, InputResult> {
        let i = self.idx(x, y).ok_or(InputResult::InvalidPosition)?;
        if self.terrain[i] == 1 {
            return Err(InputResult::BlockedByTerrain);
        }
        if self.owner[i] != p as u8 + 1 {
            return Err(InputResult::NotOwner);
        }
        if self.occupant[i] != 0 {
            return Err(InputResult::InvalidPosition);
        }
        Ok(i)
    }

    pub(super) fn pay(
        &mut self,
        p: usize,
        cost: i64,
        structures: usize,
    ) -> Result<(), InputResult> {
        let pl = self.players[p].as_mut().ok_or(InputResult::NotOwner)?;
        if pl.structures + structures > self.cfg.max_structures {
            return Err(InputResult::RequirementsNotMet);
        }
        if pl.funds < cost {
            return Err(InputResult::InsufficientFunds);
        }
        pl.funds -= cost;
        pl.structures += structures;
        Ok(())
    }

    pub(super) fn spawn_structure(
        &mut self,
        p: usize,
        archetype: u32,
        x: i32,
        y: i32,
        comps: &[(u16, &[u8])],
    ) -> u32 {
        let id = self.alloc_entity();
        let mut e = Entity::new(id, archetype);
        let elev = self
            .idx(x, y)
            .map_or(0, |i| i32::from(self.terrain[i] == 2) * 3);
        e.set(world::COMP_POSITION, &pos_bytes(x, y, elev));
        e.set(
            world::COMP_OWNERSHIP,
            &ownership_bytes(p as u8 + 1, self.tick),
        );
        for (t, b) in comps {
            e.set(*t, b);
        }
        self.world.insert(e);
        id
    }

    /// Validate and apply one action for player `p`.
    pub(super) fn apply(&mut self, p: usize, a: &Action<'_>) -> InputResult {
        match self.try_apply(p, a) {
            Ok(()) => InputResult::Success,
            Err(r) => r,
        }
    }

    pub(super) fn try_apply(&mut self, p: usize, a: &Action<'_>) -> Result<(), InputResult> {
        let owner = p as u8 + 1;
        match *a {
            Action::None | Action::CancelAction { .. } => Ok(()),
            // One rate for every zone type: the reference city does not tax zones apart.
            Action::SetTributeRate { rate, .. } => {
                if rate > MAX_TRIBUTE {
                    return Err(InputResult::RequirementsNotMet);
                }
                if let Some(pl) = self.players[p].as_mut() {
                    pl.tribute = rate;
                }
                self.write_treasury(p);
                Ok(())
            }
            Action::PurchaseTile { x, y } => {
                let i = self.idx(x, y).ok_or(InputResult::InvalidPosition)?;
                if self.terrain[i] == 1 {
                    return Err(InputResult::BlockedByTerrain);
                }
                match self.owner[i] {
                    0 => {}
                    o if o == owner => return Err(InputResult::InvalidPosition),
                    _ => return Err(InputResult::NotOwner),
                }
                let pl = self.players[p].as_mut().ok_or(InputResult::NotOwner)?;
                if pl.parcels >= self.cfg.max_parcels {
                    return Err(InputResult::RequirementsNotMet);
                }
                if pl.funds < PARCEL_COST {
                    return Err(InputResult::InsufficientFunds);
                }
                pl.funds -= PARCEL_COST;
                pl.parcels += 1;
                self.owner[i] = owner;
                self.spawn_structure(p, world::ARCH_PARCEL, x, y, &[]);
                self.write_treasury(p);
                Ok(())
            }
            Action::PlaceBuilding {
                building_type,
                x,
                y,
                ..
            } => {
                let i = self.check_build_tile(p, x, y)?;
                if !(1..=4).contains(&building_type) {
                    return Err(InputResult::RequirementsNotMet);
                }
                self.pay(p, BUILDING_COST, 1)?;
                let mut b = [0u8; 16];
                b[0..4].copy_from_slice(&building_type.to_le_bytes());
                b[4] = 1; // under construction
                b[5] = 1;
                b[8..12].copy_from_slice(&(self.tick as u32).to_le_bytes());
                let id = self.spawn_structure(
                    p,
                    world::ARCH_BUILDING,
                    x,
                    y,
                    &[
                        (world::COMP_BUILDING, &b),
                        (world::COMP_ENERGY, &u32_pair(0, 0)),
                        (world::COMP_POPULATION, &u32_pair(0, 0)),
                    ],
                );
                self.occupant[i] = id;
                self.write_treasury(p);
                Ok(())
            }
            Action::DesignateZoneWire {
                zone_type,
                density,
                rects,
            } => {
                let n = rects.len_in(16);
                if n == 0 || n > MAX_ZONE_RECTS {
                    return Err(InputResult::InvalidPosition);
                }
                if zone_type == 0 {
                    // De-zone: remove the player's zone lots whose origin is in a rectangle.
                    let mut ids = Vec::new();
                    for r in rects.rects() {
                        for e in &self.world.entities {
                            if e.archetype == world::ARCH_ZONE && e.owner() == Some(owner) {
                                if let Some((x, y)) = e.position() {
                                    let inside = x >= r.x
                                        && y >= r.y
                                        && i64::from(x) < i64::from(r.x) + i64::from(r.width)
                                        && i64::from(y) < i64::from(r.y) + i64::from(r.height);
                                    if inside {
                                        ids.push(e.id);
                                    }
                                }
                            }
                        }
                    }
                    if ids.is_empty() {
                        return Err(InputResult::InvalidPosition);
                    }
                    for id in ids {
                        self.destroy(id);
                    }
                    self.write_treasury(p);
                    return Ok(());
                }
                for r in rects.rects() {
                    if r.width == 0
                        || r.height == 0
                        || u64::from(r.width) * u64::from(r.height) > u64::from(MAX_ZONE_AREA)
                    {
                        return Err(InputResult::InvalidPosition);
                    }
                    for dy in 0..r.height as i32 {
                        for dx in 0..r.width as i32 {
                            self.check_build_tile(
                                p,
                                r.x.saturating_add(dx),
                                r.y.saturating_add(dy),
                            )?;
                        }
                    }
                }
                // Rectangles overlapping one another are caught while occupying.
                self.pay(p, ZONE_COST * n as i64, n)?;
                for r in rects.rects() {
                    let mut z = [0u8; 8];
                    z[0] = zone_type;
                    z[1] = density;
                    z[2] = r.width as u8;
                    z[3] = r.height as u8;
                    let id = self.spawn_structure(
                        p,
                        world::ARCH_ZONE,
                        r.x,
                        r.y,
                        &[
                            (world::COMP_ZONE, &z),
                            (world::COMP_POPULATION, &u32_pair(0, 0)),
                        ],
                    );
                    for dy in 0..r.height as i32 {
                        for dx in 0..r.width as i32 {
                            if let Some(i) =
                                self.idx(r.x.saturating_add(dx), r.y.saturating_add(dy))
                            {
                                if self.occupant[i] == 0 {
                                    self.occupant[i] = id;
                                }
                            }
                        }
                    }
                }
                self.write_treasury(p);
                Ok(())
            }
            Action::TilesWire { kind, tiles } => {
                let n = tiles.len_in(8);
                if n == 0 || n > MAX_TILES_PER_ACTION {
                    return Err(InputResult::InvalidPosition);
                }
                if kind == codec::INPUT_DEMOLISH {
                    let mut ids = Vec::with_capacity(n);
                    for (x, y) in tiles.tiles() {
                        let i = self.idx(x, y).ok_or(InputResult::InvalidPosition)?;
                        let id = self.occupant[i];
                        if id == 0 {
                            continue;
                        }
                        if self.world.get(id).and_then(|e| e.owner()) != Some(owner) {
                            return Err(InputResult::NotOwner);
                        }
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                    if ids.is_empty() {
                        return Err(InputResult::InvalidPosition);
                    }
                    for id in ids {
                        self.destroy(id);
                    }
                    self.write_treasury(p);
                    return Ok(());
                }
                let (arch, cost, extra): (u32, i64, Option<u16>) = match kind {
                    codec::INPUT_PLACE_ROAD => (world::ARCH_ROAD, 10, None),
                    codec::INPUT_PLACE_CONDUIT => {
                        (world::ARCH_CONDUIT, 20, Some(world::COMP_ENERGY))
                    }
                    _ => (world::ARCH_PIPE, 20, Some(world::COMP_FLUID)),
                };
                for (i, (x, y)) in tiles.tiles().enumerate() {
                    self.check_build_tile(p, x, y)?;
                    if tiles.tiles().take(i).any(|t| t == (x, y)) {
                        return Err(InputResult::InvalidPosition);
                    }
                }
                self.pay(p, cost * n as i64, n)?;
                for (x, y) in tiles.tiles() {
                    let t = [kind, 0, 0, 0];
                    let id = match extra {
                        Some(c) => self.spawn_structure(
                            p,
                            arch,
                            x,
                            y,
                            &[(world::COMP_TRANSPORT, &t), (c, &u32_pair(0, 0))],
                        ),
                        None => self.spawn_structure(p, arch, x, y, &[(world::COMP_TRANSPORT, &t)]),
                    };
                    if let Some(i) = self.idx(x, y) {
                        self.occupant[i] = id;
                    }
                }
                self.write_treasury(p);
                Ok(())
            }
            // Encoder-side forms never come off the wire.
            Action::DesignateZone { .. } | Action::Tiles { .. } => {
                Err(InputResult::InvalidPosition)
            }
        }
    }

    pub(super) fn on_input(
        &mut self,
        now: Instant,
        s: usize,
        conn: ConnId,
        seq: u32,
        a: &Action<'_>,
    ) {
        let Some(c) = self.sessions.state_mut(s) else {
            return;
        };
        let Some(p) = c.slot.filter(|_| c.stage == Stage::Playing) else {
            self.invalid(s, DecodeError::new("input_message", "before_hello"));
            return;
        };
        if now.saturating_duration_since(c.window_start) >= Duration::from_secs(1) {
            c.window_start = now;
            c.inputs_in_window = 0;
        }
        c.inputs_in_window += 1;
        let result = if c.inputs_in_window > self.cfg.max_inputs_per_second {
            InputResult::RateLimited
        } else {
            self.apply(p, a)
        };
        self.stats.events.add2("input_result", result.name(), 1);
        let applied = if result == InputResult::Success {
            self.tick + 1
        } else {
            0
        };
        self.queue(
            conn,
            Out::InputAck {
                seq,
                result,
                applied,
            },
        );
    }
}

pub(super) fn pos_bytes(x: i32, y: i32, elevation: i32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..4].copy_from_slice(&x.to_le_bytes());
    b[4..8].copy_from_slice(&y.to_le_bytes());
    b[8..12].copy_from_slice(&elevation.to_le_bytes());
    b
}

pub(super) fn ownership_bytes(owner: u8, tick: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0] = owner;
    b[1] = 1; // owned
    b[4..12].copy_from_slice(&tick.to_le_bytes());
    b
}

pub(super) fn u32_pair(a: u32, b: u32) -> [u8; 8] {
    let mut o = [0u8; 8];
    o[..4].copy_from_slice(&a.to_le_bytes());
    o[4..].copy_from_slice(&b.to_le_bytes());
    o
}

pub(super) fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0)
}
