use super::*;

#[test]
fn record_lengths_follow_the_mask() {
    assert_eq!(record_len(0), 7);
    assert_eq!(record_len(field::ALL), len::RECORD_FULL);
    assert_eq!(record_len(field::POS_X | field::POS_Z), 11);
    assert_eq!(record_len(field::ROT_Y | field::HEALTH), 9);
}

#[test]
fn coalesced_roundtrip() {
    let mut buf = [0u8; 64];
    let mut c = CoalescedWriter::new(&mut buf).unwrap();
    c.push(&EventBody::Spawn {
        despawn: true,
        entity_id: 9,
        entity_type: entity::LOOT,
    })
    .unwrap();
    c.push(&EventBody::Other {
        event_type: event::SYSTEM,
        payload: b"hi",
    })
    .unwrap();
    let n = c.finish().unwrap();
    let Ok(Packet::Coalesced(p)) = decode(&buf[..n]) else {
        panic!("not coalesced");
    };
    assert_eq!(p.count, 2);
    assert_eq!(p.events().count(), 2);
}
