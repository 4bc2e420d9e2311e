/*
 * enet_peer: a tiny ENet peer linking the C ENet library (Debian's libenet-dev, ENet 1.3.x),
 * used by tests/it/enet_interop.rs to prove tickswarm speaks the real ENet wire protocol.
 *
 * Build (scripts/install-test-deps.sh installs what it needs):
 *     cc -O2 -Wall -o enet_peer tests/peers/enet-peer/enet_peer.c $(pkg-config --cflags --libs libenet)
 * or `make -C tests/peers/enet-peer`. The tests build it themselves into a temporary directory.
 *
 * Modes (everything binds and connects on 127.0.0.1):
 *
 *   enet_peer server PORT [SECONDS]
 *       Accept peers on PORT (0 picks an ephemeral port) and echo every packet back to its sender
 *       on the same channel with the same reliability. Prints "LISTENING <port>" first, then one
 *       line per event. Exits after SECONDS (default 10) or when a peer sends the 4-byte packet
 *       "QUIT". Exit code 0.
 *
 *   enet_peer client HOST PORT [SECONDS]
 *       Connect with 2 channels, send a small reliable packet and a 6000-byte reliable packet
 *       (larger than the MTU, so ENet fragments it) on channel 0 and a small unreliable packet on
 *       channel 1, wait for the three echoes and compare them byte for byte, print ENet's RTT
 *       estimate, disconnect gracefully. Exit code 0 when all echoes matched and the disconnect
 *       was acknowledged, 1 otherwise (or after SECONDS, default 10).
 *
 * Output lines are "WORD key=value ..." so a test can parse them; stdout is flushed per line.
 */
#include <enet/enet.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LARGE_LEN 6000

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* FNV-1a, so both sides can print a short fingerprint of a payload. */
static uint32_t fnv1a(const uint8_t *data, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= data[i];
        h *= 16777619u;
    }
    return h;
}

static unsigned peer_index(ENetHost *host, ENetPeer *peer)
{
    return (unsigned)(peer - host->peers);
}

static void print_addr(const ENetAddress *a, char *out, size_t n)
{
    char ip[64];
    if (enet_address_get_host_ip(a, ip, sizeof ip) != 0) {
        strcpy(ip, "?");
    }
    snprintf(out, n, "%s:%u", ip, (unsigned)a->port);
}

static int run_server(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s server PORT [SECONDS]\n", argv[0]);
        return 2;
    }
    unsigned port = (unsigned)atoi(argv[2]);
    unsigned seconds = argc > 3 ? (unsigned)atoi(argv[3]) : 10;

    ENetAddress addr;
    enet_address_set_host(&addr, "127.0.0.1");
    addr.port = (enet_uint16)port;
    /* 64 peers, any channel count the client asks for, no bandwidth limits. */
    ENetHost *host = enet_host_create(&addr, 64, 0, 0, 0);
    if (host == NULL) {
        printf("ERROR what=enet_host_create port=%u\n", port);
        fflush(stdout);
        return 1;
    }
    ENetAddress bound;
    if (enet_socket_get_address(host->socket, &bound) != 0) {
        bound = addr;
    }
    printf("LISTENING port=%u\n", (unsigned)bound.port);
    fflush(stdout);

    uint64_t deadline = now_ms() + (uint64_t)seconds * 1000u;
    const char *why = "timeout";
    int quit = 0;
    while (!quit && now_ms() < deadline) {
        ENetEvent ev;
        int r = enet_host_service(host, &ev, 20);
        if (r < 0) {
            printf("ERROR what=enet_host_service\n");
            why = "error";
            break;
        }
        if (r == 0) {
            continue;
        }
        char a[96];
        switch (ev.type) {
        case ENET_EVENT_TYPE_CONNECT:
            print_addr(&ev.peer->address, a, sizeof a);
            printf("CONNECT peer=%u addr=%s data=%u channels=%u\n", peer_index(host, ev.peer), a,
                   (unsigned)ev.data, (unsigned)ev.peer->channelCount);
            break;
        case ENET_EVENT_TYPE_RECEIVE: {
            ENetPacket *in = ev.packet;
            int reliable = (in->flags & ENET_PACKET_FLAG_RELIABLE) != 0;
            printf("RECEIVE peer=%u channel=%u len=%u reliable=%d fnv=%08x\n",
                   peer_index(host, ev.peer), (unsigned)ev.channelID, (unsigned)in->dataLength,
                   reliable, fnv1a(in->data, in->dataLength));
            if (in->dataLength == 4 && memcmp(in->data, "QUIT", 4) == 0) {
                quit = 1;
                why = "quit";
            } else {
                enet_uint32 flags =
                    in->flags & (ENET_PACKET_FLAG_RELIABLE | ENET_PACKET_FLAG_UNSEQUENCED);
                ENetPacket *out = enet_packet_create(in->data, in->dataLength, flags);
                if (out == NULL || enet_peer_send(ev.peer, ev.channelID, out) != 0) {
                    printf("ERROR what=echo peer=%u\n", peer_index(host, ev.peer));
                    if (out != NULL) {
                        enet_packet_destroy(out);
                    }
                }
            }
            enet_packet_destroy(in);
            break;
        }
        case ENET_EVENT_TYPE_DISCONNECT:
            printf("DISCONNECT peer=%u data=%u\n", peer_index(host, ev.peer), (unsigned)ev.data);
            break;
        default:
            break;
        }
        fflush(stdout);
    }
    enet_host_flush(host);
    printf("EXIT reason=%s\n", why);
    fflush(stdout);
    enet_host_destroy(host);
    return 0;
}

struct expected {
    enet_uint8 channel;
    int reliable;
    uint8_t *data;
    size_t len;
    int seen;
};

static int run_client(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s client HOST PORT [SECONDS]\n", argv[0]);
        return 2;
    }
    unsigned seconds = argc > 4 ? (unsigned)atoi(argv[4]) : 10;
    ENetAddress addr;
    if (enet_address_set_host(&addr, argv[2]) != 0) {
        printf("ERROR what=resolve host=%s\n", argv[2]);
        return 1;
    }
    addr.port = (enet_uint16)atoi(argv[3]);

    ENetHost *host = enet_host_create(NULL, 1, 2, 0, 0);
    if (host == NULL) {
        printf("ERROR what=enet_host_create\n");
        return 1;
    }
    ENetPeer *peer = enet_host_connect(host, &addr, 2, 42);
    if (peer == NULL) {
        printf("ERROR what=enet_host_connect\n");
        return 1;
    }

    static uint8_t small[] = "hello from C, reliable";
    static uint8_t unrel[] = "hello from C, unreliable";
    static uint8_t large[LARGE_LEN];
    for (size_t i = 0; i < LARGE_LEN; i++) {
        large[i] = (uint8_t)((i * 7 + 3) & 0xff);
    }
    struct expected exp[3] = {
        {0, 1, small, sizeof small - 1, 0},
        {0, 1, large, LARGE_LEN, 0},
        {1, 0, unrel, sizeof unrel - 1, 0},
    };

    uint64_t deadline = now_ms() + (uint64_t)seconds * 1000u;
    int connected = 0, echoes = 0, disconnecting = 0, disconnected = 0, mismatches = 0;
    while (!disconnected && now_ms() < deadline) {
        ENetEvent ev;
        int r = enet_host_service(host, &ev, 20);
        if (r < 0) {
            printf("ERROR what=enet_host_service\n");
            break;
        }
        if (r > 0) {
            switch (ev.type) {
            case ENET_EVENT_TYPE_CONNECT:
                connected = 1;
                printf("CONNECTED channels=%u\n", (unsigned)peer->channelCount);
                for (int i = 0; i < 3; i++) {
                    ENetPacket *p = enet_packet_create(
                        exp[i].data, exp[i].len, exp[i].reliable ? ENET_PACKET_FLAG_RELIABLE : 0);
                    if (enet_peer_send(peer, exp[i].channel, p) != 0) {
                        printf("ERROR what=send index=%d\n", i);
                    }
                }
                break;
            case ENET_EVENT_TYPE_RECEIVE: {
                ENetPacket *in = ev.packet;
                int reliable = (in->flags & ENET_PACKET_FLAG_RELIABLE) != 0;
                int match = 0;
                for (int i = 0; i < 3; i++) {
                    if (!exp[i].seen && exp[i].channel == ev.channelID &&
                        exp[i].len == in->dataLength &&
                        memcmp(exp[i].data, in->data, in->dataLength) == 0) {
                        exp[i].seen = 1;
                        match = 1;
                        echoes++;
                        break;
                    }
                }
                if (!match) {
                    mismatches++;
                }
                printf("ECHO channel=%u len=%u reliable=%d match=%d fnv=%08x\n",
                       (unsigned)ev.channelID, (unsigned)in->dataLength, reliable, match,
                       fnv1a(in->data, in->dataLength));
                enet_packet_destroy(in);
                break;
            }
            case ENET_EVENT_TYPE_DISCONNECT:
                disconnected = 1;
                printf("DISCONNECTED data=%u graceful=%d\n", (unsigned)ev.data, disconnecting);
                break;
            default:
                break;
            }
            fflush(stdout);
        }
        if (connected && echoes == 3 && !disconnecting) {
            printf("RTT ms=%u variance=%u loss=%u\n", (unsigned)peer->roundTripTime,
                   (unsigned)peer->roundTripTimeVariance, (unsigned)peer->packetLoss);
            fflush(stdout);
            enet_peer_disconnect(peer, 7);
            disconnecting = 1;
        }
    }
    int ok = connected && echoes == 3 && mismatches == 0 && disconnecting && disconnected;
    printf("RESULT %s connected=%d echoes=%d mismatches=%d disconnected=%d\n", ok ? "ok" : "fail",
           connected, echoes, mismatches, disconnected);
    fflush(stdout);
    enet_host_destroy(host);
    return ok ? 0 : 1;
}

/*
 * city HOST PORT [SECONDS]: a C ENet client speaking the first City exchange with a City
 * server (tickswarm serve city): ClientHello (bytes written by hand from city.md) reliable on
 * channel 0, then wait for ServerHello (message type 0x02) and disconnect.
 */
static int run_city(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s city HOST PORT [SECONDS]\n", argv[0]);
        return 2;
    }
    unsigned seconds = argc > 4 ? (unsigned)atoi(argv[4]) : 10;
    ENetAddress addr;
    if (enet_address_set_host(&addr, argv[2]) != 0) {
        printf("ERROR what=resolve host=%s\n", argv[2]);
        return 1;
    }
    addr.port = (enet_uint16)atoi(argv[3]);
    ENetHost *host = enet_host_create(NULL, 1, 2, 0, 0);
    if (host == NULL) {
        printf("ERROR what=enet_host_create\n");
        return 1;
    }
    ENetPeer *peer = enet_host_connect(host, &addr, 2, 0);
    if (peer == NULL) {
        printf("ERROR what=enet_host_connect\n");
        return 1;
    }
    /* header: type 0x01, sequence 0, length 18; payload: protocol_version 1,
     * client_version "c-enet", player_name "c-peer" (varint lengths). */
    static const uint8_t hello[] = {0x01, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x01,
                                    0x06, 'c',  '-',  'e',  'n',  'e',  't',  0x06, 'c',
                                    '-',  'p',  'e',  'e',  'r'};
    uint64_t deadline = now_ms() + (uint64_t)seconds * 1000u;
    int connected = 0, server_hello = 0, disconnecting = 0, disconnected = 0;
    while (!disconnected && now_ms() < deadline) {
        ENetEvent ev;
        int r = enet_host_service(host, &ev, 20);
        if (r < 0) {
            break;
        }
        if (r > 0) {
            switch (ev.type) {
            case ENET_EVENT_TYPE_CONNECT:
                connected = 1;
                printf("CONNECTED\n");
                enet_peer_send(peer, 0,
                               enet_packet_create(hello, sizeof hello, ENET_PACKET_FLAG_RELIABLE));
                break;
            case ENET_EVENT_TYPE_RECEIVE:
                if (ev.channelID == 0 && ev.packet->dataLength >= 5 && ev.packet->data[0] == 0x02) {
                    server_hello = 1;
                    printf("SERVER_HELLO len=%u\n", (unsigned)ev.packet->dataLength);
                }
                enet_packet_destroy(ev.packet);
                break;
            case ENET_EVENT_TYPE_DISCONNECT:
                disconnected = 1;
                printf("DISCONNECTED data=%u\n", (unsigned)ev.data);
                break;
            default:
                break;
            }
            fflush(stdout);
        }
        if (server_hello && !disconnecting) {
            enet_peer_disconnect(peer, 0);
            disconnecting = 1;
        }
    }
    int ok = connected && server_hello && disconnected;
    printf("RESULT %s connected=%d server_hello=%d disconnected=%d\n", ok ? "ok" : "fail",
           connected, server_hello, disconnected);
    fflush(stdout);
    enet_host_destroy(host);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s server PORT [SECONDS] | client HOST PORT [SECONDS] | city HOST PORT [SECONDS]\n", argv[0]);
        return 2;
    }
    if (enet_initialize() != 0) {
        printf("ERROR what=enet_initialize\n");
        return 1;
    }
    atexit(enet_deinitialize);
    if (strcmp(argv[1], "server") == 0) {
        return run_server(argc, argv);
    }
    if (strcmp(argv[1], "client") == 0) {
        return run_client(argc, argv);
    }
    if (strcmp(argv[1], "city") == 0) {
        return run_city(argc, argv);
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
