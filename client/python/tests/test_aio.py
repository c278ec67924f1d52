"""coordinator.aio against real coordinators (every available store): what
the asyncio Client adds to the sync one's (the core both share is tested
through the sync Client, and test_behaviour runs both): awaiting,
``async with``, cancellation, events of the loop."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Callable, List

import pytest
from google.protobuf.duration_pb2 import Duration

import coordinator
import coordinator.aio
from coordinator import pb
from conftest import STORES, Server, aio_client, call, close_session

pytestmark = pytest.mark.asyncio


async def eventually(cond: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> None:
    """Awaits cond() (a coroutine function or a plain one) until truthy."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def waiters(c: coordinator.aio.Client, name: str) -> int:
    return (await c.describe(name)).waiters


async def test_lock_and_release(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        lease = await c.lock(name, wait=0)
        assert isinstance(lease, coordinator.aio.Lease)
        assert lease.token > 0 and lease.holder.startswith(c.identity + "#")
        assert lease.valid() and 0 < lease.remaining() <= c.ttl
        assert isinstance(lease.lost, coordinator.aio.LoopEvent) and not lease.lost.is_set()
        assert isinstance(lease.session, coordinator.aio.Session) and lease.session is await c.default_session()
        d = await c.describe(name)
        assert d.held and d.lease is not None and (d.lease.holder, d.lease.token) == (lease.holder, lease.token)
        assert await lease.release() is True
        assert lease.ended.is_set() and not lease.lost.is_set() and not lease.valid()
        assert not (await c.describe(name)).held
        assert await lease.release() is False  # idempotent


async def test_async_with_releases_and_tokens_increase(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        tokens = []
        for _ in range(3):
            async with c.lock(name, wait=0) as lease:
                assert (await c.describe(name)).held
                tokens.append(lease.token)
            assert lease.ended.is_set()
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
        assert not (await c.describe(name)).held
        with pytest.raises(ZeroDivisionError):  # the body's error is not hidden
            async with c.lock(name, wait=0):
                1 / 0
        assert not (await c.describe(name)).held


async def test_try_lock_and_refusal_names_the_holder(server: Server, name: str) -> None:
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        lease = await a.lock(name, wait=0)
        assert await b.try_lock(name) is None
        with pytest.raises(coordinator.NotAcquired) as ei:
            await b.lock(name, wait=0)
        assert ei.value.holder == lease.holder
        assert ei.value.retry_after is not None and 0 < ei.value.retry_after <= a.ttl + 0.5
        with pytest.raises(coordinator.NotAcquired):  # a short wait ends first
            await b.lock(name, wait=0.5)


async def test_waiters_get_the_lock_in_arrival_order(server: Server, name: str) -> None:
    async with aio_client(server.address) as a, aio_client(server.address) as b, aio_client(server.address) as c:
        first = await a.lock(name, wait=0)
        order: List[str] = []

        async def wait_for_it(client: coordinator.aio.Client, who: str) -> coordinator.aio.Lease:
            lease = await client.lock(name, wait=60)
            order.append(who)
            await lease.release()
            return lease

        tb = asyncio.ensure_future(wait_for_it(b, "b"))
        await eventually(lambda: waiters(a, name), what="b to queue")
        tc = asyncio.ensure_future(wait_for_it(c, "c"))
        await eventually(lambda: _equals(waiters(a, name), 2), what="c to queue behind b")
        assert await first.release()
        lb, lc = await asyncio.wait_for(asyncio.gather(tb, tc), 60)
        assert order == ["b", "c"]
        assert first.token < lb.token < lc.token


async def _equals(aw: "asyncio.Future[int]", want: int) -> bool:
    return (await aw) == want


async def test_cancelling_a_waiting_lock_leaves_the_queue(server: Server, name: str) -> None:
    async with aio_client(server.address) as a, aio_client(server.address) as b, aio_client(server.address) as c:
        held = await a.lock(name, wait=0)
        waiting = asyncio.ensure_future(b.lock(name, wait=120))
        await eventually(lambda: waiters(a, name), what="the waiter to queue")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The coordinator forgot the waiter at once (not after its wait)...
        await eventually(lambda: _equals(waiters(a, name), 0), timeout=10, what="the cancelled waiter to leave")
        # ...so the next one is granted the moment the holder releases.
        third = asyncio.ensure_future(c.lock(name, wait=60))
        await eventually(lambda: waiters(a, name), what="the next waiter to queue")
        await held.release()
        lease = await asyncio.wait_for(third, 30)
        assert (await a.describe(name)).lease.holder == lease.holder


async def test_a_session_keeps_its_leases_past_several_ttls(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        async with await c.session(ttl=1) as session:
            leases = [await c.lock(f"{name}/{i}", wait=0, session=session) for i in range(2)]
            lead = await c.campaign(f"{name}/e", wait=0, session=session)
            assert all(g.session is session for g in leases + [lead]) and len(session.leases) == 3
            first = session.last_renewed
            await asyncio.sleep(3.5)  # more than three TTLs: only the session's renewals keep them
            assert all(g.valid() and not g.lost.is_set() for g in leases + [lead])
            assert session.last_renewed > first
            assert await leases[0].release() and len(session.leases) == 2
        # Closing the session released the rest in one call.
        assert all(g.ended.is_set() and isinstance(g.error, coordinator.SessionEnded) for g in leases[1:] + [lead])
        assert not (await c.describe(f"{name}/1")).held and await c.leader(f"{name}/e") is None


async def test_lost_when_its_session_is_ended_behind_its_back(server: Server, name: str) -> None:
    async with aio_client(server.address, ttl=1) as c, aio_client(server.address) as thief:
        lease = await c.lock(name, wait=0)
        called = asyncio.Event()
        loop = asyncio.get_running_loop()
        # The callback runs on the loop (get_running_loop raises elsewhere).
        lease.on_lost(lambda _: asyncio.get_running_loop() is loop and called.set())
        await asyncio.to_thread(close_session, server.address, lease.session.id)
        stolen = await thief.lock(name, wait=0)
        await asyncio.wait_for(lease.lost.wait(), 10)
        assert isinstance(lease.error, coordinator.SessionEnded), lease.error
        await asyncio.wait_for(called.wait(), 5)
        assert not lease.valid() and await lease.release() is False
        assert (await thief.describe(name)).lease.holder == stolen.holder
        again = await c.lock(f"{name}/again", wait=0)  # in a new default session
        assert again.session is not lease.session and again.valid()


@pytest.mark.parametrize("store", STORES)
async def test_lost_when_the_coordinator_is_killed(start_server, name: str, store: str) -> None:
    srv = start_server(store)
    async with aio_client(srv.address, ttl=3) as c:
        lease = await c.lock(name, wait=0)
        first = lease.last_renewed
        await eventually(lambda: lease.last_renewed > first, timeout=10, what="a renewal")
        srv.kill(signal.SIGKILL)
        await asyncio.wait_for(lease.lost.wait(), 15)
        assert isinstance(lease.error, coordinator.LeaseExpired), lease.error
        # Never after the coordinator could have granted the name to anyone else.
        assert lease.lost_at is not None and lease.lost_at <= lease.last_renewed + lease.ttl
        assert not lease.valid()


async def test_close_ends_and_releases(server: Server, name: str) -> None:
    async with aio_client(server.address) as other:
        c = coordinator.aio.Client(server.address)
        lease = await c.lock(name, wait=0)
        lead = await c.campaign(name + "/leader", wait=0)
        # Another task of the same client waits for the lock: closing must
        # not hand it what close() releases.
        waiting = asyncio.ensure_future(c.lock(name, wait=60))
        await eventually(lambda: waiters(other, name), what="the waiter to queue")
        await c.close()
        for h in (lease, lead):
            assert h.lost.is_set() and isinstance(h.error, coordinator.ClientClosed)
        with pytest.raises(coordinator.ClientClosed):
            await waiting
        assert not (await other.describe(name)).held
        assert await other.leader(name + "/leader") is None
        with pytest.raises(coordinator.ClientClosed):
            await c.lock(name, wait=0)


async def test_close_ends_a_waiting_lock(server: Server, name: str) -> None:
    async with aio_client(server.address) as a:
        b = coordinator.aio.Client(server.address)
        await a.lock(name, wait=0)
        waiting = asyncio.ensure_future(b.lock(name, wait=60))
        await eventually(lambda: waiters(a, name), what="the waiter to queue")
        await b.close()
        with pytest.raises(coordinator.ClientClosed):
            await asyncio.wait_for(waiting, 20)


async def test_election_proclaim_observe_and_handover(server: Server, name: str) -> None:
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        async with a.observe(name) as events:
            first = await events.get(timeout=10)
            assert first.initial and first.kind == coordinator.EventKind.VACANT
            lead = await a.campaign(name, value="10.0.0.1:8080", wait=0)
            assert isinstance(lead, coordinator.aio.Leadership) and lead.term > 0
            assert lead.value == b"10.0.0.1:8080"
            await lead.proclaim("10.0.0.2:8080")
            info = await b.leader(name)
            assert info is not None and info.value == b"10.0.0.2:8080"
            assert (info.candidate, info.term) == (lead.candidate, lead.term)
            # b queues behind a; a resigns; b is elected at once.
            follower = asyncio.ensure_future(b.campaign(name, value="b", wait=60))
            await eventually(lambda: waiters(a, name), what="b to queue as a candidate")
            assert await lead.resign()
            second = await asyncio.wait_for(follower, 30)
            assert second.term > lead.term
            with pytest.raises(coordinator.LeaseNotHeld):
                await lead.proclaim("too late")
            seen = []
            async for ev in events:
                seen.append((ev.kind, ev.leader.value if ev.leader else None))
                if ev.kind == coordinator.EventKind.ELECTED and ev.leader and ev.leader.candidate == second.candidate:
                    break
            # a's term, then its proclamation (which a store may report with
            # the election when it came close behind), then b's.
            assert seen[0][0] == coordinator.EventKind.ELECTED, seen
            assert (coordinator.EventKind.PROCLAIMED, b"10.0.0.2:8080") in seen or seen[0][1] == b"10.0.0.2:8080", seen
            async with second:
                pass
            assert await b.leader(name) is None
        # Iteration of a closed observation stops.
        assert [ev async for ev in events] == []


async def test_run_as_leader_campaigns_again_until_cancelled(server: Server, name: str) -> None:
    async with aio_client(server.address, ttl=1) as c:
        terms: List[int] = []
        third = asyncio.Event()

        async def lead(leadership: coordinator.aio.Leadership) -> None:
            assert leadership.valid() and (await c.leader(name)).candidate == leadership.candidate
            terms.append(leadership.term)
            if len(terms) == 1:  # the term ends behind its back
                await asyncio.to_thread(close_session, server.address, leadership.session.id)
                await asyncio.wait_for(leadership.lost.wait(), 10)
            elif len(terms) == 2:
                raise RuntimeError("boom")  # logged; resigned; campaigns again after a backoff
            else:
                third.set()
                await asyncio.Event().wait()  # leads until cancelled

        task = asyncio.ensure_future(c.run_as_leader(name, lead, value="me"))
        await asyncio.wait_for(third.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(terms) == 3 and terms == sorted(set(terms)), terms
        assert await c.leader(name) is None  # resigned when cancelled


async def test_list_leases(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        held = [await c.lock(f"{name}/{i}", wait=0) for i in range(3)]
        listed = [x async for x in c.list_leases(prefix=name + "/", page_size=2)]
        assert [(x.name, x.token) for x in listed] == [(h.name, h.token) for h in held]


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda c: c.lock("", wait=0), "name"),
        (lambda c: c.lock("x/" + "n" * 300, wait=0), "name"),
        (lambda c: c.campaign("", wait=0), "election"),
    ],
)
async def test_bad_input_is_invalid_field(server: Server, call, field: str) -> None:
    async with aio_client(server.address) as c:
        with pytest.raises(coordinator.InvalidField) as ei:
            await call(c)
        assert ei.value.field == field, ei.value
        assert isinstance(ei.value, ValueError)


async def test_bad_settings_are_refused_before_connecting() -> None:
    for kwargs in ({"ttl": 0}, {"holder": ""}, {"holder": "x" * 200}, {"token": "t"}):
        with pytest.raises(ValueError):
            coordinator.aio.Client("127.0.0.1:1", **kwargs)  # type: ignore[arg-type]
    async with aio_client("127.0.0.1:1") as c:
        with pytest.raises(ValueError):
            await c.session(ttl=-1)


async def test_a_waiting_lock_retries_transient_errors_as_the_same_holder(start_server, redis_server,
                                                                          name: str) -> None:
    # A fresh key prefix without COORDINATOR_REDIS_NEW_STORE looks like a
    # Redis that lost its data: grants stop for the quarantine (3s here).
    import conftest

    url = conftest.REDIS_URL or redis_server().url
    srv = start_server("redis", env={"COORDINATOR_REDIS_URL": url, "COORDINATOR_REDIS_NEW_STORE": None,
                                     "COORDINATOR_DATA_LOSS_QUARANTINE": "3s"})
    async with aio_client(srv.address) as c:
        with pytest.raises(coordinator.DataLossQuarantine) as ei:
            await c.lock(name, wait=0)
        assert ei.value.transient and ei.value.retry_after is not None and ei.value.retry_after > 0
        with pytest.raises(coordinator.NotAcquired) as ei2:  # the wait ends first, with the last error
            await c.lock(name, wait=0.3)
        assert isinstance(ei2.value.last_error, coordinator.DataLossQuarantine)
        # Waiting long enough: retried (after retry_after) until the
        # quarantine is over, always as the acquisition's one holder.
        lease = await c.lock(name, wait=60)
        assert lease.holder == f"{c.identity}#3"
        assert (await c.describe(name)).lease.holder == lease.holder


# -- semaphores and read-write locks --------------------------------------------


async def test_semaphore_shares_respect_the_capacity(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        sem = c.semaphore(name, 3)
        assert isinstance(sem, coordinator.aio.Semaphore) and sem.capacity == 3
        a = await sem.acquire(2, wait=0)
        b = await sem.try_acquire(1)
        assert isinstance(a, coordinator.aio.Lease) and b is not None
        assert (a.weight, b.weight) == (2, 1) and b.token > a.token and a.holder != b.holder
        assert await sem.try_acquire(1) is None  # full
        with pytest.raises(coordinator.NotAcquired):
            await sem.acquire(1, wait=0)
        d = await c.describe(name)
        assert d.capacity == 3 and [(h.token, h.weight) for h in d.holders] == [(a.token, 2), (b.token, 1)]
        # A waiter for 2 is granted when a's 2 come back, not before.
        waiting = asyncio.ensure_future(sem.acquire(2, wait=30))
        await eventually(lambda: waiters(c, name), what="the share to wait")
        assert not waiting.done()
        assert await a.release() is True
        c2 = await asyncio.wait_for(waiting, 30)
        assert c2.weight == 2 and c2.token > b.token
        assert await c2.release() is True
        async with sem.acquire(2, wait=10) as share:
            assert share.weight == 2 and share.valid()
            assert sum(h.weight for h in (await c.describe(name)).holders) == 3
        assert share.ended.is_set() and not share.lost.is_set()
        assert await b.release() is True
        assert not (await c.describe(name)).holders


async def test_semaphore_waiters_never_hold_past_the_capacity(server: Server, name: str) -> None:
    capacity = 4
    async with aio_client(server.address) as c:
        sem = c.semaphore(name, capacity)
        held, most = [0], [0]

        async def worker(n: int) -> None:
            async with sem.acquire(n, wait=30) as share:
                assert share.weight == n
                held[0] += n
                most[0] = max(most[0], held[0])
                assert held[0] <= capacity
                await asyncio.sleep(0.05)
                held[0] -= n

        await asyncio.wait_for(asyncio.gather(*(worker(1 + i % capacity) for i in range(10))), 60)
        assert 2 <= most[0] <= capacity


async def test_semaphore_capacity_must_agree(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        async with c.semaphore(name, 5).acquire(1, wait=0):
            with pytest.raises(coordinator.CapacityMismatch) as e:
                await c.semaphore(name, 3).acquire(1, wait=0)
            assert (e.value.metadata["capacity"], e.value.metadata["requested"]) == ("5", "3")
            with pytest.raises(coordinator.CapacityMismatch):
                await c.lock(name, wait=0)
        with pytest.raises(ValueError):
            c.semaphore(name, 5).acquire(6)
        with pytest.raises(ValueError):
            c.semaphore(name, 0)
        with pytest.raises(ValueError):
            c.semaphore(name, coordinator.MAX_CAPACITY + 1)


async def test_rwlock_a_waiting_writer_comes_before_later_readers(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        rw = c.rwlock(name)
        assert isinstance(rw, coordinator.aio.RWLock)
        r1 = await rw.read_lock(wait=0)
        r2 = await rw.try_read_lock()
        assert r2 is not None and (r1.weight, r2.weight) == (1, 1)
        assert await rw.try_write_lock() is None
        writer = asyncio.ensure_future(rw.write_lock(wait=30))
        await eventually(lambda: waiters(c, name), what="the writer to wait")
        assert await rw.try_read_lock() is None  # a later reader waits behind the writer
        late_reader = asyncio.ensure_future(rw.read_lock(wait=30))
        await eventually(async_eq(lambda: waiters(c, name), 2), what="the late reader to wait")
        await r1.release()
        await r2.release()
        w = await asyncio.wait_for(writer, 30)
        assert w.weight == coordinator.RW_CAPACITY and w.token > r2.token
        assert not late_reader.done()
        async with w:
            pass
        r3 = await asyncio.wait_for(late_reader, 30)
        assert r3.weight == 1 and r3.token > w.token
        async with rw.read_lock(wait=5) as r4:
            assert r4.token > r3.token
        await r3.release()


def async_eq(get: Callable[[], object], want: object) -> Callable[[], object]:
    """A condition for eventually(): the coroutine function get's value is want."""
    async def cond() -> bool:
        return (await get()) == want  # type: ignore[misc]
    return cond


async def test_a_waiting_share_is_retried_as_the_same_holder_and_keeps_its_weight(
        start_server, redis_server, name: str) -> None:
    # As test_a_waiting_lock_retries_transient_errors_as_the_same_holder: a
    # quarantined store refuses grants for 3s; the share asked again and
    # again as its one holder is granted its weight in the end.
    import conftest

    url = conftest.REDIS_URL or redis_server().url
    srv = start_server("redis", env={"COORDINATOR_REDIS_URL": url, "COORDINATOR_REDIS_NEW_STORE": None,
                                     "COORDINATOR_DATA_LOSS_QUARANTINE": "3s"})
    async with aio_client(srv.address) as c:
        sem = c.semaphore(name, 4)
        with pytest.raises(coordinator.DataLossQuarantine):
            await sem.acquire(3, wait=0)
        share = await sem.acquire(3, wait=60)
        assert share.holder == f"{c.identity}#2" and share.weight == 3
        d = await c.describe(name)
        assert [(h.holder, h.token, h.weight) for h in d.holders] == [(share.holder, share.token, 3)]
        # Asked again as its holder, the coordinator answers with the same
        # grant: token and weight.
        req = pb.TryAcquireRequest(name=name, holder=share.holder, ttl=Duration(seconds=5), capacity=4, weight=3,
                                   session_id=share.session.id)
        again = await asyncio.to_thread(call, srv.address, "TryAcquire", req)
        assert again.acquired and (again.lease.token, again.lease.weight) == (share.token, 3)
        await share.release()


async def test_observe_reports_a_semaphores_holders(server: Server, name: str) -> None:
    async with aio_client(server.address) as c:
        rw = c.rwlock(name)
        r = await rw.read_lock(wait=0)
        async with c.observe(name) as events:
            first = await events.get(timeout=20)
            assert first.initial and first.kind == coordinator.EventKind.HOLDERS and first.leader is None
            assert first.capacity == coordinator.RW_CAPACITY
            assert [(h.holder, h.token, h.weight) for h in first.holders] == [(r.holder, r.token, 1)]
            writer = asyncio.ensure_future(rw.write_lock(wait=30))
            await eventually(lambda: waiters(c, name), what="the writer to wait")
            await r.release()
            ev = await events.get(timeout=20)
            # The reader left and the writer came: one change of the set or two.
            if not ev.holders:
                ev = await events.get(timeout=20)
            w = await asyncio.wait_for(writer, 30)
            assert ev.kind == coordinator.EventKind.HOLDERS and not ev.initial
            assert [(h.holder, h.token, h.weight) for h in ev.holders] == [(w.holder, w.token, coordinator.RW_CAPACITY)]
            assert ev.holders[0].expires_at is not None
            await w.release()
            ev = await events.get(timeout=20)
            assert ev.kind == coordinator.EventKind.HOLDERS and ev.holders == ()
