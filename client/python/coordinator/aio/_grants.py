"""The asyncio Lease, Group, Leadership and Session: views of the same
states as the sync ones (_state.py), whose ``lost`` and ``ended`` are
events of the event loop, and whose calls are awaited."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any, Awaitable, Callable, Generator, Generic, Optional, Type, TypeVar

from .._state import GrantState, GroupState, SessionState
from ..election import LeadershipBase, Value, as_bytes
from ..group import GroupBase
from ..lease import Dispatch, Held
from ..session import SessionBase

__all__ = ["LoopEvent", "Lease", "Group", "Leadership", "Session", "Acquisition"]

log = logging.getLogger("coordinator")


class LoopEvent:
    """An event of one asyncio loop that any thread may set: ``lost`` and
    ``ended`` of the asyncio grants and sessions, which the session's
    renewals (on a thread) may end. ``is_set()`` is true at once;
    ``await wait()`` returns once the loop has seen it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self._event: Optional[asyncio.Event] = None  # made on the loop, by wait()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody waits
            pass

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait(self) -> bool:
        """Returns (True) once the event is set."""
        if not self._set:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        return True

    def __repr__(self) -> str:
        return f"<LoopEvent {'set' if self._set else 'unset'}>"


async def _exit(give_up: Callable[[], Awaitable[bool]], what: str, exc_type: Optional[Type[BaseException]]) -> None:
    """Gives a grant up at the end of an ``async with`` block: an error
    while doing so does not hide the block's own exception."""
    if exc_type is None:
        await give_up()
        return
    try:
        await give_up()
    except Exception:  # the body's exception matters more
        log.warning("coordinator: could not give up %s", what, exc_info=True)


class Lease(Held[LoopEvent]):
    """A lock, or a share of a semaphore or read-write lock, held through a
    ``coordinator.aio.Client`` in a session until released or lost. Check
    ``valid()`` (or ``lost``) while acting on what it protects and hand
    ``token`` to the protected resource. Used with ``async with``, it is
    released when the block exits."""

    def __init__(self, state: GrantState[LoopEvent], session: Any, release: Callable[[], bool],
                 dispatch: Dispatch) -> None:
        super().__init__(state, session, dispatch)
        self._release = release

    async def release(self) -> bool:
        """Gives the lease up on the coordinator, retrying transient errors
        for up to the Client's close timeout. True when the coordinator
        released it; False (no error) when it was not held any more."""
        return await asyncio.to_thread(self._release)

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await _exit(self.release, repr(self), exc_type)


class Group(GroupBase[LoopEvent]):
    """A group of names acquired all at once through a
    ``coordinator.aio.Client`` (``lock_all``, ``acquire_all``), as the sync
    ``coordinator.Group``: a token per name (``token(name)``), released
    together, lost together. Used with ``async with``, it is released when
    the block exits."""

    def __init__(self, state: GroupState[LoopEvent], session: Any, release: Callable[[], bool],
                 dispatch: Dispatch) -> None:
        super().__init__(state, session, dispatch)
        self._release = release

    async def release(self) -> bool:
        """Gives every name of the group up on the coordinator at once,
        retrying transient errors for up to the Client's close timeout. True
        when the coordinator released them; False (no error) when none was
        held any more."""
        return await asyncio.to_thread(self._release)

    async def __aenter__(self) -> "Group":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await _exit(self.release, repr(self), exc_type)


class Leadership(LeadershipBase[LoopEvent]):
    """An election won through a ``coordinator.aio.Client``: a term in
    office, held in a session until resigned or lost. Used with ``async
    with``, it resigns when the block exits."""

    def __init__(self, state: GrantState[LoopEvent], session: Any, resign: Callable[[], bool],
                 proclaim: Callable[[bytes], None], dispatch: Dispatch) -> None:
        super().__init__(state, session, dispatch)
        self._resign, self._proclaim = resign, proclaim
        self._proclaim_lock = asyncio.Lock()

    async def proclaim(self, value: Value) -> None:
        """Publishes a new value as the sitting leader, as the sync
        Leadership.proclaim: never a new term; LeaseNotHeld (and ``lost``)
        when the term is over; a transient error leaves the leadership as it
        was."""
        async with self._proclaim_lock:
            await asyncio.to_thread(self._proclaim, as_bytes(value))

    async def resign(self) -> bool:
        """Steps down so that the next candidate is elected at once. True
        when it stepped down, False when the term was over already."""
        return await asyncio.to_thread(self._resign)

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await _exit(self.resign, repr(self), exc_type)


class Session(SessionBase[LoopEvent]):
    """A session of a ``coordinator.aio.Client`` (``await
    client.session(ttl=...)``, or its default session), as the sync
    ``coordinator.Session``: pass it as ``session=`` to acquisitions and
    campaigns; ``await session.close()`` (or ``async with``) ends them all
    and releases them in one call."""

    def __init__(self, state: SessionState[LoopEvent], close: Callable[[], None]) -> None:
        super().__init__(state)
        self._close = close

    async def close(self) -> None:
        """Ends every attached grant at once (``lost`` set, ``error``
        SessionEnded SESSION_CLOSED) and closes the session on the
        coordinator, which releases them all in one call. Idempotent."""
        await asyncio.to_thread(self._close)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        async def close() -> bool:
            await self.close()
            return True

        await _exit(close, f"session {self.id}", exc_type)


G = TypeVar("G", Lease, Group, Leadership)


class Acquisition(Generic[G]):
    """What ``lock()``, ``lock_all()`` and ``campaign()`` return: await it
    for the grant, or use it with ``async with`` to give the grant up when
    the block exits::

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

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        if self._grant is not None:
            await self._grant.__aexit__(exc_type, exc, tb)
