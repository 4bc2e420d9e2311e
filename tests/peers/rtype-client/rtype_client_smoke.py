#!/usr/bin/env python3
"""Smoke test for tests/peers/rtype-impaired-server/rtype_impaired_server.py: a small independent R-Type client.

Starts the server (loopback only, bounded in time) with a small --max-clients, connects
N clients (one more than fit), sends INPUT at 60 Hz and a PING every 50 ms, then checks:
  * CONNECT: ACCEPT for N, REJECT for the one too many; the ship id is the clientId when
    free, allocated when 0 or taken; the first ENTITY_CREATE after ACCEPT is the own ship;
    every client learns every ship (ENTITY_CREATE to everyone) and every enemy;
  * every datagram: version 1, header size == datagram size, fixed sizes per type;
  * SNAPSHOT: size == 10 + 22n, ticks advance by sim/snapshot, the missing ticks are exactly
    the client's K-th, 2K-th, ... snapshots; the server's per-client counts agree;
  * INPUT moves the ship (dx = +1: x grows at 300 u/s, vx reported); floats decode sanely
    in the chosen --float-order;
  * PING: every PONG is 8 bytes and its RTT >= --pong-delay-ms;
  * malformed datagrams and unknown types are counted by the server (and it keeps running);
  * DISCONNECT and a silent client (idle timeout) both give the others ENTITY_DESTROY;
  * snapshot rate holds.
Exit status 0 when every check passes. Standard library only.
"""

from __future__ import annotations

import argparse
import math
import os
import selectors
import socket
import struct
import sys
import time

HEADER = struct.Struct(">BBH")
CONNECT, INPUT, PING, DISCONNECT = 1, 2, 3, 4
ACCEPT, REJECT, PONG, GAMEOVER = 10, 11, 12, 13
ENTITY_CREATE, ENTITY_DESTROY, DAMAGE_EVENT, SNAPSHOT = 20, 21, 22, 23
FIXED = {ACCEPT: 4, REJECT: 4, PONG: 8, GAMEOVER: 4, ENTITY_CREATE: 18, ENTITY_DESTROY: 8,
         DAMAGE_EVENT: 10}
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from smoke_client import Checks, start_server, stop_server  # noqa: E402


def pkt(ptype, body=b"", version=1, size=None):
    return HEADER.pack(ptype, version, 4 + len(body) if size is None else size) + body


class Bot:
    def __init__(self, idx, addr, client_id, fo):
        self.idx, self.addr, self.client_id, self.fo = idx, addr, client_id, fo
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.accepted = self.rejected = 0
        self.entity = None
        self.after_accept = False
        self.created: dict[int, tuple] = {}
        self.destroyed: list[int] = []
        self.ticks: list[int] = []
        self.own: list[tuple] = []  # (tick, x, y, vx, vy)
        self.bad = []
        self.ping_sent = None
        self.rtts_ms: list[float] = []
        self.pongs_unexpected = 0
        self.first_snap_at = self.last_snap_at = None
        self.silent = False
        self.gone = False
        self.max_len = 0

    def send(self, data):
        self.sock.sendto(data, self.addr)

    def connect(self):
        self.send(pkt(CONNECT, struct.pack(">I", self.client_id)))

    def on_datagram(self, d, now):
        if len(d) < 4:
            return self.bad.append("short")
        t, v, size = HEADER.unpack_from(d, 0)
        if v != 1 or size != len(d):
            return self.bad.append(f"header t={t} v={v} size={size} len={len(d)}")
        if t in FIXED and len(d) != FIXED[t]:
            return self.bad.append(f"type {t} len {len(d)}")
        f = self.fo
        if t == ACCEPT:
            self.accepted += 1
            self.after_accept = True
        elif t == REJECT:
            self.rejected += 1
        elif t == ENTITY_CREATE:
            eid, = struct.unpack_from(">I", d, 4)
            x, y = struct.unpack_from(f + "ff", d, 8)
            sprite, = struct.unpack_from(">H", d, 16)
            if self.after_accept:
                self.entity = eid  # first create after ACCEPT is our own ship
                self.after_accept = False
            self.created[eid] = (x, y, sprite)
        elif t == ENTITY_DESTROY:
            self.destroyed.append(struct.unpack_from(">I", d, 4)[0])
        elif t == PONG:
            if self.ping_sent is None:
                self.pongs_unexpected += 1
            else:
                self.rtts_ms.append((now - self.ping_sent) * 1000.0)
                self.ping_sent = None
        elif t == SNAPSHOT:
            self.max_len = max(self.max_len, len(d))
            tick, n = struct.unpack_from(">IH", d, 4)
            if len(d) != 10 + 22 * n:
                return self.bad.append(f"snapshot n={n} len={len(d)}")
            self.ticks.append(tick)
            self.first_snap_at = self.first_snap_at or now
            self.last_snap_at = now
            for i in range(n):
                o = 10 + 22 * i
                eid, = struct.unpack_from(">I", d, o)
                x, y, vx, vy = struct.unpack_from(f + "ffff", d, o + 4)
                if not all(math.isfinite(z) and abs(z) < 1e5 for z in (x, y, vx, vy)):
                    self.bad.append(f"insane floats {x, y, vx, vy}")
                if eid == self.entity:
                    self.own.append((tick, x, y, vx, vy))
        else:
            self.bad.append(f"unexpected type {t}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=4, help="clients that fit (one more is rejected)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--drop-every", type=int, default=5)
    ap.add_argument("--pong-delay-ms", type=float, default=20.0)
    ap.add_argument("--snapshot-rate", type=int, default=20)
    ap.add_argument("--float-order", choices=("big", "little"), default="big")
    ap.add_argument("--start-tick", default="0")
    ap.add_argument("--client-timeout", type=float, default=1.0)
    a = ap.parse_args()
    fo = ">" if a.float_order == "big" else "<"
    step = 60 // a.snapshot_rate

    cmd = [sys.executable, os.path.join(HERE, "..", "rtype-impaired-server", "rtype_impaired_server.py"),
           "--drop-every", str(a.drop_every), "--pong-delay-ms", str(a.pong_delay_ms),
           "--snapshot-rate", str(a.snapshot_rate), "--float-order", a.float_order,
           "--max-clients", str(a.clients), "--client-timeout", str(a.client_timeout),
           "--start-tick", a.start_tick, "--max-seconds", str(a.seconds + 20)]
    srv, addr, first = start_server(cmd)
    check = Checks()
    failures = check.failures

    try:
        print(f"server: {first}")

        # client ids: 7, 0 (allocated), 7 again (taken: allocated), 9, ...; last one rejected
        ids = [7, 0, 7] + [9 + i for i in range(a.clients)]
        bots = [Bot(i, addr, ids[i], fo) for i in range(a.clients + 1)]
        sel = selectors.SelectSelector()
        for b in bots:
            sel.register(b.sock, selectors.EVENT_READ, b)

        junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        junk_msgs = [  # (datagram, counted as)
            (b"\x03\x01", "malformed"),                                  # short header
            (pkt(PING, version=2), "malformed"),                         # bad version
            (pkt(CONNECT, b"\0\0\0\1", size=20), "malformed"),           # declared != received
            (pkt(PING, b"\0\0"), "malformed"),                           # PING of 6 bytes
            (pkt(SNAPSHOT, struct.pack(">IH", 1, 0)), "malformed"),      # wrong direction
            (pkt(99, b"abc"), "unknown"),                                # unknown type
        ]
        for m, _ in junk_msgs:
            junk.sendto(m, addr)

        def pump(timeout):
            for key, _ in sel.select(timeout):
                b = key.data
                while True:
                    try:
                        data = b.sock.recv(65536)
                    except BlockingIOError:
                        break
                    b.on_datagram(data, time.monotonic())

        # Connect one at a time so "first ENTITY_CREATE after ACCEPT" is unambiguous.
        for b in bots:
            b.connect()
            t_end = time.monotonic() + 0.5
            while time.monotonic() < t_end and not (b.accepted or b.rejected):
                pump(0.01)
        bots[0].connect()  # repeat CONNECT: ACCEPT again, same ship
        live = [b for b in bots if b.accepted]

        start = time.monotonic()
        interval = 1.0 / 60
        next_input, next_ping = start, start + 0.05
        silent_at, quit_at = start + a.seconds / 3, start + a.seconds / 2
        end = start + a.seconds
        while True:
            now = time.monotonic()
            if now >= end:
                break
            pump(max(0.0, min(next_input, next_ping, end) - now))
            now = time.monotonic()
            if len(live) >= 3 and now >= silent_at:
                live[-1].silent = True
            if len(live) >= 3 and now >= quit_at and not live[-2].gone:
                live[-2].send(pkt(DISCONNECT))
                live[-2].gone = True
            if now >= next_input:
                next_input += interval
                for b in live:
                    if not (b.silent or b.gone):
                        b.send(pkt(INPUT, struct.pack(">I", b.entity or 0)
                                   + struct.pack(fo + "ff", 1.0, 0.25) + b"\0"))
            if now >= next_ping:
                next_ping += 0.05
                for b in live:
                    if not (b.silent or b.gone) and b.ping_sent is None:
                        b.ping_sent = time.monotonic()
                        b.send(pkt(PING))
        for b in live:
            if not (b.silent or b.gone):
                b.send(pkt(DISCONNECT))
        t_end = time.monotonic() + 0.2
        while time.monotonic() < t_end:
            pump(0.05)
        tot = stop_server(srv)
    finally:
        if srv.poll() is None:
            srv.kill()
    per = {c["entity"]: c for c in tot["per_client"]}
    K = a.drop_every

    print(f"server: { {k: tot[k] for k in list(tot)[:9]} }")
    print(f"server: ticks={tot['ticks']} max_tick_lag_ms={tot['max_tick_lag_ms']} "
          f"late>1ms={tot['ticks_late_1ms']} late>5ms={tot['ticks_late_5ms']} "
          f"cpu={tot['cpu_s']}s send_errors={tot['send_errors']} ended_by={tot['ended_by']}")
    n_mal = sum(1 for _, k in junk_msgs if k == "malformed")
    check(tot["malformed"] == n_mal and tot["unknown_type"] == 1,
          f"malformed {tot['malformed']} == {n_mal}, unknown_type {tot['unknown_type']} == 1 "
          f"{tot['malformed_by_reason']}")
    check(len(live) == a.clients and bots[-1].rejected == 1 and not bots[-1].accepted
          and tot["rejects_sent"] == 1, f"{len(live)} accepted, one REJECT at max-clients")
    ents = [b.entity for b in live]
    check(ents[0] == 7 and ents[1] not in (None, 0, 7) and ents[2] not in (None, 0, 7)
          and ents[3:] == [b.client_id for b in live[3:]] and len(set(ents)) == len(ents),
          f"ship ids: clientId when free, allocated otherwise {ents}")
    check(bots[0].accepted == 2, f"repeat CONNECT answered ({bots[0].accepted} ACCEPTs)")
    ships = set(ents)
    enemies = {e for e in bots[0].created if e not in ships}
    check(len(enemies) == 4, f"4 enemies announced {sorted(enemies)}")
    for b in live:
        check(ships | enemies <= set(b.created),
              f"client {b.idx}: ENTITY_CREATE for every ship and enemy")
    silent, quitter = live[-1], live[-2]
    for b in live[:-2]:
        # (clients that said goodbye before this one at the very end add to the list)
        check({silent.entity, quitter.entity} <= set(b.destroyed) <= ships - {b.entity}
              and len(set(b.destroyed)) == len(b.destroyed),
              f"client {b.idx}: ENTITY_DESTROY for the quitter and the silent one {b.destroyed}")
    check(per[silent.entity]["ended"] == "timeout", "silent client timed out")
    check(per[quitter.entity]["ended"] == "disconnect", "DISCONNECT forgets the client")

    all_rtts = []
    for b in live:
        sc = per[b.entity]
        tag = f"client {b.idx} (ship {b.entity})"
        print(f"{tag}: {len(b.ticks)} snapshots, {len(b.rtts_ms)} pongs, max {b.max_len} B; "
              f"server: generated={sc['snapshots_generated']} dropped={sc['snapshots_dropped']} "
              f"sent={sc['snapshots_sent']} pongs={sc['pongs_sent']} ended={sc['ended']} "
              f"input_entity_mismatch={sc['input_entity_mismatch']}")
        all_rtts += b.rtts_ms
        check(not b.bad and b.pongs_unexpected == 0, f"{tag}: all datagrams valid {b.bad[:3]}")
        t0 = b.ticks[0]
        rel = [(t - t0) & 0xFFFFFFFF for t in b.ticks]
        check(all(r % step == 0 for r in rel) and rel == sorted(rel),
              f"{tag}: ticks in order, multiples of step {step} from the first")
        got = {r // step for r in rel}
        last = max(got)
        missing = sorted(set(range(last + 1)) - got)
        expect = [k - 1 for k in range(1, last + 2) if K and k % K == 0]
        check(missing == expect, f"{tag}: missing snapshots exactly every {K}th "
              f"({len(missing)} missing of {last + 1})")
        check(sc["snapshots_dropped"] - len(missing) in (0, 1)
              and sc["snapshots_sent"] == len(b.ticks)
              and sc["snapshots_generated"] == sc["snapshots_sent"] + sc["snapshots_dropped"],
              f"{tag}: server counts agree (sent == received, generated == sent + dropped)")
        if len(b.own) > 2 and not b.silent:
            (t1, x1, y1, vx, vy), (t2, x2, y2, *_) = b.own[1], b.own[-1]
            dt = ((t2 - t1) & 0xFFFFFFFF) / 60
            exp_dx = min(300 * dt, 1280 - x1)
            check(abs((x2 - x1) - exp_dx) < 6 and y2 > y1 and abs(vx - 300) < 1e-3
                  and abs(vy - 75) < 1e-3,
                  f"{tag}: ship moved by input: x {x1:.1f}->{x2:.1f} (expected +{exp_dx:.1f}) "
                  f"vx={vx} vy={vy}")
        if not (b.silent or b is quitter):
            span = b.last_snap_at - b.first_snap_at
            rate = last / span if span > 0 else 0
            check(abs(rate - a.snapshot_rate) < 0.05 * a.snapshot_rate,
                  f"{tag}: snapshot rate {rate:.2f}/s")
    if all_rtts:
        all_rtts.sort()
        check(all_rtts[0] >= a.pong_delay_ms,
              f"PONG RTT min {all_rtts[0]:.3f} ms >= {a.pong_delay_ms} (p50 "
              f"{all_rtts[len(all_rtts) // 2]:.3f}, max {all_rtts[-1]:.3f}, n={len(all_rtts)})")
    else:
        check(False, "no PONGs")
    print("SMOKE " + ("PASS" if not failures else f"FAIL ({len(failures)} checks)"))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
