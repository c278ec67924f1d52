"""Semaphores and read-write locks against a real coordinator (every
available store)."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

import coordinator
from conftest import wait_until


def test_semaphore_shares_are_leases_of_their_own(client: coordinator.Client, name: str) -> None:
    sem = client.semaphore(name, 3)
    a = sem.acquire(2, wait=0)
    b = sem.try_acquire(1)
    assert b is not None
    assert (a.weight, b.weight) == (2, 1)
    assert b.token > a.token and a.holder != b.holder
    assert sem.try_acquire(1) is None  # full
    with pytest.raises(coordinator.NotAcquired):
        sem.acquire(1, wait=0)
    d = client.describe(name)
    assert d.capacity == 3 and [h.weight for h in d.holders] == [2, 1]
    assert [h.token for h in d.holders] == [a.token, b.token]
    assert {x.holder for x in client.list_leases(name)} == {a.holder, b.holder}
    # Releasing one share leaves the other held, in the same session.
    assert a.release() is True
    assert b.valid() and not b.lost.is_set() and b.session is a.session
    assert [h.token for h in client.describe(name).holders] == [b.token]
    b.release()


def test_capacity_must_agree(client: coordinator.Client, name: str) -> None:
    with client.semaphore(name, 5).acquire(1, wait=0):
        with pytest.raises(coordinator.CapacityMismatch) as e:
            client.semaphore(name, 3).acquire(1, wait=0)
        assert (e.value.metadata["capacity"], e.value.metadata["requested"]) == ("5", "3")
        with pytest.raises(coordinator.CapacityMismatch):
            client.lock(name, wait=0)
    with pytest.raises(ValueError):
        client.semaphore(name, 5).acquire(6)
    with pytest.raises(ValueError):
        client.semaphore(name, coordinator.MAX_CAPACITY + 1)


def test_waiters_never_hold_past_the_capacity(client: coordinator.Client, name: str) -> None:
    capacity = 4
    sem = client.semaphore(name, capacity)
    lock = threading.Lock()
    held, most, errors = [0], [0], []  # type: List[int], List[int], List[BaseException]

    def worker(n: int) -> None:
        try:
            with sem.acquire(n, wait=30) as share:
                assert share.weight == n
                with lock:
                    held[0] += n
                    most[0] = max(most[0], held[0])
                time.sleep(0.05)
                with lock:
                    held[0] -= n
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(1 + i % capacity,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert 2 <= most[0] <= capacity


def test_rwlock_readers_share_and_a_waiting_writer_comes_first(client: coordinator.Client, name: str) -> None:
    rw = client.rwlock(name)
    r1 = rw.read_lock(wait=0)
    r2 = rw.try_read_lock()
    assert r2 is not None and r2.weight == 1
    assert rw.try_write_lock() is None
    got: List[coordinator.Lease] = []
    writer = threading.Thread(target=lambda: got.append(rw.write_lock(wait=30)))
    writer.start()
    wait_until(lambda: client.describe(name).waiters == 1, what="the writer waiting")
    assert rw.try_read_lock() is None  # a later reader waits behind the writer
    r1.release()
    r2.release()
    writer.join(30)
    assert got, "the writer was not granted"
    w = got[0]
    assert w.weight == coordinator.RW_CAPACITY and w.token > r2.token
    with pytest.raises(coordinator.NotAcquired):
        rw.read_lock(wait=0.3)
    w.release()
    with rw.read_lock(wait=5) as r:
        assert r.token > w.token


def test_observe_reports_the_holders_as_they_come_and_go(client: coordinator.Client, name: str) -> None:
    sem = client.semaphore(name, 3)
    a = sem.acquire(2, wait=0)
    with client.observe(name) as events:
        first = events.get(timeout=20)
        assert first.initial and first.kind == coordinator.EventKind.HOLDERS and first.leader is None
        assert first.capacity == 3
        assert [(h.name, h.holder, h.token, h.weight) for h in first.holders] == [(name, a.holder, a.token, 2)]
        assert first.holders[0].expires_at is not None
        b = sem.acquire(1, wait=0)
        ev = events.get(timeout=20)
        assert not ev.initial and ev.kind == coordinator.EventKind.HOLDERS and ev.capacity == 3
        assert [(h.holder, h.token, h.weight) for h in ev.holders] == [(a.holder, a.token, 2), (b.holder, b.token, 1)]
        a.release()
        ev = events.get(timeout=20)
        assert ev.kind == coordinator.EventKind.HOLDERS
        assert [(h.holder, h.token, h.weight) for h in ev.holders] == [(b.holder, b.token, 1)]
        b.release()
        ev = events.get(timeout=20)
        assert ev.kind == coordinator.EventKind.HOLDERS and ev.holders == ()
