/* A cheap cafe (0xCAFE) target for benchmarking the generator, not a game server: it
 * answers Hello with Welcome and echoes each Ping, numbering its datagrams to each client
 * from 0 (the Welcome), and drops inputs after counting them. No snapshots: the machine's
 * cores stay with the swarm. Written from docs/protocols/cafe.md (header: magic 0xCAFE u16,
 * version u8 = 1, type u8, seq u32, little-endian; Welcome: player_id u16, tick_rate u16;
 * Ping: timestamp_ms u32).
 *
 * Also the sink of the naive ceiling: `drain` mode only counts.
 *
 *   cafe_sink PORT SECONDS [THREADS=2] [cafe|drain]
 *
 * Listens on 127.0.0.1:PORT (SO_REUSEPORT, one socket per thread: the kernel keeps each
 * client on one thread), stops after SECONDS, prints what it received. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define TABLE (1 << 16)

static int port, seconds, drain_only;
static volatile sig_atomic_t stop;

/* SIGTERM ends the run early, with the counts printed as at the end. */
static void on_term(int sig) { (void)sig; stop = 1; }

struct client { uint32_t key; uint16_t port; uint16_t id; uint32_t seq; uint8_t used; };
struct counts { uint64_t datagrams, hellos, inputs, pings, other; };

static void put16(uint8_t *p, uint16_t v) { p[0] = v; p[1] = v >> 8; }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = v >> (8 * i); }

static struct client *lookup(struct client *t, uint16_t *next_id, struct sockaddr_in *a) {
    uint32_t key = a->sin_addr.s_addr;
    uint32_t h = (key * 2654435761u) ^ (a->sin_port * 40503u);
    for (uint32_t i = 0; i < TABLE; i++) {
        struct client *c = &t[(h + i) & (TABLE - 1)];
        if (!c->used) {
            c->used = 1; c->key = key; c->port = a->sin_port; c->seq = 0;
            c->id = ++*next_id ? *next_id : ++*next_id;
            return c;
        }
        if (c->key == key && c->port == a->sin_port) return c;
    }
    return NULL;
}

static void *serve(void *arg) {
    struct counts *n = arg;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int one = 1, big = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons(port)};
    me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&me, sizeof me) != 0) { perror("bind"); exit(2); }
    struct timeval tv = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct client *table = calloc(TABLE, sizeof *table);
    uint16_t next_id = 0;
    static __thread uint8_t bufs[BATCH][64];
    struct sockaddr_in from[BATCH];
    struct iovec iov[BATCH];
    struct mmsghdr m[BATCH];
    uint8_t out[BATCH][16];
    struct iovec oiov[BATCH];
    struct mmsghdr om[BATCH];
    while (!stop) {
        for (int i = 0; i < BATCH; i++) {
            iov[i] = (struct iovec){bufs[i], sizeof bufs[i]};
            m[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                                .msg_iov = &iov[i], .msg_iovlen = 1}};
        }
        int got = recvmmsg(fd, m, BATCH, MSG_WAITFORONE, NULL);
        if (got <= 0) continue;
        n->datagrams += got;
        if (drain_only) continue;
        int o = 0;
        for (int i = 0; i < got; i++) {
            uint8_t *d = bufs[i];
            unsigned len = m[i].msg_len;
            if (len < 8 || d[0] != 0xFE || d[1] != 0xCA || d[2] != 1) { n->other++; continue; }
            uint8_t type = d[3];
            if (type == 2) { n->inputs++; continue; }
            struct client *c = lookup(table, &next_id, &from[i]);
            if (!c) { n->other++; continue; }
            uint8_t *r = out[o];
            put16(r, 0xCAFE); r[2] = 1;
            put32(r + 4, c->seq++);
            if (type == 0) {
                n->hellos++;
                r[3] = 1; put16(r + 8, c->id); put16(r + 10, 60);
                oiov[o] = (struct iovec){r, 12};
            } else if (type == 4 && len >= 12) {
                n->pings++;
                r[3] = 4; memcpy(r + 8, d + 8, 4);
                oiov[o] = (struct iovec){r, 12};
            } else { c->seq--; n->other++; continue; }
            om[o] = (struct mmsghdr){.msg_hdr = {.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                                 .msg_iov = &oiov[o], .msg_iovlen = 1}};
            o++;
        }
        if (o) sendmmsg(fd, om, o, MSG_DONTWAIT);
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: cafe_sink PORT SECONDS [THREADS] [cafe|drain]\n"); return 2; }
    port = atoi(argv[1]); seconds = atoi(argv[2]);
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    drain_only = argc > 4 && strcmp(argv[4], "drain") == 0;
    if (threads < 1 || threads > 16) threads = 2;
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    pthread_t th[16];
    struct counts n[16];
    memset(n, 0, sizeof n);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, serve, &n[i]);
    for (int i = 0; i < seconds * 10 && !stop; i++) usleep(100000);
    stop = 1;
    struct counts t = {0};
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        t.datagrams += n[i].datagrams; t.hellos += n[i].hellos; t.inputs += n[i].inputs;
        t.pings += n[i].pings; t.other += n[i].other;
    }
    printf("sink datagrams=%llu hellos=%llu inputs=%llu pings=%llu other=%llu\n",
           (unsigned long long)t.datagrams, (unsigned long long)t.hellos,
           (unsigned long long)t.inputs, (unsigned long long)t.pings, (unsigned long long)t.other);
    return 0;
}
