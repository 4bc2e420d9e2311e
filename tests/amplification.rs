//! A reference server must not amplify: an address that sends a handshake and never answers
//! (a forged source, the victim of a reflection attack) receives no more bytes than were sent
//! in its name. See `src/protocol/admission.rs` and README "Security".
//!
//! Each protocol's server runs behind the server transport the engine gives it (raw UDP or
//! ENet), sans-IO, for 5 s of simulated time in 1 ms steps; the handshake is the first
//! datagram a real bot (or, for ENet, a real ENet client) sends. The factor is bytes sent to
//! the victim ÷ bytes received from it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tickswarm::engine::transports::server_transport;
use tickswarm::metrics::Recorder;
use tickswarm::protocol::registry::{ServerParams, TransportNeeds};
use tickswarm::protocol::{BotParams, ProtocolName, Server};
use tickswarm::transport::EnetClient;

const RUN: Duration = Duration::from_secs(5);

fn victim(i: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 9], 40_000 + i))
}

/// The first datagram a client of `proto` sends: the bot's hello for raw UDP, ENet's CONNECT
/// for ENet protocols.
fn handshake(proto: ProtocolName, t0: Instant, server: SocketAddr) -> Vec<u8> {
    let section = proto.default_section();
    let mut buf = vec![0u8; 64 * 1024];
    match section.transport() {
        TransportNeeds::Udp => {
            let mut bot = section.make_bot(BotParams::with_index(0, 7));
            let mut rec = Recorder::new();
            bot.start(t0, &mut rec);
            let t = bot.poll_transmit(&mut buf).expect("a hello");
            buf[..t.len].to_vec()
        }
        TransportNeeds::Enet(e) => {
            let mut c = EnetClient::connect(t0, server, e.channels).expect("enet client");
            c.flush(t0);
            let (_, n) = c.poll_transmit(&mut buf).expect("a CONNECT");
            buf[..n].to_vec()
        }
        // GameNetworkingSockets answers a connect request with a stateless challenge the
        // client must echo (Valve's own anti-spoofing), and no protocol defaults to it.
        TransportNeeds::Gns => panic!("{proto}: default sections run over UDP or ENet"),
    }
}

/// Bytes in and out for `sources` victims that each send the handshake every `repeat`
/// (once when `None`) and never answer.
fn measure(proto: ProtocolName, sources: u16, repeat: Option<Duration>) -> (u64, u64) {
    let t0 = Instant::now();
    let section = proto.default_section();
    let params = ServerParams::default();
    let mut server: Box<dyn Server> = section.make_server(&params, t0);
    let bind = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut tr = server_transport(section.transport(), bind, 100, false, t0).expect("transport");
    let hs = handshake(proto, t0, SocketAddr::from(([127, 0, 0, 1], 7777)));
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    let mut buf = vec![0u8; 64 * 1024];
    let mut next_send = Some(Duration::ZERO);
    let step = Duration::from_millis(1);
    let mut at = Duration::ZERO;
    while at <= RUN {
        let now = t0 + at;
        if next_send.is_some_and(|s| s <= at) {
            for i in 0..sources {
                tr.on_datagram(now, victim(i), &hs, server.as_mut());
                bytes_in += hs.len() as u64;
            }
            next_send = repeat.map(|r| at + r);
        }
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
        }
        tr.service(now, server.as_mut());
        while let Some((to, n)) = tr.poll_datagram(now, server.as_mut(), &mut buf) {
            assert!((0..sources).any(|i| victim(i) == to), "only victims exist");
            bytes_out += n as u64;
        }
        at += step;
    }
    (bytes_in, bytes_out)
}

fn factor(proto: ProtocolName, sources: u16, repeat: Option<Duration>) -> f64 {
    let (i, o) = measure(proto, sources, repeat);
    let f = o as f64 / i as f64;
    eprintln!("{proto}: {sources} source(s), repeat {repeat:?}: {o} bytes out / {i} in = {f:.3}");
    f
}

/// One forged handshake, as the issue measured it (cafe 360×, rtype 1,239×, City 5.5× before).
#[test]
fn one_forged_handshake_is_answered_with_fewer_bytes_than_it_had() {
    for &proto in ProtocolName::ALL {
        let f = factor(proto, 1, None);
        assert!(f <= 1.0, "{proto}: amplification factor {f:.3}");
        assert!(
            f > 0.0,
            "{proto}: the handshake is answered (a real client needs that)"
        );
    }
}

/// A source repeating its forged handshake every 100 ms, and eight sources at once: replies
/// are capped per source, so the factor only falls.
#[test]
fn repeated_and_many_forged_handshakes_stay_below_one() {
    for &proto in ProtocolName::ALL {
        let f = factor(proto, 1, Some(Duration::from_millis(100)));
        assert!(f <= 1.0, "{proto}, repeated: factor {f:.3}");
        let f = factor(proto, 8, None);
        assert!(f <= 1.0, "{proto}, 8 sources: factor {f:.3}");
    }
}
