//! The City side of the simulation tests: [`tickswarm::protocol::sim::Sim`] over ENet's
//! channels (the reliable channel 0 delivered in order and never lost; the unreliable channel
//! 1 subject to injected loss, delivered sequenced), with bots started at their own times
//! (ENet connects, then the bot starts, as the engine does) and their sessions closed when
//! they end. Every packet on the link is checked as it is sent: at most 1400 bytes (1200
//! unreliable), and each message in it valid and on the channel city.md assigns to its type.
//! The link logs what it dropped and delivered, so the tests compare the bots' measurements
//! with ground truth.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tickswarm::games::city::codec::{self, Dialect, Message, MsgType, MAX_PACKET_SIZE};
use tickswarm::games::city::{CityBot, CityOptions, CityServer, CityServerConfig};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::sim::{self, rule, Dir, Seen};
use tickswarm::protocol::BotParams;

/// The harness over City.
pub type Sim = sim::Sim<CityBot, CityServer>;

/// A test's link, set up by [`new_sim`] (change the loss mid-run with
/// [`CitySim::set_loss`], or `sim.up` and `sim.down`).
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// One-way delay, both ways.
    pub delay: Duration,
    /// Loss on the unreliable channel, bot to server and server to bot (seeded random).
    pub loss_up: f64,
    pub loss_down: f64,
    /// The server's loop wakes late: each wake 0-2 ms after its tick was due, and every
    /// `server_stall_every`-th wake 40-90 ms late, so it catches up several ticks at once
    /// (0 = the server wakes exactly on time).
    pub server_stall_every: u32,
}

/// The link's one generator: every unreliable packet, either way, draws its fate from it in
/// sending order (whatever the loss, so a change of loss mid-run does not shift the draws),
/// and so does each wake of a stalling server.
struct Draws {
    rng: ChaCha8Rng,
    loss_up: f64,
    loss_down: f64,
}

/// A City server and no bot yet on `link`, its random loss and stalls drawn from a generator
/// seeded with 42.
pub fn new_sim(cfg: CityServerConfig, link: Link) -> CitySim {
    new_sim_seeded(cfg, link, 42)
}

/// [`new_sim`] with the link's generator seeded with `seed`.
pub fn new_sim_seeded(cfg: CityServerConfig, link: Link, seed: u64) -> CitySim {
    let dialect = cfg.dialect;
    let t0 = std::time::Instant::now();
    let mut sim = Sim::new(t0, CityServer::new(cfg, t0), Vec::new());
    sim.link = sim::Link::Enet;
    sim.up.delay = link.delay;
    sim.down.delay = link.delay;
    let draws = Rc::new(RefCell::new(Draws {
        rng: ChaCha8Rng::seed_from_u64(seed),
        loss_up: link.loss_up,
        loss_down: link.loss_down,
    }));
    // The harness asks the drop rule about unreliable packets only (ENet resends the others).
    let d = Rc::clone(&draws);
    sim.up.drop = Some(rule(move |_| {
        let mut d = d.borrow_mut();
        let p = d.loss_up;
        d.rng.random_bool(p)
    }));
    let d = Rc::clone(&draws);
    sim.down.drop = Some(rule(move |_| {
        let mut d = d.borrow_mut();
        let p = d.loss_down;
        d.rng.random_bool(p)
    }));
    if link.server_stall_every > 0 {
        let every = u64::from(link.server_stall_every);
        let d = Rc::clone(&draws);
        sim.server_lag = Some(Box::new(move |wakes| {
            let rng = &mut d.borrow_mut().rng;
            let mut late = Duration::from_micros(rng.random_range(0..2_000));
            if wakes % every == 0 {
                late += Duration::from_millis(rng.random_range(40..90));
            }
            Duration::from_millis(1) + late
        }));
    }
    sim.watch = Some(Box::new(move |seen, _: &CityServer, _: &[CityBot]| {
        if let Seen::Sent(m) = seen {
            check_packet(m.bytes, m.channel, m.reliable, dialect);
        }
    }));
    CitySim {
        sim,
        dialect,
        draws,
    }
}

/// What a state machine sent: within the size limit of its reliability, on the channel of its
/// reliability, and every message in it valid and on its type's channel.
fn check_packet(bytes: &[u8], channel: u8, reliable: bool, dialect: Dialect) {
    let limit = if reliable {
        MAX_PACKET_SIZE
    } else {
        codec::MAX_UNRELIABLE_PACKET
    };
    assert!(bytes.len() <= limit, "packet of {} bytes", bytes.len());
    assert_eq!(
        channel,
        if reliable { 0 } else { 1 },
        "channel and reliability"
    );
    for raw in codec::messages(bytes) {
        let raw = raw.expect("state machines write well-framed packets");
        let ty = MsgType::from_u8(raw.type_byte, dialect).expect("known type");
        assert_eq!(
            ty.channel(),
            (channel, reliable),
            "{ty:?} on channel {channel}"
        );
        raw.decode(dialect)
            .expect("state machines write valid messages");
    }
}

/// The harness with the dialect its packets are decoded in, and City's reading of it: bots
/// and recorders by index, and ground truth decoded from the link's log.
pub struct CitySim {
    pub sim: Sim,
    pub dialect: Dialect,
    draws: Rc<RefCell<Draws>>,
}

impl std::ops::Deref for CitySim {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        &self.sim
    }
}

impl std::ops::DerefMut for CitySim {
    fn deref_mut(&mut self) -> &mut Sim {
        &mut self.sim
    }
}

fn ticks<'a>(packets: impl Iterator<Item = &'a [u8]>, dialect: Dialect, up: bool) -> Vec<u32> {
    let mut out = Vec::new();
    for bytes in packets {
        for (_, m) in codec::decode_all(bytes, dialect).unwrap() {
            match m {
                Message::DeltaState(d) if !up => out.push(d.tick),
                Message::PlayerInput(i) if up => out.push(i.tick),
                _ => {}
            }
        }
    }
    out
}

impl CitySim {
    /// The loss on the unreliable channel from now on, bot to server and server to bot.
    pub fn set_loss(&mut self, up: f64, down: f64) {
        let mut d = self.draws.borrow_mut();
        (d.loss_up, d.loss_down) = (up, down);
    }

    pub fn bot(&self, i: usize) -> &CityBot {
        &self.bots[i]
    }

    pub fn rec(&self, i: usize) -> &Recorder {
        &self.recs[i]
    }

    /// A bot that starts `start_after` from now; its index.
    pub fn add_bot(
        &mut self,
        opts: CityOptions,
        params: BotParams,
        start_after: Duration,
    ) -> usize {
        let i = self.sim.add_bot(CityBot::new(params, opts));
        let at = self.elapsed() + start_after;
        self.start_at(i, at);
        i
    }

    /// Ticks of the DeltaStates the link dropped on the way to `bot`.
    pub fn dropped_delta_ticks(&self, bot: usize) -> Vec<u32> {
        let dropped = self.down_to(bot).filter(|r| r.dropped);
        ticks(dropped.map(|r| &r.bytes[..]), self.dialect, false)
    }

    /// Ticks of the PlayerInputs the link dropped from `bot`.
    pub fn dropped_input_ticks(&self, bot: usize) -> Vec<u32> {
        let dropped = self.up_from(bot).filter(|r| r.dropped);
        ticks(dropped.map(|r| &r.bytes[..]), self.dialect, true)
    }

    /// Ticks of the DeltaStates delivered to `bot`, in delivery order.
    pub fn delivered_delta_ticks(&self, bot: usize) -> Vec<u32> {
        let got = self
            .delivered_since(0)
            .into_iter()
            .filter(|(b, _)| *b == bot);
        ticks(got.map(|(_, p)| p), self.dialect, false)
    }

    /// (bot, packet) of every delivery to a bot from position `mark` of `sim.deliveries` on.
    pub fn delivered_since(&self, mark: usize) -> Vec<(usize, &[u8])> {
        self.deliveries[mark..]
            .iter()
            .map(|&idx| &self.log[idx])
            .filter(|r| r.dir == Dir::Down)
            .map(|r| (r.bot, &r.bytes[..]))
            .collect()
    }
}
