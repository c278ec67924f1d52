"""The Client: locks, semaphores, read-write locks, groups and elections
through one connection to a coordinator, each held in a session (see
_state.py)."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Optional, Type

from ._acquire import MAX_CAPACITY, MAX_GROUP_MEMBERS, RW_CAPACITY, RWLockBase, SemaphoreBase, check_members
from ._base import ClientBase
from ._core import DEFAULT_TARGET
from ._gen import pb
from ._rules import DEFAULT_TTL, LEADER_CAMPAIGNS_AGAIN, LEADER_EARLY_RETURN
from ._state import GrantState, SessionState
from ._stream import Stopped
from ._util import leader_backoff
from .election import LeaderInfo, Leadership, Observation, Value, as_bytes
from .errors import CoordinatorError, NotAcquired
from .group import Group, Member, lock_members
from .lease import Description, Lease, LeaseInfo, session_of
from .session import Session

__all__ = ["Client", "DEFAULT_TARGET", "DEFAULT_TTL", "Semaphore", "RWLock", "MAX_CAPACITY", "RW_CAPACITY",
           "MAX_GROUP_MEMBERS"]

log = logging.getLogger("coordinator")

Event = threading.Event


class Client(ClientBase[Event]):
    """A connection to one coordinator. Thread-safe: make one per process and
    share it; close it when done (or use it as a context manager).

    Every lease, share and leadership it holds is attached to a session: its
    default session (made on first need, with ``ttl``; a new one after it
    ended) or one of :meth:`session` passed as ``session=``. One operation
    stream per Client carries acquisitions, releases, campaigns and the
    sessions' renewals. The arguments are ClientBase's (coordinator._base).
    """

    def _flag_factory(self) -> Callable[[], Event]:
        return threading.Event

    # -- views of the core's states ----------------------------------------------

    def _session_view(self, s: SessionState[Event]) -> Session:
        view: Session = session_of(s, lambda st: Session(st, lambda: self._core.close_session(st)))
        return view

    def _lease(self, g: GrantState[Event]) -> Lease:
        lease = g.view = Lease(g, self._session_view(g.session), lambda: self._core.release(g))
        return lease

    def _share(self, kind: str, capacity: int, weight: int, wait: Optional[float], session: Optional[Session],
               name: str) -> Lease:
        a = self._core.acquisition(kind, name, wait, self._state_of(session), capacity, weight)
        return self._lease(self._core.acquire(a))

    # -- locks ----------------------------------------------------------------

    def lock(self, name: str, wait: Optional[float] = None, session: Optional[Session] = None) -> Lease:
        """Acquires the lock ``name``, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order with the other waiters,
        retrying transient errors meanwhile. Returns the Lease, held in
        ``session`` (default: the Client's default session); use it as a
        context manager to release it at the end::

            with client.lock("reports/nightly", wait=30) as lease:
                work(lease.token)

        Raises NotAcquired (naming the holder, and retry_after when known)
        when the wait ends first, and CoordinatorError for errors that waiting
        cannot fix (SessionEnded when ``session`` ended).
        """
        return self._share("lock", 0, 0, wait, session, name)

    def try_lock(self, name: str, session: Optional[Session] = None) -> Optional[Lease]:
        """Acquires the lock ``name`` if it is free (and nobody is queued for
        it), without waiting; None when someone else holds it (use
        ``lock(name, wait=0)`` to learn who, from NotAcquired)."""
        try:
            return self.lock(name, wait=0, session=session)
        except NotAcquired:
            return None

    def semaphore(self, name: str, capacity: int) -> "Semaphore":
        """The semaphore ``name`` of ``capacity`` (1 to MAX_CAPACITY): shares
        of it whose weights sum to at most the capacity, each a Lease of its
        own (see Semaphore). Every user of the name must agree on capacity."""
        return Semaphore(name, capacity, lambda kind, cap, weight, wait, session: self._share(
            kind, cap, weight, wait, session, name))

    def rwlock(self, name: str) -> "RWLock":
        """The read-write lock ``name``: many readers at once, or one writer
        (see RWLock)."""
        return RWLock(name, lambda kind, cap, weight, wait, session: self._share(
            kind, cap, weight, wait, session, name))

    # -- groups ---------------------------------------------------------------

    def lock_all(self, names: Iterable[str], wait: Optional[float] = None,
                 session: Optional[Session] = None) -> Group:
        """Acquires the locks ``names`` all at once, or none of them,
        waiting up to ``wait`` seconds (None: for ever; 0: not at all) as
        :meth:`lock` does: the group takes its place in the queue of every
        name at once, in arrival order. Returns the Group (a token per name),
        held in ``session`` (default: the Client's default session); use it
        as a context manager to release it at the end::

            with client.lock_all(["accounts/alice", "accounts/bob"], wait=30) as group:
                move(group.token("accounts/alice"), group.token("accounts/bob"))

        Raises NotAcquired (naming a name in the way and its holder) when
        the wait ends first, InvalidField (field "members") for no names,
        more than MAX_GROUP_MEMBERS or a name listed twice, and
        CoordinatorError for errors that waiting cannot fix."""
        return self.acquire_all(lock_members(names), wait, session)

    def try_lock_all(self, names: Iterable[str], session: Optional[Session] = None) -> Optional[Group]:
        """The Group of the locks ``names`` if every one is free (and nobody
        is queued for it), without waiting; None otherwise (use
        ``lock_all(names, wait=0)`` to learn which name and who, from
        NotAcquired). Nothing is held when it returns None."""
        try:
            return self.lock_all(names, wait=0, session=session)
        except NotAcquired:
            return None

    def acquire_all(self, members: Iterable[Member], wait: Optional[float] = None,
                    session: Optional[Session] = None) -> Group:
        """As :meth:`lock_all`, for members that are shares: each Member
        names a name with its capacity and the weight to hold (a lock, a
        semaphore's share and a read lock can be taken together)."""
        a = self._core.group_acquisition(check_members(members), wait, self._state_of(session))
        g = self._core.acquire(a)
        group = g.view = Group(g, self._session_view(g.session), lambda: self._core.release(g))
        return group

    def try_acquire_all(self, members: Iterable[Member], session: Optional[Session] = None) -> Optional[Group]:
        """As :meth:`try_lock_all`, for members that are shares."""
        try:
            return self.acquire_all(members, wait=0, session=session)
        except NotAcquired:
            return None

    # -- elections ------------------------------------------------------------

    def campaign(self, election: str, value: Value = b"", wait: Optional[float] = None,
                 session: Optional[Session] = None) -> Leadership:
        """Runs for leadership of ``election`` with ``value``, waiting up to
        ``wait`` seconds (None: for ever) in arrival order with the other
        candidates. Returns the Leadership, held in ``session`` (as for
        :meth:`lock`) until resigned or lost. Raises NotAcquired (naming the
        sitting leader) when the wait ends first."""
        return self._campaign(election, value, wait, session, None)

    def _campaign(self, election: str, value: Value, wait: Optional[float], session: Optional[Session],
                  stop: Optional[Event]) -> Leadership:
        a = self._core.acquisition("leadership", election, wait, self._state_of(session), value=as_bytes(value))
        g = self._core.acquire(a, stop)
        lead = g.view = Leadership(g, self._session_view(g.session), lambda: self._core.release(g),
                                   lambda data: self._core.proclaim(g, data))
        return lead

    def run_as_leader(self, election: str, fn: Callable[[Leadership], object], value: Value = b"",
                      session: Optional[Session] = None, stop: Optional[Event] = None) -> None:
        """Campaigns for ``election`` (see :meth:`campaign`), runs
        ``fn(leadership)`` while leader and resigns when fn returns or
        raises (its exception is logged); then campaigns again, as long as
        the proto's ClientRules.leader_campaigns_again says so, until
        ``stop`` is set or the Client closes. After fn returned early (within
        ClientRules.leader_early_return of its election, the leadership
        still held) it waits a backoff first (100ms doubling to 30s), so that
        a failing fn does not spin. fn must return when
        ``leadership.lost`` (or ``stop``) is set. Returns when stopped;
        raises ClientClosed when the Client closes, and the errors that
        waiting cannot fix (as Go's RunAsLeader)."""
        stop = stop if stop is not None else Event()
        backoff = leader_backoff()
        while not stop.is_set():
            try:
                lead = self._campaign(election, value, None, session, stop)
            except Stopped:
                return
            started = time.monotonic()
            try:
                fn(lead)
            except Exception:
                log.exception("coordinator: the leader's function of %r failed; resigning", election)
            ended = lead.lost.is_set()
            try:
                lead.resign()
            except CoordinatorError:
                log.warning("coordinator: could not resign %r", lead, exc_info=True)
            if not LEADER_CAMPAIGNS_AGAIN:
                return
            if ended or time.monotonic() - started >= LEADER_EARLY_RETURN:
                backoff.reset()
                continue
            try:
                self._core.pause(backoff.next(), stop)  # the next campaign raises ClientClosed after close()
            except Stopped:
                return

    def leader(self, election: str) -> Optional[LeaderInfo]:
        """The sitting leader of ``election``, or None."""
        resp = self._core.unary("Leader", pb.LeaderRequest(election=election))
        return LeaderInfo.of(resp.leader) if resp.has_leader else None

    def observe(self, election: str) -> Observation:
        """Opens an Observe stream on ``election``: an iterator of
        ObserveEvent, the first marked ``initial`` (the state when it opened),
        then every change. Close it when done (or use ``with``)."""
        return Observation(election, lambda closer: self._core.observe(election, closer), lambda: self.closed)

    # -- sessions -------------------------------------------------------------

    def session(self, ttl: Optional[float] = None) -> Session:
        """Creates a session of ``ttl`` seconds (default: the Client's ttl),
        renewed in the background until closed, lost or the Client closed.
        Pass it as ``session=`` to acquisitions and campaigns: every grant in
        it lives and ends with it. Use it as a context manager to close it
        (and release its grants, in one call) at the end::

            with client.session(ttl=10) as session:
                a = client.lock("parts/1", session=session)
                b = client.lock("parts/2", session=session)
        """
        return self._session_view(self._core.create_session(ttl))

    def default_session(self) -> Session:
        """The Client's default session, made (with the Client's ttl) if it
        has none or its last one ended: every acquisition and campaign
        without a ``session`` attaches to it."""
        return self._session_view(self._core.session_for(None))

    # -- inspection -----------------------------------------------------------

    def describe(self, name: str) -> Description:
        """The current lease of ``name``, if any, and its last token."""
        return Description.of(name, self._core.unary("Describe", pb.DescribeRequest(name=name)))

    def list_leases(self, prefix: str = "", page_size: int = 0) -> Iterator[LeaseInfo]:
        """Every lease held now under ``prefix``, in name order."""
        page_token = ""
        while True:
            resp = self._core.unary("List", pb.ListRequest(prefix=prefix, page_size=page_size, page_token=page_token))
            for m in resp.leases:
                yield LeaseInfo.of(m)
            page_token = resp.next_page_token
            if not page_token:
                return

    # -- closing --------------------------------------------------------------

    def close(self) -> None:
        """Ends every session and so every lease and leadership (``lost`` is
        set, ``error`` is ClientClosed), ends open Observe streams, closes
        the sessions on the coordinator (one CloseSession each releases their
        grants), best-effort for up to close_timeout, so that waiters need
        not wait for their TTLs, and closes the connection. Idempotent."""
        self._core.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()


class Semaphore(SemaphoreBase[Lease]):
    """A name of a fixed capacity whose shares ``acquire`` and
    ``try_acquire`` take: at most ``capacity`` weight held at once, across
    processes. Each share is a Lease of its own, with its own token,
    ``lost`` signal and release. Waiters are served in arrival order, a large
    request holding back later small ones, so that nobody starves. While the
    name is held or awaited, a request with another capacity raises
    CapacityMismatch. A Semaphore holds nothing itself."""

    def try_acquire(self, n: int = 1, session: Any = None) -> Optional[Lease]:
        """Takes ``n`` of the capacity if it is free now and nobody waits;
        None otherwise."""
        try:
            return self.acquire(n, wait=0, session=session)
        except NotAcquired:
            return None


class RWLock(RWLockBase[Lease]):
    """A read-write lock on a name: many readers at once, or one writer. It
    is a semaphore of capacity RW_CAPACITY whose readers take 1 and writers
    all of it, so it is fair: a writer waiting behind readers is granted
    before the readers that came after it. A writer's token is above every
    token granted before it: a resource that remembers the last writer's
    token refuses every lower one."""

    def try_read_lock(self, session: Any = None) -> Optional[Lease]:
        """A read share if no writer holds or waits; None otherwise."""
        try:
            return self.read_lock(wait=0, session=session)
        except NotAcquired:
            return None

    def try_write_lock(self, session: Any = None) -> Optional[Lease]:
        """The write lock if nobody holds or waits for it; None otherwise."""
        try:
            return self.write_lock(wait=0, session=session)
        except NotAcquired:
            return None
