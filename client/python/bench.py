#!/usr/bin/python3
"""Acquire+release cycles per second through the Python client.

Each worker thread loops try_lock then release on a lock name of its own,
for a fixed duration, at concurrency 1 and 16 (all threads share one
Client, as an application would; its operations go over its one operation
stream, in its default session). Prints one line per concurrency, in the
form bench/clients.go reads:

    python-stream c=1 N cycles/s
    python-stream c=16 N cycles/s

Usage: /usr/bin/python3 client/python/bench.py HOST:PORT [--duration SECONDS] [--concurrency 1,16]
       [--token TOKEN]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import List

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))  # client/python

import coordinator  # noqa: E402


def run(client: coordinator.Client, concurrency: int, duration: float) -> float:
    prefix = f"bench/python/{uuid.uuid4().hex[:8]}"
    counts: List[int] = [0] * concurrency
    errors: List[BaseException] = []
    start_gate = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    def worker(i: int) -> None:
        name = f"{prefix}/{i}"
        start_gate.wait()
        n = 0
        try:
            while not stop.is_set():
                lease = client.try_lock(name)
                if lease is None:
                    raise RuntimeError(f"{name} was not free")
                lease.release()
                n += 1
        except BaseException as e:
            errors.append(e)
            stop.set()
        counts[i] = n

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.perf_counter()
    stop.wait(duration)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", nargs="?", default=os.environ.get("COORDINATOR_ADDR", "127.0.0.1:7400"))
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per concurrency (default 5)")
    ap.add_argument("--concurrency", default="1,16", help="comma-separated thread counts (default 1,16)")
    ap.add_argument("--token", default=None, help="bearer token (sent over plaintext)")
    args = ap.parse_args()

    with coordinator.Client(args.target, token=args.token, insecure_token=bool(args.token)) as client:
        client.describe("bench/python/warmup")  # connect first
        with client.lock(f"bench/python/warmup/{uuid.uuid4().hex[:8]}", wait=0):  # the stream and session too
            pass
        for c in (int(x) for x in args.concurrency.split(",") if x.strip()):
            print(f"python-stream c={c} {run(client, c, args.duration):.0f} cycles/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
