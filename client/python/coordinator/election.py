"""Elections: Leadership (a term in office), LeaderInfo, and Observe events."""

from __future__ import annotations

import enum
import logging
import queue
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generator, Iterator, Optional, Protocol, Tuple, Union, runtime_checkable

import grpc

from ._gen import pb
from ._rules import LEASE_NOT_HELD
from ._util import from_timestamp, to_duration
from .errors import ClientClosed, CoordinatorError, LeaseNotHeld, from_rpc_error
from .lease import LeaseInfo, _Held, _LeaseHost

__all__ = ["LeaderInfo", "Leadership", "EventKind", "ObserveEvent", "Observation"]

log = logging.getLogger("coordinator")

Value = Union[bytes, str]


def as_bytes(value: Optional[Value]) -> bytes:
    """A value to proclaim, as bytes (str is encoded as UTF-8)."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


@dataclass(frozen=True)
class LeaderInfo:
    """An election's sitting leader."""

    election: str
    #: The leader's identity (a Client's identity and a suffix).
    candidate: str
    #: What the leader proclaimed.
    value: bytes
    #: The leadership's fencing token: larger for every new term.
    term: int
    #: When the term ends unless renewed, by the coordinator's store clock.
    expires_at: Optional[datetime]

    @classmethod
    def _from_pb(cls, m: Any) -> "LeaderInfo":
        return cls(
            election=m.election,
            candidate=m.candidate,
            value=bytes(m.value),
            term=int(m.term),
            expires_at=from_timestamp(m.expires_at) if m.HasField("expires_at") else None,
        )


class Leadership(_Held):
    """An election won through a Client: a term in office, renewed in the
    background like a Lease (a leadership is a lease on the election's name
    whose token is the term) until it is resigned or lost.

    Check ``valid()`` (or the ``lost`` Event) while acting as the leader, and
    hand ``term`` to the resources the leader writes to. Used as a context
    manager, it resigns when the block exits.
    """

    kind = "leadership"

    def __init__(self, host: _LeaseHost, election: str, candidate: str, term: int, ttl: float, sent: float, value: bytes) -> None:
        super().__init__(host, election, candidate, term, ttl, sent)
        self._value = value
        self._proclaim_lock = threading.Lock()

    @property
    def election(self) -> str:
        """The election's name."""
        return self._name

    @property
    def candidate(self) -> str:
        """Who leads: the Client's identity and a suffix unique to this campaign."""
        return self._holder

    @property
    def term(self) -> int:
        """The leadership's fencing token."""
        return self._token

    @property
    def value(self) -> bytes:
        """The value last proclaimed."""
        return self._value

    def proclaim(self, value: Value) -> None:
        """Publishes a new value as the sitting leader (observers see a
        PROCLAIMED event); it also renews the term. It campaigns with this
        term, so the coordinator never starts a new term for it: when the
        term is over, the leadership ends (``lost`` is set) and LeaseNotHeld
        is raised. A transient error leaves the leadership as it was."""
        with self._proclaim_lock:
            calls = proclaim_calls(self, self._host, as_bytes(value))
            op = next_call(calls)
            while op is not None:
                try:
                    answer, err = self._host.grant_call(*op), None
                except CoordinatorError as e:
                    answer, err = None, e
                op = next_call(calls, answer, err)

    def resign(self) -> bool:
        """Stops renewing the leadership and steps down on the coordinator so
        that the next candidate is elected at once, retrying transient
        errors for up to the Client's close timeout. Returns True when it
        stepped down, False when the term was over already."""
        return self._host.release_grant(self, resign=True)

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.resign()
            return
        try:
            self.resign()
        except Exception:
            log.warning("coordinator: could not resign %s", self._describe(), exc_info=True)

    def __repr__(self) -> str:
        state = "leading" if not self.ended.is_set() else ("lost" if self.lost.is_set() else "resigned")
        return f"<Leadership {self._name!r} candidate={self._holder!r} term={self._token} {state}>"


#: A proclamation's calls: it yields each lease operation to make, as
#: (kind, request) ("campaign", "resign"), and is sent its answer
#: (response, sent) or thrown its CoordinatorError.
ProclaimCalls = Generator[Tuple[str, Any], Tuple[Any, float], None]


def next_call(calls: ProclaimCalls, answer: Optional[Tuple[Any, float]] = None,
              err: Optional[CoordinatorError] = None) -> Optional[Tuple[str, Any]]:
    """The next call of ``calls`` once the last was answered (or failed with
    err); None when they are over. Raises what the calls raise."""
    try:
        return calls.throw(err) if err is not None else calls.send(answer)  # type: ignore[arg-type]
    except StopIteration:
        return None


def proclaim_calls(h: _Held, host: Any, data: bytes) -> ProclaimCalls:
    """The calls of h's proclamation of data, without their I/O, for the
    sync and asyncio Leaderships alike: a Campaign with h's term, which
    never starts a new term; when the term is over, h ends (lost) and
    LeaseNotHeld is raised; a transient error leaves h as it was. ``host``
    is h's Client (end_grant, grant_renewed)."""
    if h.ended.is_set():
        raise h._error or _ended_error(h)
    ttl = h._ttl
    session_id = h._session.id if h._session is not None else ""
    req = pb.CampaignRequest(election=h._name, candidate=h._holder, value=data, ttl=to_duration(ttl), term=h._token,
                             session_id=session_id)
    try:
        resp, sent = yield "campaign", req
    except CoordinatorError as err:
        if err.reason == LEASE_NOT_HELD:
            host.end_grant(h, err, lost=True)
        raise
    lost = proclaim_refused(h, resp)
    if lost is not None:
        if resp.elected:
            # A coordinator that ignores Campaign.term started a new term
            # that nobody wants: resign it.
            try:
                yield "resign", pb.ResignRequest(election=h._name, candidate=h._holder, term=int(resp.leader.term))
            except CoordinatorError:
                pass
        ended, prior = host.end_grant(h, lost, lost=True)
        raise lost if ended or prior is None else prior
    if not host.grant_renewed(h, sent, ttl):
        raise h._error or _ended_error(h)
    h._value = data  # type: ignore[attr-defined]


def proclaim_refused(h: _Held, resp: Any) -> Optional[LeaseNotHeld]:
    """The LeaseNotHeld that ends h when ``resp``, the answer to a Campaign
    with h's term (a proclamation), is not h's term in office; None when it
    is."""
    if resp.elected and int(resp.leader.term) == h.token:
        return None
    return LeaseNotHeld(
        f"{h._describe()}: the coordinator has another term in office",
        code=grpc.StatusCode.FAILED_PRECONDITION,
        reason=LEASE_NOT_HELD,
        metadata={"name": h.name},
    )


def _ended_error(h: _Held) -> CoordinatorError:
    return LeaseNotHeld(f"{h._describe()} has ended", reason=LEASE_NOT_HELD)


class EventKind(enum.Enum):
    """What an Observe event reports."""

    #: A new leader (a new term) took office.
    ELECTED = "ELECTED"
    #: The sitting leader proclaimed a new value.
    PROCLAIMED = "PROCLAIMED"
    #: The election has no leader: it resigned or its term expired.
    VACANT = "VACANT"
    #: The name has a capacity above 1 (a semaphore or read-write lock):
    #: the event carries its whole set of grants (``holders``) and its
    #: ``capacity``, at first and after each change of the set.
    HOLDERS = "HOLDERS"
    #: A kind this client does not know.
    UNKNOWN = "UNKNOWN"


_KINDS = {
    pb.LeaderEvent.KIND_ELECTED: EventKind.ELECTED,
    pb.LeaderEvent.KIND_PROCLAIMED: EventKind.PROCLAIMED,
    pb.LeaderEvent.KIND_VACANT: EventKind.VACANT,
    pb.LeaderEvent.KIND_HOLDERS: EventKind.HOLDERS,
}


@dataclass(frozen=True)
class ObserveEvent:
    """One message of an Observe stream."""

    kind: EventKind
    #: The leader after the change; None when vacant (and for HOLDERS).
    leader: Optional[LeaderInfo]
    #: True on the first event only: the election's state when the stream
    #: opened, not a change that just happened.
    initial: bool
    #: HOLDERS: the live grants, in token order, as Describe reports them
    #: (none when the name fell free); empty for the other kinds.
    holders: Tuple[LeaseInfo, ...] = ()
    #: HOLDERS: the name's capacity; 0 for the other kinds.
    capacity: int = 0


def event_of(resp: Any) -> ObserveEvent:
    """The ObserveEvent of an ObserveResponse."""
    ev = resp.event
    kind = _KINDS.get(ev.kind, EventKind.UNKNOWN)
    if kind is EventKind.HOLDERS:
        holders = tuple(LeaseInfo._from_pb(m) for m in ev.holders)
        return ObserveEvent(kind, None, bool(resp.initial), holders, max(int(ev.capacity), 1))
    leader = LeaderInfo._from_pb(ev.leader) if ev.HasField("leader") else None
    return ObserveEvent(kind, leader, bool(resp.initial))


#: What an Observation's reader queues when the stream ended without error.
END = object()


def queued_event(item: Any, closed: bool, stop: type) -> ObserveEvent:
    """The event of ``item``, taken from an Observation's queue: raises
    ``stop`` (StopIteration, StopAsyncIteration) at the END of the stream
    and the stream's error (ClientClosed when the Client was ``closed``)."""
    if item is END:
        raise stop
    if isinstance(item, BaseException):
        if isinstance(item, CoordinatorError) and closed:
            raise ClientClosed("the client was closed") from item
        raise item
    return item


@runtime_checkable
class _ObservationHost(Protocol):
    """What an Observation needs of the Client that opened it, and all it
    uses of it. Client implements it."""

    @property
    def closed(self) -> bool:
        """Whether the Client was closed."""
        ...

    def forget_observation(self, obs: "Observation") -> None:
        """Drops obs from the observations that closing the Client closes."""
        ...


class Observation:
    """An open Observe stream: an iterator of ObserveEvent.

    Iterate it (``for ev in obs``) or call ``get(timeout)``. ``close()`` ends
    it (iteration then stops); it is also a context manager. A stream the
    coordinator ends with an error raises it (as CoordinatorError) from the
    iteration; ResourceExhausted means this reader was too slow: observe
    again.
    """

    def __init__(self, host: _ObservationHost, election: str, call: Any) -> None:
        self._host = host
        self.election = election
        self._call = call
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._closed = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._read, name="coordinator-observe", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for resp in self._call:
                self._queue.put(event_of(resp))
            self._queue.put(END)
        except grpc.RpcError as e:
            if self._closed.is_set():
                self._queue.put(END)
            else:
                self._queue.put(from_rpc_error(e))
        except Exception as e:  # pragma: no cover - defensive
            self._queue.put(e)

    def get(self, timeout: Optional[float] = None) -> ObserveEvent:
        """The next event. Raises TimeoutError when none came within
        ``timeout`` seconds, StopIteration once the stream is closed, and
        the stream's error when the coordinator ended it."""
        if self._finished:
            raise StopIteration
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no Observe event for {self.election!r} within {timeout}s") from None
        self._finished = item is END or isinstance(item, BaseException)
        return queued_event(item, self._host.closed, StopIteration)

    def __iter__(self) -> Iterator[ObserveEvent]:
        return self

    def __next__(self) -> ObserveEvent:
        return self.get()

    def close(self) -> None:
        """Ends the stream. Idempotent."""
        if not self._closed.is_set():
            self._closed.set()
            self._call.cancel()
            self._host.forget_observation(self)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
