"""The internals of a Client, sync or asyncio: its connection, its one
operation stream, its sessions and what it does with them. A Client is the
public face of one Core; its grants and sessions are views of the Core's
states (_state.py). Nothing here is for applications.

Acquire, release, campaign, proclaim, resign, a group's acquire and
release, and session renewals go over the operation stream (_stream.py);
CreateSession, CloseSession, Describe, List, Leader and Observe are unary
(or server-streaming) calls. The sync Client waits for them on its thread;
the asyncio Client awaits the stream's results on its event loop
(``operation_async``) and runs the calls that do not wait on the
coordinator's queues in a worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar

import grpc

from ._acquire import AcquireSteps, Grant, ReleaseSteps, Step, abandoned_token, acquire_request, campaign_request
from ._acquire import give_up_operation, grant_of, group_request, release_group_request
from ._connect import PEM, channel_options, check_settings, plaintext_metadata, tls_credentials
from ._gen import pb, pb_grpc
from ._rules import LEASE_NOT_HELD
from ._state import SESSION_CLOSED, F, GrantState, GroupState, HeldState, SessionState
from ._stream import Late, OpStream, Stopped, run_late
from ._util import from_duration, to_duration
from .errors import ClientClosed, CoordinatorError, LeaseNotHeld, RPCError, SessionEnded, from_rpc_error
from .errors import from_status, is_outcome_unknown
from .group import Member

log = logging.getLogger("coordinator")

#: Where ``make run`` serves.
DEFAULT_TARGET = "127.0.0.1:7400"

#: What an acquisition makes: a GrantState or a GroupState.
S = TypeVar("S", bound="HeldState[Any]")


def closed_error() -> ClientClosed:
    return ClientClosed("the client was closed")


class Settings:
    """A Client's settings, checked before anything connects."""

    def __init__(self, target: str, token: Optional[str], tls: bool, root_certificates: Optional[PEM],
                 private_key: Optional[PEM], certificate_chain: Optional[PEM], server_name: Optional[str],
                 insecure_token: bool, holder: Optional[str], ttl: float, timeout: float, close_timeout: float,
                 options: Optional[Sequence[Tuple[str, Any]]]) -> None:
        self.use_tls = tls or root_certificates is not None or certificate_chain is not None
        self.identity = check_settings(holder, ttl, token, self.use_tls, insecure_token)
        self.target, self.token, self.server_name, self.options = target, token, server_name, options
        self.root_certificates, self.private_key, self.certificate_chain = (root_certificates, private_key,
                                                                            certificate_chain)
        self.ttl, self.timeout, self.close_timeout = float(ttl), float(timeout), float(close_timeout)


class Core(Generic[F]):
    """One Client's connection, operation stream and sessions (see the
    module doc). ``new_flag`` makes the ``lost`` and ``ended`` Flags of its
    sessions and grants."""

    def __init__(self, s: Settings, new_flag: Callable[[], F]) -> None:
        self.identity, self.ttl, self.timeout, self.close_timeout = s.identity, s.ttl, s.timeout, s.close_timeout
        self.new_flag = new_flag
        opts = channel_options(s.server_name, s.options)
        self.metadata: Optional[Tuple[Tuple[str, str], ...]] = None
        if s.use_tls:
            creds = tls_credentials(s.root_certificates, s.private_key, s.certificate_chain, s.token)
            self.channel = grpc.secure_channel(s.target, creds, options=opts)
        else:
            self.metadata = plaintext_metadata(s.token)
            self.channel = grpc.insecure_channel(s.target, options=opts)
        self.stub: Any = pb_grpc.CoordinatorStub(self.channel)
        self.stream = OpStream(self.stub, self.metadata)
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.closed = False
        #: Set by close(): ends retry pauses.
        self.closing = threading.Event()
        self._default: Optional[SessionState[F]] = None
        self._default_lock = threading.Lock()
        #: Every live session, which close() closes.
        self._sessions: Dict[str, SessionState[F]] = {}
        #: What else close() ends: open Observe streams.
        self._closers: Dict[int, Callable[[], None]] = {}

    def new_holder(self) -> str:
        with self._lock:
            n = next(self._seq)
        return f"{self.identity}#{n}"

    # -- calls -------------------------------------------------------------------

    def unary(self, method: str, request: Any, timeout: Optional[float] = None, check_closed: bool = True) -> Any:
        """The unary call ``method``; raises CoordinatorError (ClientClosed
        once the Client closed)."""
        if check_closed and self.closed:
            raise closed_error()
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout if timeout is None else timeout,
                                              metadata=self.metadata)
        except grpc.RpcError as e:
            if self.closed and check_closed:
                raise closed_error() from e
            raise from_rpc_error(e) from None
        except ValueError as e:  # "Cannot invoke RPC on closed channel!"
            if self.closed:
                raise closed_error() from e
            raise

    def observe(self, election: str, closer: Callable[[], None]) -> Tuple[Any, Callable[[], None]]:
        """Opens an Observe stream of election; close() calls closer. Returns
        the call and what drops closer again."""
        if self.closed:
            raise closed_error()
        call = self.stub.Observe(pb.ObserveRequest(election=election), metadata=self.metadata)
        key = id(call)
        with self._lock:
            self._closers[key] = closer

        def forget() -> None:
            with self._lock:
                self._closers.pop(key, None)

        return call, forget

    def operation(self, kind: str, request: Any, timeout: Optional[float] = None, late: Optional[Late] = None,
                  stop: Optional[threading.Event] = None) -> Tuple[Any, float]:
        """The operation ``kind`` ("acquire", "release", "campaign",
        "resign", "renew_session", "acquire_group", "release_group") over
        the operation stream: (its response, when it was sent). Raises its
        CoordinatorError, or Stopped when stop was set meanwhile."""
        timeout = self.timeout if timeout is None else timeout
        res, sent = self.stream.call(pb.StreamOperation(**{kind: request}), timeout, late, stop)
        return _response(kind, res), sent

    async def operation_async(self, kind: str, request: Any, timeout: float,
                              late: Optional[Late] = None) -> Tuple[Any, float]:
        """``operation`` for the event loop. A caller cancelled or timed out
        leaves the operation as the sync one does (``late`` gets its
        outcome)."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Tuple[Any, Optional[BaseException]]]" = loop.create_future()

        def done(o: Any, res: Any, err: Optional[BaseException]) -> None:
            def deliver() -> None:
                if not fut.done():
                    fut.set_result((res, err))
                elif late is not None:  # the caller left
                    run_late(late, res, err)

            try:
                loop.call_soon_threadsafe(deliver)
            except RuntimeError:  # the loop is closed: nobody waits
                if late is not None:
                    run_late(late, res, err)

        o = self.stream.submit(pb.StreamOperation(**{kind: request}), done)
        try:
            res, err = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self.stream.abandon(o)
            raise RPCError("Deadline Exceeded", code=grpc.StatusCode.DEADLINE_EXCEEDED) from None
        except asyncio.CancelledError:
            self.stream.abandon(o)
            raise
        if err is not None:
            raise err
        return _response(kind, res), o.sent if o.sent is not None else time.monotonic()

    # -- sessions ----------------------------------------------------------------

    def renew_session(self, session_id: str, timeout: float) -> Tuple[Any, float]:
        """The one renewal there is: a renew_session operation on the stream."""
        return self.operation("renew_session", pb.RenewSessionRequest(session_id=session_id), timeout)

    def create_session(self, ttl: Optional[float] = None) -> SessionState[F]:
        """A new session of ``ttl`` seconds (default: the Client's ttl),
        renewed until it ends."""
        t = self.ttl if ttl is None else float(ttl)
        if t <= 0:
            raise ValueError(f"coordinator: ttl {t} is not positive")
        sent = time.monotonic()
        resp = self.unary("CreateSession", pb.CreateSessionRequest(ttl=to_duration(t)))
        s = SessionState(resp.session.id, from_duration(resp.session.ttl, t) or t, sent, self.renew_session,
                         self._forget, self.new_flag)
        with self._lock:
            if not self.closed:
                self._sessions[s.id] = s
                s.start()
                return s
        s.end(closed_error(), lost=True)
        self._close_remote(s)
        raise closed_error()

    def _forget(self, s: SessionState[F]) -> None:
        with self._lock:
            self._sessions.pop(s.id, None)

    def explicit_session(self, session_id: str, done: bool, error: Optional[BaseException]) -> SessionState[F]:
        """The state of the session ``session_id`` that a caller passed; its
        error when it ended (done, error: what the caller's Session says)."""
        with self._lock:
            s = self._sessions.get(session_id)
        if s is not None:
            return s
        if isinstance(error, CoordinatorError):
            raise error
        if done:
            raise SessionEnded(f"session {session_id} was closed", code=grpc.StatusCode.FAILED_PRECONDITION,
                               reason=SESSION_CLOSED, metadata={"session_id": session_id})
        raise ValueError(f"coordinator: session {session_id} is not a session of this Client")

    def session_for(self, explicit: Optional[SessionState[F]]) -> SessionState[F]:
        """The session of an acquisition's next call: ``explicit`` (raising
        its error when it ended), or the default session, made if there is
        none or the last one ended."""
        if explicit is not None:
            if explicit.done:
                raise explicit.ended_error()
            return explicit
        with self._default_lock:
            s = self._default
            if s is None or s.done:
                s = self._default = self.create_session()
            return s

    def close_session(self, s: SessionState[F]) -> None:
        """Ends s and its grants, and closes it on the coordinator (which
        releases them all), retrying transient errors for up to the close
        timeout."""
        if not s.end(None, lost=False):
            return
        steps = ReleaseSteps(self.timeout, self.close_timeout)
        while steps.calling():
            try:
                self.unary("CloseSession", pb.CloseSessionRequest(session_id=s.id), steps.call_timeout(),
                           check_closed=False)
                return
            except SessionEnded:
                return  # dead on the coordinator already: nothing holds its leases
            except CoordinatorError as err:
                time.sleep(steps.failed(err, self.closed))

    def _close_remote(self, s: SessionState[F]) -> None:
        """One CloseSession, best-effort, for a Client that closes."""
        try:
            self.unary("CloseSession", pb.CloseSessionRequest(session_id=s.id), self.close_timeout,
                       check_closed=False)
        except CoordinatorError as e:
            log.warning("coordinator: could not close session %s on close; its leases expire after its TTL: %s",
                        s.id, e)

    # -- acquisition ---------------------------------------------------------------

    def acquisition(self, kind: str, name: str, wait: Optional[float], explicit: Optional[SessionState[F]],
                    capacity: int = 0, weight: int = 0, value: bytes = b"") -> "GrantAcquiring[F]":
        return GrantAcquiring(self, kind, name, wait, explicit, capacity, weight, value)

    def group_acquisition(self, members: Sequence[Member], wait: Optional[float],
                          explicit: Optional[SessionState[F]]) -> "GroupAcquiring[F]":
        return GroupAcquiring(self, members, wait, explicit)

    def acquire(self, a: "Acquiring[F, S]", stop: Optional[threading.Event] = None) -> S:
        """Runs the acquisition a, waiting on this thread; raises Stopped
        when ``stop`` is set meanwhile."""
        try:
            while True:
                wait_for = a.steps.begin()
                try:
                    req = a.request(self.session_for(a.explicit), wait_for)
                    resp, _ = self.operation(a.op, req, wait_for + self.timeout, a.late(), stop)
                    step = a.answered(resp)
                except CoordinatorError as err:
                    step = a.failed(err)
                if step.pause is not None and self.pause(step.pause, stop):
                    raise closed_error() from step.retrying
                g = a.next(step)
                if g is not None:
                    return g
        except BaseException:
            a.over()
            raise

    def pause(self, seconds: float, stop: Optional[threading.Event] = None) -> bool:
        """Sleeps seconds, or until the Client closes (True) or stop is set
        (raising Stopped)."""
        end = time.monotonic() + seconds
        while not self.closing.wait(max(min(end - time.monotonic(), 0.05 if stop is not None else seconds), 0.0)):
            if stop is not None and stop.is_set():
                raise Stopped()
            if time.monotonic() >= end:
                return self.closed
        return True

    async def acquire_async(self, a: "Acquiring[F, S]", closing: Callable[[float], Any]) -> S:
        """Runs the acquisition a on the event loop; ``closing(seconds)``
        pauses, returning early (True) when the Client closes."""
        try:
            while True:
                wait_for = a.steps.begin()
                try:
                    session = a.explicit if a.explicit is not None else self._default
                    if session is None or session.done:
                        session = await asyncio.to_thread(self.session_for, a.explicit)
                    resp, _ = await self.operation_async(a.op, a.request(session, wait_for),
                                                         wait_for + self.timeout, a.late())
                    step = a.answered(resp)
                except CoordinatorError as err:
                    step = a.failed(err)
                if step.pause is not None and (await closing(step.pause) or self.closed):
                    raise closed_error() from step.retrying
                g = a.next(step)
                if g is not None:
                    return g
        except BaseException:
            a.over()
            raise

    def give_up_late(self, name: str, op: Any) -> None:
        """Releases (or resigns) a lease (or a group) granted to an
        acquisition whose caller had left by then, so that the next waiter
        need not wait for its session to expire. Best-effort, without
        waiting for the answer."""

        def done(_o: Any, res: Any, err: Optional[BaseException]) -> None:
            if err is None and res is not None and res.WhichOneof("result") == "error":
                err = from_status(res.error)
            if err is not None:
                log.warning("coordinator: could not give up a lease of %r granted after its acquisition was "
                            "abandoned; it ends with its session: %s", name, err)

        try:
            self.stream.submit(op, done)
        except ClientClosed:
            pass

    def abandon(self, names: Sequence[str], holder: str, group: bool = False) -> None:
        """Gives up, on a thread of its own, what an acquisition of names
        (a group's, when group) may have been granted without hearing of
        it: whatever holder holds of them. Best-effort."""

        def run() -> None:
            if self.closed:
                return
            try:
                found: List[Tuple[str, int]] = []
                for name in names:
                    token = abandoned_token(self.unary("Describe", pb.DescribeRequest(name=name), timeout=2.0),
                                            holder)
                    if token is not None:
                        found.append((name, token))
                if group and found:
                    self.operation("release_group", release_group_request(holder, found), 2.0)
                elif found:
                    name, token = found[0]
                    self.operation("release", pb.ReleaseRequest(name=name, holder=holder, token=token), 2.0)
            except CoordinatorError as e:
                log.warning("coordinator: could not give up an abandoned grant of %s: %s", ", ".join(map(repr, names)),
                            e)

        threading.Thread(target=run, name="coordinator-abandon", daemon=True).start()

    # -- held grants ---------------------------------------------------------------

    def release(self, g: HeldState[F]) -> bool:
        """Ends g and gives it up on the coordinator (Release, Resign for a
        leadership, ReleaseGroup for a group), retrying transient errors for
        up to the close timeout. True when the coordinator gave it up now;
        False, without an error, when it was no longer held (lost, or given
        up before)."""
        if not g.end(None, lost=False):
            return False
        kind, req = _give_up_request(g)
        steps = ReleaseSteps(self.timeout, self.close_timeout)
        while steps.calling():
            try:
                resp, _ = self.operation(kind, req, steps.call_timeout())
                return bool(resp.resigned if kind == "resign" else resp.released)
            except (LeaseNotHeld, ClientClosed):
                return False
            except CoordinatorError as err:
                time.sleep(steps.failed(err, self.closed))
        return False

    def proclaim(self, g: GrantState[F], value: bytes) -> None:
        """Publishes value as the leadership g: a Campaign with g's term,
        which never starts a new term. When the term is over g ends (lost)
        and LeaseNotHeld is raised; a transient error leaves g as it was."""
        if g.done:
            raise g.error or LeaseNotHeld(f"{g.describe()} has ended", reason=LEASE_NOT_HELD)
        s = g.session
        req = pb.CampaignRequest(election=g.name, candidate=g.holder, value=value, ttl=to_duration(s.ttl),
                                 term=g.token, session_id=s.id)
        try:
            resp, _ = self.operation("campaign", req)
        except LeaseNotHeld as err:
            g.end(err, lost=True)
            raise
        if resp.elected and int(resp.leader.term) == g.token:
            g.value = value
            return
        if resp.elected:
            # A coordinator that ignores Campaign.term started a new term
            # that nobody wants: resign it.
            try:
                self.operation("resign", pb.ResignRequest(election=g.name, candidate=g.holder,
                                                          term=int(resp.leader.term)))
            except CoordinatorError:
                pass
        lost = LeaseNotHeld(f"{g.describe()}: the coordinator has another term in office",
                            code=grpc.StatusCode.FAILED_PRECONDITION, reason=LEASE_NOT_HELD,
                            metadata={"name": g.name})
        if not g.end(lost, lost=True):
            raise g.error or lost
        raise lost

    # -- closing -------------------------------------------------------------------

    def close(self) -> None:
        """Ends every session (and so every grant: ``lost`` set, ``error``
        ClientClosed), ends the stream (which gives up the coordinator's
        waits) and the Observe streams, closes the sessions on the
        coordinator (one CloseSession each releases their grants),
        best-effort for up to close_timeout, and closes the connection.
        Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.closing.set()
            sessions = list(self._sessions.values())
            closers = list(self._closers.values())
        sessions = [s for s in sessions if s.end(closed_error(), lost=True)]
        self.stream.close()
        for close in closers:
            close()
        if sessions and self.close_timeout > 0:
            with ThreadPoolExecutor(max_workers=min(len(sessions), 16)) as ex:
                for s in sessions:
                    ex.submit(self._close_remote, s)
        self.channel.close()


class Acquiring(Generic[F, S]):
    """One acquisition (of a lock, a share, a leadership or a group) by the
    rules of AcquireSteps, as a new holder, whichever Client waits for it.
    It also keeps a grant that arrives after its caller stopped waiting for
    that answer: kept when the acquisition goes on (asking again as the
    holder returns the same grant), given up when it failed. Its subclasses
    say what to ask (``request``) and what a grant is (``attach``)."""

    #: The operation that asks: "acquire", "campaign" or "acquire_group".
    op = ""

    def __init__(self, core: Core[F], kind: str, name: str, names: Tuple[str, ...], wait: Optional[float],
                 explicit: Optional[SessionState[F]]) -> None:
        self.core, self.kind, self.name, self.names, self.explicit = core, kind, name, names, explicit
        self.holder = core.new_holder()
        self.steps = AcquireSteps(kind, name, wait)
        self.lock = threading.Lock()
        self.given_up = False
        self.late_grant: Optional[Any] = None  # the give-up operation of a late grant
        self.session: Optional[SessionState[F]] = None
        self.default_ended = 0

    def request(self, session: SessionState[F], wait_for: float) -> Any:
        """The request of the next call, in session, waiting up to wait_for."""
        self.session = session
        return self.ask(session, wait_for)

    def ask(self, session: SessionState[F], wait_for: float) -> Any:
        """The request message (see request)."""
        raise NotImplementedError

    def attach(self, session: SessionState[F], grant: Grant) -> S:
        """The state of grant, attached to session."""
        raise NotImplementedError

    def late(self) -> Late:
        """The handler of the result of an operation that its caller stopped
        waiting for: a grant is given up at once unless the acquisition goes
        on (as the same holder, it gets that very grant); an unknown outcome
        is abandoned."""
        def late(res: Any, err: Optional[BaseException]) -> None:
            op = give_up_operation(res) if res is not None else None
            if op is not None:
                with self.lock:
                    if not self.given_up:
                        self.late_grant = op  # the acquisition goes on: it gives it up if it fails
                        return
                self.core.give_up_late(self.name, op)
            elif isinstance(err, CoordinatorError) and is_outcome_unknown(err.code):
                with self.lock:
                    if not self.given_up:
                        return
                self.abandon()

        return late

    def abandon(self) -> None:
        """Gives up whatever the holder may hold without having heard of it."""
        self.core.abandon(self.names, self.holder, group=self.op == "acquire_group")

    def answered(self, resp: Any) -> Step:
        return self.steps.answered(grant_of(self.op, resp))

    def failed(self, err: CoordinatorError) -> Step:
        s = self.session
        if isinstance(err, SessionEnded) and s is not None and s is not self.explicit and self.default_ended < 2:
            # The coordinator ended the default session before this client
            # noticed: end it here too, and ask again in a new one.
            self.default_ended += 1
            s.end(err, lost=True)
            return Step()
        step = self.steps.failed(err)
        if step.warning:
            log.warning(step.warning)
        return step

    def next(self, step: Step) -> Optional[S]:
        """Takes the Step after the pause: the grant, attached to its
        session, when granted; None to ask again; raises the error."""
        step = self.steps.resumed(step)
        if step.abandon:
            self.abandon()
        if step.error is not None:
            raise step.error
        if step.grant is None or self.session is None:
            return None
        return self.attach(self.session, step.grant)

    def over(self) -> None:
        """The acquisition failed: gives up a grant that came late."""
        with self.lock:
            self.given_up = True
            op, self.late_grant = self.late_grant, None
        if op is not None:
            self.core.give_up_late(self.name, op)


class GrantAcquiring(Acquiring[F, GrantState[F]]):
    """The acquisition of a lock, a share (capacity, weight) or a
    leadership (value)."""

    def __init__(self, core: Core[F], kind: str, name: str, wait: Optional[float],
                 explicit: Optional[SessionState[F]], capacity: int, weight: int, value: bytes) -> None:
        super().__init__(core, kind, name, (name,), wait, explicit)
        self.capacity, self.weight, self.value = capacity, weight, value
        self.op = "campaign" if kind == "leadership" else "acquire"

    def ask(self, session: SessionState[F], wait_for: float) -> Any:
        if self.op == "campaign":
            return campaign_request(self.name, self.holder, session.id, session.ttl, self.value, wait_for)
        return acquire_request(self.name, self.holder, session.id, session.ttl, wait_for, self.capacity,
                               self.weight)

    def attach(self, session: SessionState[F], grant: Grant) -> GrantState[F]:
        g = GrantState(session, self.kind, self.name, self.holder, grant.token, grant.weight, grant.value)
        session.attach(g)
        return g


class GroupAcquiring(Acquiring[F, GroupState[F]]):
    """The acquisition of a group: every member at once, or none."""

    op = "acquire_group"

    def __init__(self, core: Core[F], members: Sequence[Member], wait: Optional[float],
                 explicit: Optional[SessionState[F]]) -> None:
        names = tuple(m.name for m in members)
        super().__init__(core, "group", ", ".join(names), names, wait, explicit)
        self.members = tuple(members)

    def ask(self, session: SessionState[F], wait_for: float) -> Any:
        return group_request(self.members, self.holder, session.id, session.ttl, wait_for)

    def attach(self, session: SessionState[F], grant: Grant) -> GroupState[F]:
        g = GroupState(session, self.holder, grant.members)
        session.attach(g)
        return g


def _give_up_request(g: HeldState[Any]) -> Tuple[str, Any]:
    """The operation (kind, request) that gives g up on the coordinator."""
    if isinstance(g, GroupState):
        return "release_group", release_group_request(g.holder, [(m.name, m.token) for m in g.members])
    assert isinstance(g, GrantState)
    if g.kind == "leadership":
        return "resign", pb.ResignRequest(election=g.name, candidate=g.holder, term=g.token)
    return "release", pb.ReleaseRequest(name=g.name, holder=g.holder, token=g.token)


def _response(kind: str, res: Any) -> Any:
    """The response of an operation ``kind`` from its StreamResult; raises
    the error it carries."""
    which = res.WhichOneof("result")
    if which == "error":
        raise from_status(res.error)
    if which != kind:
        raise RPCError(f"a {kind} operation was answered with {which}", code=grpc.StatusCode.INTERNAL)
    return getattr(res, kind)
