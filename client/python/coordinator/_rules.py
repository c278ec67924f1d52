"""The timings and limits this client shares with the Go SDK and the
TypeScript client, read from the proto, the one source all three read: the
Coordinator service's ``(coordinator.v1.client_rules)`` option (rules.proto)
gives the timings, the ``FieldRules`` of the request fields the request
limits, and the ``ErrorReason`` values marked ``(coordinator.v1.ends_lease)``
the reasons that end a lease. tests/test_rules.py compares what the client
does with them.

Durations are in seconds, as everywhere in this client; status codes are
``grpc.StatusCode`` values (the proto's google.rpc.Code numbers are their
``value[0]``).
"""

from __future__ import annotations

from typing import Any, FrozenSet, Iterable

import grpc

from ._gen import pb, rules_pb2


def _client_rules() -> Any:
    opts = pb.DESCRIPTOR.services_by_name["Coordinator"].GetOptions()
    if not opts.HasExtension(rules_pb2.client_rules):
        raise ImportError("coordinator: coordinator.v1.Coordinator has no (coordinator.v1.client_rules) option")
    return opts.Extensions[rules_pb2.client_rules]


def field_rules(message: Any, field: str) -> Any:
    """The ``(coordinator.v1.rules)`` of a request message's field."""
    opts = message.DESCRIPTOR.fields_by_name[field].GetOptions()
    if not opts.HasExtension(rules_pb2.rules):
        raise ImportError(f"coordinator: {message.DESCRIPTOR.full_name}.{field} has no (coordinator.v1.rules) option")
    return opts.Extensions[rules_pb2.rules]


def _status_codes(numbers: Iterable[int]) -> FrozenSet[grpc.StatusCode]:
    by_number = {c.value[0]: c for c in grpc.StatusCode}
    return frozenset(by_number[n] for n in numbers)


def _lease_ending_reasons() -> FrozenSet[str]:
    values = pb.ErrorReason.DESCRIPTOR.values
    return frozenset(v.name for v in values if v.GetOptions().Extensions[rules_pb2.ends_lease])


#: The Coordinator service's ClientRules.
RULES = _client_rules()

#: The lease TTL when neither the Client nor the call says (15 s).
DEFAULT_TTL: float = RULES.default_ttl_millis / 1000
#: How long close() spends releasing what is still held (2 s).
CLOSE_TIMEOUT: float = RULES.close_timeout_millis / 1000
#: Identities leave room in a holder for the per-acquisition suffix (100 bytes).
MAX_IDENTITY_BYTES: int = field_rules(pb.TryAcquireRequest, "holder").max_bytes - RULES.holder_suffix_bytes
#: The longest wait the coordinator accepts in one call (5 min).
MAX_WAIT: float = field_rules(pb.TryAcquireRequest, "wait").max_millis / 1000
#: How long before the caller's deadline a wait asks the coordinator to
#: answer, so that its not-acquired answer (naming the holder) arrives in time.
ANSWER_MARGIN: float = RULES.answer_margin_millis / 1000

#: Retries of a call or a stream: from RETRY_MIN, doubling, at most RETRY_MAX.
RETRY_MIN: float = RULES.retry_min_millis / 1000
RETRY_MAX: float = RULES.retry_max_millis / 1000
#: The fraction by which every retry delay moves up or down (±20%).
RETRY_JITTER: float = RULES.retry_jitter_percent / 100

#: A lease is renewed every ttl / RENEWALS_PER_TTL...
RENEWALS_PER_TTL: int = RULES.renewals_per_ttl
#: ...moved up or down by this fraction (±10%).
RENEWAL_JITTER: float = RULES.renewal_jitter_percent / 100
#: A failed renewal is retried from this fraction of the TTL, doubling, at
#: most RENEWAL_RETRY_MAX of it, never below RENEWAL_RETRY_FLOOR seconds.
RENEWAL_RETRY_MIN: float = RULES.renewal_retry_min_percent / 100
RENEWAL_RETRY_MAX: float = RULES.renewal_retry_max_percent / 100
RENEWAL_RETRY_FLOOR: float = RULES.renewal_retry_floor_millis / 1000

#: The margin kept from a lease's validity: this fraction of the TTL, at
#: least VALIDITY_MARGIN_MIN seconds, at most VALIDITY_MARGIN_MAX of the TTL.
VALIDITY_MARGIN: float = RULES.validity_margin_percent / 100
VALIDITY_MARGIN_MIN: float = RULES.validity_margin_min_millis / 1000
VALIDITY_MARGIN_MAX: float = RULES.validity_margin_max_percent / 100

#: The ErrorReason names that end a lease: a renewal refused with one of
#: them means the lease is gone for good.
LEASE_ENDING_REASONS: FrozenSet[str] = _lease_ending_reasons()
#: The ErrorInfo reason of a lease that is not held (any more).
LEASE_NOT_HELD: str = pb.ErrorReason.Name(pb.LEASE_NOT_HELD)

#: Running as leader, a function that returned within LEADER_EARLY_RETURN of
#: its election campaigns again after a backoff from LEADER_RETRY_MIN,
#: doubling, at most LEADER_RETRY_MAX.
LEADER_EARLY_RETURN: float = RULES.leader_early_return_millis / 1000
LEADER_RETRY_MIN: float = RULES.leader_retry_min_millis / 1000
LEADER_RETRY_MAX: float = RULES.leader_retry_max_millis / 1000
#: Whether running as leader campaigns again each time a leadership ends.
LEADER_CAMPAIGNS_AGAIN: bool = RULES.leader_campaigns_again

#: The codes after which the same call (or stream operation) may succeed
#: when tried again.
TRANSIENT_CODES: FrozenSet[grpc.StatusCode] = _status_codes(RULES.transient_codes)
#: The codes after which a call may have changed state on the coordinator
#: without its caller hearing of it.
OUTCOME_UNKNOWN_CODES: FrozenSet[grpc.StatusCode] = _status_codes(RULES.outcome_unknown_codes)
#: The google.rpc.ErrorInfo domain of the coordinator's errors.
ERROR_DOMAIN: str = RULES.error_domain
