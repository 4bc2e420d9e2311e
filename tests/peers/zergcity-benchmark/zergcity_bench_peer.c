/*
 * zergcity_bench_peer: a small C ENet (libenet 1.3) server speaking ZergCity as the POC-2
 * benchmark server of Blubagoo/sims_3000 does (poc/poc2-enet-snapshot-sync), written from
 * the wire facts alone (docs/protocols/zergcity.md, "dialect: benchmark"), so the
 * `dialect: benchmark` bots can be checked against its quirks and against its own counts in
 * tests/it/e2e_zergcity_benchmark.rs.
 *
 *     zergcity_bench_peer PORT [--max-peers N] [--seconds S] [--entities N]
 *                              [--drop-delta-every K] [--flood-empty K]
 *
 * What it does, as the benchmark server does:
 *   - ENet host with 8 peers (--max-peers) and 3 channels, no handshake of its own: every
 *     peer that connects is streamed to.
 *   - Header, 16 bytes, little-endian: "ZCNT", version 1, type u8, flags u8 (0x01
 *     compressed), padding 0, payload_length u32, sequence u32 = the server tick.
 *   - 20 ticks a second. Each tick changes N/50 entities (at least one), then sends each
 *     peer one message: a FullSnapshot (type 1, reliable, channel 1) to a peer that just
 *     connected or asked for a resync, else a DeltaSnapshot (type 2, unsequenced, channel 2)
 *     of every entity changed since that peer's pending set was last cleared (none: nothing
 *     sent that tick).
 *   - FullSnapshot body: count u32, count x (x, y, z f32), count x (type_id u32, flags u32,
 *     value f32). DeltaSnapshot body: checksum u64 (FNV-1a over the two arrays), count u16,
 *     per entity id u16, mask u8, then the masked fields (x, y, z, type_id, flags, value; 4
 *     bytes each). Both always compressed: payload = u32 body size + LZ4 block.
 *   - It reads channel 0 only: SnapshotAck (type 3, bare header, tick in sequence) newer
 *     than the peer's last clears the peer's pending set; ResyncRequest (type 4) gets a
 *     FullSnapshot on the next tick. Anything else is ignored.
 *
 * Injected faults (ground truth for the tests):
 *   - --drop-delta-every K: every K-th DeltaSnapshot generated for a peer (counted per peer)
 *     is not sent: lost on the way. Counted in `dropped`.
 *   - --flood-empty K: hostile (issue 35). Each tick, every peer that has acknowledged a
 *     snapshot also gets K empty DeltaSnapshots (count 0, the right checksum, 31 bytes on
 *     the wire): each one cost a bot a checksum pass over its whole world before the fix.
 *     Counted in `flooded`.
 * ENet's sender-side packet throttle is held open (see the CONNECT event), so no delta is
 * lost that `dropped` does not count.
 * Delay is not the peer's to inject: the bots' round trips in this dialect are ENet's own
 * acknowledgements, so the tests put a delaying proxy (tests/common/proxy.rs) on the link.
 *
 * Output (stdout, flushed per line): "LISTENING <port>", then once a second and at exit
 * "STATS connects=.. fulls=.. deltas=.. sent=.. dropped=.. acks=.. resyncs=.. bad=.. peers=..",
 * where fulls + deltas are the messages generated, sent = fulls + deltas - dropped.
 * Exit 0 after S seconds (default 30).
 */
#include <enet/enet.h>
#include <lz4.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TICK_MS 50u
#define MAX_ENTITIES 65536

typedef struct {
    int used;
    int needs_full;
    int acked_any;
    uint32_t last_acked;
    unsigned long generated_deltas;
    uint8_t pending[MAX_ENTITIES];
} Client;

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static ENetHost *host;
static Client *clients;
static size_t max_peers = 8;
static uint32_t n_entities = 1000, tick, rng = 42;
static uint8_t world[MAX_ENTITIES * 24];
static uint8_t dirty[MAX_ENTITIES];
static unsigned long connects, fulls, deltas, sent, dropped, acks, resyncs, bad, flooded;

static uint32_t next_rng(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Field f (0-2 position x, y, z; 3-5 type_id, flags, value) of entity i in the two arrays. */
static uint8_t *field(uint32_t i, int f)
{
    return f < 3 ? world + i * 12 + f * 4 : world + n_entities * 12 + i * 12 + (f - 3) * 4;
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
    return h;
}

static Client *client_of(ENetPeer *p)
{
    size_t i = (size_t)(p - host->peers);
    return i < max_peers ? &clients[i] : NULL;
}

/* header + u32 size + LZ4 block of body */
static ENetPacket *message(uint8_t type, uint32_t seq, const uint8_t *body, size_t n, uint32_t flags)
{
    static char lz[LZ4_COMPRESSBOUND(MAX_ENTITIES * 24 + 64)];
    int c = LZ4_compress_default((const char *)body, lz, (int)n, (int)sizeof lz);
    if (c <= 0) return NULL;
    ENetPacket *p = enet_packet_create(NULL, 16 + 4 + (size_t)c, flags);
    if (!p) return NULL;
    uint8_t *h = p->data;
    memcpy(h, "ZCNT", 4);
    h[4] = 1; h[5] = type; h[6] = 0x01; h[7] = 0;
    put32(h + 8, 4 + (uint32_t)c);
    put32(h + 12, seq);
    put32(h + 16, (uint32_t)n);
    memcpy(h + 20, lz, (size_t)c);
    return p;
}

static void run_tick(unsigned drop_every, unsigned flood)
{
    static uint8_t body[10 + MAX_ENTITIES * 27 + 16];
    tick++;
    memset(dirty, 0, n_entities);
    uint32_t changes = n_entities / 50 ? n_entities / 50 : 1;
    for (uint32_t m = 0; m < changes; m++) {
        uint32_t id = next_rng() % n_entities;
        int f = (int)(next_rng() % 6);
        put32(field(id, f), next_rng());
        dirty[id] |= (uint8_t)(1u << f);
    }
    uint64_t checksum = fnv1a(world, (size_t)n_entities * 24);
    uint8_t empty[10] = {0};
    for (int k = 0; k < 8; k++) empty[k] = (uint8_t)(checksum >> (8 * k));
    for (size_t ci = 0; ci < max_peers; ci++) {
        Client *c = &clients[ci];
        if (!c->used) continue;
        ENetPeer *peer = &host->peers[ci];
        if (c->needs_full) {
            c->needs_full = 0;
            c->last_acked = tick;
            memset(c->pending, 0, n_entities);
            put32(body, n_entities);
            memcpy(body + 4, world, (size_t)n_entities * 24);
            ENetPacket *p = message(1, tick, body, 4 + (size_t)n_entities * 24, ENET_PACKET_FLAG_RELIABLE);
            if (p) { enet_peer_send(peer, 1, p); fulls++; sent++; }
            continue;
        }
        size_t n = 10;
        uint16_t count = 0;
        for (uint32_t i = 0; i < n_entities; i++) {
            c->pending[i] |= dirty[i];
            if (!c->pending[i]) continue;
            count++;
            body[n++] = (uint8_t)i;
            body[n++] = (uint8_t)(i >> 8);
            body[n++] = c->pending[i];
            for (int f = 0; f < 6; f++)
                if (c->pending[i] & (1u << f)) { memcpy(body + n, field(i, f), 4); n += 4; }
        }
        if (!count) continue;
        for (int k = 0; k < 8; k++) body[k] = (uint8_t)(checksum >> (8 * k));
        body[8] = (uint8_t)count;
        body[9] = (uint8_t)(count >> 8);
        deltas++;
        c->generated_deltas++;
        if (drop_every && c->generated_deltas % drop_every == 0) { dropped++; continue; }
        ENetPacket *p = message(2, tick, body, n, ENET_PACKET_FLAG_UNSEQUENCED);
        if (!p) continue;
        sent++;
        enet_peer_send(peer, 2, p);
        /* After the tick's delta, so the bot's world is at this tick's checksum. */
        if (c->acked_any) {
            for (unsigned k = 0; k < flood; k++) {
                ENetPacket *e = message(2, tick, empty, sizeof empty, ENET_PACKET_FLAG_UNSEQUENCED);
                if (e) { enet_peer_send(peer, 2, e); flooded++; }
            }
        }
    }
}

static void print_stats(void)
{
    size_t peers = 0;
    for (size_t i = 0; i < max_peers; i++) peers += clients[i].used;
    printf("STATS connects=%lu fulls=%lu deltas=%lu sent=%lu dropped=%lu acks=%lu resyncs=%lu "
           "bad=%lu peers=%zu tick=%u flooded=%lu\n",
           connects, fulls, deltas, sent, dropped, acks, resyncs, bad, peers, tick, flooded);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [--max-peers N] [--seconds S] [--entities N] "
                        "[--drop-delta-every K] [--flood-empty K]\n", argv[0]);
        return 2;
    }
    unsigned port = (unsigned)atoi(argv[1]);
    unsigned seconds = 30, drop_every = 0, flood = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-peers")) max_peers = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds")) seconds = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--entities")) n_entities = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--drop-delta-every")) drop_every = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--flood-empty")) flood = (unsigned)atoi(argv[i + 1]);
    }
    if (max_peers == 0 || n_entities == 0 || n_entities > MAX_ENTITIES) return 2;
    for (uint32_t i = 0; i < n_entities; i++)
        for (int f = 0; f < 6; f++) put32(field(i, f), next_rng() % 10000u);
    if (enet_initialize() != 0) return 1;
    ENetAddress addr;
    enet_address_set_host(&addr, "127.0.0.1");
    addr.port = (enet_uint16)port;
    host = enet_host_create(&addr, max_peers, 3, 0, 0);
    if (!host) { fprintf(stderr, "cannot bind\n"); return 1; }
    clients = calloc(max_peers, sizeof(Client));
    if (!clients) return 1;
    printf("LISTENING %u\n", (unsigned)host->address.port);
    fflush(stdout);

    uint64_t start = now_us() / 1000u;
    uint64_t next_tick = start + TICK_MS, next_second = start + 1000;
    while (now_us() / 1000u - start < (uint64_t)seconds * 1000u) {
        uint64_t now = now_us() / 1000u;
        uint64_t wake = next_tick;
        ENetEvent ev;
        int got = enet_host_service(host, &ev, wake > now ? (uint32_t)(wake - now) : 0);
        while (got > 0) {
            Client *c = client_of(ev.peer);
            if (ev.type == ENET_EVENT_TYPE_CONNECT && c) {
                connects++;
                memset(c, 0, sizeof *c);
                c->used = 1;
                c->needs_full = 1;
                /* ENet's packet throttle drops unreliable (and unsequenced) packets on the
                 * sender when a peer's RTT swings up, as it does on a busy test machine:
                 * those deltas would leave without being counted `dropped`. Never slowing
                 * the throttle keeps `sent` what went on the wire, so the tests' ground
                 * truth is exact. (The real server keeps ENet's default, and a bot counts
                 * such a throttled delta as lost, which it is.) */
                ev.peer->packetThrottleDeceleration = 0;
            } else if (ev.type == ENET_EVENT_TYPE_DISCONNECT && c) {
                memset(c, 0, sizeof *c);
            } else if (ev.type == ENET_EVENT_TYPE_RECEIVE) {
                const uint8_t *d = ev.packet->data;
                size_t n = ev.packet->dataLength;
                if (!c || !c->used || ev.channelID != 0) {
                    /* The benchmark reads channel 0 only. */
                } else if (n < 16 || memcmp(d, "ZCNT", 4) != 0) {
                    bad++;
                } else if (d[5] == 3) {
                    acks++;
                    c->acked_any = 1;
                    uint32_t t = get32(d + 12);
                    if (t > c->last_acked) {
                        c->last_acked = t;
                        memset(c->pending, 0, n_entities);
                    }
                } else if (d[5] == 4) {
                    resyncs++;
                    c->needs_full = 1;
                } else {
                    bad++;
                }
                enet_packet_destroy(ev.packet);
            }
            got = enet_host_check_events(host, &ev);
        }
        now = now_us() / 1000u;
        while (now >= next_tick) {
            run_tick(drop_every, flood);
            next_tick += TICK_MS;
        }
        if (now >= next_second) {
            next_second += 1000;
            print_stats();
        }
    }
    print_stats();
    enet_host_flush(host);
    enet_host_destroy(host);
    enet_deinitialize();
    return 0;
}
