// The real ZergCity game server's network layer (Blubagoo/sims_3000: src/net, src/core/Logger),
// built from its own sources by build.sh, driven by this small loop instead of its
// Application (which needs SDL3 and EnTT, neither packaged in Debian).
//
//     zergcity_real_server PORT SECONDS
//
// What this loop adds, and nothing else: NetworkServer::update every 10 ms, a 20 Hz tick
// (setCurrentTick), and, standing in for the game's SyncSystem, one StateUpdate per tick in
// which Inputs arrived (one entity created per Input, 24 bytes of component data; every
// 20th tick's update carries 1,500 bytes, so LZ4 runs). Every wire rule (envelope, Join,
// JoinAccept, ServerStatus, PlayerList, Heartbeat and its 10 s drop, Reconnect, rate limits,
// the 4-peer ENet host) is the real server's own code.
//
// Prints "LISTENING <port>" and, once a second and at exit,
// "STATS clients=.. inputs=.. updates=..".
#include "sims3000/net/ENetTransport.h"
#include "sims3000/net/INetworkHandler.h"
#include "sims3000/net/NetworkServer.h"
#include "sims3000/net/ClientMessages.h"
#include "sims3000/net/ServerMessages.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using namespace sims3000;

struct InputSink : INetworkHandler {
    unsigned long inputs = 0;
    std::vector<std::uint32_t> pending;
    bool canHandle(MessageType t) const override { return t == MessageType::Input; }
    void handleMessage(PeerID, const NetworkMessage &m) override {
        const auto &in = static_cast<const NetInputMessage &>(m);
        inputs++;
        pending.push_back(static_cast<std::uint32_t>(in.input.playerId) << 24 |
                          static_cast<std::uint32_t>(inputs & 0xFFFFFF));
    }
};

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s PORT SECONDS\n", argv[0]);
        return 2;
    }
    ServerConfig cfg;
    cfg.port = static_cast<std::uint16_t>(std::atoi(argv[1]));
    int seconds = std::atoi(argv[2]);
    NetworkServer server(std::make_unique<ENetTransport>(), cfg);
    InputSink sink;
    server.registerHandler(&sink);
    if (!server.start()) return 1;
    std::printf("LISTENING %u\n", static_cast<unsigned>(cfg.port));
    std::fflush(stdout);
    using clock = std::chrono::steady_clock;
    auto start = clock::now(), last = start, next_tick = start, next_stats = start;
    SimulationTick tick = 0;
    unsigned long updates = 0;
    while (clock::now() - start < std::chrono::seconds(seconds)) {
        auto now = clock::now();
        server.update(std::chrono::duration<float>(now - last).count());
        last = now;
        while (now >= next_tick) {
            next_tick += std::chrono::milliseconds(50);
            server.setCurrentTick(++tick);
            if (!sink.pending.empty()) {
                StateUpdateMessage u;
                u.tick = tick;
                for (std::size_t i = 0; i < sink.pending.size(); i++) {
                    std::size_t n = (tick % 20 == 0 && i == 0) ? 1500 : 24;
                    std::vector<std::uint8_t> data(n);
                    for (std::size_t k = 0; k < n; k++) data[k] = static_cast<std::uint8_t>(k % 7);
                    u.addCreate(sink.pending[i], data);
                }
                sink.pending.clear();
                server.broadcastStateUpdate(u);
                updates++;
            }
        }
        if (now >= next_stats) {
            next_stats += std::chrono::seconds(1);
            std::printf("STATS clients=%u inputs=%lu updates=%lu\n", server.getClientCount(),
                        sink.inputs, updates);
            std::fflush(stdout);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("STATS clients=%u inputs=%lu updates=%lu\n", server.getClientCount(), sink.inputs,
                updates);
    std::fflush(stdout);
    server.stop();
    return 0;
}
