"""Sessions in the sync Client: one renewal keeps every attached lease and
leadership, they end together (closed, lost, expired, the Client closed),
the default session, and the credential a session belongs to."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent import futures
from typing import Callable, List

import grpc
import pytest

import coordinator
from coordinator import pb
from conftest import STORES, Server, call, close_session, metric, wait_until


def _renewals(srv: Server, op: str) -> float:
    """How many operations ``op`` ("renew_session", "renew") the coordinator
    answered OK over the operation stream."""
    port: int = srv.metrics_port  # type: ignore[attr-defined]
    return metric(port, "coordinator_stream_operations_total", op=op, code="OK")


def _in_thread(fn: Callable[[], object]) -> "futures.Future[object]":
    f: "futures.Future[object]" = futures.Future()

    def run() -> None:
        try:
            f.set_result(fn())
        except BaseException as e:  # handed to the test's thread
            f.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return f


@pytest.mark.parametrize("store", STORES)
def test_one_renewal_keeps_every_attached_lease(metrics_server, make_client, name: str, store: str) -> None:
    srv = metrics_server(store)
    c = make_client(srv.address)
    session = c.session(ttl=1)
    assert session.id and session.ttl == 1 and session.valid() and not session.lost.is_set()
    grants = [c.lock(f"{name}/lock/{i}", session=session, wait=0) for i in range(3)]
    grants.append(c.semaphore(f"{name}/sem", 3).acquire(2, session=session, wait=0))
    grants.append(c.rwlock(f"{name}/rw").read_lock(session=session, wait=0))
    grants.append(c.campaign(f"{name}/election", value="me", session=session, wait=0))
    assert all(g.session is session and g.ttl == 1 for g in grants)
    assert set(session.leases) == set(grants)
    for g in grants[:3]:
        d = c.describe(g.name)
        assert d.lease is not None and d.lease.session_id == session.id and d.lease.token == g.token
    before = _renewals(srv, "renew_session")
    # Several TTLs pass: the session's renewals alone keep the six grants.
    wait_until(lambda: _renewals(srv, "renew_session") >= before + 6, timeout=30, what="six session renewals")
    assert _renewals(srv, "renew") == 0, "a grant was renewed on its own"
    for g in grants:
        assert g.valid() and not g.lost.is_set(), g
        assert g.deadline == session.deadline
    for g in grants[:3]:
        assert c.describe(g.name).lease.token == g.token
    # Releasing one is the usual release: the session goes on with the others.
    assert grants[0].release()
    assert not c.describe(grants[0].name).held and session.valid()
    assert grants[0] not in session.leases and len(session.leases) == 5
    session.close()
    assert session.ended.is_set() and not session.lost.is_set() and session.error is None


@pytest.mark.parametrize("store", STORES)
def test_closing_a_session_releases_every_lease_at_once(start_server, make_client, name: str, store: str) -> None:
    srv = start_server(store)
    a, b = make_client(srv.address), make_client(srv.address)
    with a.session(ttl=30) as session:
        leases = [a.lock(f"{name}/{i}", session=session, wait=0) for i in range(3)]
        waiter = _in_thread(lambda: b.lock(f"{name}/0", wait=60))
        wait_until(lambda: a.describe(f"{name}/0").waiters == 1, what="the waiter to queue")
        lost: List[object] = []
        leases[1].on_lost(lost.append)
        closed = time.monotonic()
    # The waiter is granted at once, not after the session's 30s.
    granted = waiter.result(timeout=15)
    assert time.monotonic() - closed < 15
    assert granted.token > leases[0].token
    for lease in leases:
        assert lease.lost.is_set() and not lease.valid()
        assert isinstance(lease.error, coordinator.SessionEnded) and lease.error.reason == "SESSION_CLOSED"
    wait_until(lambda: lost == [leases[1]], timeout=5, what="the on_lost callback")
    assert not a.describe(f"{name}/1").held and not a.describe(f"{name}/2").held
    with pytest.raises(coordinator.SessionEnded):  # a closed session takes no more
        a.lock(f"{name}/3", session=session, wait=0)
    session.close()  # idempotent


def test_a_session_closed_by_another_client_loses_its_leases(start_server, make_client, name: str) -> None:
    srv = start_server(env={"COORDINATOR_AUTH_TOKEN": "secret"})
    a = make_client(srv.address, token="secret", insecure_token=True)
    session = a.session(ttl=1)
    leases = [a.lock(f"{name}/{i}", session=session, wait=0) for i in range(2)]
    leadership = a.campaign(f"{name}/election", session=session, wait=0)
    close_session(srv.address, session.id, token="secret")  # another client of the same credential
    # The next renewal is refused: the session and all its grants are lost.
    assert session.lost.wait(10), "the session was not lost"
    assert isinstance(session.error, coordinator.SessionEnded)
    assert session.error.reason in ("SESSION_CLOSED", "SESSION_NOT_FOUND")
    for g in leases + [leadership]:
        assert g.lost.is_set() and isinstance(g.error, coordinator.SessionEnded), g
        assert session.id in str(g.error) and g.error.__cause__ is session.error
    assert not a.describe(f"{name}/0").held


@pytest.mark.parametrize("store", STORES)
def test_a_session_expires_at_its_local_deadline_when_renewals_stall(start_server, make_client, name: str,
                                                                     store: str) -> None:
    srv = start_server(store)
    c = make_client(srv.address, close_timeout=1)
    session = c.session(ttl=1)
    leases = [c.lock(f"{name}/{i}", session=session, wait=0) for i in range(3)]
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGSTOP)  # nothing answers from now on
    try:
        assert session.lost.wait(10), "the session did not expire"
        deadline = session.deadline
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
    assert session.lost_at is not None and deadline <= session.lost_at < deadline + 1.0
    assert isinstance(session.error, coordinator.LeaseExpired)
    for lease in leases:
        assert lease.lost.is_set() and isinstance(lease.error, coordinator.LeaseExpired), lease
        assert lease.lost_at is not None and lease.lost_at <= session.lost_at + 0.5


def test_a_campaign_in_a_session(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    session = a.session(ttl=20)
    lead = a.campaign(name, value="a", session=session, wait=0)
    assert lead.session is session
    lead.proclaim("a, again")  # the proclamation keeps the leadership in the session
    assert a.describe(name).lease.session_id == session.id
    assert a.leader(name).value == b"a, again" and lead.valid()
    with b.observe(name) as events:
        assert events.get(timeout=10).initial
        successor = _in_thread(lambda: b.campaign(name, value="b", wait=60))
        wait_until(lambda: a.describe(name).waiters == 1, what="the second candidate to queue")
        session.close()
        kinds = [events.get(timeout=10).kind for _ in range(2)]
    assert kinds == [coordinator.EventKind.VACANT, coordinator.EventKind.ELECTED]
    assert lead.lost.is_set() and isinstance(lead.error, coordinator.SessionEnded)
    assert successor.result(timeout=10).term > lead.term


def test_the_default_session_is_made_by_the_first_acquisition(metrics_server, make_client, name: str) -> None:
    srv = metrics_server()
    port = srv.metrics_port

    def created() -> float:
        return metric(port, "grpc_server_handled_total", grpc_method="CreateSession", grpc_code="OK")

    c = make_client(srv.address, ttl=2)
    c.describe(name)
    c.leader(name)
    list(c.list_leases(name))
    assert created() == 0  # observing makes none
    first = c.lock(f"{name}/a", wait=0)
    second = c.campaign(f"{name}/b", wait=0)
    share = c.semaphore(f"{name}/c", 2).try_acquire()
    assert share is not None
    session = c.default_session()
    assert first.session is session and second.session is session and share.session is session
    assert session.ttl == 2 and first.ttl == 2 and created() == 1
    # A lost default session ends its grants; the next acquisition makes a new one.
    close_session(srv.address, session.id)
    assert session.lost.wait(10) and first.lost.is_set() and second.lost.is_set()
    again = c.lock(f"{name}/a", wait=0)
    assert again.session is c.default_session() and again.session is not session
    assert created() == 2 and again.token > first.token
    # The Client's close closes the default session, releasing its grants.
    waiter = make_client(srv.address)
    granted = _in_thread(lambda: waiter.lock(f"{name}/a", wait=60))
    wait_until(lambda: waiter.describe(f"{name}/a").waiters == 1, what="the waiter to queue")
    c.close()
    assert again.lost.is_set() and isinstance(again.error, coordinator.ClientClosed)
    assert granted.result(timeout=10).token > again.token
    assert metric(port, "grpc_server_handled_total", grpc_method="CloseSession", grpc_code="OK") == 2


def test_another_credential_may_not_use_a_session(start_server, make_client, tmp_path, name: str) -> None:
    access = tmp_path / "access"
    access.write_text("tok-a  *\ntok-b  *\n")
    srv = start_server(env={"COORDINATOR_ACCESS_FILE": str(access)})
    a = make_client(srv.address, token="tok-a", insecure_token=True)
    b = make_client(srv.address, token="tok-b", insecure_token=True)
    session = a.session(ttl=10)
    held = a.lock(f"{name}/a", session=session, wait=0)
    with pytest.raises(ValueError):  # a Session belongs to the Client that made it
        b.lock(f"{name}/b", session=session, wait=0)
    # Nor does the coordinator let another credential use it.
    req = pb.TryAcquireRequest(name=f"{name}/b", holder="b", session_id=session.id)
    req.ttl.FromSeconds(10)
    for method, req in [("TryAcquire", req), ("RenewSession", pb.RenewSessionRequest(session_id=session.id)),
                        ("CloseSession", pb.CloseSessionRequest(session_id=session.id))]:
        with pytest.raises(coordinator.PermissionDenied) as ei:
            call(srv.address, method, req, token="tok-b")
        assert ei.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert not b.describe(f"{name}/b").held
    assert session.valid() and held.valid() and a.describe(f"{name}/a").lease.session_id == session.id


def test_acquiring_again_in_the_session_returns_the_same_lease(server, make_client, name: str) -> None:
    c = make_client(server.address)
    session = c.session(ttl=10)
    lease = c.lock(name, session=session, wait=0)
    # The answer was lost, say: the same holder asks again in the session.
    req = pb.TryAcquireRequest(name=name, holder=lease.holder, session_id=session.id)
    req.ttl.FromSeconds(10)
    resp = call(server.address, "TryAcquire", req)
    assert resp.acquired and resp.lease.token == lease.token and resp.lease.session_id == session.id
    assert lease.release()


def test_an_acquisition_told_the_default_session_ended_makes_a_new_one(server, make_client, name: str) -> None:
    c = make_client(server.address, ttl=30)  # renewals every 10s: the next acquisition hears of it first
    first = c.lock(f"{name}/a", wait=0)
    old = c.default_session()
    close_session(server.address, old.id)
    second = c.lock(f"{name}/b", wait=0)
    assert second.session is c.default_session() and second.session is not old
    assert old.lost.is_set() and isinstance(old.error, coordinator.SessionEnded)
    assert first.lost.is_set() and isinstance(first.error, coordinator.SessionEnded)
    assert c.describe(f"{name}/b").lease.session_id == second.session.id
