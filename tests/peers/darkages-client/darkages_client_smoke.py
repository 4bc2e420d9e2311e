#!/usr/bin/env python3
"""Smoke client for tests/peers/darkages-impaired-server/darkages_impaired_server.py (DarkAges over plain UDP).

Written from the protocol's description (docs/protocols/darkages.md) only. Wire
format and the readings taken where the spec is silent: see the server's docstring.

One session on the first server (--server PORT), then one zone handoff to whichever
server the ZONE_HANDOFF event names:
  * CONNECT (retried until CONNECT_ACK) -> result 0 -> CONNECTED (retried until the first
    snapshot); INPUT at --input-hz with last_received_tick = newest applied snapshot tick;
  * full and delta snapshots applied against a deque of 30 baselines; a delta against a
    missing baseline is counted and answered with last_received_tick = 0 (request full);
    with the servers' --debug-state-hash, every decoded state is compared to the server's
    CRC (DEBUG_TEXT "state_hash tick=N crc=X");
  * snapshot tick gaps counted (each gap tick = one lost snapshot);
  * PING every 100 ms, PONG matched by its echoed u32, RTT on the first server
    >= --expect-min-rtt-ms (its --pong-delay-ms);
  * a HEARTBEAT of ours is echoed; the server's HEARTBEATs are echoed back;
  * two deliberately invalid inputs (yaw out of range, FORWARD+BACKWARD) on the first server;
  * ack freeze: for --freeze-s seconds the ack stays at one tick F; the server must keep
    sending deltas against F while server_tick - F <= 30 and full snapshots once older;
  * events deduplicated by event_id; ZONE_HANDOFF -> DISCONNECT(5) to the old server, a new
    socket CONNECTs to new_server_address:new_server_port with handoff_token as auth_token,
    within handoff_timeout_ms; then, on the new server, a CONNECT with a wrong protocol
    version (expects result 1) and a second use of the same token (expects result 2).
Prints "RESULT ok key=value ..." or "RESULT fail <reason> key=value ...", exit 0 / 1.
Standard library only.
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import select
import socket
import struct
import sys
import time
import zlib

PROTOCOL_VERSION = 0x00010000
T_CONNECT, T_CONNECT_ACK, T_CONNECTED, T_DISCONNECT, T_HEARTBEAT = 0x10, 0x11, 0x12, 0x13, 0x14
T_INPUT, T_SNAPSHOT, T_EVENT = 0x20, 0x21, 0x22
T_DEBUG_TEXT, T_PING, T_PONG = 0xF0, 0xF1, 0xF2
CONNECT = struct.Struct("<BII32s64s")
CONNECT_ACK = struct.Struct("<BIIIIQB64s")
INPUT_ACK = struct.Struct("<BIIBffII")
TYPED_U32 = struct.Struct("<BI")
EVENT_HEAD = struct.Struct("<BIIBH")
HANDOFF = struct.Struct("<I32sH32sI")
DAMAGE = struct.Struct("<IIiBB16s")
ENT_HEAD = struct.Struct("<IBH")
FIELD_STRUCTS = [struct.Struct("<" + f) for f in "hhhbbbbhhhBBB"]
FULL_MASK = 0x1FFF
MAX_BASELINES = 30
F_FORWARD, F_BACKWARD, F_RIGHT = 0x01, 0x02, 0x08


class Fail(Exception):
    pass


def cstr(s: str, n: int) -> bytes:
    return s.encode()[:n].ljust(n, b"\0")


def from_cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def encode_entity(eid, etype, mask, vals) -> bytes:
    out = [ENT_HEAD.pack(eid, etype, mask)]
    for i in range(13):
        if mask >> i & 1:
            out.append(FIELD_STRUCTS[i].pack(vals[i]))
    return b"".join(out)


def read_entity(data: bytes, off: int, base: dict | None):
    """-> (eid, etype, vals tuple, new offset). base: previous state for partial masks."""
    if off + ENT_HEAD.size > len(data):
        raise Fail("snapshot_truncated_entity_header")
    eid, etype, mask = ENT_HEAD.unpack_from(data, off)
    off += ENT_HEAD.size
    if mask & ~FULL_MASK:
        raise Fail("snapshot_reserved_mask_bits")
    prev = None
    if mask != FULL_MASK:
        if base is None or eid not in base:
            raise Fail("partial_mask_for_unknown_entity")
        prev = base[eid][1]
    vals = []
    for i in range(13):
        if mask >> i & 1:
            s = FIELD_STRUCTS[i]
            if off + s.size > len(data):
                raise Fail("snapshot_truncated_field")
            vals.append(s.unpack_from(data, off)[0])
            off += s.size
        else:
            vals.append(prev[i])
    return eid, etype, tuple(vals), off


class Session:
    def __init__(self, name: str, addr, client_id: str, token: str, cfg):
        self.name = name
        self.addr = addr
        self.cfg = cfg
        self.client_id = client_id
        self.token = token
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.entity = None
        self.zone = None
        self.acked_conn = False
        self.baselines: collections.deque = collections.deque(maxlen=MAX_BASELINES)
        self.last_tick = None       # newest tick applied (for the ack)
        self.seen_tick = None       # newest tick received (for gap counting)
        self.states: dict[int, dict] = {}  # tick -> state, only for hash checks (recent)
        self.seq = 0
        self.n = collections.Counter()
        self.pings: dict[int, float] = {}
        self.rtts: list[float] = []
        self.events_seen: set[int] = set()
        self.max_event_id = 0
        self.handoff = None
        self.my_hb = set()
        self.freeze_tick = None
        self.freeze_started = None
        self.freeze_errors: list[str] = []
        self.request_full = False

    def send(self, data: bytes):
        self.sock.sendto(data, self.addr)

    def connect_packet(self, version=PROTOCOL_VERSION, token=None) -> bytes:
        return CONNECT.pack(T_CONNECT, version, 7, cstr(self.client_id, 32),
                            cstr(self.token if token is None else token, 64))

    def send_input(self, flags=F_FORWARD | F_RIGHT, yaw=0.5, pitch=0.1):
        self.seq += 1
        if self.request_full:
            ack = 0
        elif self.freeze_tick is not None:
            ack = self.freeze_tick
        else:
            ack = self.last_tick or 0
        self.send(INPUT_ACK.pack(T_INPUT, self.seq, int(time.monotonic() * 1000) & 0xFFFFFFFF,
                                 flags, yaw, pitch, 0, ack))
        self.n["inputs"] += 1

    # ---- receive -----------------------------------------------------------------------

    def on_datagram(self, data: bytes, now: float):
        if not data:
            self.n["bad_empty"] += 1
            return
        t = data[0]
        if t == T_CONNECT_ACK:
            if len(data) != CONNECT_ACK.size:
                raise Fail(f"{self.name}_connect_ack_size_{len(data)}")
            _, ver, eid, zone, tick, _ms, result, msg = CONNECT_ACK.unpack(data)
            self.n["connect_acks"] += 1
            if result != 0:
                raise Fail(f"{self.name}_refused_result_{result}:{from_cstr(msg)}")
            if ver != PROTOCOL_VERSION:
                raise Fail(f"{self.name}_server_version_{ver:#x}")
            self.entity, self.zone, self.acked_conn = eid, zone, True
        elif t == T_SNAPSHOT:
            self.on_snapshot(data, now)
        elif t == T_EVENT:
            self.on_event(data, now)
        elif t == T_PONG:
            if len(data) != 5:
                raise Fail("pong_size")
            (ts,) = struct.unpack_from("<I", data, 1)
            sent = self.pings.pop(ts, None)
            if sent is None:
                self.n["pong_unknown"] += 1
            else:
                self.rtts.append((now - sent) * 1000.0)
        elif t == T_HEARTBEAT:
            if len(data) != 5:
                raise Fail("heartbeat_size")
            (ts,) = struct.unpack_from("<I", data, 1)
            if ts in self.my_hb:
                self.my_hb.discard(ts)
                self.n["heartbeat_echoes"] += 1
            else:
                self.n["server_heartbeats"] += 1
                self.send(data)
        elif t == T_DEBUG_TEXT:
            if len(data) < 3 or len(data) != 3 + struct.unpack_from("<H", data, 1)[0]:
                raise Fail("debug_text_size")
            self.on_debug(data[3:].decode("utf-8", "replace"))
        elif t == T_DISCONNECT:
            self.n["server_disconnects"] += 1
        else:
            self.n[f"unknown_type_{t:#x}"] += 1

    def on_snapshot(self, data: bytes, now: float):
        if len(data) < 11:
            raise Fail("snapshot_short")
        _, tick, base_tick = struct.unpack_from("<BII", data, 0)
        self.n["snapshots"] += 1
        if self.seen_tick is not None:
            d = (tick - self.seen_tick) & 0xFFFFFFFF
            if 0 < d < 0x80000000:
                self.n["gaps"] += d - 1
                self.seen_tick = tick
            else:
                self.n["out_of_order"] += 1
                return
        else:
            self.seen_tick = tick
        if base_tick == tick:
            (count,) = struct.unpack_from("<H", data, 9)
            off, state = 11, {}
            for _ in range(count):
                eid, etype, vals, off = read_entity(data, off, None)
                state[eid] = (etype, vals)
            if off != len(data):
                raise Fail("full_snapshot_trailing_bytes")
            self.n["full"] += 1
            self.request_full = False
            self.check_freeze(tick, base_tick, True, now)
        else:
            if len(data) < 13:
                raise Fail("delta_short")
            changed, removed = struct.unpack_from("<HH", data, 9)
            base = None
            for bt, st in self.baselines:
                if bt == base_tick:
                    base = st
            if base is None:
                self.n["missing_baseline"] += 1
                self.request_full = True
                return
            state = dict(base)
            off = 13
            for _ in range(changed):
                eid, etype, vals, off = read_entity(data, off, base)
                state[eid] = (etype, vals)
            if off + 4 * removed != len(data):
                raise Fail("delta_length_mismatch")
            for i in range(removed):
                (eid,) = struct.unpack_from("<I", data, off + 4 * i)
                if eid not in base:
                    raise Fail("removed_unknown_entity")
                state.pop(eid, None)
                self.n["removed_entities"] += 1
            self.n["delta"] += 1
            self.n["changed_entities"] += changed
            self.check_freeze(tick, base_tick, False, now)
        if self.entity is not None and self.entity not in state:
            raise Fail("own_entity_missing")
        for etype, vals in state.values():
            if not 0 <= vals[10] <= 100:
                raise Fail("health_out_of_range")
        self.baselines.append((tick, state))
        self.last_tick = tick
        self.states[tick] = state
        if len(self.states) > 40:
            self.states.pop(min(self.states))

    def check_freeze(self, tick, base_tick, full, now):
        F = self.freeze_tick
        if F is None or now - self.freeze_started < 0.3:
            return
        age = (tick - F) & 0xFFFFFFFF
        if full:
            if age > 30:
                self.n["freeze_full_after_window"] += 1
            else:
                self.freeze_errors.append(f"full_at_age_{age}")
        else:
            if base_tick != F:
                self.freeze_errors.append(f"delta_base_{base_tick}_not_{F}")
            elif age > 30:
                self.freeze_errors.append(f"delta_at_age_{age}")
            else:
                self.n["freeze_deltas_on_F"] += 1

    def on_debug(self, text: str):
        parts = dict(p.split("=", 1) for p in text.split()[1:] if "=" in p)
        if not text.startswith("state_hash") or "tick" not in parts:
            self.n["debug_other"] += 1
            return
        tick = int(parts["tick"])
        st = self.states.get(tick)
        if st is None:
            self.n["hash_unchecked"] += 1
            return
        blob = b"".join(encode_entity(eid, s[0], FULL_MASK, s[1]) for eid, s in sorted(st.items()))
        if f"{zlib.crc32(blob):08x}" != parts.get("crc"):
            raise Fail(f"{self.name}_state_hash_mismatch_tick_{tick}")
        self.n["hash_ok"] += 1

    def on_event(self, data: bytes, now: float):
        if len(data) < EVENT_HEAD.size:
            raise Fail("event_short")
        _, eid, _ts, etype, plen = EVENT_HEAD.unpack_from(data, 0)
        if len(data) != EVENT_HEAD.size + plen:
            raise Fail("event_length")
        payload = data[EVENT_HEAD.size:]
        if eid in self.events_seen:
            self.n["event_duplicates"] += 1
            return
        self.events_seen.add(eid)
        if eid > self.max_event_id + 1:
            self.n["event_gaps"] += eid - self.max_event_id - 1
        self.max_event_id = max(self.max_event_id, eid)
        self.n["events"] += 1
        if etype == 0x01:
            if plen != DAMAGE.size:
                raise Fail("damage_payload_size")
            target, _att, _dmg, hit, rem, _name = DAMAGE.unpack(payload)
            if target != self.entity or hit > 3 or rem > 100:
                raise Fail("damage_payload_values")
            self.n["damage_events"] += 1
        elif etype == 0x02:
            self.n["death_events"] += 1
        elif etype == 0x06:
            if plen != HANDOFF.size:
                raise Fail("handoff_payload_size")
            zone, host, port, tok, tmo = HANDOFF.unpack(payload)
            self.handoff = dict(zone=zone, host=from_cstr(host), port=port,
                                token=from_cstr(tok), timeout_ms=tmo, at=now)
        else:
            self.n[f"event_type_{etype}"] += 1

    # ---- driving -----------------------------------------------------------------------

    def pump(self, until: float, tick_fn=None):
        """Receive and send periodic traffic until `until` or a handoff arrives."""
        next_input = next_ping = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= until or self.handoff is not None:
                return
            if tick_fn:
                tick_fn(now)
            if self.acked_conn and now >= next_input:
                if self.n["snapshots"] == 0:
                    self.send(bytes([T_CONNECTED]))   # retried until the first snapshot
                self.send_input()
                next_input += 1.0 / self.cfg.input_hz
            if self.acked_conn and now >= next_ping:
                ts = random.getrandbits(32)
                self.pings[ts] = now
                self.send(TYPED_U32.pack(T_PING, ts))
                self.n["pings"] += 1
                next_ping += 0.1
            wait = max(0.0, min(until, next_input, next_ping) - time.monotonic())
            r, _, _ = select.select([self.sock], [], [], wait)
            if r:
                while True:
                    try:
                        data, src = self.sock.recvfrom(65535)
                    except BlockingIOError:
                        break
                    if src != self.addr:
                        self.n["foreign_datagrams"] += 1
                        continue
                    self.on_datagram(data, time.monotonic())

    def handshake(self, deadline: float):
        pkt = self.connect_packet()
        while not self.acked_conn:
            now = time.monotonic()
            if now >= deadline:
                raise Fail(f"{self.name}_no_connect_ack")
            self.send(pkt)
            self.n["connects"] += 1
            end = min(deadline, now + 0.25)
            while not self.acked_conn and time.monotonic() < end:
                r, _, _ = select.select([self.sock], [], [], max(0.0, end - time.monotonic()))
                if r:
                    data, src = self.sock.recvfrom(65535)
                    if src == self.addr:
                        self.on_datagram(data, time.monotonic())
        self.send(bytes([T_CONNECTED]))

    def disconnect(self, reason: int, msg: str):
        m = msg.encode()
        self.send(struct.pack("<BBH", T_DISCONNECT, reason, len(m)) + m)


def one_shot_connect(addr, client_id, token, version) -> int:
    """A throwaway socket: send CONNECT (3 tries), return the CONNECT_ACK result."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    try:
        pkt = CONNECT.pack(T_CONNECT, version, 7, cstr(client_id, 32), cstr(token, 64))
        for _ in range(3):
            s.sendto(pkt, addr)
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                r, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
                if not r:
                    break
                data, src = s.recvfrom(65535)
                if src == addr and data and data[0] == T_CONNECT_ACK and len(data) == 90:
                    result = CONNECT_ACK.unpack(data)[6]
                    if result == 0:  # undo an unexpected success
                        s.sendto(struct.pack("<BBH", T_DISCONNECT, 0, 0), addr)
                    return result
        return -1
    finally:
        s.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", type=int, required=True, help="first server port (127.0.0.1)")
    p.add_argument("--client-id", default="smoke-1")
    p.add_argument("--input-hz", type=float, default=60.0)
    p.add_argument("--first-max-s", type=float, default=10.0,
                   help="give up if no handoff arrives on the first server by then")
    p.add_argument("--second-s", type=float, default=2.5, help="time spent on the second server")
    p.add_argument("--freeze-at", type=float, default=1.0, help="start the ack freeze (s)")
    p.add_argument("--freeze-s", type=float, default=2.5, help="ack freeze length (s)")
    p.add_argument("--expect-min-rtt-ms", type=float, default=0.0)
    p.add_argument("--expect-hashes", action="store_true",
                   help="fail unless DEBUG_TEXT state hashes were checked")
    cfg = p.parse_args(argv)

    info: dict = {}
    try:
        a = Session("a", ("127.0.0.1", cfg.server), cfg.client_id, "", cfg)
        t0 = time.monotonic()
        a.handshake(t0 + 3.0)
        hb_ts = random.getrandbits(32)
        stage = {"invalid": False, "hb": False}

        def on_a(now):
            el = now - t0
            if not stage["hb"] and el > 0.3:
                stage["hb"] = True
                a.my_hb.add(hb_ts)
                a.send(TYPED_U32.pack(T_HEARTBEAT, hb_ts))
            if not stage["invalid"] and el > 0.5:
                stage["invalid"] = True
                a.send_input(yaw=4.0)                                 # yaw out of range
                a.send_input(flags=F_FORWARD | F_BACKWARD)            # conflicting flags
            if a.freeze_tick is None and el > cfg.freeze_at and el < cfg.freeze_at + 0.1 \
                    and a.last_tick is not None:
                a.freeze_tick, a.freeze_started = a.last_tick, now
                info["freeze_tick"] = a.freeze_tick
            if a.freeze_tick is not None and now - a.freeze_started > cfg.freeze_s:
                a.freeze_tick = None

        a.pump(t0 + cfg.first_max_s, on_a)
        if a.handoff is None:
            raise Fail("no_handoff_event")
        h = a.handoff
        a.freeze_tick = None
        # Leave the old zone, join the new one with the token.
        a.disconnect(5, "zone handoff")
        b = Session("b", (h["host"], h["port"]), cfg.client_id, h["token"], cfg)
        b.handshake(h["at"] + h["timeout_ms"] / 1000.0)
        handoff_ms = (time.monotonic() - h["at"]) * 1000.0
        info["handoff_ms"] = f"{handoff_ms:.1f}"
        # Refusal paths on the new server.
        info["b_version_result"] = one_shot_connect(b.addr, "smoke-v", "", 0x00020000)
        info["b_reuse_result"] = one_shot_connect(b.addr, cfg.client_id, h["token"],
                                                  PROTOCOL_VERSION)
        b.pump(time.monotonic() + cfg.second_s)
        b.disconnect(0, "bye")

        # ---- verdict ---------------------------------------------------------------------
        rtts = a.rtts + b.rtts
        info.update(
            a_entity=a.entity, a_zone=a.zone, a_snapshots=a.n["snapshots"], a_full=a.n["full"],
            a_delta=a.n["delta"], a_gaps=a.n["gaps"], a_missing_baseline=a.n["missing_baseline"],
            a_hash_ok=a.n["hash_ok"], a_removed=a.n["removed_entities"],
            a_events=a.n["events"], a_damage=a.n["damage_events"],
            a_event_gaps=a.n["event_gaps"], a_inputs=a.n["inputs"],
            freeze_deltas=a.n["freeze_deltas_on_F"],
            freeze_fulls=a.n["freeze_full_after_window"],
            hb_echo=a.n["heartbeat_echoes"], server_hb=a.n["server_heartbeats"],
            b_entity=b.entity, b_zone=b.zone, b_snapshots=b.n["snapshots"], b_full=b.n["full"],
            b_delta=b.n["delta"], b_gaps=b.n["gaps"], b_hash_ok=b.n["hash_ok"],
            b_missing_baseline=b.n["missing_baseline"],
            pings=a.n["pings"] + b.n["pings"], pongs=len(rtts),
            a_pongs=len(a.rtts), b_pongs=len(b.rtts),
            a_min_rtt_ms=f"{min(a.rtts):.2f}" if a.rtts else "-",
            b_min_rtt_ms=f"{min(b.rtts):.2f}" if b.rtts else "-")
        checks = [
            (a.n["full"] >= 1 and a.n["delta"] >= 20, "a_too_few_snapshots"),
            (b.n["full"] >= 1 and b.n["delta"] >= 10, "b_too_few_snapshots"),
            (a.n["removed_entities"] >= 1, "a_no_removed_entities"),
            (a.n["missing_baseline"] == 0 and b.n["missing_baseline"] == 0, "missing_baseline"),
            (not a.freeze_errors, "freeze:" + ",".join(a.freeze_errors[:3])),
            (a.n["freeze_deltas_on_F"] >= 5, "freeze_no_deltas_on_F"),
            (a.n["freeze_full_after_window"] >= 1, "freeze_no_full_after_window"),
            (a.n["heartbeat_echoes"] == 1, "no_heartbeat_echo"),
            (a.n["damage_events"] >= 2, "no_damage_events"),
            (len(rtts) >= 10, "too_few_pongs"),
            (bool(a.rtts) and min(a.rtts) >= cfg.expect_min_rtt_ms, "a_rtt_below_pong_delay"),
            (handoff_ms < h["timeout_ms"], "handoff_too_slow"),
            (b.zone == h["zone"], "b_zone_mismatch"),
            (info["b_version_result"] == 1, "b_version_mismatch_not_refused"),
            (info["b_reuse_result"] == 2, "b_token_reuse_not_refused"),
            (not cfg.expect_hashes or (a.n["hash_ok"] > 10 and b.n["hash_ok"] > 10),
             "no_hash_checks"),
        ]
        for ok, why in checks:
            if not ok:
                raise Fail(why)
    except Fail as e:
        print(f"RESULT fail {e} " + " ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        return 1
    except (OSError, struct.error, ValueError) as e:
        print(f"RESULT fail exception:{type(e).__name__}:{e}", flush=True)
        return 1
    print("RESULT ok " + " ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
