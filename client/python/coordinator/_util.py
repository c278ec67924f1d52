"""Small helpers: durations, validity margins, jitter and backoff."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timezone
from typing import Any, Optional

from ._gen import pb  # noqa: F401  (makes google.protobuf importable first)
from google.protobuf import duration_pb2

#: The longest wait the coordinator accepts in one call.
MAX_WAIT = 300.0
#: How long before the caller's deadline a wait asks the coordinator to
#: answer, so that its not-acquired answer (naming the holder) arrives in time.
ANSWER_MARGIN = 0.1
#: How many times in a row an acquisition re-confirms a grant that arrived
#: too late to leave much of its validity.
MAX_CONFIRMS = 5


def to_duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration of ``seconds`` (rounded to the microsecond)."""
    micros = int(round(seconds * 1_000_000))
    return duration_pb2.Duration(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


def from_duration(d: Any, default: Optional[float] = None) -> Optional[float]:
    """Seconds of a protobuf Duration; ``default`` when unset or not positive."""
    if d is None:
        return default
    s = d.seconds + d.nanos / 1e9
    return s if s > 0 else default


def from_timestamp(ts: Any) -> Optional[datetime]:
    """A timezone-aware datetime of a protobuf Timestamp, or None when unset."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=timezone.utc)


def drift_margin(ttl: float) -> float:
    """What is kept from a lease's validity for clock drift between this
    process and the store, and for this process being scheduled late:
    max(ttl/10, 50ms), at most ttl/2."""
    return min(max(ttl / 10, 0.05), ttl / 2)


def jitter(d: float) -> float:
    """Spreads d by ±10%."""
    if d <= 0:
        return d
    return d * (0.9 + random.random() * 0.2)


class Backoff:
    """Exponential backoff with jitter: from ``base``, doubling, at most ``cap``."""

    def __init__(self, base: float, cap: float) -> None:
        self.base = base
        self.cap = cap
        self._next = base

    def next(self) -> float:
        d = self._next
        self._next = min(self._next * 2, self.cap)
        return jitter(d)

    def reset(self) -> None:
        self._next = self.base


def call_backoff() -> Backoff:
    """Delays between retries of a call or a stream: 50ms doubling to 2s."""
    return Backoff(0.05, 2.0)


def renewal_backoff(ttl: float) -> Backoff:
    """Delays after failed renewals, so that several fit in a lease's
    validity: from ttl/20, doubling, at most ttl/4."""
    return Backoff(max(ttl / 20, 0.01), max(ttl / 4, 0.01))


def sleep(seconds: float, stop: Optional[threading.Event] = None) -> bool:
    """Sleeps ``seconds``, or until ``stop`` is set; reports whether the time
    passed (False when stopped)."""
    if stop is None:
        threading.Event().wait(max(seconds, 0))
        return True
    return not stop.wait(max(seconds, 0))
