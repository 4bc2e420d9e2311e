//! The harness every fuzz target shares. One target per protocol; the input's first byte
//! picks what it drives, so one corpus covers the decoder and both state machines:
//!
//! - `0`: the protocol's decoder(s) on the rest of the input, as one datagram or packet.
//! - `1`: a bot, started, then fed the rest as a series of server datagrams (the bot's own
//!   output is drained between them, and time advances), so the fuzzer can reach the
//!   handshake reply and then everything after it.
//! - `2`: a reference server fed a series of client datagrams from four connections (ENet
//!   protocols get `handle_connect` first, as the transport does), time advancing.
//!
//! A series is framed as `[len u16 LE][bytes]` (then `[dt u8]`, milliseconds to advance), so
//! seeds are real exchanges (see `scripts/fuzz.sh` and `src/bin/seeds.rs`).

use std::time::{Duration, Instant};

use tickswarm::metrics::Recorder;
use tickswarm::protocol::registry::{ServerParams, TransportNeeds};
use tickswarm::protocol::{BotParams, ConnId, ProtocolName};

/// Big enough for any protocol's largest message (City's reliable packets and ZergCity's
/// snapshots are reassembled by ENet before a state machine sees them).
const BUF: usize = 256 * 1024;

/// Split a series into (datagram, milliseconds to advance after it).
pub fn frames(mut data: &[u8]) -> impl Iterator<Item = (&[u8], u8)> {
    std::iter::from_fn(move || {
        if data.len() < 2 {
            return None;
        }
        let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let take = len.min(rest.len());
        let (frame, after) = rest.split_at(take);
        let (dt, after) = match after.split_first() {
            Some((&dt, a)) => (dt, a),
            None => (0, after),
        };
        data = after;
        Some((frame, dt))
    })
}

/// Append one frame to a series (used by the seed generator).
pub fn push_frame(out: &mut Vec<u8>, datagram: &[u8], dt: u8) {
    let len = datagram.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&datagram[..len]);
    out.push(dt);
}

/// Run one fuzz input against `proto`; `decode` is the protocol's decoders.
pub fn run(proto: ProtocolName, data: &[u8], decode: impl Fn(&[u8])) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => decode(rest),
        1 => bot(proto, rest),
        _ => server(proto, rest),
    }
}

fn bot(proto: ProtocolName, series: &[u8]) {
    let section = proto.default_section();
    let mut bot = section.make_bot(BotParams::with_index(0, 1));
    let mut rec = Recorder::new();
    let mut buf = vec![0u8; BUF];
    let mut now = Instant::now();
    bot.start(now, &mut rec);
    for (frame, dt) in frames(series) {
        while bot.poll_transmit(&mut buf).is_some() {}
        bot.handle_datagram(now, frame, &mut rec);
        now += Duration::from_millis(u64::from(dt));
        if bot.poll_timeout().is_some_and(|t| t <= now) {
            bot.handle_timeout(now, &mut rec);
        }
        let _ = bot.poll_relink();
    }
    while bot.poll_transmit(&mut buf).is_some() {}
    bot.stop(now, &mut rec);
    while bot.poll_transmit(&mut buf).is_some() {}
}

fn server(proto: ProtocolName, series: &[u8]) {
    let section = proto.default_section();
    let now0 = Instant::now();
    let mut server = section.make_server(&ServerParams::default(), now0);
    let enet = matches!(section.transport(), TransportNeeds::Enet(_));
    let mut buf = vec![0u8; BUF];
    let mut now = now0;
    let mut connected = [false; 4];
    for (frame, dt) in frames(series) {
        // The first byte of a frame picks the connection (the rest is the datagram).
        let Some((&who, datagram)) = frame.split_first() else {
            continue;
        };
        let i = usize::from(who % 4);
        let conn = ConnId(i as u64);
        if enet && !connected[i] {
            connected[i] = true;
            server.handle_connect(now, conn);
        }
        server.handle_datagram(now, conn, datagram);
        if who & 0x80 != 0 && enet {
            connected[i] = false;
            server.handle_disconnect(now, conn);
        }
        now += Duration::from_millis(u64::from(dt));
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
        }
        while server.poll_transmit(&mut buf).is_some() {}
        while server.poll_close().is_some() {}
    }
}
