"""The coordinator client for asyncio programs, on ``grpc.aio``.

    import coordinator.aio

    async with coordinator.aio.Client("127.0.0.1:7400") as client:
        async with client.lock("reports/nightly", ttl=10, wait=30) as lease:
            await work(lease.token)        # check lease.valid() / lease.lost while working

The same client as ``coordinator.Client``, with the same guarantees, errors
(``coordinator.errors``) and timings (the proto's ClientRules): a held Lease
or Leadership renews itself on the event loop about every ttl/3; its
validity is counted on this process's monotonic clock from when the request
that granted or renewed it was sent, minus max(ttl/10, 50ms); when no
renewal succeeds in time, ``lost`` (an ``asyncio.Event``) is set at that
local deadline, before the coordinator could grant the name to anyone else,
and at once when the coordinator refuses a renewal; ``error`` says why.
Cancelling a task that waits in ``lock()`` or ``campaign()`` takes it out of
the coordinator's queue. ``close()`` ends and releases what is held.
``semaphore(name, capacity)`` and ``rwlock(name)`` are the sync Client's
too, their acquisitions awaitable or used with ``async with``. Sessions are
the sync Client's (``await client.session(ttl=...)``, ``session=``, the
default session), each renewed by a task with unary RenewSession calls.
"""

from ._client import DEFAULT_TARGET, Client, RWLock, Semaphore
from ._grants import Acquisition, Lease, Leadership
from ._observe import Observation
from ._session import Session

__all__ = [
    "Client", "DEFAULT_TARGET", "Lease", "Leadership", "Acquisition", "Observation", "Semaphore", "RWLock", "Session",
]
