"""The part every impaired reference server shares, whatever protocol it speaks.

An impaired server is an independent game server (written from a protocol's description, not
from tickswarm's code) that injects known impairments and counts them, so that the load
tool's measurements can be checked against ground truth. What does not depend on the
protocol is here, written once:

- the socket: UDP on 127.0.0.1, non-blocking, 4 MiB buffers, watched with select(2) (it
  takes a microsecond timeout; epoll and poll round up to whole milliseconds, which would add
  up to 1 ms to every tick and every delayed pong; there is one fd only);
- the receive path: at most 4096 datagrams per wake-up, so ticks are never starved;
- counters of malformed and ignored datagrams, by reason;
- injected delay: pongs leave `--pong-delay-ms` after their ping arrived, scheduled on a
  heap, never by blocking;
- injected loss: every K-th snapshot per client is not sent (`--drop-every`; the caller
  consumes its sequence number or tick first, so a client sees exactly those drops as gaps);
- the fixed-rate tick loop, with how late each tick ran (a server that fell behind says so
  in its ground truth rather than skewing a measurement silently);
- `serve`: signals end the run, the ground truth is printed on the way out.

Standard library only.
"""

from __future__ import annotations

import heapq
import json
import math
import selectors
import signal
import socket
import time


class ImpairedUdpServer:
    """Base class. A subclass keeps its clients in `self.clients` (by address) and provides
    `handle(data, addr, now)`, `do_tick(now)`, `expire(now)` and `send_pong(client, payload)`;
    it may override `on_stop()` (after the loop ends)."""

    # Count a handler's exception as malformed ("internal_error:<type>") instead of crashing.
    CATCH_HANDLER_ERRORS = False
    RECV_SIZE = 65536

    def __init__(self, port: int, tick_rate: int, pong_delay_ms: float, drop_every: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 4 * 1024 * 1024)
            except OSError:
                pass
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.sock.setblocking(False)
        self.sel = selectors.SelectSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.start = time.monotonic()

        self.tick_rate = tick_rate
        self.interval = 1.0 / tick_rate
        self.pong_delay = pong_delay_ms / 1000.0
        self.drop_every = drop_every
        self.clients: dict = {}
        self.pending_pongs: list = []  # heap of (due, n, addr, payload)
        self.pong_n = 0

        self.malformed_by_reason: dict[str, int] = {}
        self.ignored_by_reason: dict[str, int] = {}
        self.received = 0
        self.ticks_run = 0
        self.ticks_resynced = 0
        self.max_tick_lag_ms = 0.0
        self.ticks_late_1ms = 0
        self.ticks_late_5ms = 0
        self.stop_reason = None

    # ---- counters ----------------------------------------------------------------------

    def bad(self, reason: str):
        self.malformed_by_reason[reason] = self.malformed_by_reason.get(reason, 0) + 1

    def ignore(self, reason: str):
        self.ignored_by_reason[reason] = self.ignored_by_reason.get(reason, 0) + 1

    def ms32(self, now: float) -> int:
        """Milliseconds since the server started, as a wrapping u32 (the wire's clocks)."""
        return int((now - self.start) * 1000.0) & 0xFFFFFFFF

    # ---- injected impairments ----------------------------------------------------------

    def drops(self, nth_snapshot: int) -> bool:
        """Is a client's `nth_snapshot` (counted from 1) the injected loss?"""
        return self.drop_every > 0 and nth_snapshot % self.drop_every == 0

    def schedule_pong(self, now: float, addr, payload):
        """Answer a ping that arrived at `now` after the injected delay."""
        self.pong_n += 1
        heapq.heappush(self.pending_pongs, (now + self.pong_delay, self.pong_n, addr, payload))

    def flush_pongs(self, now: float):
        heap = self.pending_pongs
        while heap and heap[0][0] <= now:
            _, _, addr, payload = heapq.heappop(heap)
            c = self.clients.get(addr)
            if c is None:
                self.ignore("pong_client_gone")
                continue
            self.send_pong(c, payload)

    # ---- receive path and loop ---------------------------------------------------------

    def drain(self):
        for _ in range(4096):  # bounded so ticks are never starved
            try:
                data, addr = self.sock.recvfrom(self.RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # e.g. ICMP-reported errors on some platforms; nothing to read this time
                self.ignore("recv_error")
                return
            self.received += 1
            if not self.CATCH_HANDLER_ERRORS:
                self.handle(data, addr, time.monotonic())
                continue
            try:
                self.handle(data, addr, time.monotonic())
            except Exception as e:  # never crash on a datagram
                self.bad(f"internal_error:{type(e).__name__}")

    def on_stop(self):
        pass

    def loop_totals(self, started: float) -> dict:
        """How the tick loop kept up, and why it stopped: part of the ground truth."""
        return {
            "ticks_resynced": self.ticks_resynced,
            "max_tick_lag_ms": round(self.max_tick_lag_ms, 3),
            "ticks_late_1ms": self.ticks_late_1ms,
            "ticks_late_5ms": self.ticks_late_5ms,
            "uptime_s": round(time.monotonic() - started, 3),
            "cpu_s": round(time.process_time(), 3),
            "stop_reason": self.stop_reason,
        }

    def run(self, seconds: float, deadline_reason: str):
        """Tick at `tick_rate` until a signal sets `stop_reason` or `seconds` pass (0: no
        bound); expire silent clients once a second of ticks."""
        started = time.monotonic()
        deadline = started + seconds if seconds > 0 else math.inf
        next_tick = started + self.interval
        while self.stop_reason is None:
            now = time.monotonic()
            if now >= deadline:
                self.stop_reason = deadline_reason
                break
            wake = min(next_tick, deadline)
            if self.pending_pongs:
                wake = min(wake, self.pending_pongs[0][0])
            try:
                ready = self.sel.select(max(0.0, wake - now))
            except InterruptedError:
                ready = []
            if ready:
                self.drain()
            now = time.monotonic()
            self.flush_pongs(now)
            if now >= next_tick:
                lag = now - next_tick
                self.max_tick_lag_ms = max(self.max_tick_lag_ms, lag * 1000.0)
                self.ticks_late_1ms += lag > 0.001
                self.ticks_late_5ms += lag > 0.005
                if lag > 0.25:
                    # Hopelessly behind (e.g. the process was stopped): resync rather than
                    # bursting dozens of ticks at once. Tick numbers still advance by one.
                    self.ticks_resynced += 1
                    next_tick = now
                self.do_tick(now)
                next_tick += self.interval
                if self.ticks_run % self.tick_rate == 0:
                    self.expire(now)
        self.on_stop()


def serve(srv: ImpairedUdpServer, seconds: float, deadline_reason: str, truth) -> int:
    """Run `srv` until a signal or the deadline; then print `truth()`'s lines (the ground
    truth), whatever ended the run."""

    def on_signal(signum, _frame):
        srv.stop_reason = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"listening on 127.0.0.1:{srv.port}", flush=True)
    try:
        srv.run(seconds, deadline_reason)
    finally:
        for line in truth():
            print(line, flush=True)
        srv.sock.close()
    return 0


def add_impairment_args(p, dropped: str):
    """The options every impaired server takes: its port and the two injected impairments.
    `dropped` says what a dropped snapshot still consumes (a sequence number, a tick)."""
    p.add_argument("--port", type=int, default=0, help="UDP port on 127.0.0.1 (0 = ephemeral)")
    p.add_argument("--drop-every", type=int, default=0,
                   help=f"do not send every K-th snapshot per client; its {dropped} is "
                        "consumed (0 = off)")
    p.add_argument("--pong-delay-ms", type=float, default=0.0,
                   help="delay before answering a ping (scheduled, never blocks)")


def serve_json_totals(srv: ImpairedUdpServer, seconds: float, deadline_reason: str, totals) -> int:
    """`serve`, with the ground truth as one JSON line: `totals(started)`, a dict."""
    started = time.monotonic()
    return serve(srv, seconds, deadline_reason,
                 lambda: [json.dumps(totals(started), separators=(",", ":"))])
