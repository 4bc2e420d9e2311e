//! The ZergCity side of the simulation tests: [`tickswarm::protocol::sim::Sim`] over ENet's
//! channels (0 and 1 reliable: never lost, in order; 2 unreliable: the drop and hold rules
//! apply, delivered sequenced unless `sim.sequenced` is off), plus what only ZergCity knows,
//! taken as the run goes through [`Sim::watch`]: every message on the channel its
//! reliability says (channel 2 and only channel 2 is unreliable), the server's world at every
//! tick, the baseline of every delta the server sends against the client's acknowledged tick
//! then, and every state a bot applies checked against the server's world of that tick.
//!
//! A bot that asks for a relink gets a new connection id: the server sees the old one
//! disconnect and the bot's `handle_relinked` follows one round trip later (the harness's
//! ENet link).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tickswarm::games::zergcity::codec::{self, Decompressor, Message};
use tickswarm::games::zergcity::world::World;
use tickswarm::games::zergcity::{
    ZergCityBot, ZergCityOptions, ZergCityServer, ZergCityServerConfig,
};
use tickswarm::protocol::sim::{Dir, Link, Seen};
use tickswarm::protocol::BotParams;

/// The harness over ZergCity.
pub type Sim = tickswarm::protocol::sim::Sim<ZergCityBot, ZergCityServer>;

/// Ground truth taken from the server as the run goes.
#[derive(Default)]
pub struct Truth {
    /// The server's world after each tick.
    pub worlds: BTreeMap<u64, World>,
    /// (bot, base tick, target tick) of each delta the server sent, with the server's acked
    /// tick of that client when it sent it.
    pub delta_bases: Vec<(usize, u64, u64, Option<u64>)>,
}

/// A ZergCity server on the harness's ENet link with `delay` each way, no bot yet, and the
/// checks above installed.
pub fn new_sim(cfg: ZergCityServerConfig, delay: Duration) -> (Sim, Rc<RefCell<Truth>>) {
    let t0 = Instant::now();
    let mut sim = Sim::new(t0, ZergCityServer::new(cfg, t0), Vec::new());
    sim.link = Link::Enet;
    sim.up.delay = delay;
    sim.down.delay = delay;
    let truth = Rc::new(RefCell::new(Truth::default()));
    let seen_by_test = Rc::clone(&truth);
    let mut last_tick = sim.server.tick();
    let mut before: HashMap<usize, Option<u64>> = HashMap::new();
    sim.watch = Some(Box::new(move |seen, server: &ZergCityServer, bots| {
        let mut truth = seen_by_test.borrow_mut();
        match seen {
            Seen::Sent(m) => {
                assert_eq!(
                    m.channel == codec::CHANNEL_UNRELIABLE,
                    !m.reliable,
                    "channel 2 and only channel 2 is unreliable"
                );
                let mut dec = Decompressor::default();
                if let (
                    Dir::Down,
                    Ok(codec::Decoded {
                        message: Some(Message::DeltaSnapshot(d)),
                        ..
                    }),
                ) = (m.dir, codec::decode(m.bytes, &mut dec))
                {
                    let acked = server.acked_tick(m.conn);
                    truth
                        .delta_bases
                        .push((m.bot, d.base_tick, d.target_tick, acked));
                }
            }
            Seen::ServerTimeout => {
                if server.tick() != last_tick {
                    last_tick = server.tick();
                    truth.worlds.insert(last_tick, server.world().clone());
                }
            }
            Seen::BotReceiving(i) => {
                before.insert(i, bots[i].newest_tick());
            }
            Seen::BotReceived(i) => {
                let after = bots[i].newest_tick();
                if Some(after) != before.get(&i).copied() {
                    if let Some(t) = after {
                        let applied = bots[i].world().expect("the newest state is held");
                        assert_eq!(
                            Some(applied),
                            truth.worlds.get(&t),
                            "bot {i} applied tick {t} differently from the server"
                        );
                    }
                }
            }
        }
    }));
    (sim, truth)
}

/// A bot whose ENet session is up now, started now; its index.
pub fn add_bot(sim: &mut Sim, opts: ZergCityOptions, params: BotParams) -> usize {
    let i = sim.add_bot(ZergCityBot::new(params, opts));
    sim.transport_connect(i);
    sim.start(i);
    i
}
