//! Inputs the fuzz targets (fuzz/, scripts/fuzz.sh) crashed on, replayed on the crate's
//! simulation harness the way the fuzz harness (fuzz/src/lib.rs) feeds them, so each bug
//! stays fixed. Test builds keep overflow checks, as the fuzz build does.

use std::time::{Duration, Instant};

use tickswarm::api::sim::{Link, Sim};
use tickswarm::protocol::registry::{ServerParams, TransportNeeds};
use tickswarm::protocol::{BotParams, ProtocolName};

/// The fuzz harness's mode 2: a series of `[len u16 LE][conn byte, datagram][dt u8]` frames
/// fed to the protocol's reference server from four connections (the low two bits of the
/// conn byte; ENet protocols connect each before its first datagram, and bit 7 disconnects
/// it after the datagram), the clock jumping `dt` milliseconds after each frame. The four
/// bots only lend their connections: they are never started, and what the server sends them
/// is dropped.
fn replay_server(proto: ProtocolName, input: &[u8]) {
    assert_eq!(input.first(), Some(&2), "a server input");
    let section = proto.default_section();
    let t0 = Instant::now();
    let server = section.make_server(&ServerParams::default(), t0);
    let bots = (0..4).map(|i| section.make_bot(BotParams::with_index(i, 1)));
    let mut sim = Sim::new(t0, server, bots.collect());
    let enet = matches!(section.transport(), TransportNeeds::Enet(_));
    if enet {
        sim.link = Link::Enet;
    }
    for i in 0..4 {
        sim.detach(i);
    }
    let mut connected = [false; 4];
    let mut data = &input[1..];
    while data.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let (frame, after) = rest.split_at(len.min(rest.len()));
        let (dt, after) = after.split_first().map_or((0, after), |(&d, a)| (d, a));
        data = after;
        let Some((&who, datagram)) = frame.split_first() else {
            continue;
        };
        let i = usize::from(who % 4);
        if enet && !connected[i] {
            connected[i] = true;
            sim.transport_connect(i);
        }
        sim.inject_to_server(i, datagram);
        if who & 0x80 != 0 && enet {
            connected[i] = false;
            sim.transport_disconnect(i);
        }
        sim.jump(Duration::from_millis(u64::from(dt)));
    }
}

/// Found by the zergcity target in its first 10 s: a ZoneBuild rectangle whose
/// `width × height` overflowed u32 (a panic with overflow checks; in release builds the area
/// check wrapped and passed). The area is now computed in u64 and refused
/// (`InvalidPosition`).
#[test]
fn zergcity_zone_rectangle_area_cannot_overflow() {
    replay_server(
        ProtocolName::ZergCity,
        include_bytes!("fuzz_regressions/zergcity-zone-area-overflow.bin"),
    );
}
