"""Leases: what locks and leaderships share, and the Lease of a lock."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, List, Optional, Protocol, Tuple, runtime_checkable

from ._rules import RENEWAL_JITTER, RENEWALS_PER_TTL
from ._util import Backoff, drift_margin, from_duration, from_timestamp, jitter, renewal_backoff
from .errors import CoordinatorError, LeaseExpired

__all__ = ["Lease", "LeaseInfo", "Description"]

log = logging.getLogger("coordinator")


@runtime_checkable
class _LeaseHost(Protocol):
    """What a grant (a Lease or a Leadership) needs of the Client it was
    acquired through, and all it uses of it. Client implements it; it is for
    the Client's own grants, not for applications."""

    def grant_call(self, kind: str, request: Any) -> Tuple[Any, float]:
        """Makes the lease operation ``kind`` ("campaign", "resign"…) as the
        Client makes them (on its operation stream, or as a unary call), and
        returns the response and when the request was sent."""
        ...

    def end_grant(self, h: "_Held", err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        """Stops renewing h and ends it with err (setting ``lost`` when
        lost), unless it ended already. Returns (ended_now, prior_error)."""
        ...

    def grant_renewed(self, h: "_Held", sent: float, ttl: float) -> bool:
        """Records a renewal of h sent at ``sent`` (a proclamation); reports
        whether h is still held (not when its deadline had passed)."""
        ...

    def watch_lost(self, h: "_Held", callback: Callable[["_Held"], None]) -> bool:
        """Has ``callback(h)`` called, on a background thread, when h is
        lost; False, without it, when h is lost already."""
        ...

    def release_grant(self, h: "_Held", resign: bool) -> bool:
        """Ends h and gives it up on the coordinator (Release, or Resign),
        retrying transient errors for up to the close timeout. True when the
        coordinator gave it up now."""
        ...


class _Held:
    """A grant on a name that the Client's Renewals (keepalive.py) renew.

    Validity is counted on this process's monotonic clock (time.monotonic):
    a grant is valid until the time the request that granted or last renewed
    it was *sent*, plus its TTL, minus a margin of max(TTL/10, 50ms). The
    coordinator's own expiry is later, so when ``lost`` is set because no
    renewal succeeded in time, nobody else can have been granted the name yet.
    """

    kind = "lease"

    def __init__(self, host: _LeaseHost, name: str, holder: str, token: int, ttl: float, sent: float) -> None:
        self._host = host
        self._name = name
        self._holder = holder
        self._token = int(token)
        #: Set the moment the grant ends involuntarily: lost on the
        #: coordinator, expired on this process's clock before a renewal
        #: succeeded, or its Client closed. Not set by release()/resign().
        self.lost = threading.Event()
        #: Set the moment the grant ends, whatever the reason (released too).
        self.ended = threading.Event()
        # Guarded by the Renewals' lock (keepalive.py).
        self._callbacks: List[Callable[["_Held"], None]] = []
        self._ttl = ttl
        self._confirmed = sent
        self._deadline = sent
        self._next_renew = sent
        self._inflight_id: Optional[int] = None
        self._inflight_stream: object = None
        self._sent_at = 0.0
        self._want_send = False
        self._retry: Optional[Backoff] = None
        self._last_error: Optional[CoordinatorError] = None
        self._done = False
        self._error: Optional[BaseException] = None
        self._lost_at: Optional[float] = None
        self._version = 0
        #: The session the grant is attached to (session.py), or None for a
        #: grant renewed on its own. An attached grant's ttl, last renewal
        #: and deadline are its session's, guarded by the session's lock.
        self._session: Any = None
        self._granted(sent, ttl)

    # -- state, guarded by the Renewals' lock -------------------------------

    def _granted(self, sent: float, ttl: float) -> None:
        self._ttl = ttl
        self._confirmed = sent
        self._deadline = sent + ttl - drift_margin(ttl)
        self._next_renew = sent + jitter(ttl / RENEWALS_PER_TTL, RENEWAL_JITTER)
        self._retry = None
        self._last_error = None

    def _end(self, err: Optional[BaseException], lost: bool) -> bool:
        """Marks the grant ended with err (``lost`` set when lost); False
        when it had ended already."""
        if self._done:
            return False
        self._done = True
        self._error = err
        self._version += 1  # its renewal schedule is stale now
        if lost:
            self._lost_at = time.monotonic()
            self.lost.set()
        self.ended.set()
        return True

    def _renewal_failed(self, err: CoordinatorError) -> None:
        """Schedules the next try after a failed renewal: a backoff from
        ttl/20 (renewal_backoff), or the coordinator's retry_after."""
        if self._retry is None:
            self._retry = renewal_backoff(self._ttl)
        self._last_error = err
        delay = self._retry.next()
        if err.retry_after is not None:
            delay = max(delay, err.retry_after)
        self._next_renew = time.monotonic() + delay

    def _expired(self) -> LeaseExpired:
        """The error of a grant whose deadline passed before a renewal
        succeeded."""
        why = "no renewal was answered"
        if self._last_error is not None:
            why = f"the last renewal failed: {self._last_error}"
        err = LeaseExpired(f"{self._describe()} expired on this client before it could be renewed: {why}")
        if self._last_error is not None:
            err.__cause__ = self._last_error
        return err

    def _due(self) -> float:
        if self._want_send or self._inflight_id is not None or self._next_renew >= self._deadline:
            return self._deadline
        return self._next_renew

    # -- public --------------------------------------------------------------

    @property
    def name(self) -> str:
        """The lock's name (for a leadership, the election's)."""
        return self._name

    @property
    def holder(self) -> str:
        """Who holds the grant: the Client's identity and a suffix unique to
        this acquisition."""
        return self._holder

    @property
    def token(self) -> int:
        """The fencing token: larger than that of every earlier grant of the
        name, and the same across renewals. Hand it to the resource you
        protect and let it refuse lower ones."""
        return self._token

    @property
    def ttl(self) -> float:
        """The time to live in seconds, as last granted."""
        return self._ttl

    @property
    def deadline(self) -> float:
        """When the grant stops being valid, on the time.monotonic() clock,
        unless renewed before. The coordinator's expiry is later."""
        return self._deadline

    @property
    def last_renewed(self) -> float:
        """When (time.monotonic()) the last successful grant or renewal was
        sent."""
        return self._confirmed

    @property
    def session(self) -> Any:
        """The Session the grant is attached to (it lives and ends with it),
        or None for a grant of its own ttl, renewed on its own."""
        return self._session

    @property
    def lost_at(self) -> Optional[float]:
        """When (time.monotonic()) ``lost`` was set, or None."""
        return self._lost_at

    @property
    def error(self) -> Optional[BaseException]:
        """Why the grant ended involuntarily (LeaseNotHeld, LeaseExpired,
        ClientClosed…); None while held or after release()."""
        return self._error

    @property
    def done(self) -> bool:
        """Whether the grant ended (released, lost, expired or closed)."""
        return self.ended.is_set()

    def remaining(self) -> float:
        """Seconds of validity left by this process's clock (0 once ended)."""
        if self.ended.is_set():
            return 0.0
        return max(self._deadline - time.monotonic(), 0.0)

    def valid(self) -> bool:
        """Whether the grant is still held and within its validity. Check it
        (or ``lost``) before acting on what the grant protects."""
        return not self.ended.is_set() and time.monotonic() < self._deadline

    def on_lost(self, callback: Callable[["_Held"], None]) -> None:
        """Calls ``callback(self)`` once, on a background thread, when ``lost``
        is set; at once (on this thread) when it is set already."""
        if not self._host.watch_lost(self, callback):
            callback(self)

    def _run_callbacks(self) -> None:
        for cb in self._callbacks:
            try:
                cb(self)
            except Exception:  # a callback's failure must not hide the others
                log.exception("coordinator: on_lost callback of %s failed", self)
        self._callbacks = []

    def _describe(self) -> str:
        return f"{self.kind} {self._name!r} (token {self._token})"


class Lease(_Held):
    """A lock, or a share of a semaphore or read-write lock, held through a
    Client: a time-bounded grant of a name, renewed in the background until
    it is released or lost.

    Check ``valid()`` (or the ``lost`` Event) before and while acting on what
    the lock protects, and hand ``token`` to the protected resource so that
    it can refuse the writes of an older holder. Used as a context manager,
    the lease is released when the block exits; an error while releasing
    does not hide the block's own exception.
    """

    kind = "lock"

    def __init__(self, host: _LeaseHost, name: str, holder: str, token: int, ttl: float, sent: float,
                 weight: int = 1, kind: str = "lock") -> None:
        super().__init__(host, name, holder, token, ttl, sent)
        self._weight = int(weight)
        self.kind = kind

    @property
    def weight(self) -> int:
        """How much of the name's capacity the lease holds: 1 for a lock or
        a reader, the whole capacity for a writer."""
        return self._weight

    def release(self) -> bool:
        """Stops renewing the lease and gives it up on the coordinator,
        retrying transient errors for up to the Client's close timeout.

        Returns True when the coordinator released it, False when it was not
        held any more (expired, lost, or released before). Raises
        CoordinatorError for errors that retrying cannot fix.
        """
        return self._host.release_grant(self, resign=False)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.release()
            return
        try:
            self.release()
        except Exception:  # the body's exception matters more
            log.warning("coordinator: could not release %s", self._describe(), exc_info=True)

    def __repr__(self) -> str:
        state = "held" if not self.ended.is_set() else ("lost" if self.lost.is_set() else "released")
        weight = f" weight={self._weight}" if self.kind != "lock" else ""
        return f"<Lease {self._name!r} holder={self._holder!r} token={self._token}{weight} {state}>"


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
    def _from_pb(cls, m: Any) -> "LeaseInfo":
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
    def _from_pb(cls, name: str, resp: Any) -> "Description":
        """The Description of a DescribeResponse."""
        return cls(
            name=name,
            held=bool(resp.held),
            lease=LeaseInfo._from_pb(resp.lease) if resp.held and resp.HasField("lease") else None,
            last_token=int(resp.last_token),
            waiters=int(resp.waiters),
            holders=tuple(LeaseInfo._from_pb(m) for m in resp.holders),
            capacity=max(int(resp.capacity), 1),
            waiting_weight=int(resp.waiting_weight),
        )
