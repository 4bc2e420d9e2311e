/*
 * zc_peer: an independent ZergCity test peer (server and client), written from
 * the protocol's description (docs/protocols/zergcity.md) only.
 * It shares no code with tickswarm; its job is to give a load tool a server whose ground truth
 * (what it generated, what it deliberately dropped) is printed at exit, and a client that
 * exercises a server end to end.
 *
 * Build: make -C tests/peers/zergcity-peer   (needs libenet-dev, liblz4-dev; C99)
 *
 * Modes (loopback; output lines are "WORD key=value ...", stdout flushed per line):
 *
 *   zc_peer server PORT [--drop-every K] [--pong-delay-ms D] [--duration S] [--players N]
 *                       [--map W] [--start-tick T]
 *       A ZergCity game on 127.0.0.1:PORT (0 = ephemeral). Prints "LISTENING port=P" first.
 *       Runs S seconds (default 60; 0 = until SIGINT/SIGTERM). On exit prints one
 *       "TRUTH client=<n> ..." line per ENet connection (n = 0,1,2... in connect order) and one
 *       "TRUTH total ..." line.
 *   zc_peer client HOST PORT [--seconds S] [--name NAME] [--pause-acks-ms A] [--inputs N]
 *                            [--input-interval-ms I] [--send-invalid N] [--proto-version V]
 *       Handshake, FullSnapshot, deltas (acked), N InputMessages (default 5, max 64) every I ms
 *       (default 200; PlaceBuilding, DesignateZone, Demolish, PurchaseTile, None, repeating),
 *       Pings every 250 ms, graceful Disconnect after S seconds (default 3). Prints
 *       "RESULT ok ..." (exit 0) or "RESULT fail <reason> ..." (exit 1). Checks: every input
 *       acked with result 0, our PlaceBuilding visible in the state at its applied_tick, every
 *       delta applies cleanly, no invalid message received.
 *       --pause-acks-ms A: from 1 s into the run, ignore deltas (and so ack none) for A ms
 *       (forces a multi-tick delta, or a new FullSnapshot when A > 5 s).
 *       --send-invalid N: N times, send one message per validation reason (see
 *       client_send_probes); N >= 2 gets the client kicked.
 *       --proto-version V: header version of the ClientHello (2 -> ServerHello result 2).
 *   zc_peer fuzz N [SEED]
 *       No network: feeds N mutated messages to the server and client receive paths (see
 *       run_fuzz). Prints "FUZZ ok ...".
 *
 * ---------------------------------------------------------------------------------------------
 * READING OF THE SPEC AND LAYOUT DECISIONS (where the description is silent)
 * ---------------------------------------------------------------------------------------------
 *  Header: 16 bytes, magic bytes 5A 43 4E 54, version 1, all integers little-endian.
 *  D1  One ZergCity message per ENet packet when sending. When receiving, a packet may hold
 *      several messages back to back (parsed until used up; a header-level failure drops the
 *      rest of the packet).
 *  D2  `sequence`: one counter per connection per direction, over ALL message types, first
 *      message = 1. A DeltaSnapshot dropped by --drop-every still consumes its number, so the
 *      receiver sees a gap. Received sequences are not validated (not in §13); the client
 *      reports seq gaps as a loss estimate.
 *  D3  Flags we set: RELIABLE (bit 3) on everything sent reliably (channels 0 and 1),
 *      COMPRESSED (bit 0) on FullSnapshot and on DeltaSnapshots whose delta payload (the part
 *      after entity_count/component_count) exceeds 1024 bytes. ACK_REQUEST never set.
 *      Receivers: COMPRESSED on any type means body = uncompressed_size u32 + LZ4 block of the
 *      body (§8.3), except FullSnapshot (§5.1: uncompressed_size u32, snapshot_tick u64, LZ4).
 *      COMPRESSED missing on a FullSnapshot = invalid (bad_flags).
 *  D4  Channels: 0 reliable (hello, disconnect, input, input ack, snapshot ack), 1 reliable
 *      (FullSnapshot), 2 unreliable sequenced, ENet flags 0 (DeltaSnapshot, Ping, Pong).
 *      A message on another channel is processed, and counted as warn_wrong_channel.
 *  D5  Ticks start at --start-tick (default 1), 20 Hz. Tick 0 = "none". ServerHello.current_tick
 *      = last simulated tick. An input processed between ticks T and T+1 is applied at T+1
 *      (InputAck.applied_tick = T+1).
 *  D6  Per tick, per joined client, exactly one of: a FullSnapshot (no ack yet, or ack older
 *      than 100 ticks), nothing (a FullSnapshot is outstanding and less than 40 ticks old),
 *      or a DeltaSnapshot base_tick = newest tick the client acked, target_tick = this tick.
 *      An unacked FullSnapshot is resent after 40 ticks. Acks must name a tick that was
 *      actually sent to that client (else invalid bad_ack); an older ack than the current one
 *      is ignored. §13.2's "1 FullSnapshot request per 30 s" has no request message: not used.
 *  D7  Delta payload order: all entity updates, then all component updates. An entity present
 *      at both ticks whose components changed gets entity op 2 (modified) plus component op 2
 *      per changed component. A created entity: entity op 0 + component op 0 (added) per
 *      component. A destroyed entity: entity op 1 only (its components go with it).
 *      component_data in a delta = the raw §7.3 layout (no §7.2 type/version/length prefix:
 *      the delta record already has type and length). If a delta would exceed 65535 entity or
 *      component records, a FullSnapshot is sent instead.
 *  D8  archetype_id = component bitmask, bit (type_id - 1): Position|Ownership|Building = 0x7,
 *      Position|Ownership = 0x3. component_mask_len = 1, mask byte = the same bits.
 *      Components used: Position (1, 12 B), Ownership (2, 12 B), Building (3, 16 B), all
 *      version 1, layouts exactly as §7.3. Ownership.state 1 = owned. Building.state
 *      0 = under construction (first 20 ticks), 1 = active. Player id = slot + 1 (0 = GM).
 *  D9  FullSnapshot compressed payload = section_count u32, section headers (12 B each),
 *      section_data; offsets relative to the start of section_data. Sections in this order:
 *        Metadata  (1): snapshot_tick u64, tick_rate u32, map_width u32, map_height u32,
 *                       rng_seed u64, num_players u32, max_players u32            (36 B)
 *        Players   (2): count u32, then per player: slot u8, player_id u8, connected u8,
 *                       pad u8, name[32] (null-padded)                             (4+36n)
 *        Terrain   (3): map_width*map_height bytes, row-major, one terrain type per tile
 *        Entities  (4): count u32, then per entity the §7.1 header
 *                       (entity_id u32, archetype_id u32, mask_len u8, mask[mask_len])
 *        Components(5): count u32, then per component: entity_id u32 + the §7.2 record
 *                       (type_id u16, version u16, data_length u16, data)
 *        DenseGrids(6): grid_count u32 (= 0; no grid layout defined)
 *  D10 Input payloads (§6.1 defines 1-3): None 0 B; PurchaseTile grid_x i32, grid_y i32 (8 B);
 *      SetTributeRate zone_type u8, rate u8 (2 B); PlaceRoad/PlaceConduit/PlacePipe same as
 *      Demolish (tile_count u16 + N*8); CancelAction 0 B. Lengths must match exactly, else
 *      invalid (bad_payload) and InputAck result 5. Server effects: PlaceBuilding creates an
 *      entity (archetype 0x7) at (x,y), PurchaseTile one with archetype 0x3, Demolish destroys
 *      every live entity on the listed tiles; others change nothing. Coordinates outside the
 *      map: result 1 (Invalid position). 60 accepted inputs within any 1000 ms per client: the
 *      next is refused with result 6 (sliding window). Otherwise result 0.
 *  D11 ServerHello: assigned_slot = requested slot if free, else the lowest free slot. A
 *      non-zero session_token of an earlier session on this server gets that slot back if free;
 *      an unknown token gets a new slot (§13.3), never result 3. No free slot: result 1, then
 *      ENet disconnect. Wrong protocol_version on a ClientHello: ServerHello result 2 then
 *      disconnect. The ENet host allows players+28 peers so a 5th player gets a reply.
 *  D12 Game actions 0x30-0x34, ChatMessage, ServerCommand, ErrorMessage from a client: payload
 *      undefined, counted as "ignored", no reply. Ping is answered even before ClientHello;
 *      other messages before ClientHello are counted "before_hello" and ignored.
 *  D13 Validation (§13): bad_magic, bad_version, too_large (payload_length or uncompressed_size
 *      > 16 MiB), bad_length (payload_length beyond the packet, or a fixed-size message of the
 *      wrong size), unknown_type (counted, ignored, does not count toward the kick),
 *      bad_decompress (LZ4 error or size != stated size), bad_payload (counts/offsets out of
 *      bounds, bad input payload), unexpected_type (known type, wrong direction), bad_ack,
 *      bad_flags. Ten invalid messages from one client: Disconnect reason 4, ENet disconnect.
 *  D14 World (deterministic): 64 base entities (ids 1-64), a server-spawned entity
 *      0x40000000+k alive for ticks [40k+10, 40k+30), Building.level = 1 + ((tick/10 + id) % 3)
 *      (so every 10th tick all buildings change and the delta exceeds 1024 B -> compressed),
 *      population changes once every 8 ticks per entity. Terrain byte = ((x/8 + y/8) % 4).
 *  D15 Pong: timestamp echoed from the Ping, server_tick = current tick when the Pong is sent.
 *      --pong-delay-ms delays each Pong by D ms.
 *  D16 Closing: a client sends Disconnect (reason 0) then closes the ENet connection itself; the
 *      server frees the slot on the Disconnect message and closes the ENet peer only if the
 *      client has not within 2 s (both sides calling enet_peer_disconnect_later at once left
 *      the server without a DISCONNECT event in testing). A server that refuses (result 1/2)
 *      or kicks (Disconnect reason 4), or shuts down (Disconnect reason 2), closes the ENet
 *      connection; the client waits for that.
 *  D17 Client SnapshotAck: acked_tick = tick of the state it just applied (FullSnapshot or
 *      delta), last_input_seq = highest input_sequence it has sent. A delta whose base_tick is
 *      not the client's current state tick is not applied and not acked (baseline_missing, or
 *      stale when target <= current). Client loss estimates: seq_lost = missing header
 *      sequence numbers, tick_gaps = target ticks skipped between received snapshots.
 *  D18 Server ClientHello/ServerHello versions: server_version = 0x00010000, the client sends
 *      client_version 0x00010000, requested_slot 0xFF, zero token. Neither is checked (§9.3).
 */
#define _POSIX_C_SOURCE 200809L
#include <enet/enet.h>
#include <lz4.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ protocol constants */
#define HDR 16
#define PROTO_VERSION 1
#define MAX_PAYLOAD (16u * 1024u * 1024u)
#define TICK_RATE 20
#define TICK_US (1000000 / TICK_RATE)
#define MAX_DELTA_AGE 100   /* ticks: older ack -> FullSnapshot (D6) */
#define FULL_RETRY 40       /* ticks: resend an unacked FullSnapshot (D6) */
#define BASE_ENTITIES 64
#define TRANSIENT_BASE 0x40000000u
#define MAX_ENTITIES 50000
#define KICK_INVALID 10
#define INPUT_RATE 60
#define PROBE_INPUT_SEQ 0xFFFFFFF0u /* client --send-invalid: the deliberately bad input */

enum {
    F_COMPRESSED = 1 << 0,
    F_FRAGMENTED = 1 << 1,
    F_ACK_REQUEST = 1 << 2,
    F_RELIABLE = 1 << 3
};

enum {
    T_CLIENT_HELLO = 0x00, T_SERVER_HELLO = 0x01, T_DISCONNECT = 0x02, T_PING = 0x03,
    T_PONG = 0x04, T_FULL = 0x10, T_DELTA = 0x11, T_SNAP_ACK = 0x12, T_INPUT = 0x20,
    T_INPUT_ACK = 0x21, T_PURCHASE = 0x30, T_PLACE = 0x31, T_ZONE = 0x32, T_DEMOLISH = 0x33,
    T_TRIBUTE = 0x34, T_CHAT = 0x40, T_CHAT_BCAST = 0x41, T_SERVER_CMD = 0xF0, T_ERROR = 0xFE,
    T_RESERVED = 0xFF
};

static int type_known(uint8_t t)
{
    switch (t) {
    case 0x00: case 0x01: case 0x02: case 0x03: case 0x04: case 0x10: case 0x11: case 0x12:
    case 0x20: case 0x21: case 0x30: case 0x31: case 0x32: case 0x33: case 0x34: case 0x40:
    case 0x41: case 0xF0: case 0xFE: case 0xFF:
        return 1;
    default:
        return 0;
    }
}

/* validation failure reasons (D13) */
enum {
    R_BAD_MAGIC, R_BAD_VERSION, R_TOO_LARGE, R_BAD_LENGTH, R_UNKNOWN_TYPE, R_BAD_DECOMPRESS,
    R_BAD_PAYLOAD, R_UNEXPECTED_TYPE, R_BAD_ACK, R_BAD_FLAGS, R_COUNT
};
static const char *R_NAME[R_COUNT] = {"bad_magic", "bad_version", "too_large", "bad_length",
                                      "unknown_type", "bad_decompress", "bad_payload",
                                      "unexpected_type", "bad_ack", "bad_flags"};
/* warnings: processed anyway */
enum { W_WRONG_CHANNEL, W_RESERVED, W_FRAGMENTED, W_INPUT_SEQ, W_COMPRESSED_UNEXPECTED,
       W_COMP_LEN, W_MASK, W_FLAGS, W_COUNT };
static const char *W_NAME[W_COUNT] = {"wrong_channel", "reserved_nonzero", "fragmented",
                                      "input_seq", "compressed_unexpected", "component_len",
                                      "mask_mismatch", "flags"};

typedef struct {
    uint64_t r[R_COUNT];
    uint64_t w[W_COUNT];
} vstats_t;

static uint64_t vs_invalid(const vstats_t *v)
{
    uint64_t s = 0;
    for (int i = 0; i < R_COUNT; i++) s += v->r[i];
    return s;
}

static void vs_print(FILE *f, const vstats_t *v)
{
    fprintf(f, " invalid=%llu", (unsigned long long)vs_invalid(v));
    for (int i = 0; i < R_COUNT; i++) fprintf(f, " inv_%s=%llu", R_NAME[i], (unsigned long long)v->r[i]);
    for (int i = 0; i < W_COUNT; i++) fprintf(f, " warn_%s=%llu", W_NAME[i], (unsigned long long)v->w[i]);
}

static void vs_add(vstats_t *a, const vstats_t *b)
{
    for (int i = 0; i < R_COUNT; i++) a->r[i] += b->r[i];
    for (int i = 0; i < W_COUNT; i++) a->w[i] += b->w[i];
}

/* ------------------------------------------------------------------ little helpers */
static volatile sig_atomic_t g_stop = 0;
static void on_signal(int s) { (void)s; g_stop = 1; }

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void die_oom(void)
{
    fprintf(stderr, "zc_peer: out of memory\n");
    exit(3);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) die_oom();
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) die_oom();
    return p;
}

/* growable little-endian writer */
typedef struct { uint8_t *p; size_t len, cap; } buf_t;

static void b_reserve(buf_t *b, size_t add)
{
    if (b->len + add > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + add) nc *= 2;
        b->p = xrealloc(b->p, nc);
        b->cap = nc;
    }
}
static void b_bytes(buf_t *b, const void *d, size_t n) { b_reserve(b, n); if (n) memcpy(b->p + b->len, d, n); b->len += n; }
static void b_zero(buf_t *b, size_t n) { b_reserve(b, n); memset(b->p + b->len, 0, n); b->len += n; }
static void b_u8(buf_t *b, uint8_t v) { b_bytes(b, &v, 1); }
static void b_u16(buf_t *b, uint16_t v) { uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)}; b_bytes(b, x, 2); }
static void b_u32(buf_t *b, uint32_t v)
{
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    b_bytes(b, x, 4);
}
static void b_u64(buf_t *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    b_bytes(b, x, 8);
}
static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* bounds-checked little-endian reader: any overrun sets err and returns 0 */
typedef struct { const uint8_t *p; size_t len, off; int err; } rd_t;

static rd_t rd_make(const uint8_t *p, size_t len) { rd_t r = {p, len, 0, 0}; return r; }
static int rd_has(rd_t *r, size_t n)
{
    if (r->err || n > r->len - r->off) { r->err = 1; return 0; }
    return 1;
}
static uint8_t r_u8(rd_t *r) { if (!rd_has(r, 1)) return 0; return r->p[r->off++]; }
static uint16_t r_u16(rd_t *r)
{
    if (!rd_has(r, 2)) return 0;
    uint16_t v = (uint16_t)(r->p[r->off] | (r->p[r->off + 1] << 8));
    r->off += 2;
    return v;
}
static uint32_t r_u32(rd_t *r)
{
    if (!rd_has(r, 4)) return 0;
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | r->p[r->off + i];
    r->off += 4;
    return v;
}
static uint64_t r_u64(rd_t *r)
{
    if (!rd_has(r, 8)) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | r->p[r->off + i];
    r->off += 8;
    return v;
}
static const uint8_t *r_bytes(rd_t *r, size_t n)
{
    if (!rd_has(r, n)) return NULL;
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}
static size_t rd_left(const rd_t *r) { return r->err ? 0 : r->len - r->off; }

static void sanitize(char *dst, const uint8_t *src, size_t n)
{
    size_t i;
    for (i = 0; i < n && src[i]; i++) dst[i] = (src[i] >= 0x21 && src[i] < 0x7f) ? (char)src[i] : '?';
    dst[i] = 0;
}

/* ------------------------------------------------------------------ message framing */
typedef struct {
    uint8_t ver, type, flags, reserved;
    uint32_t plen, seq;
    const uint8_t *body;
    size_t blen;
    uint8_t channel;
} msg_t;

/* Build and send one message (D1). seq: per-connection counter, *seq is the next number. */
static int send_msg(ENetPeer *peer, uint32_t *seq, uint8_t channel, int reliable, uint8_t type,
                    uint8_t flags, const uint8_t *body, size_t blen)
{
    if (!peer) { (*seq)++; return -1; } /* fuzz mode: no network */
    ENetPacket *pk = enet_packet_create(NULL, HDR + blen, reliable ? ENET_PACKET_FLAG_RELIABLE : 0);
    if (!pk) return -1;
    uint8_t *p = pk->data;
    p[0] = 0x5A; p[1] = 0x43; p[2] = 0x4E; p[3] = 0x54;
    p[4] = PROTO_VERSION;
    p[5] = type;
    p[6] = (uint8_t)(flags | (reliable ? F_RELIABLE : 0));
    p[7] = 0;
    put_u32(p + 8, (uint32_t)blen);
    put_u32(p + 12, (*seq)++);
    if (blen) memcpy(p + HDR, body, blen);
    if (enet_peer_send(peer, channel, pk) != 0) {
        enet_packet_destroy(pk);
        return -1;
    }
    return 0;
}

/* §8.3 generic decompression: src = uncompressed_size u32 + LZ4 block. Returns malloc'd body. */
static uint8_t *lz4_unwrap(const uint8_t *src, size_t slen, uint32_t usize, int *reason)
{
    if (usize > MAX_PAYLOAD) { *reason = R_TOO_LARGE; return NULL; }
    uint8_t *out = xmalloc(usize);
    int n = LZ4_decompress_safe((const char *)src, (char *)out, (int)slen, (int)usize);
    if (n < 0 || (uint32_t)n != usize) {
        free(out);
        *reason = R_BAD_DECOMPRESS;
        return NULL;
    }
    return out;
}

static void lz4_wrap(buf_t *out, const uint8_t *src, size_t n)
{
    int bound = LZ4_compressBound((int)n);
    b_u32(out, (uint32_t)n);
    b_reserve(out, (size_t)bound);
    int c = LZ4_compress_default((const char *)src, (char *)out->p + out->len, (int)n, bound);
    if (c <= 0) { fprintf(stderr, "zc_peer: LZ4 compression failed\n"); exit(3); }
    out->len += (size_t)c;
}

/*
 * Split a packet into messages and validate the header (§13). For each message that passes
 * the header checks, calls handler(ctx, msg). Failures are counted in vs.
 * Returns the number of messages handed over.
 */
typedef void (*msg_handler)(void *ctx, msg_t *m);

static int split_packet(const uint8_t *data, size_t len, uint8_t channel, vstats_t *vs,
                        uint64_t *kickable, msg_handler h, void *ctx, int *bad_version_hello)
{
    size_t off = 0;
    int n = 0;
    while (off < len) {
        size_t rem = len - off;
        const uint8_t *p = data + off;
        if (rem < 4 || p[0] != 0x5A || p[1] != 0x43 || p[2] != 0x4E || p[3] != 0x54) {
            vs->r[R_BAD_MAGIC]++; (*kickable)++;
            return n;
        }
        if (rem < HDR) { vs->r[R_BAD_LENGTH]++; (*kickable)++; return n; }
        msg_t m;
        m.ver = p[4]; m.type = p[5]; m.flags = p[6]; m.reserved = p[7];
        rd_t r = rd_make(p + 8, 8);
        m.plen = r_u32(&r);
        m.seq = r_u32(&r);
        m.channel = channel;
        if (m.ver != PROTO_VERSION) {
            vs->r[R_BAD_VERSION]++; (*kickable)++;
            if (m.type == T_CLIENT_HELLO && bad_version_hello) *bad_version_hello = 1;
            return n;
        }
        if (m.plen > MAX_PAYLOAD) { vs->r[R_TOO_LARGE]++; (*kickable)++; return n; }
        if (m.plen > rem - HDR) { vs->r[R_BAD_LENGTH]++; (*kickable)++; return n; }
        m.body = p + HDR;
        m.blen = m.plen;
        off += HDR + m.plen;
        if (!type_known(m.type)) { vs->r[R_UNKNOWN_TYPE]++; continue; } /* not kickable */
        if (m.reserved) vs->w[W_RESERVED]++;
        if (m.flags & F_FRAGMENTED) vs->w[W_FRAGMENTED]++;
        if (m.flags & 0xF0) vs->w[W_FLAGS]++;
        h(ctx, &m);
        n++;
    }
    return n;
}

/* If COMPRESSED is set on a non-FullSnapshot message, replace body by its decompression (D3).
 * *owned receives the buffer to free. Returns 0, or a reason (+1) on failure. */
static int maybe_unwrap(msg_t *m, uint8_t **owned, vstats_t *vs)
{
    *owned = NULL;
    if (!(m->flags & F_COMPRESSED) || m->type == T_FULL) return 0;
    if (m->type != T_DELTA) vs->w[W_COMPRESSED_UNEXPECTED]++;
    rd_t r = rd_make(m->body, m->blen);
    uint32_t usize = r_u32(&r);
    if (r.err) return R_BAD_LENGTH + 1;
    int reason = 0;
    uint8_t *out = lz4_unwrap(m->body + 4, m->blen - 4, usize, &reason);
    if (!out) return reason + 1;
    *owned = out;
    m->body = out;
    m->blen = usize;
    return 0;
}

/* ------------------------------------------------------------------ the world (D14) */
typedef struct {
    uint32_t id, arch;
    int32_t x, y;
    uint8_t owner;
    uint32_t btype;
    uint64_t created, destroyed; /* destroyed 0 = alive */
} ent_t;

static ent_t *g_ents;
static size_t g_nents, g_capents;
static uint32_t g_next_id = BASE_ENTITIES + 1;
static uint32_t g_mapw = 128, g_maph = 128;

static void world_add(uint32_t id, uint32_t arch, int32_t x, int32_t y, uint8_t owner,
                      uint32_t btype, uint64_t created)
{
    if (g_nents == g_capents) {
        g_capents = g_capents ? g_capents * 2 : 128;
        g_ents = xrealloc(g_ents, g_capents * sizeof *g_ents);
    }
    ent_t e = {id, arch, x, y, owner, btype, created, 0};
    g_ents[g_nents++] = e;
}

static void world_init(void)
{
    for (uint32_t i = 1; i <= BASE_ENTITIES; i++)
        world_add(i, 0x7, (int32_t)((i * 13) % g_mapw), (int32_t)((i * 29) % g_maph), 0,
                  1 + i % 5, 0);
}

static int ent_exists(const ent_t *e, uint64_t t)
{
    return e->created <= t && (e->destroyed == 0 || e->destroyed > t);
}

/* the server-spawned transient entity k, alive for [40k+10, 40k+30) */
static ent_t transient(uint64_t k)
{
    ent_t e = {TRANSIENT_BASE + (uint32_t)k, 0x7, (int32_t)((k * 37) % g_mapw),
               (int32_t)((k * 91) % g_maph), 0, 99, 40 * k + 10, 40 * k + 30};
    return e;
}

/* serialize component `type` (1,2,3) of e at tick t into out (returns length, 0 if absent) */
static size_t comp_bytes(const ent_t *e, int type, uint64_t t, uint8_t *out)
{
    if (!(e->arch & (1u << (type - 1)))) return 0;
    buf_t b = {out, 0, 64};
    switch (type) {
    case 1: /* Position */
        b_u32(&b, (uint32_t)e->x); b_u32(&b, (uint32_t)e->y);
        b_u32(&b, (uint32_t)((e->x + e->y) % 32));
        return 12;
    case 2: /* Ownership */
        b_u8(&b, e->owner); b_u8(&b, 1); b_u16(&b, 0); b_u64(&b, e->created);
        return 12;
    case 3: { /* Building */
        b_u32(&b, e->btype);
        b_u8(&b, (uint8_t)(t - e->created < 20 ? 0 : 1));
        b_u8(&b, (uint8_t)(1 + ((t / 10 + e->id) % 3)));
        b_u16(&b, 0);
        b_u32(&b, (uint32_t)e->created);
        b_u32(&b, (uint32_t)(e->id * 10 + (t + 8 - e->id % 8) / 8));
        return 16;
    }
    }
    return 0;
}

static const uint32_t COMP_LEN[4] = {0, 12, 12, 16};

typedef struct {
    int joined;
    uint8_t slot;
    char name[33];
} player_view_t;

/* FullSnapshot payload (D9), uncompressed */
static void build_full_payload(buf_t *out, uint64_t t, const player_view_t *pl, int maxp)
{
    buf_t sec[6] = {{0}};
    int nplayers = 0;
    for (int i = 0; i < maxp; i++) nplayers += pl[i].joined;
    /* Metadata */
    b_u64(&sec[0], t); b_u32(&sec[0], TICK_RATE); b_u32(&sec[0], g_mapw); b_u32(&sec[0], g_maph);
    b_u64(&sec[0], 0x5A434E5400000001ull); b_u32(&sec[0], (uint32_t)nplayers);
    b_u32(&sec[0], (uint32_t)maxp);
    /* Players */
    b_u32(&sec[1], (uint32_t)nplayers);
    for (int i = 0; i < maxp; i++) {
        if (!pl[i].joined) continue;
        b_u8(&sec[1], (uint8_t)i); b_u8(&sec[1], (uint8_t)(i + 1)); b_u8(&sec[1], 1); b_u8(&sec[1], 0);
        uint8_t nm[32] = {0};
        memcpy(nm, pl[i].name, strnlen(pl[i].name, 32));
        b_bytes(&sec[1], nm, 32);
    }
    /* Terrain */
    b_reserve(&sec[2], (size_t)g_mapw * g_maph);
    for (uint32_t y = 0; y < g_maph; y++)
        for (uint32_t x = 0; x < g_mapw; x++) sec[2].p[sec[2].len++] = (uint8_t)((x / 8 + y / 8) % 4);
    /* Entities + Components */
    uint32_t ne = 0, nc = 0;
    b_u32(&sec[3], 0);
    b_u32(&sec[4], 0);
    size_t extra = 0;
    ent_t tr;
    if (t >= 10 && (t - 10) % 40 < 20) { tr = transient((t - 10) / 40); extra = 1; }
    for (size_t i = 0; i < g_nents + extra; i++) {
        const ent_t *e = i < g_nents ? &g_ents[i] : &tr;
        if (!ent_exists(e, t)) continue;
        ne++;
        b_u32(&sec[3], e->id); b_u32(&sec[3], e->arch); b_u8(&sec[3], 1); b_u8(&sec[3], (uint8_t)e->arch);
        for (int c = 1; c <= 3; c++) {
            uint8_t d[64];
            size_t n = comp_bytes(e, c, t, d);
            if (!n) continue;
            nc++;
            b_u32(&sec[4], e->id); b_u16(&sec[4], (uint16_t)c); b_u16(&sec[4], 1);
            b_u16(&sec[4], (uint16_t)n); b_bytes(&sec[4], d, n);
        }
    }
    put_u32(sec[3].p, ne);
    put_u32(sec[4].p, nc);
    /* DenseGrids */
    b_u32(&sec[5], 0);
    b_u32(out, 6);
    uint32_t off = 0;
    for (int s = 0; s < 6; s++) {
        b_u32(out, (uint32_t)(s + 1)); b_u32(out, off); b_u32(out, (uint32_t)sec[s].len);
        off += (uint32_t)sec[s].len;
    }
    for (int s = 0; s < 6; s++) { b_bytes(out, sec[s].p, sec[s].len); free(sec[s].p); }
}

/* Delta payload (D7) between ticks b and t. Returns 0 if it fits in u16 counts. */
static int build_delta(buf_t *ents, buf_t *comps, uint32_t *ne, uint32_t *nc, uint64_t b, uint64_t t)
{
    *ne = *nc = 0;
    uint64_t klo = b >= 10 ? (b - 10) / 40 : 0, khi = t >= 10 ? (t - 10) / 40 : 0;
    size_t ntr = (size_t)(khi - klo + 1);
    for (size_t i = 0; i < g_nents + ntr; i++) {
        ent_t tr;
        const ent_t *e;
        if (i < g_nents) e = &g_ents[i];
        else { tr = transient(klo + (i - g_nents)); e = &tr; }
        int xb = ent_exists(e, b), xt = ent_exists(e, t);
        if (!xb && !xt) continue;
        if (!xb && xt) {
            b_u32(ents, e->id); b_u8(ents, 0); b_u32(ents, e->arch); (*ne)++;
            for (int c = 1; c <= 3; c++) {
                uint8_t d[64];
                size_t n = comp_bytes(e, c, t, d);
                if (!n) continue;
                b_u32(comps, e->id); b_u16(comps, (uint16_t)c); b_u8(comps, 0);
                b_u16(comps, (uint16_t)n); b_bytes(comps, d, n); (*nc)++;
            }
        } else if (xb && !xt) {
            b_u32(ents, e->id); b_u8(ents, 1); (*ne)++;
        } else {
            int changed = 0;
            for (int c = 1; c <= 3; c++) {
                uint8_t d0[64], d1[64];
                size_t n0 = comp_bytes(e, c, b, d0), n1 = comp_bytes(e, c, t, d1);
                if (!n1 || (n0 == n1 && memcmp(d0, d1, n1) == 0)) continue;
                changed = 1;
                b_u32(comps, e->id); b_u16(comps, (uint16_t)c); b_u8(comps, 2);
                b_u16(comps, (uint16_t)n1); b_bytes(comps, d1, n1); (*nc)++;
            }
            if (changed) { b_u32(ents, e->id); b_u8(ents, 2); (*ne)++; }
        }
    }
    return (*ne > 0xFFFF || *nc > 0xFFFF) ? -1 : 0;
}

/* ------------------------------------------------------------------ server */
typedef struct { uint64_t due_us; uint64_t ts; } pong_t;

typedef struct {
    int idx;
    ENetPeer *peer;      /* NULL once gone */
    int connected;       /* ENet connection alive */
    int joined;          /* has a slot */
    int slot;
    int hello_result;    /* -1 none */
    char name[33];
    uint8_t token[16];
    uint32_t seq_out;
    uint32_t channels;
    /* snapshots */
    uint64_t acked_tick;         /* 0 = none */
    uint64_t full_pending_tick;  /* 0 = none outstanding */
    uint64_t sent_ring[256];     /* tick values actually sent (full or delta) */
    /* inputs */
    uint64_t input_times[INPUT_RATE]; /* ring of accepted-input times (us) */
    int input_pos;
    uint32_t last_input_seq;
    int have_input_seq;
    /* pongs */
    pong_t *pongs;
    size_t npongs, cappongs;
    /* ground truth */
    uint64_t deltas_generated, deltas_dropped, deltas_sent, deltas_compressed, fulls_sent;
    uint64_t pongs_sent, pings, inputs_acked, inputs_ok, inputs_rejected, inputs_rate_limited;
    uint64_t acks, ignored, before_hello, kickable, send_errors;
    int kicked;
    int disconnect_reason; /* -1 none, reason from Disconnect message */
    uint64_t bye_us;       /* when its Disconnect message arrived */
    vstats_t vs;
} sclient_t;

typedef struct {
    ENetHost *host;
    sclient_t **cl;
    size_t ncl;
    int maxp;
    int slot_owner[4];
    uint64_t tick;
    int drop_every;
    int pong_delay_ms;
    /* earlier sessions for reconnection (D11) */
    struct { uint8_t token[16]; int slot; } *sessions;
    size_t nsess;
    sclient_t *cur; /* client of the message being handled */
} server_t;

static server_t S;

static void rand_token(uint8_t *t)
{
    static int seeded = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f && fread(t, 1, 16, f) == 16) { fclose(f); return; }
    if (f) fclose(f);
    if (!seeded) { srand((unsigned)mono_us()); seeded = 1; }
    for (int i = 0; i < 16; i++) t[i] = (uint8_t)rand();
}

static void player_views(player_view_t *pv)
{
    for (int i = 0; i < S.maxp; i++) {
        pv[i].joined = S.slot_owner[i] >= 0;
        pv[i].slot = (uint8_t)i;
        pv[i].name[0] = 0;
        if (pv[i].joined) memcpy(pv[i].name, S.cl[S.slot_owner[i]]->name, 33);
    }
}

static void csend(sclient_t *c, uint8_t ch, int reliable, uint8_t type, uint8_t flags, const buf_t *b)
{
    if (!c->peer || !c->connected) return;
    if (send_msg(c->peer, &c->seq_out, ch, reliable, type, flags, b ? b->p : NULL, b ? b->len : 0) != 0)
        c->send_errors++;
}

static void send_disconnect(sclient_t *c, uint8_t reason, const char *text)
{
    buf_t b = {0};
    uint8_t msg[127] = {0};
    strncpy((char *)msg, text, 126);
    b_u8(&b, reason);
    b_bytes(&b, msg, 127);
    csend(c, 0, 1, T_DISCONNECT, 0, &b);
    free(b.p);
}

static void leave_slot(sclient_t *c)
{
    if (c->joined) {
        S.slot_owner[c->slot] = -1;
        c->joined = 0;
    }
}

static void send_full(sclient_t *c)
{
    player_view_t pv[4];
    player_views(pv);
    buf_t raw = {0}, body = {0};
    build_full_payload(&raw, S.tick, pv, S.maxp);
    int bound = LZ4_compressBound((int)raw.len);
    b_u32(&body, (uint32_t)raw.len);
    b_u64(&body, S.tick);
    b_reserve(&body, (size_t)bound);
    int n = LZ4_compress_default((const char *)raw.p, (char *)body.p + body.len, (int)raw.len, bound);
    if (n <= 0) { fprintf(stderr, "zc_peer: LZ4 failed\n"); exit(3); }
    body.len += (size_t)n;
    csend(c, 1, 1, T_FULL, F_COMPRESSED, &body);
    c->fulls_sent++;
    c->full_pending_tick = S.tick;
    c->sent_ring[S.tick % 256] = S.tick;
    free(raw.p);
    free(body.p);
}

static void send_delta(sclient_t *c)
{
    buf_t ents = {0}, comps = {0}, body = {0};
    uint32_t ne, nc;
    if (build_delta(&ents, &comps, &ne, &nc, c->acked_tick, S.tick) != 0) {
        free(ents.p); free(comps.p);
        send_full(c);
        return;
    }
    c->deltas_generated++;
    int drop = S.drop_every > 0 && c->deltas_generated % (uint64_t)S.drop_every == 0;
    if (drop) {
        c->seq_out++; /* consume the sequence number: the client sees the gap (D2) */
        c->deltas_dropped++;
    } else {
        buf_t raw = {0};
        b_u64(&raw, c->acked_tick); b_u64(&raw, S.tick);
        b_u16(&raw, (uint16_t)ne); b_u16(&raw, (uint16_t)nc);
        b_bytes(&raw, ents.p, ents.len); b_bytes(&raw, comps.p, comps.len);
        size_t payload = ents.len + comps.len;
        uint8_t flags = 0;
        if (payload > 1024) {
            lz4_wrap(&body, raw.p, raw.len);
            flags = F_COMPRESSED;
            c->deltas_compressed++;
        } else {
            b_bytes(&body, raw.p, raw.len);
        }
        csend(c, 2, 0, T_DELTA, flags, &body);
        c->deltas_sent++;
        c->sent_ring[S.tick % 256] = S.tick;
        free(raw.p);
    }
    free(ents.p); free(comps.p); free(body.p);
}

static void server_tick(void)
{
    S.tick++;
    for (size_t i = 0; i < S.ncl; i++) {
        sclient_t *c = S.cl[i];
        if (!c->joined || !c->connected) continue;
        if (c->acked_tick == 0 || S.tick - c->acked_tick > MAX_DELTA_AGE) {
            if (c->full_pending_tick == 0 || S.tick - c->full_pending_tick >= FULL_RETRY) send_full(c);
        } else {
            send_delta(c);
        }
    }
}

static void server_hello(sclient_t *c, uint8_t result)
{
    buf_t b = {0};
    b_u32(&b, 0x00010000u);           /* server_version 1.0.0 */
    b_u8(&b, result);
    b_u8(&b, result == 0 ? (uint8_t)c->slot : 0);
    b_u16(&b, 0);
    if (result == 0) b_bytes(&b, c->token, 16); else b_zero(&b, 16);
    b_u32(&b, TICK_RATE);
    b_u64(&b, S.tick);
    b_u32(&b, g_mapw);
    b_u32(&b, g_maph);
    int np = 0;
    for (int i = 0; i < S.maxp; i++) np += S.slot_owner[i] >= 0;
    b_u32(&b, (uint32_t)np);
    csend(c, 0, 1, T_SERVER_HELLO, 0, &b);
    free(b.p);
}

static void on_client_hello(sclient_t *c, rd_t *r)
{
    uint32_t cver = r_u32(r);
    const uint8_t *name = r_bytes(r, 32);
    const uint8_t *tok = r_bytes(r, 16);
    uint32_t req = r_u32(r);
    (void)cver;
    if (c->joined) { /* duplicate hello: same answer, fresh snapshot */
        server_hello(c, 0);
        c->acked_tick = 0;
        c->full_pending_tick = 0;
        return;
    }
    sanitize(c->name, name, 32);
    int slot = -1;
    static const uint8_t zero[16] = {0};
    if (memcmp(tok, zero, 16) != 0) {
        for (size_t i = 0; i < S.nsess; i++)
            if (memcmp(S.sessions[i].token, tok, 16) == 0 && S.slot_owner[S.sessions[i].slot] < 0) {
                slot = S.sessions[i].slot;
                memcpy(c->token, tok, 16);
                break;
            }
    }
    if (slot < 0 && req < (uint32_t)S.maxp && S.slot_owner[req] < 0) slot = (int)req;
    for (int i = 0; slot < 0 && i < S.maxp; i++)
        if (S.slot_owner[i] < 0) slot = i;
    if (slot < 0) {
        c->hello_result = 1;
        server_hello(c, 1);
        if (c->peer) enet_peer_disconnect_later(c->peer, 0);
        printf("REFUSE client=%d reason=server_full name=%s\n", c->idx, c->name);
        return;
    }
    if (memcmp(c->token, zero, 16) == 0) {
        rand_token(c->token);
        S.sessions = xrealloc(S.sessions, (S.nsess + 1) * sizeof *S.sessions);
        memcpy(S.sessions[S.nsess].token, c->token, 16);
        S.sessions[S.nsess].slot = slot;
        S.nsess++;
    }
    c->slot = slot;
    c->joined = 1;
    c->hello_result = 0;
    S.slot_owner[slot] = c->idx;
    server_hello(c, 0);
    printf("JOIN client=%d slot=%d name=%s tick=%llu\n", c->idx, slot, c->name, (unsigned long long)S.tick);
    /* FullSnapshot on join (§11.1) */
    send_full(c);
}

static int in_map(int32_t x, int32_t y) { return x >= 0 && y >= 0 && (uint32_t)x < g_mapw && (uint32_t)y < g_maph; }

/* returns InputAck result; validates the payload per D10 */
static uint8_t apply_input(sclient_t *c, uint8_t type, rd_t *r, uint64_t at, int *bad)
{
    size_t left = rd_left(r);
    *bad = 0;
    switch (type) {
    case 0x00: case 0x09:
        if (left != 0) { *bad = 1; return 5; }
        return 0;
    case 0x01: {
        if (left != 13) { *bad = 1; return 5; }
        uint32_t bt = r_u32(r);
        int32_t x = (int32_t)r_u32(r), y = (int32_t)r_u32(r);
        (void)r_u8(r);
        if (!in_map(x, y)) return 1;
        if (g_nents >= MAX_ENTITIES) return 5;
        world_add(g_next_id++, 0x7, x, y, (uint8_t)(c->slot + 1), bt, at);
        return 0;
    }
    case 0x02: {
        if (left < 4) { *bad = 1; return 5; }
        (void)r_u8(r); (void)r_u8(r);
        uint16_t n = r_u16(r);
        if (rd_left(r) != (size_t)n * 16) { *bad = 1; return 5; }
        return 0;
    }
    case 0x03: case 0x06: case 0x07: case 0x08: {
        if (left < 2) { *bad = 1; return 5; }
        uint16_t n = r_u16(r);
        if (rd_left(r) != (size_t)n * 8) { *bad = 1; return 5; }
        uint8_t res = 0;
        for (uint16_t i = 0; i < n; i++) {
            int32_t x = (int32_t)r_u32(r), y = (int32_t)r_u32(r);
            if (!in_map(x, y)) { res = 1; continue; }
            if (type != 0x03) continue;
            for (size_t k = 0; k < g_nents; k++) {
                ent_t *e = &g_ents[k];
                if (e->x == x && e->y == y && e->destroyed == 0 && e->created < at) e->destroyed = at;
            }
        }
        return res;
    }
    case 0x04: {
        if (left != 8) { *bad = 1; return 5; }
        int32_t x = (int32_t)r_u32(r), y = (int32_t)r_u32(r);
        if (!in_map(x, y)) return 1;
        if (g_nents >= MAX_ENTITIES) return 5;
        world_add(g_next_id++, 0x3, x, y, (uint8_t)(c->slot + 1), 0, at);
        return 0;
    }
    case 0x05:
        if (left != 2) { *bad = 1; return 5; }
        return 0;
    default:
        *bad = 1;
        return 5;
    }
}

static void invalid(sclient_t *c, int reason)
{
    c->vs.r[reason]++;
    if (reason != R_UNKNOWN_TYPE) c->kickable++;
}

static void server_handle(void *ctx, msg_t *m)
{
    sclient_t *c = ctx;
    uint8_t *owned = NULL;
    int rr = maybe_unwrap(m, &owned, &c->vs);
    if (rr) { invalid(c, rr - 1); return; }
    rd_t r = rd_make(m->body, m->blen);
    uint8_t want_ch = 0;
    switch (m->type) {
    case T_CLIENT_HELLO:
        if (m->blen != 56) { invalid(c, R_BAD_LENGTH); break; }
        on_client_hello(c, &r);
        break;
    case T_DISCONNECT:
        if (m->blen != 128) { invalid(c, R_BAD_LENGTH); break; }
        c->disconnect_reason = r_u8(&r);
        printf("BYE client=%d reason=%d\n", c->idx, c->disconnect_reason);
        leave_slot(c);
        /* the client closes the ENet connection itself; both sides calling
         * enet_peer_disconnect_later at once can leave the server peer without a DISCONNECT
         * event, so the server only closes it if the client has not done so within 2 s */
        c->bye_us = mono_us();
        break;
    case T_PING: {
        want_ch = 2;
        if (m->blen != 16) { invalid(c, R_BAD_LENGTH); break; }
        uint64_t ts = r_u64(&r);
        c->pings++;
        if (c->npongs == c->cappongs) {
            c->cappongs = c->cappongs ? c->cappongs * 2 : 16;
            c->pongs = xrealloc(c->pongs, c->cappongs * sizeof *c->pongs);
        }
        c->pongs[c->npongs].due_us = mono_us() + (uint64_t)S.pong_delay_ms * 1000u;
        c->pongs[c->npongs].ts = ts;
        c->npongs++;
        break;
    }
    case T_SNAP_ACK: {
        if (m->blen != 12) { invalid(c, R_BAD_LENGTH); break; }
        if (!c->joined) { c->before_hello++; break; }
        uint64_t t = r_u64(&r);
        uint32_t lis = r_u32(&r);
        (void)lis;
        c->acks++;
        if (t == 0 || t > S.tick || c->sent_ring[t % 256] != t) { invalid(c, R_BAD_ACK); break; }
        if (t > c->acked_tick) c->acked_tick = t;
        if (c->full_pending_tick && t >= c->full_pending_tick) c->full_pending_tick = 0;
        break;
    }
    case T_INPUT: {
        if (!(m->flags & F_RELIABLE)) c->vs.w[W_FLAGS]++;
        if (m->blen < 13) { invalid(c, R_BAD_LENGTH); break; }
        if (!c->joined) { c->before_hello++; break; }
        uint32_t iseq = r_u32(&r);
        (void)r_u64(&r); /* client_tick */
        uint8_t itype = r_u8(&r);
        if (c->have_input_seq && iseq <= c->last_input_seq) c->vs.w[W_INPUT_SEQ]++;
        c->have_input_seq = 1;
        c->last_input_seq = iseq;
        uint64_t now = mono_us();
        uint8_t result;
        int bad = 0;
        uint64_t oldest = c->input_times[c->input_pos];
        if (oldest != 0 && now - oldest < 1000000u) {
            result = 6;
            c->inputs_rate_limited++;
        } else {
            result = apply_input(c, itype, &r, S.tick + 1, &bad);
            if (bad) invalid(c, R_BAD_PAYLOAD);
            c->input_times[c->input_pos] = now;
            c->input_pos = (c->input_pos + 1) % INPUT_RATE;
        }
        buf_t b = {0};
        b_u32(&b, iseq); b_u8(&b, result); b_u64(&b, result == 0 ? S.tick + 1 : 0);
        csend(c, 0, 1, T_INPUT_ACK, 0, &b);
        free(b.p);
        c->inputs_acked++;
        if (result == 0) c->inputs_ok++; else c->inputs_rejected++;
        break;
    }
    case T_PURCHASE: case T_PLACE: case T_ZONE: case T_DEMOLISH: case T_TRIBUTE: case T_CHAT:
    case T_SERVER_CMD: case T_ERROR:
        c->ignored++;
        break;
    default: /* server-to-client types */
        invalid(c, R_UNEXPECTED_TYPE);
        break;
    }
    if (m->channel != want_ch) c->vs.w[W_WRONG_CHANNEL]++;
    free(owned);
}

static void flush_pongs(uint64_t now)
{
    for (size_t i = 0; i < S.ncl; i++) {
        sclient_t *c = S.cl[i];
        size_t k = 0;
        for (size_t j = 0; j < c->npongs; j++) {
            if (c->pongs[j].due_us <= now) {
                buf_t b = {0};
                b_u64(&b, c->pongs[j].ts);
                b_u64(&b, S.tick);
                csend(c, 2, 0, T_PONG, 0, &b);
                free(b.p);
                c->pongs_sent++;
            } else {
                c->pongs[k++] = c->pongs[j];
            }
        }
        c->npongs = k;
    }
}

static uint64_t next_pong_due(void)
{
    uint64_t d = UINT64_MAX;
    for (size_t i = 0; i < S.ncl; i++)
        for (size_t j = 0; j < S.cl[i]->npongs; j++)
            if (S.cl[i]->pongs[j].due_us < d) d = S.cl[i]->pongs[j].due_us;
    return d;
}

static void server_event(ENetEvent *ev)
{
    switch (ev->type) {
    case ENET_EVENT_TYPE_CONNECT: {
        sclient_t *c = calloc(1, sizeof *c);
        if (!c) die_oom();
        c->idx = (int)S.ncl;
        c->peer = ev->peer;
        c->connected = 1;
        c->hello_result = -1;
        c->disconnect_reason = -1;
        c->seq_out = 1;
        c->channels = (uint32_t)ev->peer->channelCount;
        S.cl = xrealloc(S.cl, (S.ncl + 1) * sizeof *S.cl);
        S.cl[S.ncl++] = c;
        ev->peer->data = c;
        printf("CONNECT client=%d channels=%u\n", c->idx, c->channels);
        break;
    }
    case ENET_EVENT_TYPE_RECEIVE: {
        sclient_t *c = ev->peer->data;
        if (c) {
            int bad_ver_hello = 0;
            split_packet(ev->packet->data, ev->packet->dataLength, ev->channelID, &c->vs, &c->kickable,
                         server_handle, c, &bad_ver_hello);
            if (bad_ver_hello && !c->joined && c->connected) {
                c->hello_result = 2;
                server_hello(c, 2);
                enet_peer_disconnect_later(c->peer, 0);
            }
            if (c->kickable >= KICK_INVALID && !c->kicked && c->connected) {
                c->kicked = 1;
                send_disconnect(c, 4, "protocol error: too many invalid messages");
                leave_slot(c);
                enet_peer_disconnect_later(c->peer, 0);
                printf("KICK client=%d invalid=%llu\n", c->idx, (unsigned long long)c->kickable);
            }
        }
        enet_packet_destroy(ev->packet);
        break;
    }
    case ENET_EVENT_TYPE_DISCONNECT: {
        sclient_t *c = ev->peer->data;
        if (c) {
            leave_slot(c);
            c->connected = 0;
            c->peer = NULL;
            printf("DISCONNECT client=%d\n", c->idx);
        }
        ev->peer->data = NULL;
        break;
    }
    default:
        break;
    }
}

static void print_truth(void)
{
    sclient_t t = {0};
    for (size_t i = 0; i < S.ncl; i++) {
        sclient_t *c = S.cl[i];
        printf("TRUTH client=%d slot=%d hello=%d name=%s deltas_generated=%llu deltas_dropped=%llu "
               "deltas_sent=%llu deltas_compressed=%llu fulls=%llu pings=%llu pongs=%llu "
               "inputs_acked=%llu inputs_ok=%llu inputs_rejected=%llu inputs_rate_limited=%llu "
               "acks=%llu acked_tick=%llu ignored=%llu before_hello=%llu kicked=%d send_errors=%llu",
               c->idx, c->hello_result == 0 ? c->slot : -1, c->hello_result, c->name[0] ? c->name : "-",
               (unsigned long long)c->deltas_generated, (unsigned long long)c->deltas_dropped,
               (unsigned long long)c->deltas_sent, (unsigned long long)c->deltas_compressed,
               (unsigned long long)c->fulls_sent, (unsigned long long)c->pings,
               (unsigned long long)c->pongs_sent, (unsigned long long)c->inputs_acked,
               (unsigned long long)c->inputs_ok, (unsigned long long)c->inputs_rejected,
               (unsigned long long)c->inputs_rate_limited, (unsigned long long)c->acks,
               (unsigned long long)c->acked_tick, (unsigned long long)c->ignored,
               (unsigned long long)c->before_hello, c->kicked, (unsigned long long)c->send_errors);
        vs_print(stdout, &c->vs);
        printf("\n");
        t.deltas_generated += c->deltas_generated; t.deltas_dropped += c->deltas_dropped;
        t.deltas_sent += c->deltas_sent; t.deltas_compressed += c->deltas_compressed;
        t.fulls_sent += c->fulls_sent; t.pings += c->pings; t.pongs_sent += c->pongs_sent;
        t.inputs_acked += c->inputs_acked; t.inputs_ok += c->inputs_ok;
        t.inputs_rejected += c->inputs_rejected; t.inputs_rate_limited += c->inputs_rate_limited;
        t.acks += c->acks; t.ignored += c->ignored; t.before_hello += c->before_hello;
        t.kicked += c->kicked; t.send_errors += c->send_errors;
        t.joined += c->hello_result == 0;
        t.slot += c->hello_result == 1; /* reused: refused server_full */
        vs_add(&t.vs, &c->vs);
    }
    printf("TRUTH total clients=%zu joined=%d refused_full=%d ticks=%llu deltas_generated=%llu "
           "deltas_dropped=%llu deltas_sent=%llu deltas_compressed=%llu fulls=%llu pings=%llu "
           "pongs=%llu inputs_acked=%llu inputs_ok=%llu inputs_rejected=%llu "
           "inputs_rate_limited=%llu acks=%llu ignored=%llu before_hello=%llu kicked=%d "
           "send_errors=%llu",
           S.ncl, t.joined, t.slot, (unsigned long long)S.tick,
           (unsigned long long)t.deltas_generated, (unsigned long long)t.deltas_dropped,
           (unsigned long long)t.deltas_sent, (unsigned long long)t.deltas_compressed,
           (unsigned long long)t.fulls_sent, (unsigned long long)t.pings,
           (unsigned long long)t.pongs_sent, (unsigned long long)t.inputs_acked,
           (unsigned long long)t.inputs_ok, (unsigned long long)t.inputs_rejected,
           (unsigned long long)t.inputs_rate_limited, (unsigned long long)t.acks,
           (unsigned long long)t.ignored, (unsigned long long)t.before_hello, t.kicked,
           (unsigned long long)t.send_errors);
    vs_print(stdout, &t.vs);
    printf("\n");
}

static int run_server(int argc, char **argv)
{
    if (argc < 3) return 2;
    int port = atoi(argv[2]);
    double duration = 60;
    S.maxp = 4;
    S.tick = 0;
    uint64_t start_tick = 1;
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc) { fprintf(stderr, "missing value for %s\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "--drop-every")) S.drop_every = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pong-delay-ms")) S.pong_delay_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--duration")) duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--players")) S.maxp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--map")) g_mapw = g_maph = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--start-tick")) start_tick = strtoull(argv[++i], NULL, 10);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (S.maxp < 1 || S.maxp > 4) { fprintf(stderr, "--players must be 1..4\n"); return 2; }
    if (g_mapw < 1 || g_mapw > 4096) { fprintf(stderr, "--map must be 1..4096\n"); return 2; }
    if (start_tick < 1) start_tick = 1;
    S.tick = start_tick - 1;
    for (int i = 0; i < 4; i++) S.slot_owner[i] = -1;
    world_init();

    ENetAddress addr;
    enet_address_set_host(&addr, "127.0.0.1");
    addr.port = (enet_uint16)port;
    S.host = enet_host_create(&addr, (size_t)S.maxp + 28, 3, 0, 0);
    if (!S.host) { printf("ERROR what=enet_host_create port=%d\n", port); return 1; }
    ENetAddress bound;
    if (enet_socket_get_address(S.host->socket, &bound) != 0) bound.port = (enet_uint16)port;
    printf("LISTENING port=%u players=%d drop_every=%d pong_delay_ms=%d\n", bound.port, S.maxp,
           S.drop_every, S.pong_delay_ms);

    uint64_t t0 = mono_us();
    uint64_t end = duration > 0 ? t0 + (uint64_t)(duration * 1e6) : UINT64_MAX;
    uint64_t next_tick = t0 + TICK_US;
    server_tick(); /* first tick: start_tick */
    while (!g_stop) {
        uint64_t now = mono_us();
        if (now >= end) break;
        uint64_t wake = next_tick;
        uint64_t pd = next_pong_due();
        if (pd < wake) wake = pd;
        if (end < wake) wake = end;
        enet_uint32 timeout = wake > now ? (enet_uint32)((wake - now + 999) / 1000) : 0;
        if (timeout > 50) timeout = 50;
        ENetEvent ev;
        int rc = enet_host_service(S.host, &ev, timeout);
        while (rc > 0) {
            server_event(&ev);
            rc = enet_host_check_events(S.host, &ev);
        }
        now = mono_us();
        flush_pongs(now);
        for (size_t i = 0; i < S.ncl; i++) {
            sclient_t *c = S.cl[i];
            if (c->connected && c->bye_us && now - c->bye_us > 2000000u) {
                enet_peer_disconnect(c->peer, 0);
                c->bye_us = 0;
            }
        }
        if (now >= next_tick) {
            server_tick();
            next_tick += TICK_US;
            if (now > next_tick + 1000000u) next_tick = now + TICK_US; /* far behind: resync */
        }
        enet_host_flush(S.host);
    }
    /* shutdown: tell every connected client, flush for up to 500 ms */
    int live = 0;
    for (size_t i = 0; i < S.ncl; i++) {
        sclient_t *c = S.cl[i];
        if (!c->connected) continue;
        if (c->joined) send_disconnect(c, 2, "server shutdown");
        leave_slot(c);
        enet_peer_disconnect_later(c->peer, 0);
        live++;
    }
    uint64_t stop_at = mono_us() + 500000u;
    while (live > 0 && mono_us() < stop_at) {
        ENetEvent ev;
        int rc = enet_host_service(S.host, &ev, 20);
        while (rc > 0) {
            if (ev.type == ENET_EVENT_TYPE_DISCONNECT) live--;
            if (ev.type == ENET_EVENT_TYPE_RECEIVE) enet_packet_destroy(ev.packet);
            if (ev.type == ENET_EVENT_TYPE_DISCONNECT && ev.peer->data) {
                ((sclient_t *)ev.peer->data)->connected = 0;
                ev.peer->data = NULL;
            }
            rc = enet_host_check_events(S.host, &ev);
        }
    }
    print_truth();
    fflush(stdout);
    enet_host_destroy(S.host);
    return 0;
}

/* ------------------------------------------------------------------ client state */
typedef struct { uint16_t type, version, len; uint8_t *data; } comp_t;
typedef struct { uint32_t id, arch; int ncomp; comp_t *comps; } cent_t;
typedef struct { uint64_t tick; cent_t *e; size_t n, cap; } cstate_t;

static void cent_free(cent_t *e)
{
    for (int i = 0; i < e->ncomp; i++) free(e->comps[i].data);
    free(e->comps);
    e->comps = NULL;
    e->ncomp = 0;
}

static void cstate_free(cstate_t *s)
{
    for (size_t i = 0; i < s->n; i++) cent_free(&s->e[i]);
    free(s->e);
    memset(s, 0, sizeof *s);
}

static void cstate_copy(cstate_t *dst, const cstate_t *src)
{
    dst->tick = src->tick;
    dst->n = dst->cap = src->n;
    dst->e = xmalloc(src->n * sizeof *dst->e);
    for (size_t i = 0; i < src->n; i++) {
        const cent_t *s = &src->e[i];
        cent_t *d = &dst->e[i];
        *d = *s;
        d->comps = xmalloc((size_t)s->ncomp * sizeof *d->comps);
        for (int k = 0; k < s->ncomp; k++) {
            d->comps[k] = s->comps[k];
            d->comps[k].data = xmalloc(s->comps[k].len);
            memcpy(d->comps[k].data, s->comps[k].data, s->comps[k].len);
        }
    }
}

/* entities kept sorted by id */
static long cfind(const cstate_t *s, uint32_t id)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->e[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return (lo < s->n && s->e[lo].id == id) ? (long)lo : -1;
}

static int cinsert(cstate_t *s, uint32_t id, uint32_t arch)
{
    if (cfind(s, id) >= 0) return -1;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->e = xrealloc(s->e, s->cap * sizeof *s->e);
    }
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->e[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    memmove(&s->e[lo + 1], &s->e[lo], (s->n - lo) * sizeof *s->e);
    cent_t e = {id, arch, 0, NULL};
    s->e[lo] = e;
    s->n++;
    return 0;
}

static void cremove(cstate_t *s, long i)
{
    cent_free(&s->e[i]);
    memmove(&s->e[i], &s->e[i + 1], (s->n - (size_t)i - 1) * sizeof *s->e);
    s->n--;
}

static int ccomp_find(const cent_t *e, uint16_t type)
{
    for (int i = 0; i < e->ncomp; i++)
        if (e->comps[i].type == type) return i;
    return -1;
}

static void ccomp_set(cent_t *e, uint16_t type, uint16_t version, const uint8_t *d, uint16_t len)
{
    int i = ccomp_find(e, type);
    if (i < 0) {
        e->comps = xrealloc(e->comps, (size_t)(e->ncomp + 1) * sizeof *e->comps);
        i = e->ncomp++;
        e->comps[i].data = NULL;
    }
    free(e->comps[i].data);
    e->comps[i].type = type;
    e->comps[i].version = version;
    e->comps[i].len = len;
    e->comps[i].data = xmalloc(len);
    if (len) memcpy(e->comps[i].data, d, len);
}

static void ccomp_del(cent_t *e, int i)
{
    free(e->comps[i].data);
    memmove(&e->comps[i], &e->comps[i + 1], (size_t)(e->ncomp - i - 1) * sizeof *e->comps);
    e->ncomp--;
}

/* ------------------------------------------------------------------ client */
#define MAX_INPUTS 64
typedef struct {
    ENetHost *host;
    ENetPeer *peer;
    uint32_t seq_out;
    int connected;
    int hello_result;      /* -1 none */
    int slot;
    uint64_t hello_tick;
    uint32_t mapw, maph, tick_rate;
    cstate_t st;
    int have_state;
    uint64_t fulls, deltas, deltas_compressed, acks_sent, baseline_missing, stale, apply_errors;
    uint64_t paused_ignored;
    int paused;
    /* sequence tracking (D2) */
    uint64_t seq_first, seq_max, seq_count;
    int seq_seen;
    /* delta tick gaps */
    uint64_t last_delta_target, tick_gaps;
    /* inputs */
    uint32_t input_seq;
    int inputs_sent, inputs_acked, inputs_rejected;
    uint32_t sent_seqs[MAX_INPUTS];
    int acked[MAX_INPUTS];
    uint64_t place_tick;   /* applied tick of our PlaceBuilding, 0 = none */
    int32_t place_x, place_y;
    int built;
    /* pings */
    uint64_t pings, pongs, rtt_sum, rtt_min, rtt_max, bad_pongs;
    /* misc */
    int server_disconnect;  /* reason, -1 none */
    uint64_t errors_received;
    uint64_t probe_acks;
    int probe_result;
    int proto_version;     /* header version of our ClientHello */
    vstats_t vs;
    uint64_t kickable;
} client_t;

static client_t C;

static void csend_msg(uint8_t ch, int reliable, uint8_t type, uint8_t flags, const buf_t *b)
{
    send_msg(C.peer, &C.seq_out, ch, reliable, type, flags, b ? b->p : NULL, b ? b->len : 0);
}

static void client_ack(void)
{
    buf_t b = {0};
    b_u64(&b, C.st.tick);
    b_u32(&b, C.input_seq);
    csend_msg(0, 1, T_SNAP_ACK, 0, &b);
    free(b.p);
    C.acks_sent++;
}

static void check_built(void)
{
    if (C.built || !C.place_tick || C.st.tick < C.place_tick) return;
    for (size_t i = 0; i < C.st.n; i++) {
        cent_t *e = &C.st.e[i];
        int p = ccomp_find(e, 1), o = ccomp_find(e, 2);
        if (p < 0 || o < 0 || e->comps[p].len < 8 || e->comps[o].len < 1) continue;
        rd_t r = rd_make(e->comps[p].data, e->comps[p].len);
        int32_t x = (int32_t)r_u32(&r), y = (int32_t)r_u32(&r);
        if (x == C.place_x && y == C.place_y && e->comps[o].data[0] == (uint8_t)(C.slot + 1)) {
            C.built = 1;
            return;
        }
    }
    C.built = -1; /* state reached the tick but the building is missing */
}

/* FullSnapshot (D9). Returns 0 or a reason + 1. */
static int client_full(const msg_t *m)
{
    if (!(m->flags & F_COMPRESSED)) return R_BAD_FLAGS + 1;
    rd_t r = rd_make(m->body, m->blen);
    uint32_t usize = r_u32(&r);
    uint64_t tick = r_u64(&r);
    if (r.err) return R_BAD_LENGTH + 1;
    int reason = 0;
    uint8_t *raw = lz4_unwrap(m->body + 12, m->blen - 12, usize, &reason);
    if (!raw) return reason + 1;
    int rc = R_BAD_PAYLOAD + 1;
    cstate_t ns = {0};
    ns.tick = tick;
    rd_t p = rd_make(raw, usize);
    uint32_t nsec = r_u32(&p);
    if (p.err || nsec > (usize - 4) / 12) goto out;
    size_t data_off = 4 + (size_t)nsec * 12;
    size_t data_len = usize - data_off;
    int have_ent = 0, have_comp = 0;
    const uint8_t *comp_sec = NULL;
    size_t comp_len = 0;
    for (uint32_t s = 0; s < nsec; s++) {
        uint32_t type = r_u32(&p), off = r_u32(&p), len = r_u32(&p);
        if ((uint64_t)off + len > data_len) goto out;
        rd_t sr = rd_make(raw + data_off + off, len);
        if (type == 1) {
            uint64_t mt = r_u64(&sr);
            uint32_t trate = r_u32(&sr), w = r_u32(&sr), h = r_u32(&sr);
            (void)trate;
            if (sr.err || mt != tick) goto out;
            C.mapw = w; C.maph = h;
        } else if (type == 3) {
            if (C.mapw && (uint64_t)C.mapw * C.maph != len) goto out;
        } else if (type == 4) {
            uint32_t n = r_u32(&sr);
            if (sr.err || n > rd_left(&sr) / 9) goto out;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t id = r_u32(&sr), arch = r_u32(&sr);
                uint8_t ml = r_u8(&sr);
                if (!r_bytes(&sr, ml) || sr.err) goto out;
                if (cinsert(&ns, id, arch) != 0) goto out; /* duplicate id */
            }
            if (rd_left(&sr)) goto out;
            have_ent = 1;
        } else if (type == 5) {
            comp_sec = raw + data_off + off;
            comp_len = len;
            have_comp = 1;
        } else if (type == 2 || type == 6) {
            /* Players, DenseGrids: checked for basic shape only */
            uint32_t n = r_u32(&sr);
            if (sr.err) goto out;
            if (type == 2 && (uint64_t)n * 36 != rd_left(&sr)) goto out;
        }
    }
    if (have_comp) {
        if (!have_ent) goto out;
        rd_t sr = rd_make(comp_sec, comp_len);
        uint32_t n = r_u32(&sr);
        if (sr.err || n > rd_left(&sr) / 10) goto out;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t id = r_u32(&sr);
            uint16_t type = r_u16(&sr), ver = r_u16(&sr), len = r_u16(&sr);
            const uint8_t *d = r_bytes(&sr, len);
            if (sr.err) goto out;
            long ei = cfind(&ns, id);
            if (ei < 0) goto out;
            if (type >= 1 && type <= 3 && len != COMP_LEN[type]) C.vs.w[W_COMP_LEN]++;
            if (ccomp_find(&ns.e[ei], type) >= 0) goto out;
            ccomp_set(&ns.e[ei], type, ver, d, len);
        }
        if (rd_left(&sr)) goto out;
    }
    /* mask check: archetype bits vs components present */
    for (size_t i = 0; i < ns.n; i++) {
        uint32_t bits = 0;
        for (int k = 0; k < ns.e[i].ncomp; k++)
            if (ns.e[i].comps[k].type >= 1 && ns.e[i].comps[k].type <= 32) bits |= 1u << (ns.e[i].comps[k].type - 1);
        if (bits != ns.e[i].arch) C.vs.w[W_MASK]++;
    }
    rc = 0;
out:
    free(raw);
    if (rc) { cstate_free(&ns); return rc; }
    cstate_free(&C.st);
    C.st = ns;
    C.have_state = 1;
    C.fulls++;
    if (tick > C.last_delta_target) C.last_delta_target = tick;
    client_ack();
    check_built();
    return 0;
}

/* DeltaSnapshot (D7), body already decompressed. Returns 0 or reason + 1. */
static int client_delta(const msg_t *m)
{
    rd_t r = rd_make(m->body, m->blen);
    uint64_t base = r_u64(&r), target = r_u64(&r);
    uint16_t ne = r_u16(&r), nc = r_u16(&r);
    if (r.err) return R_BAD_LENGTH + 1;
    /* loss estimate from ticks: every target tick the server skipped between two received
     * deltas (a FullSnapshot counts as received for its tick) */
    if (C.last_delta_target && target > C.last_delta_target + 1) C.tick_gaps += target - C.last_delta_target - 1;
    if (target > C.last_delta_target) C.last_delta_target = target;
    if (C.paused) { C.paused_ignored++; return 0; }
    if (!C.have_state || base != C.st.tick) {
        if (C.have_state && target <= C.st.tick) C.stale++;
        else C.baseline_missing++;
        return 0;
    }
    if (target <= base) return R_BAD_PAYLOAD + 1;
    cstate_t ns = {0};
    cstate_copy(&ns, &C.st);
    int ok = 1;
    for (uint16_t i = 0; i < ne && ok; i++) {
        uint32_t id = r_u32(&r);
        uint8_t op = r_u8(&r);
        if (r.err) { ok = 0; break; }
        long ei = cfind(&ns, id);
        if (op == 0) {
            uint32_t arch = r_u32(&r);
            if (r.err || ei >= 0) { ok = 0; break; }
            cinsert(&ns, id, arch);
        } else if (op == 1) {
            if (ei < 0) { ok = 0; break; }
            cremove(&ns, ei);
        } else if (op == 2) {
            if (ei < 0) { ok = 0; break; }
        } else {
            ok = 0;
        }
    }
    for (uint16_t i = 0; i < nc && ok; i++) {
        uint32_t id = r_u32(&r);
        uint16_t type = r_u16(&r);
        uint8_t op = r_u8(&r);
        if (r.err) { ok = 0; break; }
        long ei = cfind(&ns, id);
        if (ei < 0) { ok = 0; break; }
        int ci = ccomp_find(&ns.e[ei], type);
        if (op == 1) {
            if (ci < 0) { ok = 0; break; }
            ccomp_del(&ns.e[ei], ci);
            continue;
        }
        if (op > 2) { ok = 0; break; }
        uint16_t len = r_u16(&r);
        const uint8_t *d = r_bytes(&r, len);
        if (r.err) { ok = 0; break; }
        if ((op == 0 && ci >= 0) || (op == 2 && ci < 0)) { ok = 0; break; }
        if (type >= 1 && type <= 3 && len != COMP_LEN[type]) C.vs.w[W_COMP_LEN]++;
        ccomp_set(&ns.e[ei], type, 1, d, len);
    }
    if (ok && rd_left(&r)) ok = 0; /* trailing bytes */
    if (!ok) {
        cstate_free(&ns);
        C.apply_errors++;
        return R_BAD_PAYLOAD + 1;
    }
    ns.tick = target;
    cstate_free(&C.st);
    C.st = ns;
    C.deltas++;
    if (m->flags & F_COMPRESSED) C.deltas_compressed++;
    client_ack();
    check_built();
    return 0;
}

static void client_handle(void *ctx, msg_t *m)
{
    (void)ctx;
    if (!C.seq_seen) { C.seq_first = C.seq_max = m->seq; C.seq_seen = 1; }
    if (m->seq > C.seq_max) C.seq_max = m->seq;
    if (m->seq < C.seq_first) C.seq_first = m->seq;
    C.seq_count++;
    uint8_t *owned = NULL;
    int rr = maybe_unwrap(m, &owned, &C.vs);
    if (rr) { C.vs.r[rr - 1]++; return; }
    rd_t r = rd_make(m->body, m->blen);
    uint8_t want_ch = 0;
    int reason = 0;
    switch (m->type) {
    case T_SERVER_HELLO: {
        if (m->blen != 48) { reason = R_BAD_LENGTH + 1; break; }
        (void)r_u32(&r);
        uint8_t res = r_u8(&r), slot = r_u8(&r);
        (void)r_u16(&r);
        (void)r_bytes(&r, 16);
        C.tick_rate = r_u32(&r);
        C.hello_tick = r_u64(&r);
        C.mapw = r_u32(&r);
        C.maph = r_u32(&r);
        C.hello_result = res;
        C.slot = slot;
        if (res == 0 && slot > 3) reason = R_BAD_PAYLOAD + 1;
        printf("HELLO result=%u slot=%u tick_rate=%u tick=%llu map=%ux%u\n", res, slot, C.tick_rate,
               (unsigned long long)C.hello_tick, C.mapw, C.maph);
        break;
    }
    case T_DISCONNECT:
        if (m->blen != 128) { reason = R_BAD_LENGTH + 1; break; }
        C.server_disconnect = r_u8(&r);
        break;
    case T_PONG: {
        want_ch = 2;
        if (m->blen != 16) { reason = R_BAD_LENGTH + 1; break; }
        uint64_t ts = r_u64(&r), stick = r_u64(&r);
        uint64_t now = wall_us();
        if (ts > now || now - ts > 10000000u || stick == 0) { C.bad_pongs++; break; }
        uint64_t rtt = now - ts;
        C.pongs++;
        C.rtt_sum += rtt;
        if (!C.rtt_min || rtt < C.rtt_min) C.rtt_min = rtt;
        if (rtt > C.rtt_max) C.rtt_max = rtt;
        break;
    }
    case T_FULL:
        want_ch = 1;
        if (m->blen < 12) { reason = R_BAD_LENGTH + 1; break; }
        reason = client_full(m);
        break;
    case T_DELTA:
        want_ch = 2;
        if (m->blen < 20) { reason = R_BAD_LENGTH + 1; break; }
        reason = client_delta(m);
        break;
    case T_INPUT_ACK: {
        if (m->blen != 13) { reason = R_BAD_LENGTH + 1; break; }
        uint32_t s = r_u32(&r);
        uint8_t res = r_u8(&r);
        uint64_t at = r_u64(&r);
        int k;
        for (k = 0; k < C.inputs_sent; k++)
            if (C.sent_seqs[k] == s && !C.acked[k]) break;
        if (s == PROBE_INPUT_SEQ) { C.probe_acks++; C.probe_result = res; break; }
        if (k == C.inputs_sent) { reason = R_BAD_PAYLOAD + 1; break; }
        C.acked[k] = 1;
        C.inputs_acked++;
        if (res != 0 || at == 0) C.inputs_rejected++;
        if (k == 0 && res == 0) { C.place_tick = at; check_built(); }
        break;
    }
    case T_CHAT_BCAST:
        break;
    case T_ERROR:
        C.errors_received++;
        break;
    default:
        reason = R_UNEXPECTED_TYPE + 1;
        break;
    }
    if (reason) C.vs.r[reason - 1]++;
    if (m->channel != want_ch) C.vs.w[W_WRONG_CHANNEL]++;
    free(owned);
}

static void client_send_input(int k)
{
    buf_t b = {0};
    uint32_t s = ++C.input_seq;
    b_u32(&b, s);
    b_u64(&b, C.st.tick);
    int32_t bx = 10 + C.slot * 3, by = 20;
    switch (k % 5) {
    case 0: /* PlaceBuilding */
        b_u8(&b, 0x01); b_u32(&b, 7); b_u32(&b, (uint32_t)bx); b_u32(&b, (uint32_t)by); b_u8(&b, 1);
        if (k == 0) { C.place_x = bx; C.place_y = by; }
        break;
    case 1: /* DesignateZone, one rectangle */
        b_u8(&b, 0x02); b_u8(&b, 1); b_u8(&b, 0); b_u16(&b, 1);
        b_u32(&b, 30); b_u32(&b, 30); b_u32(&b, 4); b_u32(&b, 4);
        break;
    case 2: /* Demolish an empty tile */
        b_u8(&b, 0x03); b_u16(&b, 1); b_u32(&b, 2); b_u32(&b, 3);
        break;
    case 3: /* PurchaseTile (D10) */
        b_u8(&b, 0x04); b_u32(&b, (uint32_t)(bx + 1)); b_u32(&b, (uint32_t)by);
        break;
    default: /* None */
        b_u8(&b, 0x00);
        break;
    }
    csend_msg(0, 1, T_INPUT, 0, &b);
    free(b.p);
    if (C.inputs_sent < MAX_INPUTS) C.sent_seqs[C.inputs_sent] = s;
    C.inputs_sent++;
}

static void raw_send(const uint8_t *d, size_t n)
{
    ENetPacket *pk = enet_packet_create(d, n, ENET_PACKET_FLAG_RELIABLE);
    if (pk && enet_peer_send(C.peer, 0, pk) != 0) enet_packet_destroy(pk);
}

static void raw_hdr(uint8_t *p, uint8_t ver, uint8_t type, uint8_t flags, uint32_t plen)
{
    p[0] = 0x5A; p[1] = 0x43; p[2] = 0x4E; p[3] = 0x54;
    p[4] = ver; p[5] = type; p[6] = flags; p[7] = 0;
    put_u32(p + 8, plen);
    put_u32(p + 12, C.seq_out++);
}

/* --send-invalid: one message per validation reason; the server must count each one
 * (bad_magic, bad_version, too_large, bad_length, unknown_type, bad_decompress, bad_payload,
 * unexpected_type, bad_ack) and carry on. 8 of them count toward the kick, unknown_type not. */
static void client_send_probes(void)
{
    uint8_t p[64];
    memset(p, 0, sizeof p);
    raw_hdr(p, 1, T_PING, 0, 16); p[0] = 0x5B; raw_send(p, 32);            /* bad_magic */
    raw_hdr(p, 2, T_PING, 0, 16); raw_send(p, 32);                          /* bad_version */
    raw_hdr(p, 1, T_PING, 0, MAX_PAYLOAD + 1); raw_send(p, 32);             /* too_large */
    raw_hdr(p, 1, T_PING, 0, 40); raw_send(p, 32);                          /* bad_length */
    raw_hdr(p, 1, 0x77, 0, 0); raw_send(p, 16);                             /* unknown_type */
    raw_hdr(p, 1, T_SNAP_ACK, F_COMPRESSED, 12);                            /* bad_decompress */
    put_u32(p + 16, 12); p[20] = 0xFF; p[21] = 0xFF; p[22] = 0xFF; p[23] = 0xFF; p[24] = 0xFF;
    p[25] = 0xFF; p[26] = 0xFF; p[27] = 0xFF;
    raw_send(p, 28);
    memset(p, 0, sizeof p);
    raw_hdr(p, 1, T_INPUT, F_RELIABLE, 13 + 3);                             /* bad_payload */
    put_u32(p + 16, PROBE_INPUT_SEQ); p[28] = 0x01; raw_send(p, 32);        /* PlaceBuilding, 3 B */
    memset(p, 0, sizeof p);
    raw_hdr(p, 1, T_SERVER_HELLO, 0, 48); raw_send(p, 64);                  /* unexpected_type */
    raw_hdr(p, 1, T_SNAP_ACK, F_RELIABLE, 12); raw_send(p, 28);             /* bad_ack (tick 0) */
}

static void client_ping(void)
{
    buf_t b = {0};
    b_u64(&b, wall_us());
    b_u64(&b, 0);
    csend_msg(2, 0, T_PING, 0, &b);
    free(b.p);
    C.pings++;
}

static void client_event(ENetEvent *ev)
{
    if (ev->type == ENET_EVENT_TYPE_CONNECT) {
        C.connected = 1;
        buf_t b = {0};
        uint8_t name[32] = {0};
        const char *nm = ev->peer->data ? (const char *)ev->peer->data : "zc_peer";
        memcpy(name, nm, strnlen(nm, 32));
        b_u32(&b, 0x00010000u);
        b_bytes(&b, name, 32);
        b_zero(&b, 16);
        b_u32(&b, 0xFF);
        if (C.proto_version != PROTO_VERSION) {
            ENetPacket *pk = enet_packet_create(NULL, HDR + b.len, ENET_PACKET_FLAG_RELIABLE);
            raw_hdr(pk->data, (uint8_t)C.proto_version, T_CLIENT_HELLO, F_RELIABLE, (uint32_t)b.len);
            memcpy(pk->data + HDR, b.p, b.len);
            if (enet_peer_send(C.peer, 0, pk) != 0) enet_packet_destroy(pk);
        } else {
            csend_msg(0, 1, T_CLIENT_HELLO, 0, &b);
        }
        free(b.p);
    } else if (ev->type == ENET_EVENT_TYPE_RECEIVE) {
        split_packet(ev->packet->data, ev->packet->dataLength, ev->channelID, &C.vs, &C.kickable,
                     client_handle, NULL, NULL);
        enet_packet_destroy(ev->packet);
    } else if (ev->type == ENET_EVENT_TYPE_DISCONNECT) {
        C.connected = 0;
    }
}

static int run_client(int argc, char **argv)
{
    if (argc < 4) return 2;
    const char *host = argv[2];
    int port = atoi(argv[3]);
    double seconds = 3;
    const char *name = "zc_peer";
    int pause_ms = 0, ninputs = 5, probes = 0, probes_sent = 0, input_iv_ms = 200;
    C.proto_version = PROTO_VERSION;
    for (int i = 4; i < argc; i++) {
        if (i + 1 >= argc) { fprintf(stderr, "missing value for %s\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--name")) name = argv[++i];
        else if (!strcmp(argv[i], "--pause-acks-ms")) pause_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--inputs")) ninputs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--send-invalid")) probes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--input-interval-ms")) input_iv_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--proto-version")) C.proto_version = atoi(argv[++i]);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (ninputs < 0) ninputs = 0;
    if (ninputs > MAX_INPUTS) ninputs = MAX_INPUTS;
    C.hello_result = -1;
    C.server_disconnect = -1;
    C.seq_out = 1;
    C.host = enet_host_create(NULL, 1, 3, 0, 0);
    if (!C.host) { printf("RESULT fail enet_host_create\n"); return 1; }
    ENetAddress addr;
    if (enet_address_set_host(&addr, host) != 0) { printf("RESULT fail bad_host\n"); return 1; }
    addr.port = (enet_uint16)port;
    C.peer = enet_host_connect(C.host, &addr, 3, 0);
    if (!C.peer) { printf("RESULT fail enet_host_connect\n"); return 1; }
    C.peer->data = (void *)name;

    uint64_t t0 = mono_us();
    uint64_t end = t0 + (uint64_t)(seconds * 1e6);
    uint64_t next_ping = 0, next_input = 0, pause_start = 0, pause_end = 0;
    int inputs_done = 0;
    while (!g_stop) {
        uint64_t now = mono_us();
        if (now >= end) break;
        ENetEvent ev;
        int rc = enet_host_service(C.host, &ev, 5);
        while (rc > 0) {
            client_event(&ev);
            rc = enet_host_check_events(C.host, &ev);
        }
        if (C.hello_result > 0 || C.server_disconnect >= 0 || (!C.connected && C.hello_result >= 0))
            break; /* refused, told to go, or dropped */
        now = mono_us();
        if (C.connected && C.hello_result == 0 && C.have_state) {
            if (!next_ping) { next_ping = now; next_input = now + 300000u; }
            if (now >= next_ping) { client_ping(); next_ping = now + 250000u; }
            if (inputs_done < ninputs && now >= next_input) {
                client_send_input(inputs_done++);
                next_input = now + (uint64_t)input_iv_ms * 1000u;
            }
            if (probes_sent < probes && now >= t0 + 500000u) {
                client_send_probes();
                probes_sent++;
            }
            if (pause_ms > 0 && !pause_start && now >= t0 + 1000000u) {
                pause_start = now;
                pause_end = now + (uint64_t)pause_ms * 1000u;
                C.paused = 1;
            }
            if (C.paused && now >= pause_end) C.paused = 0;
        }
        enet_host_flush(C.host);
    }
    /* graceful goodbye */
    if (C.connected && (C.hello_result != 0 || C.server_disconnect >= 0)) {
        /* refused or told to go: the server closes the ENet connection; wait up to 1 s */
        uint64_t stop_at = mono_us() + 1000000u;
        while (C.connected && mono_us() < stop_at) {
            ENetEvent ev;
            int rc = enet_host_service(C.host, &ev, 10);
            while (rc > 0) {
                client_event(&ev);
                rc = enet_host_check_events(C.host, &ev);
            }
        }
        if (C.connected) enet_peer_disconnect_now(C.peer, 0);
        C.connected = 0;
    }
    if (C.connected) {
        if (C.hello_result == 0) {
            buf_t b = {0};
            uint8_t msg[127] = {0};
            strcpy((char *)msg, "client done");
            b_u8(&b, 0);
            b_bytes(&b, msg, 127);
            csend_msg(0, 1, T_DISCONNECT, 0, &b);
            free(b.p);
        }
        enet_peer_disconnect_later(C.peer, 0);
        uint64_t stop_at = mono_us() + 1000000u;
        while (C.connected && mono_us() < stop_at) {
            ENetEvent ev;
            int rc = enet_host_service(C.host, &ev, 10);
            while (rc > 0) {
                client_event(&ev);
                rc = enet_host_check_events(C.host, &ev);
            }
        }
        if (C.connected) enet_peer_reset(C.peer);
    }
    uint64_t seq_lost = C.seq_seen ? (C.seq_max - C.seq_first + 1) - C.seq_count : 0;
    if (C.seq_seen && C.seq_count > C.seq_max - C.seq_first + 1) seq_lost = 0; /* duplicates */
    const char *fail = NULL;
    uint64_t inv = vs_invalid(&C.vs);
    if (C.hello_result < 0) fail = "no_server_hello";
    else if (C.hello_result == 1) fail = "server_full";
    else if (C.hello_result == 2) fail = "version_mismatch";
    else if (C.hello_result > 0) fail = "refused";
    else if (!C.fulls) fail = "no_full_snapshot";
    else if (!C.deltas) fail = "no_deltas";
    else if (!C.acks_sent) fail = "no_acks";
    else if (C.apply_errors) fail = "delta_apply_error";
    else if (inv) fail = "invalid_messages";
    else if (C.inputs_acked != (C.inputs_sent < MAX_INPUTS ? C.inputs_sent : MAX_INPUTS)) fail = "inputs_not_acked";
    else if (C.inputs_rejected) fail = "inputs_rejected";
    else if (C.built < 0) fail = "building_missing";
    else if (!C.pongs) fail = "no_pongs";
    else if (C.bad_pongs) fail = "bad_pong";
    else if (C.server_disconnect > 0) fail = "server_disconnected";
    if (fail) printf("RESULT fail %s", fail);
    else printf("RESULT ok");
    printf(" handshake=%s slot=%d full=%llu deltas=%llu deltas_compressed=%llu acks=%llu "
           "rtt_us=%llu rtt_min_us=%llu rtt_max_us=%llu pings=%llu pongs=%llu inputs_sent=%d "
           "inputs_acked=%d inputs_rejected=%d built=%d state_tick=%llu entities=%zu seq_lost=%llu "
           "tick_gaps=%llu baseline_missing=%llu stale=%llu paused_ignored=%llu apply_errors=%llu "
           "server_disconnect=%d errors_received=%llu probe_acks=%llu probe_result=%d",
           C.hello_result == 0 ? "ok" : (C.hello_result < 0 ? "none" : "refused"),
           C.hello_result == 0 ? C.slot : -1, (unsigned long long)C.fulls,
           (unsigned long long)C.deltas, (unsigned long long)C.deltas_compressed,
           (unsigned long long)C.acks_sent,
           (unsigned long long)(C.pongs ? C.rtt_sum / C.pongs : 0), (unsigned long long)C.rtt_min,
           (unsigned long long)C.rtt_max, (unsigned long long)C.pings, (unsigned long long)C.pongs,
           C.inputs_sent, C.inputs_acked, C.inputs_rejected, C.built,
           (unsigned long long)C.st.tick, C.st.n, (unsigned long long)seq_lost,
           (unsigned long long)C.tick_gaps, (unsigned long long)C.baseline_missing,
           (unsigned long long)C.stale, (unsigned long long)C.paused_ignored,
           (unsigned long long)C.apply_errors, C.server_disconnect,
           (unsigned long long)C.errors_received, (unsigned long long)C.probe_acks, C.probe_result);
    vs_print(stdout, &C.vs);
    printf("\n");
    fflush(stdout);
    cstate_free(&C.st);
    enet_host_destroy(C.host);
    return fail ? 1 : 0;
}

/* ------------------------------------------------------------------ fuzz self-test */
/*
 * zc_peer fuzz N [SEED]: no network. Builds valid messages of every type both sides receive
 * (FullSnapshot and DeltaSnapshot from the real world model), mutates them (byte flips,
 * truncation, extension, boundary values in 32-bit fields; for snapshots also mutations of the
 * decompressed payload, recompressed so the section/record parsers are reached) and feeds
 * them to the server's and the client's receive paths. Passing = no crash (run it under
 * ASan/UBSan to mean more); prints "FUZZ ok ..." with the validation counters.
 */
static uint64_t fz_state = 88172645463325252ull;
static uint64_t fz_rand(void)
{
    fz_state ^= fz_state << 13; fz_state ^= fz_state >> 7; fz_state ^= fz_state << 17;
    return fz_state;
}

static void fz_msg(buf_t *out, uint8_t type, uint8_t flags, const uint8_t *body, size_t n)
{
    out->len = 0;
    uint8_t h[HDR] = {0x5A, 0x43, 0x4E, 0x54, PROTO_VERSION, type, flags, 0};
    put_u32(h + 8, (uint32_t)n);
    put_u32(h + 12, (uint32_t)fz_rand());
    b_bytes(out, h, HDR);
    b_bytes(out, body, n);
}

static void fz_mutate(buf_t *m, int rounds)
{
    for (int k = 0; k < rounds; k++) {
        size_t n = m->len;
        switch (fz_rand() % 6) {
        case 0: if (n) m->p[fz_rand() % n] ^= (uint8_t)(1u << (fz_rand() % 8)); break;
        case 1: if (n) m->p[fz_rand() % n] = (uint8_t)fz_rand(); break;
        case 2: if (n) m->len = (size_t)(fz_rand() % n); break;
        case 3: { size_t add = (size_t)(fz_rand() % 64); for (size_t i = 0; i < add; i++) b_u8(m, (uint8_t)fz_rand()); break; }
        default: if (n >= 4) {
            static const uint32_t v[] = {0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF, MAX_PAYLOAD, MAX_PAYLOAD + 1};
            uint32_t val = v[fz_rand() % 8];
            if (fz_rand() % 2) val = (uint32_t)n;
            put_u32(m->p + fz_rand() % (n - 3), val);
        } break;
        }
    }
}

static int run_fuzz(int argc, char **argv)
{
    long iters = argc > 2 ? atol(argv[2]) : 20000;
    if (argc > 3) fz_state = strtoull(argv[3], NULL, 10) | 1;
    S.maxp = 4;
    for (int i = 0; i < 4; i++) S.slot_owner[i] = -1;
    S.tick = 200;
    world_init();
    sclient_t *sc = calloc(1, sizeof *sc);
    if (!sc) die_oom();
    sc->hello_result = -1; sc->disconnect_reason = -1; sc->seq_out = 1;
    S.cl = xrealloc(S.cl, sizeof *S.cl);
    S.cl[0] = sc; S.ncl = 1;
    C.hello_result = -1; C.server_disconnect = -1;
    player_view_t pv[4] = {{0}};
    buf_t raw = {0}, body = {0}, m = {0}, tmp = {0};
    uint64_t fed = 0;
    for (long it = 0; it < iters; it++) {
        int kind = (int)(fz_rand() % 12);
        int to_server = kind < 6;
        int mutate_inner = 0;
        body.len = 0; raw.len = 0;
        uint8_t type = 0, flags = 0;
        switch (kind) {
        case 0: type = T_CLIENT_HELLO; b_u32(&body, 1); b_zero(&body, 48); b_u32(&body, fz_rand() % 6); break;
        case 1: type = T_SNAP_ACK; b_u64(&body, S.tick - fz_rand() % 3); b_u32(&body, 1); break;
        case 2: type = T_INPUT; flags = F_RELIABLE; b_u32(&body, (uint32_t)it); b_u64(&body, S.tick);
            b_u8(&body, (uint8_t)(fz_rand() % 10)); b_u16(&body, (uint16_t)(fz_rand() % 4));
            b_zero(&body, (size_t)(fz_rand() % 40)); break;
        case 3: type = T_PING; b_u64(&body, wall_us()); b_u64(&body, 0); break;
        case 4: type = T_DISCONNECT; b_zero(&body, 128); break;
        case 5: type = (uint8_t)fz_rand(); b_zero(&body, (size_t)(fz_rand() % 32)); break;
        case 6: type = T_SERVER_HELLO; b_zero(&body, 48); break;
        case 7: case 8: { /* FullSnapshot; sometimes mutate the inner payload and recompress */
            type = T_FULL; flags = F_COMPRESSED;
            uint64_t t = 100 + fz_rand() % 50;
            build_full_payload(&raw, t, pv, 4);
            if (fz_rand() % 2) { fz_mutate(&raw, 1 + (int)(fz_rand() % 3)); mutate_inner = 1; }
            tmp.len = 0;
            lz4_wrap(&tmp, raw.p, raw.len);
            b_bytes(&body, tmp.p, 4); b_u64(&body, t); b_bytes(&body, tmp.p + 4, tmp.len - 4);
            break;
        }
        case 9: case 10: { /* DeltaSnapshot against the client's state tick */
            type = T_DELTA;
            buf_t e = {0}, c = {0};
            uint32_t ne, nc;
            uint64_t b0 = C.have_state ? C.st.tick : 100, t = b0 + 1 + fz_rand() % 30;
            build_delta(&e, &c, &ne, &nc, b0, t);
            b_u64(&raw, b0); b_u64(&raw, t); b_u16(&raw, (uint16_t)ne); b_u16(&raw, (uint16_t)nc);
            b_bytes(&raw, e.p, e.len); b_bytes(&raw, c.p, c.len);
            free(e.p); free(c.p);
            if (fz_rand() % 2) { fz_mutate(&raw, 1 + (int)(fz_rand() % 3)); mutate_inner = 1; }
            if (fz_rand() % 2) { flags = F_COMPRESSED; lz4_wrap(&body, raw.p, raw.len); }
            else b_bytes(&body, raw.p, raw.len);
            break;
        }
        default: type = (fz_rand() % 2) ? T_INPUT_ACK : T_PONG;
            b_zero(&body, type == T_PONG ? 16 : 13); break;
        }
        fz_msg(&m, type, flags, body.p, body.len);
        if (!mutate_inner && fz_rand() % 4 != 0) fz_mutate(&m, 1 + (int)(fz_rand() % 4));
        if (to_server) {
            uint64_t kick = 0;
            split_packet(m.p, m.len, (uint8_t)(fz_rand() % 3), &sc->vs, &kick, server_handle, sc, NULL);
        } else {
            split_packet(m.p, m.len, (uint8_t)(fz_rand() % 3), &C.vs, &C.kickable, client_handle, NULL, NULL);
        }
        fed++;
        if (it % 1000 == 0) server_tick();
    }
    printf("FUZZ ok iterations=%llu client_fulls=%llu client_deltas=%llu apply_errors=%llu",
           (unsigned long long)fed, (unsigned long long)C.fulls, (unsigned long long)C.deltas,
           (unsigned long long)C.apply_errors);
    vs_print(stdout, &C.vs);
    printf(" server");
    vs_print(stdout, &sc->vs);
    printf("\n");
    free(raw.p); free(body.p); free(m.p); free(tmp.p);
    cstate_free(&C.st);
    return 0;
}

/* ------------------------------------------------------------------ main */
static int usage(void)
{
    fprintf(stderr,
            "usage: zc_peer server PORT [--drop-every K] [--pong-delay-ms D] [--duration S] [--players N]\n"
            "                           [--map W] [--start-tick T]\n"
            "       zc_peer client HOST PORT [--seconds S] [--name NAME] [--pause-acks-ms A] [--inputs N]\n"
            "                                [--input-interval-ms I] [--send-invalid N] [--proto-version V]\n"
            "       zc_peer fuzz N [SEED]\n");
    return 2;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return usage();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (enet_initialize() != 0) { fprintf(stderr, "enet_initialize failed\n"); return 1; }
    atexit(enet_deinitialize);
    int rc;
    if (!strcmp(argv[1], "server")) rc = run_server(argc, argv);
    else if (!strcmp(argv[1], "client")) rc = run_client(argc, argv);
    else if (!strcmp(argv[1], "fuzz")) rc = run_fuzz(argc, argv);
    else rc = 2;
    if (rc == 2) return usage();
    return rc;
}
