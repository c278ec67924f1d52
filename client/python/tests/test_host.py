"""A Lease, a Leadership and an Observation talk to their Client through a
narrow interface (_LeaseHost, _ObservationHost) and nothing else of it."""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Tuple

import coordinator
from coordinator._gen import pb
from coordinator.election import Leadership, _ObservationHost
from coordinator.lease import Lease, _Held, _LeaseHost


class RecordingHost:
    """A _LeaseHost that records what its grants ask of it."""

    def __init__(self, lost: bool = False) -> None:
        self.calls: List[Tuple[str, Any]] = []
        self.lost = lost

    def grant_call(self, kind: str, request: Any) -> Tuple[Any, float]:
        self.calls.append(("grant_call", kind))
        return pb.CampaignResponse(elected=True, leader=pb.Leader(term=request.term)), time.monotonic()

    def end_grant(self, h: _Held, err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        self.calls.append(("end_grant", lost))
        return True, None

    def grant_renewed(self, h: _Held, sent: float, ttl: float) -> bool:
        self.calls.append(("grant_renewed", ttl))
        return True

    def watch_lost(self, h: _Held, callback: Callable[[_Held], None]) -> bool:
        self.calls.append(("watch_lost", h))
        return not self.lost

    def release_grant(self, h: _Held, resign: bool) -> bool:
        self.calls.append(("release_grant", resign))
        return True


def test_a_client_is_the_host_of_its_grants_and_observations() -> None:
    client = coordinator.Client("127.0.0.1:1")  # connects lazily: never here
    try:
        assert isinstance(client, _LeaseHost)
        assert isinstance(client, _ObservationHost)
    finally:
        client.close()


def test_a_lease_needs_only_its_host() -> None:
    host = RecordingHost()
    assert isinstance(host, _LeaseHost)
    lease = Lease(host, "n", "n#1", 7, 9.0, time.monotonic())
    lease.on_lost(lambda _: None)
    assert lease.release() is True
    assert host.calls == [("watch_lost", lease), ("release_grant", False)]


def test_on_lost_runs_at_once_when_the_host_says_lost_already() -> None:
    called: List[_Held] = []
    lease = Lease(RecordingHost(lost=True), "n", "n#1", 7, 9.0, time.monotonic())
    lease.on_lost(called.append)
    assert called == [lease]


def test_a_leadership_proclaims_and_resigns_through_its_host() -> None:
    host = RecordingHost()
    lead = Leadership(host, "e", "e#1", 7, 9.0, time.monotonic(), b"a")
    lead.proclaim("b")
    assert lead.value == b"b"
    assert lead.resign() is True
    assert host.calls == [("grant_call", "campaign"), ("grant_renewed", 9.0), ("release_grant", True)]
