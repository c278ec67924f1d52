"""The liveness model: a session, and the grants attached to it.

Every lease, semaphore share, read-write lock, leadership and group a
Client holds is attached to a session (etcd's ``concurrency.Session`` is
the model): a lease of its own on the coordinator (an id, a ttl, renewals,
expiry by the store's clock) that one renewal keeps for all of its grants,
which end with it. The session's validity is counted on this process's monotonic clock
from when the last answered renewal was *sent*, plus its ttl, minus a margin
of max(ttl/10, 50ms) (ClientRules.validity_margin_*): when no renewal is
answered by that local deadline the session expires there, before the
coordinator's own expiry, so before anyone else could be granted what it
held; a renewal the coordinator refuses (an ErrorReason marked ends_lease,
PermissionDenied) loses it at once. Either way every attached grant ends
(its ``lost`` set) with an error that says why.

A session's thread renews it about every ttl/3, moved by ±10%
(ClientRules.renewals_per_ttl, renewal_jitter_percent), through ``renew``:
the Client's one operation stream (see _core.Core.renew_session). It is the
only renewal there is.

These are the internals of the public Session, Lease, Leadership and Group
of both Clients (sync and asyncio), which are views of them: only ``lost`` and
``ended`` (Flags: a threading.Event, or an event of the asyncio loop)
differ.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Generic, List, NamedTuple, Optional, Protocol, Sequence, Set, Tuple, TypeVar

import grpc

from ._gen import pb
from ._rules import LEASE_ENDING_REASONS, RENEWAL_JITTER, RENEWALS_PER_TTL
from ._util import Backoff, drift_margin, from_duration, jitter, renewal_backoff
from .errors import ClientClosed, CoordinatorError, LeaseExpired, PermissionDenied, SessionEnded

log = logging.getLogger("coordinator")

SESSION_CLOSED = pb.ErrorReason.Name(pb.SESSION_CLOSED)


class Flag(Protocol):
    """What ``lost`` and ``ended`` are: set once, by any thread."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


F = TypeVar("F", bound=Flag)

#: Renews the session ``id`` within ``timeout`` seconds: (response, when
#: the renewal was sent). Raises CoordinatorError.
Renew = Callable[[str, float], Tuple[Any, float]]


class HeldState(Generic[F]):
    """What a session holds: a grant (GrantState) or a group of grants
    (GroupState), which ends with the session, its own release, or its
    Client's close."""

    def __init__(self, session: "SessionState[F]", kind: str, holder: str) -> None:
        self.session, self.kind, self.holder = session, kind, holder
        #: Set the moment it ends involuntarily: its session lost or
        #: expired, or its Client closed. Not set by a release or resign.
        self.lost: F = session.new_flag()
        #: Set the moment it ends, whatever the reason.
        self.ended: F = session.new_flag()
        self.done = False
        self.error: Optional[BaseException] = None
        self.lost_at: Optional[float] = None
        self.callbacks: List[Callable[[], None]] = []
        self.lock = threading.Lock()
        #: The public Lease, Leadership or Group of this state.
        self.view: Any = None

    def end(self, err: Optional[BaseException], lost: bool) -> bool:
        """Ends it with err (``lost`` set when lost); False when it had
        ended already."""
        with self.lock:
            if self.done:
                return False
            self.done, self.error = True, err
            callbacks, self.callbacks = (self.callbacks if lost else []), []
            if lost:
                self.lost_at = time.monotonic()
                self.lost.set()
            self.ended.set()
        self.session.detach(self)
        for cb in callbacks:
            try:
                cb()
            except Exception:  # a callback's failure must not hide the others
                log.exception("coordinator: an on_lost callback of %s failed", self.describe())
        return True

    def on_lost(self, callback: Callable[[], None]) -> bool:
        """Has callback called when it is lost; False when it ended already."""
        with self.lock:
            if self.done:
                return False
            self.callbacks.append(callback)
            return True

    def valid(self) -> bool:
        return not self.done and self.session.valid()

    def remaining(self) -> float:
        return 0.0 if self.done else self.session.remaining()

    def describe(self) -> str:
        raise NotImplementedError


class GrantState(HeldState[F]):
    """One grant (a lease, a share, a leadership) attached to a session."""

    def __init__(self, session: "SessionState[F]", kind: str, name: str, holder: str, token: int,
                 weight: int = 1, value: bytes = b"") -> None:
        super().__init__(session, kind, holder)
        self.name, self.token, self.weight, self.value = name, token, weight, value

    def describe(self) -> str:
        return f"{self.kind} {self.name!r} (token {self.token})"


class MemberGrant(NamedTuple):
    """One lease of a group: its name, fencing token and weight."""

    name: str
    token: int
    weight: int


class GroupState(HeldState[F]):
    """A group of grants, one per name, acquired at once by one holder and
    attached to one session: they are released together and end together."""

    def __init__(self, session: "SessionState[F]", holder: str, members: Sequence[MemberGrant]) -> None:
        super().__init__(session, "group", holder)
        self.members: Tuple[MemberGrant, ...] = tuple(members)

    def describe(self) -> str:
        tokens = ", ".join(f"{m.name!r} (token {m.token})" for m in self.members)
        return f"group of {tokens}"


class SessionState(Generic[F]):
    """A session and its grants (see the module doc)."""

    def __init__(self, session_id: str, ttl: float, sent: float, renew: Renew,
                 forget: Callable[["SessionState[F]"], None], new_flag: Callable[[], F]) -> None:
        self.id = session_id
        self.new_flag = new_flag
        self.lost: F = new_flag()
        self.ended: F = new_flag()
        self.lock = threading.Lock()
        self.grants: Set[HeldState[F]] = set()
        self.done = False
        self.error: Optional[BaseException] = None
        self.lost_at: Optional[float] = None
        #: The public Session of this state, once made (lease.session_of).
        self.view: Any = None
        self._renew, self._forget = renew, forget
        self._retry: Optional[Backoff] = None
        self._last_error: Optional[CoordinatorError] = None
        self._stop = threading.Event()
        self.renewed(sent, ttl)
        self._thread = threading.Thread(target=self._keep_alive, name="coordinator-session", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- validity --------------------------------------------------------------

    def renewed(self, sent: float, ttl: float) -> None:
        """Records a renewal sent at ``sent`` and answered with ``ttl``."""
        self.ttl, self.confirmed = ttl, sent
        self.deadline = sent + ttl - drift_margin(ttl)
        self.next_renew = sent + jitter(ttl / RENEWALS_PER_TTL, RENEWAL_JITTER)
        self._retry, self._last_error = None, None

    def valid(self) -> bool:
        return not self.done and time.monotonic() < self.deadline

    def remaining(self) -> float:
        return 0.0 if self.done else max(self.deadline - time.monotonic(), 0.0)

    # -- grants ------------------------------------------------------------------

    def attach(self, g: HeldState[F]) -> None:
        """Makes g a grant of the session; raises (and ends g with) the
        session's error when it ended meanwhile."""
        with self.lock:
            ended = self.done
            if not ended:
                self.grants.add(g)
        if ended:
            err = self.grant_error(g, self.error)
            g.end(err, lost=True)
            raise err

    def detach(self, g: HeldState[F]) -> None:
        with self.lock:
            self.grants.discard(g)

    # -- ending ------------------------------------------------------------------

    def end(self, err: Optional[BaseException], lost: bool) -> bool:
        """Ends the session and its grants (lost: with err, or SessionEnded
        SESSION_CLOSED after close()); False when it had ended already."""
        with self.lock:
            if self.done:
                return False
            self.done, self.error = True, err if lost else None
            grants, self.grants = list(self.grants), set()
            if lost:
                self.lost_at = time.monotonic()
                self.lost.set()
            self.ended.set()
        self._stop.set()
        for g in grants:
            g.end(self.grant_error(g, err), lost=True)
        self._forget(self)
        return True

    def ended_error(self) -> CoordinatorError:
        """The error of an acquisition in the session after it ended."""
        if isinstance(self.error, CoordinatorError):
            return self.error
        return SessionEnded(f"session {self.id} was closed", code=grpc.StatusCode.FAILED_PRECONDITION,
                            reason=SESSION_CLOSED, metadata={"session_id": self.id})

    def grant_error(self, g: HeldState[F], err: Optional[BaseException]) -> BaseException:
        """The error of the grant g when the session ends with err (None: close())."""
        if isinstance(err, ClientClosed):
            return err
        out: CoordinatorError
        if isinstance(err, LeaseExpired):
            out = LeaseExpired(f"{g.describe()}: {err}")
        elif err is None:
            out = SessionEnded(f"{g.describe()}: its session {self.id} was closed",
                               code=grpc.StatusCode.FAILED_PRECONDITION, reason=SESSION_CLOSED,
                               metadata={"session_id": self.id})
        else:
            code = err.code if isinstance(err, CoordinatorError) else None
            reason = err.reason if isinstance(err, CoordinatorError) else None
            out = SessionEnded(f"{g.describe()}: its session {self.id} was lost: {err}", code=code, reason=reason,
                               metadata={"session_id": self.id})
        out.__cause__ = err
        return out

    # -- renewals ------------------------------------------------------------------

    def _keep_alive(self) -> None:
        """Renews the session about every ttl/3 until it ends; failures are
        retried with the renewals' backoff until its local deadline."""
        while True:
            with self.lock:
                if self.done:
                    return
                now, deadline = time.monotonic(), self.deadline
                wake = min(self.next_renew, deadline)
            if now >= deadline:
                self.end(self._expired(), lost=True)
                return
            if now < wake:
                if self._stop.wait(wake - now):
                    return
                continue
            try:
                resp, sent = self._renew(self.id, deadline - now)
            except ClientClosed:
                return  # the Client's close ends it
            except CoordinatorError as err:
                if self._renewal_failed(err):
                    return
                continue
            with self.lock:
                if time.monotonic() < self.deadline and not self.done:
                    self.renewed(sent, from_duration(resp.session.ttl, self.ttl) or self.ttl)

    def _renewal_failed(self, err: CoordinatorError) -> bool:
        """After a failed renewal: loses the session (and returns True) when
        the coordinator refused it for good; otherwise it is retried after
        the renewals' backoff or the coordinator's retry_after."""
        if err.reason in LEASE_ENDING_REASONS or isinstance(err, PermissionDenied):
            self.end(err, lost=True)
            return True
        with self.lock:
            if self._retry is None:
                self._retry = renewal_backoff(self.ttl)
            self._last_error = err
            self.next_renew = time.monotonic() + max(self._retry.next(), err.retry_after or 0.0)
        log.warning("coordinator: session %s: renewal failed; retrying: %s", self.id, err)
        return False

    def _expired(self) -> LeaseExpired:
        why = "no renewal was answered"
        if self._last_error is not None:
            why = f"the last renewal failed: {self._last_error}"
        err = LeaseExpired(f"session {self.id} expired on this client before it could be renewed: {why}")
        err.__cause__ = self._last_error
        return err
