#!/usr/bin/env python3
"""Independent DarkAges zone server with injected, counted impairments.

Written from the protocol's description (docs/protocols/darkages.md) only, not from tickswarm's Rust code, so that it can serve as a second
implementation against which the load tool's measurements are checked.

Transport: plain UDP on 127.0.0.1, one DarkAges packet per datagram. Every
integer and float is little-endian. The first byte of every datagram is the packet type.

Wire format (sizes include the type byte):
  0x10 CONNECT      c->s  protocol_version u32, client_version u32, client_id char[32],
                          auth_token char[64]                                      105 B
  0x11 CONNECT_ACK  s->c  server_protocol_version u32, entity_id u32, zone_id u32,
                          server_tick u32, server_time_ms u64, result u8, message char[64]
                                                                                    90 B
  0x12 CONNECTED    c->s  (type byte alone)                                          1 B
  0x13 DISCONNECT   both  reason u8, message_len u16, message UTF-8          4 + len B
  0x14 HEARTBEAT    both  timestamp u32                                              5 B
  0x20 INPUT        c->s  sequence u32, timestamp u32, input_flags u8, yaw f32, pitch f32,
                          target_entity u32, last_received_tick u32                26 B
                          (22 B without last_received_tick: the struct as printed)
  0x21 SNAPSHOT     s->c  server_tick u32, baseline_tick u32, then
                          full  (baseline_tick == server_tick): entity_count u16, entities
                          delta (otherwise): changed_count u16, removed_count u16,
                                changed entities, removed entity_id u32 x removed_count
                          entity = entity_id u32, entity_type u8, present_mask u16, then
                          for every set bit 0..12 in bit order: pos x,y,z i16 (m * 64),
                          rot x,y,z,w i8 (component * 127), vel x,y,z i16 (m/s * 64),
                          health u8 (0-100), anim u8, team u8
  0x22 EVENT        s->c  event_id u32, timestamp u32, event_type u8, payload_len u16,
                          payload
         0x01 DAMAGE  target u32, attacker u32, damage i32, hit_type u8,
                      remaining_health u8, ability_name char[16]                    30 B
         0x02 DEATH   victim u32, killer u32, respawn_time_ms u32, kill_type u8     13 B
         0x06 ZONE_HANDOFF new_zone_id u32, new_server_address char[32],
                      new_server_port u16, handoff_token char[32],
                      handoff_timeout_ms u32                                        74 B
  0xF0 DEBUG_TEXT   s->c  text_len u16, UTF-8 (only with --debug-state-hash)
  0xF1 PING         c->s  timestamp u32
  0xF2 PONG         s->c  timestamp u32 (the PING's, unchanged)

Readings taken where the spec is silent -- the "decisions":
  D1  Handshake: a CONNECT from a new address gets CONNECT_ACK; result 0 creates a session.
      A repeated CONNECT from an address with a session gets the same CONNECT_ACK again
      (lost-ACK retry over plain UDP). Snapshots start only after CONNECTED (0x12); a
      repeated CONNECTED is harmless. INPUT before CONNECTED is ignored and counted
      ("input_before_connected"), not applied.
  D2  Refusals (CONNECT_ACK result != 0, entity_id 0, no session): 1 version_mismatch when
      the MAJOR half of protocol_version differs from 1 (minor ignored); 2 auth_failed when
      --auth-token is set and the token is neither it nor a valid handoff token, or when a
      handoff-shaped token fails verification / is expired / reused / meant for another
      server (needs --accept-tokens; otherwise auth_token is ignored as "optional");
      3 server_full at --max-clients sessions. message is NUL-padded ASCII.
  D3  Tick rate --tick-rate (20) ticks/s, one snapshot per connected client per tick, so
      consecutive snapshot ticks differ by exactly 1 and every gap is a lost snapshot.
      The first tick is --start-tick + 1 (2 by default); ticks wrap modulo 2^32 and are
      compared in serial-number arithmetic. last_received_tick 0 always means "send a full
      snapshot" (so right after a wrap through 0 one extra full is sent).
  D4  Baselines: the server remembers what it generated for each client for the last 30+
      ticks. last_received_tick (from 26-byte inputs) acks a tick; the newest valid ack
      (serial-number order) is the client's baseline. A delta is sent against it while
      (server_tick - ack) <= 30; older, absent, 0 ("request full"), or never acked -> full.
      An ack of a tick that was never sent to this client (dropped, future, other server)
      is counted ("ack_not_sent") and ignored. 22-byte inputs carry no ack, so such a
      client gets full snapshots only (the struct_as_printed dialect).
  D5  A full snapshot has present_mask 0x1FFF for every entity. In a delta, entities new
      since the baseline carry 0x1FFF, changed ones the bits of changed quantized fields,
      unchanged ones are omitted; ids in the baseline but no longer visible are removed.
      Bits 13-15 are never set.
  D6  Interest management: an entity is visible within 200 m of the client's own entity
      (its own entity always first); visible entities are capped nearest-first so that a
      full snapshot fits --mtu (1200) bytes. If a delta would exceed --mtu, a full one is
      sent instead. The 50-200 m reduced update rates of section 5.1 are not applied.
  D7  Input validation (section 6): sequence through the 1024-wide replay window of 6.3
      (6.1's "must be increasing" is read as 6.3's window, so a late but unseen sequence is
      valid; it is counted "reordered" and its controls are not applied, its ack is). Then
      yaw in [-pi, pi], pitch in [-pi/2, pi/2] (bounds rounded to float32, so float32(pi)
      is valid; NaN/inf invalid), then no FORWARD+BACKWARD, no LEFT+RIGHT. The first
      failing check names the reason. An invalid input is dropped entirely (ack included).
      target_entity is not validated. Rate limits (6.2) are not enforced; inputs beyond
      60/s with burst 10 are only counted (diagnostic "inputs_over_rate").
      "inputs" = well-formed INPUT datagrams from a connected client (valid + invalid).
  D8  Events: event_id counts up from 1 per client per server (a gap = a lost event);
      timestamp = ms since server start (u32). A DAMAGE event to every playing client
      every --damage-every seconds (attacker = NPC 1, 7 damage, hit_type cycles 0-3,
      ability "claw"); at 0 health a DEATH event follows and health resets to 100.
      Events are sent once (no retransmission), except ZONE_HANDOFF (below).
  D9  Zone handoff uses EVENT 0x22 type 0x06 (the only handoff layout the spec defines);
      packet types 0x30-0x32 are never sent and are counted as unsupported if received.
      --handoff-after S: S seconds after a client's CONNECTED it gets the event; it is
      resent with the SAME event_id every 0.5 s until the client sends DISCONNECT or the
      timeout passes; 1 s after handoff_timeout_ms the server sends DISCONNECT(5
      ZONE_HANDOFF) and forgets the client ("handoffs_ignored"). handoffs_sent counts
      clients told, not datagrams.
  D10 Handoff token (31 ASCII chars + NUL in char[32]): base64url without padding of
      issue_unix_ms u48 | timeout_ms u32 | serial u24 | mac u80, mac = HMAC-SHA256(secret,
      "darkages-handoff|" + issue|timeout|serial bytes + dest_zone u32 + dest_port u16 +
      client_id)[:10]. The destination (--accept-tokens, same --secret) checks the mac
      against its own zone id and port and the CONNECT's client_id, single use, and
      now_ms <= issue + timeout (both processes share the host's wall clock). Valid ->
      handoffs_arrived (latency = arrival - issue); expired -> refused auth_failed,
      handoffs_late; anything else -> refused auth_failed, handoffs_rejected.
  D11 HEARTBEAT: a client HEARTBEAT is answered with a HEARTBEAT carrying the same
      timestamp, unless the timestamp is one this server sent to that client in the last
      60 s (then it is the reply to ours and is only counted). The server sends its own
      HEARTBEAT (its ms clock) every --heartbeat-interval (5) s to each session.
  D12 PING from a session -> PONG with the same u32 after --pong-delay-ms (scheduled,
      never blocking). PINGs from unknown addresses are ignored and counted.
  D13 DISCONNECT from a client ends its session (reason counted). The server sends
      DISCONNECT(1 TIMEOUT) to a session silent for --client-timeout (10) s and
      DISCONNECT(4 SERVER_SHUTDOWN) to every session when it stops.
  D14 World: --npcs (6) walkers (entity_type 0, team 2) circling the origin, one projectile
      (type 1) that flies 2 s, vanishes for 0.5 s and reappears with a new id (so deltas
      carry added and removed entities), one static loot (type 2, never in deltas).
      Players (type 0, team 1) move 5 m/s (sprint 8) on the XZ plane along yaw; positions
      are clamped to +-500 m (int16/64 range). Entity ids: NPCs 1.., loot 100, projectiles
      200.., players from --first-entity-id (1000).
  D15 --drop-every K: the K-th, 2K-th, ... snapshot generated for a client (counted from
      its first) is generated, its tick consumed, and not sent; it is not a valid ack.
  D16 DEBUG_TEXT (opt-in, --debug-state-hash): after every SENT snapshot the server sends
      "state_hash tick=<tick> crc=<crc32 hex8>" over the visible entities, each encoded
      as in a full snapshot, sorted by entity_id, so a client can check its delta decoding.

Malformed datagrams (wrong size, unknown type, server->client types, bad UTF-8) are
counted by reason and dropped; an unexpected exception in the handler is also counted
("internal_error:<Exception>") and the server keeps running.

Ground truth: on exit (--duration, SIGINT, SIGTERM) lines starting with "TRUTH " are
printed on stdout: one per client ("TRUTH client ..."), one per server total
("TRUTH total ..."), and reason breakdowns ("TRUTH invalid_inputs ...", "TRUTH malformed
...", "TRUTH ignored ...", "TRUTH refusals ...", "TRUTH handoff_tokens ..."), all
space-separated key=value. The first stdout line is "listening on 127.0.0.1:PORT".

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import math
import os
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from impaired_core import ImpairedUdpServer, add_impairment_args, serve  # noqa: E402

PROTOCOL_VERSION = 0x00010000

T_CONNECT, T_CONNECT_ACK, T_CONNECTED, T_DISCONNECT, T_HEARTBEAT = 0x10, 0x11, 0x12, 0x13, 0x14
T_INPUT, T_SNAPSHOT, T_EVENT, T_COALESCED = 0x20, 0x21, 0x22, 0x23
T_ZONE_HANDOFF, T_ZONE_ENTER, T_ZONE_LEAVE = 0x30, 0x31, 0x32
T_DEBUG_TEXT, T_PING, T_PONG = 0xF0, 0xF1, 0xF2
TYPE_NAMES = {
    T_CONNECT: "CONNECT", T_CONNECT_ACK: "CONNECT_ACK", T_CONNECTED: "CONNECTED",
    T_DISCONNECT: "DISCONNECT", T_HEARTBEAT: "HEARTBEAT", T_INPUT: "INPUT",
    T_SNAPSHOT: "SNAPSHOT", T_EVENT: "EVENT", T_COALESCED: "COALESCED_EVENTS",
    T_ZONE_HANDOFF: "ZONE_HANDOFF", T_ZONE_ENTER: "ZONE_ENTER", T_ZONE_LEAVE: "ZONE_LEAVE",
    T_DEBUG_TEXT: "DEBUG_TEXT", T_PING: "PING", T_PONG: "PONG",
}

CONNECT = struct.Struct("<BII32s64s")
CONNECT_ACK = struct.Struct("<BIIIIQB64s")
INPUT_SPEC = struct.Struct("<BIIBffI")
INPUT_ACK = struct.Struct("<BIIBffII")
U32 = struct.Struct("<I")
TYPED_U32 = struct.Struct("<BI")
DISC_HEAD = struct.Struct("<BBH")
SNAP_HEAD = struct.Struct("<BII")
EVENT_HEAD = struct.Struct("<BIIBH")
DAMAGE = struct.Struct("<IIiBB16s")
DEATH = struct.Struct("<IIIB")
HANDOFF = struct.Struct("<I32sH32sI")
ENT_HEAD = struct.Struct("<IBH")
assert (CONNECT.size, CONNECT_ACK.size, INPUT_SPEC.size, INPUT_ACK.size) == (105, 90, 22, 26)
assert (DAMAGE.size, DEATH.size, HANDOFF.size) == (30, 13, 74)

# present_mask bit i -> struct format of that field
FIELD_FMT = ["h", "h", "h", "b", "b", "b", "b", "h", "h", "h", "B", "B", "B"]
FIELD_STRUCTS = [struct.Struct("<" + f) for f in FIELD_FMT]
FULL_MASK = 0x1FFF
FULL_ENTITY_SIZE = ENT_HEAD.size + sum(s.size for s in FIELD_STRUCTS)  # 26
assert FULL_ENTITY_SIZE == 26

RESULT_OK, RESULT_VERSION, RESULT_AUTH, RESULT_FULL = 0, 1, 2, 3
RESULT_NAMES = {1: "version_mismatch", 2: "auth_failed", 3: "server_full"}
DR_NORMAL, DR_TIMEOUT, DR_SERVER_SHUTDOWN, DR_ZONE_HANDOFF = 0, 1, 4, 5

EV_DAMAGE, EV_DEATH, EV_ZONE_HANDOFF = 0x01, 0x02, 0x06

F_FORWARD, F_BACKWARD, F_LEFT, F_RIGHT = 0x01, 0x02, 0x04, 0x08
F_JUMP, F_ATTACK, F_BLOCK, F_SPRINT = 0x10, 0x20, 0x40, 0x80

F32 = struct.Struct("<f")
PI_F32 = F32.unpack(F32.pack(math.pi))[0]
HALF_PI_F32 = F32.unpack(F32.pack(math.pi / 2))[0]

BASELINE_WINDOW = 30
HISTORY_KEEP = BASELINE_WINDOW + 2
SEQ_WINDOW = 1024
AOI_RADIUS = 200.0
WORLD_LIMIT = 500.0
NPC_ID_BASE, LOOT_ID, PROJECTILE_ID_BASE = 1, 100, 200
HANDOFF_RESEND_S = 0.5
TOKEN_LEN = 31


def cstr(s: str | bytes, n: int) -> bytes:
    b = s.encode("utf-8", "replace") if isinstance(s, str) else s
    return b[: n].ljust(n, b"\0")


def from_cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def q16(v: float) -> int:
    return max(-32768, min(32767, int(round(v * 64.0))))


def q8(v: float) -> int:
    return max(-127, min(127, int(round(v * 127.0))))


def serial_gt(a: int, b: int) -> bool:
    """a is newer than b in u32 serial-number arithmetic."""
    return 0 < ((a - b) & 0xFFFFFFFF) < 0x80000000


def encode_entity(eid: int, etype: int, mask: int, vals: tuple) -> bytes:
    out = [ENT_HEAD.pack(eid, etype, mask)]
    for i in range(13):
        if mask >> i & 1:
            out.append(FIELD_STRUCTS[i].pack(vals[i]))
    return b"".join(out)


# ---- handoff tokens ---------------------------------------------------------------------

def token_mac(secret: bytes, body: bytes, zone: int, port: int, client_id: str) -> bytes:
    msg = b"darkages-handoff|" + body + struct.pack("<IH", zone, port) + client_id.encode(
        "utf-8", "replace")
    return hmac.new(secret, msg, hashlib.sha256).digest()[:10]


def make_token(secret: bytes, issue_ms: int, timeout_ms: int, serial: int, zone: int,
               port: int, client_id: str) -> str:
    body = (issue_ms & 0xFFFFFFFFFFFF).to_bytes(6, "little") + struct.pack("<I", timeout_ms) \
        + (serial & 0xFFFFFF).to_bytes(3, "little")
    raw = body + token_mac(secret, body, zone, port, client_id)
    tok = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert len(tok) == TOKEN_LEN
    return tok


def parse_token(secret: bytes, tok: str, zone: int, port: int, client_id: str):
    """-> (status, issue_ms, timeout_ms, serial); status 'ok' | 'bad_format' | 'bad_mac'."""
    if len(tok) != TOKEN_LEN:
        return "bad_format", 0, 0, 0
    try:
        raw = base64.urlsafe_b64decode(tok + "=")
    except (ValueError, TypeError):
        return "bad_format", 0, 0, 0
    if len(raw) != 23:
        return "bad_format", 0, 0, 0
    body, mac = raw[:13], raw[13:]
    issue_ms = int.from_bytes(body[:6], "little")
    (timeout_ms,) = struct.unpack_from("<I", body, 6)
    serial = int.from_bytes(body[10:13], "little")
    if not hmac.compare_digest(mac, token_mac(secret, body, zone, port, client_id)):
        return "bad_mac", issue_ms, timeout_ms, serial
    return "ok", issue_ms, timeout_ms, serial


def wall_ms() -> int:
    return int(time.time() * 1000)


# ---- world ------------------------------------------------------------------------------

class Ent:
    __slots__ = ("eid", "etype", "team", "x", "y", "z", "vx", "vy", "vz", "yaw", "health",
                 "anim")

    def __init__(self, eid, etype, team, x=0.0, y=0.0, z=0.0):
        self.eid, self.etype, self.team = eid, etype, team
        self.x, self.y, self.z = x, y, z
        self.vx = self.vy = self.vz = 0.0
        self.yaw = 0.0
        self.health = 100
        self.anim = 0

    def quantized(self) -> tuple:
        h = self.yaw / 2.0
        return (q16(self.x), q16(self.y), q16(self.z),
                0, q8(math.sin(h)), 0, q8(math.cos(h)),
                q16(self.vx), q16(self.vy), q16(self.vz),
                max(0, min(100, int(self.health))), self.anim & 0xFF, self.team & 0xFF)


COUNTER_KEYS = (
            "snapshots_generated", "snapshots_dropped", "snapshots_sent", "full_snapshots",
            "delta_snapshots", "full_fallback_mtu", "pongs", "pings", "inputs",
            "inputs_valid", "invalid_inputs", "inputs_reordered", "inputs_over_rate",
            "inputs_no_ack", "acks_valid", "ack_not_sent", "ack_stale", "events_sent",
            "damage_events", "death_events", "handoffs_sent", "handoff_events_sent",
            "handoffs_arrived", "handoffs_ignored", "heartbeats_received",
            "heartbeats_echoed", "heartbeats_sent", "heartbeat_replies",
            "connect_acks_sent", "connected_msgs", "input_before_connected",
            "send_errors")


class Client:
    def __init__(self, addr, entity: Ent, client_id: str, client_version: int, now: float):
        self.addr = addr
        self.ent = entity
        self.client_id = client_id
        self.client_version = client_version
        self.ack_packet = b""
        self.connected_at = now          # CONNECT accepted
        self.playing_since = None        # CONNECTED received
        self.last_seen = now
        self.ended = None
        # input state
        self.flags = 0
        self.pitch = 0.0
        self.seq_high = 0
        self.seq_bits = 0                # bit d set: sequence seq_high - d seen
        self.acked = None                # newest valid acked tick
        self.rate_tokens = 10.0
        self.rate_at = now
        # snapshots
        self.history: dict[int, dict] = {}   # tick -> {eid: (etype, vals)}
        self.sent_ticks: set[int] = set()
        # events / handoff
        self.next_event_id = 1
        self.next_damage = None
        self.hit_type = 0
        self.handoff_due = None
        self.handoff_event = None            # (event_id, packet bytes)
        self.handoff_issued = None
        self.handoff_next_resend = 0.0
        self.handoff_deadline = None
        self.hb_sent: dict[int, float] = {}
        self.next_hb = None
        self.c = dict.fromkeys(COUNTER_KEYS, 0)
        self.handoff_latency_ms = None
        self.invalid_by_reason: dict[str, int] = {}
        self.disconnect_reason = None


class Server(ImpairedUdpServer):
    CATCH_HANDLER_ERRORS = True
    RECV_SIZE = 65535

    def __init__(self, args):
        super().__init__(args.port, args.tick_rate, args.pong_delay_ms, args.drop_every)
        self.args = args
        self.secret = args.secret.encode()

        self.clients: dict[tuple, Client] = {}
        self.finished: list[Client] = []
        self.next_entity_id = args.first_entity_id
        self.tick = args.start_tick & 0xFFFFFFFF
        self.max_visible = max(1, (args.mtu - SNAP_HEAD.size - 2) // FULL_ENTITY_SIZE)

        self.npcs = [Ent(NPC_ID_BASE + i, 0, 2) for i in range(args.npcs)]
        self.loot = Ent(LOOT_ID, 2, 0, 5.0, 0.0, 5.0)
        self.projectile = None
        self.next_projectile_id = PROJECTILE_ID_BASE
        self.projectile_phase_start = 0.0
        self.handoff_serial = 0
        self.used_tokens: set[str] = set()

        self.refusals: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        self.disconnects_by_reason: dict[str, int] = {}
        self.handoffs_late = 0
        self.handoffs_rejected = 0
        self.clients_seen = 0

    # ---- helpers -----------------------------------------------------------------------

    def sendto(self, data: bytes, addr, c: Client | None = None) -> bool:
        try:
            self.sock.sendto(data, addr)
            return True
        except OSError:
            if c is not None:
                c.c["send_errors"] += 1
            else:
                self.ignore("send_error")
            return False

    def send_disconnect(self, c: Client, reason: int, msg: str):
        m = msg.encode()
        self.sendto(DISC_HEAD.pack(T_DISCONNECT, reason, len(m)) + m, c.addr, c)

    def forget(self, c: Client, why: str):
        if self.clients.pop(c.addr, None) is not None:
            c.ended = why
            self.finished.append(c)

    def send_event(self, c: Client, etype: int, payload: bytes, now: float,
                   event_id: int | None = None) -> bytes:
        if event_id is None:
            event_id = c.next_event_id
            c.next_event_id = (c.next_event_id + 1) & 0xFFFFFFFF
        pkt = EVENT_HEAD.pack(T_EVENT, event_id, self.ms32(now), etype, len(payload)) \
            + payload
        if self.sendto(pkt, c.addr, c):
            c.c["events_sent"] += 1
        return pkt

    # ---- receive path ------------------------------------------------------------------

    def handle(self, data: bytes, addr, now: float):
        if not data:
            return self.bad("empty")
        t = data[0]
        name = TYPE_NAMES.get(t)
        if name is None:
            return self.bad(f"unknown_type:0x{t:02x}")
        c = self.clients.get(addr)
        if c is not None:
            c.last_seen = now
        n = len(data)
        if t == T_CONNECT:
            if n != CONNECT.size:
                return self.bad("bad_size:CONNECT")
            return self.on_connect(data, addr, c, now)
        if t in (T_CONNECT_ACK, T_SNAPSHOT, T_EVENT, T_COALESCED, T_PONG, T_DEBUG_TEXT):
            return self.bad(f"wrong_direction:{name}")
        if t in (T_ZONE_HANDOFF, T_ZONE_ENTER, T_ZONE_LEAVE):
            return self.bad(f"unsupported_type:{name}")
        # fixed sizes first, so a malformed datagram is "malformed" whoever sends it
        if t == T_CONNECTED and n != 1:
            return self.bad("bad_size:CONNECTED")
        if t in (T_HEARTBEAT, T_PING) and n != 5:
            return self.bad(f"bad_size:{name}")
        if t == T_INPUT and n not in (INPUT_SPEC.size, INPUT_ACK.size):
            return self.bad("bad_size:INPUT")
        if t == T_DISCONNECT:
            if n < DISC_HEAD.size:
                return self.bad("bad_size:DISCONNECT")
            _, reason, mlen = DISC_HEAD.unpack_from(data, 0)
            if n != DISC_HEAD.size + mlen:
                return self.bad("bad_length:DISCONNECT")
            try:
                data[DISC_HEAD.size:].decode("utf-8")
            except UnicodeDecodeError:
                return self.bad("bad_utf8:DISCONNECT")
        if c is None:
            return self.ignore(f"unknown_client:{name}")
        if t == T_CONNECTED:
            c.c["connected_msgs"] += 1
            if c.playing_since is None:
                c.playing_since = now
                c.next_damage = now + self.args.damage_every if self.args.damage_every > 0 \
                    else None
                if self.args.handoff_after is not None and self.args.handoff_to:
                    c.handoff_due = now + self.args.handoff_after
            return
        if t == T_INPUT:
            return self.on_input(c, data, now)
        if t == T_PING:
            (ts,) = U32.unpack_from(data, 1)
            c.c["pings"] += 1
            self.schedule_pong(now, addr, ts)
            return
        if t == T_HEARTBEAT:
            (ts,) = U32.unpack_from(data, 1)
            c.c["heartbeats_received"] += 1
            if c.hb_sent.pop(ts, None) is not None:
                c.c["heartbeat_replies"] += 1
            elif self.sendto(data, addr, c):
                c.c["heartbeats_echoed"] += 1
            return
        if t == T_DISCONNECT:
            _, reason, _ = DISC_HEAD.unpack_from(data, 0)
            c.disconnect_reason = reason
            key = f"reason_{reason}"
            self.disconnects_by_reason[key] = self.disconnects_by_reason.get(key, 0) + 1
            return self.forget(c, f"disconnect:{reason}")

    def on_connect(self, data: bytes, addr, c: Client | None, now: float):
        _, pver, cver, cid_raw, tok_raw = CONNECT.unpack(data)
        client_id = from_cstr(cid_raw)
        token = from_cstr(tok_raw)
        if c is not None:
            # lost ACK: same answer again
            if self.sendto(c.ack_packet, addr, c):
                c.c["connect_acks_sent"] += 1
            return

        def refuse(result: int, msg: str):
            self.refusals[RESULT_NAMES[result]] = self.refusals.get(RESULT_NAMES[result], 0) + 1
            pkt = CONNECT_ACK.pack(T_CONNECT_ACK, PROTOCOL_VERSION, 0, self.args.zone_id,
                                   self.tick, wall_ms(), result, cstr(msg, 64))
            self.sendto(pkt, addr)

        if (pver >> 16) != (PROTOCOL_VERSION >> 16):
            return refuse(RESULT_VERSION, f"protocol 0x{pver:08x} unsupported, need 1.x")
        handoff = None
        if self.args.accept_tokens and len(token) == TOKEN_LEN:
            st, issue_ms, timeout_ms, serial = parse_token(
                self.secret, token, self.args.zone_id, self.port, client_id)
            arrival = wall_ms()
            if st == "ok" and token in self.used_tokens:
                st = "reused"
            elif st == "ok" and arrival > issue_ms + timeout_ms:
                st = "expired"
            self.tokens[st] = self.tokens.get(st, 0) + 1
            if st == "expired":
                self.handoffs_late += 1
                return refuse(RESULT_AUTH, "handoff token expired")
            if st != "ok":
                self.handoffs_rejected += 1
                return refuse(RESULT_AUTH, f"handoff token {st}")
            handoff = max(0, arrival - issue_ms)
            self.used_tokens.add(token)
        elif self.args.auth_token is not None and token != self.args.auth_token:
            return refuse(RESULT_AUTH, "bad auth token")
        if len(self.clients) >= self.args.max_clients:
            return refuse(RESULT_FULL, "server full")

        eid = self.next_entity_id
        self.next_entity_id += 1
        k = eid - self.args.first_entity_id
        ent = Ent(eid, 0, 1, x=-20.0 + (k % 9) * 5.0, z=-20.0 + (k // 9 % 9) * 5.0)
        c = Client(addr, ent, client_id, cver, now)
        c.ack_packet = CONNECT_ACK.pack(T_CONNECT_ACK, PROTOCOL_VERSION, eid, self.args.zone_id,
                                        self.tick, wall_ms(), RESULT_OK, cstr("welcome", 64))
        if handoff is not None:
            c.c["handoffs_arrived"] = 1
            c.handoff_latency_ms = handoff
        if self.args.heartbeat_interval > 0:
            c.next_hb = now + self.args.heartbeat_interval
        self.clients[addr] = c
        self.clients_seen += 1
        if self.sendto(c.ack_packet, addr, c):
            c.c["connect_acks_sent"] += 1

    def on_input(self, c: Client, data: bytes, now: float):
        if len(data) == INPUT_ACK.size:
            _, seq, _ts, flags, yaw, pitch, _target, ack = INPUT_ACK.unpack(data)
        else:
            _, seq, _ts, flags, yaw, pitch, _target = INPUT_SPEC.unpack(data)
            ack = None
        if c.playing_since is None:
            c.c["input_before_connected"] += 1
            return self.ignore("input_before_connected")
        c.c["inputs"] += 1
        # diagnostic token bucket: 60/s, burst 10 (not enforced)
        c.rate_tokens = min(10.0, c.rate_tokens + (now - c.rate_at) * 60.0)
        c.rate_at = now
        if c.rate_tokens >= 1.0:
            c.rate_tokens -= 1.0
        else:
            c.c["inputs_over_rate"] += 1

        reason = None
        newest = False
        # section 6.3 replay window
        if seq > c.seq_high:
            diff = seq - c.seq_high
            c.seq_bits = 1 if diff >= SEQ_WINDOW else ((c.seq_bits << diff) | 1) & (
                (1 << SEQ_WINDOW) - 1)
            c.seq_high = seq
            newest = True
        else:
            diff = c.seq_high - seq
            if diff >= SEQ_WINDOW:
                reason = "sequence_too_old"
            elif c.seq_bits >> diff & 1:
                reason = "sequence_replay"
            else:
                c.seq_bits |= 1 << diff
                if c.seq_bits == 1 << diff and diff == 0:
                    newest = True  # very first input with sequence 0
        if reason is None:
            if not math.isfinite(yaw):
                reason = "yaw_not_finite"
            elif yaw < -PI_F32 or yaw > PI_F32:
                reason = "yaw_range"
            elif not math.isfinite(pitch):
                reason = "pitch_not_finite"
            elif pitch < -HALF_PI_F32 or pitch > HALF_PI_F32:
                reason = "pitch_range"
            elif flags & F_FORWARD and flags & F_BACKWARD:
                reason = "flags_forward_backward"
            elif flags & F_LEFT and flags & F_RIGHT:
                reason = "flags_left_right"
        if reason is not None:
            c.c["invalid_inputs"] += 1
            c.invalid_by_reason[reason] = c.invalid_by_reason.get(reason, 0) + 1
            return
        c.c["inputs_valid"] += 1
        if newest:
            c.flags = flags
            c.ent.yaw = yaw
            c.pitch = pitch
        else:
            c.c["inputs_reordered"] += 1
        if ack is None:
            c.c["inputs_no_ack"] += 1
            return
        if ack == 0:
            c.acked = None  # explicit request for a full snapshot
            return
        if ack == c.acked:
            return  # the same baseline again (e.g. no newer snapshot arrived)
        if ack in c.sent_ticks:
            if c.acked is None or serial_gt(ack, c.acked):
                c.acked = ack
                c.c["acks_valid"] += 1
            else:
                c.c["ack_stale"] += 1  # reordered: older than the current ack
            return
        if c.acked is not None and not serial_gt(ack, c.acked):
            c.c["ack_stale"] += 1  # older than our window or than the current ack
            return
        c.c["ack_not_sent"] += 1

    def send_pong(self, c: Client, ts: int):
        if self.sendto(TYPED_U32.pack(T_PONG, ts), c.addr, c):
            c.c["pongs"] += 1

    # ---- simulation --------------------------------------------------------------------

    def simulate(self, now: float):
        dt = self.interval
        t = self.ticks_run * dt
        for i, e in enumerate(self.npcs):
            r = 10.0 + (6.0 * i) % 180.0
            w = 0.4 + 0.1 * i
            a = w * t + i
            nx, nz = r * math.cos(a), r * math.sin(a)
            e.vx, e.vz = (nx - e.x) / dt, (nz - e.z) / dt
            e.x, e.z = nx, nz
            e.yaw = math.atan2(e.vx, e.vz)
            e.anim = 1
            if self.ticks_run % (self.args.tick_rate * 3) == i:
                e.health = 100 if e.health <= 40 else e.health - 20
        # projectile: 2 s flight, 0.5 s gap, new id each time
        phase = t - self.projectile_phase_start
        if self.projectile is None and phase >= 0.5 and self.npcs:
            src = self.npcs[0]
            p = Ent(self.next_projectile_id, 1, 2, src.x, 1.5, src.z)
            self.next_projectile_id = PROJECTILE_ID_BASE + (
                self.next_projectile_id - PROJECTILE_ID_BASE + 1) % 1000
            p.yaw = src.yaw
            p.vx, p.vz = 20.0 * math.sin(p.yaw), 20.0 * math.cos(p.yaw)
            self.projectile, self.projectile_phase_start = p, t
        elif self.projectile is not None:
            p = self.projectile
            if phase >= 2.0:
                self.projectile, self.projectile_phase_start = None, t
            else:
                p.x += p.vx * dt
                p.z += p.vz * dt
        for c in self.clients.values():
            if c.playing_since is None:
                continue
            e, f = c.ent, c.flags
            fwd = (1 if f & F_FORWARD else 0) - (1 if f & F_BACKWARD else 0)
            side = (1 if f & F_RIGHT else 0) - (1 if f & F_LEFT else 0)
            speed = 8.0 if f & F_SPRINT else 5.0
            sy, cy = math.sin(e.yaw), math.cos(e.yaw)
            mx, mz = fwd * sy + side * cy, fwd * cy - side * sy
            norm = math.hypot(mx, mz)
            if norm > 0:
                mx, mz = mx / norm * speed, mz / norm * speed
            e.vx, e.vz = mx, mz
            e.x = max(-WORLD_LIMIT, min(WORLD_LIMIT, e.x + mx * dt))
            e.z = max(-WORLD_LIMIT, min(WORLD_LIMIT, e.z + mz * dt))
            e.anim = (3 if f & F_JUMP else 4 if f & F_ATTACK else 5 if f & F_BLOCK
                      else 2 if norm and f & F_SPRINT else 1 if norm else 0)

    def world_entities(self) -> list[Ent]:
        ents = list(self.npcs)
        ents.append(self.loot)
        if self.projectile is not None:
            ents.append(self.projectile)
        ents.extend(c.ent for c in self.clients.values() if c.playing_since is not None)
        return ents

    def visible(self, c: Client, ents: list[Ent], qcache: dict) -> dict:
        me = c.ent
        near = []
        for e in ents:
            if e is me:
                continue
            d2 = (e.x - me.x) ** 2 + (e.y - me.y) ** 2 + (e.z - me.z) ** 2
            if d2 <= AOI_RADIUS * AOI_RADIUS:
                near.append((d2, e.eid, e))
        near.sort(key=lambda x: (x[0], x[1]))
        out = {me.eid: qcache[me.eid]}
        for _, eid, e in near[: self.max_visible - 1]:
            out[eid] = qcache[eid]
        return out

    def build_snapshot(self, c: Client, state: dict) -> tuple[bytes, bool]:
        tick = self.tick
        base = None
        if c.acked is not None:
            age = (tick - c.acked) & 0xFFFFFFFF
            if 0 < age <= BASELINE_WINDOW and c.acked in c.history:
                base = c.history[c.acked]
        if base is not None:
            changed, removed = [], []
            for eid, (etype, vals) in state.items():
                old = base.get(eid)
                if old is None or old[0] != etype:
                    changed.append(encode_entity(eid, etype, FULL_MASK, vals))
                    continue
                ov = old[1]
                mask = 0
                for i in range(13):
                    if vals[i] != ov[i]:
                        mask |= 1 << i
                if mask:
                    changed.append(encode_entity(eid, etype, mask, vals))
            for eid in base:
                if eid not in state:
                    removed.append(eid)
            pkt = SNAP_HEAD.pack(T_SNAPSHOT, tick, c.acked) + struct.pack(
                "<HH", len(changed), len(removed)) + b"".join(changed) + b"".join(
                U32.pack(e) for e in removed)
            if len(pkt) <= self.args.mtu:
                return pkt, False
            c.c["full_fallback_mtu"] += 1
        body = [encode_entity(eid, etype, FULL_MASK, vals) for eid, (etype, vals)
                in state.items()]
        return SNAP_HEAD.pack(T_SNAPSHOT, tick, tick) + struct.pack("<H", len(body)) + b"".join(
            body), True

    def do_tick(self, now: float):
        self.tick = (self.tick + 1) & 0xFFFFFFFF
        self.ticks_run += 1
        self.simulate(now)
        ents = self.world_entities()
        qcache = {e.eid: (e.etype, e.quantized()) for e in ents}
        for c in list(self.clients.values()):
            if c.playing_since is None:
                continue
            state = self.visible(c, ents, qcache)
            pkt, full = self.build_snapshot(c, state)
            c.history[self.tick] = state
            old = (self.tick - HISTORY_KEEP) & 0xFFFFFFFF
            c.history.pop(old, None)
            c.sent_ticks.discard(old)
            c.c["snapshots_generated"] += 1
            c.c["full_snapshots" if full else "delta_snapshots"] += 1
            if self.drops(c.c["snapshots_generated"]):
                c.c["snapshots_dropped"] += 1
                continue
            if self.sendto(pkt, c.addr, c):
                c.c["snapshots_sent"] += 1
                c.sent_ticks.add(self.tick)
                if self.args.debug_state_hash:
                    blob = b"".join(encode_entity(eid, st[0], FULL_MASK, st[1])
                                    for eid, st in sorted(state.items()))
                    txt = f"state_hash tick={self.tick} crc={zlib.crc32(blob):08x}".encode()
                    self.sendto(bytes([T_DEBUG_TEXT]) + struct.pack("<H", len(txt)) + txt,
                                c.addr, c)
        self.timers(now)

    def timers(self, now: float):
        for c in list(self.clients.values()):
            if c.next_hb is not None and now >= c.next_hb:
                c.next_hb = now + self.args.heartbeat_interval
                ts = wall_ms() & 0xFFFFFFFF
                c.hb_sent[ts] = now
                for k in [k for k, v in c.hb_sent.items() if now - v > 60.0]:
                    del c.hb_sent[k]
                if self.sendto(TYPED_U32.pack(T_HEARTBEAT, ts), c.addr, c):
                    c.c["heartbeats_sent"] += 1
            if c.playing_since is None:
                continue
            if c.next_damage is not None and now >= c.next_damage:
                c.next_damage += self.args.damage_every
                e = c.ent
                dmg = 7
                e.health = max(0, e.health - dmg)
                attacker = self.npcs[0].eid if self.npcs else 0
                self.send_event(c, EV_DAMAGE, DAMAGE.pack(
                    e.eid, attacker, dmg, c.hit_type, e.health, cstr("claw", 16)), now)
                c.hit_type = (c.hit_type + 1) % 4
                c.c["damage_events"] += 1
                if e.health == 0:
                    self.send_event(c, EV_DEATH, DEATH.pack(e.eid, attacker, 3000, 0), now)
                    c.c["death_events"] += 1
                    e.health = 100
            if c.handoff_due is not None and now >= c.handoff_due and c.handoff_event is None:
                self.handoff_serial += 1
                issue = wall_ms()
                tmo = self.args.handoff_timeout_ms
                tok = make_token(self.secret, issue, tmo, self.handoff_serial,
                                 self.args.handoff_zone, self.args.handoff_to, c.client_id)
                payload = HANDOFF.pack(self.args.handoff_zone, cstr("127.0.0.1", 32),
                                       self.args.handoff_to, cstr(tok, 32), tmo)
                eid = c.next_event_id
                c.next_event_id = (c.next_event_id + 1) & 0xFFFFFFFF
                c.handoff_event = (eid, payload)
                c.handoff_issued = now
                c.handoff_deadline = now + tmo / 1000.0 + 1.0
                c.handoff_next_resend = now + HANDOFF_RESEND_S
                self.send_event(c, EV_ZONE_HANDOFF, payload, now, eid)
                c.c["handoffs_sent"] += 1
                c.c["handoff_events_sent"] += 1
            elif c.handoff_event is not None:
                if now >= c.handoff_deadline:
                    c.c["handoffs_ignored"] += 1
                    self.send_disconnect(c, DR_ZONE_HANDOFF, "handoff not followed")
                    self.forget(c, "handoff_ignored")
                elif now >= c.handoff_next_resend and now < c.handoff_issued + \
                        self.args.handoff_timeout_ms / 1000.0:
                    c.handoff_next_resend = now + HANDOFF_RESEND_S
                    self.send_event(c, EV_ZONE_HANDOFF, c.handoff_event[1], now,
                                    c.handoff_event[0])
                    c.c["handoff_events_sent"] += 1

    def expire(self, now: float):
        for c in list(self.clients.values()):
            if now - c.last_seen > self.args.client_timeout:
                self.send_disconnect(c, DR_TIMEOUT, "timeout")
                self.forget(c, "timeout")

    # ---- main loop ---------------------------------------------------------------------

    def on_stop(self):
        for c in list(self.clients.values()):
            self.send_disconnect(c, DR_SERVER_SHUTDOWN, "server shutdown")

    # ---- ground truth ------------------------------------------------------------------

    def truth_lines(self) -> list[str]:
        def kv(d: dict) -> str:
            return " ".join(f"{k}={v}" for k, v in sorted(d.items())) or "none=0"

        everyone = self.finished + list(self.clients.values())
        head = ("snapshots_generated", "snapshots_dropped", "pongs", "inputs", "invalid_inputs",
                "handoffs_sent", "handoffs_arrived")
        lines = []
        for c in everyone:
            rest = {k: v for k, v in c.c.items() if k not in head}
            lines.append(
                f"TRUTH client zone={self.args.zone_id} port={self.port} "
                f"addr={c.addr[0]}:{c.addr[1]} entity={c.ent.eid} "
                f"client_id={c.client_id.replace(' ', '_') or '-'} "
                f"ended={c.ended or 'running'} "
                + " ".join(f"{k}={c.c[k]}" for k in head) + " "
                + f"handoff_latency_ms={c.handoff_latency_ms if c.handoff_latency_ms is not None else '-'} "
                + " ".join(f"{k}={v}" for k, v in rest.items()))
        tot = {k: sum(c.c[k] for c in everyone) for k in COUNTER_KEYS}
        lines.append(
            f"TRUTH total zone={self.args.zone_id} port={self.port} clients={self.clients_seen} "
            + " ".join(f"{k}={tot.get(k, 0)}" for k in head) + " "
            + f"handoffs_late={self.handoffs_late} handoffs_rejected={self.handoffs_rejected} "
            + f"malformed={sum(self.malformed_by_reason.values())} "
            + f"refusals={sum(self.refusals.values())} "
            + " ".join(f"{k}={v}" for k, v in tot.items() if k not in head) + " "
            + f"datagrams_received={self.received} ticks={self.ticks_run} "
            + f"last_tick={self.tick} ticks_resynced={self.ticks_resynced} "
            + f"max_tick_lag_ms={self.max_tick_lag_ms:.3f} ticks_late_5ms={self.ticks_late_5ms} "
            + f"cpu_s={time.process_time():.3f} stop={self.stop_reason}")
        inv: dict[str, int] = {}
        for c in everyone:
            for k, v in c.invalid_by_reason.items():
                inv[k] = inv.get(k, 0) + v
        lines.append(f"TRUTH invalid_inputs zone={self.args.zone_id} {kv(inv)}")
        lines.append(f"TRUTH malformed zone={self.args.zone_id} {kv(self.malformed_by_reason)}")
        lines.append(f"TRUTH ignored zone={self.args.zone_id} {kv(self.ignored_by_reason)}")
        lines.append(f"TRUTH refusals zone={self.args.zone_id} {kv(self.refusals)}")
        lines.append(f"TRUTH handoff_tokens zone={self.args.zone_id} {kv(self.tokens)}")
        lines.append(f"TRUTH disconnects zone={self.args.zone_id} "
                     f"{kv(self.disconnects_by_reason)}")
        return lines


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_impairment_args(p, dropped="tick")
    p.add_argument("--zone-id", type=int, default=1, help="zone_id in CONNECT_ACK")
    p.add_argument("--tick-rate", type=int, default=20, help="ticks (snapshots) per second")
    p.add_argument("--start-tick", type=lambda s: int(s, 0), default=1,
                   help="tick before the first snapshot tick (u32, wraps)")
    p.add_argument("--duration", type=float, default=120.0,
                   help="stop and print TRUTH after this many seconds (0 = until signal)")
    p.add_argument("--npcs", type=int, default=6, help="moving NPC entities")
    p.add_argument("--mtu", type=int, default=1200, help="snapshot datagram size cap")
    p.add_argument("--max-clients", type=int, default=4096,
                   help="sessions before CONNECT_ACK result 3 (server_full)")
    p.add_argument("--auth-token", default=None,
                   help="if set, CONNECT auth_token must equal it (else result 2)")
    p.add_argument("--client-timeout", type=float, default=10.0,
                   help="forget a session silent this long (DISCONNECT 1 sent)")
    p.add_argument("--heartbeat-interval", type=float, default=5.0,
                   help="server HEARTBEAT period per session (0 = never)")
    p.add_argument("--damage-every", type=float, default=1.0,
                   help="seconds between DAMAGE events per client (0 = none)")
    p.add_argument("--first-entity-id", type=int, default=1000)
    p.add_argument("--handoff-after", type=float, default=None,
                   help="seconds after CONNECTED before a client is handed off")
    p.add_argument("--handoff-to", type=int, default=0,
                   help="UDP port of the destination zone server on 127.0.0.1")
    p.add_argument("--handoff-zone", type=int, default=2, help="new_zone_id in the handoff")
    p.add_argument("--handoff-timeout-ms", type=int, default=5000)
    p.add_argument("--accept-tokens", action="store_true",
                   help="accept handoff tokens issued by a server with the same --secret")
    p.add_argument("--secret", default="darkages-dev-secret",
                   help="shared HMAC key for handoff tokens; give both instances the same one")
    p.add_argument("--debug-state-hash", action="store_true",
                   help="send DEBUG_TEXT 'state_hash tick=N crc=X' after each snapshot")
    a = p.parse_args(argv)
    if not 1 <= a.tick_rate <= 1000:
        p.error("--tick-rate must be in 1..1000")
    if a.drop_every < 0 or a.npcs < 0 or a.pong_delay_ms < 0 or a.duration < 0:
        p.error("negative value")
    if a.mtu < SNAP_HEAD.size + 2 + FULL_ENTITY_SIZE:
        p.error("--mtu too small for one entity")
    if a.handoff_after is not None and not 0 < a.handoff_to < 65536:
        p.error("--handoff-after needs --handoff-to PORT")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    srv = Server(args)
    return serve(srv, args.duration, "duration", srv.truth_lines)


if __name__ == "__main__":
    sys.exit(main())
