"""Every error reason of the coordinator, decoded into the exception classes."""

from __future__ import annotations

import grpc
import pytest

import coordinator
from conftest import call
from coordinator import pb
from coordinator._util import to_duration


def test_lease_not_held_on_renew_with_a_wrong_token(server, client: coordinator.Client, name: str) -> None:
    lease = client.lock(name, wait=0)
    req = pb.RenewRequest(name=name, holder=lease.holder, token=lease.token + 1, ttl=to_duration(5))
    with pytest.raises(coordinator.LeaseNotHeld) as ei:
        call(server.address, "Renew", req)
    e = ei.value
    assert e.code == grpc.StatusCode.FAILED_PRECONDITION
    assert e.reason == "LEASE_NOT_HELD"
    assert e.metadata.get("name") == name
    assert not e.transient
    lease.release()


def test_invalid_field_names_the_field(client: coordinator.Client) -> None:
    with pytest.raises(coordinator.InvalidField) as ei:
        client.lock("", wait=0)
    e = ei.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.reason == "INVALID_FIELD"
    assert e.field == "name"
    assert any(f == "name" for f, _ in e.violations)
    assert isinstance(e, ValueError)


def test_invalid_session_ttl(client: coordinator.Client) -> None:
    with pytest.raises(coordinator.InvalidField) as ei:
        client.session(ttl=0.01)
    assert ei.value.field == "ttl"


def test_invalid_name_is_not_retried_by_a_waiting_lock(client: coordinator.Client) -> None:
    with pytest.raises(coordinator.InvalidField):
        client.lock("a//b", wait=30)


def test_permission_denied_outside_the_prefixes(start_server, make_client, tmp_path) -> None:
    access = tmp_path / "access"
    access.write_text("# credential  prefixes\ntok-a  team-a/\nops-token  *\n")
    srv = start_server(env={"COORDINATOR_ACCESS_FILE": str(access)})
    c = make_client(srv.address, token="tok-a", insecure_token=True)
    with c.lock("team-a/job", wait=0) as lease:
        assert lease.token > 0
    with pytest.raises(coordinator.PermissionDenied) as ei:
        c.lock("team-b/job", wait=0)
    e = ei.value
    assert e.code == grpc.StatusCode.PERMISSION_DENIED
    assert e.reason == "PERMISSION_DENIED"
    assert e.metadata.get("name") == "team-b/job"
    with pytest.raises(coordinator.Unauthenticated):
        make_client(srv.address, token="nobody", insecure_token=True).describe("team-a/job")


def test_data_loss_quarantine(start_server, redis_server, make_client, name: str) -> None:
    # A fresh key prefix without COORDINATOR_REDIS_NEW_STORE looks like a
    # Redis that lost its data: grants wait for the quarantine.
    import conftest

    url = conftest.REDIS_URL or redis_server().url
    srv = start_server("redis", env={"COORDINATOR_REDIS_URL": url, "COORDINATOR_REDIS_NEW_STORE": None})
    c = make_client(srv.address)
    with pytest.raises(coordinator.DataLossQuarantine) as ei:
        c.lock(name, wait=0)
    e = ei.value
    assert isinstance(e, coordinator.Unavailable) and e.transient
    assert e.code == grpc.StatusCode.UNAVAILABLE
    assert e.reason == "DATA_LOSS_QUARANTINE"
    assert e.retry_after is not None and e.retry_after > 0
    # A waiting lock retries it (honouring retry_after) and gives up when its
    # wait is over, with the last error.
    with pytest.raises(coordinator.NotAcquired) as ei2:
        c.lock(name, wait=0.5)
    assert isinstance(ei2.value.last_error, coordinator.DataLossQuarantine)


def test_store_unavailable(start_server, redis_server, make_client, name: str) -> None:
    redis = redis_server()
    srv = start_server("redis", env={"COORDINATOR_REDIS_URL": redis.url, "COORDINATOR_STORE_TIMEOUT": "500ms"})
    c = make_client(srv.address, ttl=3)
    lease = c.lock(name + "/held", wait=0)
    redis.kill()
    with pytest.raises(coordinator.StoreUnavailable) as ei:
        c.lock(name, wait=0)
    e = ei.value
    assert e.code == grpc.StatusCode.UNAVAILABLE and e.reason == "STORE_UNAVAILABLE" and e.transient
    # The held lease's session cannot be renewed: its renewals fail (not
    # lost), and it ends on this client's clock before the coordinator's
    # expiry.
    assert lease.lost.wait(15)
    assert isinstance(lease.error, coordinator.LeaseExpired), lease.error
    assert lease.lost_at is not None and lease.lost_at <= lease.last_renewed + lease.ttl


def test_from_rpc_error_without_details() -> None:
    class Fake(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return "connection refused"

        def trailing_metadata(self):
            return ()

    e = coordinator.from_rpc_error(Fake())
    assert type(e) is coordinator.Unavailable and e.reason is None and e.transient
    assert "connection refused" in str(e)
