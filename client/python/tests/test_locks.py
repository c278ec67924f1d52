"""Locks against a real coordinator (every available store)."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

import coordinator
from conftest import close_session, wait_until


def test_grant_and_release(client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, wait=0)
    assert lease.name == name
    assert lease.token > 0
    assert lease.holder.startswith(client.identity + "#")
    assert lease.ttl == pytest.approx(client.ttl)  # its session's
    assert lease.valid() and 0 < lease.remaining() <= client.ttl
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
        with client.lock(name, wait=0) as lease:
            tokens.append(lease.token)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


def test_refusal_names_holder(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    lease = a.lock(name, wait=0)
    assert b.try_lock(name) is None
    with pytest.raises(coordinator.NotAcquired) as ei:
        b.lock(name, wait=0)
    assert ei.value.holder == lease.holder
    assert ei.value.name == name
    # The coordinator says how long until the name can be granted: at most
    # the holder's session's TTL.
    assert ei.value.retry_after is not None, "TryAcquireResponse.retry_after not set by the server"
    assert 0 < ei.value.retry_after <= a.ttl + 0.5


def test_two_threads_of_one_client_exclude_each_other(client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, wait=0)
    assert client.try_lock(name) is None  # another acquisition: another holder
    lease.release()
    assert client.try_lock(name) is not None


def test_wait_until_released(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    first = a.lock(name, wait=0)
    got: List[coordinator.Lease] = []
    t = threading.Thread(target=lambda: got.append(b.lock(name, wait=60)))
    t.start()
    wait_until(lambda: a.describe(name).waiters == 1, what="the waiter to queue")
    assert first.release()
    t.join(timeout=30)
    assert got, "the waiter was not granted the lock"
    assert got[0].token > first.token
    assert a.describe(name).lease.holder == got[0].holder


def test_waiters_are_served_in_arrival_order(server, make_client, name: str) -> None:
    holder = make_client(server.address)
    first = holder.lock(name, wait=0)
    order: List[int] = []
    errors: List[BaseException] = []
    threads = []

    def waiter(i: int) -> None:
        c = make_client(server.address)
        try:
            with c.lock(name, wait=60):
                order.append(i)
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


def test_wait_runs_out(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    lease = a.lock(name, wait=0)
    start = time.monotonic()
    with pytest.raises(coordinator.NotAcquired) as ei:
        b.lock(name, wait=0.5)
    assert time.monotonic() - start >= 0.3
    assert ei.value.holder == lease.holder
    assert a.describe(name).waiters == 0


def test_one_session_renewed_over_the_stream_keeps_every_lease(server, make_client, name: str) -> None:
    client = make_client(server.address, ttl=1)
    leases = [client.lock(f"{name}/{i}", wait=0) for i in range(3)]
    session = client.default_session()
    assert all(lease.session is session for lease in leases)
    first = session.last_renewed
    end = time.monotonic() + 3.5
    while time.monotonic() < end:  # several TTLs
        for lease in leases:
            d = client.describe(lease.name)
            assert d.held and d.lease.token == lease.token and d.lease.session_id == session.id
            assert not lease.lost.is_set(), lease.error
        time.sleep(0.2)
    assert session.last_renewed > first and all(lease.valid() for lease in leases)
    # The renewals went over the Client's one operation stream.
    assert [t for t in threading.enumerate() if t.name == "coordinator-stream"]
    assert all(lease.release() for lease in leases)


def test_lost_when_its_session_is_ended_behind_its_back(server, make_client, name: str) -> None:
    client = make_client(server.address, ttl=1)
    lease = client.lock(name, wait=0)
    called = threading.Event()
    lease.on_lost(lambda x: called.set())
    close_session(server.address, lease.session.id)  # an operator, or an expiry
    assert lease.lost.wait(10)
    assert isinstance(lease.error, coordinator.SessionEnded), lease.error
    assert lease.error.reason == "SESSION_CLOSED"
    assert called.wait(5)
    assert not lease.valid()
    assert lease.release() is False
    again = client.lock(name, wait=0)  # in a new default session
    assert again.session is not lease.session and again.token > lease.token


def test_release_on_exception_does_not_mask_it(client: coordinator.Client, name: str) -> None:
    with pytest.raises(ZeroDivisionError):
        with client.lock(name, wait=0) as lease:
            1 / 0
    assert lease.ended.is_set()
    assert not client.describe(name).held


def test_close_ends_and_releases(server, make_client, name: str) -> None:
    c = make_client(server.address)
    lease = c.lock(name, wait=0)
    c.close()
    assert lease.lost.is_set()
    assert isinstance(lease.error, coordinator.ClientClosed)
    other = make_client(server.address)
    assert not other.describe(name).held
    with pytest.raises(coordinator.ClientClosed):
        c.lock(name, wait=0)


def test_close_ends_a_waiting_lock(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    a.lock(name, wait=0)
    errs: List[BaseException] = []

    def wait_for_it() -> None:
        try:
            b.lock(name, wait=60)
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
    held = [client.lock(f"{name}/{i}", wait=0) for i in range(3)]
    listed = list(client.list_leases(prefix=name + "/", page_size=2))
    assert [x.name for x in listed] == [f"{name}/{i}" for i in range(3)]
    assert [x.token for x in listed] == [h.token for h in held]
