/* The naive ceiling: one thread, N connected UDP sockets into one sink, a plain send() per
 * datagram round-robin as fast as it goes, for SECONDS. Prints datagrams/s, and the CPU time
 * (user and system) the loop used per datagram: the cost the generator's
 * `generator.cpu_ns_per_datagram_sent` is set beside (scripts/bench_ceiling.sh).
 *
 * With `watched`, every socket is first registered for reading in an epoll instance (as a
 * bot's socket is: tokio registers it edge-triggered, readable, to receive its server), and
 * nothing ever waits on it. The loop is the same; what changes is the kernel's part of each
 * send: the sent datagram's release (`sock_wfree`) now finds a waiter on the socket's wait
 * queue and calls into epoll for it. That is the floor of any generator whose bots receive.
 *
 *   send_loop PORT SOCKETS SECONDS [watched] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: send_loop PORT SOCKETS SECONDS [watched]\n"); return 2; }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    int watched = argc > 4 && strcmp(argv[4], "watched") == 0;
    int ep = watched ? epoll_create1(0) : -1;
    if (watched && ep < 0) { perror("epoll_create1"); return 2; }
    double secs = atof(argv[3]);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int *fds = malloc(sizeof(int) * n);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&to, sizeof to) != 0) { perror("socket"); return 2; }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.u32 = (unsigned)i};
        if (watched && epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0) { perror("epoll_ctl"); return 2; }
    }
    unsigned char payload[20] = {0xFE, 0xCA, 1, 2};
    unsigned long long sent = 0, errors = 0;
    double cpu_start = cpu_now();
    double start = now(), end = start + secs, t = start;
    while (t < end) {
        for (int i = 0; i < n; i++) {
            if (send(fds[i], payload, sizeof payload, MSG_DONTWAIT) < 0) errors++; else sent++;
        }
        t = now();
    }
    double cpu = cpu_now() - cpu_start;
    printf("ceiling%s sockets=%d datagrams=%llu errors=%llu seconds=%.2f rate=%.0f cpu_ns_per_datagram=%.0f\n",
           watched ? " watched" : "", n, sent, errors, t - start, sent / (t - start), sent ? cpu * 1e9 / sent : 0.0);
    return 0;
}
