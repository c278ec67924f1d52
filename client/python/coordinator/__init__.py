"""Python client of the coordinator: locks, semaphores, read-write locks,
groups of them taken all at once, and leader elections, as leases held in
sessions that renew themselves.

    import coordinator

    with coordinator.Client("127.0.0.1:7400") as client:
        with client.lock("reports/nightly", wait=30) as lease:
            work(lease.token)          # check lease.valid() / lease.lost while working
        with client.semaphore("db/migrations", 5).acquire(2, wait=30) as share:
            migrate(share.token)       # at most 5 weight held at once
        with client.rwlock("config").read_lock(wait=30) as reader:
            read(reader.token)         # writers: .write_lock()
        with client.lock_all(["accounts/a", "accounts/b"], wait=30) as group:
            move(group.token("accounts/a"), group.token("accounts/b"))  # all or none

Every Lease, Group and Leadership is attached to a session: the Client's
default session (made on first need with the Client's ``ttl``), or one of
``client.session(ttl=...)`` passed as ``session=``. The session, and so
every grant in it, is renewed about every ttl/3 as renew_session operations
on the Client's one operation stream. Its validity is counted on this
process's monotonic clock from when the last answered renewal was sent,
minus a margin of max(ttl/10, 50ms): when no renewal is answered in time,
``lost`` is set at that local deadline, before the coordinator could grant
the name to anyone else; a renewal the coordinator refuses sets it at once.

The generated protobuf modules are available as ``coordinator.pb`` (messages)
and ``coordinator.pb_grpc`` (the stub). For asyncio programs,
``coordinator.aio`` has the same client.
"""

from ._gen import pb, pb_grpc  # first: makes the generated code importable
from .client import DEFAULT_TARGET, DEFAULT_TTL, MAX_CAPACITY, MAX_GROUP_MEMBERS, RW_CAPACITY, Client, RWLock, Semaphore
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
    is_outcome_unknown,
    is_transient,
)
from .group import Group, Member
from .lease import Description, Lease, LeaseInfo
from .session import Session

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Semaphore",
    "RWLock",
    "MAX_CAPACITY",
    "MAX_GROUP_MEMBERS",
    "RW_CAPACITY",
    "DEFAULT_TARGET",
    "DEFAULT_TTL",
    "Lease",
    "LeaseInfo",
    "Group",
    "Member",
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
    "is_transient",
    "is_outcome_unknown",
    "pb",
    "pb_grpc",
]
