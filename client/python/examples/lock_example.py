#!/usr/bin/python3
"""Takes a lock and leads an election on a coordinator at 127.0.0.1:7400
(start one with `make run`), then gives both up.

    /usr/bin/python3 client/python/examples/lock_example.py [HOST:PORT]
"""

import sys
import time
from pathlib import Path

try:
    import coordinator
except ImportError:  # run from a clone without pip install: the checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # client/python
    import coordinator

target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7400"

with coordinator.Client(target, holder="lock-example") as client:
    # A lock: wait up to 10s for it, renewed in the background, released at the end.
    with client.lock("examples/nightly-report", wait=10) as lease:
        print(f"locked {lease.name} with fencing token {lease.token}")
        for step in range(3):
            if not lease.valid():  # or lease.lost.is_set()
                raise SystemExit("lost the lock: stopping")
            print(f"  working, step {step} (valid for {lease.remaining():.1f}s more)")
            time.sleep(1)
    print("released:", not client.describe("examples/nightly-report").held)

    # Someone else asking now gets it at once; while held, NotAcquired names the holder.
    lease = client.lock("examples/nightly-report", wait=0)
    try:
        client.lock("examples/nightly-report", wait=0)
    except coordinator.NotAcquired as e:
        when = f", free in {e.retry_after:.1f}s at the latest" if e.retry_after is not None else ""
        print(f"second lock refused: held by {e.holder}{when}")
    lease.release()

    # An election: lead, proclaim a value, watch it, resign.
    with client.observe("examples/leader") as events:
        print("observed:", events.get(timeout=5).kind.name, "(initial)")
        with client.campaign("examples/leader", value="10.0.0.1:8080", wait=10) as lead:
            print(f"leading in term {lead.term}")
            lead.proclaim("10.0.0.2:8080")
            print("leader now:", client.leader("examples/leader").value.decode())
        for _ in range(3):
            print("observed:", events.get(timeout=5).kind.name)
