//! The ZergCity reference server: one four-player game per instance, a sans-IO state machine
//! keyed by [`ConnId`].
//!
//! # The game
//! A 64 × 64 map (land, water where a seeded pattern puts it, hills), each slot with its
//! quadrant. Players buy tiles (Parcel entities), and on their own free parcels place
//! buildings, zone lots (one entity per rectangle), roads, conduits and pipes. Every tick a
//! twentieth of the structures grow (population, development, building level, energy and
//! fluid demand and supply), and once a second each player's treasury collects tribute from
//! its population, so every delta carries real component changes.
//!
//! # Decisions where zergcity.md is silent (README's protocol notes repeat them)
//! - Inputs are validated and applied on arrival and acknowledged at once on channel 0:
//!   `applied_tick` is the next tick (the first snapshot that shows the change), 0 when
//!   rejected. Every input is acknowledged, a rejected one with its result code, so upstream
//!   loss is measurable. More than 60 inputs in a one-second window: result 6 (rate limited),
//!   not applied. Costs: parcel 200, building 500, zone lot 50 per rectangle, road 10,
//!   conduit and pipe 20 per tile; 16 parcels and 32 structures per player, beyond that
//!   result 5 (requirements not met). A tribute rate above 20 % is result 5. CancelAction
//!   and None succeed and change nothing (actions apply at once, nothing is pending).
//! - Validation order of an action: bounds (1 invalid position) · terrain (4 blocked) ·
//!   ownership (3 not owner) · occupancy (1) · caps (5) · funds (2).
//! - Snapshots: each tick, each playing client gets one of: a FullSnapshot (on join, after a
//!   reconnection, or when its newest acknowledged tick is more than `max_delta_age` ticks
//!   old or no longer in the 32-tick history: a fallback, counted), nothing (while a
//!   FullSnapshot is in flight and not yet acknowledged), or a DeltaSnapshot from its newest
//!   acknowledged tick to now. There is no FullSnapshot request message, so §13.2's
//!   "1 per 30 seconds" has nothing to limit.
//! - Slots: a fifth player gets ServerHello result 1 (server full) and the session is closed.
//!   A player whose ENet session drops (or who falls silent for `client_timeout`) keeps the
//!   slot for its token's life; a Disconnect from the client frees it at once and removes the
//!   player's entities. Tokens expire an hour after the player's last message. A ClientHello
//!   with a live token gets the same slot back (its old session, if still open, is closed); a
//!   dead or unknown token gets a new slot if one is free (§13.3), else result 1.
//! - A client whose packets fail validation 10 times gets Disconnect(4 protocol error). A
//!   ClientHello with another protocol version is answered with ServerHello result 2 and
//!   the session is closed. The game action types 0x30-0x34 and ServerCommand have no layout
//!   and are counted and ignored (`action_message_ignored`), as are unknown types.
//! - Chat: a ChatMessage goes to every playing client of the game (the sender too) as
//!   ChatBroadcast with the sender's slot.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{
    self, Action, DecodeError, Decompressor, Encoder, HelloResult, InputResult, Message, MsgType,
    DISCONNECT_PROTOCOL_ERROR, DISCONNECT_TIMEOUT, ERROR_INVALID_MESSAGE, TOKEN_LEN,
};
use super::world::{self, Entity, Metadata, PlayerInfo, World};
use super::{MAX_PLAYERS, TICK_RATE};
use crate::protocol::prelude::session::{SessionTable, TickClock};
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit, MAX_MESSAGE};

/// Ticks of world history kept for deltas.
pub const HISTORY: usize = 32;
const PARCEL_COST: i64 = 200;
const BUILDING_COST: i64 = 500;
const ZONE_COST: i64 = 50;
const MAX_TRIBUTE: u8 = 20;
const MAX_ZONE_RECTS: usize = 4;
const MAX_ZONE_AREA: u32 = 16;
const MAX_TILES_PER_ACTION: usize = 16;

#[derive(Debug, Clone)]
pub struct ZergCityServerConfig {
    /// Players per game (slots 0..max_players, at most 4).
    pub max_players: usize,
    pub tick_rate: u32,
    pub map_width: u32,
    pub map_height: u32,
    /// A session token lives this long after the player's last message (§13.3: an hour).
    pub token_ttl: Duration,
    pub max_inputs_per_second: u32,
    /// Invalid messages after which a client is disconnected (§13.2: 10).
    pub max_invalid_messages: u32,
    pub client_timeout: Duration,
    /// Deltas only from an acknowledged tick at most this many ticks old; else a full
    /// snapshot.
    pub max_delta_age: u64,
    pub starting_funds: i64,
    pub max_parcels: usize,
    pub max_structures: usize,
    pub server_version: u32,
    pub seed: u64,
}

impl Default for ZergCityServerConfig {
    fn default() -> Self {
        Self {
            max_players: MAX_PLAYERS,
            tick_rate: TICK_RATE,
            map_width: 64,
            map_height: 64,
            token_ttl: Duration::from_secs(3600),
            max_inputs_per_second: 60,
            max_invalid_messages: 10,
            client_timeout: Duration::from_secs(10),
            max_delta_age: 24,
            starting_funds: 20_000,
            max_parcels: 16,
            max_structures: 32,
            server_version: 1,
            seed: 0x2e2c_17e0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Hello,
    Playing,
    /// Refused or kicked: everything is ignored until the transport closes it.
    Done,
}

#[derive(Debug, Clone)]
struct Client {
    stage: Stage,
    slot: Option<usize>,
    seq_out: u32,
    acked: Option<u64>,
    full_pending: Option<u64>,
    window_start: Instant,
    inputs_in_window: u32,
    invalid: u32,
}

#[derive(Debug, Clone)]
struct Player {
    name: String,
    token: [u8; TOKEN_LEN],
    token_expires: Instant,
    conn: Option<ConnId>,
    entity: u32,
    funds: i64,
    tribute: u8,
    parcels: usize,
    structures: usize,
}

#[derive(Debug, Clone)]
enum Out {
    Hello {
        result: HelloResult,
        slot: u8,
        token: [u8; TOKEN_LEN],
        players: u32,
    },
    Disconnect {
        reason: u8,
        text: &'static str,
    },
    Error {
        code: u32,
        text: &'static str,
    },
    Pong {
        timestamp: u64,
    },
    Full {
        tick: u64,
    },
    Delta {
        base: u64,
        target: u64,
    },
    InputAck {
        seq: u32,
        result: InputResult,
        applied: u64,
    },
    Chat {
        sender: u8,
        text: Arc<str>,
    },
}

pub struct ZergCityServer {
    cfg: ZergCityServerConfig,
    sessions: SessionTable<Client>,
    players: [Option<Player>; MAX_PLAYERS],
    world: World,
    history: Vec<World>,
    tick: u64,
    clock: TickClock,
    terrain: Vec<u8>,
    land_value: Vec<u8>,
    /// Parcel owner per tile (0 none, else slot + 1).
    owner: Vec<u8>,
    /// Structure entity per tile (0 none).
    occupant: Vec<u32>,
    next_entity: u32,
    rng: ChaCha8Rng,
    out: VecDeque<(ConnId, u32, Out)>,
    dec: Decompressor,
    enc: Encoder,
    scratch: Vec<u8>,
    expired: Vec<usize>,
    /// Snapshot decisions of one tick (reused: nothing allocated per tick).
    sends: Vec<(ConnId, Out)>,
    stats: ServerStats,
}

fn pos_bytes(x: i32, y: i32, elevation: i32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..4].copy_from_slice(&x.to_le_bytes());
    b[4..8].copy_from_slice(&y.to_le_bytes());
    b[8..12].copy_from_slice(&elevation.to_le_bytes());
    b
}

fn ownership_bytes(owner: u8, tick: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0] = owner;
    b[1] = 1; // owned
    b[4..12].copy_from_slice(&tick.to_le_bytes());
    b
}

fn u32_pair(a: u32, b: u32) -> [u8; 8] {
    let mut o = [0u8; 8];
    o[..4].copy_from_slice(&a.to_le_bytes());
    o[4..].copy_from_slice(&b.to_le_bytes());
    o
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0)
}

impl ZergCityServer {
    pub fn new(cfg: ZergCityServerConfig, now: Instant) -> Self {
        let (w, h) = (cfg.map_width as usize, cfg.map_height as usize);
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let terrain: Vec<u8> = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as i32, (i / w) as i32);
                // A river along a diagonal band and scattered hills.
                if (x - y).abs() <= 1 && x % 16 > 3 {
                    1
                } else if (x * 7 + y * 13) % 29 == 0 {
                    2
                } else {
                    0
                }
            })
            .collect();
        let land_value = (0..w * h)
            .map(|i| ((i % w) as u32 * 3 + (i / w) as u32 * 5 + rng.random_range(0..8)) as u8)
            .collect();
        let interval = Duration::from_secs(1) / cfg.tick_rate.max(1);
        Self {
            history: vec![World::with_capacity(256); HISTORY],
            clock: TickClock::new(now, interval),
            terrain,
            land_value,
            owner: vec![0; w * h],
            occupant: vec![0; w * h],
            next_entity: 1,
            rng,
            sessions: SessionTable::new(),
            players: Default::default(),
            world: World::with_capacity(256),
            tick: 0,
            out: VecDeque::with_capacity(64),
            dec: Decompressor::new(64 * 1024),
            enc: Encoder::new(),
            scratch: vec![0; 1024 * 1024],
            expired: Vec::new(),
            sends: Vec::with_capacity(MAX_PLAYERS + 1),
            stats: ServerStats::default(),
            cfg,
        }
    }

    pub fn config(&self) -> &ZergCityServerConfig {
        &self.cfg
    }

    pub fn tick(&self) -> u64 {
        self.tick
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    /// The player slot of a connection.
    pub fn slot_of(&self, conn: ConnId) -> Option<usize> {
        self.sessions.by_conn(conn)?.state.slot
    }

    /// The newest tick `conn` acknowledged (the baseline its next delta starts from).
    pub fn acked_tick(&self, conn: ConnId) -> Option<u64> {
        self.sessions.by_conn(conn)?.state.acked
    }

    /// Players holding a slot (connected or away with a live token).
    pub fn players(&self) -> usize {
        self.players.iter().flatten().count()
    }

    fn idx(&self, x: i32, y: i32) -> Option<usize> {
        let (w, h) = (self.cfg.map_width as i32, self.cfg.map_height as i32);
        ((0..w).contains(&x) && (0..h).contains(&y)).then(|| (y * w + x) as usize)
    }

    fn queue(&mut self, conn: ConnId, o: Out) {
        let seq = match self.sessions.slot_of(conn) {
            Some(s) => match self.sessions.state_mut(s) {
                Some(c) => {
                    let q = c.seq_out;
                    c.seq_out = c.seq_out.wrapping_add(1);
                    q
                }
                None => 0,
            },
            None => 0,
        };
        self.out.push_back((conn, seq, o));
    }

    fn session_for(&mut self, now: Instant, conn: ConnId) -> usize {
        let slot = self.sessions.insert(
            conn,
            now,
            Client {
                stage: Stage::Hello,
                slot: None,
                seq_out: 0,
                acked: None,
                full_pending: None,
                window_start: now,
                inputs_in_window: 0,
                invalid: 0,
            },
        );
        // ENet's handshake proved the address before the server heard of the peer
        // (crate::protocol::prelude::admission).
        self.sessions.prove(slot);
        slot
    }

    /// Turn a session away: its last message is queued, then the transport closes it.
    fn end_session(&mut self, s: usize) {
        if let Some(c) = self.sessions.state_mut(s) {
            c.stage = Stage::Done;
        }
        if let Some(sess) = self.sessions.remove(s) {
            if let Some(p) = sess.state.slot.and_then(|p| self.players[p].as_mut()) {
                if p.conn == Some(sess.conn) {
                    p.conn = None;
                }
            }
        }
    }

    fn invalid(&mut self, s: usize, e: DecodeError) {
        self.stats.dropped.add2(e.message, e.reason, 1);
        let Some(c) = self.sessions.state_mut(s) else {
            return;
        };
        c.invalid += 1;
        if c.invalid >= self.cfg.max_invalid_messages {
            let conn = self.sessions.get(s).map(|x| x.conn);
            if let Some(conn) = conn {
                self.stats.events.add("kicked_invalid_messages", 1);
                self.queue(
                    conn,
                    Out::Error {
                        code: ERROR_INVALID_MESSAGE,
                        text: "too many invalid messages",
                    },
                );
                self.queue(
                    conn,
                    Out::Disconnect {
                        reason: DISCONNECT_PROTOCOL_ERROR,
                        text: "too many invalid messages",
                    },
                );
            }
            self.end_session(s);
        }
    }

    fn players_connected(&self) -> u32 {
        self.players
            .iter()
            .flatten()
            .filter(|p| p.conn.is_some())
            .count() as u32
    }

    fn refuse(&mut self, s: usize, conn: ConnId, result: HelloResult) {
        self.stats.refused += 1;
        self.stats.events.add2("refused", result.name(), 1);
        let players = self.players_connected();
        self.queue(
            conn,
            Out::Hello {
                result,
                slot: 0,
                token: [0; TOKEN_LEN],
                players,
            },
        );
        self.end_session(s);
    }

    fn on_hello(
        &mut self,
        now: Instant,
        s: usize,
        conn: ConnId,
        name: &str,
        token: [u8; 16],
        req: u32,
    ) {
        let stage = self.sessions.state(s).map(|c| c.stage);
        if stage != Some(Stage::Hello) {
            self.stats.events.add("duplicate_hello", 1);
            return;
        }
        // A live token takes its slot back.
        let by_token = (token != [0; TOKEN_LEN])
            .then(|| {
                self.players.iter().position(|p| {
                    p.as_ref()
                        .is_some_and(|p| p.token == token && p.token_expires > now)
                })
            })
            .flatten();
        if token != [0; TOKEN_LEN] && by_token.is_none() {
            self.stats.events.add("invalid_token", 1);
        }
        let slot = match by_token {
            Some(p) => {
                let old = self.players[p].as_ref().and_then(|pl| pl.conn);
                if let Some(old) = old.filter(|&o| o != conn) {
                    if let Some(os) = self.sessions.slot_of(old) {
                        self.end_session(os);
                    }
                }
                self.stats.events.add("reconnect_restored", 1);
                p
            }
            None => {
                let free = |p: usize| p < self.cfg.max_players && self.players[p].is_none();
                let want = usize::try_from(req).ok().filter(|&r| free(r));
                match want.or_else(|| (0..self.cfg.max_players).find(|&p| free(p))) {
                    Some(p) => {
                        self.join(now, p, name);
                        p
                    }
                    None => return self.refuse(s, conn, HelloResult::ServerFull),
                }
            }
        };
        let Some(p) = self.players[slot].as_mut() else {
            return;
        };
        p.conn = Some(conn);
        p.token_expires = now + self.cfg.token_ttl;
        let token = p.token;
        if let Some(c) = self.sessions.state_mut(s) {
            c.stage = Stage::Playing;
            c.slot = Some(slot);
            c.acked = None;
            c.full_pending = None;
        }
        self.stats.accepted += 1;
        let players = self.players_connected();
        self.queue(
            conn,
            Out::Hello {
                result: HelloResult::Accepted,
                slot: slot as u8,
                token,
                players,
            },
        );
    }

    /// A new player in slot `p`: a token and the player's entity.
    fn join(&mut self, now: Instant, p: usize, name: &str) {
        let mut token = [0u8; TOKEN_LEN];
        self.rng.fill_bytes(&mut token);
        let id = self.alloc_entity();
        let mut e = Entity::new(id, world::ARCH_PLAYER);
        e.set(
            world::COMP_OWNERSHIP,
            &ownership_bytes(p as u8 + 1, self.tick),
        );
        self.world.insert(e);
        self.players[p] = Some(Player {
            name: name.chars().take(32).collect(),
            token,
            token_expires: now + self.cfg.token_ttl,
            conn: None,
            entity: id,
            funds: self.cfg.starting_funds,
            tribute: 10,
            parcels: 0,
            structures: 0,
        });
        self.write_treasury(p);
    }

    /// Free slot `p` for good: the player's entities go with it.
    fn leave(&mut self, p: usize) {
        let Some(pl) = self.players[p].take() else {
            return;
        };
        let owner = p as u8 + 1;
        let ids: Vec<u32> = self
            .world
            .entities
            .iter()
            .filter(|e| e.owner() == Some(owner))
            .map(|e| e.id)
            .collect();
        for id in ids {
            self.destroy(id);
        }
        self.world.remove(pl.entity);
        for o in self.owner.iter_mut().filter(|o| **o == owner) {
            *o = 0;
        }
    }

    fn alloc_entity(&mut self) -> u32 {
        let id = self.next_entity;
        self.next_entity = self.next_entity.wrapping_add(1).max(1);
        id
    }

    fn write_treasury(&mut self, p: usize) {
        let Some(pl) = self.players[p].as_ref() else {
            return;
        };
        let owner = p as u8 + 1;
        let population: u32 = self
            .world
            .entities
            .iter()
            .filter(|e| e.owner() == Some(owner) && e.archetype != world::ARCH_PLAYER)
            .filter_map(|e| e.get(world::COMP_POPULATION).map(|b| read_u32(b, 0)))
            .sum();
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&pl.funds.to_le_bytes());
        b[8] = pl.tribute;
        b[12..16].copy_from_slice(&population.to_le_bytes());
        let id = pl.entity;
        if let Some(e) = self.world.get_mut(id) {
            e.set(world::COMP_TREASURY, &b);
        }
    }

    /// Remove a structure or parcel and free the tiles it covered.
    fn destroy(&mut self, id: u32) {
        let Some(e) = self.world.get(id).copied() else {
            return;
        };
        let owner = e.owner().unwrap_or(0);
        let slot = usize::from(owner).checked_sub(1);
        if let Some((x, y)) = e.position() {
            let (w, h) = match e.get(world::COMP_ZONE) {
                Some(z) => (i32::from(z[2]), i32::from(z[3])),
                None => (1, 1),
            };
            if e.archetype == world::ARCH_PARCEL {
                if let Some(i) = self.idx(x, y) {
                    self.owner[i] = 0;
                }
            } else {
                for ty in y..y + h {
                    for tx in x..x + w {
                        if let Some(i) = self.idx(tx, ty) {
                            if self.occupant[i] == id {
                                self.occupant[i] = 0;
                            }
                        }
                    }
                }
            }
        }
        if let Some(pl) = slot
            .and_then(|s| self.players.get_mut(s))
            .and_then(Option::as_mut)
        {
            if e.archetype == world::ARCH_PARCEL {
                pl.parcels = pl.parcels.saturating_sub(1);
            } else {
                pl.structures = pl.structures.saturating_sub(1);
            }
        }
        self.world.remove(id);
    }

    /// Check one tile for a structure of player `p`.
    fn check_build_tile(&self, p: usize, x: i32, y: i32) -> Result<usize, InputResult> {
        let i = self.idx(x, y).ok_or(InputResult::InvalidPosition)?;
        if self.terrain[i] == 1 {
            return Err(InputResult::BlockedByTerrain);
        }
        if self.owner[i] != p as u8 + 1 {
            return Err(InputResult::NotOwner);
        }
        if self.occupant[i] != 0 {
            return Err(InputResult::InvalidPosition);
        }
        Ok(i)
    }

    fn pay(&mut self, p: usize, cost: i64, structures: usize) -> Result<(), InputResult> {
        let pl = self.players[p].as_mut().ok_or(InputResult::NotOwner)?;
        if pl.structures + structures > self.cfg.max_structures {
            return Err(InputResult::RequirementsNotMet);
        }
        if pl.funds < cost {
            return Err(InputResult::InsufficientFunds);
        }
        pl.funds -= cost;
        pl.structures += structures;
        Ok(())
    }

    fn spawn_structure(
        &mut self,
        p: usize,
        archetype: u32,
        x: i32,
        y: i32,
        comps: &[(u16, &[u8])],
    ) -> u32 {
        let id = self.alloc_entity();
        let mut e = Entity::new(id, archetype);
        let elev = self
            .idx(x, y)
            .map_or(0, |i| i32::from(self.terrain[i] == 2) * 3);
        e.set(world::COMP_POSITION, &pos_bytes(x, y, elev));
        e.set(
            world::COMP_OWNERSHIP,
            &ownership_bytes(p as u8 + 1, self.tick),
        );
        for (t, b) in comps {
            e.set(*t, b);
        }
        self.world.insert(e);
        id
    }

    /// Validate and apply one action for player `p`.
    fn apply(&mut self, p: usize, a: &Action<'_>) -> InputResult {
        match self.try_apply(p, a) {
            Ok(()) => InputResult::Success,
            Err(r) => r,
        }
    }

    fn try_apply(&mut self, p: usize, a: &Action<'_>) -> Result<(), InputResult> {
        let owner = p as u8 + 1;
        match *a {
            Action::None | Action::CancelAction { .. } => Ok(()),
            // One rate for every zone type: the reference city does not tax zones apart.
            Action::SetTributeRate { rate, .. } => {
                if rate > MAX_TRIBUTE {
                    return Err(InputResult::RequirementsNotMet);
                }
                if let Some(pl) = self.players[p].as_mut() {
                    pl.tribute = rate;
                }
                self.write_treasury(p);
                Ok(())
            }
            Action::PurchaseTile { x, y } => {
                let i = self.idx(x, y).ok_or(InputResult::InvalidPosition)?;
                if self.terrain[i] == 1 {
                    return Err(InputResult::BlockedByTerrain);
                }
                match self.owner[i] {
                    0 => {}
                    o if o == owner => return Err(InputResult::InvalidPosition),
                    _ => return Err(InputResult::NotOwner),
                }
                let pl = self.players[p].as_mut().ok_or(InputResult::NotOwner)?;
                if pl.parcels >= self.cfg.max_parcels {
                    return Err(InputResult::RequirementsNotMet);
                }
                if pl.funds < PARCEL_COST {
                    return Err(InputResult::InsufficientFunds);
                }
                pl.funds -= PARCEL_COST;
                pl.parcels += 1;
                self.owner[i] = owner;
                self.spawn_structure(p, world::ARCH_PARCEL, x, y, &[]);
                self.write_treasury(p);
                Ok(())
            }
            Action::PlaceBuilding {
                building_type,
                x,
                y,
                ..
            } => {
                let i = self.check_build_tile(p, x, y)?;
                if !(1..=4).contains(&building_type) {
                    return Err(InputResult::RequirementsNotMet);
                }
                self.pay(p, BUILDING_COST, 1)?;
                let mut b = [0u8; 16];
                b[0..4].copy_from_slice(&building_type.to_le_bytes());
                b[4] = 1; // under construction
                b[5] = 1;
                b[8..12].copy_from_slice(&(self.tick as u32).to_le_bytes());
                let id = self.spawn_structure(
                    p,
                    world::ARCH_BUILDING,
                    x,
                    y,
                    &[
                        (world::COMP_BUILDING, &b),
                        (world::COMP_ENERGY, &u32_pair(0, 0)),
                        (world::COMP_POPULATION, &u32_pair(0, 0)),
                    ],
                );
                self.occupant[i] = id;
                self.write_treasury(p);
                Ok(())
            }
            Action::DesignateZoneWire {
                zone_type,
                density,
                rects,
            } => {
                let n = rects.len_in(16);
                if n == 0 || n > MAX_ZONE_RECTS {
                    return Err(InputResult::InvalidPosition);
                }
                if zone_type == 0 {
                    // De-zone: remove the player's zone lots whose origin is in a rectangle.
                    let mut ids = Vec::new();
                    for r in rects.rects() {
                        for e in &self.world.entities {
                            if e.archetype == world::ARCH_ZONE && e.owner() == Some(owner) {
                                if let Some((x, y)) = e.position() {
                                    let inside = x >= r.x
                                        && y >= r.y
                                        && i64::from(x) < i64::from(r.x) + i64::from(r.width)
                                        && i64::from(y) < i64::from(r.y) + i64::from(r.height);
                                    if inside {
                                        ids.push(e.id);
                                    }
                                }
                            }
                        }
                    }
                    if ids.is_empty() {
                        return Err(InputResult::InvalidPosition);
                    }
                    for id in ids {
                        self.destroy(id);
                    }
                    self.write_treasury(p);
                    return Ok(());
                }
                for r in rects.rects() {
                    if r.width == 0
                        || r.height == 0
                        || u64::from(r.width) * u64::from(r.height) > u64::from(MAX_ZONE_AREA)
                    {
                        return Err(InputResult::InvalidPosition);
                    }
                    for dy in 0..r.height as i32 {
                        for dx in 0..r.width as i32 {
                            self.check_build_tile(
                                p,
                                r.x.saturating_add(dx),
                                r.y.saturating_add(dy),
                            )?;
                        }
                    }
                }
                // Rectangles overlapping one another are caught while occupying.
                self.pay(p, ZONE_COST * n as i64, n)?;
                for r in rects.rects() {
                    let mut z = [0u8; 8];
                    z[0] = zone_type;
                    z[1] = density;
                    z[2] = r.width as u8;
                    z[3] = r.height as u8;
                    let id = self.spawn_structure(
                        p,
                        world::ARCH_ZONE,
                        r.x,
                        r.y,
                        &[
                            (world::COMP_ZONE, &z),
                            (world::COMP_POPULATION, &u32_pair(0, 0)),
                        ],
                    );
                    for dy in 0..r.height as i32 {
                        for dx in 0..r.width as i32 {
                            if let Some(i) =
                                self.idx(r.x.saturating_add(dx), r.y.saturating_add(dy))
                            {
                                if self.occupant[i] == 0 {
                                    self.occupant[i] = id;
                                }
                            }
                        }
                    }
                }
                self.write_treasury(p);
                Ok(())
            }
            Action::TilesWire { kind, tiles } => {
                let n = tiles.len_in(8);
                if n == 0 || n > MAX_TILES_PER_ACTION {
                    return Err(InputResult::InvalidPosition);
                }
                if kind == codec::INPUT_DEMOLISH {
                    let mut ids = Vec::with_capacity(n);
                    for (x, y) in tiles.tiles() {
                        let i = self.idx(x, y).ok_or(InputResult::InvalidPosition)?;
                        let id = self.occupant[i];
                        if id == 0 {
                            continue;
                        }
                        if self.world.get(id).and_then(|e| e.owner()) != Some(owner) {
                            return Err(InputResult::NotOwner);
                        }
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                    if ids.is_empty() {
                        return Err(InputResult::InvalidPosition);
                    }
                    for id in ids {
                        self.destroy(id);
                    }
                    self.write_treasury(p);
                    return Ok(());
                }
                let (arch, cost, extra): (u32, i64, Option<u16>) = match kind {
                    codec::INPUT_PLACE_ROAD => (world::ARCH_ROAD, 10, None),
                    codec::INPUT_PLACE_CONDUIT => {
                        (world::ARCH_CONDUIT, 20, Some(world::COMP_ENERGY))
                    }
                    _ => (world::ARCH_PIPE, 20, Some(world::COMP_FLUID)),
                };
                for (i, (x, y)) in tiles.tiles().enumerate() {
                    self.check_build_tile(p, x, y)?;
                    if tiles.tiles().take(i).any(|t| t == (x, y)) {
                        return Err(InputResult::InvalidPosition);
                    }
                }
                self.pay(p, cost * n as i64, n)?;
                for (x, y) in tiles.tiles() {
                    let t = [kind, 0, 0, 0];
                    let id = match extra {
                        Some(c) => self.spawn_structure(
                            p,
                            arch,
                            x,
                            y,
                            &[(world::COMP_TRANSPORT, &t), (c, &u32_pair(0, 0))],
                        ),
                        None => self.spawn_structure(p, arch, x, y, &[(world::COMP_TRANSPORT, &t)]),
                    };
                    if let Some(i) = self.idx(x, y) {
                        self.occupant[i] = id;
                    }
                }
                self.write_treasury(p);
                Ok(())
            }
            // Encoder-side forms never come off the wire.
            Action::DesignateZone { .. } | Action::Tiles { .. } => {
                Err(InputResult::InvalidPosition)
            }
        }
    }

    fn on_input(&mut self, now: Instant, s: usize, conn: ConnId, seq: u32, a: &Action<'_>) {
        let Some(c) = self.sessions.state_mut(s) else {
            return;
        };
        let Some(p) = c.slot.filter(|_| c.stage == Stage::Playing) else {
            self.invalid(s, DecodeError::new("input_message", "before_hello"));
            return;
        };
        if now.saturating_duration_since(c.window_start) >= Duration::from_secs(1) {
            c.window_start = now;
            c.inputs_in_window = 0;
        }
        c.inputs_in_window += 1;
        let result = if c.inputs_in_window > self.cfg.max_inputs_per_second {
            InputResult::RateLimited
        } else {
            self.apply(p, a)
        };
        self.stats.events.add2("input_result", result.name(), 1);
        let applied = if result == InputResult::Success {
            self.tick + 1
        } else {
            0
        };
        self.queue(
            conn,
            Out::InputAck {
                seq,
                result,
                applied,
            },
        );
    }

    fn on_message(&mut self, now: Instant, s: usize, conn: ConnId, msg: Message<'_>) {
        if let Some(p) = self.sessions.state(s).and_then(|c| c.slot) {
            if let Some(pl) = self.players[p].as_mut() {
                pl.token_expires = now + self.cfg.token_ttl;
            }
        }
        match msg {
            Message::ClientHello {
                player_name,
                session_token,
                requested_slot,
                ..
            } => self.on_hello(now, s, conn, player_name, session_token, requested_slot),
            Message::Ping { timestamp, .. } => self.queue(conn, Out::Pong { timestamp }),
            Message::SnapshotAck { acked_tick, .. } => {
                let tick = self.tick;
                if let Some(c) = self.sessions.state_mut(s) {
                    if acked_tick > tick {
                        self.stats.events.add("ack_from_the_future", 1);
                    } else if c.acked.is_none_or(|a| acked_tick > a) {
                        c.acked = Some(acked_tick);
                        if c.full_pending.is_some_and(|f| acked_tick >= f) {
                            c.full_pending = None;
                        }
                    }
                }
            }
            Message::InputMessage {
                input_sequence,
                action,
                ..
            } => self.on_input(now, s, conn, input_sequence, &action),
            Message::ChatMessage { text } => {
                let Some(sender) = self.sessions.state(s).and_then(|c| c.slot) else {
                    return;
                };
                let text: Arc<str> = Arc::from(text);
                let to: Vec<ConnId> = self
                    .sessions
                    .iter()
                    .filter(|(_, x)| x.state.stage == Stage::Playing)
                    .map(|(_, x)| x.conn)
                    .collect();
                for c in to {
                    self.queue(
                        c,
                        Out::Chat {
                            sender: sender as u8,
                            text: text.clone(),
                        },
                    );
                }
            }
            Message::Disconnect { .. } => {
                self.stats.disconnected += 1;
                if let Some(p) = self.sessions.state(s).and_then(|c| c.slot) {
                    self.leave(p);
                }
                self.end_session(s);
            }
            Message::Opaque { .. } => self.stats.events.add("action_message_ignored", 1),
            Message::ServerHello { .. }
            | Message::Pong { .. }
            | Message::FullSnapshot { .. }
            | Message::DeltaSnapshot(_)
            | Message::InputAck { .. }
            | Message::ChatBroadcast { .. }
            | Message::ErrorMessage { .. } => self.invalid(
                s,
                DecodeError::new(msg.msg_type().name(), "wrong_direction"),
            ),
        }
    }

    fn step(&mut self, now: Instant) {
        self.tick += 1;
        let tick = self.tick;
        self.grow(tick);
        self.world.tick = tick;
        let h = (tick as usize) % HISTORY;
        self.history[h].copy_from(&self.world);
        self.sweep(now);
        self.send_snapshots(tick);
    }

    /// A twentieth of the structures change each tick; treasuries once a second.
    fn grow(&mut self, tick: u64) {
        let phase = (tick % 20) as u32;
        let mut has_conduit = [false; MAX_PLAYERS];
        for e in &self.world.entities {
            let o = usize::from(e.owner().unwrap_or(0));
            if (1..=MAX_PLAYERS).contains(&o) {
                has_conduit[o - 1] |= e.archetype == world::ARCH_CONDUIT;
            }
        }
        for e in self.world.entities.iter_mut() {
            if e.id % 20 != phase {
                continue;
            }
            let o = usize::from(e.owner().unwrap_or(0))
                .saturating_sub(1)
                .min(MAX_PLAYERS - 1);
            let roll: u32 = self.rng.random_range(0..4);
            match e.archetype {
                world::ARCH_BUILDING => {
                    let Some(b) = e.get(world::COMP_BUILDING) else {
                        continue;
                    };
                    let mut b: [u8; 16] = b.try_into().unwrap_or([0; 16]);
                    let level = b[5].clamp(1, 3);
                    let cap = u32::from(level) * 40;
                    let pop = (read_u32(&b, 12) + roll).min(cap);
                    b[4] = 2; // operating
                    if pop == cap && level < 3 {
                        b[5] = level + 1;
                    }
                    b[12..16].copy_from_slice(&pop.to_le_bytes());
                    e.set(world::COMP_BUILDING, &b);
                    e.set(world::COMP_POPULATION, &u32_pair(pop, pop / 2));
                    let demand = pop / 2 + 1;
                    let supplied = if has_conduit[o] { demand } else { demand / 2 };
                    e.set(world::COMP_ENERGY, &u32_pair(demand, supplied));
                }
                world::ARCH_ZONE => {
                    let Some(z) = e.get(world::COMP_ZONE) else {
                        continue;
                    };
                    let mut z: [u8; 8] = z.try_into().unwrap_or([0; 8]);
                    let dev = (u16::from_le_bytes([z[4], z[5]]) + roll as u16).min(100);
                    z[4..6].copy_from_slice(&dev.to_le_bytes());
                    e.set(world::COMP_ZONE, &z);
                    let area = u32::from(z[2]) * u32::from(z[3]);
                    let pop = u32::from(dev) * area / 4;
                    e.set(world::COMP_POPULATION, &u32_pair(pop, pop / 3));
                }
                world::ARCH_CONDUIT | world::ARCH_PIPE => {
                    let c = if e.archetype == world::ARCH_CONDUIT {
                        world::COMP_ENERGY
                    } else {
                        world::COMP_FLUID
                    };
                    let load = self.rng.random_range(0..100);
                    e.set(c, &u32_pair(load, 100));
                }
                world::ARCH_ROAD => {
                    let traffic: u16 = self.rng.random_range(0..500);
                    let mut t = [codec::INPUT_PLACE_ROAD, 0, 0, 0];
                    t[2..4].copy_from_slice(&traffic.to_le_bytes());
                    e.set(world::COMP_TRANSPORT, &t);
                }
                _ => {}
            }
        }
        if tick % u64::from(self.cfg.tick_rate.max(1)) == 0 {
            for p in 0..MAX_PLAYERS {
                let owner = p as u8 + 1;
                let pop: u32 = self
                    .world
                    .entities
                    .iter()
                    .filter(|e| e.owner() == Some(owner) && e.archetype != world::ARCH_PLAYER)
                    .filter_map(|e| e.get(world::COMP_POPULATION).map(|b| read_u32(b, 0)))
                    .sum();
                if let Some(pl) = self.players[p].as_mut() {
                    pl.funds += i64::from(pop) * i64::from(pl.tribute) / 10 + 50;
                }
                self.write_treasury(p);
            }
        }
    }

    fn sweep(&mut self, now: Instant) {
        let mut expired = std::mem::take(&mut self.expired);
        self.sessions
            .expired_into(now, self.cfg.client_timeout, &mut expired);
        for &s in &expired {
            let Some(conn) = self.sessions.get(s).map(|x| x.conn) else {
                continue;
            };
            self.stats.timed_out += 1;
            self.queue(
                conn,
                Out::Disconnect {
                    reason: DISCONNECT_TIMEOUT,
                    text: "timed out",
                },
            );
            self.end_session(s);
        }
        self.expired = expired;
        for p in 0..MAX_PLAYERS {
            let gone = self.players[p]
                .as_ref()
                .is_some_and(|pl| pl.conn.is_none() && pl.token_expires <= now);
            if gone {
                self.stats.events.add("token_expired", 1);
                self.leave(p);
            }
        }
    }

    fn send_snapshots(&mut self, tick: u64) {
        let mut sends = std::mem::take(&mut self.sends);
        for (_, s) in self.sessions.iter_mut() {
            let c = &mut s.state;
            if c.stage != Stage::Playing || c.full_pending.is_some() {
                continue;
            }
            let base = c
                .acked
                .filter(|&a| tick - a <= self.cfg.max_delta_age)
                .filter(|&a| self.history[(a as usize) % HISTORY].tick == a);
            match (base, c.acked) {
                (Some(a), _) => sends.push((
                    s.conn,
                    Out::Delta {
                        base: a,
                        target: tick,
                    },
                )),
                (None, acked) => {
                    if acked.is_some() {
                        self.stats.events.add("full_snapshot_fallbacks", 1);
                    }
                    c.full_pending = Some(tick);
                    sends.push((s.conn, Out::Full { tick }));
                }
            }
        }
        for (conn, o) in sends.drain(..) {
            self.queue(conn, o);
        }
        self.sends = sends;
    }

    fn encode(&mut self, buf: &mut [u8], seq: u32, o: &Out) -> Result<usize, codec::EncodeError> {
        let Self {
            enc,
            history,
            scratch,
            players,
            cfg,
            terrain,
            land_value,
            tick,
            ..
        } = self;
        match o {
            Out::Hello {
                result,
                slot,
                token,
                players: n,
            } => enc.encode(
                buf,
                seq,
                &Message::ServerHello {
                    server_version: cfg.server_version,
                    result: result.to_u8(),
                    assigned_slot: *slot,
                    session_token: *token,
                    tick_rate: cfg.tick_rate,
                    current_tick: *tick,
                    map_width: cfg.map_width,
                    map_height: cfg.map_height,
                    num_players: *n,
                },
            ),
            Out::Disconnect { reason, text } => enc.encode(
                buf,
                seq,
                &Message::Disconnect {
                    reason: *reason,
                    message: text,
                },
            ),
            Out::Error { code, text } => enc.encode(
                buf,
                seq,
                &Message::ErrorMessage {
                    error_code: *code,
                    context: 0,
                    message: text,
                },
            ),
            Out::Pong { timestamp } => enc.encode(
                buf,
                seq,
                &Message::Pong {
                    timestamp: *timestamp,
                    server_tick: *tick,
                },
            ),
            Out::InputAck {
                seq: input_sequence,
                result,
                applied,
            } => enc.encode(
                buf,
                seq,
                &Message::InputAck {
                    input_sequence: *input_sequence,
                    result: *result as u8,
                    applied_tick: *applied,
                },
            ),
            Out::Chat { sender, text } => enc.encode(
                buf,
                seq,
                &Message::ChatBroadcast {
                    sender_slot: *sender,
                    text,
                },
            ),
            Out::Full { tick: t } => {
                let w = &history[(*t as usize) % HISTORY];
                if w.tick != *t {
                    return Err(codec::EncodeError::FieldTooLong);
                }
                let infos: Vec<PlayerInfo<'_>> = players
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| {
                        p.as_ref().map(|p| PlayerInfo {
                            slot: i as u8,
                            connected: p.conn.is_some(),
                            name: &p.name,
                        })
                    })
                    .collect();
                let meta = Metadata {
                    tick: *t,
                    tick_rate: cfg.tick_rate,
                    map_width: cfg.map_width,
                    map_height: cfg.map_height,
                    rng_state: *t ^ cfg.seed,
                };
                let n = world::write_full(scratch, &meta, &infos, terrain, land_value, w)?;
                codec::encode_full(buf, seq, *t, &scratch[..n])
            }
            Out::Delta { base, target } => {
                let (b, t) = (
                    &history[(*base as usize) % HISTORY],
                    &history[(*target as usize) % HISTORY],
                );
                if b.tick != *base || t.tick != *target {
                    return Err(codec::EncodeError::FieldTooLong);
                }
                let (ents, comps, n) = world::write_delta(scratch, b, t)?;
                enc.encode(
                    buf,
                    seq,
                    &Message::DeltaSnapshot(codec::DeltaSnapshot {
                        base_tick: *base,
                        target_tick: *target,
                        entity_count: ents,
                        component_count: comps,
                        payload: &scratch[..n],
                    }),
                )
            }
        }
    }
}

impl Server for ZergCityServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let s = self.session_for(now, from);
        if self.sessions.state(s).map(|c| c.stage) == Some(Stage::Done) {
            return;
        }
        self.sessions.touch(s, now);
        let mut dec = std::mem::take(&mut self.dec);
        match codec::decode(data, &mut dec) {
            Ok(d) => match d.message {
                Some(m) => self.on_message(now, s, from, m),
                None => self.stats.events.add("unknown_message_type", 1),
            },
            Err(e) => {
                let hello = data.get(5) == Some(&(MsgType::ClientHello as u8));
                let in_hello = self.sessions.state(s).map(|c| c.stage) == Some(Stage::Hello);
                if e.reason == "bad_version" && hello && in_hello {
                    self.stats.dropped.add2(e.message, e.reason, 1);
                    self.refuse(s, from, HelloResult::VersionMismatch);
                } else {
                    self.invalid(s, e);
                }
            }
        }
        self.dec = dec;
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.clock.due(now) > 0 {
            self.step(now);
        }
        self.stats.clients = self
            .sessions
            .iter()
            .filter(|(_, s)| s.state.stage == Stage::Playing)
            .count();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        let cap = buf.len().min(MAX_MESSAGE);
        while let Some((conn, seq, o)) = self.out.pop_front() {
            match self.encode(&mut buf[..cap], seq, &o) {
                Ok(len) => {
                    let ty = match o {
                        Out::Full { .. } => MsgType::FullSnapshot,
                        Out::Delta { .. } => MsgType::DeltaSnapshot,
                        Out::Pong { .. } => MsgType::Pong,
                        _ => MsgType::ServerHello,
                    };
                    let (channel, reliable) = ty.channel();
                    self.stats.datagrams_out += 1;
                    self.stats.bytes_out += len as u64;
                    return Some((
                        conn,
                        Transmit {
                            len,
                            channel,
                            reliable,
                        },
                    ));
                }
                Err(_) => self.stats.events.add("encode_failed", 1),
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.clock.next_deadline())
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn handle_connect(&mut self, now: Instant, from: ConnId) {
        self.session_for(now, from);
    }

    fn handle_disconnect(&mut self, _now: Instant, from: ConnId) {
        // The slot stays with the player while its token lives (reconnection).
        if let Some(s) = self.sessions.slot_of(from) {
            self.end_session(s);
        }
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.sessions.poll_close()
    }
}

impl std::fmt::Debug for ZergCityServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZergCityServer")
            .field("tick", &self.tick)
            .field("players", &self.players())
            .field("entities", &self.world.len())
            .finish()
    }
}
