"""Sessions: one liveness that many leases and leaderships attach to.

A Session is a lease of its own on the coordinator (an id, a ttl, renewals,
expiry by the store's clock) that keeps every grant acquired in it, as
etcd's ``concurrency.Session``: one renewal about every ttl/3 keeps them
all, and they end together. The renewals follow a lease's rules (the
proto's ClientRules): its validity is counted on this process's monotonic
clock from when the last answered renewal was sent, plus its ttl, minus
max(ttl/10, 50ms); a renewal the coordinator refuses (SESSION_EXPIRED,
SESSION_CLOSED, SESSION_NOT_FOUND, PermissionDenied…) loses it at once, and
none answered by that local deadline expires it there, before the
coordinator's own expiry. Then every attached grant ends (``lost`` set) with
an error that says why. ``close()`` ends them all locally at once and sends
one CloseSession, which releases them all on the coordinator.

An attached grant is not renewed on its own: its ttl, last renewal and
deadline are the session's. Releasing one of them is the usual
compare-and-set release, and the session goes on.

SessionCore holds the state and the rules, for the sync Session here and
the asyncio one (coordinator.aio) alike: they make the calls, sleep and
lock, each in its own way.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, List, Optional, Protocol, Set, Tuple

import grpc

from ._acquire import ReleaseSteps
from ._gen import pb
from ._rules import LEASE_ENDING_REASONS, RENEWAL_JITTER, RENEWALS_PER_TTL
from ._util import Backoff, drift_margin, from_duration, jitter, renewal_backoff
from .errors import ClientClosed, CoordinatorError, LeaseExpired, PermissionDenied, SessionEnded

__all__ = ["Session"]

log = logging.getLogger("coordinator")

_SESSION_CLOSED = pb.ErrorReason.Name(pb.SESSION_CLOSED)


class _SessionHost(Protocol):
    """What a sync Session needs of the Client that created it, and all it
    uses of it."""

    timeout: float
    close_timeout: float

    @property
    def closed(self) -> bool: ...

    def session_call(self, kind: str, request: Any, timeout: float) -> Tuple[Any, float]:
        """"renew_session" (over the operation stream, or the unary
        RenewSession) or "close_session" (CloseSession); the response and
        when it was sent."""
        ...

    def end_grant(self, h: Any, err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        """Ends the grant h, unless it ended already."""
        ...

    def forget_session(self, s: Any) -> None:
        """Drops s from the sessions that closing the Client closes."""
        ...


def session_choice(explicit: Any, ttl: Optional[float], enabled: bool) -> Tuple[Any, bool]:
    """The session of an acquisition's next call with this per-call ``ttl``
    and ``explicit`` session: (explicit, False), raising its error when it
    ended; (None, True) for the Client's default session, which only an
    acquisition without either gets, and only while it is ``enabled``; or
    (None, False) for a grant of its own ttl."""
    if explicit is not None:
        if explicit.done:
            raise explicit._ended_error()
        return explicit, False
    return None, ttl is None and enabled


def fall_back(err: CoordinatorError, enabled: bool) -> bool:
    """After the default session could not be created with err: raises err,
    unless the coordinator lacks sessions, when the default session is
    turned off (logged once); returns whether it is still enabled."""
    if err.code != grpc.StatusCode.UNIMPLEMENTED:
        raise err
    if enabled:
        log.warning("coordinator: the coordinator has no sessions; leases get TTLs of their own: %s", err)
    return False


def ended_default(err: CoordinatorError, s: Any, explicit: Any, again: bool) -> bool:
    """Whether an acquisition's call in session s that failed with err (the
    coordinator said the session ended) goes on in a new default session:
    once, when s was the default session. Ends s (and its grants) then."""
    if not again or s is None or s is explicit:
        return False
    s._end(err, lost=True)
    return True


class SessionCore:
    """A session's state and rules (see the module doc). The subclass gives
    ``lost`` and ``ended`` (Events) and the lock that guards the rest, and
    the state of its attached grants."""

    kind = "session"
    lost: Any
    ended: Any
    _lock: Any  # a threading.Lock, or nothing on the event loop

    def __init__(self, host: Any, session_id: str, ttl: float, sent: float) -> None:
        self._host = host
        self._id = session_id
        self._leases: Set[Any] = set()
        self._done = False
        self._error: Optional[BaseException] = None
        self._lost_at: Optional[float] = None
        self._retry: Optional[Backoff] = None
        self._last_error: Optional[CoordinatorError] = None
        self._renewed(sent, ttl)

    # -- public ---------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session's id on the coordinator: a capability of the Client's
        credential."""
        return self._id

    @property
    def ttl(self) -> float:
        """How long each renewal keeps the session (and its grants), in seconds."""
        return self._ttl

    @property
    def deadline(self) -> float:
        """When the session and every grant attached to it stop being valid,
        on the time.monotonic() clock, unless renewed before. The
        coordinator's expiry is later."""
        return self._deadline

    @property
    def last_renewed(self) -> float:
        """When (time.monotonic()) the last answered renewal was sent."""
        return self._confirmed

    @property
    def error(self) -> Optional[BaseException]:
        """Why the session ended involuntarily (SessionEnded, PermissionDenied,
        LeaseExpired, ClientClosed); None while it lives or after close()."""
        return self._error

    @property
    def done(self) -> bool:
        """Whether the session ended (closed, lost, expired, or its Client closed)."""
        return self._done

    @property
    def lost_at(self) -> Optional[float]:
        """When (time.monotonic()) ``lost`` was set, or None."""
        return self._lost_at

    @property
    def leases(self) -> Tuple[Any, ...]:
        """The grants attached to the session now."""
        return tuple(self._leases)

    def remaining(self) -> float:
        """Seconds of validity left by this process's clock (0 once ended)."""
        return 0.0 if self._done else max(self._deadline - time.monotonic(), 0.0)

    def valid(self) -> bool:
        """Whether the session lives and is within its validity."""
        return not self._done and time.monotonic() < self._deadline

    def __repr__(self) -> str:
        state = "live" if not self._done else ("lost" if self._lost_at is not None else "closed")
        return f"<Session {self._id!r} ttl={self._ttl} leases={len(self._leases)} {state}>"

    # -- state, guarded by the subclass's lock ----------------------------------

    def _renewed(self, sent: float, ttl: float) -> None:
        """Records a renewal sent at ``sent`` and answered with ``ttl``: the
        session's deadline and every attached grant's move on."""
        self._ttl, self._confirmed = ttl, sent
        self._deadline = sent + ttl - drift_margin(ttl)
        self._next_renew = sent + jitter(ttl / RENEWALS_PER_TTL, RENEWAL_JITTER)
        self._retry, self._last_error = None, None
        for h in self._leases:
            self._follow(h)

    def _follow(self, h: Any) -> None:
        h._ttl, h._confirmed, h._deadline = self._ttl, self._confirmed, self._deadline

    def _renewal_failed(self, err: CoordinatorError) -> bool:
        """After a failed renewal: loses the session (and returns True) when
        the coordinator refused it for good; otherwise it is retried at
        ``_next_renew``, after the renewals' backoff or ``retry_after``."""
        with self._lock:
            lost = err.reason in LEASE_ENDING_REASONS or isinstance(err, PermissionDenied)
            if not lost:
                if self._retry is None:
                    self._retry = renewal_backoff(self._ttl)
                self._last_error = err
                self._next_renew = time.monotonic() + max(self._retry.next(), err.retry_after or 0.0)
        if lost:
            self._end(err, lost=True)
            return True
        log.warning("coordinator: session %s: renewal failed; retrying: %s", self._id, err)
        return False

    def _renewal_answered(self, sent: float, resp: Any) -> None:
        """Records the answer to a renewal sent at ``sent``, unless the
        deadline passed meanwhile (the next look at it expires the session)."""
        with self._lock:
            if time.monotonic() < self._deadline and not self._done:
                self._renewed(sent, from_duration(resp.session.ttl, self._ttl) or self._ttl)

    def _attach(self, h: Any) -> Optional[BaseException]:
        """Makes h a grant of the session (its ttl and deadline the
        session's); the error h ends with instead when the session ended."""
        with self._lock:
            if self._done:
                return self._grant_error(h, self._error)
            self._leases.add(h)
            h._session = self
            self._follow(h)
            return None

    def _detach(self, h: Any) -> None:
        with self._lock:
            self._leases.discard(h)

    def _end(self, err: Optional[BaseException], lost: bool) -> bool:
        """Ends the session and its grants with err; False when it had ended."""
        with self._lock:
            leases = self._end_state(err, lost)
        if leases is None:
            return False
        self._stop_renewing()
        for h in leases:
            self._host.end_grant(h, self._grant_error(h, err), lost=True)
        self._host.forget_session(self)
        return True

    def _stop_renewing(self) -> None:
        """Stops the renewals (the subclass's thread or task)."""
        raise NotImplementedError

    def _wake_at(self) -> float:
        """When the session next needs attention: its renewal or its deadline."""
        return min(self._next_renew, self._deadline)

    def _expired(self) -> LeaseExpired:
        """The error of a session whose deadline passed before a renewal was answered."""
        why = "no renewal was answered"
        if self._last_error is not None:
            why = f"the last renewal failed: {self._last_error}"
        err = LeaseExpired(f"session {self._id} expired on this client before it could be renewed: {why}")
        err.__cause__ = self._last_error
        return err

    def _end_state(self, err: Optional[BaseException], lost: bool) -> Optional[List[Any]]:
        """Marks the session ended with err (``lost`` set when lost); returns
        the grants to end with it, or None when it had ended already."""
        if self._done:
            return None
        self._done, self._error = True, err if lost else None
        if lost:
            self._lost_at = time.monotonic()
            self.lost.set()
        self.ended.set()
        leases, self._leases = list(self._leases), set()
        return leases

    def _ended_error(self) -> CoordinatorError:
        """The error of an acquisition in a session that ended."""
        prior = self._error
        if isinstance(prior, CoordinatorError):
            return prior
        return SessionEnded(f"session {self._id} was closed", code=grpc.StatusCode.FAILED_PRECONDITION,
                            reason=_SESSION_CLOSED, metadata={"session_id": self._id})

    def _grant_error(self, h: Any, err: Optional[BaseException]) -> BaseException:
        """The error of the grant h when the session ends with err (None:
        close())."""
        if isinstance(err, ClientClosed):
            return err
        if isinstance(err, LeaseExpired):
            out: CoordinatorError = LeaseExpired(f"{h._describe()}: {err}")
        elif err is None:
            out = SessionEnded(f"{h._describe()}: its session {self._id} was closed",
                               code=grpc.StatusCode.FAILED_PRECONDITION, reason=_SESSION_CLOSED,
                               metadata={"session_id": self._id})
        else:
            code = err.code if isinstance(err, CoordinatorError) else None
            reason = err.reason if isinstance(err, CoordinatorError) else None
            out = SessionEnded(f"{h._describe()}: its session {self._id} was lost: {err}", code=code, reason=reason,
                               metadata={"session_id": self._id})
        out.__cause__ = err
        return out

    def _renew_request(self) -> Any:
        return pb.RenewSessionRequest(session_id=self._id)

    def _close_request(self) -> Any:
        return pb.CloseSessionRequest(session_id=self._id)

    def _close_steps(self, ended_now: bool) -> ReleaseSteps:
        """The rules of CloseSession after close(): a lease's release's."""
        return ReleaseSteps(self._host.timeout, self._host.close_timeout, ended_now, self._error, self._host.closed)


class Session(SessionCore):
    """A session of a ``coordinator.Client`` (``client.session(ttl=...)``, or
    the Client's default session): see the module doc. Pass it as
    ``session=`` to lock, try_lock, semaphore and read-write lock acquires
    and campaign; use it as a context manager to close it at the end.

    ``lost`` (a threading.Event) is set when the session is lost, expired or
    its Client closed (``error`` says why), ``ended`` when it ends at all
    (close() too). A background thread renews it."""

    def __init__(self, host: _SessionHost, session_id: str, ttl: float, sent: float) -> None:
        self._lock = threading.Lock()
        #: Set the moment the session ends involuntarily: a renewal refused,
        #: none answered in time, or its Client closed. Not set by close().
        self.lost = threading.Event()
        #: Set the moment the session ends, whatever the reason.
        self.ended = threading.Event()
        self._stop = threading.Event()
        super().__init__(host, session_id, ttl, sent)
        self._thread = threading.Thread(target=self._keep_alive, name="coordinator-session", daemon=True)

    def _start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Ends every attached grant at once (``lost`` set, ``error``
        SessionEnded SESSION_CLOSED) and closes the session on the
        coordinator, which releases them all in one call, retrying transient
        errors for up to the Client's close timeout. Idempotent; raises
        CoordinatorError for errors that retrying cannot fix."""
        steps = self._close_steps(self._end(None, lost=False))
        while steps.calling():
            try:
                self._host.session_call("close_session", self._close_request(), steps.call_timeout())
                return
            except SessionEnded:
                return  # dead on the coordinator already: nothing holds its leases
            except CoordinatorError as err:
                time.sleep(steps.failed(err, self._host.closed))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # the body's exception matters more
            log.warning("coordinator: could not close session %s", self._id, exc_info=True)

    # -- internals ---------------------------------------------------------------

    def _stop_renewing(self) -> None:
        self._stop.set()

    def _keep_alive(self) -> None:
        """Renews the session about every ttl/3 until it ends (see the module
        doc); failures are retried with the renewals' backoff."""
        while True:
            with self._lock:
                if self._done:
                    return
                now, deadline, wake = time.monotonic(), self._deadline, self._wake_at()
            if now >= deadline:
                self._end(self._expired(), lost=True)
                return
            if now < wake:
                if self._stop.wait(wake - now):
                    return
                continue
            try:
                resp, sent = self._host.session_call("renew_session", self._renew_request(), deadline - now)
            except ClientClosed:
                return  # the Client's close ends it
            except CoordinatorError as err:
                if self._renewal_failed(err):
                    return
                continue
            self._renewal_answered(sent, resp)

    def _close_remote(self) -> None:
        """One CloseSession, best-effort, for a Client that closes (and ended
        the session with ClientClosed)."""
        try:
            self._host.session_call("close_session", self._close_request(), self._host.close_timeout)
        except CoordinatorError as e:
            log.warning("coordinator: could not close session %s on close; its leases expire after its TTL: %s",
                        self._id, e)
