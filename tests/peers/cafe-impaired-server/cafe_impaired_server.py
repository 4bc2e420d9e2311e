#!/usr/bin/env python3
"""Independent cafe (0xCAFE) game server with injected, counted impairments.

Written from the protocol's description (docs/protocols/cafe.md) only, not from tickswarm's Rust code, so that it can serve as a second
implementation against which the load tool's measurements are checked.

Wire format (little-endian, one message per UDP datagram):
  header  magic u16 = 0xCAFE (bytes FE CA), version u8 = 1, type u8, seq u32   (8 bytes)
  0 Hello      c->s  name char[16]
  1 Welcome    s->c  player_id u16, tick_rate u16
  2 Input      c->s  player_id u16, input_mask u16, client_time_ms u32
  3 Snapshot   s->c  tick u32, flags u8 (bit0 full), paused u8,
                     N x 33-byte entity records, 14-byte stats trailer (to datagram end)
  4 Ping       both  timestamp_ms u32 (echoed unchanged)
  5 Disconnect c->s  no body

Sequence numbers: one counter per client address. It is incremented for every datagram the
server produces for that client, including snapshots it then drops on purpose
(--drop-every), so a client sees exactly those drops as header-seq gaps.

--log-inputs FILE appends one line per Input accepted: "<client ip:port> <receive time, s>
<input_mask>", so a test can compare what bots pressed with what they were told to press.

Ground truth: on SIGTERM/SIGINT or after --max-seconds, one JSON line is printed on stdout
with totals {clients_seen, snapshots_generated, snapshots_dropped, datagrams_sent,
pongs_sent, malformed} plus per-client counts and diagnostics, and the process exits 0.

Standard library only.
"""

from __future__ import annotations

import argparse
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from impaired_core import ImpairedUdpServer, add_impairment_args, serve_json_totals  # noqa: E402

MAGIC = 0xCAFE
VERSION = 1

T_HELLO = 0
T_WELCOME = 1
T_INPUT = 2
T_SNAPSHOT = 3
T_PING = 4
T_DISCONNECT = 5

HEADER = struct.Struct("<HBBI")  # magic, version, type, seq
HELLO_BODY = 16
INPUT_BODY = struct.Struct("<HHI")
PING_BODY = struct.Struct("<I")
WELCOME_BODY = struct.Struct("<HH")
SNAP_HEAD = struct.Struct("<IBB")  # tick, flags, paused
# entity_id, x, y, vx, vy, hp_cur, hp_max, sprite_id, owner_id, lives_cur, lives_max,
# is_spectating, ultimate_frame, ultimate_ready
ENTITY = struct.Struct("<HffffhhHHhhBBB")
STATS = struct.Struct("<IHHHHH")  # score, wave, level, kills_this_level, kills_to_next, total
assert HEADER.size == 8 and ENTITY.size == 33 and STATS.size == 14

# Body sizes the server accepts, by client->server type (exact match required).
CLIENT_BODY_SIZE = {
    T_HELLO: HELLO_BODY,
    T_INPUT: INPUT_BODY.size,
    T_PING: PING_BODY.size,
    T_DISCONNECT: 0,
}

MAX_DATAGRAM = 1400  # a snapshot datagram stays strictly under this many bytes
MAX_RECORDS = (MAX_DATAGRAM - 1 - HEADER.size - SNAP_HEAD.size - STATS.size) // ENTITY.size
assert HEADER.size + SNAP_HEAD.size + MAX_RECORDS * ENTITY.size + STATS.size < MAX_DATAGRAM

# Game model (arbitrary but deterministic).
WORLD_W, WORLD_H = 800.0, 600.0
PLAYER_SPEED = 200.0  # units per second
SPRITE_PLAYER, SPRITE_ENEMY = 1, 2
ENEMY_ID_BASE = 0x8000
UP, DOWN, LEFT, RIGHT, SHOOT = 1, 2, 4, 8, 16


class Entity:
    __slots__ = ("eid", "x", "y", "vx", "vy", "hp", "hp_max", "sprite", "owner", "lives",
                 "lives_max")

    def __init__(self, eid, x, y, sprite, owner, hp, lives):
        self.eid = eid
        self.x, self.y, self.vx, self.vy = x, y, 0.0, 0.0
        self.hp = self.hp_max = hp
        self.sprite, self.owner = sprite, owner
        self.lives = self.lives_max = lives

    def pack(self) -> bytes:
        return ENTITY.pack(self.eid, self.x, self.y, self.vx, self.vy, self.hp, self.hp_max,
                           self.sprite, self.owner, self.lives, self.lives_max, 0, 0, 0)


class Client:
    __slots__ = ("addr", "player_id", "entity", "mask", "seq", "last_seen", "needs_full",
                 "snapshots_generated", "snapshots_dropped", "datagrams_sent", "pongs_sent",
                 "welcomes_sent", "send_errors", "rx", "rx_first_seq", "rx_max_seq",
                 "connected_at", "ended")

    def __init__(self, addr, player_id, entity, now):
        self.addr = addr
        self.player_id = player_id
        self.entity = entity
        self.mask = 0
        self.seq = 0  # seq of the next datagram produced for this client
        self.last_seen = now
        self.needs_full = True  # a newly joined client gets a full snapshot first
        self.snapshots_generated = 0
        self.snapshots_dropped = 0
        self.datagrams_sent = 0
        self.pongs_sent = 0
        self.welcomes_sent = 0
        self.send_errors = 0
        self.rx = 0
        self.rx_first_seq = None
        self.rx_max_seq = None
        self.connected_at = now
        self.ended = None

    def take_seq(self) -> int:
        s = self.seq
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        return s

    def stats(self) -> dict:
        up_expected = 0
        if self.rx_first_seq is not None:
            up_expected = ((self.rx_max_seq - self.rx_first_seq) & 0xFFFFFFFF) + 1
        return {
            "addr": f"{self.addr[0]}:{self.addr[1]}",
            "player_id": self.player_id,
            "ended": self.ended or "running",
            "seq_consumed": self.seq,
            "snapshots_generated": self.snapshots_generated,
            "snapshots_dropped": self.snapshots_dropped,
            "datagrams_sent": self.datagrams_sent,
            "pongs_sent": self.pongs_sent,
            "welcomes_sent": self.welcomes_sent,
            "send_errors": self.send_errors,
            "upstream_received": self.rx,
            "upstream_seq_span": up_expected,
        }


class Server(ImpairedUdpServer):
    RECV_SIZE = 2048

    def __init__(self, args):
        super().__init__(args.port, args.tick_rate, args.pong_delay_ms, args.drop_every)
        self.args = args
        self.clients: dict[tuple, Client] = {}
        self.finished: list[Client] = []
        self.next_player_id = 1
        self.input_log = open(args.log_inputs, "a") if args.log_inputs else None

        self.tick = 0
        self.score = 0
        self.total_kills = 0
        self.enemies = [
            Entity(ENEMY_ID_BASE + i, *self.enemy_pos(i, 0.0), SPRITE_ENEMY, 0, 30, -1)
            for i in range(args.enemies)
        ]
        self.prev_records: dict[int, bytes] = {}

        self.clients_seen = 0

    # ---- bookkeeping -------------------------------------------------------------------

    def send(self, c: Client, mtype: int, body: bytes) -> bool:
        """Consume a seq for c and send. Returns True if the datagram left the socket."""
        data = HEADER.pack(MAGIC, VERSION, mtype, c.take_seq()) + body
        try:
            self.sock.sendto(data, c.addr)
        except OSError:
            c.send_errors += 1
            return False
        c.datagrams_sent += 1
        return True

    def forget(self, addr, why: str):
        c = self.clients.pop(addr, None)
        if c is not None:
            c.ended = why
            self.finished.append(c)

    def alloc_player_id(self) -> int:
        in_use = {c.player_id for c in self.clients.values()}
        for _ in range(0x10000):
            pid = self.next_player_id
            self.next_player_id = self.next_player_id + 1 if self.next_player_id < 0x7FFF else 1
            if pid not in in_use:
                return pid
        raise RuntimeError("no free player id")

    # ---- receive path ------------------------------------------------------------------

    def handle(self, data: bytes, addr, now: float):
        if len(data) < HEADER.size:
            return self.bad("short_header")
        magic, version, mtype, seq = HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            return self.bad("bad_magic")
        if version != VERSION:
            return self.bad("bad_version")
        if mtype in (T_WELCOME, T_SNAPSHOT):
            return self.bad("wrong_direction")
        if mtype not in CLIENT_BODY_SIZE:
            return self.bad("unknown_type")
        if len(data) - HEADER.size != CLIENT_BODY_SIZE[mtype]:
            return self.bad("bad_size")

        c = self.clients.get(addr)
        if c is not None:
            c.last_seen = now
            c.rx += 1
            if c.rx_first_seq is None:
                c.rx_first_seq = c.rx_max_seq = seq
            elif 0 < ((seq - c.rx_max_seq) & 0xFFFFFFFF) < 0x80000000:
                c.rx_max_seq = seq

        if mtype == T_HELLO:
            if c is None:
                pid = self.alloc_player_id()
                ent = Entity(pid, 100.0 + 10.0 * (pid % 60), 100.0 + 5.0 * (pid % 80),
                             SPRITE_PLAYER, pid, 100, 3)
                c = Client(addr, pid, ent, now)
                c.rx, c.rx_first_seq, c.rx_max_seq = 1, seq, seq
                self.clients[addr] = c
                self.clients_seen += 1
            # First Hello or a repeat (lost Welcome): (re)send the same Welcome.
            if self.send(c, T_WELCOME, WELCOME_BODY.pack(c.player_id, self.tick_rate)):
                c.welcomes_sent += 1
            return
        if c is None:
            return self.ignore("unknown_client")
        if mtype == T_INPUT:
            pid, mask, _client_ms = INPUT_BODY.unpack_from(data, HEADER.size)
            if pid != c.player_id:
                return self.ignore("input_player_mismatch")
            c.mask = mask
            if self.input_log is not None:
                self.input_log.write(f"{addr[0]}:{addr[1]} {now:.6f} {mask}\n")
                self.input_log.flush()
        elif mtype == T_PING:
            (ts,) = PING_BODY.unpack_from(data, HEADER.size)
            self.schedule_pong(now, addr, ts)
        elif mtype == T_DISCONNECT:
            self.forget(addr, "disconnect")

    def send_pong(self, c: Client, ts: int):
        if self.send(c, T_PING, PING_BODY.pack(ts)):
            c.pongs_sent += 1

    # ---- simulation and snapshots ------------------------------------------------------

    def enemy_pos(self, i: int, t: float):
        a = 0.5 * t + i * (2 * math.pi / max(1, self.args.enemies))
        return WORLD_W / 2 + 200.0 * math.cos(a), WORLD_H / 2 + 150.0 * math.sin(a)

    def simulate(self):
        dt = self.interval
        for c in self.clients.values():
            e, m = c.entity, c.mask
            e.vx = PLAYER_SPEED * ((1 if m & RIGHT else 0) - (1 if m & LEFT else 0))
            e.vy = PLAYER_SPEED * ((1 if m & DOWN else 0) - (1 if m & UP else 0))
            e.x = min(WORLD_W, max(0.0, e.x + e.vx * dt))
            e.y = min(WORLD_H, max(0.0, e.y + e.vy * dt))
            if m & SHOOT:
                self.score += 1
        t = self.tick * dt
        for i, e in enumerate(self.enemies):
            nx, ny = self.enemy_pos(i, t)
            e.vx, e.vy = (nx - e.x) / dt, (ny - e.y) / dt
            e.x, e.y = nx, ny
        if self.tick % (2 * self.tick_rate) == 0 and self.tick:
            self.total_kills += 1  # a scripted "kill" every two seconds
            self.score += 100

    def do_tick(self, _now: float):
        self.tick = (self.tick + 1) & 0xFFFFFFFF
        self.ticks_run += 1
        self.simulate()

        records: dict[int, bytes] = {}
        for c in self.clients.values():
            records[c.entity.eid] = c.entity.pack()
        for e in self.enemies:
            records[e.eid] = e.pack()
        prev = self.prev_records
        changed = [eid for eid, r in records.items() if prev.get(eid) != r]
        self.prev_records = records
        all_ids = sorted(records)
        changed.sort()

        kills_to_next = 10
        stats = STATS.pack(self.score & 0xFFFFFFFF,
                           1 + (self.tick // (10 * self.tick_rate)) % 0xFFFF,
                           1 + (self.total_kills // kills_to_next) % 0xFFFF,
                           self.total_kills % kills_to_next, kills_to_next,
                           self.total_kills & 0xFFFF)
        global_full = self.args.full_every > 0 and self.tick % self.args.full_every == 0
        changed_set = set(changed)

        for c in self.clients.values():
            full = global_full or c.needs_full
            own = c.entity.eid
            if full:
                ids = all_ids
                body_recs = [records[own]]
            else:
                ids = changed
                body_recs = [records[own]] if own in changed_set else []
            for eid in ids:
                if len(body_recs) >= MAX_RECORDS:
                    break
                if eid != own:
                    body_recs.append(records[eid])
            body = (SNAP_HEAD.pack(self.tick, 1 if full else 0, 0)
                    + b"".join(body_recs) + stats)
            c.snapshots_generated += 1
            if self.drops(c.snapshots_generated):
                # Injected loss: the datagram is "sent" (seq consumed) but never leaves.
                c.take_seq()
                c.snapshots_dropped += 1
            else:
                if self.send(c, T_SNAPSHOT, body) and full:
                    c.needs_full = False

    def expire(self, now: float):
        limit = self.args.client_timeout
        for addr in [a for a, c in self.clients.items() if now - c.last_seen > limit]:
            self.forget(addr, "timeout")

    # ---- ground truth ------------------------------------------------------------------

    def totals(self, started: float) -> dict:
        everyone = self.finished + list(self.clients.values())
        s = lambda f: sum(getattr(c, f) for c in everyone)  # noqa: E731
        return {
            "clients_seen": self.clients_seen,
            "snapshots_generated": s("snapshots_generated"),
            "snapshots_dropped": s("snapshots_dropped"),
            "datagrams_sent": s("datagrams_sent"),
            "pongs_sent": s("pongs_sent"),
            "malformed": sum(self.malformed_by_reason.values()),
            # Diagnostics beyond the required totals.
            "welcomes_sent": s("welcomes_sent"),
            "send_errors": s("send_errors"),
            "datagrams_received": self.received,
            "malformed_by_reason": self.malformed_by_reason,
            "ignored_by_reason": self.ignored_by_reason,
            "ticks": self.ticks_run,
            **self.loop_totals(started),
            "config": {
                "tick_rate": self.tick_rate, "full_every": self.args.full_every,
                "drop_every": self.args.drop_every, "pong_delay_ms": self.args.pong_delay_ms,
                "client_timeout": self.args.client_timeout, "enemies": self.args.enemies,
                "max_records": MAX_RECORDS,
            },
            "per_client": [c.stats() for c in everyone],
        }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_impairment_args(p, dropped="sequence number")
    p.add_argument("--tick-rate", type=int, default=60, help="snapshots per second (Welcome)")
    p.add_argument("--full-every", type=int, default=30,
                   help="a full snapshot every N ticks, deltas between (0 = first only)")
    p.add_argument("--client-timeout", type=float, default=5.0,
                   help="forget a client silent for this many seconds")
    p.add_argument("--max-seconds", type=float, default=120.0,
                   help="safety bound: stop and print totals after this long (0 = none)")
    p.add_argument("--enemies", type=int, default=4, help="server-owned moving entities")
    p.add_argument("--log-inputs", metavar="FILE",
                   help="append '<client> <time s> <input_mask>' per accepted Input")
    a = p.parse_args(argv)
    if not 1 <= a.tick_rate <= 1000:
        p.error("--tick-rate must be in 1..1000")
    for name in ("full_every", "drop_every", "enemies"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if a.pong_delay_ms < 0 or a.client_timeout <= 0 or a.max_seconds < 0:
        p.error("delays and timeouts must be non-negative (client timeout > 0)")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    srv = Server(args)
    return serve_json_totals(srv, args.max_seconds, "max_seconds", srv.totals)


if __name__ == "__main__":
    sys.exit(main())
