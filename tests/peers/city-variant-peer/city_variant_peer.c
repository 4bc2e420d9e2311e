/*
 * city_variant_peer: a small C ENet (libenet 1.3) server speaking City exactly as the public
 * server mints-fishtank/city does (docs/protocols/city.md, "Dialects"), so the
 * `dialect: implementation` bots can be checked against its quirks in tests/it/e2e_city_variant.rs.
 *
 *     city_variant_peer PORT [--max-peers N] [--seconds S] [--tick-rate HZ]
 *
 * What it does, as the variant does:
 *   - ENet host with a peer table of N (default 100): connect N+1 simply gets no reply.
 *   - Reads only the FIRST message of each ENet packet.
 *   - ClientHello -> ServerHello, an EntitySpawn for each player already there, then the
 *     newcomer's own EntitySpawn to everyone. No content transfer, no FullState, no version
 *     check, no ServerFull. EntitySpawn 0x22 = id u32, pos Vec2f, name string, is_player u8.
 *   - Every tick, a DeltaState 0x21 to every peer (even before its ClientHello): tick u32,
 *     count u32, then per entity 46 bytes: id u32, pos Vec2f, vel Vec2f, has_player u8,
 *     is_moving u8, grid_pos Vec2i, move_target Vec2i, input_direction Vec2i. Channel 1,
 *     unreliable (ENet sends it reliably once it exceeds the fragment size).
 *   - Header sequence always 0. Ping ignored (no Pong), no InputAck, no Disconnect, no Kick.
 *   - ChatMessage 0x40 read as channel u8, sender string, target string, content string; a
 *     message that does not hold those four fields is what makes the real server throw and
 *     exit: this peer prints "crashed reason=..." and exits 3. A good one is relayed to
 *     everyone as ChatBroadcast 0x41 (same four fields).
 *   - Grid movement, in float as the variant computes it: the latest input received is held
 *     (each tick applies the newest); positions are tile centres (grid + 0.5); a moving
 *     player advances by distance toward the target tile's centre at 1/0.15 tiles per second
 *     (a diagonal is sqrt(2) tiles), velocity along that direction, and snaps to the centre
 *     (velocity 0, grid = target) when within one tick's step; only a standing player with a
 *     nonzero input starts a move, from floor(position) by the input, and only onto a
 *     passable tile. The map is MAP x MAP tiles, its outer ring wall, plus a pillar on every
 *     tile with x % 6 == 3 and y % 6 == 3, so walks meet walls; a refused move is counted
 *     once per refusal (the same refusal held over ticks counts once).
 *   - Ticks are fixed steps of 1/HZ s (60 by default, as the variant); a late loop catches up
 *     at most 15 ticks and drops the rest of the time, as the variant's 0.25 s cap does.
 *
 * Output (stdout, flushed per line): "LISTENING <port>", "HELLO peer=.. name=..",
 * once a second "STATS hellos=.. inputs=.. chats=.. pings=.. deltas=.. peers=.. refused=..",
 * and
 * "crashed reason=.." on a message it cannot read. Exit 0 after S seconds (default 30).
 * Big-endian throughout; varint = LEB128.
 */
#include <enet/enet.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAP 128
#define NAME_MAX_LEN 64
#define MOVE_DURATION 0.15f
#define MAX_CATCHUP 15

typedef struct {
    int in_world;
    uint32_t id;
    char name[NAME_MAX_LEN + 1];
    float px, py;           /* position (tiles) */
    float vx, vy;           /* velocity (tiles per second) */
    int32_t gx, gy;         /* grid position */
    int32_t tx, ty;         /* move target */
    int moving;
    int32_t in_x, in_y;     /* latest input received (held) */
    int refusing;           /* last tick refused a move ... */
    int32_t rgx, rgy, rdx, rdy; /* ... from this tile in this direction */
} Player;

static int passable(int32_t x, int32_t y)
{
    if (x < 1 || y < 1 || x >= MAP - 1 || y >= MAP - 1) return 0;
    return !(x % 6 == 3 && y % 6 == 3);
}

/* One tick of the variant's mover with the held input; returns 1 when a start was refused. */
static int move_tick(Player *p, float dt)
{
    const float speed = 1.0f / MOVE_DURATION;
    if (p->moving) {
        float cx = (float)p->tx + 0.5f, cy = (float)p->ty + 0.5f;
        float dx = cx - p->px, dy = cy - p->py;
        float dist = sqrtf(dx * dx + dy * dy);
        if (dist <= speed * dt || dist < 0.001f) {
            p->px = cx; p->py = cy;
            p->vx = 0.0f; p->vy = 0.0f;
            p->gx = p->tx; p->gy = p->ty;
            p->moving = 0;
        } else {
            p->vx = (dx / dist) * speed;
            p->vy = (dy / dist) * speed;
            p->px += p->vx * dt;
            p->py += p->vy * dt;
        }
    }
    if (p->moving || (p->in_x == 0 && p->in_y == 0)) return 0;
    p->gx = (int32_t)floorf(p->px);
    p->gy = (int32_t)floorf(p->py);
    int32_t nx = p->gx + p->in_x, ny = p->gy + p->in_y;
    if (!passable(nx, ny)) return 1;
    p->tx = nx; p->ty = ny;
    p->moving = 1;
    float cx = (float)nx + 0.5f, cy = (float)ny + 0.5f;
    float dx = cx - p->px, dy = cy - p->py;
    float dist = sqrtf(dx * dx + dy * dy);
    if (dist > 0.001f) {
        p->vx = (dx / dist) * speed;
        p->vy = (dy / dist) * speed;
    }
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- writing ---- */
typedef struct {
    uint8_t b[65536];
    size_t n;
} Buf;

static void w8(Buf *w, uint8_t v) { w->b[w->n++] = v; }
static void w32(Buf *w, uint32_t v)
{
    w8(w, (uint8_t)(v >> 24)); w8(w, (uint8_t)(v >> 16)); w8(w, (uint8_t)(v >> 8)); w8(w, (uint8_t)v);
}
static void wf32(Buf *w, float f) { uint32_t u; memcpy(&u, &f, 4); w32(w, u); }
static void wstr(Buf *w, const char *s)
{
    size_t len = strlen(s), v = len;
    do { uint8_t byte = v & 0x7f; v >>= 7; w8(w, byte | (v ? 0x80 : 0)); } while (v);
    memcpy(w->b + w->n, s, len);
    w->n += len;
}
/* Header with sequence 0 (always, as the variant); length patched by end_msg. */
static void begin_msg(Buf *w, uint8_t type) { w->n = 0; w8(w, type); w8(w, 0); w8(w, 0); w8(w, 0); w8(w, 0); }
static void end_msg(Buf *w)
{
    size_t len = w->n - 5;
    w->b[3] = (uint8_t)(len >> 8);
    w->b[4] = (uint8_t)len;
}
static void send_buf(ENetPeer *p, Buf *w, int reliable)
{
    ENetPacket *pk = enet_packet_create(w->b, w->n, reliable ? ENET_PACKET_FLAG_RELIABLE : 0);
    enet_peer_send(p, reliable ? 0 : 1, pk);
}

/* ---- reading (the real server throws on a short read) ---- */
typedef struct {
    const uint8_t *p;
    size_t n, at;
    int bad;
} Rd;

static uint8_t r8(Rd *r) { if (r->at + 1 > r->n) { r->bad = 1; return 0; } return r->p[r->at++]; }
static uint32_t r32(Rd *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v = (v << 8) | r8(r);
    return v;
}
static void rstr(Rd *r, char *out, size_t cap)
{
    uint64_t len = 0; int shift = 0; uint8_t b;
    do { b = r8(r); if (r->bad || shift > 63) { r->bad = 1; return; } len |= (uint64_t)(b & 0x7f) << shift; shift += 7; } while (b & 0x80);
    if (len > r->n - r->at) { r->bad = 1; return; }
    size_t k = len < cap - 1 ? (size_t)len : cap - 1;
    memcpy(out, r->p + r->at, k);
    out[k] = 0;
    r->at += (size_t)len;
}

static void spawn_msg(Buf *w, const Player *pl)
{
    begin_msg(w, 0x22);
    w32(w, pl->id);
    wf32(w, pl->px);
    wf32(w, pl->py);
    wstr(w, pl->name);
    w8(w, 1);
    end_msg(w);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [--max-peers N] [--seconds S] [--tick-rate HZ]\n", argv[0]);
        return 2;
    }
    unsigned port = (unsigned)atoi(argv[1]);
    size_t max_peers = 100;
    unsigned seconds = 30, tick_rate = 60;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-peers")) max_peers = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds")) seconds = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tick-rate")) tick_rate = (unsigned)atoi(argv[i + 1]);
    }
    if (max_peers == 0 || tick_rate == 0) return 2;
    if (enet_initialize() != 0) return 1;
    ENetAddress addr;
    enet_address_set_host(&addr, "127.0.0.1");
    addr.port = (enet_uint16)port;
    ENetHost *host = enet_host_create(&addr, max_peers, 2, 0, 0);
    if (!host) { fprintf(stderr, "cannot bind\n"); return 1; }
    printf("LISTENING %u\n", (unsigned)host->address.port);
    fflush(stdout);

    Player *players = calloc(max_peers, sizeof(Player));
    if (!players) return 1;
    static Buf w;
    uint32_t next_id = 1, tick = 0;
    unsigned long hellos = 0, inputs = 0, chats = 0, pings = 0, deltas = 0, refused = 0;
    uint64_t start = now_ms(), next_tick = start, next_stats = start + 1000;
    uint64_t tick_ms_x1000 = 1000000u / tick_rate, ticks_done = 0;

    while (now_ms() - start < (uint64_t)seconds * 1000u) {
        uint64_t now = now_ms();
        uint32_t wait = next_tick > now ? (uint32_t)(next_tick - now) : 0;
        ENetEvent ev;
        int got = enet_host_service(host, &ev, wait);
        while (got > 0) {
            size_t pi = (size_t)(ev.peer - host->peers);
            Player *pl = pi < max_peers ? &players[pi] : NULL;
            if (ev.type == ENET_EVENT_TYPE_CONNECT && pl) {
                memset(pl, 0, sizeof *pl);
            } else if (ev.type == ENET_EVENT_TYPE_DISCONNECT && pl) {
                pl->in_world = 0;
            } else if (ev.type == ENET_EVENT_TYPE_RECEIVE && pl) {
                Rd r = { ev.packet->data, ev.packet->dataLength, 0, 0 };
                /* Only the first message of a packet. */
                uint8_t type = r8(&r);
                r8(&r); r8(&r); /* sequence, ignored */
                uint32_t len = ((uint32_t)r8(&r) << 8);
                len |= r8(&r);
                if (!r.bad && len <= r.n - r.at) {
                    r.n = r.at + len;
                    if (type == 0x01 && !pl->in_world) {
                        r32(&r);
                        char cv[NAME_MAX_LEN + 1];
                        rstr(&r, cv, sizeof cv);
                        rstr(&r, pl->name, sizeof pl->name);
                        if (!r.bad) {
                            hellos++;
                            pl->in_world = 1;
                            pl->id = next_id++;
                            pl->gx = pl->tx = (int32_t)(10 + (pl->id * 7) % 100);
                            pl->gy = pl->ty = (int32_t)(10 + (pl->id * 13) % 100);
                            pl->px = (float)pl->gx + 0.5f;
                            pl->py = (float)pl->gy + 0.5f;
                            begin_msg(&w, 0x02);
                            w32(&w, 1);
                            wstr(&w, "city");
                            wstr(&w, "City Server");
                            w32(&w, pl->id);
                            w32(&w, pl->id);
                            end_msg(&w);
                            send_buf(ev.peer, &w, 1);
                            for (size_t j = 0; j < max_peers; j++) {
                                if (j != pi && players[j].in_world) {
                                    spawn_msg(&w, &players[j]);
                                    send_buf(ev.peer, &w, 1);
                                }
                            }
                            spawn_msg(&w, pl);
                            for (size_t j = 0; j < max_peers; j++) {
                                if (players[j].in_world && host->peers[j].state == ENET_PEER_STATE_CONNECTED)
                                    send_buf(&host->peers[j], &w, 1);
                            }
                            printf("HELLO peer=%zu name=%s id=%u\n", pi, pl->name, pl->id);
                            fflush(stdout);
                        }
                    } else if (type == 0x30 && pl->in_world) {
                        r32(&r); r32(&r);
                        int8_t mx = (int8_t)r8(&r), my = (int8_t)r8(&r);
                        if (!r.bad) {
                            inputs++;
                            pl->in_x = mx;  /* the latest input received wins, held */
                            pl->in_y = my;
                        }
                    } else if (type == 0x04) {
                        pings++; /* ignored: no Pong */
                    } else if (type == 0x40) {
                        char sender[256], target[256], content[512];
                        uint8_t ch = r8(&r);
                        rstr(&r, sender, sizeof sender);
                        rstr(&r, target, sizeof target);
                        rstr(&r, content, sizeof content);
                        if (r.bad) {
                            printf("crashed reason=chat_message_unreadable len=%u\n", len);
                            fflush(stdout);
                            return 3;
                        }
                        chats++;
                        begin_msg(&w, 0x41);
                        w8(&w, ch);
                        wstr(&w, sender);
                        wstr(&w, target);
                        wstr(&w, content);
                        end_msg(&w);
                        for (size_t j = 0; j < max_peers; j++) {
                            if (players[j].in_world && host->peers[j].state == ENET_PEER_STATE_CONNECTED)
                                send_buf(&host->peers[j], &w, 1);
                        }
                    }
                }
                enet_packet_destroy(ev.packet);
            } else if (ev.type == ENET_EVENT_TYPE_RECEIVE) {
                enet_packet_destroy(ev.packet);
            }
            got = enet_host_check_events(host, &ev);
        }
        now = now_ms();
        int ran = 0;
        while (now >= next_tick) {
            ticks_done++;
            next_tick = start + ticks_done * tick_ms_x1000 / 1000u;
            if (ran == MAX_CATCHUP) continue; /* too far behind: that time is dropped */
            ran++;
            tick++;
            float dt = 1.0f / (float)tick_rate;
            uint32_t count = 0;
            for (size_t j = 0; j < max_peers; j++) {
                Player *p = &players[j];
                if (!p->in_world) continue;
                count++;
                if (move_tick(p, dt)) {
                    if (!(p->refusing && p->rgx == p->gx && p->rgy == p->gy &&
                          p->rdx == p->in_x && p->rdy == p->in_y))
                        refused++;
                    p->refusing = 1;
                    p->rgx = p->gx; p->rgy = p->gy; p->rdx = p->in_x; p->rdy = p->in_y;
                } else {
                    p->refusing = 0;
                }
            }
            begin_msg(&w, 0x21);
            w32(&w, tick);
            w32(&w, count);
            for (size_t j = 0; j < max_peers; j++) {
                Player *p = &players[j];
                if (!p->in_world) continue;
                w32(&w, p->id);
                wf32(&w, p->px); wf32(&w, p->py);
                wf32(&w, p->vx); wf32(&w, p->vy);
                w8(&w, 1);
                w8(&w, (uint8_t)p->moving);
                w32(&w, (uint32_t)p->gx); w32(&w, (uint32_t)p->gy);
                w32(&w, (uint32_t)p->tx); w32(&w, (uint32_t)p->ty);
                w32(&w, (uint32_t)p->in_x); w32(&w, (uint32_t)p->in_y);
            }
            end_msg(&w);
            for (size_t j = 0; j < host->peerCount; j++) {
                if (host->peers[j].state == ENET_PEER_STATE_CONNECTED) {
                    send_buf(&host->peers[j], &w, 0);
                    deltas++;
                }
            }
        }
        enet_host_flush(host);
        if (now >= next_stats) {
            next_stats += 1000;
            size_t connected = 0;
            for (size_t j = 0; j < host->peerCount; j++)
                connected += host->peers[j].state == ENET_PEER_STATE_CONNECTED;
            printf("STATS hellos=%lu inputs=%lu chats=%lu pings=%lu deltas=%lu peers=%zu refused=%lu\n",
                   hellos, inputs, chats, pings, deltas, connected, refused);
            fflush(stdout);
        }
    }
    enet_host_destroy(host);
    enet_deinitialize();
    free(players);
    return 0;
}
