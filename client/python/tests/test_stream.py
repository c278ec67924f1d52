"""The operation stream: one Stream call per Client, batching, late grants."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, List

import grpc
import pytest

import coordinator
from coordinator import pb
from coordinator._util import to_duration
from conftest import wait_until


def test_threads_share_messages(client: coordinator.Client, name: str) -> None:
    sess = client._core.stream
    sizes: List[int] = []
    kinds: Counter = Counter()
    take = sess._take

    def counting_take(conn):
        req = take(conn)
        if req is not None:
            sizes.append(len(req.operations))
            kinds.update(op.WhichOneof("operation") for op in req.operations)
        return req

    sess._take = counting_take
    errors: List[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(30):
                lease = client.try_lock(f"{name}/{i}")
                assert lease is not None
                assert lease.release()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not [t for t in threads if t.is_alive()], "workers still running after 60s"
    assert not errors, errors
    # Exactly the workers' acquires and releases (the session's renewals
    # may come on top).
    assert (kinds["acquire"], kinds["release"]) == (16 * 30, 16 * 30), kinds
    # Under load, operations of many threads go out together.
    assert max(sizes) > 1 and len(sizes) < sum(sizes), sizes[:50]
    assert [t for t in threading.enumerate() if t.name == "coordinator-stream" and t is sess._thread]


def _given_up(client: coordinator.Client, name: str) -> Any:
    """An acquisition of name by client that gave up (whose late grants are
    given up at once)."""
    a = client._core.acquisition("lock", name, 0, None)
    a.given_up = True
    return a


def test_a_caller_leaving_cancels_its_wait(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    first = a.lock(name, wait=0)
    gave_up = _given_up(b, name)
    req = pb.TryAcquireRequest(name=name, holder=gave_up.holder, ttl=to_duration(10), wait=to_duration(20))
    with pytest.raises(coordinator.RPCError) as ei:
        b._core.stream.call(pb.StreamOperation(acquire=req), 0.5, gave_up.late())
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and ei.value.transient
    # The cancel that followed took the wait out of the coordinator's queue
    # at once, long before its 20s were over; a still holds the name.
    left = time.monotonic()
    wait_until(lambda: a.describe(name).waiters == 0, timeout=12, what="the wait to be cancelled")
    assert time.monotonic() - left < 12
    d = a.describe(name)
    assert d.held and d.lease.holder == first.holder and d.last_token == first.token
    # The acquire was answered (Canceled); the cancel is never in flight.
    wait_until(lambda: not b._core.stream._inflight, timeout=5, what="the acquire to be answered")
    assert first.release()
    with a.lock(name, wait=0):
        pass


def test_a_grant_before_the_cancel_is_released(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    first = a.lock(name, wait=0)
    gave_up = _given_up(b, name)
    sess = b._core.stream
    cancels: List[int] = []
    queue_cancel = sess._queue_cancel_locked
    sess._queue_cancel_locked = cancels.append  # held back until the grant came

    req = pb.TryAcquireRequest(name=name, holder=gave_up.holder, ttl=to_duration(10), wait=to_duration(30))
    with pytest.raises(coordinator.RPCError) as ei:
        sess.call(pb.StreamOperation(acquire=req), 0.5, gave_up.late())
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and ei.value.transient
    assert len(cancels) == 1
    # The coordinator's wait is still pending: the grant comes after a
    # releases, and b gives it up at once; the cancel that follows it is
    # ignored.
    assert a.describe(name).waiters == 1
    assert first.release()
    wait_until(lambda: a.describe(name).last_token > first.token and not a.describe(name).held,
               timeout=10, what="the late grant to be released")
    with sess.lock:
        queue_cancel(cancels[0])
    wait_until(lambda: not sess._queue, timeout=5, what="the cancel to be sent")
    with a.lock(name, wait=0):
        pass


def test_closing_gives_up_the_waits(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    a.lock(name, wait=0)
    outcome: List[object] = []  # what b.lock did, seen by the test's thread

    def wait() -> None:
        try:
            outcome.append(b.lock(name, wait=60))
        except BaseException as e:  # asserted below
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: a.describe(name).waiters == 1, what="the waiter to queue")
    b.close()
    t.join(timeout=20)
    assert not t.is_alive(), "b.lock still waits 20s after b.close()"
    assert len(outcome) == 1 and isinstance(outcome[0], coordinator.ClientClosed), outcome
    wait_until(lambda: a.describe(name).waiters == 0, timeout=10, what="the wait to be given up")
