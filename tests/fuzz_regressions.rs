//! Inputs the fuzz targets (fuzz/, scripts/fuzz.sh) crashed on, replayed the way the harness
//! replays them (fuzz/src/lib.rs), so each bug stays fixed. Test builds keep overflow checks,
//! as the fuzz build does.

use std::time::{Duration, Instant};

use tickswarm::protocol::registry::{ServerParams, TransportNeeds};
use tickswarm::protocol::{ConnId, ProtocolName};

/// The harness's mode 2: a series of `[len u16 LE][conn byte, datagram][dt u8]` frames fed to
/// the protocol's reference server.
fn replay_server(proto: ProtocolName, input: &[u8]) {
    assert_eq!(input.first(), Some(&2), "a server input");
    let section = proto.default_section();
    let t0 = Instant::now();
    let mut server = section.make_server(&ServerParams::default(), t0);
    let enet = matches!(section.transport(), TransportNeeds::Enet(_));
    let mut buf = vec![0u8; 256 * 1024];
    let mut now = t0;
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
            server.handle_connect(now, ConnId(i as u64));
        }
        server.handle_datagram(now, ConnId(i as u64), datagram);
        if who & 0x80 != 0 && enet {
            connected[i] = false;
            server.handle_disconnect(now, ConnId(i as u64));
        }
        now += Duration::from_millis(u64::from(dt));
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
        }
        while server.poll_transmit(&mut buf).is_some() {}
        while server.poll_close().is_some() {}
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
