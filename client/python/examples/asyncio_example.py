#!/usr/bin/python3
"""The asyncio client (coordinator.aio): takes a lock, leads an election
while observing it, and hands a lock from one task to a waiting one, on a
coordinator at 127.0.0.1:7400 (start one with `make run`).

    /usr/bin/python3 client/python/examples/asyncio_example.py [HOST:PORT]
"""

import asyncio
import sys
from pathlib import Path

try:
    import coordinator.aio
except ImportError:  # run from a clone without pip install: the checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # client/python
    import coordinator.aio

import coordinator


async def main(target: str) -> None:
    async with coordinator.aio.Client(target, holder="asyncio-example") as client:
        # A lock: wait up to 10s for it, held in the default session, released at the end.
        async with client.lock("examples/async-report", wait=10) as lease:
            print(f"locked {lease.name} with fencing token {lease.token}")
            for step in range(3):
                if lease.lost.is_set():  # an event of the loop; lease.error says why
                    raise SystemExit(f"lost the lock: {lease.error}")
                print(f"  working, step {step} (valid for {lease.remaining():.1f}s more)")
                await asyncio.sleep(1)
        print("released:", not (await client.describe("examples/async-report")).held)

        # A second task waits for a lock the first holds, and gets it on release.
        first = await client.lock("examples/async-report", wait=0)
        waiter = asyncio.ensure_future(client.lock("examples/async-report", wait=10))
        await asyncio.sleep(0.5)
        print("waiting:", (await client.describe("examples/async-report")).waiters)
        await first.release()
        second = await waiter
        print(f"handed over: token {first.token} -> {second.token}")
        await second.release()

        # An election: observe it, lead, proclaim, resign.
        async with client.observe("examples/async-leader") as events:
            print("observed:", (await events.get(timeout=5)).kind.name, "(initial)")
            async with client.campaign("examples/async-leader", value="10.0.0.1:8080", wait=10) as lead:
                print(f"leading in term {lead.term}")
                await lead.proclaim("10.0.0.2:8080")
                print("leader now:", (await client.leader("examples/async-leader")).value.decode())
            async for event in events:
                print("observed:", event.kind.name)
                if event.kind == coordinator.EventKind.VACANT:
                    break


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7400"))
