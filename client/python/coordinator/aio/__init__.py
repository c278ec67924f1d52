"""The coordinator client for asyncio programs.

    import coordinator.aio

    async with coordinator.aio.Client("127.0.0.1:7400") as client:
        async with client.lock("reports/nightly", wait=30) as lease:
            await work(lease.token)        # check lease.valid() / lease.lost while working

The same client as ``coordinator.Client``, on the same core, with the same
guarantees, errors (``coordinator.errors``) and timings (the proto's
ClientRules): every grant is held in a session (the default one, or
``session=await client.session(ttl=...)``) renewed over the Client's one
operation stream; ``lost`` (an event of the loop: ``await lease.lost.wait()``)
is set when the session is refused or its local deadline passes unrenewed,
before the coordinator could grant the name to anyone else, and ``error``
says why. Cancelling a task that waits in ``lock()`` or ``campaign()`` takes
it out of the coordinator's queue. ``close()`` ends and releases what is
held.
"""

from ._client import DEFAULT_TARGET, Client, RWLock, Semaphore
from ._grants import Acquisition, Group, Lease, Leadership, LoopEvent, Session
from ._observe import Observation

__all__ = [
    "Client", "DEFAULT_TARGET", "Lease", "Group", "Leadership", "Acquisition", "Observation", "Semaphore", "RWLock",
    "Session", "LoopEvent",
]
