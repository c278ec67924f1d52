"""Leases: what locks, shares, leaderships and groups share, and the Lease
of a lock or a share, for the sync and the asyncio Client alike."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Callable, Generic, Optional, Tuple, Type

from ._state import F, GrantState, HeldState, SessionState
from ._util import from_duration, from_timestamp

__all__ = ["Lease", "LeaseInfo", "Description"]

log = logging.getLogger("coordinator")


#: Runs an on_lost callback: at once, or on the asyncio Client's loop.
Dispatch = Callable[[Callable[[], None]], Any]


def _call(fn: Callable[[], None]) -> None:
    fn()


def exit_block(give_up: Callable[[], object], what: str, exc_type: Optional[Type[BaseException]]) -> None:
    """Gives a grant up at the end of a ``with`` block: an error while
    doing so does not hide the block's own exception."""
    if exc_type is None:
        give_up()
        return
    try:
        give_up()
    except Exception:  # the body's exception matters more
        log.warning("coordinator: could not give up %s", what, exc_info=True)


class Attached(Generic[F]):
    """What a Client holds in a session (the base of Lease, Leadership and
    Group): valid as long as the session.

    Validity is counted on this process's monotonic clock (time.monotonic):
    until the time the request that last renewed the session was *sent*,
    plus its TTL, minus a margin of max(TTL/10, 50ms). The coordinator's own
    expiry is later, so when ``lost`` is set because no renewal succeeded in
    time, nobody else can have been granted the name yet.
    """

    def __init__(self, state: HeldState[F], session: Any, dispatch: Optional[Dispatch] = None) -> None:
        self._held = state
        self._session = session
        self._dispatch: Dispatch = dispatch if dispatch is not None else _call

    @property
    def holder(self) -> str:
        """Who holds the grant: the Client's identity and a suffix unique to
        this acquisition."""
        return self._held.holder

    @property
    def session(self) -> Any:
        """The Session the grant is attached to: it lives and ends with it."""
        return self._session

    @property
    def ttl(self) -> float:
        """The session's time to live in seconds."""
        return self._held.session.ttl

    @property
    def deadline(self) -> float:
        """When the grant stops being valid, on the time.monotonic() clock,
        unless its session is renewed before. The coordinator's expiry is
        later."""
        return self._held.session.deadline

    @property
    def last_renewed(self) -> float:
        """When (time.monotonic()) the session's last answered renewal was sent."""
        return self._held.session.confirmed

    @property
    def lost(self) -> F:
        """Set the moment the grant ends involuntarily: its session lost or
        expired, or its Client closed. Not set by a release or resign."""
        return self._held.lost

    @property
    def ended(self) -> F:
        """Set the moment the grant ends, whatever the reason."""
        return self._held.ended

    @property
    def lost_at(self) -> Optional[float]:
        """When (time.monotonic()) ``lost`` was set, or None."""
        return self._held.lost_at

    @property
    def error(self) -> Optional[BaseException]:
        """Why the grant ended involuntarily (SessionEnded, LeaseExpired,
        ClientClosed…); None while held or after a release."""
        return self._held.error

    @property
    def done(self) -> bool:
        """Whether the grant ended (released, lost, expired or closed)."""
        return self._held.done

    def remaining(self) -> float:
        """Seconds of validity left by this process's clock (0 once ended)."""
        return self._held.remaining()

    def valid(self) -> bool:
        """Whether the grant is still held and within its validity. Check it
        (or ``lost``) before acting on what the grant protects."""
        return self._held.valid()

    def on_lost(self, callback: Callable[[Any], None]) -> None:
        """Calls ``callback(self)`` once when ``lost`` is set: on the thread
        that notices (the session's) for the sync Client, on the event loop
        for the asyncio one; at once when the grant ended already."""
        if not self._held.on_lost(lambda: self._dispatch(lambda: callback(self))):
            callback(self)


class Held(Attached[F]):
    """A grant on one name held through a Client (the base of Lease and
    Leadership)."""

    def __init__(self, state: GrantState[F], session: Any, dispatch: Optional[Dispatch] = None) -> None:
        super().__init__(state, session, dispatch)
        self._state = state

    @property
    def kind(self) -> str:
        """"lock", "semaphore", "read lock", "write lock" or "leadership"."""
        return self._state.kind

    @property
    def name(self) -> str:
        """The lock's name (for a leadership, the election's)."""
        return self._state.name

    @property
    def token(self) -> int:
        """The fencing token: larger than that of every earlier grant of the
        name. Hand it to the resource you protect and let it refuse lower
        ones."""
        return self._state.token

    @property
    def weight(self) -> int:
        """How much of the name's capacity the grant holds: 1 for a lock or
        a reader, the whole capacity for a writer."""
        return self._state.weight

    def __repr__(self) -> str:
        state = "held" if not self.done else ("lost" if self.lost.is_set() else "released")
        weight = f" weight={self.weight}" if self.kind != "lock" else ""
        return f"<{type(self).__name__} {self.name!r} holder={self.holder!r} token={self.token}{weight} {state}>"


def session_of(state: SessionState[F], view: Callable[[SessionState[F]], Any]) -> Any:
    """The one public Session (``view(state)``) of a session state."""
    with state.lock:
        if state.view is None:
            state.view = view(state)
        return state.view


class Lease(Held[threading.Event]):
    """A lock, or a share of a semaphore or read-write lock, held through a
    Client in a session, until it is released or lost.

    Check ``valid()`` (or the ``lost`` Event) before and while acting on what
    the lock protects, and hand ``token`` to the protected resource so that
    it can refuse the writes of an older holder. Used as a context manager,
    the lease is released when the block exits; an error while releasing
    does not hide the block's own exception.
    """

    def __init__(self, state: GrantState[threading.Event], session: Any, release: Callable[[], bool]) -> None:
        super().__init__(state, session)
        self._release = release

    def release(self) -> bool:
        """Gives the lease up on the coordinator, retrying transient errors
        for up to the Client's close timeout. True when the coordinator
        released it; False (no error) when it was not held any more (lost,
        or released before)."""
        return self._release()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        exit_block(self.release, self._state.describe(), exc_type)


@dataclass(frozen=True)
class LeaseInfo:
    """A lease as the coordinator reports it (Describe, List)."""

    name: str
    holder: str
    token: int
    #: The TTL granted or last renewed, in seconds.
    ttl: Optional[float]
    #: When the lease expires, by the store's clock.
    expires_at: Optional[datetime]
    #: The value an election leader proclaimed; empty for plain locks.
    value: bytes
    #: How much of the name's capacity the grant holds.
    weight: int = 1
    #: The session the lease is attached to, or "" for a lease of its own ttl.
    session_id: str = ""

    @classmethod
    def of(cls, m: Any) -> "LeaseInfo":
        """The LeaseInfo of a coordinator.v1.Lease message."""
        return cls(
            name=m.name,
            holder=m.holder,
            token=int(m.token),
            ttl=from_duration(m.ttl) if m.HasField("ttl") else None,
            expires_at=from_timestamp(m.expires_at) if m.HasField("expires_at") else None,
            value=bytes(m.value),
            weight=max(int(m.weight), 1),
            session_id=m.session_id,
        )


@dataclass(frozen=True)
class Description:
    """A name's current lease (Describe)."""

    name: str
    #: Whether the name is leased now.
    held: bool
    #: The current lease, when held.
    lease: Optional[LeaseInfo]
    #: A floor of the fencing tokens issued for the name.
    last_token: int
    #: How many callers are queued waiting for the name.
    waiters: int
    #: Every live grant, in token order (a semaphore's shares).
    holders: Tuple[LeaseInfo, ...] = ()
    #: The name's capacity: 1 for a lock.
    capacity: int = 1
    #: The sum of the waiters' weights.
    waiting_weight: int = 0

    @classmethod
    def of(cls, name: str, resp: Any) -> "Description":
        """The Description of a DescribeResponse."""
        return cls(
            name=name,
            held=bool(resp.held),
            lease=LeaseInfo.of(resp.lease) if resp.held and resp.HasField("lease") else None,
            last_token=int(resp.last_token),
            waiters=int(resp.waiters),
            holders=tuple(LeaseInfo.of(m) for m in resp.holders),
            capacity=max(int(resp.capacity), 1),
            waiting_weight=int(resp.waiting_weight),
        )
