"""What the smoke clients of the impaired servers share: starting the server under test and
reading the address it announces, and a list of named checks that decides the verdict.

Standard library only.
"""

from __future__ import annotations

import json
import subprocess


def start_server(cmd: list[str]):
    """Start an impaired server; returns the process, the (host, port) of its
    "listening on HOST:PORT" line, and that line."""
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    first = srv.stdout.readline().strip()
    try:
        host, port = first.rsplit(" ", 1)[1].split(":")
        return srv, (host, int(port)), first
    except (IndexError, ValueError):
        srv.kill()
        raise SystemExit(f"the server did not announce its address: {first!r}")


class Checks:
    """Named checks, printed as they are made; the smoke passes when none failed."""

    def __init__(self):
        self.failures: list[str] = []

    def __call__(self, ok, what: str):
        print(("  ok   " if ok else "  FAIL ") + what)
        if not ok:
            self.failures.append(what)


def stop_server(srv) -> dict:
    """Stop the server with SIGTERM and return its ground truth (its last line, JSON)."""
    srv.terminate()
    out, _ = srv.communicate(timeout=10)
    return json.loads(out.strip().splitlines()[-1])
