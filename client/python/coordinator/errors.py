"""The exceptions of the coordinator client.

Every error the coordinator returns is a gRPC status; the ones a program may
act on carry a ``google.rpc.ErrorInfo`` (domain ClientRules.error_domain, ``coordinator.v1``) whose
reason names an ``ErrorReason``, plus ``BadRequest``, ``RetryInfo`` or
``QuotaFailure`` details. :func:`from_rpc_error` decodes them into the
hierarchy below::

    CoordinatorError
    ├── LeaseNotHeld          FAILED_PRECONDITION / LEASE_NOT_HELD, LEASE_IN_SESSION
    │   └── SessionEnded          FAILED_PRECONDITION / SESSION_EXPIRED, SESSION_CLOSED,
    │                             SESSION_NOT_FOUND; a lease of a session that ended
    ├── CapacityMismatch      FAILED_PRECONDITION / CAPACITY_MISMATCH (.metadata)
    ├── InvalidField          INVALID_ARGUMENT / INVALID_FIELD (.field)
    ├── PermissionDenied      PERMISSION_DENIED (/ PERMISSION_DENIED)
    ├── Unauthenticated       UNAUTHENTICATED
    ├── Unavailable           UNAVAILABLE (transient: retry)
    │   ├── StoreUnavailable      STORE_UNAVAILABLE
    │   └── DataLossQuarantine    DATA_LOSS_QUARANTINE (.retry_after)
    ├── ResourceExhausted     RESOURCE_EXHAUSTED (a cap was reached)
    ├── RPCError              any other status (DEADLINE_EXCEEDED, INTERNAL…)
    ├── NotAcquired           not an RPC error: the name is held (.holder)
    ├── LeaseExpired          not an RPC error: no renewal succeeded in time
    └── ClientClosed          not an RPC error: the Client was closed
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import grpc

from ._gen import error_details_pb2, pb, status_pb2
from ._rules import ERROR_DOMAIN, OUTCOME_UNKNOWN_CODES, TRANSIENT_CODES

__all__ = [
    "CoordinatorError",
    "LeaseNotHeld",
    "SessionEnded",
    "CapacityMismatch",
    "InvalidField",
    "PermissionDenied",
    "Unauthenticated",
    "Unavailable",
    "StoreUnavailable",
    "DataLossQuarantine",
    "ResourceExhausted",
    "RPCError",
    "NotAcquired",
    "LeaseExpired",
    "ClientClosed",
    "from_rpc_error",
    "from_status",
    "is_transient",
    "is_outcome_unknown",
]

_DETAILS_KEY = "grpc-status-details-bin"

_CODES_BY_NUMBER: Dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def is_transient(code: Optional[grpc.StatusCode]) -> bool:
    """Whether a call that failed with code may succeed when tried again
    (ClientRules.transient_codes)."""
    return code in TRANSIENT_CODES


def is_outcome_unknown(code: Optional[grpc.StatusCode]) -> bool:
    """Whether a call that failed with code may have changed state on the
    coordinator without its caller hearing of it
    (ClientRules.outcome_unknown_codes)."""
    return code in OUTCOME_UNKNOWN_CODES


class CoordinatorError(Exception):
    """An error of the coordinator or of this client.

    Attributes:
        code: the gRPC status code, or None for errors of this client.
        message: what a person should read.
        reason: the ErrorInfo reason ("LEASE_NOT_HELD"…), or None.
        metadata: the ErrorInfo metadata (e.g. "name", "field", "retry_after").
        field: the invalid request field (ErrorInfo "field" or BadRequest), or None.
        retry_after: seconds to wait before retrying (RetryInfo or the
            "retry_after" metadata, in milliseconds on the wire), or None.
        violations: BadRequest field violations as (field, description).
        quota_violations: QuotaFailure violations as (subject, description).
    """

    def __init__(
        self,
        message: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        reason: Optional[str] = None,
        metadata: Optional[Dict[str, str]] = None,
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
        violations: Optional[List[Tuple[str, str]]] = None,
        quota_violations: Optional[List[Tuple[str, str]]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.field = field
        self.retry_after = retry_after
        self.violations: List[Tuple[str, str]] = list(violations or [])
        self.quota_violations: List[Tuple[str, str]] = list(quota_violations or [])

    @property
    def transient(self) -> bool:
        """Whether the same call may succeed when tried again."""
        return is_transient(self.code)

    def __str__(self) -> str:
        parts: List[str] = []
        if self.code is not None:
            parts.append(self.code.name)
        if self.reason:
            parts.append(self.reason)
        prefix = "/".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class LeaseNotHeld(CoordinatorError):
    """The lease expired or is held under another holder or token."""


class SessionEnded(LeaseNotHeld):
    """The session expired, was closed or is not known (any more): it and
    every lease attached to it are gone for good. A lease attached to a
    session that ended has it as its ``error`` too (``__cause__`` is the
    session's own error when the coordinator gave one);
    ``metadata["session_id"]`` names the session."""


class CapacityMismatch(CoordinatorError):
    """The request's capacity differs from the one the name has while it is
    held or awaited; ``metadata["capacity"]`` is the name's and
    ``metadata["requested"]`` the request's."""


class InvalidField(CoordinatorError, ValueError):
    """A request field breaks its rules; ``field`` names it."""


class PermissionDenied(CoordinatorError):
    """The name is outside the prefixes the credential may use."""


class Unauthenticated(CoordinatorError):
    """The call carried no credential the coordinator knows."""


class Unavailable(CoordinatorError):
    """The coordinator (or its store) could not serve the call: retry."""


class StoreUnavailable(Unavailable):
    """The store could not be reached or did not answer in time."""


class DataLossQuarantine(Unavailable):
    """The store lost its data recently; grants resume after ``retry_after``."""


class ResourceExhausted(CoordinatorError):
    """A cap of the coordinator was reached (see ``quota_violations``)."""


class RPCError(CoordinatorError):
    """Any other gRPC error."""


class NotAcquired(CoordinatorError):
    """A lock or leadership was not granted (in time).

    Attributes:
        name: the lock or election name.
        holder: who holds it, as the coordinator last said; None when it did
            not say (the name was free but older waiters came first).
        retry_after: seconds until the name can be granted at the earliest,
            when the coordinator knows.
        last_error: the last transient error met while waiting, if any.
    """

    def __init__(
        self,
        name: str,
        holder: Optional[str] = None,
        retry_after: Optional[float] = None,
        last_error: Optional[BaseException] = None,
    ) -> None:
        msg = f"{name!r} not acquired"
        if holder:
            msg += f": held by {holder}"
        if retry_after is not None:
            msg += f", retry after {retry_after:.3f}s"
        if last_error is not None:
            msg += f" (last error: {last_error})"
        super().__init__(msg, retry_after=retry_after)
        self.name = name
        self.holder = holder
        self.last_error = last_error


class LeaseExpired(CoordinatorError):
    """No renewal succeeded before the lease's validity ran out on this
    process's clock (the coordinator or its store was unreachable). The
    coordinator cannot have granted the name to anyone else yet."""


class ClientClosed(CoordinatorError):
    """The Client was closed."""


_BY_REASON = {
    pb.ErrorReason.Name(pb.LEASE_NOT_HELD): LeaseNotHeld,
    pb.ErrorReason.Name(pb.CAPACITY_MISMATCH): CapacityMismatch,
    pb.ErrorReason.Name(pb.LEASE_IN_SESSION): LeaseNotHeld,
    pb.ErrorReason.Name(pb.SESSION_NOT_FOUND): SessionEnded,
    pb.ErrorReason.Name(pb.SESSION_EXPIRED): SessionEnded,
    pb.ErrorReason.Name(pb.SESSION_CLOSED): SessionEnded,
    pb.ErrorReason.Name(pb.INVALID_FIELD): InvalidField,
    pb.ErrorReason.Name(pb.PERMISSION_DENIED): PermissionDenied,
    pb.ErrorReason.Name(pb.STORE_UNAVAILABLE): StoreUnavailable,
    pb.ErrorReason.Name(pb.DATA_LOSS_QUARANTINE): DataLossQuarantine,
}

_BY_CODE = {
    grpc.StatusCode.FAILED_PRECONDITION: RPCError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidField,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


def _class_for(code: Optional[grpc.StatusCode], reason: Optional[str]) -> type:
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated
    if reason and reason in _BY_REASON:
        return _BY_REASON[reason]
    if code is not None and code in _BY_CODE:
        return _BY_CODE[code]
    return RPCError


def _duration_seconds(d: Any) -> float:
    return d.seconds + d.nanos / 1e9


def _parse_details(raw: bytes) -> Dict[str, Any]:
    st = status_pb2.Status()
    try:
        st.ParseFromString(raw)
    except Exception:  # a malformed trailer must not hide the status itself
        return {"metadata": {}, "violations": [], "quota_violations": []}
    return _parse_status(st)


def _parse_status(st: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {"metadata": {}, "violations": [], "quota_violations": []}
    for anyd in st.details:
        info = error_details_pb2.ErrorInfo()
        bad = error_details_pb2.BadRequest()
        retry = error_details_pb2.RetryInfo()
        quota = error_details_pb2.QuotaFailure()
        if anyd.Is(info.DESCRIPTOR):
            anyd.Unpack(info)
            if info.domain == ERROR_DOMAIN or "reason" not in out:
                out["reason"] = info.reason or None
                out["metadata"].update(dict(info.metadata))
        elif anyd.Is(bad.DESCRIPTOR):
            anyd.Unpack(bad)
            out["violations"].extend((v.field, v.description) for v in bad.field_violations)
        elif anyd.Is(retry.DESCRIPTOR):
            anyd.Unpack(retry)
            out["retry_delay"] = _duration_seconds(retry.retry_delay)
        elif anyd.Is(quota.DESCRIPTOR):
            anyd.Unpack(quota)
            out["quota_violations"].extend((v.subject, v.description) for v in quota.violations)
    return out


def _make(cls: type, message: str, code: Optional[grpc.StatusCode], parsed: Dict[str, Any]) -> CoordinatorError:
    metadata: Dict[str, str] = parsed.get("metadata", {})
    field = metadata.get("field")
    if not field and parsed.get("violations"):
        field = parsed["violations"][0][0]
    retry_after = parsed.get("retry_delay")
    if retry_after is None and metadata.get("retry_after"):
        try:
            retry_after = int(metadata["retry_after"]) / 1000.0
        except ValueError:
            retry_after = None
    return cls(
        message,
        code=code,
        reason=parsed.get("reason"),
        metadata=metadata,
        field=field,
        retry_after=retry_after,
        violations=parsed.get("violations"),
        quota_violations=parsed.get("quota_violations"),
    )


def from_rpc_error(err: grpc.RpcError) -> CoordinatorError:
    """Decodes a gRPC error, with its status details, into a CoordinatorError."""
    code: Optional[grpc.StatusCode] = None
    message = str(err)
    trailing: Any = ()
    try:
        code = err.code()  # type: ignore[attr-defined]
        message = err.details() or ""  # type: ignore[attr-defined]
        trailing = err.trailing_metadata() or ()  # type: ignore[attr-defined]
    except Exception:  # not a grpc.Call: keep what str() says
        pass
    parsed: Dict[str, Any] = {"metadata": {}}
    for key, value in trailing:
        if key == _DETAILS_KEY and isinstance(value, (bytes, bytearray)):
            parsed = _parse_details(bytes(value))
            break
    exc = _make(_class_for(code, parsed.get("reason")), message, code, parsed)
    exc.__cause__ = err
    return exc


def from_status(st: Any) -> CoordinatorError:
    """Decodes a google.rpc.Status (an operation stream operation's error) into the
    CoordinatorError its unary call would have raised."""
    code = _CODES_BY_NUMBER.get(int(st.code)) if st.code else None
    parsed = _parse_status(st)
    return _make(_class_for(code, parsed.get("reason")), st.message or "", code, parsed)
