"""The proto is the one source of what the three clients share: these tests
hold this client to it, so that a value copied by hand again (and drifting)
fails here. The Go SDK and the TypeScript client have the same tests."""

from __future__ import annotations

import threading
from typing import Any, Callable

import grpc
import pytest

import coordinator
from coordinator import _rules, _util
from coordinator._gen import pb, rules_pb2
from coordinator._state import SessionState


def spec_rules() -> Any:
    """The Coordinator service's ClientRules, read as any client of the proto would."""
    return pb.DESCRIPTOR.services_by_name["Coordinator"].GetOptions().Extensions[rules_pb2.client_rules]


def spec_field_rules(message: Any, field: str) -> Any:
    return message.DESCRIPTOR.fields_by_name[field].GetOptions().Extensions[rules_pb2.rules]


def test_every_client_rule_is_set() -> None:
    rules = spec_rules()
    for field in rules.DESCRIPTOR.fields:
        assert rules.HasField(field.name) if field.has_presence else getattr(rules, field.name) != 0, (
            f"the (client_rules) option of coordinator.v1.Coordinator does not set {field.name}"
        )


def test_the_client_takes_its_limits_and_timings_from_the_proto() -> None:
    r = spec_rules()
    holder = spec_field_rules(pb.TryAcquireRequest, "holder")
    wait = spec_field_rules(pb.TryAcquireRequest, "wait")
    client = coordinator.Client("127.0.0.1:1")  # connects lazily: never here
    try:
        assert coordinator.DEFAULT_TTL == r.default_ttl_millis / 1000
        assert client.ttl == r.default_ttl_millis / 1000
        assert client.close_timeout == r.close_timeout_millis / 1000
    finally:
        client.close()
    assert _rules.MAX_WAIT == wait.max_millis / 1000
    assert _rules.ANSWER_MARGIN == r.answer_margin_millis / 1000
    assert _rules.ERROR_DOMAIN == r.error_domain == "coordinator.v1"
    assert _rules.LEADER_CAMPAIGNS_AGAIN == r.leader_campaigns_again
    codes = {c.value[0]: c for c in grpc.StatusCode}
    assert _rules.TRANSIENT_CODES == {codes[n] for n in r.transient_codes}
    assert _rules.OUTCOME_UNKNOWN_CODES == {codes[n] for n in r.outcome_unknown_codes}

    # The identity limit, as Client applies it.
    limit = holder.max_bytes - r.holder_suffix_bytes
    coordinator.Client("127.0.0.1:1", holder="a" * limit).close()
    with pytest.raises(ValueError):
        coordinator.Client("127.0.0.1:1", holder="a" * (limit + 1))

    # The validity margin, at TTLs where each of its bounds applies.
    for ttl in (0.06, 0.2, 15.0):
        want = min(max(ttl * r.validity_margin_percent / 100, r.validity_margin_min_millis / 1000),
                   ttl * r.validity_margin_max_percent / 100)
        assert _util.drift_margin(ttl) == pytest.approx(want), f"drift_margin({ttl})"


def _last(b: _util.Backoff) -> float:
    for _ in range(29):
        b.next()
    return b.next()


def _renewal_delay(ttl: float) -> float:
    """When a session renewed at 0 is renewed next (no thread is started)."""
    s = SessionState("id", ttl, 0.0, lambda _id, _t: (None, 0.0), lambda _s: None, threading.Event)
    return s.next_renew


@pytest.mark.parametrize("what", ["first call retry", "last call retry", "first renewal retry", "last renewal retry",
                                  "renewal"])
def test_the_clients_delays_spread_as_the_proto_says(what: str) -> None:
    """Every delay lies within the proto's jitter of its nominal value (and at
    most at the maximum, for a backoff's last delays), and together the first
    delays reach past half of it, so that a narrower jitter fails too."""
    r = spec_rules()
    ttl = 9.0
    retry = r.retry_jitter_percent / 100
    floor = r.renewal_retry_floor_millis / 1000
    cases: dict = {
        "first call retry": (r.retry_min_millis / 1000, retry, False, lambda: _util.call_backoff().next()),
        "last call retry": (r.retry_max_millis / 1000, retry, True, lambda: _last(_util.call_backoff())),
        "first renewal retry": (max(ttl * r.renewal_retry_min_percent / 100, floor), retry, False,
                                lambda: _util.renewal_backoff(ttl).next()),
        "last renewal retry": (max(ttl * r.renewal_retry_max_percent / 100, floor), retry, True,
                               lambda: _last(_util.renewal_backoff(ttl))),
        "renewal": (ttl / r.renewals_per_ttl, r.renewal_jitter_percent / 100, False, lambda: _renewal_delay(ttl)),
    }
    nominal, jitter, capped, sample = cases[what]
    sample_fn: Callable[[], float] = sample
    delays = [sample_fn() for _ in range(2000)]
    lo, hi = min(delays), max(delays)
    spread = nominal * jitter
    assert nominal - spread - 1e-9 <= lo and hi <= nominal + spread + 1e-9, (
        f"{what}: delays from {lo} to {hi}; the proto allows {nominal} ± {jitter:.0%}")
    if capped:
        assert hi <= nominal, f"{what}: delays up to {hi}, past the maximum {nominal}"
    else:
        assert max(nominal - lo, hi - nominal) >= spread / 2, (
            f"{what}: delays from {lo} to {hi}; the proto spreads {nominal} by ± {jitter:.0%}")


def test_the_reasons_that_end_a_lease_are_the_protos_ends_lease() -> None:
    want = {v.name for v in pb.ErrorReason.DESCRIPTOR.values if v.GetOptions().Extensions[rules_pb2.ends_lease]}
    assert want, "no ErrorReason is marked (coordinator.v1.ends_lease)"
    assert _rules.LEASE_ENDING_REASONS == want
