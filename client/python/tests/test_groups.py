"""Groups: several names acquired at once (lock_all, acquire_all and their
try_ forms), against real coordinators, through the sync and the asyncio
Client: what the behaviour cases do not reach (the Group's view, local
refusals, waiting, retrying as the same holder, giving up what an abandoned
or cancelled acquisition was granted, loss with the session or the
Client), and the decisions of coordinator._acquire for groups."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import grpc
import pytest

import coordinator
import coordinator.aio
from coordinator import pb
from coordinator._acquire import AcquireSteps, Grant, check_members, give_up_operation, grant_of
from coordinator._stream import StreamBroken, may_wait
from coordinator._util import to_duration
from conftest import Server, aio_client, close_session, wait_until


def names_of(name: str, *suffixes: str) -> List[str]:
    return [f"{name}/{s}" for s in suffixes]


def holders(c: coordinator.Client, n: str) -> List[Tuple[str, int]]:
    return [(h.holder, h.token) for h in c.describe(n).holders]


# -- the sync Client ----------------------------------------------------------


def test_a_group_has_a_token_per_name_in_the_default_session(client: coordinator.Client, name: str) -> None:
    x, y, z = names_of(name, "x", "y", "z")
    group = client.lock_all([z, x, y], wait=0)
    assert isinstance(group, coordinator.Group) and group.kind == "group"
    assert group.names == (z, x, y)  # the request's order
    assert set(group.tokens) == {x, y, z} and all(t > 0 for t in group.tokens.values())
    assert group.holder.startswith(client.identity + "#")
    assert group.session is client.default_session() and group in group.session.leases
    assert group.valid() and 0 < group.remaining() <= client.ttl and not group.lost.is_set()
    for n in (x, y, z):
        assert holders(client, n) == [(group.holder, group.token(n))]
        d = client.describe(n)
        assert d.lease is not None and d.lease.session_id == group.session.id
        assert group.weight(n) == 1
    with pytest.raises(KeyError, match="not a name of the group"):
        group.token(f"{name}/other")
    group.tokens[x] = 0  # a copy
    assert group.token(x) > 0
    assert group.release() is True
    assert group.ended.is_set() and not group.lost.is_set() and group.error is None and not group.valid()
    assert group not in group.session.leases
    assert all(not client.describe(n).held for n in (x, y, z))
    assert group.release() is False  # once released, a no-op


def test_shares_are_taken_together_with_their_weights(client: coordinator.Client, name: str) -> None:
    sem, rw, lock = names_of(name, "sem", "rw", "lock")
    members = [coordinator.Member(sem, 3, 2), coordinator.Member(rw, coordinator.RW_CAPACITY, 1),
               coordinator.Member(lock)]
    group = client.acquire_all(members, wait=0)
    assert (group.weight(sem), group.weight(rw), group.weight(lock)) == (2, 1, 1)
    assert client.semaphore(sem, 3).try_acquire(2) is None  # 2 of 3 held
    reader = client.rwlock(rw).try_read_lock()  # readers share
    assert reader is not None and reader.release()
    assert client.try_acquire_all([coordinator.Member(sem, 3, 2)]) is None
    with pytest.raises(coordinator.CapacityMismatch):
        client.try_acquire_all([coordinator.Member(sem, 4, 1)])
    assert group.release()


def test_a_refusal_holds_nothing_and_names_the_name_in_the_way(server: Server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    x, y = names_of(name, "x", "y")
    blocker = a.lock(y, wait=0)
    assert b.try_lock_all([x, y]) is None
    with pytest.raises(coordinator.NotAcquired) as ei:
        b.lock_all([x, y], wait=0)
    assert ei.value.name == y and ei.value.holder == blocker.holder
    assert ei.value.retry_after is not None and ei.value.retry_after > 0
    with pytest.raises(coordinator.NotAcquired) as ei:  # a short wait ends first
        b.lock_all([x, y], wait=0.5)
    assert ei.value.name == y
    assert not a.describe(x).held and a.describe(x).waiters == 0 and a.describe(y).waiters == 0
    assert b.default_session().leases == ()


@pytest.mark.parametrize("members, why", [
    ([], "1 to 32 members, not 0"),
    ([coordinator.Member("a"), coordinator.Member("b"), coordinator.Member("a")], "'a' more than once"),
    ([coordinator.Member(f"n{i}") for i in range(coordinator.MAX_GROUP_MEMBERS + 1)], "not 33"),
])
def test_groups_the_coordinator_would_refuse_are_refused_before_any_call(members, why: str) -> None:
    c = coordinator.Client("127.0.0.1:1")  # nothing listens there
    names = [m.name for m in members]
    try:
        for attempt in (lambda: c.acquire_all(members, wait=0), lambda: c.try_acquire_all(members),
                        lambda: c.lock_all(names), lambda: c.try_lock_all(names)):
            with pytest.raises(coordinator.InvalidField, match=why) as ei:
                attempt()
            assert ei.value.field == "members" and ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert isinstance(ei.value, ValueError)
        with pytest.raises(TypeError, match="not one string"):
            c.lock_all("ab")
        with pytest.raises(TypeError, match="are coordinator.Member, not 'a'"):
            c.acquire_all(["a"])  # type: ignore[list-item]
        assert check_members(coordinator.Member(f"n{i}") for i in range(32))[31].name == "n31"
    finally:
        c.close()


def test_a_waiting_group_is_granted_when_its_names_are_free(server: Server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    x, y = names_of(name, "x", "y")
    hx = a.lock(x, wait=0)
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.append(b.lock_all([y, x], wait=60)))
    t.start()
    wait_until(lambda: a.describe(x).waiters == 1 and a.describe(y).waiters == 1, what="the group to queue on x and y")
    assert not a.describe(y).held  # y is free, but not taken while x is not
    assert hx.release()
    t.join(timeout=30)
    assert not t.is_alive() and len(got) == 1
    group = got[0]
    assert group.token(x) > hx.token
    assert holders(a, x) == [(group.holder, group.token(x))] and holders(a, y) == [(group.holder, group.token(y))]
    with group:
        pass
    assert not a.describe(x).held and not a.describe(y).held


def test_a_lost_answer_is_retried_as_the_same_holder(client: coordinator.Client, name: str, monkeypatch) -> None:
    x, y = names_of(name, "x", "y")
    core = client._core
    operation = core.operation
    first: List[Any] = []

    def losing_the_first_answer(kind: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        resp = operation(kind, request, *args, **kwargs)
        if kind == "acquire_group" and not first:
            first.append(resp[0])
            raise StreamBroken("the answer was lost", code=grpc.StatusCode.UNAVAILABLE)
        return resp

    monkeypatch.setattr(core, "operation", losing_the_first_answer)
    group = client.lock_all([x, y], wait=10)
    # Granted on the first call; asked again as the holder, the coordinator
    # answered with the same leases.
    assert first and first[0].acquired
    assert group.tokens == {lease.name: lease.token for lease in first[0].leases}
    assert holders(client, x) == [(group.holder, group.token(x))]
    assert group.release()


def test_an_outcome_unknown_try_gives_up_what_it_was_granted(client: coordinator.Client, name: str,
                                                             monkeypatch) -> None:
    x, y = names_of(name, "x", "y")
    core = client._core
    operation = core.operation
    lost: List[Any] = []

    def losing_every_answer(kind: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        resp = operation(kind, request, *args, **kwargs)
        if kind == "acquire_group":
            lost.append(resp[0])
            raise StreamBroken("the answer was lost", code=grpc.StatusCode.UNAVAILABLE)
        return resp

    monkeypatch.setattr(core, "operation", losing_every_answer)
    with pytest.raises(coordinator.Unavailable):
        client.try_lock_all([x, y])
    assert len(lost) == 1 and lost[0].acquired  # granted, unknown to the caller…
    # …and given up by the abandon that followed.
    wait_until(lambda: not client.describe(x).held and not client.describe(y).held, timeout=10,
               what="the abandoned group to be released")


def test_abandon_releases_whatever_the_holder_holds(server: Server, make_client, name: str) -> None:
    a, other = make_client(server.address), make_client(server.address)
    x, y, z = names_of(name, "x", "y", "z")
    held_by_other = other.lock(z, wait=0)
    acquisition = a._core.group_acquisition([coordinator.Member(x), coordinator.Member(y)], 0, None)
    resp, _ = a._core.operation("acquire_group", acquisition.request(a._core.session_for(None), 0))
    assert resp.acquired
    a._core.abandon([x, y, z], acquisition.holder, group=True)
    wait_until(lambda: not a.describe(x).held and not a.describe(y).held, timeout=10, what="x and y released")
    assert holders(a, z) == [(held_by_other.holder, held_by_other.token)]  # not the holder's: kept


def _given_up_group(client: coordinator.Client, names: List[str]) -> Any:
    """A group acquisition by client that gave up (whose late grants are
    given up at once)."""
    a = client._core.group_acquisition([coordinator.Member(n) for n in names], 0, None)
    a.given_up = True
    return a


def test_a_group_caller_leaving_cancels_its_wait_on_every_name(server: Server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    x, y = names_of(name, "x", "y")
    first = a.lock(x, wait=0)
    gave_up = _given_up_group(b, [y, x])
    req = gave_up.request(b._core.session_for(None), 20)
    assert may_wait(pb.StreamOperation(acquire_group=req))
    with pytest.raises(coordinator.RPCError) as ei:
        b._core.stream.call(pb.StreamOperation(acquire_group=req), 0.5, gave_up.late())
    assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: a.describe(x).waiters == 0 and a.describe(y).waiters == 0, timeout=12,
               what="the group's wait to be cancelled")
    assert not a.describe(y).held and holders(a, x) == [(first.holder, first.token)]


def test_a_group_granted_before_the_cancel_is_released(server: Server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    x, y = names_of(name, "x", "y")
    first = a.lock(x, wait=0)
    gave_up = _given_up_group(b, [x, y])
    stream = b._core.stream
    cancels: List[int] = []
    queue_cancel = stream._queue_cancel_locked
    stream._queue_cancel_locked = cancels.append  # held back until the grant came
    req = gave_up.request(b._core.session_for(None), 30)
    with pytest.raises(coordinator.RPCError):
        stream.call(pb.StreamOperation(acquire_group=req), 0.5, gave_up.late())
    assert len(cancels) == 1
    wait_until(lambda: a.describe(y).waiters == 1, timeout=10, what="the group to queue")
    assert first.release()
    # Granted to nobody, and given up at once with one release_group.
    wait_until(lambda: a.describe(x).last_token > first.token and not a.describe(x).held and not a.describe(y).held,
               timeout=10, what="the late group to be released")
    with stream.lock:
        queue_cancel(cancels[0])
    wait_until(lambda: not stream._queue, timeout=5, what="the cancel to be sent")


def test_a_group_ends_with_its_session(server: Server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    x, y = names_of(name, "x", "y")
    with a.session(ttl=30) as session:
        group = a.lock_all([x, y], session=session, wait=0)
        lease = a.lock(f"{name}/z", session=session, wait=0)
        assert group.session is session and set(session.leases) == {group, lease}
        lost: List[Any] = []
        group.on_lost(lost.append)
    assert group.lost.is_set() and lost == [group]
    assert isinstance(group.error, coordinator.SessionEnded) and x in str(group.error)
    assert group.release() is False
    assert b.try_lock_all([x, y]) is not None  # released on the coordinator by the CloseSession

    # Ended behind the Client's back, the default session's group is lost when its renewal is refused.
    c = make_client(server.address, ttl=1.5)
    group = c.lock_all(names_of(name, "p", "q"), wait=0)
    close_session(server.address, group.session.id)
    assert group.lost.wait(5), group
    assert isinstance(group.error, coordinator.SessionEnded)
    assert c.lock_all(names_of(name, "p", "q"), wait=0).session is not group.session  # a new default session


def test_closing_the_client_ends_and_releases_its_groups(server: Server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    x, y = names_of(name, "x", "y")
    group = a.lock_all([x, y], wait=0)
    a.close()
    assert group.lost.is_set() and isinstance(group.error, coordinator.ClientClosed)
    assert not b.describe(x).held and not b.describe(y).held


def test_the_context_manager_does_not_hide_the_bodys_error(client: coordinator.Client, name: str) -> None:
    x, y = names_of(name, "x", "y")
    with pytest.raises(ZeroDivisionError):
        with client.lock_all([x, y], wait=0) as group:
            assert repr(group).endswith("held>")
            1 / 0
    assert group.ended.is_set() and repr(group).endswith("released>")
    assert not client.describe(x).held


# -- the asyncio Client -------------------------------------------------------


@pytest.mark.asyncio
async def test_aio_lock_all_and_async_with(server: Server, name: str) -> None:
    x, y = names_of(name, "x", "y")
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        async with a.lock_all([x, y], wait=0) as group:
            assert isinstance(group, coordinator.aio.Group)
            assert isinstance(group.lost, coordinator.aio.LoopEvent) and group.session is await a.default_session()
            assert await b.try_lock_all([y]) is None
            with pytest.raises(coordinator.NotAcquired) as ei:
                await b.acquire_all([coordinator.Member(f"{name}/free"), coordinator.Member(x)], wait=0)
            assert ei.value.name == x and ei.value.holder == group.holder
        assert group.ended.is_set() and not (await a.describe(x)).held
        shares = await b.try_acquire_all([coordinator.Member(x, 2, 1), coordinator.Member(y, 2, 2)])
        assert shares is not None and (shares.weight(x), shares.weight(y)) == (1, 2)
        assert await shares.release() is True and await shares.release() is False
        with pytest.raises(coordinator.InvalidField):
            await b.try_lock_all([x, x])


@pytest.mark.asyncio
async def test_aio_a_waiting_group_is_granted_and_loses_with_its_session(server: Server, name: str) -> None:
    x, y = names_of(name, "x", "y")
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        hx = await a.lock(x, wait=0)
        waiting = asyncio.ensure_future(b.lock_all([x, y], wait=60))
        await _eventually(lambda: _waiters(a, y), what="the group to queue")
        assert await hx.release()
        group = await asyncio.wait_for(waiting, 30)
        assert group.token(x) > hx.token
        lost = asyncio.Event()
        group.on_lost(lambda _g: lost.set())  # called on the loop
        await asyncio.to_thread(close_session, server.address, group.session.id)
        await asyncio.wait_for(group.lost.wait(), 20)
        await asyncio.wait_for(lost.wait(), 5)
        assert isinstance(group.error, coordinator.SessionEnded)


@pytest.mark.asyncio
async def test_aio_cancelling_a_waiting_group_leaves_every_queue(server: Server, name: str) -> None:
    x, y = names_of(name, "x", "y")
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        held = await a.lock(x, wait=0)
        waiting = asyncio.ensure_future(b.lock_all([y, x], wait=120))
        await _eventually(lambda: _waiters(a, x), what="the group to queue")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await _eventually(lambda: _no_waiters(a, x, y), timeout=10, what="the cancelled group to leave both queues")
        assert await held.release()
        assert (await b.try_lock_all([x, y])) is not None  # nothing was kept for the cancelled group


async def _waiters(c: coordinator.aio.Client, n: str) -> int:
    return (await c.describe(n)).waiters


async def _no_waiters(c: coordinator.aio.Client, *names: str) -> bool:
    return all([(await c.describe(n)).waiters == 0 for n in names])


async def _eventually(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not await cond():
        assert asyncio.get_running_loop().time() < end, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.02)


# -- the decisions (coordinator._acquire), without a coordinator ------------------


def _group_response(acquired: bool, **fields: Any) -> Any:
    return pb.AcquireGroupResponse(acquired=acquired, **fields)


def test_the_grant_of_a_group_answer() -> None:
    leases = [pb.Lease(name="b", holder="h#1", token=9, weight=2), pb.Lease(name="a", holder="h#1", token=4)]
    g = grant_of("acquire_group", _group_response(True, leases=leases))
    assert g.acquired and [(m.name, m.token, m.weight) for m in g.members] == [("b", 9, 2), ("a", 4, 1)]
    refused = grant_of("acquire_group", _group_response(False, blocked_name="a", holder="h#2",
                                                        retry_after=to_duration(1.5)))
    assert not refused.acquired and (refused.blocked, refused.holder, refused.retry_after) == ("a", "h#2", 1.5)


def test_a_late_group_grant_is_given_up_with_one_release_group() -> None:
    leases = [pb.Lease(name="b", holder="h#1", token=9), pb.Lease(name="a", holder="h#1", token=4)]
    op = give_up_operation(pb.StreamResult(acquire_group=_group_response(True, leases=leases)))
    assert op is not None and op.WhichOneof("operation") == "release_group"
    assert op.release_group.holder == "h#1"
    assert [(lease.name, lease.token) for lease in op.release_group.leases] == [("b", 9), ("a", 4)]
    assert give_up_operation(pb.StreamResult(acquire_group=_group_response(False))) is None


@pytest.mark.parametrize("wait, waits", [(None, True), (0, False)])
def test_only_a_waiting_group_request_is_cancellable(wait: Optional[float], waits: bool) -> None:
    req = pb.AcquireGroupRequest(holder="h#1", members=[pb.GroupMember(name="a")])
    if wait is None:
        req.wait.CopyFrom(to_duration(5))
    assert may_wait(pb.StreamOperation(acquire_group=req)) is waits


def test_a_group_not_acquired_names_the_name_in_the_way() -> None:
    steps = AcquireSteps("group", "a, b", 0)
    steps.begin()
    step = steps.answered(Grant(False, holder="h#2", blocked="b"))
    assert isinstance(step.error, coordinator.NotAcquired)
    assert (step.error.name, step.error.holder) == ("b", "h#2")

    # Waiting: refused by b, then the wait ran out while retrying an error.
    steps = AcquireSteps("group", "a, b", 30)
    steps.begin()
    steps.answered(Grant(False, holder="h#2", blocked="b"))
    steps.begin()
    step = steps.failed(coordinator.Unavailable("down", code=grpc.StatusCode.UNAVAILABLE))
    assert step.pause is not None
    steps.end = time.monotonic() - 0.001
    final = steps.resumed(step)
    assert isinstance(final.error, coordinator.NotAcquired)
    assert (final.error.name, final.error.holder) == ("b", "h#2")
