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
fn apply_plainly(world: &mut World, ec: u16, cc: u16, payload: &[u8]) -> Result<(), DeltaError> {
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
