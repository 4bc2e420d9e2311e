#!/usr/bin/env python3
"""A cafe (0xCAFE) server that behaves as cafe's implementation dialect.

docs/protocols/cafe.md ("Dialects") describes the public server the spec documents
(alexfranquesa/r-type, `rtype_server`). This stand-in reproduces what a load tool meets
there, written from that description only (not from tickswarm's Rust code):

  header    magic u16 = 0xCAFE (bytes FE CA), version u8 = 1, type u8, seq u32  (LE, 8 bytes)
  Hello     (0) name char[16], optionally + start_level u16, difficulty u8 (19 bytes)
  Welcome   (1) player_id u16, tick_rate u16 (60)
  Input     (2) player_id u16, input_mask u16, client_time_ms u32; bit 5 toggles pause
  Snapshot  (3) tick u32, flags u8 (bit 0 full), paused u8, last_input u32, count u16,
                count x 33-byte records, 14-byte stats trailer. No size cap.
  Ping      (4) echoed back WHOLE, the client's own header seq included; never initiated.

- ONE header sequence counter shared by every client (each client sees gaps of about N-1).
- A full snapshot every 3 ticks (players + enemies + projectiles), deltas between (players
  and projectiles: projectiles always ride in deltas). With the default 300 enemies a full
  snapshot is over 10 KB; every `--boss-every`-th full carries `--boss-entities` enemies
  (1800 by default: about 60 KB, like the 61 KB seen from the real server).
- `last_input` is the header seq of that client's latest Input.
- No Disconnect: a client silent for 2 s is dropped (checked every second).
- `--drop-every K` (test impairment, not the real server's): every K-th snapshot the server
  would send to a client (counted per client) is numbered like the others and then not sent,
  as if lost on the wire. The totals line holds `snapshots_dropped` and `snapshots_sent`
  (sent = not dropped), overall and per client under `per_client`, so a test can compare a
  measured loss with the server's own count.
- `snapshots_sent_while_heard` (overall and per client): snapshots sent to a client before
  its latest datagram arrived. The server keeps sending for up to 3 s after a client falls
  silent (no Disconnect); what it sent while the client still spoke is what that client
  could have applied.
- Default port 4242; `--port 0` picks a free one. The first stdout line is
  {"port": N}; the last, when the server stops (stdin closes, SIGINT/SIGTERM or
  --max-seconds), is one JSON line of totals.

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

MAGIC = 0xCAFE
VERSION = 1
T_HELLO, T_WELCOME, T_INPUT, T_SNAPSHOT, T_PING = 0, 1, 2, 3, 4

HEADER = struct.Struct("<HBBI")
WELCOME = struct.Struct("<HH")
INPUT = struct.Struct("<HHI")
SNAP_HEAD = struct.Struct("<IBBIH")  # tick, flags, paused, last_input, count
# entity_id, x, y, vx, vy, hp_cur, hp_max, sprite_id, owner_id, lives_cur, lives_max,
# is_spectating, ultimate_frame, ultimate_ready
ENTITY = struct.Struct("<HffffhhHHhhBBB")
STATS = struct.Struct("<IHHHHH")
assert ENTITY.size == 33 and STATS.size == 14 and SNAP_HEAD.size == 12

TICK_RATE = 60
FULL_EVERY = 3
SILENCE_DROP_S = 2.0
SILENCE_CHECK_S = 1.0


class Client:
    __slots__ = ("player_id", "last_seen", "last_input", "mask", "snapshots", "dropped",
                 "sent", "sent_heard")

    def __init__(self, player_id: int, now: float) -> None:
        self.player_id = player_id
        self.last_seen = now
        self.last_input = 0
        self.mask = 0
        self.snapshots = 0  # snapshots generated for this client (sent or dropped)
        self.dropped = 0
        self.sent = 0
        self.sent_heard = 0  # `sent` when the client's latest datagram arrived


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=4242)
    ap.add_argument("--enemies", type=int, default=300)
    ap.add_argument("--projectiles", type=int, default=12)
    ap.add_argument("--boss-every", type=int, default=10, help="every Nth full snapshot")
    ap.add_argument("--boss-entities", type=int, default=1800)
    ap.add_argument("--max-seconds", type=float, default=0.0)
    ap.add_argument("--drop-every", type=int, default=0,
                    help="drop every K-th snapshot to each client after numbering it (0 = off)")
    args = ap.parse_args()
    if args.drop_every < 0:
        ap.error("--drop-every must be 0 or more")

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((args.host, args.port))
    sock.setblocking(False)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)

    def enemy(i: int) -> bytes:
        return ENTITY.pack(1000 + i, float(i % 97), float(i % 53), -1.0, 0.0, 3, 3,
                           0x0200 + i % 4, 0, -1, -1, 0, 0, 0)

    enemies = b"".join(enemy(i) for i in range(args.enemies))
    boss = b"".join(enemy(i) for i in range(args.boss_entities))
    stats_trailer = STATS.pack(1234, 3, 1, 5, 20, 42)

    clients: dict[tuple, Client] = {}
    seq = 0  # ONE counter for every client
    next_player = 1
    paused = 0
    tick = 0
    totals = {
        "clients_seen": 0, "dropped_silent": 0, "ticks": 0, "snapshots_sent": 0,
        "snapshots_over_8k_sent": 0, "max_snapshot_bytes": 0, "pings_echoed": 0,
        "inputs": 0, "malformed": 0, "send_errors": 0, "snapshots_dropped": 0,
        "drop_every": args.drop_every,
    }
    # Per client ever seen (by player id): snapshots sent and dropped.
    per_client: dict[int, Client] = {}
    running = True

    def stop(*_a) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "sock")
    try:
        sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    except (ValueError, OSError, PermissionError):
        pass  # stdin not selectable (a file, /dev/null): stop by signal or --max-seconds

    def send(data: bytes, addr: tuple) -> bool:
        try:
            sock.sendto(data, addr)
            return True
        except OSError:
            totals["send_errors"] += 1
            return False

    start = time.monotonic()
    next_tick = start
    next_check = start + SILENCE_CHECK_S
    while running:
        now = time.monotonic()
        if args.max_seconds and now - start >= args.max_seconds:
            break
        timeout = max(0.0, min(next_tick, next_check) - now)
        for key, _ in sel.select(timeout):
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):  # EOF: the parent is done
                    sel.unregister(sys.stdin)
                    running = False
                continue
            while True:
                try:
                    data, addr = sock.recvfrom(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                now = time.monotonic()
                if len(data) < 8:
                    totals["malformed"] += 1
                    continue
                magic, ver, ty, cseq = HEADER.unpack_from(data)
                if magic != MAGIC or ver != VERSION:
                    totals["malformed"] += 1
                    continue
                body = len(data) - 8
                c = clients.get(addr)
                if ty == T_HELLO and body in (16, 19):
                    if c is None:
                        c = Client(next_player, now)
                        next_player = next_player % 65535 + 1
                        clients[addr] = c
                        per_client[c.player_id] = c
                        totals["clients_seen"] += 1
                    c.last_seen = now
                    c.sent_heard = c.sent
                    send(HEADER.pack(MAGIC, VERSION, T_WELCOME, seq)
                         + WELCOME.pack(c.player_id, TICK_RATE), addr)
                    seq = (seq + 1) & 0xFFFFFFFF
                elif c is None:
                    continue
                elif ty == T_INPUT and body == INPUT.size:
                    c.last_seen = now
                    c.sent_heard = c.sent
                    c.last_input = cseq
                    _pid, mask, _t = INPUT.unpack_from(data, 8)
                    if mask & 0x20 and not c.mask & 0x20:
                        paused ^= 1
                    c.mask = mask
                    totals["inputs"] += 1
                elif ty == T_PING and body == 4:
                    c.last_seen = now
                    c.sent_heard = c.sent
                    # Echoed back whole: the client's own header seq included.
                    if send(data, addr):
                        totals["pings_echoed"] += 1
                else:
                    totals["malformed"] += 1
        now = time.monotonic()
        if now >= next_check:
            next_check += SILENCE_CHECK_S
            for addr in [a for a, c in clients.items() if now - c.last_seen > SILENCE_DROP_S]:
                del clients[addr]
                totals["dropped_silent"] += 1
        if now < next_tick:
            continue
        next_tick += 1.0 / TICK_RATE
        if next_tick < now - 1.0:  # far behind: do not burst to catch up
            next_tick = now
        tick += 1
        totals["ticks"] += 1
        if not clients:
            continue
        full = tick % FULL_EVERY == 0
        players = b"".join(
            ENTITY.pack(c.player_id, float(tick % 640), float(c.player_id % 480), 1.0, 0.0,
                        100, 100, 0x0100, c.player_id, 3, 3, 0, 0, 0)
            for c in clients.values())
        shots = b"".join(
            ENTITY.pack(5000 + (tick + j) % 4000, float(j), float(tick % 480), 8.0, 0.0,
                        -1, -1, 0x0300, 0, -1, -1, 0, tick % 8, 0)
            for j in range(args.projectiles))
        records = players + shots
        if full:
            fulls = tick // FULL_EVERY
            records += boss if args.boss_every and fulls % args.boss_every == 0 else enemies
        count = len(records) // ENTITY.size
        if count > 0xFFFF:
            records = records[: 0xFFFF * ENTITY.size]
            count = 0xFFFF
        flags = 1 if full else 0
        for addr, c in clients.items():
            my_seq = seq
            seq = (seq + 1) & 0xFFFFFFFF  # numbered even when dropped: lost on the wire
            c.snapshots += 1
            if args.drop_every and c.snapshots % args.drop_every == 0:
                c.dropped += 1
                totals["snapshots_dropped"] += 1
                continue
            dgram = b"".join((
                HEADER.pack(MAGIC, VERSION, T_SNAPSHOT, my_seq),
                SNAP_HEAD.pack(tick & 0xFFFFFFFF, flags, paused, c.last_input, count),
                records, stats_trailer))
            if send(dgram, addr):
                c.sent += 1
                totals["snapshots_sent"] += 1
                if len(dgram) > 8192:
                    totals["snapshots_over_8k_sent"] += 1
                totals["max_snapshot_bytes"] = max(totals["max_snapshot_bytes"], len(dgram))
    totals["per_client"] = [
        {"player_id": pid, "snapshots_sent": c.sent, "snapshots_dropped": c.dropped,
         "snapshots_sent_while_heard": c.sent_heard}
        for pid, c in sorted(per_client.items())]
    totals["snapshots_sent_while_heard"] = sum(c.sent_heard for c in per_client.values())
    totals["seconds"] = round(time.monotonic() - start, 3)
    print(json.dumps(totals), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
