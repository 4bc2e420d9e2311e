#!/usr/bin/env python3
"""Independent R-Type game server with injected, counted impairments.

Written from the protocol's description (docs/protocols/rtype.md) only, not from tickswarm's Rust code, so that it can serve as a second
implementation against which the load tool's measurements are checked.

Wire format (one packet per UDP datagram; every integer big-endian):
  header   type u8, version u8 = 1, size u16 = whole datagram incl. header    (4 bytes)
  1  CONNECT        c->s  clientId u32                                  (8 bytes)
  2  INPUT          c->s  entity u32, dx f32, dy f32, shooting u8       (17 bytes)
  3  PING           c->s  -                                             (4 bytes)
  4  DISCONNECT     c->s  -                                             (4 bytes)
  10 ACCEPT         s->c  -                                             (4 bytes)
  11 REJECT         s->c  -                                             (4 bytes)
  12 PONG           s->c  timestamp u32                                 (8 bytes)
  20 ENTITY_CREATE  s->c  id u32, x f32, y f32, sprite u16              (18 bytes)
  21 ENTITY_DESTROY s->c  id u32                                        (8 bytes)
  23 SNAPSHOT       s->c  tick u32, count u16, count x (id u32, x, y, vx, vy f32,
                          sprite u16)                                   (10 + 22n bytes)
Floats are IEEE 754 big-endian (the default reading), or native little-endian with
--float-order little (the "bitwise copy" reading of spec section 2).

Readings taken where the spec is silent (see docs/protocols/rtype.md for the others):
  * The player is found by the datagram's source address; the INPUT entity field is only
    compared (a mismatch is counted, the input still applies: a client that has not yet
    learnt its ship id sends its clientId or 0).
  * The ship's entity id is the CONNECT clientId when non-zero and free, else one the
    server allocates. After ACCEPT the first ENTITY_CREATE a client receives is its own
    ship, then every other entity; every other client receives the new ship's ENTITY_CREATE.
  * A repeated CONNECT from a known address gets ACCEPT and the ENTITY_CREATEs again.
  * PING has nothing to echo: PONG carries the server's millisecond clock (u32, wraps) taken
    when the PING arrived. PONG leaves --pong-delay-ms after the PING arrived.
  * Simulation runs at --sim-rate (60) ticks/s; a full SNAPSHOT goes to every client every
    sim/snapshot ticks, so snapshot ticks advance by that constant step (3 at 20 Hz).
  * A client silent for --client-timeout seconds is forgotten like a DISCONNECT: the other
    clients get ENTITY_DESTROY for its ship.
  * No damage, projectiles or GAMEOVER: enemies drift across the screen, shooting is counted.

Impairment: with --drop-every K, every K-th snapshot generated for a client (counted from
that client's first) is not sent; its tick is consumed all the same, so a client sees the
drop as a gap of one step in the snapshot ticks.

Ground truth: on SIGTERM/SIGINT or after --max-seconds, one JSON line is printed on stdout
with totals {clients_seen, accepted, rejects_sent, snapshots_generated, snapshots_dropped,
snapshots_sent, pongs_sent, malformed, unknown_type, ...} plus per-client counts, and the
process exits 0. The first stdout line is "listening on 127.0.0.1:PORT".

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

VERSION = 1

CONNECT, INPUT, PING, DISCONNECT = 1, 2, 3, 4
ACCEPT, REJECT, PONG, GAMEOVER = 10, 11, 12, 13
ENTITY_CREATE, ENTITY_DESTROY, DAMAGE_EVENT, SNAPSHOT = 20, 21, 22, 23

CLIENT_TYPES = {CONNECT: "connect", INPUT: "input", PING: "ping", DISCONNECT: "disconnect"}
SERVER_TYPES = {ACCEPT: "accept", REJECT: "reject", PONG: "pong", GAMEOVER: "gameover",
                ENTITY_CREATE: "entity_create", ENTITY_DESTROY: "entity_destroy",
                DAMAGE_EVENT: "damage_event", SNAPSHOT: "snapshot"}

HEADER = struct.Struct(">BBH")
U32 = struct.Struct(">I")
SNAP_HEAD = struct.Struct(">IH")  # tick, entityCount (after the header)
HEADER_SIZE = 4
CLIENT_SIZE = {CONNECT: 8, INPUT: 17, PING: 4, DISCONNECT: 4}
SNAP_ENTITY_SIZE = 22
SNAP_FIXED = HEADER_SIZE + SNAP_HEAD.size  # 10
assert HEADER.size == HEADER_SIZE and SNAP_FIXED == 10

# Game model (arbitrary but deterministic).
WORLD_W, WORLD_H = 1280.0, 720.0
SHIP_SPEED = 300.0  # units per second at |axis| = 1
SPRITE_SHIP, SPRITE_ENEMY = 1, 2
ENEMY_ID_BASE = 0x40000000
ALLOC_ID_BASE = 0x20000000
ENEMY_SPEED = 120.0


class Codec:
    """Builds server packets; integers big-endian, floats per --float-order."""

    def __init__(self, float_order: str):
        fo = ">" if float_order == "big" else "<"
        self.f2 = struct.Struct(fo + "ff")
        self.f4 = struct.Struct(fo + "ffff")
        self.f2_unpack = self.f2.unpack_from

    @staticmethod
    def packet(ptype: int, body: bytes = b"") -> bytes:
        return HEADER.pack(ptype, VERSION, HEADER_SIZE + len(body)) + body

    def entity_create(self, eid, x, y, sprite) -> bytes:
        return self.packet(ENTITY_CREATE, U32.pack(eid) + self.f2.pack(x, y)
                           + struct.pack(">H", sprite))

    def entity_destroy(self, eid) -> bytes:
        return self.packet(ENTITY_DESTROY, U32.pack(eid))

    def snapshot_record(self, e) -> bytes:
        return (U32.pack(e.eid) + self.f4.pack(e.x, e.y, e.vx, e.vy)
                + struct.pack(">H", e.sprite))


class Entity:
    __slots__ = ("eid", "x", "y", "vx", "vy", "sprite")

    def __init__(self, eid, x, y, sprite):
        self.eid, self.x, self.y, self.vx, self.vy, self.sprite = eid, x, y, 0.0, 0.0, sprite


class Client:
    __slots__ = ("addr", "client_id", "ship", "dx", "dy", "shooting", "last_seen",
                 "connected_at", "ended", "snapshots_generated", "snapshots_dropped",
                 "snapshots_sent", "pongs_sent", "pings", "inputs", "shots",
                 "input_entity_mismatch", "accepts_sent", "creates_sent", "destroys_sent",
                 "send_errors", "first_snapshot_tick", "last_snapshot_tick")

    def __init__(self, addr, client_id, ship, now):
        self.addr = addr
        self.client_id = client_id
        self.ship = ship
        self.dx = self.dy = 0.0
        self.shooting = 0
        self.last_seen = self.connected_at = now
        self.ended = None
        self.snapshots_generated = 0
        self.snapshots_dropped = 0
        self.snapshots_sent = 0
        self.pongs_sent = 0
        self.pings = 0
        self.inputs = 0
        self.shots = 0
        self.input_entity_mismatch = 0
        self.accepts_sent = 0
        self.creates_sent = 0
        self.destroys_sent = 0
        self.send_errors = 0
        self.first_snapshot_tick = None
        self.last_snapshot_tick = None

    def stats(self) -> dict:
        return {
            "addr": f"{self.addr[0]}:{self.addr[1]}",
            "client_id": self.client_id,
            "entity": self.ship.eid,
            "ended": self.ended or "running",
            "snapshots_generated": self.snapshots_generated,
            "snapshots_dropped": self.snapshots_dropped,
            "snapshots_sent": self.snapshots_sent,
            "pongs_sent": self.pongs_sent,
            "pings_received": self.pings,
            "inputs_received": self.inputs,
            "input_entity_mismatch": self.input_entity_mismatch,
            "accepts_sent": self.accepts_sent,
            "creates_sent": self.creates_sent,
            "destroys_sent": self.destroys_sent,
            "send_errors": self.send_errors,
            "first_snapshot_tick": self.first_snapshot_tick,
            "last_snapshot_tick": self.last_snapshot_tick,
        }


class Server(ImpairedUdpServer):
    def __init__(self, args):
        super().__init__(args.port, args.sim_rate, args.pong_delay_ms, args.drop_every)
        self.args = args
        self.codec = Codec(args.float_order)
        self.sim_rate = args.sim_rate
        self.step = args.sim_rate // args.snapshot_rate

        self.clients: dict[tuple, Client] = {}
        self.finished: list[Client] = []
        self.ids_in_use: set[int] = set()
        self.next_alloc = ALLOC_ID_BASE

        self.tick = args.start_tick & 0xFFFFFFFF
        self.enemies = []
        for i in range(args.enemies):
            e = Entity(ENEMY_ID_BASE + i, *self.enemy_pos(i, 0.0), SPRITE_ENEMY)
            self.enemies.append(e)
            self.ids_in_use.add(e.eid)

        self.clients_seen = 0
        self.accepted = 0
        self.reconnects = 0
        self.rejects_sent = 0
        self.unknown_type_by_code: dict[str, int] = {}
        self.snapshot_ticks = 0
        self.first_snapshot_tick = None
        self.last_snapshot_tick = None
        self.max_snapshot_bytes = 0
        self.other_send_errors = 0

    # ---- bookkeeping -------------------------------------------------------------------

    def sendto(self, data: bytes, addr, c: Client | None = None) -> bool:
        try:
            self.sock.sendto(data, addr)
        except OSError:
            if c is not None:
                c.send_errors += 1
            else:
                self.other_send_errors += 1
            return False
        return True

    def alloc_id(self, wanted: int) -> int:
        if 0 < wanted and wanted not in self.ids_in_use:
            return wanted
        while True:
            eid = self.next_alloc
            self.next_alloc = self.next_alloc + 1 if self.next_alloc < ENEMY_ID_BASE - 1 \
                else ALLOC_ID_BASE
            if eid not in self.ids_in_use:
                return eid

    def spawn_point(self, n: int):
        return 100.0 + 40.0 * (n % 8), 80.0 + 70.0 * ((n // 8) % 8)

    def send_world(self, c: Client):
        """ACCEPT, then the client's own ship, then every other entity."""
        if self.sendto(self.codec.packet(ACCEPT), c.addr, c):
            c.accepts_sent += 1
        ents = [c.ship] + [o.ship for o in self.clients.values() if o is not c] + self.enemies
        for e in ents:
            if self.sendto(self.codec.entity_create(e.eid, e.x, e.y, e.sprite), c.addr, c):
                c.creates_sent += 1

    def forget(self, addr, why: str):
        c = self.clients.pop(addr, None)
        if c is None:
            return
        c.ended = why
        self.finished.append(c)
        self.ids_in_use.discard(c.ship.eid)
        pkt = self.codec.entity_destroy(c.ship.eid)
        for o in self.clients.values():
            if self.sendto(pkt, o.addr, o):
                o.destroys_sent += 1

    # ---- receive path ------------------------------------------------------------------

    def handle(self, data: bytes, addr, now: float):
        n = len(data)
        if n < HEADER_SIZE:
            return self.bad("short_header")
        ptype, version, size = HEADER.unpack_from(data, 0)
        if version != VERSION:
            return self.bad("bad_version")
        if size != n:
            return self.bad("size_mismatch")
        if ptype in SERVER_TYPES:
            return self.bad("wrong_direction")
        if ptype not in CLIENT_TYPES:
            k = str(ptype)
            self.unknown_type_by_code[k] = self.unknown_type_by_code.get(k, 0) + 1
            return
        if n != CLIENT_SIZE[ptype]:
            return self.bad(CLIENT_TYPES[ptype] + ".bad_size")

        c = self.clients.get(addr)
        if ptype == CONNECT:
            (client_id,) = U32.unpack_from(data, HEADER_SIZE)
            if c is not None:
                # Repeat (our ACCEPT or creates were lost): same answer again, idempotent.
                c.last_seen = now
                self.reconnects += 1
                self.send_world(c)
                return
            if len(self.clients) >= self.args.max_clients:
                if self.sendto(self.codec.packet(REJECT), addr):
                    self.rejects_sent += 1
                return
            eid = self.alloc_id(client_id)
            self.ids_in_use.add(eid)
            ship = Entity(eid, *self.spawn_point(self.clients_seen), SPRITE_SHIP)
            c = Client(addr, client_id, ship, now)
            self.clients_seen += 1
            self.accepted += 1
            self.clients[addr] = c
            self.send_world(c)
            pkt = self.codec.entity_create(ship.eid, ship.x, ship.y, ship.sprite)
            for o in self.clients.values():
                if o is not c and self.sendto(pkt, o.addr, o):
                    o.creates_sent += 1
            return
        if c is None:
            return self.ignore("unknown_client." + CLIENT_TYPES[ptype])
        c.last_seen = now
        if ptype == INPUT:
            (entity,) = U32.unpack_from(data, HEADER_SIZE)
            dx, dy = self.codec.f2_unpack(data, HEADER_SIZE + 4)
            shooting = data[HEADER_SIZE + 12]
            if not (math.isfinite(dx) and math.isfinite(dy)):
                return self.bad("input.bad_float")
            c.inputs += 1
            if entity != c.ship.eid:
                c.input_entity_mismatch += 1
            c.dx = max(-1.0, min(1.0, dx))
            c.dy = max(-1.0, min(1.0, dy))
            c.shooting = 1 if shooting else 0
        elif ptype == PING:
            c.pings += 1
            self.schedule_pong(now, addr, self.ms32(now))
        elif ptype == DISCONNECT:
            self.forget(addr, "disconnect")

    def send_pong(self, c: Client, ts: int):
        if self.sendto(self.codec.packet(PONG, U32.pack(ts)), c.addr, c):
            c.pongs_sent += 1

    # ---- simulation and snapshots ------------------------------------------------------

    def enemy_pos(self, i: int, t: float):
        n = max(1, self.args.enemies)
        span = WORLD_W + 200.0
        x = WORLD_W + 100.0 - ((ENEMY_SPEED * t + i * span / n) % span)
        y = WORLD_H * (i + 1) / (n + 1) + 60.0 * math.sin(1.5 * t + i)
        return x, y

    def simulate(self):
        dt = self.interval
        for c in self.clients.values():
            s = c.ship
            s.vx, s.vy = SHIP_SPEED * c.dx, SHIP_SPEED * c.dy
            s.x = min(WORLD_W, max(0.0, s.x + s.vx * dt))
            s.y = min(WORLD_H, max(0.0, s.y + s.vy * dt))
            c.shots += c.shooting
        t = self.ticks_run * dt
        for i, e in enumerate(self.enemies):
            nx, ny = self.enemy_pos(i, t)
            if abs(nx - e.x) > WORLD_W / 2:  # wrapped round: no fake velocity
                e.vx, e.vy = -ENEMY_SPEED, 0.0
            else:
                e.vx, e.vy = (nx - e.x) / dt, (ny - e.y) / dt
            e.x, e.y = nx, ny

    def do_tick(self, _now: float):
        self.tick = (self.tick + 1) & 0xFFFFFFFF
        self.ticks_run += 1
        self.simulate()
        if self.ticks_run % self.step != 0:
            return
        self.snapshot_ticks += 1
        if self.first_snapshot_tick is None:
            self.first_snapshot_tick = self.tick
        self.last_snapshot_tick = self.tick
        if not self.clients:
            return
        ents = sorted([c.ship for c in self.clients.values()] + self.enemies,
                      key=lambda e: e.eid)
        rec = self.codec.snapshot_record
        body = SNAP_HEAD.pack(self.tick, len(ents)) + b"".join(rec(e) for e in ents)
        pkt = self.codec.packet(SNAPSHOT, body)
        assert len(pkt) == SNAP_FIXED + SNAP_ENTITY_SIZE * len(ents)
        self.max_snapshot_bytes = max(self.max_snapshot_bytes, len(pkt))
        for c in self.clients.values():
            c.snapshots_generated += 1
            if c.first_snapshot_tick is None:
                c.first_snapshot_tick = self.tick
            c.last_snapshot_tick = self.tick
            if self.drops(c.snapshots_generated):
                c.snapshots_dropped += 1  # injected loss: the tick is gone for this client
            elif self.sendto(pkt, c.addr, c):
                c.snapshots_sent += 1

    def expire(self, now: float):
        limit = self.args.client_timeout
        for addr in [a for a, c in self.clients.items() if now - c.last_seen > limit]:
            self.forget(addr, "timeout")

    # ---- ground truth --------------------------------------------------------------------

    def totals(self, started: float) -> dict:
        everyone = self.finished + list(self.clients.values())
        s = lambda f: sum(getattr(c, f) for c in everyone)  # noqa: E731
        malformed = sum(self.malformed_by_reason.values())
        return {
            "clients_seen": self.clients_seen,
            "accepted": self.accepted,
            "rejects_sent": self.rejects_sent,
            "snapshots_generated": s("snapshots_generated"),
            "snapshots_dropped": s("snapshots_dropped"),
            "snapshots_sent": s("snapshots_sent"),
            "pongs_sent": s("pongs_sent"),
            "malformed": malformed,
            "unknown_type": sum(self.unknown_type_by_code.values()),
            # Diagnostics beyond the required totals.
            "pings_received": s("pings"),
            "inputs_received": s("inputs"),
            "input_entity_mismatch": s("input_entity_mismatch"),
            "reconnects": self.reconnects,
            "accepts_sent": s("accepts_sent"),
            "creates_sent": s("creates_sent"),
            "destroys_sent": s("destroys_sent"),
            "send_errors": s("send_errors") + self.other_send_errors,
            "datagrams_received": self.received,
            "malformed_by_reason": self.malformed_by_reason,
            "unknown_type_by_code": self.unknown_type_by_code,
            "ignored_by_reason": self.ignored_by_reason,
            "ended_by": {why: sum(1 for c in self.finished if c.ended == why)
                         for why in sorted({c.ended for c in self.finished})},
            "ticks": self.ticks_run,
            "snapshot_ticks": self.snapshot_ticks,
            "tick_step": self.step,
            "first_snapshot_tick": self.first_snapshot_tick,
            "last_snapshot_tick": self.last_snapshot_tick,
            "max_snapshot_bytes": self.max_snapshot_bytes,
            **self.loop_totals(started),
            "config": {
                "sim_rate": self.sim_rate, "snapshot_rate": self.args.snapshot_rate,
                "drop_every": self.args.drop_every, "pong_delay_ms": self.args.pong_delay_ms,
                "float_order": self.args.float_order, "max_clients": self.args.max_clients,
                "client_timeout": self.args.client_timeout, "enemies": self.args.enemies,
                "start_tick": self.args.start_tick,
            },
            "per_client": [c.stats() for c in everyone],
        }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_impairment_args(p, dropped="tick")
    p.add_argument("--sim-rate", type=int, default=60, help="simulation ticks per second")
    p.add_argument("--snapshot-rate", type=int, default=20,
                   help="SNAPSHOTs per second, 20..30 per the spec; must divide --sim-rate")
    p.add_argument("--float-order", choices=("big", "little"), default="big",
                   help="byte order of floats (integers are always big-endian)")
    p.add_argument("--max-clients", type=int, default=32,
                   help="players at once; a CONNECT beyond this gets REJECT")
    p.add_argument("--client-timeout", type=float, default=5.0,
                   help="forget a client silent for this many seconds")
    p.add_argument("--max-seconds", type=float, default=120.0,
                   help="safety bound: stop and print totals after this long (0 = none)")
    p.add_argument("--enemies", type=int, default=4, help="server-owned moving entities")
    p.add_argument("--start-tick", type=lambda s: int(s, 0), default=0,
                   help="tick counter's initial value (e.g. 0xFFFFFF00 to test wrap-around)")
    p.add_argument("--max-datagram", type=int, default=1400,
                   help="largest snapshot allowed: max-clients + enemies must fit")
    a = p.parse_args(argv)
    if not 1 <= a.sim_rate <= 1000:
        p.error("--sim-rate must be in 1..1000")
    if not 1 <= a.snapshot_rate <= a.sim_rate or a.sim_rate % a.snapshot_rate:
        p.error("--snapshot-rate must divide --sim-rate (constant tick step)")
    if not 20 <= a.snapshot_rate <= 30:
        print(f"warning: --snapshot-rate {a.snapshot_rate} is outside the spec's 20-30 Hz",
              file=sys.stderr)
    if a.max_clients < 1 or a.enemies < 0 or a.drop_every < 0:
        p.error("--max-clients >= 1, --enemies >= 0, --drop-every >= 0")
    if SNAP_FIXED + SNAP_ENTITY_SIZE * (a.max_clients + a.enemies) > min(a.max_datagram, 65507):
        p.error("a full snapshot of --max-clients ships and --enemies would not fit "
                "--max-datagram bytes")
    if a.pong_delay_ms < 0 or a.client_timeout <= 0 or a.max_seconds < 0:
        p.error("delays and timeouts must be non-negative (client timeout > 0)")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    srv = Server(args)
    return serve_json_totals(srv, args.max_seconds, "max_seconds", srv.totals)


if __name__ == "__main__":
    sys.exit(main())
