"""The decisions of acquiring and giving up a grant, without their I/O: the
sync Client and the asyncio one make the calls, sleep and give up
abandoned grants, each in its own way, and ask these helpers what to do
next, so that both follow one set of rules."""

from __future__ import annotations

import time
from typing import Any, Callable, Generic, Iterable, Optional, Sequence, Tuple, TypeVar

import grpc

from ._gen import pb
from ._rules import ANSWER_MARGIN, MAX_WAIT, field_rules
from ._state import MemberGrant
from ._util import call_backoff, from_duration, to_duration
from .errors import ClientClosed, CoordinatorError, InvalidField, NotAcquired, is_outcome_unknown
from .group import Member

#: The largest capacity of a name (TryAcquireRequest.capacity's rules).
MAX_CAPACITY = int(field_rules(pb.TryAcquireRequest, "capacity").max_value)

#: The capacity of a read-write lock: readers hold 1 of it, writers all of
#: it. Every client library uses the proto's RW_CAPACITY, so that their
#: readers and writers share a name.
RW_CAPACITY = int(pb.RW_CAPACITY)

#: The most names a group may have (AcquireGroupRequest.members' rules).
MAX_GROUP_MEMBERS = int(field_rules(pb.AcquireGroupRequest, "members").max_value)

_INVALID_FIELD = pb.ErrorReason.Name(pb.INVALID_FIELD)


class Grant:
    """One answer to an acquisition's request: granted or not, and what the
    coordinator said with it. A group's grant has its ``members``; a
    group's refusal names the member in the way (``blocked``)."""

    __slots__ = ("acquired", "token", "value", "holder", "retry_after", "weight", "members", "blocked")

    def __init__(self, acquired: bool, token: int = 0, value: bytes = b"", holder: Optional[str] = None,
                 retry_after: Optional[float] = None, weight: int = 1, members: Tuple[MemberGrant, ...] = (),
                 blocked: Optional[str] = None) -> None:
        self.acquired, self.token, self.value = acquired, token, value
        self.holder, self.retry_after, self.weight = holder, retry_after, weight
        self.members, self.blocked = members, blocked


# -- requests and their answers -----------------------------------------------


def acquire_request(name: str, holder: str, session_id: str, ttl: float, wait_for: float, capacity: int = 0,
                    weight: int = 0) -> Any:
    """The TryAcquireRequest of a lock (capacity and weight 0) or a share, in
    the session ``session_id`` of ``ttl`` (which the coordinator checks but
    ignores in a session)."""
    req = pb.TryAcquireRequest(name=name, holder=holder, ttl=to_duration(ttl), capacity=capacity, weight=weight,
                               session_id=session_id)
    if wait_for > 0:
        req.wait.CopyFrom(to_duration(wait_for))
    return req


def campaign_request(election: str, candidate: str, session_id: str, ttl: float, value: bytes,
                     wait_for: float) -> Any:
    """The CampaignRequest of a new campaign in the session ``session_id``."""
    req = pb.CampaignRequest(election=election, candidate=candidate, value=value, ttl=to_duration(ttl),
                             session_id=session_id)
    if wait_for > 0:
        req.wait.CopyFrom(to_duration(wait_for))
    return req


def group_request(members: Sequence[Member], holder: str, session_id: str, ttl: float, wait_for: float) -> Any:
    """The AcquireGroupRequest of a new group in the session ``session_id``."""
    req = pb.AcquireGroupRequest(members=[pb.GroupMember(name=m.name, capacity=m.capacity, weight=m.weight)
                                          for m in members],
                                 holder=holder, ttl=to_duration(ttl), session_id=session_id)
    if wait_for > 0:
        req.wait.CopyFrom(to_duration(wait_for))
    return req


def check_members(members: Iterable[Member]) -> Tuple[Member, ...]:
    """members as a tuple; InvalidField "members" (as the coordinator would
    answer) when there are none, more than MAX_GROUP_MEMBERS, or a name
    comes twice."""
    out = tuple(members)
    for m in out:
        # Untyped callers pass names (str) too: say so, not AttributeError.
        if not isinstance(m, Member):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"coordinator: a group's members are coordinator.Member, not {m!r}")
    names = [m.name for m in out]
    why = None
    if not 1 <= len(out) <= MAX_GROUP_MEMBERS:
        why = f"a group has 1 to {MAX_GROUP_MEMBERS} members, not {len(out)}"
    elif len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        why = f"a group names each name once: {', '.join(map(repr, twice))} more than once"
    if why is not None:
        raise InvalidField(f"coordinator: {why}", code=grpc.StatusCode.INVALID_ARGUMENT, reason=_INVALID_FIELD,
                           metadata={"field": "members"}, field="members")
    return out


def _retry_after(resp: Any) -> Optional[float]:
    return from_duration(resp.retry_after) if resp.HasField("retry_after") else None


def grant_of(kind: str, resp: Any) -> Grant:
    """The Grant of the answer to an "acquire" (TryAcquireResponse), a
    "campaign" (CampaignResponse) or an "acquire_group"
    (AcquireGroupResponse)."""
    if kind == "acquire_group":
        if not resp.acquired:
            return Grant(False, holder=resp.holder or None, retry_after=_retry_after(resp),
                         blocked=resp.blocked_name or None)
        return Grant(True, members=tuple(MemberGrant(lease.name, int(lease.token), max(int(lease.weight), 1))
                                         for lease in resp.leases))
    if kind == "campaign":
        if not resp.elected:
            return Grant(False, holder=resp.leader.candidate or None, retry_after=_retry_after(resp))
        return Grant(True, token=int(resp.leader.term), value=bytes(resp.leader.value))
    if not resp.acquired:
        return Grant(False, holder=resp.holder or None, retry_after=_retry_after(resp))
    return Grant(True, token=int(resp.lease.token), value=bytes(resp.lease.value),
                 weight=max(int(resp.lease.weight), 1))


def release_group_request(holder: str, members: Iterable[Tuple[str, int]]) -> Any:
    """The ReleaseGroupRequest of the leases (name, token) of holder's group."""
    return pb.ReleaseGroupRequest(holder=holder, leases=[pb.GroupLease(name=name, token=token)
                                                         for name, token in members])


def give_up_operation(res: Any) -> Optional[Any]:
    """The StreamOperation that gives up what the StreamResult res granted
    (a release, a resign, a release_group), or None when it granted
    nothing."""
    kind = res.WhichOneof("result")
    if kind == "acquire_group" and res.acquire_group.acquired:
        leases = res.acquire_group.leases
        holder = leases[0].holder if leases else ""
        return pb.StreamOperation(release_group=release_group_request(holder, [(m.name, m.token) for m in leases]))
    if kind == "acquire" and res.acquire.acquired:
        lease = res.acquire.lease
        return pb.StreamOperation(release=pb.ReleaseRequest(name=lease.name, holder=lease.holder, token=lease.token))
    if kind == "campaign" and res.campaign.elected:
        leader = res.campaign.leader
        return pb.StreamOperation(resign=pb.ResignRequest(election=leader.election, candidate=leader.candidate,
                                                          term=leader.term))
    return None


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


A = TypeVar("A")

#: How a Semaphore or RWLock acquires: (kind, capacity, weight, wait,
#: session) to the Client's acquisition of that share of its name.
Acquire = Callable[[str, int, int, Optional[float], Any], A]


class SemaphoreBase(Generic[A]):
    """What the sync and the asyncio Semaphore share: the capacity, checked
    once, and ``acquire``, which returns the Client's acquisition."""

    kind = "semaphore"

    def __init__(self, name: str, capacity: int, acquire: Acquire[A]) -> None:
        self.name, self.capacity = name, check_capacity(self.kind, name, capacity)
        self._acquire = acquire

    def acquire(self, n: int = 1, wait: Optional[float] = None, session: Any = None) -> A:
        """Takes ``n`` of the capacity, waiting up to ``wait`` seconds (None:
        for ever; 0: not at all) in arrival order, in ``session`` (default:
        the Client's default session). Raises NotAcquired when the wait ends
        first."""
        return self._acquire(self.kind, self.capacity, check_weight(self.kind, self.name, n, self.capacity), wait,
                             session)

    def __repr__(self) -> str:
        return f"<Semaphore {self.name!r} capacity={self.capacity}>"


class RWLockBase(Generic[A]):
    """What the sync and the asyncio RWLock share: a semaphore of capacity
    RW_CAPACITY whose readers take 1 and writers all of it."""

    def __init__(self, name: str, acquire: Acquire[A]) -> None:
        self.name = name
        self._acquire = acquire

    def read_lock(self, wait: Optional[float] = None, session: Any = None) -> A:
        """Takes a read share, waiting up to ``wait`` seconds (None: for ever)."""
        return self._acquire("read lock", RW_CAPACITY, 1, wait, session)

    def write_lock(self, wait: Optional[float] = None, session: Any = None) -> A:
        """Takes the lock for writing, waiting up to ``wait`` seconds."""
        return self._acquire("write lock", RW_CAPACITY, RW_CAPACITY, wait, session)

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

    A grant is attached to a session, and valid as long as the session,
    whenever it came: there is nothing to confirm.

    The caller loops: ``begin()`` for the wait of the next request, then the
    request, then ``answered(grant)`` or ``failed(err)`` for the Step to take
    (see Step).
    """

    def __init__(self, kind: str, name: str, wait: Optional[float]) -> None:
        self.kind, self.name = kind, name
        self.waiting = wait is None or wait > 0
        self.end = None if wait is None else time.monotonic() + max(wait, 0.0)
        self.backoff = call_backoff()
        self.last_err: Optional[CoordinatorError] = None
        self.last_holder: Optional[str] = None
        #: The name the last refusal named (a group's member in the way).
        self.last_blocked: Optional[str] = None
        #: When the last request was sent (time.monotonic()).
        self.sent = 0.0
        self.wait_for = 0.0

    def begin(self) -> float:
        """How long the next request may wait on the coordinator; marks now
        as its send time."""
        wait_for = 0.0
        if self.waiting:
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
            error = NotAcquired(self.last_blocked or self.name, self.last_holder, None, self.last_err)
            error.__cause__ = err
        return Step(abandon=is_outcome_unknown(err.code), error=error)

    def answered(self, g: Grant) -> Step:
        """The Step after the request was answered with g."""
        now = time.monotonic()
        if not g.acquired:
            self.last_holder, self.last_blocked = g.holder, g.blocked
            if not self.waiting or (self.end is not None and now >= self.end - ANSWER_MARGIN):
                return Step(error=NotAcquired(g.blocked or self.name, g.holder, g.retry_after))
            if now - self.sent < self.wait_for / 2:
                # Answered long before the wait was over (a coordinator
                # shutting down?): do not spin.
                return Step(pause=self.backoff.next())
            return _AGAIN  # the coordinator's longest wait passed: ask again
        return Step(grant=g)


# -- giving up --------------------------------------------------------------------


class ReleaseSteps:
    """The rules of giving up a grant (Release, Resign, CloseSession) that a
    caller just ended: one call after another for up to ``close_timeout``
    while the errors are transient. (A grant that had ended already, lost
    with its session or given up before, is not given up again.)

    The caller loops while ``calling()``: after a call that answered it
    returns; ``failed(err)`` gives the pause before the next call, or raises
    err when no retry can fix it."""

    def __init__(self, timeout: float, close_timeout: float) -> None:
        self.timeout = timeout
        self.end = time.monotonic() + close_timeout
        self.over = False
        self.backoff = call_backoff()

    def calling(self) -> bool:
        """Whether to make (another) call."""
        return not self.over

    def call_timeout(self) -> float:
        """The deadline of the next call."""
        return max(min(self.timeout, self.end - time.monotonic()), 0.1)

    def failed(self, err: CoordinatorError, closed: bool) -> float:
        """The pause before the next call after err (ending the loop when
        the Client closed); raises err when retrying cannot fix it."""
        now = time.monotonic()
        if closed:
            self.over = True
            return 0.0
        if err.transient and now + 0.05 < self.end:
            return min(max(self.backoff.next(), err.retry_after or 0.0), max(self.end - now, 0.0))
        raise err
