#!/usr/bin/env python3
"""Smoke test for tests/peers/cafe-impaired-server/cafe_impaired_server.py: a small independent cafe client.

Starts the server (loopback only, bounded in time), connects N clients, sends inputs at the
tick rate and pings, then checks:
  * Welcome: distinct player ids, tick rate echoed, a repeated Hello gets the same id;
  * Ping: every echo carries our timestamp unchanged and its RTT >= --pong-delay-ms;
  * header seq: with --drop-every K, per client exactly every K-th snapshot is missing
    (the missing header seqs are exactly the snapshot ticks that did not arrive, the
    missing ticks are exactly indices K, 2K, ... counted from the client's first snapshot),
    and the server's per-client counters agree;
  * snapshots: size < 1400, (len - 14) % 33 == 0 for the blob, flags bit0 every
    --full-every ticks, own entity present in full snapshots and moving as commanded;
  * malformed datagrams are counted by the server (and it keeps running);
  * a client that goes silent is forgotten after --client-timeout;
  * the tick rate holds (snapshots per client per second, server's max tick lag).
Exit status 0 when every check passes. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import struct
import sys
import time

HEADER = struct.Struct("<HBBI")
ENTITY = struct.Struct("<HffffhhHHhhBBB")
STATS = struct.Struct("<IHHHHH")
MAGIC, VERSION = 0xCAFE, 1
HELLO, WELCOME, INPUT, SNAPSHOT, PING, DISCONNECT = range(6)
RIGHT, DOWN = 8, 2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from smoke_client import Checks, start_server, stop_server  # noqa: E402


class Bot:
    def __init__(self, idx, addr):
        self.idx = idx
        self.addr = addr
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.seq = 0
        self.player_id = None
        self.welcomes = 0
        self.silent = False  # stops sending (to exercise the server's timeout)
        self.closed = False
        self.seqs: list[int] = []  # header seq of every datagram received, in order
        self.snap_seq_tick: list[tuple[int, int]] = []
        self.ticks: list[int] = []
        self.full_ticks: list[int] = []
        self.bad_size = 0
        self.max_len = 0
        self.own_missing_in_full = 0
        self.own_pos: list[tuple[int, float, float]] = []
        self.pings: dict[int, float] = {}
        self.rtts_ms: list[float] = []
        self.pong_unknown = 0
        self.first_snap_at = None
        self.last_snap_at = None

    def send(self, mtype, body=b""):
        self.sock.sendto(HEADER.pack(MAGIC, VERSION, mtype, self.seq) + body, self.addr)
        self.seq += 1

    def hello(self):
        self.send(HELLO, f"bot{self.idx}".encode().ljust(16, b"\0")[:16])

    def on_datagram(self, data, now):
        magic, ver, mtype, seq = HEADER.unpack_from(data, 0)
        assert magic == MAGIC and ver == VERSION, (magic, ver)
        self.seqs.append(seq)
        if mtype == WELCOME:
            pid, rate = struct.unpack_from("<HH", data, 8)
            assert self.player_id in (None, pid), "repeat Hello changed player id"
            self.player_id, self.rate = pid, rate
            self.welcomes += 1
        elif mtype == PING:
            (ts,) = struct.unpack_from("<I", data, 8)
            sent = self.pings.pop(ts, None)
            if sent is None:
                self.pong_unknown += 1
            else:
                self.rtts_ms.append((now - sent) * 1000.0)
        elif mtype == SNAPSHOT:
            self.max_len = max(self.max_len, len(data))
            tick, flags, paused = struct.unpack_from("<IBB", data, 8)
            blob = data[14:]
            if (len(blob) - STATS.size) % ENTITY.size != 0 or len(data) >= 1400:
                self.bad_size += 1
                return
            self.ticks.append(tick)
            self.snap_seq_tick.append((seq, tick))
            self.first_snap_at = self.first_snap_at or now
            self.last_snap_at = now
            n = (len(blob) - STATS.size) // ENTITY.size
            own = None
            for i in range(n):
                rec = ENTITY.unpack_from(blob, i * ENTITY.size)
                if rec[0] == self.player_id:
                    own = rec
            if flags & 1:
                self.full_ticks.append(tick)
                if own is None:
                    self.own_missing_in_full += 1
            if own is not None:
                self.own_pos.append((tick, own[1], own[2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--drop-every", type=int, default=5)
    ap.add_argument("--pong-delay-ms", type=float, default=20.0)
    ap.add_argument("--tick-rate", type=int, default=60)
    ap.add_argument("--full-every", type=int, default=30)
    ap.add_argument("--client-timeout", type=float, default=1.0)
    ap.add_argument("--silent-client", action=argparse.BooleanOptionalAction, default=True,
                    help="make the last client go silent halfway to test the timeout")
    a = ap.parse_args()

    cmd = [sys.executable, os.path.join(HERE, "..", "cafe-impaired-server", "cafe_impaired_server.py"),
           "--drop-every", str(a.drop_every), "--pong-delay-ms", str(a.pong_delay_ms),
           "--tick-rate", str(a.tick_rate), "--full-every", str(a.full_every),
           "--client-timeout", str(a.client_timeout),
           "--max-seconds", str(a.seconds + 20)]
    srv, addr, first = start_server(cmd)
    check = Checks()
    failures = check.failures

    try:
        print(f"server: {first}")

        sel = selectors.SelectSelector()  # microsecond timeouts (epoll rounds to ms)
        bots = [Bot(i, addr) for i in range(a.clients)]
        for b in bots:
            sel.register(b.sock, selectors.EVENT_READ, b)
            b.hello()

        # Malformed datagrams from a separate socket: the server must count them.
        junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        junk_msgs = [
            b"\xfe\xca\x01",                                    # short header
            HEADER.pack(0xBEEF, 1, PING, 0) + b"\0" * 4,        # bad magic
            HEADER.pack(MAGIC, 2, PING, 0) + b"\0" * 4,         # bad version
            HEADER.pack(MAGIC, 1, 9, 0),                         # unknown type
            HEADER.pack(MAGIC, 1, PING, 0) + b"\0" * 3,         # bad size
            HEADER.pack(MAGIC, 1, SNAPSHOT, 0) + b"\0" * 20,    # wrong direction
        ]
        for m in junk_msgs:
            junk.sendto(m, addr)

        start = time.monotonic()
        interval = 1.0 / a.tick_rate
        next_input = start
        next_ping = start + 0.1
        token = 1
        rehello_done = False
        silent_at = start + a.seconds / 2
        end = start + a.seconds
        while True:
            now = time.monotonic()
            if now >= end:
                break
            for key, _ in sel.select(max(0.0, min(next_input, next_ping, end) - now)):
                b = key.data
                while True:
                    try:
                        data = b.sock.recv(2048)
                    except BlockingIOError:
                        break
                    b.on_datagram(data, time.monotonic())
            now = time.monotonic()
            if a.silent_client and len(bots) > 1 and now >= silent_at:
                bots[-1].silent = True
            if not rehello_done and now - start > 0.5:
                bots[0].hello()  # repeat Hello: must get the same Welcome again
                rehello_done = True
            if now >= next_input:
                next_input += interval
                for b in bots:
                    if b.player_id is not None and not b.silent:
                        mask = RIGHT if (now - start) < a.seconds / 4 else DOWN
                        b.send(INPUT, struct.pack("<HHI", b.player_id, mask,
                                                  int(now * 1000) & 0xFFFFFFFF))
            if now >= next_ping:
                next_ping += 0.05
                for b in bots:
                    if b.player_id is not None and not b.silent:
                        b.pings[token] = time.monotonic()
                        b.send(PING, struct.pack("<I", token))
                        token += 1
        # Orderly goodbye for the talking clients, then drain the last datagrams.
        for b in bots:
            if not b.silent:
                b.send(DISCONNECT)
        drain_end = time.monotonic() + 0.2
        while time.monotonic() < drain_end:
            for key, _ in sel.select(0.05):
                b = key.data
                while True:
                    try:
                        data = b.sock.recv(2048)
                    except BlockingIOError:
                        break
                    b.on_datagram(data, time.monotonic())
        totals = stop_server(srv)
    finally:
        if srv.poll() is None:
            srv.kill()
    per_client = {c["player_id"]: c for c in totals["per_client"]}

    K = a.drop_every
    print(f"server totals: { {k: totals[k] for k in list(totals)[:6]} }")
    print(f"server: ticks={totals['ticks']} max_tick_lag_ms={totals['max_tick_lag_ms']} "
          f"late>1ms={totals['ticks_late_1ms']} late>5ms={totals['ticks_late_5ms']} "
          f"uptime={totals['uptime_s']}s cpu={totals['cpu_s']}s send_errors={totals['send_errors']}")
    check(totals["malformed"] == len(junk_msgs),
          f"malformed counted: {totals['malformed']} == {len(junk_msgs)} "
          f"{totals['malformed_by_reason']}")
    check(totals["clients_seen"] == a.clients, f"clients_seen {totals['clients_seen']}")
    pids = [b.player_id for b in bots]
    check(None not in pids and len(set(pids)) == len(pids), f"distinct player ids {pids}")
    check(bots[0].welcomes == 2, f"repeat Hello answered with same Welcome "
          f"({bots[0].welcomes} welcomes, id {bots[0].player_id})")

    all_rtts = []
    for b in bots:
        sc = per_client[b.player_id]
        tag = f"client {b.idx} (player {b.player_id})"
        print(f"{tag}: {len(b.ticks)} snapshots, {len(b.rtts_ms)} pongs, max datagram "
              f"{b.max_len} B, server says generated={sc['snapshots_generated']} "
              f"dropped={sc['snapshots_dropped']} sent={sc['datagrams_sent']} "
              f"pongs={sc['pongs_sent']} ended={sc['ended']}")
        all_rtts += b.rtts_ms
        check(b.bad_size == 0 and b.max_len < 1400, f"{tag}: snapshot sizes valid")
        # header seq gaps
        seqs = sorted(b.seqs)
        check(len(set(seqs)) == len(seqs), f"{tag}: no duplicate seqs")
        missing_seq = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
        # snapshot ticks: the client's k-th snapshot (k from 1) is the one at t0 + k - 1
        t0, tl = b.ticks[0], b.ticks[-1]
        missing_ticks = sorted(set(range(t0, tl + 1)) - set(b.ticks))
        expect_ticks = [t0 + k - 1 for k in range(1, tl - t0 + 2) if K and k % K == 0]
        check(missing_ticks == expect_ticks,
              f"{tag}: missing snapshot ticks are exactly every {K}th "
              f"({len(missing_ticks)} missing of {tl - t0 + 1})")
        # every missing seq sits between two snapshots whose ticks skip one: seq gaps ==
        # snapshot drops, and nothing else (welcome/pong) was lost.
        gap_ticks = []
        st = sorted(b.snap_seq_tick)
        for (s1, t1), (s2, t2) in zip(st, st[1:]):
            if t2 - t1 == 2:
                gap_ticks.append(t1 + 1)
        check(len(missing_seq) == len(missing_ticks) and gap_ticks == missing_ticks,
              f"{tag}: header-seq gaps {len(missing_seq)} == snapshot drops "
              f"{len(missing_ticks)}; seq loss rate {len(missing_seq) / (seqs[-1] - seqs[0] + 1):.4f}")
        gen = sc["snapshots_generated"]
        check(sc["snapshots_dropped"] == (gen // K if K else 0),
              f"{tag}: server dropped {sc['snapshots_dropped']} == floor({gen}/{K})")
        check(sc["snapshots_dropped"] - len(missing_ticks) in (0, 1),
              f"{tag}: server drops vs client-observed ({sc['snapshots_dropped']} vs "
              f"{len(missing_ticks)}; a drop after the last received datagram is invisible)")
        check(sc["seq_consumed"] == sc["datagrams_sent"] + sc["snapshots_dropped"]
              + sc["send_errors"], f"{tag}: seq consumed == sent + dropped")
        # full snapshots
        fe = a.full_every
        fulls = [t for t in b.full_ticks if t != b.full_ticks[0]]
        check(all(t % fe == 0 for t in fulls) and b.own_missing_in_full == 0,
              f"{tag}: full snapshots on ticks % {fe} (+ first), own entity in each")
        if b.own_pos:
            (_, x0, y0), (_, x1, y1) = b.own_pos[0], b.own_pos[-1]
            check(x1 > x0 and y1 > y0, f"{tag}: entity moved ({x0:.0f},{y0:.0f}) -> "
                  f"({x1:.0f},{y1:.0f})")
        if b.silent:
            check(sc["ended"] == "timeout", f"{tag}: silent client timed out "
                  f"(last snapshot {b.last_snap_at - start:.2f}s into the run)")
        else:
            check(sc["ended"] == "disconnect", f"{tag}: forgotten on Disconnect")
            span = b.last_snap_at - b.first_snap_at
            rate = (len(b.ticks) + len(missing_ticks) - 1) / span if span > 0 else 0
            check(abs(rate - a.tick_rate) < 0.03 * a.tick_rate,
                  f"{tag}: snapshot rate {rate:.2f}/s (tick rate {a.tick_rate})")
        check(b.pong_unknown == 0, f"{tag}: every echo carries one of our timestamps")

    if all_rtts:
        all_rtts.sort()
        mn, p50, mx = all_rtts[0], all_rtts[len(all_rtts) // 2], all_rtts[-1]
        check(mn >= a.pong_delay_ms,
              f"pong RTT min {mn:.3f} ms >= {a.pong_delay_ms} ms (p50 {p50:.3f}, max "
              f"{mx:.3f}, n={len(all_rtts)})")
    else:
        check(False, "no pongs received")

    print("SMOKE " + ("PASS" if not failures else f"FAIL ({len(failures)} checks)"))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
