#!/usr/bin/env python3
"""Independent stand-in for the R-Type server the rtype spec documents, as released.

Written from the wire facts listed in docs/protocols/rtype.md ("The implementation
dialect"), read from the server's public source (MIAOU-TYPE/rtype, tag v1.49.0), not from
tickswarm's Rust code, so the load tool's measurements can be checked against a second
implementation and this peer's own counts.

TCP (the login), on --port (the server's `--port`, 8080 by default there):
  frame    len u32 (1..65536, else the connection is dropped), then len payload bytes
  payload  type u8, requestId u32, body                         (all integers big-endian)
  0x01 HELLO          c->s  version u16 (exactly: fewer -> ERROR 3, more -> ERROR 7)
  0x10 WELCOME        s->c  version u16 (echoed), sessionId u32, udpPort u16 (always 0)
  0x11 ERROR_MESSAGE  s->c  code u16, text (len u16 + bytes)
  any other type       -> ERROR_MESSAGE code 2 (the room messages are not played here)
  A payload under 5 bytes -> ERROR_MESSAGE code 1, requestId 0.

UDP (play), on --port + 1:
  header   type u8, version u8 = 1, size u16 = whole datagram; anything else is dropped
  0x01 CONNECT    c->s  (header only)
  0x02 DISCONNECT c->s  (header only): leaves the room, forgets the session; no reply
  0x03 INPUT      c->s  flags u8 (bit0 up, 1 down, 2 left, 3 right, 4 shoot)
  0x04 PING       c->s  (header only)
  0x10 ACCEPT     s->c  (header only)
  0x12 SNAPSHOT   s->c  count u16, count x (id u64, x f32, y f32, spriteId u32)  6+20n bytes
  0x13 PONG       s->c  (header only)

Quirks kept from the real server:
  * UDP sessions are keyed by source address; the TCP login is not bound to them (WELCOME's
    sessionId names the TCP session; one counter numbers both kinds).
  * CONNECT from an address in no room makes a new room for it alone (4 seats) with its
    own game loop at 60 Hz; CONNECT from an address already in a room adds one more ship
    for it; both answer ACCEPT at once.
  * Snapshots: every 50 ms, each room's entities (its ships, and after 5 s --enemies
    drifting enemies) to every session in it. No tick, no sequence.
  * PING is answered from the room's game loop (the next 1/60 s step), only for an address
    in a room. PONG leaves --pong-delay-ms after that step.
  * No timeout: a silent client keeps its room for ever.

Impairments: --drop-every K skips every K-th snapshot of each client (counted per client
from its first), --drop-pong-every K every K-th PONG of each client, --login-error answers
HELLO with ERROR_MESSAGE instead of WELCOME.

Ground truth: the first stdout line is {"tcp_port": P, "udp_port": P+1}; on EOF on stdin,
SIGTERM or after --max-seconds one JSON line of totals follows and the process exits 0.

Standard library only.
"""

from __future__ import annotations

import argparse
import heapq
import json
import select
import selectors
import signal
import socket
import struct
import sys
import threading
import time

MAX_FRAME = 64 * 1024
TICK = 1.0 / 60.0
SNAPSHOT_EVERY = 0.050
ENEMIES_AFTER = 5.0
SPEED = 200.0  # units a second a held key moves a ship

HELLO, WELCOME, ERROR_MESSAGE = 0x01, 0x10, 0x11
CONNECT, DISCONNECT, INPUT, PING = 0x01, 0x02, 0x03, 0x04
ACCEPT, SNAPSHOT, PONG = 0x10, 0x12, 0x13


def bind_pair(port: int) -> tuple[socket.socket, socket.socket]:
    """A TCP listener on `port` (0: any) and a UDP socket on the port after it."""
    for _ in range(100):
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("127.0.0.1", port))
        p = tcp.getsockname()[1]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind(("127.0.0.1", p + 1))
        except OSError:
            tcp.close()
            udp.close()
            if port:
                raise
            continue
        tcp.listen(64)
        tcp.setblocking(False)
        udp.setblocking(False)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        return tcp, udp
    raise OSError("no free TCP port with a free UDP port after it")


class Room:
    def __init__(self, rid: int, now: float):
        self.rid = rid
        self.created = now
        self.next_entity = 0
        self.ships: dict[tuple, list[list]] = {}  # addr -> ships [id, x, y, flags]
        self.enemies: list[list] = []
        self.pings: list[tuple] = []  # addrs whose PING waits for the next step
        self.next_step = now + TICK

    def new_id(self) -> int:
        i = self.next_entity
        self.next_entity += 1
        return i

    def entities(self):
        for ships in self.ships.values():
            for s in ships:
                yield s[0], s[1], s[2], 1
        for e in self.enemies:
            yield e[0], e[1], e[2], 2


class Peer:
    def __init__(self, a):
        self.a = a
        self.tcp, self.udp = bind_pair(a.port)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.tcp, selectors.EVENT_READ, "accept")
        self.sel.register(self.udp, selectors.EVENT_READ, "udp")
        self.conns: dict[socket.socket, bytearray] = {}
        self.next_session = 1
        self.tcp_sessions: dict[tuple, int] = {}
        self.udp_sessions: dict[tuple, int] = {}
        self.rooms: dict[int, Room] = {}
        self.room_of: dict[tuple, int] = {}
        self.next_room = 1
        self.snap_count: dict[tuple, int] = {}
        self.pong_count: dict[tuple, int] = {}
        self.pongs: list[tuple] = []  # heap of (due, seq, addr)
        self.seq = 0
        self.t = dict(tcp_accepted=0, tcp_dropped=0, hellos=0, welcomes_sent=0,
                      errors_sent=0, udp_sessions=0, connects=0, accepts_sent=0,
                      rooms_created=0, inputs=0, pings=0, pongs_sent=0, pongs_dropped=0,
                      snapshots_generated=0, snapshots_dropped=0, snapshots_sent=0,
                      snapshot_entities_max=0, malformed=0, unknown_type=0, disconnects=0,
                      stream_bytes=0)
        self.stopping = False
        self.lock = threading.Lock()

    # --- TCP ---------------------------------------------------------------------------
    def session_tcp(self, addr) -> int:
        if addr not in self.tcp_sessions:
            self.tcp_sessions[addr] = self.next_session
            self.next_session += 1
        return self.tcp_sessions[addr]

    def send_frame(self, c: socket.socket, payload: bytes):
        try:
            c.sendall(struct.pack(">I", len(payload)) + payload)
        except OSError:
            pass

    def send_error(self, c, req: int, code: int, text: str):
        b = text.encode()
        self.send_frame(c, struct.pack(">BIHH", ERROR_MESSAGE, req, code, len(b)) + b)
        self.t["errors_sent"] += 1

    def on_tcp_payload(self, c: socket.socket, p: bytes):
        addr = c.getpeername()
        if len(p) < 5:
            return self.send_error(c, 0, 1, "TCP header: truncated payload")
        ty, req = struct.unpack_from(">BI", p)
        body = p[5:]
        sid = self.session_tcp(addr)
        if ty != HELLO:
            return self.send_error(c, req, 2, "Unsupported TCP packet type")
        self.t["hellos"] += 1
        if len(body) < 2:
            return self.send_error(c, req, 3, "TCP HELLO ver(u16): truncated payload")
        if len(body) > 2:
            return self.send_error(c, req, 7, "HELLO: unexpected trailing bytes")
        if self.a.login_error:
            return self.send_error(c, req, 99, "login refused by --login-error")
        (ver,) = struct.unpack(">H", body)
        self.send_frame(c, struct.pack(">BIHIH", WELCOME, req, ver, sid, 0))
        self.t["welcomes_sent"] += 1
        if self.a.stream_after_welcome:
            threading.Thread(target=self.stream_frames, args=(c,), daemon=True).start()

    def stream_frames(self, c: socket.socket):
        """--stream-after-welcome: room frames (ROOMS_LIST, 0x12) on the login stream as fast
        as the client takes them, until the peer stops or the client goes."""
        frame = struct.pack(">IBIH", 7, 0x12, 0, 0)
        block = frame * (65536 // len(frame))
        while not self.stopping:
            try:
                n = c.send(block)
            except BlockingIOError:
                select.select([], [c], [], 0.05)
                continue
            except OSError:
                return
            with self.lock:
                self.t["stream_bytes"] += n

    def on_tcp_read(self, c: socket.socket):
        try:
            data = c.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            return self.drop(c)
        buf = self.conns[c]
        buf += data
        while len(buf) >= 4:
            (n,) = struct.unpack_from(">I", buf)
            if n == 0 or n > MAX_FRAME:
                self.t["tcp_dropped"] += 1
                return self.drop(c)
            if len(buf) < 4 + n:
                break
            p = bytes(buf[4:4 + n])
            del buf[:4 + n]
            self.on_tcp_payload(c, p)

    def drop(self, c):
        self.sel.unregister(c)
        self.conns.pop(c, None)
        c.close()  # the session stays: the real server forgets nothing on close

    # --- UDP ---------------------------------------------------------------------------
    def send_udp(self, addr, data: bytes):
        try:
            self.udp.sendto(data, addr)
        except OSError:
            pass

    def on_udp(self, now: float):
        for _ in range(256):
            try:
                data, addr = self.udp.recvfrom(4096)
            except BlockingIOError:
                return
            if len(data) < 4 or data[1] != 1 or struct.unpack_from(">H", data, 2)[0] != len(data):
                self.t["malformed"] += 1
                continue
            if addr not in self.udp_sessions:
                self.udp_sessions[addr] = self.next_session
                self.next_session += 1
                self.t["udp_sessions"] += 1
            ty = data[0]
            if ty == CONNECT:
                self.on_connect(addr, now)
            elif ty == INPUT:
                if len(data) < 5:
                    self.t["malformed"] += 1
                    continue
                self.t["inputs"] += 1
                room = self.rooms.get(self.room_of.get(addr, 0))
                if room:
                    for s in room.ships.get(addr, []):
                        s[3] = data[4]
            elif ty == PING:
                self.t["pings"] += 1
                room = self.rooms.get(self.room_of.get(addr, 0))
                if room:
                    room.pings.append(addr)
            elif ty == DISCONNECT:
                self.t["disconnects"] += 1
                rid = self.room_of.pop(addr, 0)
                room = self.rooms.get(rid)
                if room:
                    room.ships.pop(addr, None)
                    if not room.ships:
                        del self.rooms[rid]
                self.udp_sessions.pop(addr, None)
            else:
                self.t["unknown_type"] += 1

    def on_connect(self, addr, now: float):
        self.t["connects"] += 1
        rid = self.room_of.get(addr)
        if rid is None:
            rid = self.next_room
            self.next_room += 1
            self.rooms[rid] = Room(rid, now)
            self.room_of[addr] = rid
            self.t["rooms_created"] += 1
        room = self.rooms[rid]
        room.ships.setdefault(addr, []).append([room.new_id(), 100.0, 100.0 + 50 * len(room.ships), 0])
        self.send_udp(addr, bytes([ACCEPT, 1, 0, 4]))
        self.t["accepts_sent"] += 1

    # --- time ----------------------------------------------------------------------------
    def step_rooms(self, now: float):
        for room in list(self.rooms.values()):
            while room.next_step <= now:
                room.next_step += TICK
                for ships in room.ships.values():
                    for s in ships:
                        f = s[3]
                        s[1] += SPEED * TICK * ((f >> 3 & 1) - (f >> 2 & 1))
                        s[2] += SPEED * TICK * ((f >> 1 & 1) - (f & 1))
                if now - room.created >= ENEMIES_AFTER and len(room.enemies) < self.a.enemies:
                    room.enemies.append([room.new_id(), 1280.0, 100.0 * len(room.enemies), 0])
                for e in room.enemies:
                    e[1] = e[1] - 100.0 * TICK if e[1] > 0 else 1280.0
                for addr in room.pings:
                    self.seq += 1
                    # Held from when the step runs (never before the PING came).
                    heapq.heappush(self.pongs, (now + self.a.pong_delay_ms / 1000.0, self.seq, addr))
                room.pings.clear()

    def send_pongs(self, now: float):
        while self.pongs and self.pongs[0][0] <= now:
            _, _, addr = heapq.heappop(self.pongs)
            if addr not in self.room_of:
                continue
            n = self.pong_count.get(addr, 0) + 1
            self.pong_count[addr] = n
            if self.a.drop_pong_every and n % self.a.drop_pong_every == 0:
                self.t["pongs_dropped"] += 1
                continue
            self.send_udp(addr, bytes([PONG, 1, 0, 4]))
            self.t["pongs_sent"] += 1

    def send_snapshots(self):
        for room in self.rooms.values():
            ents = list(room.entities())
            if not ents:
                continue
            size = 6 + 20 * len(ents)
            d = bytearray(struct.pack(">BBHH", SNAPSHOT, 1, size, len(ents)))
            for i, x, y, sprite in ents:
                d += struct.pack(">QffI", i, x, y, sprite)
            self.t["snapshot_entities_max"] = max(self.t["snapshot_entities_max"], len(ents))
            for addr in room.ships:
                self.t["snapshots_generated"] += 1
                n = self.snap_count.get(addr, 0) + 1
                self.snap_count[addr] = n
                if self.a.drop_every and n % self.a.drop_every == 0:
                    self.t["snapshots_dropped"] += 1
                    continue
                self.send_udp(addr, bytes(d))
                self.t["snapshots_sent"] += 1

    def run(self):
        start = time.monotonic()
        stop = [False]
        signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
        try:
            self.sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
        except (PermissionError, ValueError):
            pass  # stdin is a file or closed: run until --max-seconds or SIGTERM
        tp = self.tcp.getsockname()[1]
        print(json.dumps({"tcp_port": tp, "udp_port": tp + 1}), flush=True)
        next_snap = start + SNAPSHOT_EVERY
        while not stop[0] and time.monotonic() - start < self.a.max_seconds:
            now = time.monotonic()
            wake = min([next_snap, now + TICK] + [r.next_step for r in self.rooms.values()]
                       + ([self.pongs[0][0]] if self.pongs else []))
            for key, _ in self.sel.select(max(0.0, wake - now)):
                if key.data == "accept":
                    try:
                        c, _ = self.tcp.accept()
                    except BlockingIOError:
                        continue
                    c.setblocking(False)
                    self.conns[c] = bytearray()
                    self.sel.register(c, selectors.EVENT_READ, "tcp")
                    self.t["tcp_accepted"] += 1
                elif key.data == "udp":
                    self.on_udp(time.monotonic())
                elif key.data == "stdin":
                    if not sys.stdin.buffer.read1(4096):
                        stop[0] = True
                else:
                    self.on_tcp_read(key.fileobj)
            now = time.monotonic()
            self.step_rooms(now)
            self.send_pongs(now)
            if now >= next_snap:
                # The real loop sleeps to a fixed 50 ms schedule and resets it when it
                # falls more than one period behind.
                next_snap += SNAPSHOT_EVERY
                if now > next_snap + SNAPSHOT_EVERY:
                    next_snap = now
                self.send_snapshots()
        self.on_udp(time.monotonic())
        self.stopping = True
        with self.lock:
            totals = dict(self.t)
        print(json.dumps(totals, separators=(",", ":")), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (UDP: +1); 0 = any")
    p.add_argument("--drop-every", type=int, default=0, help="skip every K-th snapshot per client")
    p.add_argument("--drop-pong-every", type=int, default=0, help="skip every K-th PONG per client")
    p.add_argument("--pong-delay-ms", type=float, default=0.0, help="hold each PONG this long")
    p.add_argument("--enemies", type=int, default=3, help="enemies per room after 5 s")
    p.add_argument("--login-error", action="store_true", help="answer HELLO with ERROR_MESSAGE")
    p.add_argument("--stream-after-welcome", action="store_true",
                   help="after WELCOME, stream room frames on the login stream without pause")
    p.add_argument("--max-seconds", type=float, default=120.0)
    Peer(p.parse_args()).run()


if __name__ == "__main__":
    main()
