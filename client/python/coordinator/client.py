"""The Client: one connection to a coordinator, and what is done through it."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

import grpc

from ._connect import PEM, channel_options, check_settings, plaintext_metadata, tls_credentials
from ._gen import pb, pb_grpc
from ._acquire import MAX_CAPACITY, OUTCOME_UNKNOWN, RW_CAPACITY, UNARY, AcquireSteps, Grant, ReleaseSteps, RWLockBase
from ._acquire import SemaphoreBase, abandoned_token, acquire_grant, acquire_request, campaign_grant, campaign_request
from ._rules import CLOSE_TIMEOUT, DEFAULT_TTL
from ._util import from_duration, to_duration
from .election import LeaderInfo, Leadership, Observation, Value, as_bytes
from .errors import (
    ClientClosed,
    CoordinatorError,
    NotAcquired,
    RPCError,
    SessionEnded,
    from_rpc_error,
    from_status,
)
from .keepalive import Renewals
from .lease import Description, Lease, LeaseInfo, _Held
from .session import Session, ended_default, fall_back, session_choice
from .stream import OpStream, UseUnary

__all__ = ["Client", "DEFAULT_TARGET", "DEFAULT_TTL", "Semaphore", "RWLock", "MAX_CAPACITY", "RW_CAPACITY"]

log = logging.getLogger("coordinator")

#: Where ``make run`` serves.
DEFAULT_TARGET = "127.0.0.1:7400"

T = TypeVar("T")


class _Attempt:
    """One acquisition, for a grant that arrives after its caller stopped
    waiting for that answer: kept when the acquisition goes on (asking again
    as the holder returns the same lease), given up when it failed."""

    __slots__ = ("lock", "over", "late")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.over = False
        self.late: Optional[Any] = None  # the give-up operation of a late grant


class Client:
    """A connection to one coordinator. Thread-safe: make one per process and
    share it; close it when done (or use it as a context manager).

    Args:
        target: host:port, or any gRPC target ("dns:///coord.example:7400").
        token: a bearer token, sent as ``authorization: Bearer TOKEN``. Sent
            as call credentials over TLS only, unless ``insecure_token``.
        tls: connect with TLS (implied by ``root_certificates``).
        root_certificates: PEM CA certificates to verify the coordinator
            with (bytes, PEM text or a file path); None: the system's roots.
        private_key, certificate_chain: a client certificate (mTLS).
        server_name: the name to verify the coordinator's certificate for,
            when it differs from the target's host.
        insecure_token: send ``token`` over a plaintext connection (loopback
            and tests only: anyone on the path can read it).
        holder: the identity every holder and candidate of this Client starts
            with (default: host name, process id, random suffix). Each
            acquisition holds as ``holder#N`` of its own, so that two
            threads locking one name through one Client exclude each other.
        ttl: the default lease TTL in seconds.
        timeout: the deadline of one call that does not wait, in seconds.
        close_timeout: how long close() (and release()) spend releasing, in
            seconds (default: the proto's ClientRules, 2 s).
        options: extra gRPC channel options.
        use_stream: carry acquire, renew, release, campaign and resign over
            one operation stream (the Stream RPC) shared by every thread (the
            default); False makes unary calls and renews over a KeepAlive
            stream instead. A coordinator without Stream turns the Client to
            unary calls.
        default_session: attach every acquisition and campaign made without
            a ``ttl`` and without a ``session`` to the Client's default
            session (see :meth:`default_session`), created by the first of
            them; False gives each a lease of its own ttl instead.
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
        use_stream: bool = True,
        default_session: bool = True,
    ) -> None:
        use_tls = tls or root_certificates is not None or certificate_chain is not None
        identity = check_settings(holder, ttl, token, use_tls, insecure_token)
        self.target = target
        self.identity = identity
        self.ttl = float(ttl)
        self.timeout = float(timeout)
        self.close_timeout = float(close_timeout)

        opts = channel_options(server_name, options)
        self._metadata: Optional[Tuple[Tuple[str, str], ...]] = None
        if use_tls:
            creds = tls_credentials(root_certificates, private_key, certificate_chain, token)
            self._channel = grpc.secure_channel(target, creds, options=opts)
        else:
            self._metadata = plaintext_metadata(token)
            self._channel = grpc.insecure_channel(target, options=opts)
        self._stub = pb_grpc.CoordinatorStub(self._channel)
        self._transport: Optional[OpStream] = OpStream(self._stub, self._metadata) if use_stream else None
        self._renewals = Renewals(self._stub, self._metadata, self._transport)
        self._seq = itertools.count(1)
        self._seq_lock = threading.Lock()
        self._closed = False
        self._closing = threading.Event()  # set by close(): ends retry sleeps
        self._close_lock = threading.Lock()
        self._observations: Dict[int, Observation] = {}
        self._obs_lock = threading.Lock()
        #: Whether acquisitions without a ttl or session attach to the
        #: default session; False once the coordinator turned out to lack
        #: sessions (Unimplemented).
        self._use_default = default_session
        self._default: Optional[Session] = None
        self._default_lock = threading.Lock()
        #: Every live session this Client created, which close() closes.
        self._sessions: Dict[int, Session] = {}
        self._sessions_lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------

    @property
    def stub(self) -> Any:
        """The raw generated CoordinatorStub on this Client's channel. Over
        plaintext with ``insecure_token``, pass ``metadata=client.metadata``
        yourself; prefer :meth:`call`, which does, and decodes errors."""
        return self._stub

    @property
    def metadata(self) -> Optional[Tuple[Tuple[str, str], ...]]:
        """The call metadata this Client adds (the insecure bearer token)."""
        return self._metadata

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._closed

    @property
    def uses_stream(self) -> bool:
        """Whether lease operations go over the operation stream (False with
        use_stream=False, or once the coordinator turned out to lack it)."""
        return self._transport is not None and not self._transport.unsupported

    def call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        """Calls the unary RPC ``method`` ("Describe", "Renew"…) with a request
        built from ``coordinator.pb``; raises CoordinatorError. Leases taken
        this way are not renewed."""
        return self._unary(method, request, timeout=timeout)

    def _unary(self, method: str, request: Any, timeout: Optional[float] = None, check_closed: bool = True) -> Any:
        if check_closed and self._closed:
            raise ClientClosed("the client was closed")
        fn = getattr(self._stub, method)
        try:
            return fn(request, timeout=self.timeout if timeout is None else timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            if self._closed and check_closed:
                raise ClientClosed("the client was closed") from e
            raise from_rpc_error(e) from None
        except ValueError as e:  # "Cannot invoke RPC on closed channel!"
            if self._closed:
                raise ClientClosed("the client was closed") from e
            raise

    def _lease_call(self, kind: str, request: Any, timeout: Optional[float] = None,
                    late: Optional[Callable[[Any, Optional[BaseException]], None]] = None,
                    check_closed: bool = True) -> Tuple[Any, float]:
        """Runs the lease operation ``kind`` ("acquire", "renew", "release",
        "campaign", "resign") over the operation stream, or as its unary call
        (use_stream=False, a coordinator without Stream, the Client
        closing). Returns (response, sent): when the request was sent, on
        time.monotonic(). Raises what the unary call would."""
        sess = self._transport
        if sess is not None and sess.usable():
            op = pb.StreamOperation(**{kind: request})
            try:
                res, sent = sess.call(op, self.timeout if timeout is None else timeout, late)
            except UseUnary:
                pass
            else:
                which = res.WhichOneof("result")
                if which == "error":
                    raise from_status(res.error)
                if which != kind:
                    raise RPCError(f"a {kind} operation was answered with {which}", code=grpc.StatusCode.INTERNAL)
                return getattr(res, kind), (sent if sent is not None else time.monotonic())
        sent = time.monotonic()
        return self._unary(UNARY[kind], request, timeout=timeout, check_closed=check_closed), sent

    def _late(self, attempt: _Attempt, name: str, holder: str,
              give_up: Callable[[Any], Optional[Any]]) -> Callable[[Any, Optional[BaseException]], None]:
        """The handler of the result of an acquisition's operation that its
        caller stopped waiting for: a grant is given up at once unless the
        acquisition goes on (as the same holder, it gets that very lease);
        an unknown outcome is abandoned."""

        def late(res: Any, err: Optional[BaseException]) -> None:
            op = give_up(res) if res is not None else None
            if op is not None:
                with attempt.lock:
                    if not attempt.over:
                        attempt.late = op  # the acquisition goes on: it gives it up if it fails
                        return
                self._give_up_late(name, op)
            elif isinstance(err, CoordinatorError) and err.code in OUTCOME_UNKNOWN:
                with attempt.lock:
                    if not attempt.over:
                        return
                threading.Thread(target=self._abandon, args=(name, holder), name="coordinator-abandon",
                                 daemon=True).start()

        return late

    def _give_up_late(self, name: str, op: Any) -> None:
        """Releases (or resigns) a lease granted to an acquisition whose
        caller had left by then, so that the next waiter need not wait for
        its TTL. Best-effort, without waiting for the answer."""
        kind = op.WhichOneof("operation")
        req = getattr(op, kind)

        def done(_o: Any, res: Any, err: Optional[BaseException]) -> None:
            if err is None and res is not None and res.WhichOneof("result") == "error":
                err = from_status(res.error)
            if err is not None:
                log.warning("coordinator: could not give up a lease of %r granted after its acquisition was "
                            "abandoned; it expires after its TTL: %s", name, err)

        def unary() -> None:
            try:
                self._unary(UNARY[kind], req, timeout=2.0)
            except CoordinatorError as e:
                done(None, None, e)

        sess = self._transport
        try:
            if sess is None:
                raise UseUnary()
            sess.submit(op, done)
        except UseUnary:
            threading.Thread(target=unary, name="coordinator-give-up", daemon=True).start()
        except ClientClosed:
            pass

    def _new_holder(self) -> str:
        with self._seq_lock:
            n = next(self._seq)
        return f"{self.identity}#{n}"

    def _ttl(self, ttl: Optional[float]) -> float:
        t = self.ttl if ttl is None else float(ttl)
        if t <= 0:
            raise ValueError(f"coordinator: ttl {t} is not positive")
        return t

    # -- locks ----------------------------------------------------------------

    def try_lock(self, name: str, ttl: Optional[float] = None, session: Optional[Session] = None) -> Optional[Lease]:
        """Acquires the lock ``name`` if it is free (and nobody is queued for
        it), without waiting; None when someone else holds it (use
        ``lock(name, wait=0)`` to learn who, from NotAcquired). The lease is
        renewed in the background until released, lost or the Client closed."""
        try:
            return self.lock(name, ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None

    def lock(self, name: str, ttl: Optional[float] = None, wait: Optional[float] = None,
             session: Optional[Session] = None) -> Lease:
        """Acquires the lock ``name``, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order with the other waiters,
        retrying transient errors meanwhile. Returns the Lease, renewed in the
        background; use it as a context manager to release it at the end::

            with client.lock("reports/nightly", ttl=10, wait=30) as lease:
                work(lease.token)

        In ``session``, the lease lives and ends with the session and is not
        renewed on its own; without a session, a lease of ``ttl`` is renewed
        on its own, and without either it attaches to the Client's default
        session (see :meth:`default_session`).

        Raises NotAcquired (naming the holder, and retry_after when known)
        when the wait ends first, and CoordinatorError for errors that waiting
        cannot fix (SessionEnded when ``session`` ended).
        """
        return self._share("lock", name, ttl, wait, 0, 0, session)

    def semaphore(self, name: str, capacity: int) -> "Semaphore":
        """The semaphore ``name`` of ``capacity`` (1 to MAX_CAPACITY): shares
        of it whose weights sum to at most the capacity, each a Lease of its
        own (see Semaphore). Every user of the name must agree on capacity."""
        return Semaphore(self, name, capacity)

    def rwlock(self, name: str) -> "RWLock":
        """The read-write lock ``name``: many readers at once, or one writer
        (see RWLock)."""
        return RWLock(self, name)

    def _share(self, kind: str, name: str, ttl: Optional[float], wait: Optional[float],
               capacity: int, weight: int, session: Optional[Session] = None) -> Lease:
        """Acquires weight of name of capacity (0 and 0: an exclusive lock)."""
        t = session.ttl if session is not None else self._ttl(ttl)
        attempt = _Attempt()
        used: List[Optional[Session]] = [None]

        def give_up(res: Any) -> Optional[Any]:
            if res.WhichOneof("result") == "acquire" and res.acquire.acquired:
                l = res.acquire.lease
                return pb.StreamOperation(release=pb.ReleaseRequest(name=l.name, holder=l.holder, token=l.token))
            return None

        def call(holder: str, wait_for: float, timeout: float) -> Grant:
            def in_session(s: Optional[Session]) -> Grant:
                tt, sid = (s.ttl, s.id) if s is not None else (t, "")
                req = acquire_request(name, holder, tt, wait_for, capacity, weight, sid)
                resp, sent = self._lease_call("acquire", req, timeout=timeout,
                                              late=self._late(attempt, name, holder, give_up))
                return acquire_grant(resp, tt, sent, attached=s is not None)

            return self._in_session(session, ttl, used, in_session)

        holder, grant, sent = self._acquire(kind, name, t, wait, call, attempt)
        lease = Lease(self, name, holder, grant.token, grant.ttl, sent, weight=grant.weight, kind=kind)
        self._register(lease, used[0])
        return lease

    def acquire(self, name: str, ttl: Optional[float] = None, wait: Optional[float] = None,
                session: Optional[Session] = None) -> Lease:
        """The same as :meth:`lock`."""
        return self.lock(name, ttl=ttl, wait=wait, session=session)

    def release(self, lease: Lease) -> bool:
        """Releases ``lease`` (see Lease.release)."""
        return lease.release()

    # -- elections ------------------------------------------------------------

    def campaign(self, election: str, value: Value = b"", ttl: Optional[float] = None,
                 wait: Optional[float] = None, session: Optional[Session] = None) -> Leadership:
        """Runs for leadership of ``election`` with ``value``, waiting up to
        ``wait`` seconds (None: for ever) in arrival order with the other
        candidates. Returns the Leadership, renewed in the background until
        resigned, lost or the Client closed (in ``session``, or the default
        session without a ``ttl``, as :meth:`lock`: it lives and ends with
        the session). Raises NotAcquired (naming the sitting leader) when the
        wait ends first."""
        t = session.ttl if session is not None else self._ttl(ttl)
        data = as_bytes(value)
        attempt = _Attempt()
        used: List[Optional[Session]] = [None]

        def give_up(res: Any) -> Optional[Any]:
            if res.WhichOneof("result") == "campaign" and res.campaign.elected:
                l = res.campaign.leader
                return pb.StreamOperation(resign=pb.ResignRequest(election=l.election, candidate=l.candidate, term=l.term))
            return None

        def call(candidate: str, wait_for: float, timeout: float) -> Grant:
            def in_session(s: Optional[Session]) -> Grant:
                tt, sid = (s.ttl, s.id) if s is not None else (t, "")
                req = campaign_request(election, candidate, data, tt, wait_for, sid)
                resp, sent = self._lease_call("campaign", req, timeout=timeout,
                                              late=self._late(attempt, election, candidate, give_up))
                return campaign_grant(resp, tt, sent, attached=s is not None)

            return self._in_session(session, ttl, used, in_session)

        candidate, grant, sent = self._acquire("leadership", election, t, wait, call, attempt)
        leadership = Leadership(self, election, candidate, grant.token, grant.ttl, sent, grant.value)
        self._register(leadership, used[0])
        return leadership

    def run_as_leader(self, election: str, fn: Callable[[Leadership], T], value: Value = b"",
                      ttl: Optional[float] = None, wait: Optional[float] = None,
                      session: Optional[Session] = None) -> T:
        """Campaigns for ``election`` (see :meth:`campaign`), runs
        ``fn(leadership)`` while leader, resigns when fn returns or raises,
        and returns fn's result. fn must watch ``leadership.lost`` (an Event)
        or ``leadership.valid()`` and stop acting when the leadership ends."""
        leadership = self.campaign(election, value=value, ttl=ttl, wait=wait, session=session)
        try:
            return fn(leadership)
        finally:
            try:
                leadership.resign()
            except Exception:
                log.warning("coordinator: could not resign %r", leadership, exc_info=True)

    def leader(self, election: str) -> Optional[LeaderInfo]:
        """The sitting leader of ``election``, or None."""
        resp = self._unary("Leader", pb.LeaderRequest(election=election))
        return LeaderInfo._from_pb(resp.leader) if resp.has_leader else None

    def observe(self, election: str) -> Observation:
        """Opens an Observe stream on ``election``: an iterator of
        ObserveEvent, the first marked ``initial`` (the state when it opened),
        then every change. Close it when done (or use ``with``)."""
        if self._closed:
            raise ClientClosed("the client was closed")
        call = self._stub.Observe(pb.ObserveRequest(election=election), metadata=self._metadata)
        obs = Observation(self, election, call)
        with self._obs_lock:
            self._observations[id(obs)] = obs
        if self._closed:
            obs.close()
        return obs

    def forget_observation(self, obs: Observation) -> None:
        """Part of _ObservationHost (election.py), for the Observations this
        Client opened: drops obs from those close() closes."""
        with self._obs_lock:
            self._observations.pop(id(obs), None)

    # -- sessions -------------------------------------------------------------

    def session(self, ttl: Optional[float] = None) -> Session:
        """Creates a session of ``ttl`` seconds (default: the Client's ttl),
        renewed in the background about every ttl/3 until closed, lost or
        the Client closed. Pass it as ``session=`` to acquisitions and
        campaigns: every grant in it lives and ends with it, and one renewal
        keeps them all. Use it as a context manager to close it (and release
        its grants, in one call) at the end::

            with client.session(ttl=10) as session:
                a = client.lock("parts/1", session=session)
                b = client.lock("parts/2", session=session)

        Raises the coordinator's error (Unimplemented from one without
        sessions)."""
        t = self._ttl(ttl)
        sent = time.monotonic()
        resp = self._unary("CreateSession", pb.CreateSessionRequest(ttl=to_duration(t)))
        s = Session(self, resp.session.id, from_duration(resp.session.ttl, t) or t, sent)
        with self._sessions_lock:
            if not self._closed:
                self._sessions[id(s)] = s
                s._start()
                return s
        s._end(ClientClosed("the client was closed"), lost=True)
        s._close_remote()
        raise ClientClosed("the client was closed")

    def default_session(self) -> Session:
        """The Client's default session, created (with the Client's ttl) if
        it has none or its last one ended: every acquisition and campaign
        without a ``ttl`` and without a ``session`` attaches to it. Raises
        ValueError when the Client was made with default_session=False, and
        the coordinator's error when it cannot be created."""
        if not self._use_default:
            raise ValueError("coordinator: this Client has no default session (default_session=False, or the "
                             "coordinator has no sessions)")
        with self._default_lock:
            s = self._default
            if s is None or s.done:
                s = self._default = self.session()
            return s

    def _session_for(self, explicit: Optional[Session], ttl: Optional[float]) -> Optional[Session]:
        """The session an acquisition's next call attaches to: ``explicit``,
        or the default session (created if need be), or None for a grant of
        its own ttl. A coordinator without sessions turns the default
        session off (logged once)."""
        s, default = session_choice(explicit, ttl, self._use_default)
        if not default:
            return s
        try:
            return self.default_session()
        except CoordinatorError as err:
            self._use_default = fall_back(err, self._use_default)
            return None

    def _in_session(self, explicit: Optional[Session], ttl: Optional[float], used: List[Optional[Session]],
                    call: Callable[[Optional[Session]], Grant]) -> Grant:
        """``call(session)`` in the session of _session_for, recorded in
        used[0]; once more in a new default session when the coordinator
        says the default one ended."""
        for again in (True, False):
            s = used[0] = self._session_for(explicit, ttl)
            try:
                return call(s)
            except SessionEnded as err:
                if not ended_default(err, s, explicit, again):
                    raise
        raise AssertionError("unreachable")

    def session_call(self, kind: str, request: Any, timeout: float) -> Tuple[Any, float]:
        """Part of _SessionHost (session.py): a session's RenewSession (over
        the operation stream as a renew_session operation, when this Client
        uses it) or CloseSession, and when it was sent."""
        if kind == "close_session":
            sent = time.monotonic()
            return self._unary("CloseSession", request, timeout=timeout, check_closed=False), sent
        return self._lease_call(kind, request, timeout=timeout)

    def forget_session(self, s: Session) -> None:
        """Part of _SessionHost: drops the ended s from those close() closes."""
        with self._sessions_lock:
            self._sessions.pop(id(s), None)

    # -- inspection -----------------------------------------------------------

    def describe(self, name: str) -> Description:
        """The current lease of ``name``, if any, and its last token."""
        return Description._from_pb(name, self._unary("Describe", pb.DescribeRequest(name=name)))

    def list_leases(self, prefix: str = "", page_size: int = 0) -> Iterator[LeaseInfo]:
        """Every lease held now under ``prefix``, in name order."""
        page_token = ""
        while True:
            resp = self._unary("List", pb.ListRequest(prefix=prefix, page_size=page_size, page_token=page_token))
            for m in resp.leases:
                yield LeaseInfo._from_pb(m)
            page_token = resp.next_page_token
            if not page_token:
                return

    # -- acquisition ----------------------------------------------------------

    def _acquire(self, kind: str, name: str, ttl: float, wait: Optional[float],
                 call: Callable[[str, float, float], Grant],
                 attempt: Optional[_Attempt] = None) -> Tuple[str, Grant, float]:
        try:
            return self._acquire_loop(kind, name, ttl, wait, call)
        except BaseException:
            if attempt is not None:
                with attempt.lock:
                    attempt.over = True
                    op, attempt.late = attempt.late, None
                if op is not None:
                    self._give_up_late(name, op)
            raise

    def _acquire_loop(self, kind: str, name: str, ttl: float, wait: Optional[float],
                      call: Callable[[str, float, float], Grant]) -> Tuple[str, Grant, float]:
        """Runs an acquisition as a new holder by the rules of AcquireSteps
        (_acquire.py). Returns (holder, grant, sent): ``sent`` is when the
        granting request was sent, on time.monotonic()."""
        holder, steps = self._new_holder(), AcquireSteps(kind, name, ttl, wait)
        while True:
            wait_for = steps.begin()
            try:
                step = steps.answered(call(holder, wait_for, wait_for + self.timeout))
            except CoordinatorError as err:
                step = steps.failed(err)
            if step.warning:
                log.warning(step.warning)
            if step.pause is not None and (self._closing.wait(step.pause) or self._closed):
                raise ClientClosed("the client was closed") from step.retrying
            step = steps.resumed(step)
            if step.abandon:
                self._abandon(name, holder)
            if step.error is not None:
                raise step.error
            if step.grant is not None:
                return holder, step.grant, steps.sent

    def _register(self, h: _Held, session: Optional[Session] = None) -> None:
        if session is not None:
            err = session._attach(h)  # ended meanwhile: h ends with it
            if err is not None:
                raise err
            return
        if not self._renewals.add(h):  # closed meanwhile
            self._give_up(h)
            raise ClientClosed("the client was closed")

    def _abandon(self, name: str, holder: str) -> None:
        """Gives up a lease that an acquisition may have been granted without
        hearing of it, so that others need not wait for its TTL. Best-effort."""
        if self._closed:
            return
        try:
            token = abandoned_token(self._unary("Describe", pb.DescribeRequest(name=name), timeout=2.0), holder)
            if token is not None:
                self._unary("Release", pb.ReleaseRequest(name=name, holder=holder, token=token), timeout=2.0)
        except CoordinatorError as e:
            log.warning("coordinator: could not give up an abandoned grant of %r; it expires after its TTL: %s", name, e)

    def _give_up(self, h: _Held, timeout: Optional[float] = None) -> bool:
        """One Release (or Resign) call, without retries."""
        if isinstance(h, Leadership):
            resp, _ = self._lease_call("resign", pb.ResignRequest(election=h.name, candidate=h.holder, term=h.token),
                                       timeout=timeout, check_closed=False)
            return bool(resp.resigned)
        resp, _ = self._lease_call("release", pb.ReleaseRequest(name=h.name, holder=h.holder, token=h.token),
                                   timeout=timeout, check_closed=False)
        return bool(resp.released)

    # -- what its grants use: the _LeaseHost protocol (lease.py) --------------
    # A Lease or Leadership of this Client talks to it through these alone.
    # They are for the Client's own grants, not for applications.

    def grant_call(self, kind: str, request: Any) -> Tuple[Any, float]:
        """Part of _LeaseHost: the lease operation ``kind`` as this Client
        makes them, and when it was sent."""
        return self._lease_call(kind, request)

    def end_grant(self, h: _Held, err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        """Part of _LeaseHost: stops renewing h and ends it, unless it ended
        already. Returns (ended_now, prior_error)."""
        ended = self._renewals.end(h, err, lost)
        if h._session is not None:
            h._session._detach(h)
        return ended

    def grant_renewed(self, h: _Held, sent: float, ttl: float) -> bool:
        """Part of _LeaseHost: records a renewal of h sent at ``sent``;
        reports whether h is still held. An attached grant's validity is
        its session's."""
        if h._session is not None:
            return h.valid()
        return self._renewals.renewed(h, sent, ttl)

    def watch_lost(self, h: _Held, callback: Callable[[_Held], None]) -> bool:
        """Part of _LeaseHost: has ``callback(h)`` called when h is lost;
        False when it is lost already."""
        return self._renewals.watch_lost(h, callback)

    def release_grant(self, h: _Held, resign: bool) -> bool:
        """Part of _LeaseHost: ends h and gives it up on the coordinator
        (Lease.release, Leadership.resign)."""
        ended_now, prior = self.end_grant(h, None, lost=False)
        steps = ReleaseSteps(self.timeout, self.close_timeout, ended_now, prior, self._closed)
        while steps.calling():
            try:
                return steps.released(self._give_up(h, timeout=steps.call_timeout()))
            except CoordinatorError as err:
                time.sleep(steps.failed(err, self._closed))
        return False

    # -- closing --------------------------------------------------------------

    def close(self) -> None:
        """Ends every lease, leadership and session (``lost`` is set,
        ``error`` is ClientClosed), closes the sessions (one CloseSession
        each releases their grants) and releases the other grants,
        best-effort for up to close_timeout, so that waiters need not wait
        for their TTLs, ends open Observe streams and closes the connection.
        Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._closing.set()
        with self._sessions_lock:
            sessions = list(self._sessions.values())
        # Their grants end (ClientClosed) at once; one CloseSession each
        # releases them on the coordinator below.
        sessions = [s for s in sessions if s._end(ClientClosed("the client was closed"), lost=True)]
        held = self._renewals.close()
        if self._transport is not None:
            # Ends the stream, which gives up the coordinator's waits; what
            # is held is released below by unary calls.
            self._transport.close()
        with self._obs_lock:
            observations = list(self._observations.values())
        for obs in observations:
            obs.close()
        if (held or sessions) and self.close_timeout > 0:
            with ThreadPoolExecutor(max_workers=min(len(held) + len(sessions), 16)) as ex:
                for s in sessions:
                    ex.submit(s._close_remote)
                futures = [ex.submit(self._give_up, h, self.close_timeout) for h in held]
                for h, f in zip(held, futures):
                    try:
                        f.result()
                    except Exception as e:
                        log.warning("coordinator: could not release %r on close; it expires after its TTL: %s", h, e)
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<coordinator.Client {self.target!r} identity={self.identity!r}>"


class Semaphore(SemaphoreBase[Lease]):
    """A name of a fixed capacity whose shares ``acquire`` and
    ``try_acquire`` take: at most ``capacity`` weight held at once, across
    processes. Each share is a Lease of its own, with its own token, renewal,
    ``lost`` signal and release. Waiters are served in arrival order, a large
    request holding back later small ones, so that nobody starves. While the
    name is held or awaited, a request with another capacity raises
    CapacityMismatch. A Semaphore holds nothing itself."""

    def try_acquire(self, n: int = 1, ttl: Optional[float] = None, session: Any = None) -> Optional[Lease]:
        """Takes ``n`` of the capacity if it is free now and nobody waits;
        None otherwise."""
        try:
            return self.acquire(n, ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None


class RWLock(RWLockBase[Lease]):
    """A read-write lock on a name: many readers at once, or one writer. It
    is a semaphore of capacity RW_CAPACITY whose readers take 1 and writers
    all of it, so it is fair: a writer waiting behind readers is granted
    before the readers that came after it. A writer's token is above every
    token granted before it: a resource that remembers the last writer's
    token refuses every lower one."""

    def try_read_lock(self, ttl: Optional[float] = None, session: Any = None) -> Optional[Lease]:
        """A read share if no writer holds or waits; None otherwise."""
        try:
            return self.read_lock(ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None

    def try_write_lock(self, ttl: Optional[float] = None, session: Any = None) -> Optional[Lease]:
        """The write lock if nobody holds or waits for it; None otherwise."""
        try:
            return self.write_lock(ttl=ttl, wait=0, session=session)
        except NotAcquired:
            return None
