"""The asyncio Client: the sync Client's operations as coroutines, on the
same core (one operation stream, sessions renewed over it)."""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Optional, Sequence, Type

from .._acquire import RWLockBase, SemaphoreBase, check_members
from .._base import ClientBase
from .._core import DEFAULT_TARGET
from .._gen import pb
from .._rules import LEADER_CAMPAIGNS_AGAIN, LEADER_EARLY_RETURN
from .._state import GrantState, SessionState
from .._util import leader_backoff
from ..election import LeaderInfo, Value, as_bytes
from ..errors import CoordinatorError, NotAcquired
from ..group import Member, lock_members
from ..lease import Description, LeaseInfo, session_of
from ._grants import Acquisition, Group, Lease, Leadership, LoopEvent, Session
from ._observe import Observation

__all__ = ["Client", "DEFAULT_TARGET", "Semaphore", "RWLock"]

log = logging.getLogger("coordinator")


class Client(ClientBase[LoopEvent]):
    """A connection to one coordinator for asyncio programs: the sync
    ``coordinator.Client``'s operations as coroutines, with its arguments,
    guarantees and errors. Make it in a coroutine (its events belong to the
    running loop), share it between the loop's tasks, and close it when done
    (``async with``).

    Like the sync Client it has one operation stream, which carries
    acquisitions, releases, campaigns and the sessions' renewals (on a
    thread of the core); the loop awaits their results. Cancelling a task
    that waits in ``lock()`` or ``campaign()`` takes it out of the
    coordinator's queue. Calls that do not wait on the coordinator's queues
    (describe, release, session close…) run in a worker thread.
    """

    def _flag_factory(self) -> Callable[[], LoopEvent]:
        loop = asyncio.get_running_loop()
        #: Set by close(): ends retry pauses.
        self._closing = LoopEvent(loop)
        return lambda: LoopEvent(loop)

    async def _pause(self, seconds: float) -> bool:
        """Sleeps ``seconds``, or until close(); True when closed."""
        try:
            await asyncio.wait_for(self._closing.wait(), max(seconds, 0.0))
        except asyncio.TimeoutError:
            pass
        return self.closed

    # -- views of the core's states ----------------------------------------------

    def _session_view(self, s: SessionState[LoopEvent]) -> Session:
        view: Session = session_of(s, lambda st: Session(st, lambda: self._core.close_session(st)))
        return view

    async def _share(self, kind: str, capacity: int, weight: int, wait: Optional[float],
                     session: Optional[Session], name: str) -> Lease:
        a = self._core.acquisition(kind, name, wait, self._state_of(session), capacity, weight)
        g = await self._core.acquire_async(a, self._pause)
        lease = g.view = Lease(g, self._session_view(g.session), lambda: self._core.release(g),
                               asyncio.get_running_loop().call_soon_threadsafe)
        return lease

    async def _group(self, members: Sequence[Member], wait: Optional[float], session: Optional[Session]) -> Group:
        a = self._core.group_acquisition(members, wait, self._state_of(session))
        g = await self._core.acquire_async(a, self._pause)
        group = g.view = Group(g, self._session_view(g.session), lambda: self._core.release(g),
                               asyncio.get_running_loop().call_soon_threadsafe)
        return group

    async def _campaign(self, election: str, value: Value, wait: Optional[float],
                        session: Optional[Session]) -> Leadership:
        a = self._core.acquisition("leadership", election, wait, self._state_of(session), value=as_bytes(value))
        g: GrantState[LoopEvent] = await self._core.acquire_async(a, self._pause)
        lead = g.view = Leadership(g, self._session_view(g.session), lambda: self._core.release(g),
                                   lambda data: self._core.proclaim(g, data),
                                   asyncio.get_running_loop().call_soon_threadsafe)
        return lead

    # -- locks ----------------------------------------------------------------

    def lock(self, name: str, wait: Optional[float] = None, session: Optional[Session] = None) -> Acquisition[Lease]:
        """Acquires the lock ``name``, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order with the other waiters,
        retrying transient errors meanwhile. Await it for the Lease, or use
        it with ``async with`` to release the lease when the block exits::

            async with client.lock("reports/nightly", wait=30) as lease:
                await work(lease.token)

        Raises NotAcquired (naming the holder) when the wait ends first.
        Cancelling the task that waits gives up its place in the queue (and a
        grant that came meanwhile)."""
        return Acquisition(self._share("lock", 0, 0, wait, session, name))

    async def try_lock(self, name: str, session: Optional[Session] = None) -> Optional[Lease]:
        """The Lease of ``name`` if it is free (and nobody is queued for it),
        without waiting; None when someone else holds it."""
        try:
            return await self.lock(name, wait=0, session=session)
        except NotAcquired:
            return None

    def semaphore(self, name: str, capacity: int) -> "Semaphore":
        """The semaphore ``name`` of ``capacity``, as the sync Client's:
        ``await sem.acquire(n)`` or ``async with sem.acquire(n) as share``."""
        return Semaphore(name, capacity, lambda kind, cap, weight, wait, session: Acquisition(self._share(
            kind, cap, weight, wait, session, name)))

    def rwlock(self, name: str) -> "RWLock":
        """The read-write lock ``name``, as the sync Client's: ``async with
        rw.read_lock()`` (or ``write_lock()``)."""
        return RWLock(name, lambda kind, cap, weight, wait, session: Acquisition(self._share(
            kind, cap, weight, wait, session, name)))

    # -- groups ---------------------------------------------------------------

    def lock_all(self, names: Iterable[str], wait: Optional[float] = None,
                 session: Optional[Session] = None) -> Acquisition[Group]:
        """Acquires the locks ``names`` all at once, or none of them, as the
        sync Client's lock_all: waiting up to ``wait`` seconds (None: for
        ever; 0: not at all) in the queue of every name at once. Await it
        for the Group, or use it with ``async with`` to release the group
        when the block exits::

            async with client.lock_all(["accounts/alice", "accounts/bob"], wait=30) as group:
                await move(group.token("accounts/alice"), group.token("accounts/bob"))

        Raises NotAcquired (naming a name in the way) when the wait ends
        first, and InvalidField (field "members") at once for no names, too
        many or a name listed twice. Cancelling the task that waits gives
        up its place in the queues (and a grant that came meanwhile)."""
        return self.acquire_all(lock_members(names), wait, session)

    async def try_lock_all(self, names: Iterable[str], session: Optional[Session] = None) -> Optional[Group]:
        """The Group of the locks ``names`` if every one is free (and nobody
        is queued for it), without waiting; None otherwise."""
        try:
            return await self.lock_all(names, wait=0, session=session)
        except NotAcquired:
            return None

    def acquire_all(self, members: Iterable[Member], wait: Optional[float] = None,
                    session: Optional[Session] = None) -> Acquisition[Group]:
        """As :meth:`lock_all`, for members that are shares (each Member a
        name, its capacity and the weight to hold)."""
        return Acquisition(self._group(check_members(members), wait, session))

    async def try_acquire_all(self, members: Iterable[Member], session: Optional[Session] = None) -> Optional[Group]:
        """As :meth:`try_lock_all`, for members that are shares."""
        try:
            return await self.acquire_all(members, wait=0, session=session)
        except NotAcquired:
            return None

    # -- elections ------------------------------------------------------------

    def campaign(self, election: str, value: Value = b"", wait: Optional[float] = None,
                 session: Optional[Session] = None) -> Acquisition[Leadership]:
        """Runs for leadership of ``election`` with ``value``, waiting up to
        ``wait`` seconds (None: for ever) in arrival order with the other
        candidates. Await it for the Leadership, or use it with ``async
        with`` to resign when the block exits. Raises NotAcquired (naming the
        sitting leader) when the wait ends first."""
        return Acquisition(self._campaign(election, value, wait, session))

    async def run_as_leader(self, election: str, fn: Callable[[Leadership], Awaitable[object]], value: Value = b"",
                            session: Optional[Session] = None) -> None:
        """As the sync Client's: campaigns, awaits ``fn(leadership)`` while
        leader, resigns when it returns or raises (logged), and campaigns
        again after each leadership ends (ClientRules.leader_campaigns_again,
        with the leader_* backoff after an early return), until the task is
        cancelled; raises ClientClosed when the Client closes."""
        backoff = leader_backoff()
        while True:
            lead = await self._campaign(election, value, None, session)
            started = time.monotonic()
            try:
                await fn(lead)
            except Exception:
                log.exception("coordinator: the leader's function of %r failed; resigning", election)
            finally:
                ended = lead.lost.is_set()
                try:
                    await asyncio.shield(lead.resign())
                except CoordinatorError:
                    log.warning("coordinator: could not resign %r", lead, exc_info=True)
            if not LEADER_CAMPAIGNS_AGAIN:
                return
            if ended or time.monotonic() - started >= LEADER_EARLY_RETURN:
                backoff.reset()
            else:
                await self._pause(backoff.next())  # the next campaign raises ClientClosed after close()

    async def leader(self, election: str) -> Optional[LeaderInfo]:
        """The sitting leader of ``election``, or None."""
        resp = await asyncio.to_thread(self._core.unary, "Leader", pb.LeaderRequest(election=election))
        return LeaderInfo.of(resp.leader) if resp.has_leader else None

    def observe(self, election: str) -> Observation:
        """Opens an Observe stream on ``election``: an async iterator of
        ObserveEvent (see the sync Client's)."""
        return Observation(election, lambda closer: self._core.observe(election, closer), lambda: self.closed)

    # -- sessions -------------------------------------------------------------

    async def session(self, ttl: Optional[float] = None) -> Session:
        """Creates a session of ``ttl`` seconds (default: the Client's ttl),
        as the sync Client's: pass it as ``session=``; ``async with`` closes
        it (releasing its grants in one call) at the end."""
        return self._session_view(await asyncio.to_thread(self._core.create_session, ttl))

    async def default_session(self) -> Session:
        """The Client's default session, made if it has none or its last one
        ended, as the sync Client's."""
        return self._session_view(await asyncio.to_thread(self._core.session_for, None))

    # -- inspection -----------------------------------------------------------

    async def describe(self, name: str) -> Description:
        """The current lease of ``name``, if any, and its last token."""
        resp = await asyncio.to_thread(self._core.unary, "Describe", pb.DescribeRequest(name=name))
        return Description.of(name, resp)

    async def list_leases(self, prefix: str = "", page_size: int = 0) -> AsyncIterator[LeaseInfo]:
        """Every lease held now under ``prefix``, in name order (``async for``)."""
        page_token = ""
        while True:
            req = pb.ListRequest(prefix=prefix, page_size=page_size, page_token=page_token)
            resp = await asyncio.to_thread(self._core.unary, "List", req)
            for m in resp.leases:
                yield LeaseInfo.of(m)
            page_token = resp.next_page_token
            if not page_token:
                return

    # -- closing --------------------------------------------------------------

    async def close(self) -> None:
        """As the sync Client's close(): ends and releases what is held,
        ends waiting acquisitions (ClientClosed) and Observe streams, and
        closes the connection. Idempotent."""
        self._closing.set()
        await asyncio.to_thread(self._core.close)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()


class Semaphore(SemaphoreBase[Acquisition[Lease]]):
    """The sync Semaphore on asyncio: ``acquire`` (awaited, or with ``async
    with``) and ``try_acquire`` take shares, at most ``capacity`` weight held
    at once, served in arrival order."""

    async def try_acquire(self, n: int = 1, session: Any = None) -> Optional[Lease]:
        """Takes ``n`` of the capacity if it is free now and nobody waits;
        None otherwise."""
        try:
            return await self.acquire(n, wait=0, session=session)
        except NotAcquired:
            return None


class RWLock(RWLockBase[Acquisition[Lease]]):
    """The sync RWLock on asyncio: ``read_lock`` and ``write_lock`` are
    awaited, or used with ``async with``."""

    async def try_read_lock(self, session: Any = None) -> Optional[Lease]:
        """A read share if no writer holds or waits; None otherwise."""
        try:
            return await self.read_lock(wait=0, session=session)
        except NotAcquired:
            return None

    async def try_write_lock(self, session: Any = None) -> Optional[Lease]:
        """The write lock if nobody holds or waits for it; None otherwise."""
        try:
            return await self.write_lock(wait=0, session=session)
        except NotAcquired:
            return None
