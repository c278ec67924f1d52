"""Sessions in coordinator.aio: the sync Client's (tests/test_sessions.py)
on the event loop, renewed with unary RenewSession calls."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

import coordinator
import coordinator.aio
from coordinator import pb
from conftest import STORES, Server, metric
from test_aio import aio_client, eventually, waiters

pytestmark = pytest.mark.asyncio


def _handled(srv: Server, method: str) -> float:
    return metric(srv.metrics_port, "grpc_server_handled_total", grpc_method=method, grpc_code="OK")  # type: ignore[attr-defined]


@pytest.mark.parametrize("store", STORES)
async def test_one_renewal_keeps_every_attached_lease(metrics_server, name: str, store: str) -> None:
    srv = metrics_server(store)
    async with aio_client(srv.address) as c:
        session = await c.session(ttl=1)
        assert isinstance(session, coordinator.aio.Session) and isinstance(session.lost, asyncio.Event)
        grants = [await c.lock(f"{name}/lock/{i}", session=session, wait=0) for i in range(3)]
        grants.append(await c.semaphore(f"{name}/sem", 3).acquire(2, session=session, wait=0))
        grants.append(await c.rwlock(f"{name}/rw").write_lock(session=session, wait=0))
        grants.append(await c.campaign(f"{name}/election", value="me", session=session, wait=0))
        assert all(g.session is session for g in grants) and set(session.leases) == set(grants)
        assert (await c.describe(f"{name}/lock/0")).lease.session_id == session.id
        before = _handled(srv, "RenewSession")
        await eventually(lambda: _handled(srv, "RenewSession") >= before + 6, timeout=30, what="six session renewals")
        assert _handled(srv, "Renew") == 0, "an attached grant was renewed on its own"
        for g in grants:
            assert g.valid() and not g.lost.is_set() and g.deadline == session.deadline, g
        assert await grants[0].release()  # one alone; the session goes on
        assert session.valid() and len(session.leases) == 5
        await session.close()
        assert all(g.lost.is_set() and isinstance(g.error, coordinator.SessionEnded) for g in grants[1:])
        assert session.ended.is_set() and not session.lost.is_set()


async def test_closing_a_session_releases_every_lease_at_once(server: Server, name: str) -> None:
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        async with await a.session(ttl=30) as session:
            leases = [await a.lock(f"{name}/{i}", session=session, wait=0) for i in range(3)]
            waiter = asyncio.ensure_future(b.lock(f"{name}/0", ttl=5, wait=60))
            await eventually(lambda: waiters(a, f"{name}/0"), what="the waiter to queue")
            closed = time.monotonic()
        granted = await asyncio.wait_for(waiter, 15)
        assert time.monotonic() - closed < 15 and granted.token > leases[0].token
        for lease in leases:
            assert lease.lost.is_set() and lease.error.reason == "SESSION_CLOSED"
        assert not (await a.describe(f"{name}/2")).held
        with pytest.raises(coordinator.SessionEnded):
            await a.lock(f"{name}/3", session=session, wait=0)
        await granted.release()


async def test_a_session_closed_by_another_client_loses_its_leases(start_server, name: str) -> None:
    srv = start_server(env={"COORDINATOR_AUTH_TOKEN": "secret"})
    async with aio_client(srv.address, token="secret", insecure_token=True) as a, \
            aio_client(srv.address, token="secret", insecure_token=True) as other:
        session = await a.session(ttl=1)
        lease = await a.lock(f"{name}/a", session=session, wait=0)
        lead = await a.campaign(f"{name}/b", session=session, wait=0)
        await other.call("CloseSession", pb.CloseSessionRequest(session_id=session.id))
        await asyncio.wait_for(session.lost.wait(), 10)
        assert isinstance(session.error, coordinator.SessionEnded)
        for g in (lease, lead):
            assert g.lost.is_set() and isinstance(g.error, coordinator.SessionEnded) and g.error.__cause__ is session.error


async def test_a_session_expires_at_its_local_deadline_when_renewals_stall(start_server, name: str) -> None:
    srv = start_server()
    async with aio_client(srv.address, close_timeout=1) as c:
        session = await c.session(ttl=1)
        leases = [await c.lock(f"{name}/{i}", session=session, wait=0) for i in range(2)]
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(session.lost.wait(), 10)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        assert session.deadline <= session.lost_at < session.deadline + 1.0
        assert isinstance(session.error, coordinator.LeaseExpired)
        assert all(isinstance(l.error, coordinator.LeaseExpired) and l.lost.is_set() for l in leases)


async def test_a_campaign_in_a_session(server: Server, name: str) -> None:
    async with aio_client(server.address) as a, aio_client(server.address) as b:
        session = await a.session(ttl=20)
        lead = await a.campaign(name, value="a", session=session, wait=0)
        await lead.proclaim("a, again")
        assert (await a.describe(name)).lease.session_id == session.id and lead.valid()
        successor = asyncio.ensure_future(b.campaign(name, value="b", ttl=5, wait=60))
        await eventually(lambda: waiters(a, name), what="the second candidate to queue")
        await session.close()
        assert (await asyncio.wait_for(successor, 10)).term > lead.term
        assert lead.lost.is_set() and isinstance(lead.error, coordinator.SessionEnded)


async def test_the_default_session_is_made_by_the_first_acquisition(metrics_server, name: str) -> None:
    srv = metrics_server()
    async with aio_client(srv.address, ttl=2) as c:
        await c.describe(name)
        await c.leader(name)
        assert c._default is None and _handled(srv, "CreateSession") == 0
        first = await c.lock(f"{name}/a", wait=0)
        lead = await c.campaign(f"{name}/b", wait=0)
        session = await c.default_session()
        assert first.session is session and lead.session is session and session.ttl == 2
        own = await c.lock(f"{name}/own", ttl=1, wait=0)  # a per-call ttl: a lease of its own
        assert own.session is None and (await c.describe(own.name)).lease.session_id == ""
        renewed = own.last_renewed
        await eventually(lambda: own.last_renewed > renewed, timeout=10, what="the own lease's renewal")
        assert _handled(srv, "CreateSession") == 1
        await c.call("CloseSession", pb.CloseSessionRequest(session_id=session.id))
        await asyncio.wait_for(session.lost.wait(), 10)
        assert first.lost.is_set() and lead.lost.is_set()
        again = await c.lock(f"{name}/a", wait=0)
        assert again.session is not session and again.session is await c.default_session()
        async with aio_client(srv.address) as w:
            waiter = asyncio.ensure_future(w.lock(f"{name}/a", ttl=5, wait=60))
            await eventually(lambda: waiters(w, f"{name}/a"), what="the waiter to queue")
            await c.close()  # closes the default session: its leases go at once
            assert isinstance(again.error, coordinator.ClientClosed)
            assert (await asyncio.wait_for(waiter, 10)).token > again.token
    async with aio_client(srv.address, default_session=False, ttl=5) as off:
        lease = await off.lock(f"{name}/off", wait=0)
        assert lease.session is None and lease.ttl == 5
        with pytest.raises(ValueError):
            await off.default_session()


async def test_another_credential_may_not_use_a_session(start_server, tmp_path, name: str) -> None:
    access = tmp_path / "access"
    access.write_text("tok-a  *\ntok-b  *\n")
    srv = start_server(env={"COORDINATOR_ACCESS_FILE": str(access)})
    async with aio_client(srv.address, token="tok-a", insecure_token=True) as a, \
            aio_client(srv.address, token="tok-b", insecure_token=True) as b:
        session = await a.session(ttl=10)
        with pytest.raises(coordinator.PermissionDenied):
            await b.lock(f"{name}/b", session=session, wait=0)
        with pytest.raises(coordinator.PermissionDenied):
            await b.call("RenewSession", pb.RenewSessionRequest(session_id=session.id))
        assert session.valid()


async def test_an_acquisition_told_the_default_session_ended_makes_a_new_one(server: Server, name: str) -> None:
    async with aio_client(server.address, ttl=30) as c:
        first = await c.lock(f"{name}/a", wait=0)
        old = await c.default_session()
        await c.call("CloseSession", pb.CloseSessionRequest(session_id=old.id))
        second = await c.lock(f"{name}/b", wait=0)
        assert second.session is await c.default_session() and second.session is not old
        assert old.lost.is_set() and isinstance(first.error, coordinator.SessionEnded)
