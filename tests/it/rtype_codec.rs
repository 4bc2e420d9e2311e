//! R-Type codec against golden bytes written by hand from `docs/protocols/rtype.md` (never
//! produced by the encoder), its §8 validation rules, and arbitrary input.
//!
//! Float constants used below (IEEE 754 single, big-endian bytes):
//! 100.0 = 42 C8 00 00 · 200.0 = 43 48 00 00 · 300.0 = 43 96 00 00 · -120.0 = C2 F0 00 00
//! 64.0 = 42 80 00 00 · 1.0 = 3F 80 00 00 · -1.0 = BF 80 00 00 · 0.5 = 3F 00 00 00
//! -0.5 = BF 00 00 00 · 0.0 = 00 00 00 00. Little-endian floats are the same bytes reversed.

use proptest::prelude::*;
use tickswarm::games::rtype::codec::{
    decode, decode_header, encode, max_snapshot_entities, snapshot_len, DecodeError, FloatOrder,
    Packet, PacketType, SnapshotEncoder, SnapshotEntity, SNAPSHOT_ENTITY_LEN, VERSION,
};

const BE: FloatOrder = FloatOrder::Big;
const LE: FloatOrder = FloatOrder::Little;

/// Decode `golden`, compare with `expected`, and encode `expected` back to `golden`.
fn golden(bytes: &[u8], order: FloatOrder, expected: Packet<'_>) {
    let got = decode(bytes, order).unwrap_or_else(|e| panic!("{e} for {bytes:02X?}"));
    assert_eq!(got, expected, "decode of {bytes:02X?}");
    let mut buf = [0u8; 1500];
    let n = encode(&mut buf, &expected, order).expect("fits");
    assert_eq!(&buf[..n], bytes, "encode of {expected:?}");
}

fn rejected(bytes: &[u8], message: &'static str, reason: &'static str) {
    for order in [BE, LE] {
        assert_eq!(
            decode(bytes, order),
            Err(DecodeError { message, reason }),
            "{bytes:02X?}"
        );
    }
}

// ---------------------------------------------------------------- client → server

#[test]
fn connect() {
    #[rustfmt::skip]
    let bytes = [
        0x01, 0x01, 0x00, 0x08, // type CONNECT, version 1, size 8
        0x01, 0x02, 0x03, 0x04, // clientId 0x01020304 (htonl)
    ];
    golden(
        &bytes,
        BE,
        Packet::Connect {
            client_id: 0x0102_0304,
        },
    );
    golden(
        &bytes,
        LE,
        Packet::Connect {
            client_id: 0x0102_0304,
        },
    );
    #[rustfmt::skip]
    let auto = [
        0x01, 0x01, 0x00, 0x08, // CONNECT, v1, size 8
        0x00, 0x00, 0x00, 0x00, // clientId 0: auto-assignment
    ];
    golden(&auto, BE, Packet::Connect { client_id: 0 });
}

#[test]
fn input_big_endian_floats() {
    #[rustfmt::skip]
    let bytes = [
        0x02, 0x01, 0x00, 0x11, // type INPUT, version 1, size 17
        0x00, 0x00, 0x00, 0x2A, // entity 42
        0x3F, 0x80, 0x00, 0x00, // dx 1.0
        0xBF, 0x00, 0x00, 0x00, // dy -0.5
        0x01,                   // shooting
    ];
    golden(
        &bytes,
        BE,
        Packet::Input {
            entity: 42,
            dx: 1.0,
            dy: -0.5,
            shooting: true,
        },
    );
}

#[test]
fn input_little_endian_floats() {
    #[rustfmt::skip]
    let bytes = [
        0x02, 0x01, 0x00, 0x11, // type INPUT, version 1, size 17 (integers stay big-endian)
        0x00, 0x00, 0x00, 0x2A, // entity 42
        0x00, 0x00, 0x80, 0x3F, // dx 1.0, native x86 order
        0x00, 0x00, 0x00, 0xBF, // dy -0.5
        0x00,                   // not shooting
    ];
    golden(
        &bytes,
        LE,
        Packet::Input {
            entity: 42,
            dx: 1.0,
            dy: -0.5,
            shooting: false,
        },
    );
}

#[test]
fn input_any_nonzero_shooting_byte_means_shooting() {
    #[rustfmt::skip]
    let bytes = [
        0x02, 0x01, 0x00, 0x11, // INPUT, v1, size 17
        0x00, 0x00, 0x00, 0x00, // entity 0
        0x00, 0x00, 0x00, 0x00, // dx 0.0
        0x00, 0x00, 0x00, 0x00, // dy 0.0
        0x02,                   // shooting byte 2
    ];
    assert_eq!(
        decode(&bytes, BE),
        Ok(Packet::Input {
            entity: 0,
            dx: 0.0,
            dy: 0.0,
            shooting: true
        })
    );
}

#[test]
fn header_only_packets() {
    for (bytes, packet) in [
        ([0x03, 0x01, 0x00, 0x04], Packet::Ping), // PING, v1, size 4
        ([0x04, 0x01, 0x00, 0x04], Packet::Disconnect), // DISCONNECT, v1, size 4
        ([0x0A, 0x01, 0x00, 0x04], Packet::Accept), // ACCEPT (10), v1, size 4
        ([0x0B, 0x01, 0x00, 0x04], Packet::Reject), // REJECT (11), v1, size 4
        ([0x0D, 0x01, 0x00, 0x04], Packet::GameOver), // GAMEOVER (13), v1, size 4
    ] {
        golden(&bytes, BE, packet);
        golden(&bytes, LE, packet);
    }
}

// ---------------------------------------------------------------- server → client

#[test]
fn pong() {
    #[rustfmt::skip]
    let bytes = [
        0x0C, 0x01, 0x00, 0x08, // type PONG (12), version 1, size 8
        0xDE, 0xAD, 0xBE, 0xEF, // timestamp 0xDEADBEEF (htonl)
    ];
    golden(
        &bytes,
        BE,
        Packet::Pong {
            timestamp: 0xDEAD_BEEF,
        },
    );
}

#[test]
fn entity_create_spec_example_with_size_corrected_to_18() {
    // §7's example, except its size: the spec prints `00 14` (20), the packet is 18 bytes.
    #[rustfmt::skip]
    let bytes = [
        0x14, 0x01, 0x00, 0x12, // type ENTITY_CREATE (20), version 1, size 18
        0x00, 0x00, 0x00, 0x2A, // id 42
        0x42, 0xC8, 0x00, 0x00, // x 100.0
        0x43, 0x48, 0x00, 0x00, // y 200.0
        0x00, 0x03,             // sprite 3
    ];
    golden(
        &bytes,
        BE,
        Packet::EntityCreate {
            id: 42,
            x: 100.0,
            y: 200.0,
            sprite: 3,
        },
    );
}

#[test]
fn entity_create_little_endian_floats() {
    #[rustfmt::skip]
    let bytes = [
        0x14, 0x01, 0x00, 0x12, // ENTITY_CREATE, v1, size 18
        0x00, 0x00, 0x00, 0x2A, // id 42 (still big-endian)
        0x00, 0x00, 0xC8, 0x42, // x 100.0, native order
        0x00, 0x00, 0x48, 0x43, // y 200.0, native order
        0x00, 0x03,             // sprite 3 (still big-endian)
    ];
    golden(
        &bytes,
        LE,
        Packet::EntityCreate {
            id: 42,
            x: 100.0,
            y: 200.0,
            sprite: 3,
        },
    );
}

#[test]
fn entity_create_spec_example_as_printed_is_rejected() {
    // Declares 20 bytes, carries 18: §8's size rule drops it.
    #[rustfmt::skip]
    let bytes = [
        0x14, 0x01, 0x00, 0x14,
        0x00, 0x00, 0x00, 0x2A,
        0x42, 0xC8, 0x00, 0x00,
        0x43, 0x48, 0x00, 0x00,
        0x00, 0x03,
    ];
    rejected(&bytes, "entity_create", "truncated");
}

#[test]
fn entity_destroy() {
    #[rustfmt::skip]
    let bytes = [
        0x15, 0x01, 0x00, 0x08, // type ENTITY_DESTROY (21), version 1, size 8
        0x01, 0x00, 0x00, 0x05, // id 0x01000005
    ];
    golden(&bytes, BE, Packet::EntityDestroy { id: 0x0100_0005 });
}

#[test]
fn damage_event() {
    #[rustfmt::skip]
    let bytes = [
        0x16, 0x01, 0x00, 0x0A, // type DAMAGE_EVENT (22), version 1, size 10
        0x00, 0x00, 0x00, 0x07, // id 7
        0x01, 0x2C,             // amount 300 (htons)
    ];
    golden(&bytes, BE, Packet::Damage { id: 7, amount: 300 });
}

#[rustfmt::skip]
const SNAPSHOT_BE: [u8; 54] = [
    0x17, 0x01, 0x00, 0x36, // type SNAPSHOT (23), version 1, size 54 = 10 + 22 × 2
    0x00, 0x00, 0x01, 0x02, // tick 258
    0x00, 0x02,             // entityCount 2
    // entity 1
    0x00, 0x00, 0x00, 0x01, // id 1
    0x42, 0xC8, 0x00, 0x00, // x 100.0
    0x43, 0x48, 0x00, 0x00, // y 200.0
    0x43, 0x96, 0x00, 0x00, // vx 300.0
    0xC2, 0xF0, 0x00, 0x00, // vy -120.0
    0x00, 0x01,             // sprite 1
    // entity 2
    0x01, 0x00, 0x00, 0x00, // id 0x01000000
    0x42, 0x80, 0x00, 0x00, // x 64.0
    0x3F, 0x00, 0x00, 0x00, // y 0.5
    0xBF, 0x80, 0x00, 0x00, // vx -1.0
    0x00, 0x00, 0x00, 0x00, // vy 0.0
    0x00, 0x02,             // sprite 2
];

#[rustfmt::skip]
const SNAPSHOT_LE: [u8; 54] = [
    0x17, 0x01, 0x00, 0x36, // SNAPSHOT, v1, size 54
    0x00, 0x00, 0x01, 0x02, // tick 258 (big-endian like every integer)
    0x00, 0x02,             // entityCount 2
    0x00, 0x00, 0x00, 0x01, // id 1
    0x00, 0x00, 0xC8, 0x42, // x 100.0
    0x00, 0x00, 0x48, 0x43, // y 200.0
    0x00, 0x00, 0x96, 0x43, // vx 300.0
    0x00, 0x00, 0xF0, 0xC2, // vy -120.0
    0x00, 0x01,             // sprite 1
    0x01, 0x00, 0x00, 0x00, // id 0x01000000
    0x00, 0x00, 0x80, 0x42, // x 64.0
    0x00, 0x00, 0x00, 0x3F, // y 0.5
    0x00, 0x00, 0x80, 0xBF, // vx -1.0
    0x00, 0x00, 0x00, 0x00, // vy 0.0
    0x00, 0x02,             // sprite 2
];

fn snapshot_entities() -> [SnapshotEntity; 2] {
    [
        SnapshotEntity {
            id: 1,
            x: 100.0,
            y: 200.0,
            vx: 300.0,
            vy: -120.0,
            sprite: 1,
        },
        SnapshotEntity {
            id: 0x0100_0000,
            x: 64.0,
            y: 0.5,
            vx: -1.0,
            vy: 0.0,
            sprite: 2,
        },
    ]
}

fn check_snapshot(bytes: &[u8], order: FloatOrder) {
    let Ok(Packet::Snapshot(s)) = decode(bytes, order) else {
        panic!("not a snapshot: {:?}", decode(bytes, order));
    };
    assert_eq!(s.tick, 258);
    assert_eq!(s.entity_count(), 2);
    assert_eq!(s.entities().collect::<Vec<_>>(), snapshot_entities());
    // Re-encoding the decoded packet gives the same bytes.
    golden(bytes, order, Packet::Snapshot(s));
    // So does building it in place.
    let mut buf = [0u8; 1400];
    let mut enc = SnapshotEncoder::begin(&mut buf, 258, order).unwrap();
    for e in snapshot_entities() {
        enc.entity(&e).unwrap();
    }
    let n = enc.finish().unwrap();
    assert_eq!(&buf[..n], bytes);
}

#[test]
fn snapshot_big_endian_floats() {
    check_snapshot(&SNAPSHOT_BE, BE);
}

#[test]
fn snapshot_little_endian_floats() {
    check_snapshot(&SNAPSHOT_LE, LE);
}

#[test]
fn empty_snapshot() {
    #[rustfmt::skip]
    let bytes = [
        0x17, 0x01, 0x00, 0x0A, // SNAPSHOT, v1, size 10
        0x00, 0x00, 0x00, 0x03, // tick 3
        0x00, 0x00,             // entityCount 0
    ];
    let Ok(Packet::Snapshot(s)) = decode(&bytes, BE) else {
        panic!()
    };
    assert_eq!((s.tick, s.entity_count()), (3, 0));
    golden(&bytes, BE, Packet::Snapshot(s));
}

#[test]
fn float_order_only_changes_floats() {
    // Big-endian bytes read as little-endian: still valid, integers unchanged, floats differ.
    let Ok(Packet::Snapshot(s)) = decode(&SNAPSHOT_BE, LE) else {
        panic!()
    };
    let e: Vec<_> = s.entities().collect();
    assert_eq!((s.tick, e[0].id, e[0].sprite), (258, 1, 1));
    assert_ne!(e[0].x, 100.0);
    assert_eq!(e[0].x.to_bits(), 0x0000_C842);
}

#[test]
fn every_type_has_a_golden_and_its_struct_size() {
    let sizes = [
        (PacketType::Connect, Some(8)),
        (PacketType::Input, Some(17)),
        (PacketType::Ping, Some(4)),
        (PacketType::Disconnect, Some(4)),
        (PacketType::Accept, Some(4)),
        (PacketType::Reject, Some(4)),
        (PacketType::Pong, Some(8)),
        (PacketType::GameOver, Some(4)),
        (PacketType::EntityCreate, Some(18)),
        (PacketType::EntityDestroy, Some(8)),
        (PacketType::DamageEvent, Some(10)),
        (PacketType::Snapshot, None),
    ];
    assert_eq!(sizes.len(), PacketType::ALL.len());
    for (ty, size) in sizes {
        assert_eq!(ty.fixed_len(), size, "{ty:?}");
        assert_eq!(PacketType::from_u8(ty as u8), Some(ty));
    }
    assert_eq!(snapshot_len(0), 10);
    assert_eq!(snapshot_len(3), 76);
}

// ---------------------------------------------------------------- §8 validation

#[test]
fn shorter_than_a_header_is_truncated() {
    rejected(&[], "header", "truncated");
    rejected(&[0x03], "header", "truncated");
    rejected(&[0x03, 0x01, 0x00], "header", "truncated");
}

#[test]
fn wrong_version_is_rejected() {
    rejected(&[0x03, 0x02, 0x00, 0x04], "header", "bad_version"); // PING, version 2
    rejected(&[0x03, 0x00, 0x00, 0x04], "header", "bad_version"); // PING, version 0
    #[rustfmt::skip]
    rejected(&[0x17, 0xFF, 0x00, 0x0A, 0, 0, 0, 1, 0, 0], "header", "bad_version");
}

#[test]
fn unknown_types_are_rejected_as_such() {
    for ty in [0u8, 5, 9, 14, 19, 24, 0x63, 0xFF] {
        rejected(&[ty, 0x01, 0x00, 0x04], "header", "unknown_type");
    }
    assert!(PacketType::from_u8(5).is_none());
}

#[test]
fn datagram_shorter_than_declared_is_truncated() {
    // CONNECT declaring 8 bytes, 6 received.
    rejected(
        &[0x01, 0x01, 0x00, 0x08, 0x00, 0x00],
        "connect",
        "truncated",
    );
    // SNAPSHOT declaring 54, the last entity cut off (32 received).
    rejected(&SNAPSHOT_BE[..32], "snapshot", "truncated");
}

#[test]
fn datagram_longer_than_declared_is_oversized() {
    // PING declaring 4 bytes, 5 received.
    rejected(&[0x03, 0x01, 0x00, 0x04, 0x00], "ping", "oversized");
    // A valid snapshot with a byte of junk after it.
    let mut long = SNAPSHOT_BE.to_vec();
    long.push(0xAA);
    rejected(&long, "snapshot", "oversized");
    // Size 0 declared on a 4-byte packet.
    rejected(&[0x0A, 0x01, 0x00, 0x00], "accept", "oversized");
}

#[test]
fn consistent_but_wrong_struct_size_is_bad_size() {
    // PING declaring and carrying 5 bytes.
    rejected(&[0x03, 0x01, 0x00, 0x05, 0x00], "ping", "bad_size");
    // CONNECT declaring and carrying 7 bytes.
    rejected(
        &[0x01, 0x01, 0x00, 0x07, 0x00, 0x00, 0x2A],
        "connect",
        "bad_size",
    );
    // ENTITY_CREATE padded to 20 bytes, declared 20.
    #[rustfmt::skip]
    let padded = [
        0x14, 0x01, 0x00, 0x14,
        0x00, 0x00, 0x00, 0x2A,
        0x42, 0xC8, 0x00, 0x00,
        0x43, 0x48, 0x00, 0x00,
        0x00, 0x03, 0x00, 0x00,
    ];
    rejected(&padded, "entity_create", "bad_size");
    // SNAPSHOT shorter than its 10 fixed bytes, declared consistently.
    rejected(
        &[0x17, 0x01, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01],
        "snapshot",
        "bad_size",
    );
}

#[test]
fn snapshot_size_must_match_entity_count() {
    // entityCount 2 but one entity: 32 bytes declared and received.
    let mut one = SNAPSHOT_BE[..32].to_vec();
    one[3] = 32;
    rejected(&one, "snapshot", "count_mismatch");
    // entityCount 1 but two entities.
    let mut two = SNAPSHOT_BE;
    two[9] = 1;
    rejected(&two, "snapshot", "count_mismatch");
    // entityCount 0xFFFF on an empty body.
    rejected(
        &[0x17, 0x01, 0x00, 0x0A, 0x00, 0x00, 0x00, 0x01, 0xFF, 0xFF],
        "snapshot",
        "count_mismatch",
    );
}

#[test]
fn header_decoding_alone() {
    assert_eq!(
        decode_header(&[0x0C, 0x01, 0x00, 0x04]),
        Ok(PacketType::Pong)
    );
    // decode then checks PONG's struct size.
    rejected(&[0x0C, 0x01, 0x00, 0x04], "pong", "bad_size");
}

// ---------------------------------------------------------------- encoders

#[test]
fn snapshot_encoder_caps_entities_to_the_buffer() {
    assert_eq!(max_snapshot_entities(1400), 63);
    let mut buf = [0u8; 1400];
    let mut enc = SnapshotEncoder::begin(&mut buf, 9, BE).unwrap();
    let e = SnapshotEntity::default();
    for _ in 0..63 {
        enc.entity(&e).unwrap();
    }
    assert_eq!(enc.room(), 0);
    assert!(enc.entity(&e).is_err());
    let n = enc.finish().unwrap();
    assert_eq!(n, 10 + 22 * 63);
    assert_eq!(&buf[2..4], &[0x05, 0x74]); // size 1396
    assert_eq!(&buf[8..10], &[0x00, 0x3F]); // entityCount 63
    assert!(matches!(decode(&buf[..n], BE), Ok(Packet::Snapshot(s)) if s.entity_count() == 63));
}

#[test]
fn encoders_refuse_small_buffers() {
    let mut buf = [0u8; 10];
    assert!(encode(
        &mut buf,
        &Packet::EntityCreate {
            id: 1,
            x: 0.0,
            y: 0.0,
            sprite: 0
        },
        BE
    )
    .is_err());
    assert!(SnapshotEncoder::begin(&mut buf[..9], 1, BE).is_err());
    assert_eq!(encode(&mut buf[..4], &Packet::Ping, BE), Ok(4));
}

// ---------------------------------------------------------------- arbitrary input

fn entity_strategy() -> impl Strategy<Value = SnapshotEntity> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
    )
        .prop_map(|(id, x, y, vx, vy, sprite)| SnapshotEntity {
            id,
            x: f32::from_bits(x),
            y: f32::from_bits(y),
            vx: f32::from_bits(vx),
            vy: f32::from_bits(vy),
            sprite,
        })
}

fn bits(e: &SnapshotEntity) -> (u32, u32, u32, u32, u32, u16) {
    (
        e.id,
        e.x.to_bits(),
        e.y.to_bits(),
        e.vx.to_bits(),
        e.vy.to_bits(),
        e.sprite,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Decoding never panics, whatever arrives; and a snapshot yields exactly as many
    /// entities as its count says. Arbitrary bytes almost never decode as a snapshot (the
    /// check was skipped on them), so the same bytes also go out framed as one (the header
    /// with its size, a tick, the count of whole entity records they hold): that must decode.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        data in proptest::collection::vec(any::<u8>(), 0..1600),
        tick in any::<u32>(),
    ) {
        let count = data.len() / SNAPSHOT_ENTITY_LEN;
        let mut framed = vec![PacketType::Snapshot as u8, VERSION, 0, 0];
        framed.extend_from_slice(&tick.to_be_bytes());
        framed.extend_from_slice(&u16::try_from(count).unwrap().to_be_bytes());
        framed.extend_from_slice(&data[..count * SNAPSHOT_ENTITY_LEN]);
        let size = u16::try_from(framed.len()).unwrap();
        framed[2..4].copy_from_slice(&size.to_be_bytes());
        prop_assert_eq!(framed.len(), snapshot_len(count));
        for order in [BE, LE] {
            let _ = decode(&data, order);
            match decode(&framed, order) {
                Ok(Packet::Snapshot(s)) => {
                    prop_assert_eq!(s.tick, tick);
                    prop_assert_eq!(s.entity_count(), count);
                    prop_assert_eq!(s.entities().count(), count);
                }
                other => prop_assert!(false, "a framed snapshot of {count} entities: {other:?}"),
            }
        }
    }

    #[test]
    fn decoding_plausible_headers_never_panics(
        ty in prop::sample::select(vec![1u8, 2, 3, 4, 10, 11, 12, 13, 20, 21, 22, 23, 99]),
        body in proptest::collection::vec(any::<u8>(), 0..200),
        fix_size in any::<bool>(),
        declared in any::<u16>(),
    ) {
        let mut data = vec![ty, 1, 0, 0];
        data.extend_from_slice(&body);
        let size = if fix_size { data.len() as u16 } else { declared };
        data[2..4].copy_from_slice(&size.to_be_bytes());
        for order in [BE, LE] {
            match decode(&data, order) {
                Ok(p) => {
                    prop_assert_eq!(p.packet_type() as u8, ty);
                    prop_assert_eq!(usize::from(size), data.len());
                }
                Err(e) => prop_assert!(!e.reason.is_empty()),
            }
        }
    }

    #[test]
    fn snapshots_round_trip_bit_exact(
        tick in any::<u32>(),
        entities in proptest::collection::vec(entity_strategy(), 0..63),
        little in any::<bool>(),
    ) {
        let order = if little { LE } else { BE };
        let mut buf = [0u8; 1400];
        let mut enc = SnapshotEncoder::begin(&mut buf, tick, order).unwrap();
        for e in &entities {
            enc.entity(e).unwrap();
        }
        let n = enc.finish().unwrap();
        prop_assert_eq!(n, snapshot_len(entities.len()));
        let Ok(Packet::Snapshot(s)) = decode(&buf[..n], order) else {
            return Err(TestCaseError::fail("not decoded"));
        };
        prop_assert_eq!(s.tick, tick);
        let back: Vec<_> = s.entities().map(|e| bits(&e)).collect();
        let want: Vec<_> = entities.iter().map(bits).collect();
        prop_assert_eq!(back, want);
    }

    #[test]
    fn inputs_round_trip(entity in any::<u32>(), dx in -1.0f32..=1.0, dy in -1.0f32..=1.0, shooting in any::<bool>(), little in any::<bool>()) {
        let order = if little { LE } else { BE };
        let p = Packet::Input { entity, dx, dy, shooting };
        let mut buf = [0u8; 32];
        let n = encode(&mut buf, &p, order).unwrap();
        prop_assert_eq!(n, 17);
        prop_assert_eq!(decode(&buf[..n], order), Ok(p));
    }
}
