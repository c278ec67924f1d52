"""Sessions: the one liveness that every lease and leadership of a Client
attaches to (see _state.py for the model and its rules).

A Client makes its default session on first need, with its ``ttl``, and a
new one after it ended; ``client.session(ttl=...)`` makes others, to pass as
``session=`` to acquisitions and campaigns. One renewal keeps every grant of
a session, and they end together: when the coordinator refuses a renewal
(SESSION_EXPIRED, SESSION_CLOSED, SESSION_NOT_FOUND, PermissionDenied…) or
none is answered by the session's local deadline, every attached grant's
``lost`` is set, before the coordinator could grant its name to anyone
else. ``close()`` ends them all locally at once and sends one CloseSession,
which releases them all on the coordinator.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any, Callable, Generic, Optional, Tuple, Type

from ._state import F, SessionState

__all__ = ["Session"]

log = logging.getLogger("coordinator")


class SessionBase(Generic[F]):
    """What the sync and the asyncio Session share: a view of the session's
    state."""

    def __init__(self, state: SessionState[F]) -> None:
        self._state = state

    @property
    def id(self) -> str:
        """The session's id on the coordinator: a capability of the Client's
        credential."""
        return self._state.id

    @property
    def ttl(self) -> float:
        """How long each renewal keeps the session (and its grants), in seconds."""
        return self._state.ttl

    @property
    def deadline(self) -> float:
        """When the session and every grant attached to it stop being valid,
        on the time.monotonic() clock, unless renewed before. The
        coordinator's expiry is later."""
        return self._state.deadline

    @property
    def last_renewed(self) -> float:
        """When (time.monotonic()) the last answered renewal was sent."""
        return self._state.confirmed

    @property
    def lost(self) -> F:
        """Set the moment the session ends involuntarily: a renewal refused,
        none answered in time, or its Client closed. Not set by close()."""
        return self._state.lost

    @property
    def ended(self) -> F:
        """Set the moment the session ends, whatever the reason."""
        return self._state.ended

    @property
    def error(self) -> Optional[BaseException]:
        """Why the session ended involuntarily (SessionEnded, PermissionDenied,
        LeaseExpired, ClientClosed); None while it lives or after close()."""
        return self._state.error

    @property
    def done(self) -> bool:
        """Whether the session ended (closed, lost, expired, or its Client closed)."""
        return self._state.done

    @property
    def lost_at(self) -> Optional[float]:
        """When (time.monotonic()) ``lost`` was set, or None."""
        return self._state.lost_at

    @property
    def leases(self) -> Tuple[Any, ...]:
        """The grants (Leases, Groups, Leaderships) attached to the session now."""
        with self._state.lock:
            return tuple(g.view for g in self._state.grants if g.view is not None)

    def remaining(self) -> float:
        """Seconds of validity left by this process's clock (0 once ended)."""
        return self._state.remaining()

    def valid(self) -> bool:
        """Whether the session lives and is within its validity."""
        return self._state.valid()

    def __repr__(self) -> str:
        state = "live" if not self.done else ("lost" if self.lost_at is not None else "closed")
        return f"<{type(self).__name__} {self.id!r} ttl={self.ttl} leases={len(self._state.grants)} {state}>"


class Session(SessionBase[threading.Event]):
    """A session of a ``coordinator.Client`` (``client.session(ttl=...)``, or
    the Client's default session): see the module doc. Pass it as
    ``session=`` to lock, try_lock, semaphore and read-write lock acquires,
    lock_all, acquire_all and campaign; use it as a context manager to
    close it at the end. ``lost`` and ``ended`` are threading.Events."""

    def __init__(self, state: SessionState[threading.Event], close: Callable[[], None]) -> None:
        super().__init__(state)
        self._close = close

    def close(self) -> None:
        """Ends every attached grant at once (``lost`` set, ``error``
        SessionEnded SESSION_CLOSED) and closes the session on the
        coordinator, which releases them all in one call, retrying transient
        errors for up to the Client's close timeout. Idempotent; raises
        CoordinatorError for errors that retrying cannot fix."""
        self._close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # the body's exception matters more
            log.warning("coordinator: could not close session %s", self.id, exc_info=True)
