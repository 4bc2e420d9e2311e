#!/usr/bin/env python3
"""Independent stand-in for the public DarkAges server's plain-UDP protocol, with injected,
counted impairments.

Written from the wire facts of the public server (11hideout11/DarkAges, its UDP network
manager, DDoS protection and anti-cheat), not from tickswarm's Rust code, so that it can
check the load tool's figures as a second implementation.

Wire (little-endian, one packet per datagram, first byte the type):
  c->s  6 CONNECT   [6][version u32][player_id u32]                  9 B (neither checked)
  s->c  7 REPLY     [7][1][entity_id u32][zone_id u32]               10 B
  c->s  1 INPUT     [1][seq u32][ts u32][flags u16][yaw i16][pitch i16][target u32]  19 B
  c->s  4 PING      [4][u32]           s->c 5 PONG [5][u32] (echoed)
  s->c  2 SNAPSHOT  [2][server_tick u32][last_input_seq u32][count u32] + count x 103 B:
                    id u32, pos xyz f32, vel xyz f32, health u8, anim u8, type u8,
                    interaction_range f32, prompt char[64], dialogue u32
  s->c  3 EVENT     [3][subtype 1 damage|2 death|3 heal][attacker u32][target u32]
                    [value i32][health u8][ts u32]                                   19 B
  s->c  6 DISCONNECT [6][len u8] (the reason's length, no text)
  s->c 19 INVENTORY_SYNC, 201 B, sent on admission before the reply.

Quirks modelled:
  - Admission: every CONNECT (also a repeat from a held ip:port) is checked against the
    tables: at most 5 entries per ip:port, 20 per /24 (all ports and hosts of it), 1,000 in
    all; an accepted one registers an entry, and entries are never released. Refusals get
    no reply. A CONNECT from an ip:port already connected gets no reply either.
  - Per connection: more than 110 packets or 10,240 bytes in a 1 s window are dropped.
  - More than 65 inputs in a 1 s window: DISCONNECT [6][19] ("Rate limit exceeded") and the
    connection is removed (its admission entries stay).
  - 60 Hz ticks, a full snapshot to every client every 3rd tick (20 Hz): its own entity
    first, then up to --others others; last_input_seq = newest input applied.
  - A connection silent for 30 s is dropped without a word. No heartbeat.

Impairments (counted): --drop-every K leaves out every K-th snapshot of each client;
--pong-delay-ms D sends each PONG D ms late; --damage-every-ms sends a damage event.

Protocol: prints {"port": N} on start; on EOF on stdin prints its totals as one JSON line
and exits. Totals "interior_expected"/"interior_lost" count, per client, the snapshots from
its first sent one to its last one sent while the client was still heard (within
--heard-ms), and the ones dropped between: what a client that listened the whole time
would count as expected and lost.
"""

import argparse
import collections
import json
import math
import os
import random
import select
import socket
import struct
import sys
import time

TICK = 1.0 / 60.0
TICKS_PER_SNAPSHOT = 3
MAX_PER_ADDR = 5
MAX_PER_SUBNET = 20
MAX_TOTAL = 1000
MAX_PACKETS_PER_WINDOW = 110
MAX_BYTES_PER_WINDOW = 10240
MAX_INPUTS_PER_WINDOW = 65
SILENCE = 30.0
KICK_REASON = b"Rate limit exceeded"
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("@qq")

ENTITY = struct.Struct("<I3f3fBBBf64sI")
SNAP_HEADER = struct.Struct("<BIII")
INPUT = struct.Struct("<IIHhhI")
PROMPT = b"Press E to interact".ljust(64, b"\0")
assert ENTITY.size == 103


class Conn:
    __slots__ = (
        "addr", "entity", "pos", "vel", "last_seq", "last_heard", "win_start", "win_packets",
        "win_bytes", "in_start", "in_count", "snap_counter", "first_sent", "last_sent",
        "drops", "drops_at_last_sent", "next_damage", "inputs",
    )

    def __init__(self, addr, entity, now):
        self.addr = addr
        self.entity = entity
        self.pos = [float(entity % 40) * 3.0, 0.0, float(entity // 40) * 3.0]
        self.vel = [0.0, 0.0, 0.0]
        self.last_seq = 0
        self.last_heard = now
        self.win_start = now
        self.win_packets = 0
        self.win_bytes = 0
        self.in_start = now
        self.in_count = 0
        self.snap_counter = 0
        self.first_sent = None
        self.last_sent = None
        self.drops = 0
        self.drops_at_last_sent = 0
        self.next_damage = None
        self.inputs = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--drop-every", type=int, default=0)
    ap.add_argument("--pong-delay-ms", type=float, default=0.0)
    ap.add_argument("--others", type=int, default=4)
    ap.add_argument("--damage-every-ms", type=float, default=0.0)
    ap.add_argument("--heard-ms", type=float, default=100.0)
    ap.add_argument("--start-tick", type=int, default=1000)
    args = ap.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    # Kernel arrival stamps: the rate windows are judged by when a datagram arrived, not by
    # when this (slower than the real) server got round to reading it, so a stall here never
    # makes a steady 60 Hz client look like a burst.
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((args.host, args.port))
    sock.setblocking(False)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)

    t = collections.Counter()
    refused = collections.Counter()
    per_addr = collections.Counter()  # admission entries per "ip:port", never released
    per_subnet = collections.Counter()  # per "a.b.c" (/24)
    admitted_per_subnet = collections.Counter()
    total_entries = 0
    conns = {}  # (ip, port) -> Conn
    next_entity = 1
    pongs = collections.deque()  # (due, addr, payload)
    start = time.monotonic()
    # Kernel stamps are wall-clock time; this maps them onto the monotonic clock.
    clock_offset = time.time() - time.monotonic()
    next_tick = start + TICK
    tick = args.start_tick
    heard = args.heard_ms / 1000.0
    delay = args.pong_delay_ms / 1000.0
    damage_every = args.damage_every_ms / 1000.0
    stdin_fd = sys.stdin.fileno()
    sendto = sock.sendto

    def admit(ip, port):
        nonlocal total_entries
        key = (ip, port)
        if per_addr[key] >= MAX_PER_ADDR:
            return "per_address"
        subnet = ip.rsplit(".", 1)[0]
        if per_subnet[subnet] >= MAX_PER_SUBNET:
            return "per_subnet"
        if total_entries >= MAX_TOTAL:
            return "total"
        per_addr[key] += 1
        per_subnet[subnet] += 1
        total_entries += 1
        return None

    def within_limits(c, n, now):
        if now - c.win_start > 1.0:
            c.win_start = now
            c.win_packets = 0
            c.win_bytes = 0
        if c.win_packets >= MAX_PACKETS_PER_WINDOW or c.win_bytes >= MAX_BYTES_PER_WINDOW:
            t["rate_limit_dropped"] += 1
            return False
        c.win_packets += 1
        c.win_bytes += n
        return True

    def on_datagram(data, addr, now):
        nonlocal next_entity
        n = len(data)
        kind = data[0]
        c = conns.get(addr)
        if c is not None:
            c.last_heard = now
        if kind == 6:
            t["connects"] += 1
            if n < 9:
                return
            why = admit(addr[0], addr[1])
            if why is not None:
                refused[why] += 1
                return
            if c is not None:
                t["connect_repeated_unanswered"] += 1
                return
            c = Conn(addr, next_entity, now)
            next_entity += 1
            if damage_every > 0:
                c.next_damage = now + damage_every
            conns[addr] = c
            t["admitted"] += 1
            admitted_per_subnet[addr[0].rsplit(".", 1)[0]] += 1
            # The public server sends the inventory before the reply.
            sync = bytes([19]) + struct.pack("<fI", 100.0, 24) + bytes(192)
            sendto(sync, addr)
            t["inventory_sync_sent"] += 1
            sendto(struct.pack("<BBII", 7, 1, c.entity, 1), addr)
            t["replies_sent"] += 1
            return
        if c is None:
            t["no_session_dropped"] += 1
            return
        if not within_limits(c, n, now):
            return
        if kind == 1:
            if n < 19:
                t["input_short"] += 1
                return
            if now - c.in_start > 1.0:
                c.in_start = now
                c.in_count = 1
            else:
                c.in_count += 1
            if c.in_count > MAX_INPUTS_PER_WINDOW:
                t["kicked_input_rate"] += 1
                sendto(bytes([6, len(KICK_REASON)]), addr)
                del conns[addr]
                return
            seq, _ts, flags, yaw_q, _pitch_q, _target = INPUT.unpack_from(data, 1)
            t["inputs"] += 1
            c.inputs += 1
            c.last_seq = seq
            fwd = (flags & 1) - ((flags >> 1) & 1)
            strafe = ((flags >> 3) & 1) - ((flags >> 2) & 1)
            yaw = yaw_q / 10000.0
            s, co = math.sin(yaw), math.cos(yaw)
            c.vel[0] = (fwd * co + strafe * s) * 6.0
            c.vel[2] = (fwd * s - strafe * co) * 6.0
        elif kind == 4:
            if n < 5:
                return
            t["pings"] += 1
            pong = b"\x05" + data[1:5]
            if delay > 0:
                # Its own clock reading: a long drain must not shorten the delay.
                pongs.append((time.monotonic() + delay, addr, pong))
            else:
                sendto(pong, addr)
                t["pongs_sent"] += 1
        else:
            t["other_ignored"] += 1

    def snapshot_round(now):
        # One record per client, then each client's snapshot from its own and its neighbours'.
        order = list(conns.values())
        if not order:
            return
        recs = []
        for c in order:
            c.pos[0] += c.vel[0] * TICK * TICKS_PER_SNAPSHOT
            c.pos[2] += c.vel[2] * TICK * TICKS_PER_SNAPSHOT
            recs.append(ENTITY.pack(c.entity, c.pos[0], c.pos[1], c.pos[2], c.vel[0],
                                    c.vel[1], c.vel[2], 100, 0, 0, 0.0, PROMPT, 0))
        m = len(order)
        k = min(args.others, m - 1)
        for i, c in enumerate(order):
            c.snap_counter += 1
            t["snapshots_generated"] += 1
            if args.drop_every > 0 and c.snap_counter % args.drop_every == 0:
                c.drops += 1
                t["snapshots_dropped"] += 1
                continue
            parts = [SNAP_HEADER.pack(2, tick & 0xFFFFFFFF, c.last_seq, k + 1), recs[i]]
            for j in range(1, k + 1):
                parts.append(recs[(i + j) % m])
            sendto(b"".join(parts), c.addr)
            t["snapshots_sent"] += 1
            if c.first_sent is None:
                c.first_sent = c.snap_counter
            if now - c.last_heard <= heard:
                c.last_sent = c.snap_counter
                c.drops_at_last_sent = c.drops
            if c.next_damage is not None and now >= c.next_damage:
                c.next_damage = now + damage_every
                sendto(struct.pack("<BBIIiBI", 3, 1, 0, c.entity, 5, 95,
                                   int((now - start) * 1000)), c.addr)
                t["damage_events_sent"] += 1

    deadline = start + args.max_seconds
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        wake = next_tick
        if pongs:
            wake = min(wake, pongs[0][0])
        timeout = max(0.0, wake - now)
        r, _, _ = select.select([sock, stdin_fd], [], [], timeout)
        if stdin_fd in r:
            if not os.read(stdin_fd, 4096):
                break
        if sock in r:
            now = time.monotonic()
            while True:
                try:
                    data, anc, _flags, addr = sock.recvmsg(2048, 64)
                except BlockingIOError:
                    break
                arrived = None
                for level, kind, blob in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, ns = TIMESPEC.unpack_from(blob)
                        arrived = sec + ns / 1e9 - clock_offset
                if arrived is None:
                    arrived = time.monotonic()
                if data:
                    on_datagram(data, addr, arrived)
        now = time.monotonic()
        while pongs and pongs[0][0] <= now:
            _, addr, pong = pongs.popleft()
            sendto(pong, addr)
            t["pongs_sent"] += 1
        while next_tick <= now:
            tick += 1
            next_tick += TICK
            if tick % TICKS_PER_SNAPSHOT == 0:
                snapshot_round(now)
            if tick % 60 == 0:
                for addr in [a for a, c in conns.items() if now - c.last_heard > SILENCE]:
                    del conns[addr]
                    t["silence_dropped"] += 1

    # What arrived before the end is counted: read the socket dry first.
    drained_until = time.monotonic() + 2.0
    while time.monotonic() < drained_until:
        r, _, _ = select.select([sock], [], [], 0.05)
        if not r:
            break
        while True:
            try:
                data, addr = sock.recvfrom(2048)
            except BlockingIOError:
                break
            if data and data[0] == 1 and addr in conns:
                t["inputs"] += 1

    interior_expected = 0
    interior_lost = 0
    for c in conns.values():
        if c.first_sent is not None and c.last_sent is not None:
            interior_expected += c.last_sent - c.first_sent + 1
            interior_lost += c.drops_at_last_sent
    totals = dict(t)
    totals.update({
        "refused": dict(refused),
        "admitted_per_subnet": dict(admitted_per_subnet),
        "admission_entries": total_entries,
        "clients_at_end": len(conns),
        "interior_expected": interior_expected,
        "interior_lost": interior_lost,
        "elapsed_s": round(time.monotonic() - start, 3),
    })
    print(json.dumps(totals), flush=True)


if __name__ == "__main__":
    main()
