"""Elections: Leadership (a term in office), LeaderInfo, and Observe events."""

from __future__ import annotations

import enum
import logging
import queue
import threading
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, Union

import grpc

from ._gen import pb
from ._state import F, GrantState
from ._util import from_timestamp
from .errors import ClientClosed, CoordinatorError, from_rpc_error
from .lease import Held, LeaseInfo

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
    def of(cls, m: Any) -> "LeaderInfo":
        """The LeaderInfo of a coordinator.v1.Leader message."""
        return cls(
            election=m.election,
            candidate=m.candidate,
            value=bytes(m.value),
            term=int(m.term),
            expires_at=from_timestamp(m.expires_at) if m.HasField("expires_at") else None,
        )


class LeadershipBase(Held[F]):
    """What the sync and the asyncio Leadership share: a term in office,
    attached to a session like a Lease (a leadership is a lease on the
    election's name whose token is the term)."""

    @property
    def election(self) -> str:
        """The election's name."""
        return self._state.name

    @property
    def candidate(self) -> str:
        """Who leads: the Client's identity and a suffix unique to this campaign."""
        return self._state.holder

    @property
    def term(self) -> int:
        """The leadership's fencing token."""
        return self._state.token

    @property
    def value(self) -> bytes:
        """The value last proclaimed."""
        return self._state.value

    def __repr__(self) -> str:
        state = "leading" if not self.done else ("lost" if self.lost.is_set() else "resigned")
        return f"<{type(self).__name__} {self.election!r} candidate={self.candidate!r} term={self.term} {state}>"


class Leadership(LeadershipBase[threading.Event]):
    """An election won through a Client: a term in office, held in a session
    until it is resigned or lost.

    Check ``valid()`` (or the ``lost`` Event) while acting as the leader, and
    hand ``term`` to the resources the leader writes to. Used as a context
    manager, it resigns when the block exits.
    """

    def __init__(self, state: GrantState[threading.Event], session: Any, resign: Callable[[], bool],
                 proclaim: Callable[[bytes], None]) -> None:
        super().__init__(state, session)
        self._resign, self._proclaim = resign, proclaim
        self._proclaim_lock = threading.Lock()

    def proclaim(self, value: Value) -> None:
        """Publishes a new value as the sitting leader (observers see a
        PROCLAIMED event). It campaigns with this term, so the coordinator
        never starts a new term for it: when the term is over, the
        leadership ends (``lost`` is set) and LeaseNotHeld is raised. A
        transient error leaves the leadership as it was."""
        with self._proclaim_lock:
            self._proclaim(as_bytes(value))

    def resign(self) -> bool:
        """Steps down on the coordinator so that the next candidate is
        elected at once, retrying transient errors for up to the Client's
        close timeout. True when it stepped down, False when the term was
        over already."""
        return self._resign()

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.resign()
            return
        try:
            self.resign()
        except Exception:
            log.warning("coordinator: could not resign %r", self, exc_info=True)


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


_KINDS: Dict[int, EventKind] = {
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
        holders = tuple(LeaseInfo.of(m) for m in ev.holders)
        return ObserveEvent(kind, None, bool(resp.initial), holders, max(int(ev.capacity), 1))
    leader = LeaderInfo.of(ev.leader) if ev.HasField("leader") else None
    return ObserveEvent(kind, leader, bool(resp.initial))


#: What an Observation's reader queues when the stream ended without error.
END = object()


def queued_event(item: Any, closed: bool, stop: Type[Exception]) -> ObserveEvent:
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


class Observation:
    """An open Observe stream: an iterator of ObserveEvent.

    Iterate it (``for ev in obs``) or call ``get(timeout)``. ``close()`` ends
    it (iteration then stops); it is also a context manager. A stream the
    coordinator ends with an error raises it (as CoordinatorError) from the
    iteration; ResourceExhausted means this reader was too slow: observe
    again.
    """

    def __init__(self, election: str, open_call: Callable[[Callable[[], None]], Tuple[Any, Callable[[], None]]],
                 closed: Callable[[], bool]) -> None:
        self.election = election
        self._call, self._forget = open_call(self.close)
        self._client_closed = closed
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
        return queued_event(item, self._client_closed(), StopIteration)

    def __iter__(self) -> Iterator[ObserveEvent]:
        return self

    def __next__(self) -> ObserveEvent:
        return self.get()

    def close(self) -> None:
        """Ends the stream. Idempotent."""
        if not self._closed.is_set():
            self._closed.set()
            self._call.cancel()
            self._forget()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()
