//! A session's way in: ClientHello (refusals by version and room), the manifest, the
//! ContentRequest, the chunk stream and the end of the content stage (FullState).

use super::*;

impl CityServer {
    pub(super) fn on_hello(
        &mut self,
        now: Instant,
        slot: usize,
        protocol_version: u32,
        name: &str,
    ) {
        let Some(s) = self.sessions.state(slot) else {
            return;
        };
        if s.stage != Stage::AwaitHello {
            self.stats.events.add("duplicate_hello", 1);
            return;
        }
        if protocol_version != self.cfg.protocol_version {
            let msg = format!("Server requires protocol v{}", self.cfg.protocol_version);
            self.refuse(slot, DisconnectReason::VersionMismatch, &msg);
            return;
        }
        if self.players >= self.cfg.max_players {
            let msg = format!("Server is full ({} players)", self.cfg.max_players);
            self.refuse(slot, DisconnectReason::ServerFull, &msg);
            return;
        }
        let id = self.alloc_entity();
        let pos = self.spawn_point(self.players);
        // The implementation dialect moves players on the variant's grid: they spawn on a
        // tile's centre, inside the walls.
        let mover = (self.cfg.dialect == Dialect::Implementation)
            .then(|| Mover::standing(self.spawn_tile(pos)));
        let pos = mover.map_or(pos, |m| m.pos);
        let session_id = self.next_session;
        self.next_session = self.next_session.wrapping_mul(0x9E37_79B1).wrapping_add(1);
        let name: String = name.chars().take(32).collect();
        self.entities.insert(
            id,
            Entity {
                id,
                pos,
                vel: Vec2f::ZERO,
                speed: self.cfg.player_speed,
                name: Some(name.clone()),
                sprite: 1,
                health: Some(Health {
                    hp: 100,
                    hp_max: 100,
                }),
                changed_tick: self.tick,
                patrol: 0,
                mover,
                refusing: None,
            },
        );
        self.players += 1;
        self.stats.accepted += 1;
        let ob = &mut self.outbox;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        s.entity = Some(id);
        s.session_id = session_id;
        s.name = name;
        push_msg(
            s,
            ob,
            &Message::ServerHello {
                protocol_version: self.cfg.protocol_version,
                server_id: &self.cfg.server_id,
                server_name: &self.cfg.server_name,
                session_id,
                player_entity: id,
            },
        );
        match self.cfg.dialect {
            Dialect::Spec => {
                s.stage = Stage::Content;
                s.manifest_at = Some(now);
                let entries: Vec<AssetEntry<'_>> = self
                    .assets
                    .iter()
                    .map(|a| AssetEntry {
                        resource_id: a.resource_id,
                        asset_type: a.asset_type,
                        path: &a.path,
                        size: a.data.len() as u64,
                        checksum: a.checksum,
                    })
                    .collect();
                let total: u64 = entries.iter().map(|a| a.size).sum();
                let cfg = &self.cfg;
                push(s, ob, true, |b, seq| {
                    codec::encode_content_manifest(
                        b,
                        seq,
                        &cfg.server_id,
                        &cfg.server_name,
                        cfg.content_version,
                        total,
                        &entries,
                    )
                });
            }
            Dialect::Implementation => {
                // ServerHello then EntitySpawn: the own entity now, the rest by interest.
                s.stage = Stage::InGame;
                if let Some(e) = self.entities.get(&id) {
                    push_msg(s, ob, &Message::EntitySpawn(e.data()));
                    s.visible.insert(id);
                }
            }
        }
    }

    pub(super) fn on_content_request(&mut self, slot: usize, ids: impl Iterator<Item = u64>) {
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        if s.stage != Stage::Content {
            self.stats.events.add("content_request_out_of_stage", 1);
            return;
        }
        s.requested = true;
        for id in ids {
            match self.assets.iter().position(|a| a.resource_id == id) {
                Some(i) if !s.downloads.iter().any(|&(j, _)| j == i) => {
                    s.downloads.push_back((i, 0));
                    self.stats.events.add("content_assets_sent", 1);
                }
                Some(_) => self.stats.events.add("content_duplicate_request", 1),
                None => self.stats.events.add("content_unknown_resource", 1),
            }
        }
        if s.downloads.is_empty() {
            self.finish_content(slot);
        }
    }

    /// ContentComplete, FullState (own entity first, then the nearest in view), EntitySpawn
    /// for what did not fit.
    pub(super) fn finish_content(&mut self, slot: usize) {
        let tick = self.tick;
        let view = self.cfg.view_distance;
        let (w, h) = (self.cfg.map_width, self.cfg.map_height);
        let ob = &mut self.outbox;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        let Some(own_id) = s.entity else { return };
        let Some(own) = self.entities.get(&own_id) else {
            return;
        };
        push_msg(s, ob, &Message::ContentComplete);
        // A sink shows a player no one else (see CityServerConfig::sink).
        let sink = self.cfg.sink;
        let mut inview: Vec<(f32, &Entity)> = self
            .entities
            .values()
            .filter(|e| !sink && e.id != own_id)
            .map(|e| (e.pos.distance(own.pos), e))
            .filter(|(d, _)| *d <= view)
            .collect();
        inview.sort_by(|a, b| a.0.total_cmp(&b.0));
        let list: Vec<EntityData<'_>> = std::iter::once(own.data())
            .chain(inview.iter().map(|(_, e)| e.data()))
            .collect();
        let tiles = &self.tiles;
        let mut written = 0;
        push(s, ob, true, |b, seq| {
            let (n, k) = codec::encode_full_state(b, seq, tick, w, h, tiles, &list)?;
            written = k;
            Ok(n)
        });
        for e in &list {
            s.visible.insert(e.net_entity_id);
        }
        for e in list.iter().skip(written.max(1)) {
            push_msg(s, ob, &Message::EntitySpawn(*e));
        }
        s.stage = Stage::InGame;
        self.stats.events.add("full_states_sent", 1);
    }

    /// Sessions that got the manifest [`CONTENT_REQUEST_WAIT`] ago and sent no
    /// ContentRequest (nor anything else) have every asset: ContentComplete and FullState.
    pub(super) fn content_request_wait(&mut self, now: Instant) {
        let due: Vec<usize> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                let s = &s.state;
                s.stage == Stage::Content
                    && !s.requested
                    && s.manifest_at
                        .is_some_and(|t| now.saturating_duration_since(t) >= CONTENT_REQUEST_WAIT)
            })
            .map(|(slot, _)| slot)
            .collect();
        for slot in due {
            self.stats.events.add("content_without_request", 1);
            self.finish_content(slot);
        }
    }

    pub(super) fn stream_content(&mut self) {
        let per_tick = self.cfg.chunks_per_tick;
        let cs = self.cfg.chunk_size;
        let mut finished = Vec::new();
        for (slot, s) in self.sessions.iter_mut() {
            let s = &mut s.state;
            if s.stage != Stage::Content || !s.requested || s.downloads.is_empty() {
                continue;
            }
            for _ in 0..per_tick {
                let Some((i, next)) = s.downloads.front_mut() else {
                    break;
                };
                let Some(a) = self.assets.get(*i) else {
                    s.downloads.pop_front();
                    continue;
                };
                let total = a.data.len().div_ceil(cs).max(1) as u32;
                let from = (*next as usize * cs).min(a.data.len());
                let to = (from + cs).min(a.data.len());
                let msg = Message::ContentChunk {
                    resource_id: a.resource_id,
                    chunk_index: *next,
                    total_chunks: total,
                    data: &a.data[from..to],
                };
                *next += 1;
                if *next >= total {
                    s.downloads.pop_front();
                }
                push_msg(s, &mut self.outbox, &msg);
                self.stats.events.add("content_chunks_sent", 1);
            }
            if s.downloads.is_empty() {
                finished.push(slot);
            }
        }
        for slot in finished {
            self.finish_content(slot);
        }
    }
}

pub(super) fn make_assets(cfg: &CityServerConfig) -> Vec<Asset> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let base = cfg.content_asset_size.max(1);
    (0..cfg.content_assets)
        .map(|i| {
            // 50 % .. 150 % of the base size, spread deterministically.
            let size = base / 2 + (i * 7919 + 13) % (base + 1);
            let mut data = vec![0u8; size];
            rng.fill_bytes(&mut data);
            let asset_type = (i % 3) as u8;
            let kind = ["textures", "audio", "data"][usize::from(asset_type)];
            Asset {
                resource_id: 0x1000_0000_0000_0000 | (rng.next_u64() >> 8),
                asset_type,
                path: format!("{kind}/asset_{i:02}.bin"),
                checksum: Fnv64::hash(&data),
                data,
            }
        })
        .collect()
}
