//! ENet datagrams as a blind attacker writes them: the acknowledgement of a VERIFY_CONNECT it
//! never read, and the game's first message riding in the same datagram, as a real client
//! sends them (ENet 1.3's layout, big-endian; see `src/transport/enet/wire.rs`).

use std::time::Instant;

use tickswarm::metrics::Recorder;
use tickswarm::protocol::{BotParams, ProtocolName};

/// The first message a bot of `proto` sends once connected (its hello or login), with the
/// channel it goes on.
pub fn first_message(proto: ProtocolName) -> (u8, Vec<u8>) {
    let mut bot = proto
        .default_section()
        .make_bot(BotParams::with_index(0, 7));
    let mut rec = Recorder::new();
    bot.start(Instant::now(), &mut rec);
    let mut buf = vec![0u8; 64 * 1024];
    let t = bot.poll_transmit(&mut buf).expect("a first message");
    (t.channel, buf[..t.len].to_vec())
}

/// To server peer `peer` with session bits `session`: an ACKNOWLEDGE of the server's
/// VERIFY_CONNECT (channel 0xFF, sequence 1) echoing `sent_time`, then, when given, the
/// game's first message as the first reliable command (sequence 1) on its channel.
pub fn forged_verify_ack(
    peer: u16,
    session: u16,
    sent_time: u16,
    message: Option<&(u8, Vec<u8>)>,
) -> Vec<u8> {
    let header = (peer & 0x0FFF) | ((session & 3) << 12);
    let mut d = header.to_be_bytes().to_vec();
    d.extend_from_slice(&[0x01, 0xFF, 0x00, 0x01]); // ACKNOWLEDGE, channel 0xFF, own seq 1
    d.extend_from_slice(&1u16.to_be_bytes()); // acknowledges reliable sequence 1
    d.extend_from_slice(&sent_time.to_be_bytes());
    if let Some((channel, payload)) = message {
        // SEND_RELIABLE with the acknowledge flag, sequence 1, then dataLength.
        d.extend_from_slice(&[0x86, *channel, 0x00, 0x01]);
        d.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        d.extend_from_slice(payload);
    }
    d
}
