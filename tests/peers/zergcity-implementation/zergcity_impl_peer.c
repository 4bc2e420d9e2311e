/*
 * zergcity_impl_peer: a small C ENet (libenet 1.3) server speaking ZergCity as the real game
 * server of Blubagoo/sims_3000 does (`sims_3000 --server`), written from the wire facts alone
 * (docs/protocols/zergcity.md, "dialect: implementation"), so the `dialect: implementation`
 * bots can be checked against its quirks in tests/e2e_zergcity_implementation.rs.
 *
 *     zergcity_impl_peer PORT [--max-peers N] [--seconds S] [--drop-heartbeat-every K]
 *                             [--drop-for S] [--heartbeat-delay-ms D] [--big-every N]
 *
 * What it does, as the real server does:
 *   - ENet host with 4 peers (--max-peers) and 2 channels: a fifth connect gets no reply.
 *   - Envelope: version u8 (1), type u16, length u16, little-endian, then the payload;
 *     strings are u32 length + bytes; u64 as two u32, low first. One message per packet.
 *   - On connect: ServerStatus (9) = state u8 (1 ready), tier u8 (1), width u16 (256),
 *     height u16 (256), max players u8, players u8, tick u64, name string.
 *   - Join (3) = name string, has_token u8, [token 16]. Empty or > 64-byte name: JoinReject
 *     (5) reason 2. A token within its 30 s grace restores the player id. All ids 1..4 held
 *     (in game or in grace): JoinReject reason 1 (server full). Accepted: JoinAccept (4) =
 *     player u8, token 16, tick u64; then ServerStatus; then PlayerList (10) to everyone =
 *     count u8, then id u8, name string, status u8 (1), latency u32.
 *   - Reconnect (6) = token 16, name string: as a Join with that token (unknown: reason 4,
 *     expired: reason 5).
 *   - Heartbeat (1) = timestamp u64, sequence u32 -> HeartbeatResponse (2) = echoed timestamp
 *     u64, server ms u64, tick u64. Every second each client also gets one echoing 0. A client
 *     whose last Heartbeat (or Join) is 10 s old is disconnected.
 *   - Input (100): exactly 30 bytes (tick u64, player u8, type u8, seq u32, x i16, y i16,
 *     param1 u32, param2 u32, value i32); a player id other than the session's, type 0 or
 *     >= 16 is dropped silently. Each accepted input changes one entity.
 *   - StateUpdate (102), 20 ticks a second, only on ticks with changes, broadcast to every
 *     connected ENet peer (joined or not; PlayerList likewise):
 *     compressed u8, then body = tick u64, count u32, per entity: id u32, kind u8 (0 create,
 *     1 update, 2 destroy), size u32, data. A body over 1024 bytes is sent as 1 + u32 size
 *     + LZ4 block when that is smaller; else 0 + body.
 *   - Everything the server sends is reliable on channel 0.
 *
 * Injected faults (ground truth for the tests):
 *   - --drop-heartbeat-every K: every K-th Heartbeat received (counted over the whole peer)
 *     is treated as lost on the way: not answered, not counted as a sign of life. Only in the
 *     first --drop-for S seconds (default: the whole run).
 *   - --heartbeat-delay-ms D: the echo of each Heartbeat leaves D ms after it arrived.
 *   - --big-every N: every N-th StateUpdate carries 1.5 KB of component data (compressed).
 *
 * Output (stdout, flushed per line): "LISTENING <port>", "JOIN peer=.. id=.. name=..",
 * once a second and at exit "STATS connects=.. joins=.. reconnects=.. rejects=..
 * heartbeats=.. answered=.. dropped=.. inputs=.. bad_inputs=.. updates=.. compressed=..
 * server_heartbeats=.. silence_drops=.. peers=..". Exit 0 after S seconds (default 30).
 */
#include <enet/enet.h>
#include <lz4.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PLAYERS 4
#define MAX_NAME 64
#define TOKEN 16
#define GRACE_MS 30000u
#define SILENCE_MS 10000u
#define TICK_MS 50u
#define MAX_DELAYED 256
#define MAX_CHANGES 1000

typedef struct {
    int used;        /* a connected ENet peer */
    uint8_t player;  /* 0 before Join */
    uint64_t last_hb, last_sent_hb;
} Client;

typedef struct {
    uint8_t id;      /* 0: free */
    char name[MAX_NAME + 1];
    uint8_t token[TOKEN];
    ENetPeer *peer;  /* NULL: in grace */
    uint64_t left_at;
    uint32_t entities;
} Slot;

/* An echo held back: due in microseconds, so it never leaves early. */
typedef struct { ENetPeer *peer; uint64_t due_us, ts; } Delayed;

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static uint64_t now_ms(void) { return now_us() / 1000u; }

/* ---- little-endian writing ------------------------------------------------------------- */

typedef struct { uint8_t b[70000]; size_t n; } Buf;

static void w8(Buf *w, uint8_t v) { if (w->n < sizeof w->b) w->b[w->n++] = v; }
static void w16(Buf *w, uint16_t v) { w8(w, (uint8_t)v); w8(w, (uint8_t)(v >> 8)); }
static void w32(Buf *w, uint32_t v) { w16(w, (uint16_t)v); w16(w, (uint16_t)(v >> 16)); }
static void w64(Buf *w, uint64_t v) { w32(w, (uint32_t)v); w32(w, (uint32_t)(v >> 32)); }
static void wbytes(Buf *w, const void *p, size_t n)
{
    if (w->n + n <= sizeof w->b) { memcpy(w->b + w->n, p, n); w->n += n; }
}
static void wstr(Buf *w, const char *s) { w32(w, (uint32_t)strlen(s)); wbytes(w, s, strlen(s)); }
static void begin(Buf *w, uint16_t type) { w->n = 0; w8(w, 1); w16(w, type); w16(w, 0); }
static void finish(Buf *w)
{
    uint16_t len = (uint16_t)(w->n - 5);
    w->b[3] = (uint8_t)len;
    w->b[4] = (uint8_t)(len >> 8);
}
static void send_to(ENetPeer *p, Buf *w)
{
    finish(w);
    enet_peer_send(p, 0, enet_packet_create(w->b, w->n, ENET_PACKET_FLAG_RELIABLE));
}

/* ---- little-endian reading ------------------------------------------------------------- */

typedef struct { const uint8_t *p; size_t n, at; int bad; } Rd;

static uint8_t r8(Rd *r) { if (r->at + 1 > r->n) { r->bad = 1; return 0; } return r->p[r->at++]; }
static uint16_t r16(Rd *r) { uint16_t lo = r8(r); return (uint16_t)(lo | (uint16_t)r8(r) << 8); }
static uint32_t r32(Rd *r) { uint32_t lo = r16(r); return lo | (uint32_t)r16(r) << 16; }
static uint64_t r64(Rd *r) { uint64_t lo = r32(r); return lo | (uint64_t)r32(r) << 32; }
static const uint8_t *rbytes(Rd *r, size_t n)
{
    if (r->at + n > r->n) { r->bad = 1; return NULL; }
    const uint8_t *s = r->p + r->at;
    r->at += n;
    return s;
}

/* ---- state ----------------------------------------------------------------------------- */

static ENetHost *host;
static Client *clients;
static size_t max_peers = MAX_PLAYERS;
static Slot slots[MAX_PLAYERS];
static uint64_t start, tick;
static Buf w;
static unsigned long connects, joins, reconnects, rejects, heartbeats, answered, dropped,
    inputs, bad_inputs, updates, compressed, server_heartbeats, silence_drops;
static struct { uint32_t entity; uint8_t kind; int16_t x, y; } changes[MAX_CHANGES];
static size_t n_changes;

static Client *client_of(ENetPeer *p)
{
    size_t i = (size_t)(p - host->peers);
    return i < max_peers ? &clients[i] : NULL;
}

static size_t in_game(void)
{
    size_t n = 0;
    for (size_t i = 0; i < max_peers; i++) n += clients[i].used && clients[i].player;
    return n;
}

static void send_status(ENetPeer *p)
{
    begin(&w, 9);
    w8(&w, 1);
    w8(&w, 1);
    w16(&w, 256);
    w16(&w, 256);
    w8(&w, MAX_PLAYERS);
    w8(&w, (uint8_t)in_game());
    w64(&w, tick);
    wstr(&w, "ZergCity Server");
    send_to(p, &w);
}

static void broadcast_player_list(void)
{
    for (size_t c = 0; c < max_peers; c++) {
        if (!clients[c].used) continue;
        begin(&w, 10);
        uint8_t n = 0;
        for (int i = 0; i < MAX_PLAYERS; i++) n += slots[i].id && slots[i].peer;
        w8(&w, n);
        for (int i = 0; i < MAX_PLAYERS; i++) {
            if (!slots[i].id || !slots[i].peer) continue;
            w8(&w, slots[i].id);
            wstr(&w, slots[i].name);
            w8(&w, 1);
            w32(&w, 0);
        }
        send_to(&host->peers[c], &w);
    }
}

static void reject(ENetPeer *p, uint8_t reason)
{
    rejects++;
    begin(&w, 5);
    w8(&w, reason);
    wstr(&w, "refused");
    send_to(p, &w);
    enet_peer_disconnect_later(p, 0);
}

static int in_grace(const Slot *s, uint64_t now)
{
    return s->id && (s->peer || now - s->left_at <= GRACE_MS);
}

static void admit(ENetPeer *p, Slot *s, uint64_t now)
{
    Client *c = client_of(p);
    if (s->peer && s->peer != p) {
        Client *old = client_of(s->peer);
        if (old) old->player = 0;
        enet_peer_disconnect(s->peer, 0);
    }
    s->peer = p;
    s->left_at = 0;
    c->player = s->id;
    c->last_hb = now;
    begin(&w, 4);
    w8(&w, s->id);
    wbytes(&w, s->token, TOKEN);
    w64(&w, tick);
    send_to(p, &w);
    send_status(p);
    broadcast_player_list();
    printf("JOIN peer=%zu id=%u name=%s\n", (size_t)(p - host->peers), s->id, s->name);
}

static Slot *slot_by_token(const uint8_t *t)
{
    for (int i = 0; i < MAX_PLAYERS; i++)
        if (slots[i].id && !memcmp(slots[i].token, t, TOKEN)) return &slots[i];
    return NULL;
}

static void on_join(ENetPeer *p, Rd *r, uint64_t now)
{
    uint32_t len = r32(r);
    const uint8_t *name = len <= 4096 ? rbytes(r, len) : (r->bad = 1, NULL);
    uint8_t has = r8(r);
    const uint8_t *token = has ? rbytes(r, TOKEN) : NULL;
    if (r->bad) return;
    if (len == 0 || len > MAX_NAME) { reject(p, 2); return; }
    if (token) {
        Slot *s = slot_by_token(token);
        if (s && in_grace(s, now)) { admit(p, s, now); reconnects++; return; }
        if (s) { reject(p, 5); return; }
    }
    Slot *free_slot = NULL;
    for (int i = 0; i < MAX_PLAYERS && !free_slot; i++)
        if (!in_grace(&slots[i], now)) free_slot = &slots[i];
    if (!free_slot) { reject(p, 1); return; }
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->id = (uint8_t)(free_slot - slots + 1);
    memcpy(free_slot->name, name, len);
    for (int i = 0; i < TOKEN; i++) free_slot->token[i] = (uint8_t)(rand() & 0xFF);
    free_slot->token[0] |= 1; /* never all zero */
    joins++;
    admit(p, free_slot, now);
}

static void on_reconnect(ENetPeer *p, Rd *r, uint64_t now)
{
    const uint8_t *token = rbytes(r, TOKEN);
    uint32_t len = r32(r);
    if (len > MAX_NAME) { reject(p, 4); return; }
    rbytes(r, len);
    if (r->bad) return;
    Slot *s = slot_by_token(token);
    if (!s) { reject(p, 4); return; }
    if (!in_grace(s, now)) { reject(p, 5); return; }
    reconnects++;
    admit(p, s, now);
}

static void heartbeat_response(ENetPeer *p, uint64_t ts, uint64_t now)
{
    begin(&w, 2);
    w64(&w, ts);
    w64(&w, now - start + 1);
    w64(&w, tick);
    send_to(p, &w);
}

static void on_input(Client *c, Rd *r, uint16_t len)
{
    if (len != 30) { bad_inputs++; return; }
    r64(r);
    uint8_t player = r8(r), type = r8(r);
    r32(r);
    int16_t x = (int16_t)r16(r), y = (int16_t)r16(r);
    if (r->bad || !c->player || player != c->player || type == 0 || type >= 16) {
        bad_inputs++;
        return;
    }
    inputs++;
    Slot *s = &slots[c->player - 1];
    if (n_changes < MAX_CHANGES) {
        uint32_t e;
        uint8_t kind;
        if (s->entities < 64) { e = s->entities++; kind = 0; }   /* create */
        else { e = (uint32_t)(uint16_t)x % 64; kind = 1; }       /* update */
        changes[n_changes].entity = (uint32_t)c->player << 24 | e;
        changes[n_changes].kind = kind;
        changes[n_changes].x = x;
        changes[n_changes].y = y;
        n_changes++;
    }
}

static void run_tick(unsigned big_every)
{
    static Buf body;
    static char lz[LZ4_COMPRESSBOUND(70000)];
    tick++;
    if (!n_changes) return;
    updates++;
    int big = big_every && updates % big_every == 0;
    body.n = 0;
    w64(&body, tick);
    w32(&body, (uint32_t)n_changes);
    for (size_t i = 0; i < n_changes; i++) {
        w32(&body, changes[i].entity);
        w8(&body, changes[i].kind);
        uint32_t size = big && i == 0 ? 1500 : 24;
        w32(&body, size);
        w16(&body, (uint16_t)changes[i].x);
        w16(&body, (uint16_t)changes[i].y);
        for (uint32_t k = 4; k < size; k++) w8(&body, (uint8_t)(k % 7));
    }
    n_changes = 0;
    begin(&w, 102);
    int n = body.n > 1024 ? LZ4_compress_default((const char *)body.b, lz, (int)body.n, (int)sizeof lz) : 0;
    if (n > 0 && (size_t)n + 4 < body.n) {
        compressed++;
        w8(&w, 1);
        w32(&w, (uint32_t)body.n);
        wbytes(&w, lz, (size_t)n);
    } else {
        w8(&w, 0);
        wbytes(&w, body.b, body.n);
    }
    finish(&w);
    /* Broadcast to every connected ENet peer, joined or not, as the server does. */
    for (size_t c = 0; c < max_peers; c++)
        if (clients[c].used)
            enet_peer_send(&host->peers[c], 0,
                           enet_packet_create(w.b, w.n, ENET_PACKET_FLAG_RELIABLE));
}

static void leave(ENetPeer *p, uint64_t now)
{
    Client *c = client_of(p);
    if (!c || !c->used) return;
    for (int i = 0; i < MAX_PLAYERS; i++)
        if (slots[i].id && slots[i].peer == p) { slots[i].peer = NULL; slots[i].left_at = now; }
    memset(c, 0, sizeof *c);
    broadcast_player_list();
}

static void print_stats(void)
{
    size_t peers = 0;
    for (size_t i = 0; i < max_peers; i++) peers += clients[i].used;
    printf("STATS connects=%lu joins=%lu reconnects=%lu rejects=%lu heartbeats=%lu "
           "answered=%lu dropped=%lu inputs=%lu bad_inputs=%lu updates=%lu compressed=%lu "
           "server_heartbeats=%lu silence_drops=%lu peers=%zu\n",
           connects, joins, reconnects, rejects, heartbeats, answered, dropped, inputs,
           bad_inputs, updates, compressed, server_heartbeats, silence_drops, peers);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [--max-peers N] [--seconds S] [--drop-heartbeat-every K] "
                        "[--drop-for S] [--heartbeat-delay-ms D] [--big-every N]\n", argv[0]);
        return 2;
    }
    unsigned port = (unsigned)atoi(argv[1]);
    unsigned seconds = 30, drop_every = 0, drop_for = 0, delay_ms = 0, big_every = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-peers")) max_peers = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds")) seconds = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--drop-heartbeat-every")) drop_every = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--drop-for")) drop_for = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--heartbeat-delay-ms")) delay_ms = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--big-every")) big_every = (unsigned)atoi(argv[i + 1]);
    }
    if (max_peers == 0) return 2;
    if (!drop_for) drop_for = seconds;
    srand((unsigned)time(NULL) ^ (unsigned)port);
    if (enet_initialize() != 0) return 1;
    ENetAddress addr;
    enet_address_set_host(&addr, "127.0.0.1");
    addr.port = (enet_uint16)port;
    host = enet_host_create(&addr, max_peers, 2, 0, 0);
    if (!host) { fprintf(stderr, "cannot bind\n"); return 1; }
    clients = calloc(max_peers, sizeof(Client));
    static Delayed delayed[MAX_DELAYED];
    size_t n_delayed = 0;
    if (!clients) return 1;
    printf("LISTENING %u\n", (unsigned)host->address.port);
    fflush(stdout);

    start = now_ms();
    uint64_t next_tick = start + TICK_MS, next_second = start + 1000;
    while (now_ms() - start < (uint64_t)seconds * 1000u) {
        uint64_t now = now_ms();
        uint64_t wake = next_tick;
        for (size_t i = 0; i < n_delayed; i++)
            if (delayed[i].due_us / 1000u < wake) wake = delayed[i].due_us / 1000u;
        ENetEvent ev;
        int got = enet_host_service(host, &ev, wake > now ? (uint32_t)(wake - now) : 0);
        while (got > 0) {
            now = now_ms();
            Client *c = client_of(ev.peer);
            if (ev.type == ENET_EVENT_TYPE_CONNECT && c) {
                connects++;
                memset(c, 0, sizeof *c);
                c->used = 1;
                c->last_hb = c->last_sent_hb = now;
                send_status(ev.peer);
            } else if (ev.type == ENET_EVENT_TYPE_DISCONNECT) {
                leave(ev.peer, now);
                for (size_t i = 0; i < n_delayed; i++)
                    if (delayed[i].peer == ev.peer) delayed[i--] = delayed[--n_delayed];
            } else if (ev.type == ENET_EVENT_TYPE_RECEIVE) {
                Rd r = { ev.packet->data, ev.packet->dataLength, 0, 0 };
                uint8_t version = r8(&r);
                uint16_t type = r16(&r), len = r16(&r);
                if (c && c->used && !r.bad && version == 1 && len <= r.n - r.at) {
                    r.n = r.at + len;
                    if (type == 3 && !c->player) on_join(ev.peer, &r, now);
                    else if (type == 6) on_reconnect(ev.peer, &r, now);
                    else if (type == 100) on_input(c, &r, len);
                    else if (type == 1 && len == 12) {
                        uint64_t ts = r64(&r);
                        r32(&r);
                        heartbeats++;
                        if (drop_every && heartbeats % drop_every == 0 &&
                            now - start < (uint64_t)drop_for * 1000u) {
                            dropped++;
                        } else {
                            answered++;
                            c->last_hb = now;
                            if (delay_ms && n_delayed < MAX_DELAYED) {
                                delayed[n_delayed].peer = ev.peer;
                                delayed[n_delayed].due_us = now_us() + delay_ms * 1000u;
                                delayed[n_delayed].ts = ts;
                                n_delayed++;
                            } else {
                                heartbeat_response(ev.peer, ts, now);
                            }
                        }
                    }
                }
                enet_packet_destroy(ev.packet);
            }
            got = enet_host_check_events(host, &ev);
        }
        now = now_ms();
        uint64_t us = now_us();
        for (size_t i = 0; i < n_delayed; i++) {
            if (delayed[i].due_us <= us) {
                heartbeat_response(delayed[i].peer, delayed[i].ts, now);
                delayed[i--] = delayed[--n_delayed];
            }
        }
        while (now >= next_tick) {
            run_tick(big_every);
            next_tick += TICK_MS;
        }
        if (now >= next_second) {
            next_second += 1000;
            for (size_t i = 0; i < max_peers; i++) {
                Client *cl = &clients[i];
                if (!cl->used) continue;
                if (now - cl->last_sent_hb >= 1000) {
                    cl->last_sent_hb = now;
                    server_heartbeats++;
                    heartbeat_response(&host->peers[i], 0, now);
                }
                if (now - cl->last_hb >= SILENCE_MS) {
                    silence_drops++;
                    enet_peer_disconnect(&host->peers[i], 0);
                    leave(&host->peers[i], now);
                }
            }
            print_stats();
        }
    }
    print_stats();
    enet_host_flush(host);
    enet_host_destroy(host);
    enet_deinitialize();
    return 0;
}
