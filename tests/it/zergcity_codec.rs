//! ZergCity codec against the spec: golden bytes written by hand from zergcity.md's tables
//! (little-endian, 16-byte header), LZ4 round trips, and every §13.1 validation failure,
//! counted by reason, without panics and without allocating a size the packet claims.

use std::time::Instant;

use proptest::prelude::*;
use tickswarm::games::zergcity::codec::{
    self, Action, DecodeError, Decompressor, Encoder, Message, MsgType, MAX_PAYLOAD,
};
use tickswarm::games::zergcity::{ZergCityBot, ZergCityOptions};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::{Bot, BotParams};

/// The header as the spec's table lays it out.
fn header(ty: u8, flags: u8, len: u32, seq: u32) -> Vec<u8> {
    let mut h = vec![0x5A, 0x43, 0x4E, 0x54, 0x01, ty, flags, 0x00];
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&seq.to_le_bytes());
    h
}

fn decode(bytes: &[u8]) -> Result<Option<Message<'static>>, DecodeError> {
    // Leak per call: test-only, keeps the borrow simple.
    let bytes: &'static [u8] = Box::leak(bytes.to_vec().into_boxed_slice());
    let dec: &'static mut Decompressor = Box::leak(Box::default());
    codec::decode(bytes, dec).map(|d| d.message)
}

fn encode(m: &Message<'_>, seq: u32) -> Vec<u8> {
    let mut buf = vec![0u8; 70_000];
    let n = Encoder::new().encode(&mut buf, seq, m).unwrap();
    buf.truncate(n);
    buf
}

/// Golden bytes decode to `m` and `m` encodes to the golden bytes.
fn golden(bytes: &[u8], m: Message<'_>, seq: u32) {
    assert_eq!(decode(bytes).unwrap(), Some(m), "decode");
    assert_eq!(encode(&m, seq), bytes, "encode");
}

#[test]
fn header_golden() {
    // SnapshotAck, sequence 0x01020304, RELIABLE flag (channel 0).
    let b = [
        0x5A, 0x43, 0x4E, 0x54, // magic "ZCNT"
        0x01, // protocol_version
        0x12, // SnapshotAck
        0x08, // flags: RELIABLE
        0x00, // reserved
        0x0C, 0x00, 0x00, 0x00, // payload_length 12
        0x04, 0x03, 0x02, 0x01, // sequence
        0x2A, 0, 0, 0, 0, 0, 0, 0, // acked_tick 42
        0x07, 0, 0, 0, // last_input_seq 7
    ];
    assert_eq!(b.len(), 28);
    let h = codec::Header::parse(&b).unwrap();
    assert_eq!(h.sequence, 0x0102_0304);
    assert_eq!(h.payload_len, 12);
    assert_eq!(h.flags, codec::FLAG_RELIABLE);
    golden(
        &b,
        Message::SnapshotAck {
            acked_tick: 42,
            last_input_seq: 7,
        },
        0x0102_0304,
    );
}

#[test]
fn client_hello_is_72_bytes() {
    let mut b = header(0x00, 0x08, 56, 0);
    b.extend_from_slice(&[0x04, 0x03, 0x02, 0x01]); // client_version
    b.extend_from_slice(b"bot-1");
    b.extend_from_slice(&[0; 27]); // name null-padded to 32
    b.extend_from_slice(&[0xAA; 16]); // session_token
    b.extend_from_slice(&[0xFF, 0, 0, 0]); // requested_slot: any
    assert_eq!(b.len(), 72);
    golden(
        &b,
        Message::ClientHello {
            client_version: 0x0102_0304,
            player_name: "bot-1",
            session_token: [0xAA; 16],
            requested_slot: 0xFF,
        },
        0,
    );
}

#[test]
fn server_hello_is_64_bytes() {
    let mut b = header(0x01, 0x08, 48, 1);
    b.extend_from_slice(&[1, 0, 0, 0]); // server_version
    b.push(0); // result: accepted
    b.push(2); // assigned_slot
    b.extend_from_slice(&[0, 0]); // padding
    b.extend_from_slice(&[0x11; 16]); // token
    b.extend_from_slice(&[20, 0, 0, 0]); // tick_rate
    b.extend_from_slice(&[0x02, 0x01, 0, 0, 0, 0, 0, 0]); // current_tick 258
    b.extend_from_slice(&[64, 0, 0, 0, 64, 0, 0, 0]); // map 64 x 64
    b.extend_from_slice(&[3, 0, 0, 0]); // num_players
    assert_eq!(b.len(), 64);
    golden(
        &b,
        Message::ServerHello {
            server_version: 1,
            result: 0,
            assigned_slot: 2,
            session_token: [0x11; 16],
            tick_rate: 20,
            current_tick: 258,
            map_width: 64,
            map_height: 64,
            num_players: 3,
        },
        1,
    );
}

#[test]
fn disconnect_is_144_bytes() {
    let mut b = header(0x02, 0x08, 128, 9);
    b.push(3); // reason: timeout
    b.extend_from_slice(b"bye");
    b.extend_from_slice(&[0; 124]);
    assert_eq!(b.len(), 144);
    golden(
        &b,
        Message::Disconnect {
            reason: 3,
            message: "bye",
        },
        9,
    );
}

#[test]
fn ping_and_pong_are_32_bytes_unreliable() {
    let mut b = header(0x03, 0x00, 16, 5);
    b.extend_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
    b.extend_from_slice(&[0; 8]); // server_tick 0 in Ping
    assert_eq!(b.len(), 32);
    golden(
        &b,
        Message::Ping {
            timestamp: 0x1122_3344_5566_7788,
            server_tick: 0,
        },
        5,
    );
    let mut b = header(0x04, 0x00, 16, 6);
    b.extend_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
    b.extend_from_slice(&[0x64, 0, 0, 0, 0, 0, 0, 0]);
    golden(
        &b,
        Message::Pong {
            timestamp: 0x1122_3344_5566_7788,
            server_tick: 100,
        },
        6,
    );
    assert_eq!(MsgType::Ping.channel(), (2, false));
    assert_eq!(MsgType::DeltaSnapshot.channel(), (2, false));
    assert_eq!(MsgType::FullSnapshot.channel(), (1, true));
    assert_eq!(MsgType::InputMessage.channel(), (0, true));
}

#[test]
fn input_ack_is_29_bytes() {
    let mut b = header(0x21, 0x08, 13, 0);
    b.extend_from_slice(&[42, 0, 0, 0]); // input_sequence
    b.push(6); // rate limited
    b.extend_from_slice(&[0; 8]); // applied_tick 0 (rejected)
    assert_eq!(b.len(), 29);
    golden(
        &b,
        Message::InputAck {
            input_sequence: 42,
            result: 6,
            applied_tick: 0,
        },
        0,
    );
}

#[test]
fn error_message_is_224_bytes() {
    let mut b = header(0xFE, 0x08, 208, 0);
    b.extend_from_slice(&[5, 0, 0, 0]); // ServerFull
    b.extend_from_slice(&[9, 0, 0, 0]); // context
    b.extend_from_slice(b"full");
    b.extend_from_slice(&[0; 196]);
    assert_eq!(b.len(), 224);
    golden(
        &b,
        Message::ErrorMessage {
            error_code: 5,
            context: 9,
            message: "full",
        },
        0,
    );
}

#[test]
fn input_messages_golden() {
    // PlaceBuilding (§6.1): 29 + 13 bytes.
    let mut b = header(0x20, 0x08, 26, 0);
    b.extend_from_slice(&[7, 0, 0, 0]); // input_sequence
    b.extend_from_slice(&[100, 0, 0, 0, 0, 0, 0, 0]); // client_tick
    b.push(0x01); // PlaceBuilding
    b.extend_from_slice(&[3, 0, 0, 0]); // building_type_id
    b.extend_from_slice(&[10, 0, 0, 0]); // grid_x
    b.extend_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF]); // grid_y -2
    b.push(1); // rotation 90
    assert_eq!(b.len(), 42);
    golden(
        &b,
        Message::InputMessage {
            input_sequence: 7,
            client_tick: 100,
            action: Action::PlaceBuilding {
                building_type: 3,
                x: 10,
                y: -2,
                rotation: 1,
            },
        },
        0,
    );
    // Demolish with two tiles: 2 + 2 × 8 bytes of data.
    let mut b = header(0x20, 0x08, 13 + 18, 0);
    b.extend_from_slice(&[8, 0, 0, 0]);
    b.extend_from_slice(&[0; 8]);
    b.push(0x03);
    b.extend_from_slice(&[2, 0]);
    b.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0]);
    let Some(Message::InputMessage {
        action: Action::TilesWire { kind, tiles },
        ..
    }) = decode(&b).unwrap()
    else {
        panic!("demolish")
    };
    assert_eq!(kind, codec::INPUT_DEMOLISH);
    assert_eq!(tiles.tiles().collect::<Vec<_>>(), vec![(1, 2), (3, 4)]);
    let m = Message::InputMessage {
        input_sequence: 8,
        client_tick: 0,
        action: Action::Tiles {
            kind: 3,
            tiles: &[(1, 2), (3, 4)],
        },
    };
    assert_eq!(encode(&m, 0), b);
    // DesignateZone with one rectangle: 4 + 16 bytes; a count that disagrees is malformed.
    let mut b = header(0x20, 0x08, 13 + 20, 0);
    b.extend_from_slice(&[9, 0, 0, 0]);
    b.extend_from_slice(&[0; 8]);
    b.push(0x02);
    b.extend_from_slice(&[1, 1, 1, 0]); // habitation, high, 1 rect
    b.extend_from_slice(&[5, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
    let Some(Message::InputMessage {
        action: Action::DesignateZoneWire { rects, .. },
        ..
    }) = decode(&b).unwrap()
    else {
        panic!("zone")
    };
    let r: Vec<_> = rects
        .rects()
        .map(|r| (r.x, r.y, r.width, r.height))
        .collect();
    assert_eq!(r, vec![(5, 6, 2, 3)]);
    b[29 + 2] = 2; // rect_count 2, one present
    assert_eq!(
        decode(&b),
        Err(DecodeError::new("input_message", "count_mismatch"))
    );
}

#[test]
fn full_snapshot_golden_lz4_block() {
    // LZ4 block of "hello": one sequence, token 0x50 (5 literals, no match), the literals.
    let mut b = header(0x10, 0x09, 4 + 8 + 6, 0); // COMPRESSED | RELIABLE
    b.extend_from_slice(&[5, 0, 0, 0]); // uncompressed_size
    b.extend_from_slice(&[0x10, 0x27, 0, 0, 0, 0, 0, 0]); // snapshot_tick 10000
    b.extend_from_slice(&[0x50, b'h', b'e', b'l', b'l', b'o']);
    assert_eq!(
        decode(&b).unwrap(),
        Some(Message::FullSnapshot {
            snapshot_tick: 10_000,
            data: b"hello",
        })
    );
    // Without the COMPRESSED flag it is malformed: FullSnapshot is always compressed.
    let mut plain = b.clone();
    plain[6] = 0x08;
    assert_eq!(
        decode(&plain),
        Err(DecodeError::new("full_snapshot", "not_compressed"))
    );
}

#[test]
fn lz4_round_trips_for_large_bodies() {
    let payload: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
    let m = Message::DeltaSnapshot(codec::DeltaSnapshot {
        base_tick: 1,
        target_tick: 2,
        entity_count: 0,
        component_count: 0,
        payload: &payload,
    });
    let bytes = encode(&m, 3);
    assert_eq!(bytes[6] & codec::FLAG_COMPRESSED, codec::FLAG_COMPRESSED);
    assert!(bytes.len() < 1000, "compressed to {}", bytes.len());
    // Body: uncompressed_size of the whole body (20 + 5000), then the block.
    assert_eq!(&bytes[16..20], &5020u32.to_le_bytes());
    assert_eq!(decode(&bytes).unwrap(), Some(m));
    // A small body stays plain.
    let small = Message::DeltaSnapshot(codec::DeltaSnapshot {
        base_tick: 1,
        target_tick: 2,
        entity_count: 0,
        component_count: 0,
        payload: &payload[..100],
    });
    let bytes = encode(&small, 0);
    assert_eq!(bytes[6] & codec::FLAG_COMPRESSED, 0);
    assert_eq!(bytes.len(), 16 + 20 + 100);
    // And a FullSnapshot of real data.
    let data: Vec<u8> = (0..20_000u32).map(|i| (i / 64) as u8).collect();
    let mut buf = vec![0u8; 70_000];
    let n = codec::encode_full(&mut buf, 0, 77, &data).unwrap();
    assert_eq!(
        decode(&buf[..n]).unwrap(),
        Some(Message::FullSnapshot {
            snapshot_tick: 77,
            data: &data,
        })
    );
}

fn full_with(size: u32, block: &[u8]) -> Vec<u8> {
    let mut b = header(0x10, 0x09, (12 + block.len()) as u32, 0);
    b.extend_from_slice(&size.to_le_bytes());
    b.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(block);
    b
}

#[test]
fn lying_sizes_are_rejected_without_allocating_them() {
    let block = lz4_flex::block::compress(&[7u8; 300]);
    assert_eq!(
        decode(&full_with(300, &block)).unwrap(),
        Some(Message::FullSnapshot {
            snapshot_tick: 1,
            data: &[7u8; 300],
        })
    );
    // Stated larger or smaller than what the block holds.
    for lie in [301, 299, 1] {
        assert_eq!(
            decode(&full_with(lie, &block)),
            Err(DecodeError::new("full_snapshot", "size_mismatch")),
            "{lie}"
        );
    }
    // A small packet claiming a huge size: refused before any allocation.
    let mut dec = Decompressor::default();
    let bomb = full_with(16 * 1024 * 1024, &[0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        codec::decode(&bomb, &mut dec).unwrap_err(),
        DecodeError::new("full_snapshot", "impossible_size")
    );
    let too_big = full_with(u32::MAX, &[0; 16]);
    assert_eq!(
        codec::decode(&too_big, &mut dec).unwrap_err(),
        DecodeError::new("full_snapshot", "decompressed_too_large")
    );
    assert_eq!(dec.capacity(), 0, "nothing allocated for a lying size");
    // A bot configured with a smaller limit refuses sizes above it.
    let mut small = Decompressor::new(100);
    assert_eq!(
        codec::decode(&full_with(300, &block), &mut small).unwrap_err(),
        DecodeError::new("full_snapshot", "decompressed_too_large")
    );
    // A compressed delta that lies.
    let mut d = header(0x11, 0x01, (4 + block.len()) as u32, 0);
    d.extend_from_slice(&1000u32.to_le_bytes());
    d.extend_from_slice(&block);
    assert_eq!(
        decode(&d),
        Err(DecodeError::new("delta_snapshot", "size_mismatch"))
    );
}

#[test]
fn header_validation_by_reason() {
    let ok = {
        let mut b = header(0x03, 0, 16, 0);
        b.extend_from_slice(&[0; 16]);
        b
    };
    assert!(decode(&ok).is_ok());
    let err = |r| Err(DecodeError::new("header", r));
    let mut bad = ok.clone();
    bad[0] = 0x5B;
    assert_eq!(decode(&bad), err("bad_magic"));
    let mut bad = ok.clone();
    bad[4] = 2;
    assert_eq!(decode(&bad), err("bad_version"));
    assert_eq!(decode(&ok[..15]), err("truncated"));
    assert_eq!(decode(&ok[..31]), err("truncated"));
    let mut long = ok.clone();
    long.push(0);
    assert_eq!(decode(&long), err("trailing_bytes"));
    // payload_length over 16 MiB, in a 32-byte packet.
    let mut huge = ok.clone();
    huge[8..12].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
    assert_eq!(decode(&huge), err("oversized"));
    // A fixed-size type of another size.
    let mut short = header(0x03, 0, 8, 0);
    short.extend_from_slice(&[0; 8]);
    assert_eq!(decode(&short), Err(DecodeError::new("ping", "bad_size")));
    // Unknown types (and 0xFF Reserved) are not errors: counted and ignored by the caller.
    for ty in [0x05, 0x13, 0x99, 0xFF] {
        let mut u = header(ty, 0, 3, 0);
        u.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode(&u), Ok(None), "type {ty:#x}");
    }
}

#[test]
fn truncated_sections_are_counted_by_the_bot() {
    let mut bot = ZergCityBot::new(BotParams::with_index(0, 1), ZergCityOptions::default());
    let mut rec = Recorder::new();
    let now = Instant::now();
    bot.start(now, &mut rec);
    // Accept the bot first.
    let mut hello = header(0x01, 0x08, 48, 0);
    hello.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    hello.extend_from_slice(&[0x11; 16]);
    hello.extend_from_slice(&[20, 0, 0, 0]);
    hello.extend_from_slice(&[0; 8]);
    hello.extend_from_slice(&[64, 0, 0, 0, 64, 0, 0, 0, 1, 0, 0, 0]);
    bot.handle_datagram(now, &hello, &mut rec);
    assert_eq!(bot.slot(), Some(0));
    // Section table: one Metadata section whose length runs past the data.
    let mut payload = vec![1, 0, 0, 0]; // section_count
    payload.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0]); // Metadata, 0, 28
    payload.extend_from_slice(&[0; 10]); // only 10 bytes of it
    let block = lz4_flex::block::compress(&payload);
    bot.handle_datagram(now, &full_with(payload.len() as u32, &block), &mut rec);
    assert_eq!(
        rec.decode_errors.get("full_snapshot.section_out_of_bounds"),
        1
    );
    // A section_count the payload cannot hold.
    let payload = [0xFF, 0xFF, 0xFF, 0x7F, 0, 0];
    let block = lz4_flex::block::compress(&payload);
    bot.handle_datagram(now, &full_with(6, &block), &mut rec);
    assert_eq!(
        rec.decode_errors
            .get("full_snapshot.section_count_mismatch"),
        1
    );
    // Header failures counted the same way, and the bot carries on.
    let mut bad = hello.clone();
    bad[0] = 0;
    bot.handle_datagram(now, &bad, &mut rec);
    let mut old = hello.clone();
    old[4] = 9;
    bot.handle_datagram(now, &old, &mut rec);
    bot.handle_datagram(now, &full_with(16 << 20, &[0; 4]), &mut rec);
    let mut unknown = header(0x77, 0, 0, 3);
    unknown.truncate(16);
    bot.handle_datagram(now, &unknown, &mut rec);
    assert_eq!(rec.decode_errors.get("header.bad_magic"), 1);
    assert_eq!(rec.decode_errors.get("header.bad_version"), 1);
    assert_eq!(rec.decode_errors.get("full_snapshot.impossible_size"), 1);
    assert_eq!(rec.events.get("unknown_message_type"), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut dec = Decompressor::new(1 << 20);
        let _ = codec::decode(&bytes, &mut dec);
    }

    /// A sound header in front of arbitrary bodies reaches every message decoder (and the
    /// snapshot parsers through a bot).
    #[test]
    fn sound_headers_with_arbitrary_bodies_never_panic(
        ty in prop::sample::select(vec![0x00u8, 0x01, 0x02, 0x03, 0x04, 0x10, 0x11, 0x12,
            0x20, 0x21, 0x30, 0x40, 0x41, 0xF0, 0xFE]),
        flags in 0u8..16,
        body in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut b = header(ty, flags, body.len() as u32, 0);
        b.extend_from_slice(&body);
        let mut dec = Decompressor::new(1 << 20);
        let _ = codec::decode(&b, &mut dec);
        let mut bot = ZergCityBot::new(BotParams::with_index(0, 1), ZergCityOptions::default());
        let mut rec = Recorder::new();
        bot.start(Instant::now(), &mut rec);
        bot.handle_datagram(Instant::now(), &b, &mut rec);
    }
}
