"""Elections against a real coordinator (every available store)."""

from __future__ import annotations

import threading
from typing import List

import pytest

import coordinator
from coordinator import EventKind, pb
from coordinator._util import to_duration
from conftest import call, close_session, wait_until


def test_campaign_and_leader(client: coordinator.Client, name: str) -> None:
    assert client.leader(name) is None
    with client.campaign(name, "addr-a", wait=0) as lead:
        assert lead.term > 0 and lead.value == b"addr-a"
        info = client.leader(name)
        assert info is not None
        assert (info.candidate, info.term, info.value) == (lead.candidate, lead.term, b"addr-a")
        assert info.expires_at is not None
    assert client.leader(name) is None


def test_refused_campaign_names_the_leader(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    lead = a.campaign(name, "a", wait=0)
    with pytest.raises(coordinator.NotAcquired) as ei:
        b.campaign(name, "b", wait=0)
    assert ei.value.holder == lead.candidate


def test_handover_on_resign(server, make_client, name: str) -> None:
    a, b = make_client(server.address), make_client(server.address)
    lead_a = a.campaign(name, "a", wait=0)
    got: List[coordinator.Leadership] = []
    t = threading.Thread(target=lambda: got.append(b.campaign(name, "b", wait=60)))
    t.start()
    wait_until(lambda: a.describe(name).waiters == 1, what="candidate b to queue")
    assert lead_a.resign() is True
    t.join(timeout=30)
    assert got, "b was not elected"
    lead_b = got[0]
    assert lead_b.term > lead_a.term
    info = a.leader(name)
    assert info is not None and info.candidate == lead_b.candidate and info.value == b"b"
    lead_b.resign()


def test_handover_when_the_leader_dies(server, make_client, name: str) -> None:
    # A leader whose process dies stops renewing: close_timeout=0 closes the
    # client without resigning, as a crash would.
    a = make_client(server.address, close_timeout=0, ttl=2)
    b = make_client(server.address)
    lead_a = a.campaign(name, "a", wait=0)
    got: List[coordinator.Leadership] = []
    t = threading.Thread(target=lambda: got.append(b.campaign(name, "b", wait=60)))
    t.start()
    wait_until(lambda: b.describe(name).waiters == 1, what="candidate b to queue")
    a.close()
    t.join(timeout=30)
    assert got, "b was not elected after a's term expired"
    assert got[0].term > lead_a.term
    assert b.leader(name).candidate == got[0].candidate


def test_proclaim_in_the_term(client: coordinator.Client, name: str) -> None:
    lead = client.campaign(name, "v1", wait=0)
    term = lead.term
    lead.proclaim("v2")
    assert lead.value == b"v2" and lead.term == term
    info = client.leader(name)
    assert (info.term, info.value) == (term, b"v2")
    lead.proclaim(b"\x00binary")
    assert client.leader(name).value == b"\x00binary"
    assert lead.resign()


def test_proclaim_after_the_term_ended_fails(server, client: coordinator.Client, name: str) -> None:
    lead = client.campaign(name, "v1", wait=0)
    # The term ends behind the leader's back (an operator resigns it).
    req = pb.ResignRequest(election=name, candidate=lead.candidate, term=lead.term)
    assert call(server.address, "Resign", req).resigned
    with pytest.raises(coordinator.LeaseNotHeld):
        lead.proclaim("v2")
    assert lead.lost.is_set()
    assert isinstance(lead.error, coordinator.LeaseNotHeld)
    # And no new term was started for it.
    assert client.leader(name) is None


def test_campaign_with_an_ended_term_is_refused(server, client: coordinator.Client, name: str) -> None:
    """The server side of proclaim: Campaign(term=T) only renews term T."""
    lead = client.campaign(name, "v1", wait=0)
    term, candidate = lead.term, lead.candidate
    assert lead.resign()
    req = pb.CampaignRequest(election=name, candidate=candidate, value=b"v2", ttl=to_duration(5), term=term)
    with pytest.raises(coordinator.LeaseNotHeld) as ei:
        call(server.address, "Campaign", req)
    assert ei.value.code.name == "FAILED_PRECONDITION"
    assert client.leader(name) is None


def test_observe(server, make_client, name: str) -> None:
    watcher, cand = make_client(server.address), make_client(server.address)
    with watcher.observe(name) as obs:
        ev = obs.get(timeout=15)
        assert ev.initial and ev.kind == EventKind.VACANT and ev.leader is None
        lead = cand.campaign(name, "one", wait=0)
        ev = obs.get(timeout=15)
        assert not ev.initial and ev.kind == EventKind.ELECTED
        assert (ev.leader.candidate, ev.leader.term, ev.leader.value) == (lead.candidate, lead.term, b"one")
        lead.proclaim("two")
        ev = obs.get(timeout=15)
        assert ev.kind == EventKind.PROCLAIMED and ev.leader.value == b"two" and ev.leader.term == lead.term

        # A second observer opening now starts with the sitting leader.
        with watcher.observe(name) as obs2:
            ev2 = obs2.get(timeout=15)
            assert ev2.initial and ev2.kind == EventKind.ELECTED and ev2.leader.value == b"two"

        lead.resign()
        ev = obs.get(timeout=15)
        assert ev.kind == EventKind.VACANT and ev.leader is None and not ev.initial
    with pytest.raises(StopIteration):
        obs.get(timeout=1)


def test_observe_iterates_and_closes(client: coordinator.Client, name: str) -> None:
    obs = client.observe(name)
    seen = []
    for ev in obs:
        seen.append(ev)
        obs.close()
    assert len(seen) == 1 and seen[0].initial


def test_observe_invalid_election(client: coordinator.Client) -> None:
    with client.observe("") as obs:
        with pytest.raises(coordinator.InvalidField):
            obs.get(timeout=15)


def test_run_as_leader_campaigns_again_after_each_leadership(server, make_client, name: str) -> None:
    client = make_client(server.address, ttl=1)
    stop = threading.Event()
    terms: List[int] = []

    def fn(lead: coordinator.Leadership) -> None:
        assert client.leader(name).candidate == lead.candidate
        terms.append(lead.term)
        if len(terms) == 1:  # the term ends behind its back: the session's next renewal finds out
            close_session(server.address, lead.session.id)
            assert lead.lost.wait(10)
        elif len(terms) == 2:
            raise RuntimeError("boom")  # logged; resigned; campaigns again after a backoff
        else:
            stop.set()

    client.run_as_leader(name, fn, value="me", stop=stop)
    assert len(terms) == 3 and terms == sorted(set(terms)), terms
    assert client.leader(name) is None  # resigned at the end


def test_run_as_leader_stops_while_it_campaigns(server, make_client, name: str) -> None:
    holder, runner = make_client(server.address), make_client(server.address)
    held = holder.campaign(name, "other", wait=0)
    stop = threading.Event()
    ran: List[coordinator.Leadership] = []
    t = threading.Thread(target=runner.run_as_leader, args=(name, ran.append), kwargs={"stop": stop})
    t.start()
    wait_until(lambda: holder.describe(name).waiters == 1, what="the campaign to queue")
    stop.set()
    t.join(timeout=10)
    assert not t.is_alive() and not ran
    wait_until(lambda: holder.describe(name).waiters == 0, timeout=10, what="the campaign to leave the queue")
    # Closing the Client ends it too, as an error (Go's RunAsLeader returns ErrClosed).
    outcome: List[BaseException] = []

    def run() -> None:
        try:
            runner.run_as_leader(name, ran.append)
        except BaseException as e:  # asserted below
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: holder.describe(name).waiters == 1, what="the campaign to queue again")
    runner.close()
    t.join(timeout=10)
    assert not t.is_alive() and not ran and isinstance(outcome[0], coordinator.ClientClosed), outcome
    assert held.resign()
