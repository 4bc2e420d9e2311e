//! DarkAges codec against bytes written by hand from docs/protocols/darkages.md
//! (little-endian; sizes include the type byte). No expected byte here comes from the
//! encoder under test.

use proptest::prelude::*;
use tickswarm::games::darkages::codec::{
    self, decode, dequantize_pos, dequantize_unit, encode, field, quantize_pos, quantize_unit,
    yaw_quat, ConnectAck, EntityState, EventBody, Packet, SnapshotKind, SnapshotWriter,
};

fn zeros(n: usize) -> Vec<u8> {
    vec![0; n]
}

fn padded(s: &[u8], n: usize) -> Vec<u8> {
    let mut v = s.to_vec();
    v.resize(n, 0);
    v
}

/// Encoding `p` gives exactly `bytes`, and decoding `bytes` gives `p`.
fn golden(bytes: &[u8], p: &Packet<'_>) {
    assert_eq!(decode(bytes).as_ref(), Ok(p), "decode");
    let mut buf = [0u8; 1500];
    let n = encode(&mut buf, p).expect("encode");
    assert_eq!(&buf[..n], bytes, "encode");
}

#[test]
fn connect_is_105_bytes() {
    let mut b = vec![0x10, 0x00, 0x00, 0x01, 0x00, 0x07, 0x00, 0x00, 0x00];
    b.extend(padded(b"bot-7", 32));
    b.extend(padded(&[0xAA, 0xBB], 64));
    assert_eq!(b.len(), 105);
    let mut token = [0u8; 64];
    token[0] = 0xAA;
    token[1] = 0xBB;
    golden(
        &b,
        &Packet::Connect(codec::Connect {
            protocol_version: 0x0001_0000,
            client_version: 7,
            client_id: codec::fixed_text("bot-7"),
            auth_token: token,
        }),
    );
    assert_eq!(
        decode(&b[..104]),
        Err(codec::DecodeError {
            message: "connect",
            reason: "bad_size"
        })
    );
    let mut long = b.clone();
    long.push(0);
    assert_eq!(decode(&long).unwrap_err().reason, "bad_size");
}

#[test]
fn connect_ack_is_90_bytes() {
    let mut b = vec![
        0x11, // type
        0x00, 0x00, 0x01, 0x00, // server_protocol_version 0x00010000
        0x2A, 0x00, 0x00, 0x01, // entity_id 0x0100002A
        0x01, 0x00, 0x00, 0x00, // zone_id 1
        0x10, 0x27, 0x00, 0x00, // server_tick 10000
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // server_time_ms
        0x03, // result server_full
    ];
    b.extend(padded(b"server full", 64));
    assert_eq!(b.len(), 90);
    golden(
        &b,
        &Packet::ConnectAck(ConnectAck {
            server_protocol_version: 0x0001_0000,
            entity_id: 0x0100_002A,
            zone_id: 1,
            server_tick: 10_000,
            server_time_ms: 0x1122_3344_5566_7788,
            result: 3,
            message: codec::fixed_text("server full"),
        }),
    );
}

#[test]
fn connected_is_the_type_byte_alone() {
    golden(&[0x12], &Packet::Connected);
    assert_eq!(decode(&[0x12, 0]).unwrap_err().reason, "bad_size");
}

#[test]
fn disconnect_carries_reason_and_a_u16_length_string() {
    golden(
        &[0x13, 0x05, 0x03, 0x00, b'b', b'y', b'e'],
        &Packet::Disconnect {
            reason: 5,
            message: "bye",
        },
    );
    assert_eq!(
        decode(&[0x13, 0x05, 0x04, 0x00, b'b', b'y', b'e'])
            .unwrap_err()
            .reason,
        "truncated"
    );
    assert_eq!(
        decode(&[0x13, 0x05, 0x02, 0x00, b'b', b'y', b'e'])
            .unwrap_err()
            .reason,
        "trailing_bytes"
    );
    assert_eq!(
        decode(&[0x13, 0x00, 0x01, 0x00, 0xFF]).unwrap_err().reason,
        "bad_utf8"
    );
}

#[test]
fn heartbeat_ping_pong_carry_a_u32() {
    golden(
        &[0x14, 0x78, 0x56, 0x34, 0x12],
        &Packet::Heartbeat {
            timestamp: 0x1234_5678,
        },
    );
    golden(
        &[0xF1, 0x01, 0x00, 0x00, 0x00],
        &Packet::Ping { timestamp: 1 },
    );
    golden(
        &[0xF2, 0xFF, 0xFF, 0xFF, 0xFF],
        &Packet::Pong {
            timestamp: u32::MAX,
        },
    );
    assert_eq!(decode(&[0xF1, 1, 2, 3]).unwrap_err().reason, "bad_size");
}

#[test]
fn input_with_last_received_tick_is_26_bytes_and_22_as_printed() {
    let printed = [
        0x20, // type
        0x01, 0x00, 0x00, 0x00, // sequence 1
        0xE8, 0x03, 0x00, 0x00, // timestamp 1000
        0x21, // FORWARD | ATTACK
        0x00, 0x00, 0x80, 0x3F, // yaw 1.0
        0x00, 0x00, 0x00, 0xBF, // pitch -0.5
        0x09, 0x00, 0x00, 0x00, // target 9
    ];
    let mut spec = printed.to_vec();
    spec.extend([0x2A, 0x00, 0x00, 0x00]); // last_received_tick 42
    assert_eq!(spec.len(), 26);
    let mut i = codec::Input {
        sequence: 1,
        timestamp: 1000,
        flags: codec::input::FORWARD | codec::input::ATTACK,
        yaw: 1.0,
        pitch: -0.5,
        target_entity: 9,
        last_received_tick: Some(42),
    };
    golden(&spec, &Packet::Input(i));
    i.last_received_tick = None;
    golden(&printed, &Packet::Input(i));
    assert_eq!(decode(&spec[..24]).unwrap_err().reason, "bad_size");
}

#[test]
fn full_snapshot_with_every_field() {
    let b = [
        0x21, // type
        0x0A, 0x00, 0x00, 0x00, // server_tick 10
        0x0A, 0x00, 0x00, 0x00, // baseline_tick 10: full
        0x01, 0x00, // entity_count 1
        0x07, 0x00, 0x00, 0x00, // entity_id 7
        0x00, // player
        0xFF, 0x1F, // present_mask: all 13 fields
        0x40, 0x00, // pos x 64 = 1.0 m
        0x00, 0x00, // pos y 0
        0xC0, 0xFF, // pos z -64 = -1.0 m
        0x00, 0x5A, 0x00, 0x5A, // rot 0, 90, 0, 90
        0x80, 0x00, // vel x 128 = 2.0 m/s
        0x00, 0x00, 0x00, 0x00, // vel y, z
        0x64, // health 100
        0x01, // anim
        0x02, // team
    ];
    assert_eq!(b.len(), 11 + 26);
    let Ok(Packet::Snapshot(s)) = decode(&b) else {
        panic!("not a snapshot");
    };
    assert_eq!(s.server_tick, 10);
    assert_eq!(s.kind, SnapshotKind::Full { entity_count: 1 });
    let recs: Vec<_> = s.records().collect();
    let want = EntityState {
        id: 7,
        kind: 0,
        pos: [64, 0, -64],
        rot: [0, 90, 0, 90],
        vel: [128, 0, 0],
        health: 100,
        anim: 1,
        team: 2,
    };
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].mask, field::ALL);
    assert_eq!(recs[0].state, want);
    let mut buf = [0u8; 64];
    let mut w = SnapshotWriter::full(&mut buf, 10).unwrap();
    w.record(&want, field::ALL).unwrap();
    let n = w.finish().unwrap();
    assert_eq!(&buf[..n], &b);
}

#[test]
fn delta_snapshot_with_a_partial_record_and_a_removal() {
    let b = [
        0x21, // type
        0x0D, 0x00, 0x00, 0x00, // server_tick 13
        0x0A, 0x00, 0x00, 0x00, // baseline_tick 10: delta
        0x01, 0x00, // changed_count 1
        0x01, 0x00, // removed_count 1
        0x07, 0x00, 0x00, 0x00, // entity_id 7
        0x00, // player
        0x05, 0x04, // mask: POS_X | POS_Z | HEALTH
        0x50, 0x00, // pos x 80
        0x01, 0x00, // pos z 1
        0x5A, // health 90
        0x09, 0x00, 0x00, 0x00, // removed id 9
    ];
    let Ok(Packet::Snapshot(s)) = decode(&b) else {
        panic!("not a snapshot");
    };
    assert_eq!(
        s.kind,
        SnapshotKind::Delta {
            changed_count: 1,
            removed_count: 1
        }
    );
    let r: Vec<_> = s.records().collect();
    assert_eq!(r[0].mask, field::POS_X | field::POS_Z | field::HEALTH);
    assert_eq!(r[0].state.pos, [80, 0, 1]);
    assert_eq!(r[0].state.health, 90);
    assert_eq!(s.removed().collect::<Vec<_>>(), vec![9]);
    // Applying keeps the baseline's other fields.
    let mut base = EntityState {
        id: 7,
        pos: [1, 2, 3],
        rot: [4, 5, 6, 7],
        health: 100,
        team: 1,
        ..EntityState::default()
    };
    r[0].apply_to(&mut base);
    assert_eq!(base.pos, [80, 2, 1]);
    assert_eq!(base.rot, [4, 5, 6, 7]);
    assert_eq!((base.health, base.team), (90, 1));
    // The writer produces the same bytes.
    let mut buf = [0u8; 64];
    let mut w = SnapshotWriter::delta(&mut buf, 13, 10).unwrap();
    w.record(&r[0].state, r[0].mask).unwrap();
    w.removed(9).unwrap();
    let n = w.finish().unwrap();
    assert_eq!(&buf[..n], &b);

    // Every count and length is checked.
    assert_eq!(
        decode(&b[..b.len() - 1]).unwrap_err().reason,
        "count_overrun"
    );
    let mut more = b.to_vec();
    more.push(0);
    assert_eq!(decode(&more).unwrap_err().reason, "trailing_bytes");
    let mut huge = b.to_vec();
    huge[9] = 0xFF;
    huge[10] = 0xFF;
    assert_eq!(decode(&huge).unwrap_err().reason, "count_overrun");
    let mut unknown_bit = b.to_vec();
    unknown_bit[19] = 0x24; // bit 13 set
    assert_eq!(
        decode(&unknown_bit).unwrap_err().reason,
        "unknown_field_bits"
    );
    let mut short_fields = b.to_vec();
    short_fields[18] = 0xFF; // claims every field: runs past the end
    assert!(decode(&short_fields).is_err());
}

#[test]
fn events_damage_death_and_unknown_types() {
    let mut b = vec![
        0x22, // type
        0x01, 0x00, 0x00, 0x00, // event_id 1
        0x02, 0x00, 0x00, 0x00, // timestamp 2
        0x01, // DAMAGE
        0x1E, 0x00, // payload_length 30
        0x07, 0x00, 0x00, 0x00, // target 7
        0x08, 0x00, 0x00, 0x00, // attacker 8
        0xF6, 0xFF, 0xFF, 0xFF, // damage -10
        0x01, // critical
        0x5A, // remaining 90
    ];
    b.extend(padded(b"bolt", 16));
    let Ok(Packet::Event(e)) = decode(&b) else {
        panic!("not an event");
    };
    let EventBody::Damage(d) = e.body else {
        panic!("not damage");
    };
    assert_eq!((d.target_id, d.attacker_id, d.damage), (7, 8, -10));
    assert_eq!((d.hit_type, d.remaining_health), (1, 90));
    golden(&b, &Packet::Event(e));

    let death = [
        0x22, 0x03, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // id 3, ts 4
        0x02, 0x0D, 0x00, // DEATH, 13 bytes
        0x07, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, // victim 7, killer 8
        0xB8, 0x0B, 0x00, 0x00, // respawn 3000 ms
        0x01, // headshot
    ];
    let Ok(Packet::Event(e)) = decode(&death) else {
        panic!("not an event");
    };
    assert_eq!(
        e.body,
        EventBody::Death(codec::Death {
            victim_id: 7,
            killer_id: 8,
            respawn_time_ms: 3000,
            kill_type: 1
        })
    );
    // A known type with the wrong payload size, and lengths that do not match.
    let mut bad = death.to_vec();
    bad[10] = 0x0C;
    bad.pop();
    assert_eq!(decode(&bad).unwrap_err().reason, "bad_payload");
    let mut over = death.to_vec();
    over[10] = 0x0E;
    assert_eq!(decode(&over).unwrap_err().reason, "length_overrun");
    // An unknown event type is opaque, not an error.
    let other = [0x22, 1, 0, 0, 0, 2, 0, 0, 0, 0x7F, 0x02, 0x00, 0xAB, 0xCD];
    let Ok(Packet::Event(e)) = decode(&other) else {
        panic!("not an event");
    };
    assert_eq!(
        e.body,
        EventBody::Other {
            event_type: 0x7F,
            payload: &[0xAB, 0xCD]
        }
    );
    assert_eq!(codec::event::name(0x7F), "event_unknown_type");
}

#[test]
fn coalesced_events_per_5_3() {
    let b = [
        0x23, // COALESCED_EVENTS
        0x02, // event_count
        0x04, 0x05, 0x00, 0x09, 0x00, 0x00, 0x00, 0x02, // DESPAWN of loot 9
        0x08, 0x02, 0x00, b'h', b'i', // SYSTEM "hi"
    ];
    let Ok(Packet::Coalesced(c)) = decode(&b) else {
        panic!("not coalesced");
    };
    let evs: Vec<_> = c.events().collect();
    assert_eq!(
        evs,
        vec![
            EventBody::Spawn {
                despawn: true,
                entity_id: 9,
                entity_type: 2
            },
            EventBody::Other {
                event_type: 8,
                payload: b"hi"
            }
        ]
    );
    let mut buf = [0u8; 64];
    let mut w = codec::CoalescedWriter::new(&mut buf).unwrap();
    for e in &evs {
        w.push(e).unwrap();
    }
    let n = w.finish().unwrap();
    assert_eq!(&buf[..n], &b);
    assert_eq!(decode(&b[..b.len() - 1]).unwrap_err().reason, "truncated");
    let mut extra = b.to_vec();
    extra.push(0);
    assert_eq!(decode(&extra).unwrap_err().reason, "trailing_bytes");
    let mut count = b.to_vec();
    count[1] = 3;
    assert_eq!(decode(&count).unwrap_err().reason, "truncated");
}

#[test]
fn zone_handoff_packet_and_event_share_the_74_byte_payload() {
    let mut payload = vec![0x01, 0x00, 0x00, 0x00]; // new_zone_id 1
    payload.extend(padded(b"127.0.0.1", 32));
    payload.extend([0x62, 0x1E]); // port 7778
    payload.extend((0..32u8).collect::<Vec<_>>()); // token
    payload.extend([0xB8, 0x0B, 0x00, 0x00]); // 3000 ms
    assert_eq!(payload.len(), 74);
    let mut pkt = vec![0x30];
    pkt.extend(&payload);
    let Ok(Packet::ZoneHandoff(z)) = decode(&pkt) else {
        panic!("not a handoff");
    };
    assert_eq!(z.new_zone_id, 1);
    assert_eq!(z.address_text(), Some("127.0.0.1"));
    assert_eq!(z.new_server_port, 7778);
    assert_eq!(z.handoff_token[31], 31);
    assert_eq!(z.handoff_timeout_ms, 3000);
    golden(&pkt, &Packet::ZoneHandoff(z));
    let mut ev = vec![0x22, 5, 0, 0, 0, 6, 0, 0, 0, 0x06, 74, 0];
    ev.extend(&payload);
    let Ok(Packet::Event(e)) = decode(&ev) else {
        panic!("not an event");
    };
    assert_eq!(e.body, EventBody::ZoneHandoff(z));
}

#[test]
fn zone_enter_leave_debug_text() {
    golden(
        &[0x31, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00],
        &Packet::ZoneEnter {
            zone_id: 1,
            entity_id: 7,
        },
    );
    golden(
        &[0x32, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00],
        &Packet::ZoneLeave {
            zone_id: 0,
            entity_id: 7,
        },
    );
    golden(&[0xF0, 0x02, 0x00, b'o', b'k'], &Packet::DebugText("ok"));
}

#[test]
fn unknown_and_empty_datagrams() {
    let e = decode(&[0x99, 1, 2]).unwrap_err();
    assert!(e.is_unknown_type());
    assert_eq!(decode(&[]).unwrap_err().reason, "empty");
    assert_eq!(decode(&zeros(3)).unwrap_err().reason, "unknown_type");
}

#[test]
fn position_quantization_edges() {
    assert_eq!(quantize_pos(1.0), 64);
    assert_eq!(quantize_pos(-1.0), -64);
    // Half a step rounds away from zero, symmetrically.
    assert_eq!(quantize_pos(0.5 / 64.0), 1);
    assert_eq!(quantize_pos(-0.5 / 64.0), -1);
    assert_eq!(quantize_pos(0.49 / 64.0), 0);
    assert_eq!(quantize_pos(1.5 / 64.0), 2);
    // Range limits clamp.
    assert_eq!(quantize_pos(32767.0 / 64.0), 32767);
    assert_eq!(quantize_pos(512.0), 32767);
    assert_eq!(quantize_pos(1.0e9), 32767);
    assert_eq!(quantize_pos(f32::INFINITY), 32767);
    assert_eq!(quantize_pos(-512.0), -32768);
    assert_eq!(quantize_pos(-1.0e9), -32768);
    assert_eq!(quantize_pos(f32::NAN), 0);
    assert_eq!(dequantize_pos(-32768), -512.0);
    assert_eq!(dequantize_pos(32767), 32767.0 / 64.0);
    assert_eq!(dequantize_pos(1), 0.015625);
}

#[test]
fn quaternion_int8_edges() {
    assert_eq!(quantize_unit(1.0), 127);
    assert_eq!(quantize_unit(-1.0), -127, "-128 is never produced");
    assert_eq!(quantize_unit(2.0), 127);
    assert_eq!(quantize_unit(-2.0), -127);
    assert_eq!(quantize_unit(0.5), 64, "63.5 rounds away from zero");
    assert_eq!(quantize_unit(-0.5), -64);
    assert_eq!(quantize_unit(f32::NAN), 0);
    assert_eq!(dequantize_unit(127), 1.0);
    assert_eq!(dequantize_unit(-127), -1.0);
    assert_eq!(dequantize_unit(-128), -1.0, "a received -128 reads as -1");
    assert_eq!(yaw_quat(0.0), [0, 0, 0, 127]);
    assert_eq!(yaw_quat(std::f32::consts::PI), [0, 127, 0, 0]);
    assert_eq!(yaw_quat(std::f32::consts::FRAC_PI_2), [0, 90, 0, 90]);
}

/// What [`decoding_never_panics`] checks of one datagram: decoding never panics, and a
/// snapshot or a list of coalesced events that decodes yields exactly as many records,
/// removals and events as its counts say. Whether it decoded as one of those.
fn counts_agree(bytes: &[u8]) -> Result<bool, TestCaseError> {
    match decode(bytes) {
        Ok(Packet::Snapshot(s)) => {
            prop_assert_eq!(s.records().count(), s.record_count());
            prop_assert_eq!(s.removed().count(), s.removed_count());
            Ok(true)
        }
        Ok(Packet::Coalesced(c)) => {
            prop_assert_eq!(c.events().count(), usize::from(c.count));
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Arbitrary bytes never panic the decoder, and what decodes as a snapshot or coalesced
/// events has the counts it says ([`counts_agree`]). Arbitrary bytes almost never decode as
/// either, which left the counts unchecked; so each case also changes one byte (anywhere,
/// to anything) of a valid delta snapshot and of a valid list of events: most changes land
/// in a value and still decode, some in a mask, count or length. The test fails unless at
/// least a quarter of the changed datagrams of each kind decoded.
#[test]
fn decoding_never_panics() {
    use std::cell::Cell;
    let cases = Cell::new(0u32);
    let decoded = [Cell::new(0u32), Cell::new(0u32)];
    let mut runner = proptest::test_runner::TestRunner::default();
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..1500),
        proptest::collection::vec(arb_state(), 1..20),
        proptest::collection::vec(any::<u32>(), 0..5),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8),
        any::<prop::sample::Index>(),
        any::<u8>(),
    );
    runner
        .run(&strategy, |(bytes, recs, removed, texts, at, byte)| {
            counts_agree(&bytes)?;
            cases.set(cases.get() + 1);
            let mut snapshot = delta_snapshot(&recs, &removed);
            let n = snapshot.len();
            snapshot[at.index(n)] = byte;
            let mut buf = [0u8; 1500];
            let mut w = codec::CoalescedWriter::new(&mut buf).unwrap();
            for text in &texts {
                w.push(&EventBody::Other {
                    event_type: 8,
                    payload: text,
                })
                .unwrap();
            }
            let n = w.finish().unwrap();
            let mut events = buf[..n].to_vec();
            events[at.index(n)] = byte;
            for (count, changed) in decoded.iter().zip([&snapshot, &events]) {
                if counts_agree(changed)? {
                    count.set(count.get() + 1);
                }
            }
            Ok(())
        })
        .unwrap();
    let cases = cases.get();
    for (what, count) in ["snapshots", "coalesced events"].iter().zip(&decoded) {
        let n = count.get();
        eprintln!("{n} of {cases} changed {what} decoded");
        assert!(
            4 * n >= cases,
            "only {n} of {cases} changed {what} decoded: their counts were hardly checked"
        );
    }
}

/// A delta snapshot (tick 5 against baseline 4) of `recs` and `removed`, as the encoder
/// writes it.
fn delta_snapshot(recs: &[(EntityState, u16)], removed: &[u32]) -> Vec<u8> {
    let mut buf = [0u8; 1500];
    let mut w = SnapshotWriter::delta(&mut buf, 5, 4).unwrap();
    for (e, m) in recs {
        w.record(e, *m).unwrap();
    }
    for id in removed {
        w.removed(*id).unwrap();
    }
    let n = w.finish().unwrap();
    buf[..n].to_vec()
}

fn arb_state() -> impl Strategy<Value = (EntityState, u16)> {
    (
        any::<u32>(),
        0u8..3,
        any::<[i16; 3]>(),
        any::<[i8; 4]>(),
        any::<[i16; 3]>(),
        any::<[u8; 3]>(),
        0u16..=field::ALL,
    )
        .prop_map(|(id, kind, pos, rot, vel, small, mask)| {
            (
                EntityState {
                    id,
                    kind,
                    pos,
                    rot,
                    vel,
                    health: small[0],
                    anim: small[1],
                    team: small[2],
                },
                mask,
            )
        })
}

proptest! {

    #[test]
    fn decoding_any_type_byte_never_panics(
        t in prop::sample::select(vec![0x10u8, 0x11, 0x12, 0x13, 0x14, 0x20, 0x21, 0x22, 0x23, 0x30, 0x31, 0x32, 0xF0, 0xF1, 0xF2]),
        rest in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut b = vec![t];
        b.extend(rest);
        let _ = decode(&b);
    }

    #[test]
    fn snapshot_records_roundtrip(recs in proptest::collection::vec(arb_state(), 0..40), removed in proptest::collection::vec(any::<u32>(), 0..20)) {
        let bytes = delta_snapshot(&recs, &removed);
        let Ok(Packet::Snapshot(s)) = decode(&bytes) else { panic!("decode") };
        let got: Vec<_> = s.records().collect();
        prop_assert_eq!(got.len(), recs.len());
        for (u, (e, m)) in got.iter().zip(&recs) {
            prop_assert_eq!(u.mask, *m);
            let mut a = EntityState::default();
            u.apply_to(&mut a);
            let mut b = EntityState { id: e.id, kind: e.kind, ..EntityState::default() };
            codec::EntityUpdate { mask: *m, state: *e }.apply_to(&mut b);
            prop_assert_eq!(a, b);
            prop_assert_eq!(codec::record_len(*m), 7 + (m & 7).count_ones() as usize * 2 + (m & 0x78).count_ones() as usize + (m & 0x380).count_ones() as usize * 2 + (m & 0x1C00).count_ones() as usize);
        }
        prop_assert_eq!(s.removed().collect::<Vec<_>>(), removed);
    }
}
