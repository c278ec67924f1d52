"""The asyncio Client: one grpc.aio channel to a coordinator, and what is
done through it."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Optional, Sequence, Set, Tuple, TypeVar

import grpc

from .._connect import PEM, channel_options, check_settings, plaintext_metadata, tls_credentials
from .._gen import pb, pb_grpc
from .._rules import ANSWER_MARGIN, CLOSE_TIMEOUT, DEFAULT_TTL, LEASE_ENDING_REASONS, MAX_CONFIRMS, MAX_WAIT
from .._util import call_backoff, drift_margin, from_duration, to_duration
from ..client import _OUTCOME_UNKNOWN, DEFAULT_TARGET, _Grant
from ..election import LeaderInfo, Value, as_bytes
from ..errors import ClientClosed, CoordinatorError, NotAcquired, RPCError, from_rpc_error
from ..lease import Description, LeaseInfo
from ._grants import Acquisition, Lease, Leadership, _AsyncHeld
from ._observe import Observation

__all__ = ["Client"]

log = logging.getLogger("coordinator")

T = TypeVar("T")
_H = TypeVar("_H", bound=_AsyncHeld)

def _being_cancelled() -> bool:
    """Whether the current task was asked to cancel (Task.cancelling, Python
    3.11+; before it, any CancelledError counts as the task's)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


class Client:
    """A connection to one coordinator for asyncio programs: the sync
    ``coordinator.Client``'s API as coroutines, on ``grpc.aio``. Make it in
    a coroutine (its channel belongs to the running event loop), share it
    between the loop's tasks, and close it when done (``async with``).

    Every lease operation is a unary call on the one HTTP/2 connection
    (there is no thread to batch them on, as the sync Client's Session
    stream does); each held lease or leadership is renewed by a task of its
    own on the event loop, with the sync Client's rules: about every ttl/3,
    validity counted from the send time of the last successful grant or
    renewal minus max(ttl/10, 50ms), ``lost`` set at that local deadline
    when no renewal succeeded, at once when the coordinator refuses one.

    The arguments are the sync Client's, without ``use_session``.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: Optional[str] = None,
        tls: bool = False,
        root_certificates: Optional[PEM] = None,
        private_key: Optional[PEM] = None,
        certificate_chain: Optional[PEM] = None,
        server_name: Optional[str] = None,
        insecure_token: bool = False,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        timeout: float = 10.0,
        close_timeout: float = CLOSE_TIMEOUT,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
    ) -> None:
        use_tls = tls or root_certificates is not None or certificate_chain is not None
        self.identity = check_settings(holder, ttl, token, use_tls, insecure_token)
        self.target = target
        self.ttl = float(ttl)
        self.timeout = float(timeout)
        self.close_timeout = float(close_timeout)
        opts = channel_options(server_name, options)
        self._metadata = None if use_tls else plaintext_metadata(token)
        if use_tls:
            creds = tls_credentials(root_certificates, private_key, certificate_chain, token)
            self._channel = grpc.aio.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=opts)
        self._stub = pb_grpc.CoordinatorStub(self._channel)
        self._seq = itertools.count(1)
        self._closed = False
        self._closing = asyncio.Event()  # set by close(): ends retry sleeps
        #: Every held grant and the task that renews it.
        self._renewals: Dict[_AsyncHeld, "asyncio.Task[None]"] = {}
        self._observations: Set[Observation] = set()
        #: The unary calls in flight, which close() cancels.
        self._calls: Set[Any] = set()
        #: Best-effort give-ups started by cancelled acquisitions.
        self._background: Set["asyncio.Future[Any]"] = set()

    # -- plumbing -------------------------------------------------------------

    @property
    def stub(self) -> Any:
        """The raw generated CoordinatorStub on this Client's grpc.aio channel."""
        return self._stub

    @property
    def metadata(self) -> Optional[Tuple[Tuple[str, str], ...]]:
        """The call metadata this Client adds (the insecure bearer token)."""
        return self._metadata

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._closed

    async def call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        """Calls the unary RPC ``method`` ("Describe", "Renew"…) with a request
        built from ``coordinator.pb``; raises CoordinatorError. Leases taken
        this way are not renewed."""
        return await self._unary(method, request, timeout=timeout)

    async def _unary(self, method: str, request: Any, timeout: Optional[float] = None,
                     check_closed: bool = True) -> Any:
        if check_closed and self._closed:
            raise ClientClosed("the client was closed")
        call: Any = None
        try:
            call = getattr(self._stub, method)(request, timeout=self.timeout if timeout is None else timeout,
                                                metadata=self._metadata)
            self._calls.add(call)
            return await call
        except grpc.RpcError as e:
            if self._closed and check_closed:
                raise ClientClosed("the client was closed") from e
            raise from_rpc_error(e) from None
        except grpc.aio.UsageError as e:  # a call on the closed channel
            raise ClientClosed("the client was closed") from e
        except asyncio.CancelledError:
            # close() cancels the calls on the channel; grpc.aio raises that
            # as CancelledError in the caller, which is not being cancelled.
            if self._closed and not _being_cancelled():
                raise ClientClosed("the client was closed") from None
            raise
        finally:
            if call is not None:
                self._calls.discard(call)

    async def _pause(self, seconds: float) -> bool:
        """Sleeps ``seconds``, or until close(); True when closed."""
        try:
            await asyncio.wait_for(self._closing.wait(), max(seconds, 0.0))
        except asyncio.TimeoutError:
            pass
        return self._closed

    def _spawn(self, aw: Awaitable[Any]) -> None:
        fut = asyncio.ensure_future(aw)
        self._background.add(fut)
        fut.add_done_callback(self._background.discard)

    def _ttl(self, ttl: Optional[float]) -> float:
        t = self.ttl if ttl is None else float(ttl)
        if t <= 0:
            raise ValueError(f"coordinator: ttl {t} is not positive")
        return t

    def _new_holder(self) -> str:
        return f"{self.identity}#{next(self._seq)}"

    # -- locks ----------------------------------------------------------------

    async def try_lock(self, name: str, ttl: Optional[float] = None) -> Optional[Lease]:
        """The Lease of ``name`` if it is free (and nobody is queued for it),
        without waiting; None when someone else holds it."""
        try:
            return await self.lock(name, ttl=ttl, wait=0)
        except NotAcquired:
            return None

    def lock(self, name: str, ttl: Optional[float] = None, wait: Optional[float] = None) -> "Acquisition[Lease]":
        """Acquires the lock ``name``, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order with the other waiters,
        retrying transient errors meanwhile. Await it for the Lease, renewed
        on the event loop, or use it with ``async with`` to release the lease
        when the block exits::

            async with client.lock("reports/nightly", ttl=10, wait=30) as lease:
                await work(lease.token)

        Raises NotAcquired (naming the holder) when the wait ends first.
        Cancelling the task that waits gives up its place in the queue (and a
        grant that came meanwhile)."""
        return Acquisition(self._lock(name, ttl, wait))

    async def _lock(self, name: str, ttl: Optional[float], wait: Optional[float]) -> Lease:
        t = self._ttl(ttl)

        async def call(holder: str, wait_for: float, timeout: float) -> _Grant:
            req = pb.TryAcquireRequest(name=name, holder=holder, ttl=to_duration(t))
            if wait_for > 0:
                req.wait.CopyFrom(to_duration(wait_for))
            resp = await self._unary("TryAcquire", req, timeout=timeout)
            if not resp.acquired:
                return _Grant(False, holder=resp.holder or None,
                              retry_after=from_duration(resp.retry_after) if resp.HasField("retry_after") else None)
            return _Grant(True, token=int(resp.lease.token), ttl=from_duration(resp.lease.ttl, t) or t,
                          value=bytes(resp.lease.value))

        holder, grant, sent = await self._acquire("lock", name, t, wait, call)
        return self._register(Lease(self, name, holder, grant.token, grant.ttl, sent))

    async def release(self, lease: Lease) -> bool:
        """Releases ``lease`` (see Lease.release)."""
        return await lease.release()

    # -- elections ------------------------------------------------------------

    def campaign(self, election: str, value: Value = b"", ttl: Optional[float] = None,
                 wait: Optional[float] = None) -> "Acquisition[Leadership]":
        """Runs for leadership of ``election`` with ``value``, waiting up to
        ``wait`` seconds (None: for ever) in arrival order with the other
        candidates. Await it for the Leadership, or use it with ``async
        with`` to resign when the block exits. Raises NotAcquired (naming the
        sitting leader) when the wait ends first."""
        return Acquisition(self._campaign(election, value, ttl, wait))

    async def _campaign(self, election: str, value: Value, ttl: Optional[float], wait: Optional[float]) -> Leadership:
        t = self._ttl(ttl)
        data = as_bytes(value)

        async def call(candidate: str, wait_for: float, timeout: float) -> _Grant:
            req = pb.CampaignRequest(election=election, candidate=candidate, value=data, ttl=to_duration(t))
            if wait_for > 0:
                req.wait.CopyFrom(to_duration(wait_for))
            resp = await self._unary("Campaign", req, timeout=timeout)
            if not resp.elected:
                return _Grant(False, holder=resp.leader.candidate or None,
                              retry_after=from_duration(resp.retry_after) if resp.HasField("retry_after") else None)
            return _Grant(True, token=int(resp.leader.term), ttl=t, value=bytes(resp.leader.value))

        candidate, grant, sent = await self._acquire("leadership", election, t, wait, call)
        return self._register(Leadership(self, election, candidate, grant.token, grant.ttl, sent, grant.value))

    async def run_as_leader(self, election: str, fn: Callable[[Leadership], Awaitable[T]], value: Value = b"",
                            ttl: Optional[float] = None, wait: Optional[float] = None) -> T:
        """Campaigns for ``election``, awaits ``fn(leadership)`` while leader,
        resigns when it returns or raises, and returns its result. fn must
        watch ``leadership.lost`` and stop acting when the leadership ends."""
        leadership = await self.campaign(election, value=value, ttl=ttl, wait=wait)
        try:
            return await fn(leadership)
        finally:
            try:
                await leadership.resign()
            except Exception:
                log.warning("coordinator: could not resign %r", leadership, exc_info=True)

    async def leader(self, election: str) -> Optional[LeaderInfo]:
        """The sitting leader of ``election``, or None."""
        resp = await self._unary("Leader", pb.LeaderRequest(election=election))
        return LeaderInfo._from_pb(resp.leader) if resp.has_leader else None

    def observe(self, election: str) -> Observation:
        """Opens an Observe stream on ``election``: ``async for event in
        client.observe(...)`` (or ``async with``), the first event marked
        ``initial``, then every change."""
        if self._closed:
            raise ClientClosed("the client was closed")
        call = self._stub.Observe(pb.ObserveRequest(election=election), metadata=self._metadata)
        obs = Observation(self, election, call)
        self._observations.add(obs)
        return obs

    def forget_observation(self, obs: Observation) -> None:
        """Part of _ObservationHost: drops obs from those close() closes."""
        self._observations.discard(obs)

    # -- inspection -----------------------------------------------------------

    async def describe(self, name: str) -> Description:
        """The current lease of ``name``, if any, and its last token."""
        return Description._from_pb(name, await self._unary("Describe", pb.DescribeRequest(name=name)))

    async def list_leases(self, prefix: str = "", page_size: int = 0) -> AsyncIterator[LeaseInfo]:
        """Every lease held now under ``prefix``, in name order (``async for``)."""
        page_token = ""
        while True:
            resp = await self._unary("List", pb.ListRequest(prefix=prefix, page_size=page_size, page_token=page_token))
            for m in resp.leases:
                yield LeaseInfo._from_pb(m)
            page_token = resp.next_page_token
            if not page_token:
                return

    # -- acquisition ----------------------------------------------------------

    async def _acquire(self, kind: str, name: str, ttl: float, wait: Optional[float],
                       call: Callable[[str, float, float], Awaitable[_Grant]]) -> Tuple[str, _Grant, float]:
        """Runs an acquisition as a new holder, as the sync Client's
        _acquire_loop does: once (wait 0) or until granted or ``wait``
        passed, retrying transient errors as the same holder (which finds a
        lost grant again), confirming a grant that arrived with little of
        its validity left. Returns (holder, grant, sent)."""
        waiting = wait is None or wait > 0
        end = None if wait is None else time.monotonic() + max(wait, 0.0)
        holder = self._new_holder()
        usable = ttl - drift_margin(ttl)
        b = call_backoff()
        confirms = 0
        last_err: Optional[CoordinatorError] = None
        last_holder: Optional[str] = None
        try:
            while True:
                wait_for = 0.0
                if waiting and confirms == 0:
                    wait_for = MAX_WAIT
                    if end is not None:
                        wait_for = max(min(wait_for, end - time.monotonic() - ANSWER_MARGIN), 0.0)
                sent = time.monotonic()
                try:
                    g = await call(holder, wait_for, wait_for + self.timeout)
                except CoordinatorError as err:
                    if isinstance(err, ClientClosed):
                        raise
                    left = None if end is None else end - time.monotonic()
                    if waiting and err.transient and (left is None or left > 0):
                        last_err = err
                        log.warning("coordinator: %s %r: acquisition failed; retrying: %s", kind, name, err)
                        delay = max(b.next(), err.retry_after or 0.0)
                        if left is not None:
                            delay = min(delay, left)
                        if await self._pause(delay):
                            raise ClientClosed("the client was closed") from err
                        if end is None or time.monotonic() < end:
                            continue
                    if err.code in _OUTCOME_UNKNOWN:
                        self._spawn(self._abandon(name, holder))
                    if waiting and last_err is not None and end is not None and time.monotonic() >= end:
                        raise NotAcquired(name, last_holder, None, last_err) from err
                    raise
                if not g.acquired:
                    confirms = 0
                    last_holder = g.holder
                    if not waiting or (end is not None and time.monotonic() >= end - ANSWER_MARGIN):
                        raise NotAcquired(name, g.holder, g.retry_after)
                    if time.monotonic() - sent < wait_for / 2 and await self._pause(b.next()):
                        # Answered long before the wait was over (a
                        # coordinator shutting down?): do not spin.
                        raise ClientClosed("the client was closed")
                    continue
                b.reset()
                if sent + usable - time.monotonic() < usable / 2 and confirms < MAX_CONFIRMS:
                    confirms += 1
                    continue
                if time.monotonic() >= sent + g.ttl - drift_margin(g.ttl):
                    self._spawn(self._abandon(name, holder))
                    raise CoordinatorError(
                        f"{kind} {name!r}: every grant arrived after its validity ended "
                        f"(the coordinator answers slower than the TTL {ttl}s allows)"
                    )
                return holder, g, sent
        except asyncio.CancelledError:
            # The cancelled call took this waiter out of the coordinator's
            # queue; a grant that came before the cancel is given up.
            self._spawn(self._abandon(name, holder))
            raise

    def _register(self, h: "_H") -> "_H":
        if self._closed:
            self._spawn(self._give_up_quietly(h))
            raise ClientClosed("the client was closed")
        self._renewals[h] = asyncio.ensure_future(self._renew(h))
        return h

    async def _abandon(self, name: str, holder: str) -> None:
        """Gives up a lease that an acquisition may have been granted without
        hearing of it, so that others need not wait for its TTL. Best-effort."""
        if self._closed:
            return
        try:
            d = await self._unary("Describe", pb.DescribeRequest(name=name), timeout=2.0)
            if d.held and d.lease.holder == holder:
                await self._unary("Release", pb.ReleaseRequest(name=name, holder=holder, token=d.lease.token),
                                  timeout=2.0)
        except CoordinatorError as e:
            log.warning("coordinator: could not give up an abandoned grant of %r; it expires after its TTL: %s", name, e)

    async def _give_up(self, h: _AsyncHeld, timeout: Optional[float] = None) -> bool:
        """One Release (or Resign) call, without retries."""
        if isinstance(h, Leadership):
            resp = await self._unary("Resign", pb.ResignRequest(election=h.name, candidate=h.holder, term=h.token),
                                     timeout=timeout, check_closed=False)
            return bool(resp.resigned)
        resp = await self._unary("Release", pb.ReleaseRequest(name=h.name, holder=h.holder, token=h.token),
                                 timeout=timeout, check_closed=False)
        return bool(resp.released)

    async def _give_up_quietly(self, h: _AsyncHeld) -> None:
        try:
            await self._give_up(h, self.close_timeout)
        except Exception as e:
            log.warning("coordinator: could not release %r on close; it expires after its TTL: %s", h, e)

    # -- renewal --------------------------------------------------------------

    async def _renew(self, h: _AsyncHeld) -> None:
        """Renews h until it ends: at h._next_renew (about ttl/3 after the
        last successful renewal was sent, or a backoff after a failure),
        ending it at its local deadline, whatever is in flight then."""
        while not h._done:
            now = time.monotonic()
            if now >= h._deadline:
                self.end_grant(h, h._expired(), lost=True)
                return
            if now < h._next_renew:
                await asyncio.sleep(min(h._next_renew, h._deadline) - now)
                continue
            req = pb.RenewRequest(name=h.name, holder=h.holder, token=h.token, ttl=to_duration(h.ttl))
            sent = time.monotonic()
            left = h._deadline - sent
            try:
                resp = await asyncio.wait_for(self._unary("Renew", req, timeout=left), left)
            except asyncio.TimeoutError:
                self.end_grant(h, h._expired(), lost=True)  # unanswered at the deadline
                return
            except ClientClosed:
                return  # close() ends it
            except CoordinatorError as err:
                if err.reason in LEASE_ENDING_REASONS:
                    self.end_grant(h, err, lost=True)
                    return
                # STORE_UNAVAILABLE, DATA_LOSS_QUARANTINE, a coordinator that
                # is down…: the lease holds until its deadline. Try again.
                h._renewal_failed(err)
                continue
            except Exception as e:  # not the coordinator's: the deadline still holds
                h._renewal_failed(RPCError(f"renewal failed: {e!r}"))
                continue
            if not resp.HasField("lease"):
                h._renewal_failed(RPCError("a renewal got an unexpected answer", code=grpc.StatusCode.INTERNAL))
                continue
            self.grant_renewed(h, sent, from_duration(resp.lease.ttl, h.ttl) or h.ttl)

    # -- what its grants use (_AsyncLeaseHost in _grants.py) ------------------

    async def grant_call(self, method: str, request: Any) -> Tuple[Any, float]:
        """Part of _AsyncLeaseHost: the unary call ``method`` and when it was sent."""
        sent = time.monotonic()
        return await self._unary(method, request), sent

    def end_grant(self, h: _AsyncHeld, err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        """Part of _AsyncLeaseHost: stops renewing h and ends it, unless it
        ended already. Returns (ended_now, prior_error)."""
        if not h._end(err, lost):
            return False, h._error
        task = self._renewals.pop(h, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if lost and h._callbacks:
            asyncio.get_running_loop().call_soon(h._run_callbacks)
        return True, None

    def grant_renewed(self, h: _AsyncHeld, sent: float, ttl: float) -> bool:
        """Part of _AsyncLeaseHost: records a renewal of h sent at ``sent``
        (ending h with LeaseExpired when its deadline had passed already);
        whether h is still held."""
        if h._done:
            return False
        if time.monotonic() >= h._deadline:
            self.end_grant(h, h._expired(), lost=True)
            return False
        if sent >= h._confirmed:  # not an older renewal answered after a newer one
            h._granted(sent, ttl)
        return True

    def watch_lost(self, h: _AsyncHeld, callback: Callable[[Any], None]) -> bool:
        """Part of _AsyncLeaseHost: has ``callback(h)`` called on the event
        loop when h is lost; False when it is lost already."""
        if h.lost.is_set():
            return False
        h._callbacks.append(callback)
        return True

    async def release_grant(self, h: _AsyncHeld, resign: bool) -> bool:
        """Part of _AsyncLeaseHost: ends h and gives it up on the coordinator,
        retrying transient errors for up to the close timeout."""
        from ..errors import LeaseExpired

        ended_now, prior = self.end_grant(h, None, lost=False)
        if not ended_now:
            if isinstance(prior, LeaseExpired) and not self._closed:
                # The coordinator may hold it yet: give it up there too.
                try:
                    await self._give_up(h, timeout=min(self.timeout, self.close_timeout))
                except CoordinatorError:
                    pass
            return False
        end = time.monotonic() + self.close_timeout
        b = call_backoff()
        while True:
            try:
                return await self._give_up(h, timeout=max(min(self.timeout, end - time.monotonic()), 0.1))
            except CoordinatorError as err:
                if self._closed:
                    return False
                if err.transient and time.monotonic() + 0.05 < end:
                    await asyncio.sleep(min(max(b.next(), err.retry_after or 0.0), max(end - time.monotonic(), 0.0)))
                    continue
                raise

    # -- closing --------------------------------------------------------------

    async def close(self) -> None:
        """Ends every lease and leadership (``lost`` is set, ``error`` is
        ClientClosed), cancels the calls in flight (waiting ones raise
        ClientClosed), ends open Observe streams, releases what was held
        best-effort for up to close_timeout, and closes the channel.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        held = list(self._renewals)
        for h in held:
            self.end_grant(h, ClientClosed("the client was closed"), lost=True)
        # Waiting calls first: none of them may be granted what is released
        # below (the coordinator forgets a cancelled wait at once).
        for call in list(self._calls):
            call.cancel()
        for obs in list(self._observations):
            await obs.close()
        if held and self.close_timeout > 0:
            await asyncio.gather(*(self._give_up_quietly(h) for h in held))
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.close_timeout)
        await self._channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<coordinator.aio.Client {self.target!r} identity={self.identity!r}>"

