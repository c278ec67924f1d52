"""Locks against a real coordinator (every available store)."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

import coordinator
from coordinator import pb
from conftest import both_modes, wait_until


@both_modes
def test_grant_and_release(client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, ttl=5, wait=0)
    assert lease.name == name
    assert lease.token > 0
    assert lease.holder.startswith(client.identity + "#")
    assert lease.ttl == pytest.approx(5)
    assert lease.valid() and 0 < lease.remaining() <= 5
    d = client.describe(name)
    assert d.held and d.lease is not None
    assert (d.lease.holder, d.lease.token) == (lease.holder, lease.token)
    assert lease.release() is True
    assert lease.ended.is_set() and not lease.lost.is_set() and not lease.valid()
    assert not client.describe(name).held
    assert lease.release() is False  # idempotent


def test_tokens_increase(client: coordinator.Client, name: str) -> None:
    tokens = []
    for _ in range(3):
        with client.lock(name, ttl=5, wait=0) as lease:
            tokens.append(lease.token)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


@both_modes
def test_refusal_names_holder(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    lease = a.lock(name, ttl=10, wait=0)
    assert b.try_lock(name, ttl=10) is None
    with pytest.raises(coordinator.NotAcquired) as ei:
        b.lock(name, ttl=10, wait=0)
    assert ei.value.holder == lease.holder
    assert ei.value.name == name
    # The coordinator says how long until the name can be granted: at most
    # the holder's TTL.
    assert ei.value.retry_after is not None, "TryAcquireResponse.retry_after not set by the server"
    assert 0 < ei.value.retry_after <= 10.5


def test_two_threads_of_one_client_exclude_each_other(client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, ttl=5, wait=0)
    assert client.try_lock(name, ttl=5) is None  # another acquisition: another holder
    lease.release()
    assert client.try_lock(name, ttl=5) is not None


@both_modes
def test_wait_until_released(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    first = a.lock(name, ttl=10, wait=0)
    got: List[coordinator.Lease] = []
    t = threading.Thread(target=lambda: got.append(b.lock(name, ttl=10, wait=60)))
    t.start()
    wait_until(lambda: a.describe(name).waiters == 1, what="the waiter to queue")
    assert first.release()
    t.join(timeout=30)
    assert got, "the waiter was not granted the lock"
    assert got[0].token > first.token
    assert a.describe(name).lease.holder == got[0].holder


@both_modes
def test_waiters_are_served_in_arrival_order(server, make_client, name: str) -> None:
    holder = make_client(server.address)
    first = holder.lock(name, ttl=10, wait=0)
    order: List[int] = []
    errors: List[BaseException] = []
    threads = []

    def waiter(i: int) -> None:
        c = make_client(server.address)
        try:
            with c.lock(name, ttl=10, wait=60):
                order.append(i)
                time.sleep(0.05)
        except BaseException as e:  # reported below
            errors.append(e)

    for i in range(3):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda: holder.describe(name).waiters == i + 1, what=f"waiter {i} to queue")
    first.release()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert order == [0, 1, 2]


@both_modes
def test_wait_runs_out(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    lease = a.lock(name, ttl=10, wait=0)
    start = time.monotonic()
    with pytest.raises(coordinator.NotAcquired) as ei:
        b.lock(name, ttl=10, wait=0.5)
    assert time.monotonic() - start >= 0.3
    assert ei.value.holder == lease.holder
    assert a.describe(name).waiters == 0


@both_modes
def test_renewal_keeps_a_short_lease(client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, ttl=1, wait=0)
    first_renewal = lease.last_renewed
    end = time.monotonic() + 3.5
    while time.monotonic() < end:
        d = client.describe(name)
        assert d.held and d.lease.token == lease.token and d.lease.holder == lease.holder
        assert not lease.lost.is_set(), lease.error
        time.sleep(0.2)
    assert lease.valid()
    assert lease.last_renewed > first_renewal
    assert lease.release()


@both_modes
def test_leases_share_one_stream(client: coordinator.Client, name: str, mode: str) -> None:
    leases = [client.lock(f"{name}/{i}", ttl=1, wait=0) for i in range(4)]
    firsts = [lease.last_renewed for lease in leases]
    wait_until(lambda: all(l.last_renewed > f for l, f in zip(leases, firsts)), timeout=10, what="renewals")
    threads = threading.enumerate()
    streams = [t for t in threads if t.name == "coordinator-keepalive-stream"]
    op_streams = [t for t in threads if t.name == "coordinator-stream"]
    schedulers = [t for t in threads if t.name == "coordinator-keepalive"]
    # Other tests' clients may linger for a moment; this client has one of each.
    assert client._renewals._scheduler in schedulers
    if mode == "stream":
        # Acquisitions and renewals share the operation stream: no KeepAlive.
        assert client.uses_stream
        assert client._renewals._stream_thread is None
        assert client._transport._thread in op_streams
    else:
        assert not client.uses_stream
        assert client._renewals._stream_thread in streams
        assert sum(1 for t in streams if t is client._renewals._stream_thread) == 1
    for lease in leases:
        assert lease.release()


@both_modes
def test_lost_when_the_coordinator_refuses_the_renewal(client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, ttl=1, wait=0)
    called = threading.Event()
    lease.on_lost(lambda l: called.set())
    # Someone (an operator) releases it behind the holder's back.
    resp = client.call("Release", pb.ReleaseRequest(name=name, holder=lease.holder, token=lease.token))
    assert resp.released
    assert lease.lost.wait(10)
    assert isinstance(lease.error, coordinator.LeaseNotHeld), lease.error
    assert lease.error.reason == "LEASE_NOT_HELD"
    assert called.wait(5)
    assert not lease.valid()
    assert lease.release() is False


def test_release_on_exception_does_not_mask_it(client: coordinator.Client, name: str) -> None:
    with pytest.raises(ZeroDivisionError):
        with client.lock(name, ttl=5, wait=0) as lease:
            1 / 0
    assert lease.ended.is_set()
    assert not client.describe(name).held


def test_close_ends_and_releases(server, make_client, name: str) -> None:
    c = make_client(server.address)
    lease = c.lock(name, ttl=30, wait=0)
    c.close()
    assert lease.lost.is_set()
    assert isinstance(lease.error, coordinator.ClientClosed)
    other = make_client(server.address)
    assert not other.describe(name).held
    with pytest.raises(coordinator.ClientClosed):
        c.lock(name, wait=0)


@both_modes
def test_close_ends_a_waiting_lock(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    a.lock(name, ttl=30, wait=0)
    errs: List[BaseException] = []

    def wait_for_it() -> None:
        try:
            b.lock(name, ttl=5, wait=60)
        except BaseException as e:
            errs.append(e)

    t = threading.Thread(target=wait_for_it)
    t.start()
    wait_until(lambda: a.describe(name).waiters == 1, what="the waiter to queue")
    b.close()
    t.join(timeout=20)
    assert not t.is_alive()
    assert errs and isinstance(errs[0], coordinator.ClientClosed), errs


def test_list_leases(client: coordinator.Client, name: str) -> None:
    held = [client.lock(f"{name}/{i}", ttl=10, wait=0) for i in range(3)]
    listed = list(client.list_leases(prefix=name + "/", page_size=2))
    assert [l.name for l in listed] == [f"{name}/{i}" for i in range(3)]
    assert [l.token for l in listed] == [h.token for h in held]
