//! The DeltaSnapshot payload (§5.2): applied onto a baseline in one merge, checked without
//! a baseline, and written from two worlds.

use super::*;

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
pub(super) type EntityOp = (u32, u32, u8, u32);

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
    pub(super) ops: Vec<EntityOp>,
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
pub(super) fn merge<E>(
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
