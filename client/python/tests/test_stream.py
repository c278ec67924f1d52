"""The operation stream: one Stream call per Client, batching, late grants, and
the fallback to unary calls."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent import futures
from contextlib import contextmanager
from typing import Iterator, List

import grpc
import pytest

import coordinator
from coordinator import pb, pb_grpc
from coordinator._util import to_duration
from coordinator.client import _Attempt
from conftest import wait_until


def test_threads_share_messages(client: coordinator.Client, name: str) -> None:
    sess = client._transport
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
                lease = client.try_lock(f"{name}/{i}", ttl=5)
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
    # Exactly the workers' acquires and releases; renewals of a lease the
    # scheduler kept held past TTL/3 may come on top.
    assert (kinds["acquire"], kinds["release"]) == (16 * 30, 16 * 30), kinds
    # Under load, operations of many threads go out together.
    assert max(sizes) > 1 and len(sizes) < sum(sizes), sizes[:50]
    assert [t for t in threading.enumerate() if t.name == "coordinator-stream" and t is sess._thread]


def _give_up(res):
    if res.WhichOneof("result") == "acquire" and res.acquire.acquired:
        l = res.acquire.lease
        return pb.StreamOperation(release=pb.ReleaseRequest(name=l.name, holder=l.holder, token=l.token))
    return None


def test_a_caller_leaving_cancels_its_wait(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    first = a.lock(name, ttl=30, wait=0)
    holder = b._new_holder()
    attempt = _Attempt()
    attempt.over = True  # the acquisition gave up
    req = pb.TryAcquireRequest(name=name, holder=holder, ttl=to_duration(10), wait=to_duration(20))
    with pytest.raises(coordinator.RPCError) as ei:
        b._transport.call(pb.StreamOperation(acquire=req), 0.5, b._late(attempt, name, holder, _give_up))
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and ei.value.transient
    # The cancel that followed took the wait out of the coordinator's queue
    # at once, long before its 20s were over; a still holds the name.
    left = time.monotonic()
    wait_until(lambda: a.describe(name).waiters == 0, timeout=12, what="the wait to be cancelled")
    assert time.monotonic() - left < 12
    d = a.describe(name)
    assert d.held and d.lease.holder == first.holder and d.last_token == first.token
    # The acquire was answered (Canceled); the cancel is never in flight.
    wait_until(lambda: not b._transport._inflight, timeout=5, what="the acquire to be answered")
    assert first.release()
    with a.lock(name, ttl=5, wait=0):
        pass


def test_a_grant_before_the_cancel_is_released(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    first = a.lock(name, ttl=10, wait=0)
    holder = b._new_holder()
    attempt = _Attempt()
    attempt.over = True  # the acquisition gave up
    sess = b._transport
    cancels: List[int] = []
    queue_cancel = sess._queue_cancel_locked
    sess._queue_cancel_locked = cancels.append  # held back until the grant came

    req = pb.TryAcquireRequest(name=name, holder=holder, ttl=to_duration(10), wait=to_duration(30))
    with pytest.raises(coordinator.RPCError) as ei:
        sess.call(pb.StreamOperation(acquire=req), 0.5, b._late(attempt, name, holder, _give_up))
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
    with a.lock(name, ttl=5, wait=0):
        pass


def test_closing_gives_up_the_waits(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    a.lock(name, ttl=10, wait=0)
    outcome: List[object] = []  # what b.lock did, seen by the test's thread

    def wait() -> None:
        try:
            outcome.append(b.lock(name, ttl=5, wait=60))
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


class _UnaryOnly(pb_grpc.CoordinatorServicer):
    """A coordinator without Stream (every method it lacks is
    Unimplemented): a lock service of one name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder = ""
        self.token = 0
        self.calls: List[str] = []

    def TryAcquire(self, request, context):
        with self.lock:
            self.calls.append("TryAcquire")
            if self.holder and self.holder != request.holder:
                return pb.TryAcquireResponse(acquired=False, holder=self.holder)
            if not self.holder:
                self.token += 1
                self.holder = request.holder
            return pb.TryAcquireResponse(acquired=True, lease=pb.Lease(
                name=request.name, holder=request.holder, token=self.token, ttl=request.ttl))

    def Release(self, request, context):
        with self.lock:
            self.calls.append("Release")
            ok = self.holder == request.holder and self.token == request.token
            if ok:
                self.holder = ""
            return pb.ReleaseResponse(released=ok)


@contextmanager
def serving(svc: pb_grpc.CoordinatorServicer) -> Iterator[str]:
    """Serves svc on a free port of its own; yields its target."""
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_CoordinatorServicer_to_server(svc, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        srv.stop(0)


def test_falls_back_to_unary_calls_without_stream(make_client, name: str) -> None:
    svc = _UnaryOnly()
    with serving(svc) as target:
        c = make_client(target, close_timeout=1)
        assert c.uses_stream
        lease = c.lock(name, ttl=30, wait=0)
        assert lease.token == 1
        assert not c.uses_stream  # Unimplemented: unary calls for good
        assert c.try_lock(name, ttl=30) is None
        assert lease.release()
        assert svc.calls == ["TryAcquire", "TryAcquire", "Release"]
