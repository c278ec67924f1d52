"""Small helpers: durations, validity margins, jitter and backoff."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any, Optional

from ._rules import (
    LEADER_RETRY_MAX,
    LEADER_RETRY_MIN,
    RENEWAL_RETRY_FLOOR,
    RENEWAL_RETRY_MAX,
    RENEWAL_RETRY_MIN,
    RETRY_JITTER,
    RETRY_MAX,
    RETRY_MIN,
    VALIDITY_MARGIN,
    VALIDITY_MARGIN_MAX,
    VALIDITY_MARGIN_MIN,
)
from google.protobuf import duration_pb2


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
    max(ttl/10, 50ms), at most ttl/2 (ClientRules.validity_margin_*)."""
    return min(max(ttl * VALIDITY_MARGIN, VALIDITY_MARGIN_MIN), ttl * VALIDITY_MARGIN_MAX)


def jitter(d: float, fraction: float) -> float:
    """Spreads d by ±fraction."""
    if d <= 0:
        return d
    return d * (1 - fraction + random.random() * 2 * fraction)


class Backoff:
    """Exponential backoff with jitter: from ``base``, doubling, each delay
    moved by up to ±RETRY_JITTER (20%) and held to at most ``cap``."""

    def __init__(self, base: float, cap: float) -> None:
        self.base = base
        self.cap = cap
        self._next = base

    def next(self) -> float:
        d = self._next
        self._next = min(self._next * 2, self.cap)
        return min(jitter(d, RETRY_JITTER), self.cap)

    def reset(self) -> None:
        self._next = self.base


def call_backoff() -> Backoff:
    """Delays between retries of a call or a stream: 50ms doubling to 2s
    (ClientRules.retry_*)."""
    return Backoff(RETRY_MIN, RETRY_MAX)


def renewal_backoff(ttl: float) -> Backoff:
    """Delays after failed renewals, so that several fit in a lease's
    validity: from ttl/20, doubling, at most ttl/4, never below 10ms
    (ClientRules.renewal_retry_*)."""
    return Backoff(max(ttl * RENEWAL_RETRY_MIN, RENEWAL_RETRY_FLOOR), max(ttl * RENEWAL_RETRY_MAX, RENEWAL_RETRY_FLOOR))


def leader_backoff() -> Backoff:
    """Delays before running as leader campaigns again after the function
    returned early: 100ms doubling to 30s (ClientRules.leader_retry_*)."""
    return Backoff(LEADER_RETRY_MIN, LEADER_RETRY_MAX)
