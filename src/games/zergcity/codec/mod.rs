//! The ZergCity wire format (`docs/protocols/zergcity.md`): the header,
//! every message of §4-§7 and §12, LZ4 block compression (§8) and the validation of §13.1.
//! Snapshot *contents* (sections, entities, components) are in [`super::world`].
//!
//! # Framing
//! One ZergCity message per ENet packet. Every message starts with the 16-byte little-endian
//! header:
//! ```text
//! magic 5A 43 4E 54 ("ZCNT") · protocol_version u8 = 1 · message_type u8 · flags u8
//! · reserved u8 (written 0, not checked) · payload_length u32 · sequence u32
//! ```
//! `payload_length` must equal the bytes after the header exactly (a packet shorter is
//! `header.truncated`, longer `header.trailing_bytes`). `sequence` counts the messages one
//! side sent on one connection (all channels), from 0; the bot measures downstream loss
//! from its gaps (see the protocol's module docs).
//!
//! # Message bodies (after the header; fixed sizes are whole messages, header included)
//! ```text
//! 0x00 ClientHello   (72) client_version u32 · player_name [32] (UTF-8, NUL-padded)
//!                         · session_token [16] · requested_slot u32 (0-3, 0xFF any)
//! 0x01 ServerHello   (64) server_version u32 · result u8 · assigned_slot u8 · padding u16
//!                         · session_token [16] · tick_rate u32 · current_tick u64
//!                         · map_width u32 · map_height u32 · num_players u32
//! 0x02 Disconnect   (144) reason u8 · message [127] (UTF-8, NUL-terminated)
//! 0x03 Ping          (32) timestamp u64 (µs) · server_tick u64 (0 in Ping)
//! 0x04 Pong          (32) timestamp u64 (the Ping's, echoed) · server_tick u64
//! 0x10 FullSnapshot       uncompressed_size u32 · snapshot_tick u64 · LZ4 block
//!                         (COMPRESSED flag required; the tick precedes the data)
//! 0x11 DeltaSnapshot      base_tick u64 · target_tick u64 · entity_count u16
//!                         · component_count u16 · payload (see `world`)
//! 0x12 SnapshotAck   (28) acked_tick u64 · last_input_seq u32
//! 0x20 InputMessage       input_sequence u32 · client_tick u64 · input_type u8 · input_data
//! 0x21 InputAck      (29) input_sequence u32 · result u8 · applied_tick u64
//! 0x30-0x34 game actions  no layout in the spec: accepted as opaque bodies (the bot sends
//!                         its actions inside InputMessage, which the spec acknowledges)
//! 0x40 ChatMessage        text_len u16 · text (UTF-8, at most 256 bytes)
//! 0x41 ChatBroadcast      sender_slot u8 · text_len u16 · text
//! 0xF0 ServerCommand      opaque
//! 0xFE ErrorMessage (224) error_code u32 · context u32 · message [200] (NUL-terminated)
//! ```
//!
//! # Input data (InputMessage `input_type`; 0x01-0x03 from §6.1, the rest defined here)
//! ```text
//! 0x00 None            (empty)
//! 0x01 PlaceBuilding   building_type_id u32 · grid_x i32 · grid_y i32 · rotation u8 (0-3)
//! 0x02 DesignateZone   zone_type u8 (0-3) · density u8 (0-1) · rect_count u16
//!                      · rect_count × (x i32 · y i32 · width u32 · height u32)
//! 0x03 Demolish        tile_count u16 · tile_count × (grid_x i32 · grid_y i32)
//! 0x04 PurchaseTile    grid_x i32 · grid_y i32
//! 0x05 SetTributeRate  zone_type u8 (0 every zone, 1-3 as DesignateZone) · rate_percent u8
//! 0x06-0x08 PlaceRoad / PlaceConduit / PlacePipe   as Demolish: a tile list
//! 0x09 CancelAction    input_sequence u32 (the action to cancel)
//! ```
//! Counts must match the bytes exactly (`input_message.count_mismatch`).
//!
//! # Compression (§8)
//! FullSnapshot is always compressed with its own layout above. Any other message whose body
//! is over 1024 bytes is sent with the COMPRESSED flag and a body of
//! `uncompressed_size u32 · LZ4 block of the body`. Before decompressing, the stated size is
//! checked against the receiver's limit (16 MiB by default) and against what LZ4 can produce
//! from the bytes present (at most 255 bytes per input byte): a small packet claiming a huge
//! size is `<type>.impossible_size` and nothing is allocated. Decompression writes into a
//! reused buffer of exactly the stated size, and must fill it exactly
//! (`<type>.size_mismatch` otherwise).
//!
//! # Validation order (§13.1; each failure counted as `message.reason`, never a panic)
//! fewer than 16 bytes `header.truncated` · magic `header.bad_magic` · version
//! `header.bad_version` · `payload_length` over 16 MiB `header.oversized` · length against the
//! packet `header.truncated` / `header.trailing_bytes` · unknown type: not an error, the
//! caller counts `unknown_message_type` and ignores it · then the body: fixed sizes
//! `<type>.bad_size`, decompression as above, fields (`truncated`, `trailing_bytes`,
//! `count_mismatch`, `bad_value`).

use thiserror::Error;

use crate::protocol::prelude::wire::{Le, Reader, WireError, Writer};

pub const MAGIC: [u8; 4] = [0x5A, 0x43, 0x4E, 0x54];
pub const PROTOCOL_VERSION: u8 = 1;
pub const HEADER_LEN: usize = 16;
/// §13.1's payload cap.
pub const MAX_PAYLOAD: usize = 16 * 1024 * 1024;
/// Bodies longer than this are LZ4-compressed (§8.1).
pub const COMPRESS_THRESHOLD: usize = 1024;
/// The most bytes an LZ4 block can expand one input byte to (a match length is extended by
/// one 255 per byte), so a stated size beyond `255 × input` is a lie.
pub const LZ4_MAX_RATIO: usize = 255;
/// Largest player_name, Disconnect message and ErrorMessage message fields.
pub const NAME_LEN: usize = 32;
pub const DISCONNECT_TEXT_LEN: usize = 127;
pub const ERROR_TEXT_LEN: usize = 200;
pub const TOKEN_LEN: usize = 16;
/// Longest chat text the reference layout carries.
pub const MAX_CHAT_LEN: usize = 256;
/// `requested_slot` for "any slot".
pub const ANY_SLOT: u32 = 0xFF;

pub const FLAG_COMPRESSED: u8 = 0x01;
pub const FLAG_FRAGMENTED: u8 = 0x02;
pub const FLAG_ACK_REQUEST: u8 = 0x04;
pub const FLAG_RELIABLE: u8 = 0x08;

/// §10's channels.
pub const CHANNEL_ORDERED: u8 = 0;
pub const CHANNEL_BULK: u8 = 1;
pub const CHANNEL_UNRELIABLE: u8 = 2;
pub const CHANNELS: usize = 3;

/// Whole-message sizes of the fixed layouts.
pub const CLIENT_HELLO_LEN: usize = 72;
pub const SERVER_HELLO_LEN: usize = 64;
pub const DISCONNECT_LEN: usize = 144;
pub const PING_LEN: usize = 32;
pub const SNAPSHOT_ACK_LEN: usize = 28;
pub const INPUT_ACK_LEN: usize = 29;
pub const ERROR_MESSAGE_LEN: usize = 224;
/// FullSnapshot's fields before the LZ4 data, and DeltaSnapshot's before its payload.
pub const FULL_PREFIX_LEN: usize = 12;
pub const DELTA_PREFIX_LEN: usize = 20;

mod action;
mod codes;
mod compress;
mod decode;
mod encode;
mod error;
mod header;
pub mod inspect;
mod message;

pub use action::*;
pub use codes::*;
pub use compress::*;
pub use decode::*;
pub use encode::*;
pub use error::*;
pub use header::*;
pub use message::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_sizes_match_the_spec_tables() {
        let mut e = Encoder::new();
        let mut buf = [0u8; 512];
        let msgs = [
            Message::ClientHello {
                client_version: 1,
                player_name: "a",
                session_token: [0; 16],
                requested_slot: ANY_SLOT,
            },
            Message::ServerHello {
                server_version: 1,
                result: 0,
                assigned_slot: 0,
                session_token: [0; 16],
                tick_rate: 20,
                current_tick: 0,
                map_width: 64,
                map_height: 64,
                num_players: 1,
            },
            Message::Disconnect {
                reason: 0,
                message: "bye",
            },
            Message::Ping {
                timestamp: 1,
                server_tick: 0,
            },
            Message::SnapshotAck {
                acked_tick: 1,
                last_input_seq: 2,
            },
            Message::InputAck {
                input_sequence: 1,
                result: 0,
                applied_tick: 3,
            },
            Message::ErrorMessage {
                error_code: 2,
                context: 0,
                message: "x",
            },
        ];
        for m in msgs {
            let n = e.encode(&mut buf, 0, &m).unwrap();
            assert_eq!(Some(n), m.msg_type().fixed_len(), "{m:?}");
            let mut d = Decompressor::default();
            assert_eq!(decode(&buf[..n], &mut d).unwrap().message, Some(m));
        }
    }
}
