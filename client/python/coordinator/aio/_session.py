"""The asyncio Session: the sync Session's state and rules
(session.SessionCore), renewed by a task on the event loop with unary
RenewSession calls."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Optional, Protocol, Tuple

from ..errors import ClientClosed, CoordinatorError, SessionEnded
from ..session import SessionCore

__all__ = ["Session"]

log = logging.getLogger("coordinator")


class _AsyncSessionHost(Protocol):
    """What an asyncio Session needs of the aio Client that created it."""

    timeout: float
    close_timeout: float

    @property
    def closed(self) -> bool: ...

    async def session_call(self, kind: str, request: Any, timeout: float) -> Tuple[Any, float]: ...

    def end_grant(self, h: Any, err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]: ...

    def forget_session(self, s: Any) -> None: ...


class Session(SessionCore):
    """A session of a ``coordinator.aio.Client`` (``await
    client.session(ttl=...)``, or its default session), as the sync
    ``coordinator.Session``: pass it as ``session=`` to acquisitions and
    campaigns; ``await session.close()`` (or ``async with``) ends them all
    and releases them in one call. ``lost`` and ``ended`` are asyncio
    Events."""

    def __init__(self, host: _AsyncSessionHost, session_id: str, ttl: float, sent: float) -> None:
        #: Set the moment the session ends involuntarily (not by close()).
        self.lost = asyncio.Event()
        #: Set the moment the session ends, whatever the reason.
        self.ended = asyncio.Event()
        self._lock = contextlib.nullcontext()  # the event loop runs one thing at a time
        super().__init__(host, session_id, ttl, sent)
        self._task: Optional["asyncio.Task[None]"] = None

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._keep_alive())

    async def close(self) -> None:
        """Ends every attached grant at once (``lost`` set, ``error``
        SessionEnded SESSION_CLOSED) and closes the session on the
        coordinator, which releases them all in one call, retrying transient
        errors for up to the Client's close timeout. Idempotent."""
        steps = self._close_steps(self._end(None, lost=False))
        while steps.calling():
            try:
                await self._host.session_call("close_session", self._close_request(), steps.call_timeout())
                return
            except SessionEnded:
                return  # dead on the coordinator already
            except CoordinatorError as err:
                await asyncio.sleep(steps.failed(err, self._host.closed))

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self.close()
            return
        try:
            await self.close()
        except Exception:  # the body's exception matters more
            log.warning("coordinator: could not close session %s", self._id, exc_info=True)

    # -- internals ---------------------------------------------------------------

    def _stop_renewing(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def _close_remote(self) -> None:
        """One CloseSession, best-effort, for a Client that closes."""
        try:
            await self._host.session_call("close_session", self._close_request(), self._host.close_timeout)
        except CoordinatorError as e:
            log.warning("coordinator: could not close session %s on close; its leases expire after its TTL: %s",
                        self._id, e)

    async def _keep_alive(self) -> None:
        """Renews the session about every ttl/3 until it ends, as the sync
        Session does; a renewal still unanswered at the deadline is
        abandoned there."""
        while not self._done:
            now = time.monotonic()
            if now >= self._deadline:
                self._end(self._expired(), lost=True)
                return
            if now < self._wake_at():
                await asyncio.sleep(self._wake_at() - now)
                continue
            left = self._deadline - now
            try:
                resp, sent = await asyncio.wait_for(
                    self._host.session_call("renew_session", self._renew_request(), left), left)
            except asyncio.TimeoutError:
                continue  # the deadline passed: the top of the loop expires it
            except ClientClosed:
                return
            except CoordinatorError as err:
                if self._renewal_failed(err):
                    return
                continue
            self._renewal_answered(sent, resp)
