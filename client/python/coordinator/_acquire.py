"""The decisions of acquiring and giving up a grant, without their I/O: the
sync Client and the asyncio one make the calls, sleep and give up
abandoned grants, each in its own way, and ask these helpers what to do
next, so that both follow one set of rules."""

from __future__ import annotations

import time
from typing import Any, Generic, Optional, Protocol, TypeVar

import grpc

from ._gen import pb
from ._rules import ANSWER_MARGIN, MAX_CONFIRMS, MAX_WAIT, field_rules
from ._util import call_backoff, drift_margin, from_duration, to_duration
from .errors import ClientClosed, CoordinatorError, LeaseExpired, NotAcquired

#: The outcomes after which a grant may have been made without its caller
#: hearing of it.
OUTCOME_UNKNOWN = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)

#: The unary call of each lease operation (an operation stream operation's kind).
UNARY = {"acquire": "TryAcquire", "renew": "Renew", "release": "Release", "campaign": "Campaign", "resign": "Resign",
         "renew_session": "RenewSession"}

#: The largest capacity of a name (TryAcquireRequest.capacity's rules).
MAX_CAPACITY = int(field_rules(pb.TryAcquireRequest, "capacity").max_value)

#: The capacity of a read-write lock: readers hold 1 of it, writers all of
#: it. Every client library uses the proto's RW_CAPACITY, so that their
#: readers and writers share a name.
RW_CAPACITY = int(pb.RW_CAPACITY)


class Grant:
    """One answer to an acquisition's request: granted or not, and what the
    coordinator said with it."""

    __slots__ = ("acquired", "token", "ttl", "value", "holder", "retry_after", "sent", "weight", "attached")

    def __init__(self, acquired: bool, token: int = 0, ttl: float = 0.0, value: bytes = b"",
                 holder: Optional[str] = None, retry_after: Optional[float] = None,
                 sent: Optional[float] = None, weight: int = 1, attached: bool = False) -> None:
        self.acquired, self.token, self.ttl, self.value = acquired, token, ttl, value
        self.holder, self.retry_after, self.sent, self.weight = holder, retry_after, sent, weight
        #: Granted in a session: valid as long as the session, whenever it came.
        self.attached = attached


# -- requests and their answers -----------------------------------------------


def acquire_request(name: str, holder: str, ttl: float, wait_for: float, capacity: int = 0,
                    weight: int = 0, session_id: str = "") -> Any:
    """The TryAcquireRequest of a lock (capacity and weight 0) or a share,
    attached to the session ``session_id`` unless it is empty."""
    req = pb.TryAcquireRequest(name=name, holder=holder, ttl=to_duration(ttl), capacity=capacity, weight=weight,
                               session_id=session_id)
    if wait_for > 0:
        req.wait.CopyFrom(to_duration(wait_for))
    return req


def campaign_request(election: str, candidate: str, value: bytes, ttl: float, wait_for: float,
                     session_id: str = "") -> Any:
    """The CampaignRequest of a new campaign, in the session ``session_id``
    unless it is empty."""
    req = pb.CampaignRequest(election=election, candidate=candidate, value=value, ttl=to_duration(ttl),
                             session_id=session_id)
    if wait_for > 0:
        req.wait.CopyFrom(to_duration(wait_for))
    return req


def _retry_after(resp: Any) -> Optional[float]:
    return from_duration(resp.retry_after) if resp.HasField("retry_after") else None


def acquire_grant(resp: Any, ttl: float, sent: Optional[float] = None, attached: bool = False) -> Grant:
    """The Grant of a TryAcquireResponse to a request for ``ttl`` (in a
    session when ``attached``), sent at ``sent`` when the transport knows
    better than the caller."""
    if not resp.acquired:
        return Grant(False, holder=resp.holder or None, retry_after=_retry_after(resp))
    return Grant(True, token=int(resp.lease.token), ttl=from_duration(resp.lease.ttl, ttl) or ttl,
                 value=bytes(resp.lease.value), sent=sent, weight=max(int(resp.lease.weight), 1), attached=attached)


def campaign_grant(resp: Any, ttl: float, sent: Optional[float] = None, attached: bool = False) -> Grant:
    """The Grant of a CampaignResponse to a campaign for ``ttl``."""
    if not resp.elected:
        return Grant(False, holder=resp.leader.candidate or None, retry_after=_retry_after(resp))
    return Grant(True, token=int(resp.leader.term), ttl=ttl, value=bytes(resp.leader.value), sent=sent,
                 attached=attached)


def abandoned_token(resp: Any, holder: str) -> Optional[int]:
    """The token ``holder`` holds by a DescribeResponse (a semaphore's holder
    may be any of its grants), or None."""
    for lease in list(resp.holders) + ([resp.lease] if resp.held else []):
        if lease.holder == holder:
            return int(lease.token)
    return None


# -- semaphores -----------------------------------------------------------------


def check_capacity(kind: str, name: str, capacity: int) -> int:
    """capacity as an int; ValueError when it is not within 1 to MAX_CAPACITY."""
    if not 1 <= int(capacity) <= MAX_CAPACITY:
        raise ValueError(f"coordinator: {kind} {name!r}: capacity {capacity} is not within 1 to {MAX_CAPACITY}")
    return int(capacity)


def check_weight(kind: str, name: str, weight: int, capacity: int) -> int:
    """weight as an int; ValueError when it is not within 1 to capacity."""
    if not 1 <= int(weight) <= capacity:
        raise ValueError(f"coordinator: {kind} {name!r}: weight {weight} is not within 1 to the capacity, {capacity}")
    return int(weight)


A = TypeVar("A", covariant=True)


class _Shares(Protocol[A]):
    """What a Semaphore or RWLock needs of its Client: an acquisition of
    weight of name of capacity (a Lease, or what awaits one)."""

    def _share(self, kind: str, name: str, ttl: Optional[float], wait: Optional[float],
               capacity: int, weight: int, session: Any = None) -> A: ...


class SemaphoreBase(Generic[A]):
    """What the sync and the asyncio Semaphore share: the capacity, checked
    once, and ``acquire``, which returns the Client's acquisition."""

    kind = "semaphore"

    def __init__(self, client: _Shares[A], name: str, capacity: int) -> None:
        self._client, self.name, self.capacity = client, name, check_capacity(self.kind, name, capacity)

    def acquire(self, n: int = 1, ttl: Optional[float] = None, wait: Optional[float] = None,
                session: Any = None) -> A:
        """Takes ``n`` of the capacity, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order, in ``session`` (or the
        Client's default session, without a ``ttl``). Raises NotAcquired when
        the wait ends first."""
        weight = check_weight(self.kind, self.name, n, self.capacity)
        return self._client._share(self.kind, self.name, ttl, wait, self.capacity, weight, session)

    def __repr__(self) -> str:
        return f"<Semaphore {self.name!r} capacity={self.capacity}>"


class RWLockBase(Generic[A]):
    """What the sync and the asyncio RWLock share: a semaphore of capacity
    RW_CAPACITY whose readers take 1 and writers all of it."""

    def __init__(self, client: _Shares[A], name: str) -> None:
        self._client, self.name = client, name

    def read_lock(self, ttl: Optional[float] = None, wait: Optional[float] = None, session: Any = None) -> A:
        """Takes a read share, waiting up to ``wait`` seconds (None: for ever)."""
        return self._client._share("read lock", self.name, ttl, wait, RW_CAPACITY, 1, session)

    def write_lock(self, ttl: Optional[float] = None, wait: Optional[float] = None, session: Any = None) -> A:
        """Takes the lock for writing, waiting up to ``wait`` seconds."""
        return self._client._share("write lock", self.name, ttl, wait, RW_CAPACITY, RW_CAPACITY, session)

    def __repr__(self) -> str:
        return f"<RWLock {self.name!r}>"


# -- the acquisition loop -------------------------------------------------------


class Step:
    """What an acquisition does after one answer (or error), in this order:
    log ``warning``; pause (seconds, ending early when the Client closes:
    raise ClientClosed then, from ``retrying``) and ask ``resumed`` for the
    next Step; give up the grant the holder may have been made without
    hearing of it (``abandon``); raise ``error``; return ``grant``. With
    none of these, it asks again at once."""

    __slots__ = ("warning", "pause", "retrying", "abandon", "error", "grant")

    def __init__(self, pause: Optional[float] = None, retrying: Optional[CoordinatorError] = None,
                 abandon: bool = False, error: Optional[BaseException] = None, grant: Optional[Grant] = None,
                 warning: Optional[str] = None) -> None:
        self.pause, self.retrying, self.abandon, self.error, self.grant = pause, retrying, abandon, error, grant
        self.warning = warning


_AGAIN = Step()


class AcquireSteps:
    """The rules of one acquisition as ``holder``: once (wait 0) or until
    granted or ``wait`` passed, retrying transient errors as the same holder
    (which finds a lost grant again).

    A grant's validity is counted from when its request was sent; one that
    arrived after a long wait has little of it left, so it is confirmed by
    asking again as the holder, which the coordinator answers at once with
    the same token and a fresh TTL.

    The caller loops: ``begin()`` for the wait of the next request, then the
    request, then ``answered(grant)`` or ``failed(err)`` for the Step to take
    (see Step); ``sent`` is when the request of the grant was sent.
    """

    def __init__(self, kind: str, name: str, ttl: float, wait: Optional[float]) -> None:
        self.kind, self.name, self.ttl = kind, name, ttl
        self.waiting = wait is None or wait > 0
        self.end = None if wait is None else time.monotonic() + max(wait, 0.0)
        self.usable = ttl - drift_margin(ttl)
        self.backoff = call_backoff()
        self.confirms = 0
        self.last_err: Optional[CoordinatorError] = None
        self.last_holder: Optional[str] = None
        #: When the request of the last answer was sent (time.monotonic()).
        self.sent = 0.0
        self.wait_for = 0.0

    def begin(self) -> float:
        """How long the next request may wait on the coordinator; marks now
        as its send time."""
        wait_for = 0.0
        if self.waiting and self.confirms == 0:
            wait_for = MAX_WAIT
            if self.end is not None:
                wait_for = max(min(wait_for, self.end - time.monotonic() - ANSWER_MARGIN), 0.0)
        self.wait_for = wait_for
        self.sent = time.monotonic()
        return wait_for

    def failed(self, err: CoordinatorError) -> Step:
        """The Step after the request raised err."""
        if isinstance(err, ClientClosed):
            return Step(error=err)
        left = None if self.end is None else self.end - time.monotonic()
        if self.waiting and err.transient and (left is None or left > 0):
            self.last_err = err
            delay = max(self.backoff.next(), err.retry_after or 0.0)
            if left is not None:
                delay = min(delay, left)
            return Step(pause=delay, retrying=err,
                        warning=f"coordinator: {self.kind} {self.name!r}: acquisition failed; retrying: {err}")
        return self._give_up(err)

    def resumed(self, step: Step) -> Step:
        """The Step after the pause of ``step``: step itself when it had none."""
        if step.pause is None:
            return step
        if step.retrying is not None and self.end is not None and time.monotonic() >= self.end:
            return self._give_up(step.retrying)
        return _AGAIN

    def _give_up(self, err: CoordinatorError) -> Step:
        error: BaseException = err
        if self.waiting and self.last_err is not None and self.end is not None and time.monotonic() >= self.end:
            error = NotAcquired(self.name, self.last_holder, None, self.last_err)
            error.__cause__ = err
        return Step(abandon=err.code in OUTCOME_UNKNOWN, error=error)

    def answered(self, g: Grant) -> Step:
        """The Step after the request was answered with g."""
        now = time.monotonic()
        if not g.acquired:
            self.confirms = 0
            self.last_holder = g.holder
            if not self.waiting or (self.end is not None and now >= self.end - ANSWER_MARGIN):
                return Step(error=NotAcquired(self.name, g.holder, g.retry_after))
            if now - self.sent < self.wait_for / 2:
                # Answered long before the wait was over (a coordinator
                # shutting down?): do not spin.
                return Step(pause=self.backoff.next())
            return _AGAIN  # the coordinator's longest wait passed: ask again
        self.backoff.reset()
        if g.sent is not None:
            self.sent = g.sent  # when the message carrying it went out
        if g.attached:
            return Step(grant=g)  # valid as long as its session: nothing to confirm
        if self.sent + self.usable - now < self.usable / 2 and self.confirms < MAX_CONFIRMS:
            self.confirms += 1
            return _AGAIN
        if now >= self.sent + g.ttl - drift_margin(g.ttl):
            return Step(abandon=True, error=CoordinatorError(
                f"{self.kind} {self.name!r}: every grant arrived after its validity ended "
                f"(the coordinator answers slower than the TTL {self.ttl}s allows)"
            ))
        return Step(grant=g)


# -- giving up --------------------------------------------------------------------


class ReleaseSteps:
    """The rules of giving up a grant (Release, or Resign) that a caller
    ended: one call after another for up to ``close_timeout`` while the
    errors are transient. A grant that had ended already is not given up,
    unless it expired on this process's clock, when the coordinator may hold
    it yet: then one call is tried, whose errors do not matter.

    The caller loops while ``calling()``: ``released(answer)`` with the
    call's answer returns, ``failed(err)`` the pause before the next call
    (it raises err when no retry can fix it)."""

    def __init__(self, timeout: float, close_timeout: float, ended_now: bool, prior: Optional[BaseException],
                 closed: bool) -> None:
        self.timeout, self.close_timeout = timeout, close_timeout
        self.retries = ended_now
        self.over = not ended_now and (closed or not isinstance(prior, LeaseExpired))
        self.end = time.monotonic() + close_timeout
        self.backoff = call_backoff()

    def calling(self) -> bool:
        """Whether to make (another) call."""
        return not self.over

    def call_timeout(self) -> float:
        """The deadline of the next call."""
        if not self.retries:
            return min(self.timeout, self.close_timeout)
        return max(min(self.timeout, self.end - time.monotonic()), 0.1)

    def released(self, answer: bool) -> bool:
        """What the release returns when the call answered ``answer``: False
        for a grant that had ended before."""
        return answer and self.retries

    def failed(self, err: CoordinatorError, closed: bool) -> float:
        """The pause before the next call after err (ending the loop when
        there is none); raises err when retrying cannot fix it."""
        now = time.monotonic()
        if closed or not self.retries:
            self.over = True
            return 0.0
        if err.transient and now + 0.05 < self.end:
            return min(max(self.backoff.next(), err.retry_after or 0.0), max(self.end - now, 0.0))
        raise err
