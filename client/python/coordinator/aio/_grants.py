"""The asyncio Lease and Leadership: the sync grants' state and rules
(lease._Held), with asyncio Events and coroutines for what talks to the
coordinator."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Generator, Generic, Optional, Protocol, Tuple, TypeVar

from .._acquire import UNARY
from ..election import Leadership as _SyncLeadership
from ..election import Value, as_bytes, next_call, proclaim_calls
from ..errors import CoordinatorError
from ..lease import Lease as _SyncLease
from ..lease import _Held

__all__ = ["Lease", "Leadership", "Acquisition"]

log = logging.getLogger("coordinator")

G = TypeVar("G", bound="_AsyncHeld")


class _AsyncLeaseHost(Protocol):
    """What an asyncio grant needs of the aio Client it was acquired
    through, and all it uses of it."""

    async def grant_call(self, method: str, request: Any) -> Tuple[Any, float]:
        """The unary call ``method`` ("Campaign"…); the response and when it
        was sent."""
        ...

    def end_grant(self, h: "_AsyncHeld", err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        """Stops renewing h and ends it, unless it ended already. Returns
        (ended_now, prior_error)."""
        ...

    def grant_renewed(self, h: "_AsyncHeld", sent: float, ttl: float) -> bool:
        """Records a renewal of h sent at ``sent``; whether h is still held."""
        ...

    def watch_lost(self, h: "_AsyncHeld", callback: Any) -> bool:
        """Has ``callback(h)`` called on the event loop when h is lost;
        False when it is lost already."""
        ...

    async def release_grant(self, h: "_AsyncHeld", resign: bool) -> bool:
        """Ends h and gives it up on the coordinator."""
        ...


class _AsyncHeld(_Held):
    """A grant renewed on the event loop. ``lost`` and ``ended`` are
    asyncio Events (``await lease.lost.wait()``); everything else is the
    sync grant's: validity from the send time of the last successful
    grant or renewal, minus max(ttl/10, 50ms)."""

    def __init__(self, host: _AsyncLeaseHost, name: str, holder: str, token: int, ttl: float, sent: float) -> None:
        super().__init__(host, name, holder, token, ttl, sent)  # type: ignore[arg-type]
        #: Set the moment the grant ends involuntarily: lost on the
        #: coordinator, expired on this process's clock before a renewal
        #: succeeded, or its Client closed. Not set by release()/resign().
        self.lost: asyncio.Event = asyncio.Event()  # type: ignore[assignment]
        #: Set the moment the grant ends, whatever the reason.
        self.ended: asyncio.Event = asyncio.Event()  # type: ignore[assignment]

    #: Whether giving it up is a Resign (a Leadership) rather than a Release.
    _resigns = False

    async def _give_up(self) -> bool:
        return await self._host.release_grant(self, resign=self._resigns)  # type: ignore[attr-defined]

    async def __aenter__(self: G) -> G:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self._give_up()
            return
        try:
            await self._give_up()
        except Exception:  # the body's exception matters more
            log.warning("coordinator: could not give up %s", self._describe(), exc_info=True)


class Lease(_AsyncHeld):
    """A lock, or a share of a semaphore or read-write lock, held through a ``coordinator.aio.Client``, renewed on the event
    loop until released or lost. Check ``valid()`` (or ``lost``) while acting
    on what it protects and hand ``token`` to the protected resource. Used
    with ``async with``, it is released when the block exits."""

    def __init__(self, host: _AsyncLeaseHost, name: str, holder: str, token: int, ttl: float, sent: float,
                 weight: int = 1, kind: str = "lock") -> None:
        super().__init__(host, name, holder, token, ttl, sent)
        self.kind, self._weight = kind, int(weight)  # "semaphore", "read lock"… for a share

    weight = _SyncLease.weight

    async def release(self) -> bool:
        """Stops renewing the lease and gives it up on the coordinator,
        retrying transient errors for up to the Client's close timeout.
        True when the coordinator released it, False when it was not held
        any more."""
        return await self._give_up()

    __repr__ = _SyncLease.__repr__


class Leadership(_AsyncHeld):
    """An election won through a ``coordinator.aio.Client``: a term in
    office, renewed on the event loop until resigned or lost. Used with
    ``async with``, it resigns when the block exits."""

    kind = "leadership"
    _resigns = True

    election = _SyncLeadership.election
    candidate = _SyncLeadership.candidate
    term = _SyncLeadership.term
    value = _SyncLeadership.value
    __repr__ = _SyncLeadership.__repr__

    def __init__(self, host: _AsyncLeaseHost, election: str, candidate: str, term: int, ttl: float, sent: float,
                 value: bytes) -> None:
        super().__init__(host, election, candidate, term, ttl, sent)
        self._value = value
        self._proclaim_lock = asyncio.Lock()

    async def proclaim(self, value: Value) -> None:
        """Publishes a new value as the sitting leader (it renews the term
        too), as the sync Leadership.proclaim: never a new term; LeaseNotHeld
        (and ``lost``) when the term is over; a transient error leaves the
        leadership as it was."""
        host: _AsyncLeaseHost = self._host  # type: ignore[assignment]
        async with self._proclaim_lock:
            calls = proclaim_calls(self, host, as_bytes(value))
            op = next_call(calls)
            while op is not None:
                kind, req = op
                try:
                    answer, err = await host.grant_call(UNARY[kind], req), None
                except CoordinatorError as e:
                    answer, err = None, e
                op = next_call(calls, answer, err)

    async def resign(self) -> bool:
        """Stops renewing and steps down so that the next candidate is
        elected at once. True when it stepped down, False when the term was
        over already."""
        return await self._give_up()


class Acquisition(Generic[G]):
    """What ``lock()`` and ``campaign()`` return: await it for the grant, or
    use it with ``async with`` to give the grant up when the block exits::

        lease = await client.lock("jobs/nightly")
        async with client.lock("jobs/nightly") as lease:
            ...
    """

    __slots__ = ("_coro", "_grant")

    def __init__(self, coro: Awaitable[G]) -> None:
        self._coro = coro
        self._grant: Optional[G] = None

    def __await__(self) -> Generator[Any, None, G]:
        return self._coro.__await__()

    async def __aenter__(self) -> G:
        self._grant = await self._coro
        return self._grant

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self._grant is not None:
            await self._grant.__aexit__(exc_type, exc, tb)

