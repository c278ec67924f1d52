"""Python client of the coordinator: locks, semaphores, read-write locks and
leader elections as leases that renew themselves.

    import coordinator

    with coordinator.Client("127.0.0.1:7400") as client:
        with client.lock("reports/nightly", ttl=10, wait=30) as lease:
            work(lease.token)          # check lease.valid() / lease.lost while working
        with client.semaphore("db/migrations", 5).acquire(2, wait=30) as share:
            migrate(share.token)       # at most 5 weight held at once
        with client.rwlock("config").read_lock(wait=30) as reader:
            read(reader.token)         # writers: .write_lock()

A held Lease or Leadership renews itself in the background about every
ttl/3, as renew operations on the Client's one operation stream (or, with
use_stream=False, over one KeepAlive stream shared by all its grants). Its
validity is counted on this process's monotonic clock from when the request
that granted or renewed it was sent, minus a margin of max(ttl/10, 50ms):
when no renewal succeeds in time, ``lost`` is set at that local deadline,
before the coordinator could grant the name to anyone else. A renewal the
coordinator refuses sets it at once.

Acquisitions and campaigns without a ``ttl`` attach to the Client's default
session instead (``client.default_session()``), and those given
``session=client.session(ttl=...)`` to that one: a Session is renewed so,
once for all its grants, which end with it (see coordinator.session).

The generated protobuf modules are available as ``coordinator.pb`` (messages)
and ``coordinator.pb_grpc`` (the stub). For asyncio programs,
``coordinator.aio`` has the same client on ``grpc.aio``.
"""

from ._gen import pb, pb_grpc  # first: makes the generated code importable
from .client import DEFAULT_TARGET, DEFAULT_TTL, MAX_CAPACITY, RW_CAPACITY, Client, RWLock, Semaphore
from .election import EventKind, LeaderInfo, Leadership, ObserveEvent, Observation
from .errors import (
    CapacityMismatch,
    ClientClosed,
    CoordinatorError,
    DataLossQuarantine,
    InvalidField,
    LeaseExpired,
    LeaseNotHeld,
    NotAcquired,
    PermissionDenied,
    ResourceExhausted,
    RPCError,
    SessionEnded,
    StoreUnavailable,
    Unauthenticated,
    Unavailable,
    from_rpc_error,
)
from .lease import Description, Lease, LeaseInfo
from .session import Session

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Semaphore",
    "RWLock",
    "MAX_CAPACITY",
    "RW_CAPACITY",
    "DEFAULT_TARGET",
    "DEFAULT_TTL",
    "Lease",
    "LeaseInfo",
    "Session",
    "Description",
    "Leadership",
    "LeaderInfo",
    "EventKind",
    "ObserveEvent",
    "Observation",
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
    "pb",
    "pb_grpc",
]
