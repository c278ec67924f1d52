"""The coordinator dying under a held lease."""

from __future__ import annotations

import signal

import pytest

import coordinator
from conftest import wait_until


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_loss_detected_when_the_coordinator_is_killed(start_server, make_client, name: str, store: str) -> None:
    srv = start_server(store)
    c = make_client(srv.address, ttl=3)
    lease = c.lock(name, wait=0)
    lost_via_callback = []
    lease.on_lost(lambda x: lost_via_callback.append(x.error))
    first = lease.last_renewed
    wait_until(lambda: lease.last_renewed > first, timeout=10, what="a renewal")
    srv.kill(signal.SIGKILL)
    assert lease.lost.wait(15), "lost was not set"
    assert isinstance(lease.error, coordinator.LeaseExpired), lease.error
    # Never after the coordinator could have granted the name to someone else.
    assert lease.lost_at is not None
    assert lease.lost_at <= lease.last_renewed + lease.ttl
    assert not lease.valid()
    wait_until(lambda: lost_via_callback, timeout=5, what="the on_lost callback")
    assert lease.release() is False
