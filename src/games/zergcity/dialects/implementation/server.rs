//! A reference server for `dialect: implementation`, with the real game server's rules as
//! far as a load test meets them:
//!
//! - ServerStatus to every new ENet session, before anything is asked.
//! - Join: an empty or over-64-byte name is JoinReject `invalid_name`; a Join (or Reconnect)
//!   with a session token within its 30 s grace restores the player id; with all player ids
//!   held (by players in game or in their grace period) it is JoinReject `server_full`. An
//!   accepted player gets JoinAccept, ServerStatus, and everyone a PlayerList.
//! - Reconnect: a token no session has is JoinReject `invalid_token`, one whose session's
//!   grace has passed `session_expired`; either way the session is then closed, as the real
//!   server disconnects a refused peer. Sessions past their grace are forgotten at the next
//!   housekeeping (every second). The grace is `ImplementationServerConfig::grace`
//!   (`server.session_grace`).
//! - Heartbeat is answered with HeartbeatResponse (its timestamp echoed, the server's time
//!   and tick); every second each client also gets a HeartbeatResponse echoing 0. A client
//!   whose last Heartbeat (or Join) is 10 s old is disconnected.
//! - Input: 30 bytes, the player id must be the session's; each accepted input changes one
//!   entity of the player's (created, then updated), and every 50 ms tick with changes sends
//!   one StateUpdate (LZ4 above 1024 bytes) to every session, joined or not, as the real
//!   server's ENet broadcast does (PlayerList likewise). Everything goes reliably on channel
//!   0.
//!
//! The four-peer ENet cap is the transport's: an embedded server's host takes
//! `players_per_instance` peers, so a fifth connect gets no reply, as from the real one.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::codec::{self, ty, Reader, CHANNEL_RELIABLE, HEADER_LEN, INPUT_LEN, TOKEN_LEN};
use crate::protocol::prelude::session::TickClock;
use crate::protocol::prelude::ServerStats;
use crate::protocol::prelude::{ConnId, Server, Transmit};

#[derive(Debug, Clone)]
pub struct ImplementationServerConfig {
    pub max_players: u8,
    pub tick_interval: Duration,
    pub heartbeat_interval: Duration,
    /// A client without a Heartbeat this long is dropped (the real server: 10 s).
    pub silence_drop: Duration,
    /// A dropped player's id and token stay reserved this long (the real server: 30 s).
    pub grace: Duration,
    pub name: String,
}

impl Default for ImplementationServerConfig {
    fn default() -> Self {
        Self {
            max_players: 4,
            tick_interval: Duration::from_millis(50),
            heartbeat_interval: Duration::from_secs(1),
            silence_drop: Duration::from_secs(10),
            grace: Duration::from_secs(30),
            name: "ZergCity Server".into(),
        }
    }
}

/// A player id's holder: in game on a connection, or in its grace period.
#[derive(Debug, Clone)]
struct PlayerSlot {
    id: u8,
    name: String,
    token: [u8; TOKEN_LEN],
    conn: Option<ConnId>,
    left_at: Option<Instant>,
    /// Entity ids this player's inputs created.
    entities: u32,
}

impl PlayerSlot {
    /// Whether the session is still held at `now`: on a connection, or dropped less than
    /// `grace` ago. A grace of 0 forgets it at the drop's own instant (a Reconnect handled in
    /// the same batch as the old connection's end is refused, as the docs say).
    fn held(&self, now: Instant, grace: Duration) -> bool {
        self.conn.is_some()
            || self
                .left_at
                .is_some_and(|t| now.saturating_duration_since(t) < grace)
    }
}

#[derive(Debug, Clone)]
struct Client {
    conn: ConnId,
    player: u8,
    last_heartbeat: Instant,
    last_sent_heartbeat: Instant,
}

pub struct ImplementationServer {
    cfg: ImplementationServerConfig,
    clients: Vec<Client>,
    players: Vec<PlayerSlot>,
    clock: TickClock,
    tick: u64,
    started: Instant,
    token_seed: u64,
    /// Entity changes of this tick: (entity, kind, x, y).
    changes: Vec<(u32, u8, i16, i16)>,
    body: Vec<u8>,
    out: VecDeque<(ConnId, Vec<u8>)>,
    pool: Vec<Vec<u8>>,
    closing: VecDeque<ConnId>,
    next_housekeeping: Instant,
    stats: ServerStats,
}

impl ImplementationServer {
    pub fn new(cfg: ImplementationServerConfig, now: Instant) -> Self {
        Self {
            clock: TickClock::new(now + cfg.tick_interval, cfg.tick_interval),
            next_housekeeping: now + cfg.heartbeat_interval,
            cfg,
            clients: Vec::new(),
            players: Vec::new(),
            tick: 0,
            started: now,
            token_seed: 0x5eed_2c17,
            changes: Vec::new(),
            body: Vec::new(),
            out: VecDeque::new(),
            pool: Vec::new(),
            closing: VecDeque::new(),
            stats: ServerStats::default(),
        }
    }

    fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_millis() as u64 + 1
    }

    fn send(
        &mut self,
        to: ConnId,
        enc: impl FnOnce(&mut [u8]) -> Result<usize, codec::EncodeError>,
    ) {
        let mut b = self.pool.pop().unwrap_or_default();
        b.resize(HEADER_LEN + codec::MAX_PAYLOAD, 0);
        match enc(&mut b) {
            Ok(n) => {
                b.truncate(n);
                self.out.push_back((to, b));
            }
            Err(_) => {
                self.stats.events.add("encode_failed", 1);
                self.pool.push(b);
            }
        }
    }

    fn send_status(&mut self, to: ConnId) {
        let (max, n, tick) = (self.cfg.max_players, self.in_game() as u8, self.tick);
        let name = std::mem::take(&mut self.cfg.name);
        // ServerState 1: Ready (the real server never reaches Running without its game loop).
        self.send(to, |b| {
            codec::encode_server_status(b, 1, max, n, tick, name.as_bytes())
        });
        self.cfg.name = name;
    }

    fn in_game(&self) -> usize {
        self.clients.iter().filter(|c| c.player != 0).count()
    }

    fn broadcast_player_list(&mut self) {
        let list: Vec<(u8, String)> = self
            .players
            .iter()
            .filter(|p| p.conn.is_some())
            .map(|p| (p.id, p.name.clone()))
            .collect();
        let to: Vec<ConnId> = self.clients.iter().map(|c| c.conn).collect();
        for c in to {
            self.send(c, |b| {
                codec::encode_player_list(b, list.iter().map(|(id, n)| (*id, n.as_bytes(), 1, 0)))
            });
        }
    }

    fn next_token(&mut self) -> [u8; TOKEN_LEN] {
        let mut t = [0u8; TOKEN_LEN];
        for half in t.chunks_mut(8) {
            self.token_seed = self.token_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.token_seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            half.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        t
    }

    fn client_index(&self, conn: ConnId) -> Option<usize> {
        self.clients.iter().position(|c| c.conn == conn)
    }

    fn reject(&mut self, conn: ConnId, reason: u8) {
        self.stats.refused += 1;
        self.stats.events.add(codec::join_reject_name(reason), 1);
        self.send(conn, |b| codec::encode_join_reject(b, reason, b"refused"));
        self.closing.push_back(conn);
    }

    /// Give `conn` the player slot `slot` (restored or new) and tell everyone.
    fn admit(&mut self, now: Instant, ci: usize, slot: usize) {
        let conn = self.clients[ci].conn;
        let (id, token) = (self.players[slot].id, self.players[slot].token);
        // A previous connection holding the slot is kicked (a duplicate session: a player
        // back on a new connection before the server saw the old one end).
        if let Some(old) = self.players[slot].conn.filter(|&c| c != conn) {
            self.stats.events.add("duplicate_session_kicked", 1);
            self.closing.push_back(old);
            self.clients.retain(|c| c.conn != old);
        }
        self.players[slot].conn = Some(conn);
        self.players[slot].left_at = None;
        if let Some(c) = self.clients.iter_mut().find(|c| c.conn == conn) {
            c.player = id;
            c.last_heartbeat = now;
        }
        self.stats.accepted += 1;
        let tick = self.tick;
        self.send(conn, |b| codec::encode_join_accept(b, id, &token, tick));
        self.send_status(conn);
        self.broadcast_player_list();
    }

    fn on_join(&mut self, now: Instant, ci: usize, p: &[u8]) -> Result<(), codec::DecodeError> {
        let mut r = Reader::new(p, "join");
        let name = r.string(u32::MAX as usize)?;
        let has_token = r.u8()? != 0;
        let token = if has_token {
            let mut t = [0u8; TOKEN_LEN];
            t.copy_from_slice(r.bytes(TOKEN_LEN)?);
            Some(t)
        } else {
            None
        };
        let conn = self.clients[ci].conn;
        if name.is_empty() || name.len() > codec::MAX_NAME {
            self.reject(conn, 2);
            return Ok(());
        }
        if let Some(t) = token {
            match self.players.iter().position(|s| s.token == t) {
                Some(slot) if self.within_grace(slot, now) => {
                    self.admit(now, ci, slot);
                    return Ok(());
                }
                Some(_) => {
                    self.reject(conn, 5);
                    return Ok(());
                }
                None => {}
            }
        }
        let held: Vec<u8> = self.players.iter().map(|s| s.id).collect();
        let Some(id) = (1..=self.cfg.max_players).find(|i| !held.contains(i)) else {
            self.reject(conn, 1);
            return Ok(());
        };
        let token = self.next_token();
        self.players.push(PlayerSlot {
            id,
            name: String::from_utf8_lossy(name).into_owned(),
            token,
            conn: None,
            left_at: None,
            entities: 0,
        });
        let slot = self.players.len() - 1;
        self.admit(now, ci, slot);
        Ok(())
    }

    fn within_grace(&self, slot: usize, now: Instant) -> bool {
        self.players[slot].held(now, self.cfg.grace)
    }

    fn on_reconnect(
        &mut self,
        now: Instant,
        ci: usize,
        p: &[u8],
    ) -> Result<(), codec::DecodeError> {
        let mut r = Reader::new(p, "reconnect");
        let mut t = [0u8; TOKEN_LEN];
        t.copy_from_slice(r.bytes(TOKEN_LEN)?);
        r.string(u32::MAX as usize)?;
        let conn = self.clients[ci].conn;
        match self.players.iter().position(|s| s.token == t) {
            _ if t == [0; TOKEN_LEN] => self.reject(conn, 4),
            None => self.reject(conn, 4),
            Some(slot) if !self.within_grace(slot, now) => self.reject(conn, 5),
            Some(slot) => self.admit(now, ci, slot),
        }
        Ok(())
    }

    fn on_input(&mut self, ci: usize, p: &[u8]) -> Result<(), codec::DecodeError> {
        if p.len() < INPUT_LEN {
            return Err(codec::DecodeError {
                message: "input",
                reason: "truncated",
            });
        }
        let mut r = Reader::new(p, "input");
        let _tick = r.u64()?;
        let player = r.u8()?;
        let kind = r.u8()?;
        let _seq = r.u32()?;
        let x = r.u16()? as i16;
        let y = r.u16()? as i16;
        let own = self.clients[ci].player;
        if own == 0 || player != own || kind == 0 || kind >= codec::input::COUNT {
            self.stats.dropped.add2("input", "invalid", 1);
            return Ok(());
        }
        self.stats.events.add("inputs", 1);
        let Some(slot) = self.players.iter_mut().find(|s| s.id == own) else {
            return Ok(());
        };
        // Entity ids: player id in the top byte.
        let n = slot.entities;
        let (entity, delta) = if n < 64 {
            slot.entities += 1;
            (u32::from(own) << 24 | n, codec::DELTA_CREATE)
        } else {
            (
                u32::from(own) << 24 | (u32::from(x as u16) % 64),
                codec::DELTA_UPDATE,
            )
        };
        self.changes.push((entity, delta, x, y));
        Ok(())
    }

    fn on_heartbeat(
        &mut self,
        now: Instant,
        ci: usize,
        p: &[u8],
    ) -> Result<(), codec::DecodeError> {
        let mut r = Reader::new(p, "heartbeat");
        let ts = r.u64()?;
        let _seq = r.u32()?;
        self.clients[ci].last_heartbeat = now;
        self.stats.events.add("heartbeats", 1);
        let (ms, tick, conn) = (self.ms(now), self.tick, self.clients[ci].conn);
        self.send(conn, |b| codec::encode_heartbeat_response(b, ts, ms, tick));
        Ok(())
    }

    fn run_tick(&mut self) {
        self.tick += 1;
        if self.changes.is_empty() {
            return;
        }
        self.body.clear();
        self.body.extend_from_slice(&self.tick.to_le_bytes());
        let n = self.changes.len().min(codec::MAX_DELTAS);
        self.body.extend_from_slice(&(n as u32).to_le_bytes());
        for &(entity, kind, x, y) in self.changes.iter().take(n) {
            self.body.extend_from_slice(&entity.to_le_bytes());
            self.body.push(kind);
            // Component data: position and a fixed block, 24 bytes.
            self.body.extend_from_slice(&24u32.to_le_bytes());
            self.body.extend_from_slice(&x.to_le_bytes());
            self.body.extend_from_slice(&y.to_le_bytes());
            self.body.extend_from_slice(&[0u8; 20]);
        }
        self.changes.clear();
        let body = std::mem::take(&mut self.body);
        // Broadcast to every session, joined or not, as the real server's ENet broadcast does.
        let to: Vec<ConnId> = self.clients.iter().map(|c| c.conn).collect();
        for c in to {
            self.send(c, |b| codec::encode_state_update(b, &body));
        }
        self.stats.events.add("state_updates", 1);
        self.body = body;
    }

    fn housekeeping(&mut self, now: Instant) {
        let (ms, tick) = (self.ms(now), self.tick);
        let mut beat = Vec::new();
        let mut drop = Vec::new();
        for c in &mut self.clients {
            if now.saturating_duration_since(c.last_sent_heartbeat) >= self.cfg.heartbeat_interval {
                c.last_sent_heartbeat = now;
                beat.push(c.conn);
            }
            if now.saturating_duration_since(c.last_heartbeat) >= self.cfg.silence_drop {
                drop.push(c.conn);
            }
        }
        for c in beat {
            self.send(c, |b| codec::encode_heartbeat_response(b, 0, ms, tick));
        }
        for c in drop {
            self.stats.timed_out += 1;
            self.closing.push_back(c);
            self.leave(now, c);
        }
        let grace = self.cfg.grace;
        self.players.retain(|s| s.held(now, grace));
    }

    fn leave(&mut self, now: Instant, conn: ConnId) {
        let Some(i) = self.client_index(conn) else {
            return;
        };
        self.clients.remove(i);
        if let Some(s) = self.players.iter_mut().find(|s| s.conn == Some(conn)) {
            s.conn = None;
            s.left_at = Some(now);
        }
        self.broadcast_player_list();
    }
}

impl Server for ImplementationServer {
    fn handle_connect(&mut self, now: Instant, from: ConnId) {
        if self.clients.len() >= usize::from(self.cfg.max_players) {
            self.stats.refused += 1;
            self.closing.push_back(from);
            return;
        }
        self.clients.push(Client {
            conn: from,
            player: 0,
            last_heartbeat: now,
            last_sent_heartbeat: now,
        });
        self.send_status(from);
    }

    fn handle_disconnect(&mut self, now: Instant, from: ConnId) {
        if self.client_index(from).is_some() {
            self.stats.disconnected += 1;
        }
        self.leave(now, from);
    }

    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let Some(ci) = self.client_index(from) else {
            self.stats.dropped.add2("packet", "unknown_peer", 1);
            return;
        };
        let h = match codec::Header::parse(data) {
            Ok(h) if h.version == codec::VERSION => h,
            _ => {
                self.stats.dropped.add2("envelope", "invalid", 1);
                return;
            }
        };
        let Some(p) = data.get(HEADER_LEN..HEADER_LEN + usize::from(h.len)) else {
            self.stats.dropped.add2("envelope", "truncated", 1);
            return;
        };
        let r = match h.ty {
            ty::JOIN => self.on_join(now, ci, p),
            ty::RECONNECT => self.on_reconnect(now, ci, p),
            ty::HEARTBEAT => self.on_heartbeat(now, ci, p),
            ty::INPUT => self.on_input(ci, p),
            ty::CHAT => Ok(()),
            _ => {
                self.stats.dropped.add2("envelope", "unknown_type", 1);
                Ok(())
            }
        };
        if let Err(e) = r {
            self.stats.dropped.add2(e.message, e.reason, 1);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        for _ in 0..self.clock.due(now) {
            self.run_tick();
        }
        if now >= self.next_housekeeping {
            self.next_housekeeping = now + self.cfg.heartbeat_interval;
            self.housekeeping(now);
        }
        self.stats.clients = self.in_game();
        self.stats.connections = self.clients.len();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        while let Some((to, b)) = self.out.pop_front() {
            let n = b.len();
            let fits = buf.len() >= n;
            if fits {
                buf[..n].copy_from_slice(&b);
            }
            self.pool.push(b);
            if !fits {
                self.stats.events.add("message_too_large", 1);
                continue;
            }
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += n as u64;
            return Some((
                to,
                Transmit {
                    len: n,
                    channel: CHANNEL_RELIABLE,
                    reliable: true,
                },
            ));
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.clock.next_deadline().min(self.next_housekeeping))
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.closing.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything the server sent to `to`, decoded as (type, payload).
    fn sent_to(s: &mut ImplementationServer, to: ConnId) -> Vec<(u16, Vec<u8>)> {
        let mut buf = vec![0u8; 70_000];
        let mut v = Vec::new();
        while let Some((c, t)) = s.poll_transmit(&mut buf) {
            if c == to {
                let h = codec::Header::parse(&buf[..t.len]).unwrap();
                v.push((h.ty, buf[HEADER_LEN..t.len].to_vec()));
            }
        }
        v
    }

    fn message(enc: impl FnOnce(&mut [u8]) -> Result<usize, codec::EncodeError>) -> Vec<u8> {
        let mut buf = vec![0u8; 1500];
        let n = enc(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// A server with `grace` and one player joined on `a` at `t0`: the server, the player's
    /// id and its session token (from the JoinAccept).
    fn joined(grace: Duration, t0: Instant, a: ConnId) -> (ImplementationServer, u8, [u8; 16]) {
        let cfg = ImplementationServerConfig {
            grace,
            ..Default::default()
        };
        let mut s = ImplementationServer::new(cfg, t0);
        s.handle_connect(t0, a);
        s.handle_datagram(t0, a, &message(|x| codec::encode_join(x, b"bot-1", None)));
        let out = sent_to(&mut s, a);
        let accept = out.iter().find(|m| m.0 == ty::JOIN_ACCEPT).unwrap();
        let token = <[u8; 16]>::try_from(&accept.1[1..17]).unwrap();
        (s, accept.1[0], token)
    }

    /// A Reconnect with `token` on a new connection `conn` at `t`: what the server sent it.
    fn reconnect(
        s: &mut ImplementationServer,
        t: Instant,
        conn: ConnId,
        token: &[u8; 16],
    ) -> Vec<(u16, Vec<u8>)> {
        s.handle_connect(t, conn);
        s.handle_datagram(
            t,
            conn,
            &message(|x| codec::encode_reconnect(x, token, b"bot-1")),
        );
        sent_to(s, conn)
    }

    /// Join, drop, then a Reconnect with the token: within the grace the player id comes
    /// back; past it (the session forgotten at the next housekeeping) the token is unknown,
    /// refused `invalid_token`, and the session closed.
    #[test]
    fn reconnect_resumes_within_the_grace_and_is_refused_after() {
        let t0 = Instant::now();
        let (a, b, c) = (ConnId(1), ConnId(2), ConnId(3));
        let (mut s, player, token) = joined(Duration::from_secs(2), t0, a);
        s.handle_disconnect(t0, a);
        let t1 = t0 + Duration::from_secs(1);
        let out = reconnect(&mut s, t1, b, &token);
        let again = out.iter().find(|m| m.0 == ty::JOIN_ACCEPT).unwrap();
        assert_eq!((again.1[0], &again.1[1..17]), (player, &token[..]));
        s.handle_disconnect(t1, b);
        // Past the grace, and past a housekeeping: forgotten.
        let t2 = t1 + Duration::from_secs(4);
        s.handle_timeout(t2);
        let out = reconnect(&mut s, t2, c, &token);
        let reject = out.iter().find(|m| m.0 == ty::JOIN_REJECT).unwrap();
        assert_eq!(reject.1[0], 4, "invalid_token");
        assert_eq!(s.poll_close(), Some(c));
        assert_eq!(s.stats().refused, 1);
        assert_eq!(s.stats().accepted, 2);
    }

    /// A grace of 0 forgets a session at the drop's own instant: a Reconnect handled at the
    /// same `now` as the old connection's end (one batch: the bot's host superseding its old
    /// session) is refused `session_expired`, not resumed with nobody kicked.
    #[test]
    fn a_zero_grace_refuses_a_reconnect_at_the_drop_s_own_instant() {
        let t0 = Instant::now();
        let (a, b) = (ConnId(1), ConnId(2));
        let (mut s, _, token) = joined(Duration::ZERO, t0, a);
        let t1 = t0 + Duration::from_millis(5);
        s.handle_disconnect(t1, a);
        let out = reconnect(&mut s, t1, b, &token);
        let reject = out.iter().find(|m| m.0 == ty::JOIN_REJECT).unwrap();
        assert_eq!(reject.1[0], 5, "session_expired");
        assert_eq!(s.stats().refused, 1);
        assert_eq!(s.stats().accepted, 1);
        assert_eq!(s.stats().events.get("duplicate_session_kicked"), 0);
    }
}
