"""The asyncio Client: one grpc.aio channel to a coordinator, and what is
done through it."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

import grpc

from .._connect import PEM, channel_options, check_settings, plaintext_metadata, tls_credentials
from .._gen import pb, pb_grpc
from .._acquire import AcquireSteps, Grant, ReleaseSteps, RWLockBase, SemaphoreBase, abandoned_token
from .._acquire import acquire_grant, acquire_request, campaign_grant, campaign_request
from .._rules import CLOSE_TIMEOUT, DEFAULT_TTL, LEASE_ENDING_REASONS
from .._util import from_duration, to_duration
from ..session import ended_default, fall_back, session_choice
from ..client import DEFAULT_TARGET
from ..election import LeaderInfo, Value, as_bytes
from ..errors import ClientClosed, CoordinatorError, NotAcquired, RPCError, SessionEnded, from_rpc_error
from ..lease import Description, LeaseInfo
from ._grants import Acquisition, Lease, Leadership, _AsyncHeld
from ._observe import Observation
from ._session import Session

__all__ = ["Client", "Semaphore", "RWLock"]

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
    (there is no thread to batch them on, as the sync Client's operation
    stream does); each held lease or leadership is renewed by a task of its
    own on the event loop, with the sync Client's rules: about every ttl/3,
    validity counted from the send time of the last successful grant or
    renewal minus max(ttl/10, 50ms), ``lost`` set at that local deadline
    when no renewal succeeded, at once when the coordinator refuses one.

    The arguments are the sync Client's, without ``use_stream``; sessions
    (``session()``, ``default_session()``, ``session=``) are the sync
    Client's too, renewed by a task each with unary RenewSession calls.
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
        default_session: bool = True,
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
        #: Whether acquisitions without a ttl or session attach to the
        #: default session (False once the coordinator lacked sessions).
        self._use_default = default_session
        self._default: Optional[Session] = None
        self._default_lock = asyncio.Lock()
        #: Every live session this Client created, which close() closes.
        self._sessions: Set[Session] = set()

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

    async def try_lock(self, name: str, ttl: Optional[float] = None,
                       session: Optional[Session] = None) -> Optional[Lease]:
        """The Lease of ``name`` if it is free (and nobody is queued for it),
        without waiting; None when someone else holds it."""
        try:
            return await self.lock(name, ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None

    def lock(self, name: str, ttl: Optional[float] = None, wait: Optional[float] = None,
             session: Optional[Session] = None) -> "Acquisition[Lease]":
        """Acquires the lock ``name``, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order with the other waiters,
        retrying transient errors meanwhile. Await it for the Lease, renewed
        on the event loop, or use it with ``async with`` to release the lease
        when the block exits::

            async with client.lock("reports/nightly", ttl=10, wait=30) as lease:
                await work(lease.token)

        In ``session`` (or the default session, without a ``ttl``), the lease
        lives and ends with the session, as the sync Client's.

        Raises NotAcquired (naming the holder) when the wait ends first.
        Cancelling the task that waits gives up its place in the queue (and a
        grant that came meanwhile)."""
        return self._share("lock", name, ttl, wait, 0, 0, session)

    def _share(self, kind: str, name: str, ttl: Optional[float], wait: Optional[float],
               capacity: int, weight: int, session: Optional[Session] = None) -> "Acquisition[Lease]":
        """The acquisition of weight of name of capacity (0 and 0: an
        exclusive lock)."""
        return Acquisition(self._shared(kind, name, ttl, wait, capacity, weight, session))

    async def _shared(self, kind: str, name: str, ttl: Optional[float], wait: Optional[float],
                      capacity: int, weight: int, session: Optional[Session]) -> Lease:
        t = session.ttl if session is not None else self._ttl(ttl)
        used: List[Optional[Session]] = [None]

        async def call(holder: str, wait_for: float, timeout: float) -> Grant:
            async def in_session(s: Optional[Session]) -> Grant:
                tt, sid = (s.ttl, s.id) if s is not None else (t, "")
                req = acquire_request(name, holder, tt, wait_for, capacity, weight, sid)
                return acquire_grant(await self._unary("TryAcquire", req, timeout=timeout), tt, attached=s is not None)

            return await self._in_session(session, ttl, used, in_session)

        holder, grant, sent = await self._acquire(kind, name, t, wait, call)
        lease = Lease(self, name, holder, grant.token, grant.ttl, sent, weight=grant.weight, kind=kind)
        return self._register(lease, used[0])

    async def release(self, lease: Lease) -> bool:
        """Releases ``lease`` (see Lease.release)."""
        return await lease.release()

    # -- semaphores and read-write locks --------------------------------------

    def semaphore(self, name: str, capacity: int) -> "Semaphore":
        """The semaphore ``name`` of ``capacity`` (1 to MAX_CAPACITY), as the
        sync Client's: ``await sem.acquire(n)`` or ``async with
        sem.acquire(n) as share`` takes n of it, a Lease of its own."""
        return Semaphore(self, name, capacity)

    def rwlock(self, name: str) -> "RWLock":
        """The read-write lock ``name``, as the sync Client's: ``async with
        rw.read_lock()`` (or ``write_lock()``)."""
        return RWLock(self, name)

    # -- elections ------------------------------------------------------------

    def campaign(self, election: str, value: Value = b"", ttl: Optional[float] = None,
                 wait: Optional[float] = None, session: Optional[Session] = None) -> "Acquisition[Leadership]":
        """Runs for leadership of ``election`` with ``value``, waiting up to
        ``wait`` seconds (None: for ever) in arrival order with the other
        candidates. Await it for the Leadership, or use it with ``async
        with`` to resign when the block exits. Raises NotAcquired (naming the
        sitting leader) when the wait ends first. ``session`` as for lock()."""
        return Acquisition(self._campaign(election, value, ttl, wait, session))

    async def _campaign(self, election: str, value: Value, ttl: Optional[float], wait: Optional[float],
                        session: Optional[Session]) -> Leadership:
        t = session.ttl if session is not None else self._ttl(ttl)
        data = as_bytes(value)
        used: List[Optional[Session]] = [None]

        async def call(candidate: str, wait_for: float, timeout: float) -> Grant:
            async def in_session(s: Optional[Session]) -> Grant:
                tt, sid = (s.ttl, s.id) if s is not None else (t, "")
                req = campaign_request(election, candidate, data, tt, wait_for, sid)
                return campaign_grant(await self._unary("Campaign", req, timeout=timeout), tt, attached=s is not None)

            return await self._in_session(session, ttl, used, in_session)

        candidate, grant, sent = await self._acquire("leadership", election, t, wait, call)
        leadership = Leadership(self, election, candidate, grant.token, grant.ttl, sent, grant.value)
        return self._register(leadership, used[0])

    async def run_as_leader(self, election: str, fn: Callable[[Leadership], Awaitable[T]], value: Value = b"",
                            ttl: Optional[float] = None, wait: Optional[float] = None,
                            session: Optional[Session] = None) -> T:
        """Campaigns for ``election``, awaits ``fn(leadership)`` while leader,
        resigns when it returns or raises, and returns its result. fn must
        watch ``leadership.lost`` and stop acting when the leadership ends."""
        leadership = await self.campaign(election, value=value, ttl=ttl, wait=wait, session=session)
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

    # -- sessions -------------------------------------------------------------

    async def session(self, ttl: Optional[float] = None) -> Session:
        """Creates a session of ``ttl`` seconds (default: the Client's ttl),
        renewed by a task about every ttl/3 until closed, lost or the Client
        closed, as the sync Client's: pass it as ``session=``; ``async with``
        closes it (releasing its grants in one call) at the end."""
        t = self._ttl(ttl)
        sent = time.monotonic()
        resp = await self._unary("CreateSession", pb.CreateSessionRequest(ttl=to_duration(t)))
        s = Session(self, resp.session.id, from_duration(resp.session.ttl, t) or t, sent)
        if self._closed:
            s._end(ClientClosed("the client was closed"), lost=True)
            await s._close_remote()
            raise ClientClosed("the client was closed")
        self._sessions.add(s)
        s._start()
        return s

    async def default_session(self) -> Session:
        """The Client's default session, created (with the Client's ttl) if
        it has none or its last one ended, as the sync Client's. Raises
        ValueError with default_session=False."""
        if not self._use_default:
            raise ValueError("coordinator: this Client has no default session (default_session=False, or the "
                             "coordinator has no sessions)")
        async with self._default_lock:
            s = self._default
            if s is None or s.done:
                s = self._default = await self.session()
            return s

    async def _session_for(self, explicit: Optional[Session], ttl: Optional[float]) -> Optional[Session]:
        """The session of an acquisition's next call (see the sync Client's)."""
        s, default = session_choice(explicit, ttl, self._use_default)
        if not default:
            return s
        try:
            return await self.default_session()
        except CoordinatorError as err:
            self._use_default = fall_back(err, self._use_default)
            return None

    async def _in_session(self, explicit: Optional[Session], ttl: Optional[float], used: List[Optional[Session]],
                          call: Callable[[Optional[Session]], Awaitable[Grant]]) -> Grant:
        """``await call(session)`` in the session of _session_for (recorded in
        used[0]); once more in a new default session when the coordinator
        says the default one ended."""
        for again in (True, False):
            s = used[0] = await self._session_for(explicit, ttl)
            try:
                return await call(s)
            except SessionEnded as err:
                if not ended_default(err, s, explicit, again):
                    raise
        raise AssertionError("unreachable")

    async def session_call(self, kind: str, request: Any, timeout: float) -> Tuple[Any, float]:
        """Part of _AsyncSessionHost: "renew_session" or "close_session" as a
        unary call, and when it was sent."""
        sent = time.monotonic()
        method = "RenewSession" if kind == "renew_session" else "CloseSession"
        return await self._unary(method, request, timeout=timeout, check_closed=kind != "close_session"), sent

    def forget_session(self, s: Session) -> None:
        """Part of _AsyncSessionHost: drops the ended s from those close() closes."""
        self._sessions.discard(s)

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
                       call: Callable[[str, float, float], Awaitable[Grant]]) -> Tuple[str, Grant, float]:
        """Runs an acquisition as a new holder by the rules of AcquireSteps
        (_acquire.py), as the sync Client does. Returns (holder, grant,
        sent)."""
        holder, steps = self._new_holder(), AcquireSteps(kind, name, ttl, wait)
        try:
            while True:
                wait_for = steps.begin()
                try:
                    step = steps.answered(await call(holder, wait_for, wait_for + self.timeout))
                except CoordinatorError as err:
                    step = steps.failed(err)
                if step.warning:
                    log.warning(step.warning)
                if step.pause is not None and await self._pause(step.pause):
                    raise ClientClosed("the client was closed") from step.retrying
                step = steps.resumed(step)
                if step.abandon:
                    self._spawn(self._abandon(name, holder))
                if step.error is not None:
                    raise step.error
                if step.grant is not None:
                    return holder, step.grant, steps.sent
        except asyncio.CancelledError:
            # The cancelled call took this waiter out of the coordinator's
            # queue; a grant that came before the cancel is given up.
            self._spawn(self._abandon(name, holder))
            raise

    def _register(self, h: "_H", session: Optional[Session] = None) -> "_H":
        if session is not None:
            err = session._attach(h)  # ended meanwhile: h ends with it
            if err is not None:
                raise err
            return h
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
            token = abandoned_token(d, holder)
            if token is not None:
                await self._unary("Release", pb.ReleaseRequest(name=name, holder=holder, token=token), timeout=2.0)
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
        if h._session is not None:
            h._session._detach(h)
        task = self._renewals.pop(h, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if lost and h._callbacks:
            asyncio.get_running_loop().call_soon(h._run_callbacks)
        return True, None

    def grant_renewed(self, h: _AsyncHeld, sent: float, ttl: float) -> bool:
        """Part of _AsyncLeaseHost: records a renewal of h sent at ``sent``
        (ending h with LeaseExpired when its deadline had passed already);
        whether h is still held. An attached grant's validity is its
        session's."""
        if h._session is not None:
            return h.valid()
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
        ended_now, prior = self.end_grant(h, None, lost=False)
        steps = ReleaseSteps(self.timeout, self.close_timeout, ended_now, prior, self._closed)
        while steps.calling():
            try:
                return steps.released(await self._give_up(h, timeout=steps.call_timeout()))
            except CoordinatorError as err:
                await asyncio.sleep(steps.failed(err, self._closed))
        return False

    # -- closing --------------------------------------------------------------

    async def close(self) -> None:
        """Ends every lease, leadership and session (``lost`` is set,
        ``error`` is ClientClosed), cancels the calls in flight (waiting ones raise
        ClientClosed), ends open Observe streams, closes the sessions (one
        CloseSession each) and releases the other grants best-effort for up
        to close_timeout, and closes the channel.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        # Their grants end (ClientClosed) at once; one CloseSession each
        # releases them on the coordinator below.
        sessions = [s for s in list(self._sessions) if s._end(ClientClosed("the client was closed"), lost=True)]
        held = list(self._renewals)
        for h in held:
            self.end_grant(h, ClientClosed("the client was closed"), lost=True)
        # Waiting calls first: none of them may be granted what is released
        # below (the coordinator forgets a cancelled wait at once).
        for call in list(self._calls):
            call.cancel()
        for obs in list(self._observations):
            await obs.close()
        if (held or sessions) and self.close_timeout > 0:
            await asyncio.gather(*(self._give_up_quietly(h) for h in held), *(s._close_remote() for s in sessions))
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.close_timeout)
        await self._channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<coordinator.aio.Client {self.target!r} identity={self.identity!r}>"



class Semaphore(SemaphoreBase["Acquisition[Lease]"]):
    """The sync Semaphore on asyncio: a name of a fixed capacity whose shares
    ``acquire`` (awaited, or with ``async with``) and ``try_acquire`` take,
    at most ``capacity`` weight held at once, served in arrival order. Each
    share is a Lease of its own. While the name is held or awaited, a
    request with another capacity raises CapacityMismatch."""

    async def try_acquire(self, n: int = 1, ttl: Optional[float] = None, session: Any = None) -> Optional[Lease]:
        """Takes ``n`` of the capacity if it is free now and nobody waits;
        None otherwise."""
        try:
            return await self.acquire(n, ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None


class RWLock(RWLockBase["Acquisition[Lease]"]):
    """The sync RWLock on asyncio: many readers at once, or one writer, a
    writer waiting behind readers granted before the readers that came
    after it. ``read_lock`` and ``write_lock`` are awaited, or used with
    ``async with``."""

    async def try_read_lock(self, ttl: Optional[float] = None, session: Any = None) -> Optional[Lease]:
        """A read share if no writer holds or waits; None otherwise."""
        try:
            return await self.read_lock(ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None

    async def try_write_lock(self, ttl: Optional[float] = None, session: Any = None) -> Optional[Lease]:
        """The write lock if nobody holds or waits for it; None otherwise."""
        try:
            return await self.write_lock(ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None
