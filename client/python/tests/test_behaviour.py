"""The language-neutral behaviour cases (client/testdata/behaviour.json, read
its "doc" for the steps), run against a real coordinator by the sync Client
and by the asyncio one. One interpreter runs both: a driver gives each step
the client's own calls (the sync ones in a worker thread)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, List, Optional

import grpc
import pytest

import coordinator
import coordinator.aio
from coordinator import _rules, _util
from conftest import REPO, Server, close_session

CASES: List[Dict[str, Any]] = json.loads((REPO / "client" / "testdata" / "behaviour.json").read_text())["cases"]


class SyncDriver:
    """The steps' calls on coordinator.Client, each in a worker thread."""

    def __init__(self, target: str) -> None:
        self.target = target

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def connect(self, ttl: Optional[float]) -> Any:
        return coordinator.Client(self.target, timeout=15.0, **({"ttl": ttl} if ttl else {}))

    async def iterate(self, it: Any) -> List[Any]:
        return await asyncio.to_thread(list, it)

    def start(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "asyncio.Future[Any]":
        """Runs fn in the background (a worker thread)."""
        return asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))

    async def wait_lost(self, lease: Any, seconds: float) -> bool:
        return await asyncio.to_thread(lease.lost.wait, seconds)

    async def leaderships(self, client: Any, election: str, count: int) -> int:
        """How many times run_as_leader ran its function, stopped after count."""
        calls: List[Any] = []
        stop = threading.Event()

        def fn(lead: Any) -> None:
            calls.append(lead)
            if len(calls) >= count:
                stop.set()

        await asyncio.wait_for(asyncio.to_thread(client.run_as_leader, election, fn, stop=stop), 20)
        return len(calls)


class AioDriver:
    """The steps' calls on coordinator.aio.Client."""

    def __init__(self, target: str) -> None:
        self.target = target

    async def run(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    async def connect(self, ttl: Optional[float]) -> Any:
        return coordinator.aio.Client(self.target, timeout=15.0, **({"ttl": ttl} if ttl else {}))

    async def iterate(self, it: Any) -> List[Any]:
        return [x async for x in it]

    def start(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> "asyncio.Future[Any]":
        """Runs fn in the background (a task of the loop)."""
        return asyncio.ensure_future(self.run(fn, *args, **kwargs))

    async def wait_lost(self, lease: Any, seconds: float) -> bool:
        try:
            return await asyncio.wait_for(lease.lost.wait(), seconds)
        except asyncio.TimeoutError:
            return False

    async def leaderships(self, client: Any, election: str, count: int) -> int:
        calls: List[Any] = []
        enough = asyncio.Event()

        async def fn(lead: Any) -> None:
            calls.append(lead)
            if len(calls) >= count:
                enough.set()
                await asyncio.Event().wait()  # leads until cancelled

        task = asyncio.ensure_future(client.run_as_leader(election, fn))
        await asyncio.wait_for(enough.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return len(calls)


DRIVERS = {"sync": SyncDriver, "asyncio": AioDriver}


async def one_try(d: Any, acquisition: Callable[[], Any], expect: str) -> Optional[Any]:
    """Runs an acquisition that does not wait; checks it was 'granted',
    'not_acquired' or 'invalid_argument'."""
    try:
        got = await d.run(acquisition)
    except coordinator.NotAcquired:
        got = None
    except coordinator.InvalidField as e:
        assert expect == "invalid_argument", f"expected {expect}, got {e!r}"
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT, e
        return None
    assert expect != "invalid_argument", f"expected {expect}, got {got!r}"
    assert (got is not None) == (expect == "granted"), f"expected {expect}, got {got!r}"
    return got


def token_of(held: Dict[str, Any], prefix: str, ref: str) -> int:
    """The token of what ref names: a lease, or "<as>.<name>", member name
    of the group kept as <as>."""
    if ref in held:
        return held[ref].token
    group, _, member = ref.partition(".")
    return held[group].token(prefix + member)


async def run_case(d: Any, target: str, steps: List[Dict[str, Any]]) -> None:
    prefix = f"behaviour/{uuid.uuid4().hex[:12]}/"
    clients: Dict[str, Any] = {}
    held: Dict[str, Any] = {}
    background: Dict[str, "asyncio.Future[Any]"] = {}

    def keep(step: Dict[str, Any], got: Any) -> None:
        if got is not None and "as" in step:
            held[step["as"]] = got

    try:
        for i, step in enumerate(steps):
            do = step["do"]
            c = clients.get(step.get("client", ""))
            name = prefix + step.get("name", step.get("election", ""))
            expect = step.get("expect")
            where = f"step {i} ({do})"
            if do == "connect":
                clients[step["client"]] = await d.connect(step.get("ttl_ms", 0) / 1000)
            elif do == "lock":
                keep(step, await d.run(c.lock, name, wait=10))
            elif do == "try_lock":
                keep(step, await one_try(d, lambda: c.lock(name, wait=0), expect))
            elif do == "acquire":
                sem = c.semaphore(name, step["capacity"])
                keep(step, await one_try(d, lambda: sem.acquire(step["weight"], wait=0), expect or "granted"))
            elif do in ("read_lock", "write_lock"):
                side = getattr(c.rwlock(name), do)
                keep(step, await one_try(d, lambda: side(wait=0), expect or "granted"))
            elif do == "lock_all":
                keep(step, await d.run(c.lock_all, [prefix + n for n in step["names"]], wait=10))
            elif do == "try_lock_all":
                names = [prefix + n for n in step["names"]]
                keep(step, await one_try(d, lambda: c.lock_all(names, wait=0), expect))
            elif do == "acquire_all":
                members = [coordinator.Member(prefix + m["name"], m.get("capacity", 0), m.get("weight", 0))
                           for m in step["members"]]
                keep(step, await one_try(d, lambda: c.acquire_all(members, wait=0), expect or "granted"))
            elif do == "start_lock_all":
                names = [prefix + n for n in step["names"]]
                background[step["as"]] = d.start(c.lock_all, names, wait=60)
                end = time.monotonic() + 5
                while (await d.run(c.describe, names[0])).waiters == 0:
                    if background[step["as"]].done():
                        background[step["as"]].result()  # its error, if it failed
                        pytest.fail(f"{where}: the group was granted at once")
                    assert time.monotonic() < end, f"{where}: the group is not queued on {names[0]} after 5s"
                    await asyncio.sleep(0.02)
            elif do == "await":
                within = step["within_ms"] / 1000
                task = background.pop(step["as"])
                done, _ = await asyncio.wait({task}, timeout=within)
                assert done, f"{where}: {step['as']} not granted within {within:.1f}s"
                held[step["as"]] = task.result()
            elif do == "release":
                released = await d.run(held[step["lease"]].release)
                assert released is (expect == "released"), f"{where}: release returned {released}"
            elif do == "end_session":
                session = await d.run(c.default_session)
                await asyncio.to_thread(close_session, target, session.id)
            elif do == "expect_lost":
                lease = held[step["lease"]]
                within = step["within_ms"] / 1000
                assert await d.wait_lost(lease, within), f"{where}: {lease!r} not lost within {within:.1f}s"
                assert isinstance(lease.error, (coordinator.LeaseNotHeld, coordinator.LeaseExpired)), lease.error
                assert not lease.valid()
            elif do == "expect_held":
                lease = held[step["lease"]]
                assert lease.valid() and not lease.lost.is_set(), f"{where}: {lease!r} ({lease.error})"
            elif do == "expect_token":
                assert token_of(held, prefix, step["lease"]) > token_of(held, prefix, step["above"]), where
            elif do == "expect_same_session":
                ids = {held[n].session.id for n in step["leases"]}
                assert len(ids) == 1 and "" not in ids, f"{where}: sessions {ids}"
            elif do == "describe":
                desc = await d.run(c.describe if c else clients[next(iter(clients))].describe, name)
                assert len(desc.holders) == expect["holders"], f"{where}: {desc}"
                if "waiters" in expect:
                    assert desc.waiters == expect["waiters"], f"{where}: {desc}"
            elif do == "list":
                some = clients[next(iter(clients))]
                listed = await d.iterate(some.list_leases(prefix + step["prefix_of"]))
                assert len(listed) == expect["count"], f"{where}: {listed}"
            elif do == "campaign":
                keep(step, await d.run(c.campaign, name, value=step["value"], wait=10))
            elif do == "leader":
                info = await d.run(c.leader, name)
                if expect.get("vacant"):
                    assert info is None, f"{where}: {info}"
                else:
                    assert info is not None and info.value.decode() == expect["value"], f"{where}: {info}"
            elif do == "resign":
                await d.run(held[step["lease"]].resign)
            elif do == "close":
                await d.run(c.close)
            elif do == "classify":
                code = grpc.StatusCode[step["code"]]
                assert coordinator.is_transient(code) is expect["transient"], where
                assert coordinator.is_outcome_unknown(code) is expect["outcome_unknown"], where
                assert coordinator.RPCError("x", code=code).transient is expect["transient"], where
            elif do == "backoff":
                backoff = _util.call_backoff() if step["schedule"] == "retry" else _util.leader_backoff()
                for n, (lo, hi) in enumerate(step["expect_ms"][:step["attempts"]]):
                    delay = backoff.next() * 1000
                    assert lo - 1e-6 <= delay <= hi + 1e-6, f"{where}: attempt {n + 1}: {delay}ms"
            elif do == "leader_campaigns_again":
                assert _rules.LEADER_CAMPAIGNS_AGAIN is expect, where
                runner = await d.connect(None)
                clients["leader_campaigns_again"] = runner
                assert await d.leaderships(runner, prefix + "again", 2 if expect else 1) == (2 if expect else 1)
            else:
                pytest.fail(f"{where}: a step this interpreter does not know")
    finally:
        for client in clients.values():
            await d.run(client.close)
        for task in background.values():  # ended by the close
            done, _ = await asyncio.wait({task}, timeout=10)
            for t in done:
                t.exception()  # ClientClosed: retrieved, not logged as lost


@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_behaviour(server: Server, case: Dict[str, Any], driver: str) -> None:
    d = DRIVERS[driver](server.address)
    asyncio.run(run_case(d, server.address, case["steps"]))
