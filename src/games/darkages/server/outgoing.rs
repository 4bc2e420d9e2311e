//! What goes out: each client's snapshot (full or delta against its acknowledged view, by
//! area of interest), coalesced events, and every message's encoding.

use super::*;

impl DarkAgesServer {
    /// Build every playing client's snapshot of this tick.
    pub(super) fn snapshot_all(&mut self) {
        self.snapshots = self.snapshots.wrapping_add(1);
        self.world.clear();
        for (_, s) in self.sessions.iter() {
            if s.proven && s.state.playing {
                self.world.push((s.state.state(), s.state.pos));
            }
        }
        for p in &self.projectiles {
            let yaw = p.vel[2].atan2(p.vel[0]);
            self.world.push((
                EntityState {
                    id: p.id,
                    kind: entity::PROJECTILE,
                    pos: codec::quantize_vec3(p.pos),
                    rot: codec::yaw_quat(yaw),
                    vel: codec::quantize_vec3(p.vel),
                    ..EntityState::default()
                },
                p.pos,
            ));
        }
        for l in &self.loot {
            self.world.push((
                EntityState {
                    id: l.id,
                    kind: entity::LOOT,
                    pos: codec::quantize_vec3(l.pos),
                    rot: [0, 0, 0, 127],
                    ..EntityState::default()
                },
                l.pos,
            ));
        }
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        targets.extend(
            self.sessions
                .iter()
                .filter(|(_, s)| s.proven && s.state.playing)
                .map(|(i, s)| (s.conn, i)),
        );
        for &(conn, slot) in &targets {
            self.snapshot_for(slot);
            self.send(conn, Msg::Snapshot(slot));
        }
        self.targets = targets;
    }

    pub(super) fn snapshot_for(&mut self, slot: usize) {
        let tick = self.tick;
        let snap_no = self.snapshots;
        let max_view = self.cfg.max_view.max(1);
        let Some(session) = self.sessions.get_mut(slot) else {
            return;
        };
        let c = &mut session.state;
        // Candidates within the outer tier, nearest first when they do not all fit.
        self.near.clear();
        for (i, (_, p)) in self.world.iter().enumerate() {
            let d2 = dist2(c.pos, *p);
            if d2 <= AOI_MEDIUM * AOI_MEDIUM {
                self.near.push((d2, i));
            }
        }
        if self.near.len() > max_view {
            self.near
                .select_nth_unstable_by(max_view - 1, |a, b| a.0.total_cmp(&b.0));
            self.near.truncate(max_view);
            self.stats.events.add("aoi_truncated", 1);
        }
        // The new view: due entities as they are now, the others as last sent.
        let n = c.history.len();
        let head = c.hist_head;
        let mut view = std::mem::take(&mut c.history[head].1);
        view.clear();
        {
            let prev = c.newest_view().map(|(_, v)| v.as_slice()).unwrap_or(&[]);
            for &(d2, i) in &self.near {
                let (cur, _) = self.world[i];
                let due = d2 <= AOI_CRITICAL * AOI_CRITICAL
                    || (d2 <= AOI_HIGH * AOI_HIGH && (snap_no ^ cur.id) % 2 == 0)
                    || (snap_no ^ cur.id) % 4 == 0;
                let rec = if due {
                    cur
                } else {
                    match prev.binary_search_by_key(&cur.id, |e| e.id) {
                        Ok(k) => prev[k],
                        Err(_) => cur,
                    }
                };
                view.push(rec);
            }
        }
        view.sort_unstable_by_key(|e| e.id);
        // Baseline: the client's acked view, if kept (and not this very tick).
        let base = c
            .ack
            .filter(|&t| t != 0 && t != tick)
            .and_then(|t| view_in(&c.history, c.hist_len, c.hist_head, t).map(|v| (t, v)));
        let mut len = None;
        if let Some((btick, bview)) = base {
            self.removed.clear();
            if let Ok(mut w) = SnapshotWriter::delta(&mut c.snap, tick, btick) {
                let ok = write_delta(&mut w, &view, bview, &mut self.removed).is_ok()
                    && self.removed.iter().all(|&id| w.removed(id).is_ok());
                if ok {
                    len = w.finish().ok();
                }
            }
            if len.is_some() {
                self.stats.events.add("snapshots_delta", 1);
            } else {
                self.stats
                    .events
                    .add2("snapshots_full", "delta_overflow", 1);
            }
        } else {
            let why = match c.ack {
                None => "no_ack",
                Some(0) => "requested",
                Some(_) => "ack_too_old",
            };
            self.stats.events.add2("snapshots_full", why, 1);
        }
        if len.is_none() {
            len = SnapshotWriter::full(&mut c.snap, tick)
                .ok()
                .and_then(|mut w| {
                    for e in &view {
                        w.record(e, field::ALL).ok()?;
                    }
                    w.finish().ok()
                });
        }
        c.snap_len = len.unwrap_or(0);
        c.history[head] = (tick, view);
        c.hist_head = (head + 1) % n;
        c.hist_len = (c.hist_len + 1).min(n);
    }

    pub(super) fn zone_handoff(&self, slot: usize) -> Option<ZoneHandoff> {
        let c = &self.sessions.get(slot)?.state;
        let p = c.handoff?;
        let target = if p.east { self.cfg.east } else { self.cfg.west }?;
        let host = match &self.cfg.advertise_host {
            Some(h) => fixed_text::<32>(h),
            None => fixed_text::<32>(&target.ip().to_string()),
        };
        Some(ZoneHandoff {
            new_zone_id: if p.east {
                self.cfg.zone + 1
            } else {
                self.cfg.zone.wrapping_sub(1)
            },
            new_server_address: host,
            new_server_port: target.port(),
            handoff_token: p.token,
            handoff_timeout_ms: self.cfg.handoff_timeout.as_millis() as u32,
        })
    }

    /// Encode one queued message; `None` when it no longer applies (its session is gone).
    pub(super) fn encode_msg(&mut self, to: ConnId, msg: Msg, buf: &mut [u8]) -> Option<usize> {
        let live = |s: &Self, slot: usize| s.sessions.get(slot).is_some_and(|x| x.conn == to);
        match msg {
            Msg::Snapshot(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let c = &self.sessions.get(slot)?.state;
                let src = c.snap.get(..c.snap_len).filter(|s| !s.is_empty())?;
                let dst = buf.get_mut(..src.len())?;
                dst.copy_from_slice(src);
                Some(src.len())
            }
            Msg::Events(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let event_id = self.next_event_id;
                let timestamp = self.now_ms();
                let c = &mut self.sessions.get_mut(slot)?.state;
                let (n, len) = encode_events(&c.events, event_id, timestamp, buf)?;
                c.events.drain(..n);
                self.next_event_id = self.next_event_id.wrapping_add(n as u32);
                if !c.events.is_empty() {
                    self.out.push_front((to, Msg::Events(slot)));
                }
                Some(len)
            }
            Msg::Ack(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let c = &self.sessions.get(slot)?.state;
                let ack = ConnectAck {
                    server_protocol_version: codec::PROTOCOL_VERSION,
                    entity_id: c.entity,
                    zone_id: self.cfg.zone,
                    server_tick: self.tick,
                    server_time_ms: self.wall_ms(self.now),
                    result: result::SUCCESS,
                    message: [0; 64],
                };
                codec::encode(buf, &Packet::ConnectAck(ack)).ok()
            }
            Msg::Refuse { result, message } => {
                let ack = ConnectAck {
                    server_protocol_version: codec::PROTOCOL_VERSION,
                    entity_id: 0,
                    zone_id: self.cfg.zone,
                    server_tick: self.tick,
                    server_time_ms: self.wall_ms(self.now),
                    result,
                    message: fixed_text(message),
                };
                codec::encode(buf, &Packet::ConnectAck(ack)).ok()
            }
            Msg::ZoneEnter(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let entity_id = self.sessions.get(slot)?.state.entity;
                let p = Packet::ZoneEnter {
                    zone_id: self.cfg.zone,
                    entity_id,
                };
                codec::encode(buf, &p).ok()
            }
            Msg::Handoff(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let z = self.zone_handoff(slot)?;
                codec::encode(buf, &Packet::ZoneHandoff(z)).ok()
            }
            Msg::Pong(t) => codec::encode(buf, &Packet::Pong { timestamp: t }).ok(),
            Msg::Heartbeat(t) => codec::encode(buf, &Packet::Heartbeat { timestamp: t }).ok(),
            Msg::Challenge(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let timestamp = self.sessions.get(slot)?.state.challenge;
                codec::encode(buf, &Packet::Heartbeat { timestamp }).ok()
            }
            Msg::Disconnect { reason, message } => {
                codec::encode(buf, &Packet::Disconnect { reason, message }).ok()
            }
        }
    }
}

/// Changed and new records of `view` against `base` (both sorted by id); ids only in `base`
/// into `removed`.
pub(super) fn write_delta(
    w: &mut SnapshotWriter<'_>,
    view: &[EntityState],
    base: &[EntityState],
    removed: &mut Vec<u32>,
) -> crate::protocol::prelude::wire::WireResult {
    let (mut i, mut j) = (0, 0);
    while i < view.len() || j < base.len() {
        match (view.get(i), base.get(j)) {
            (Some(v), Some(b)) if v.id == b.id => {
                let m = v.diff_mask(b);
                if m != 0 {
                    w.record(v, m)?;
                }
                i += 1;
                j += 1;
            }
            (Some(v), Some(b)) if v.id < b.id => {
                w.record(v, field::ALL)?;
                i += 1;
            }
            (Some(v), None) => {
                w.record(v, field::ALL)?;
                i += 1;
            }
            (_, Some(b)) => {
                removed.push(b.id);
                j += 1;
            }
            (None, None) => break,
        }
    }
    Ok(())
}

/// One EVENT, or as many events as fit one COALESCED_EVENTS; `(events written, length)`.
pub(super) fn encode_events(
    events: &[ServerEvent],
    event_id: u32,
    timestamp: u32,
    buf: &mut [u8],
) -> Option<(usize, usize)> {
    let first = events.first()?;
    let limit = buf.len().min(codec::MTU);
    let buf = &mut buf[..limit];
    if events.len() == 1 {
        let p = Packet::Event(codec::Event {
            event_id,
            timestamp,
            body: first.body(),
        });
        return codec::encode(buf, &p).ok().map(|n| (1, n));
    }
    let mut w = CoalescedWriter::new(buf).ok()?;
    let mut n = 0;
    for e in events {
        if w.push(&e.body()).is_err() {
            break;
        }
        n += 1;
    }
    if n == 0 {
        return None;
    }
    w.finish().ok().map(|len| (n, len))
}
