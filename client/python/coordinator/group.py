"""Groups: several names acquired at once, all of them or none, each with a
fencing token of its own, held in one session and released together.

    with client.lock_all(["accounts/alice", "accounts/bob"], wait=30) as group:
        move(group.token("accounts/alice"), group.token("accounts/bob"))

A waiting group takes its place in the queue of every one of its names at
once: a later request for one of its names that does not fit beside it
waits behind it (a stream of try_locks of one name cannot starve it), while
requests for other names never wait for it. Groups never deadlock, whatever
order their names are listed in. Each token obeys the rule of its name's
tokens: larger than every earlier grant of that name.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Type

from ._state import F, GroupState
from .lease import Attached, Dispatch, exit_block

__all__ = ["Member", "Group"]


@dataclass(frozen=True)
class Member:
    """One name of a group and the share of it to hold, as a semaphore's:
    ``capacity`` the name's capacity, ``weight`` how much of it to hold (0
    means 1). ``Member(name)`` is an exclusive lock; ``Member(name,
    RW_CAPACITY, 1)`` a read lock and ``Member(name, RW_CAPACITY,
    RW_CAPACITY)`` a write lock of a read-write lock."""

    name: str
    capacity: int = 0
    weight: int = 0


def lock_members(names: Iterable[str]) -> Tuple[Member, ...]:
    """The members of a group of exclusive locks on names."""
    if isinstance(names, str):
        raise TypeError("coordinator: a group's names are a list of names, not one string")
    return tuple(Member(n) for n in names)


class GroupBase(Attached[F]):
    """What the sync and the asyncio Group share: the names, their tokens,
    and the session they live in."""

    def __init__(self, state: GroupState[F], session: Any, dispatch: Optional[Dispatch] = None) -> None:
        super().__init__(state, session, dispatch)
        self._state = state
        self._tokens = {m.name: m.token for m in state.members}

    @property
    def kind(self) -> str:
        """"group"."""
        return self._state.kind

    @property
    def names(self) -> Tuple[str, ...]:
        """The group's names, in the order the acquisition listed them."""
        return tuple(m.name for m in self._state.members)

    @property
    def tokens(self) -> Dict[str, int]:
        """Each name's fencing token (a copy)."""
        return dict(self._tokens)

    def token(self, name: str) -> int:
        """The fencing token of the group's name ``name``: larger than that
        of every earlier grant of the name. Hand it to the resource the name
        protects. KeyError when name is not one of the group's."""
        try:
            return self._tokens[name]
        except KeyError:
            raise KeyError(f"coordinator: {name!r} is not a name of the group {list(self.names)!r}") from None

    def weight(self, name: str) -> int:
        """How much of the capacity of the group's name ``name`` it holds."""
        for m in self._state.members:
            if m.name == name:
                return m.weight
        raise KeyError(f"coordinator: {name!r} is not a name of the group {list(self.names)!r}")

    def __repr__(self) -> str:
        state = "held" if not self.done else ("lost" if self.lost.is_set() else "released")
        return f"<{type(self).__name__} {self._tokens!r} holder={self.holder!r} {state}>"


class Group(GroupBase[threading.Event]):
    """A group of names acquired all at once through a Client (``lock_all``,
    ``acquire_all``), held in a session until released or lost: its grants
    are released together and end together (``lost``, ``ended``, ``error``
    as a Lease's). Check ``valid()`` (or ``lost``) while acting on what the
    names protect, and hand each resource its name's ``token(name)``. Used
    as a context manager, the group is released when the block exits; an
    error while releasing does not hide the block's own exception."""

    def __init__(self, state: GroupState[threading.Event], session: Any, release: Callable[[], bool]) -> None:
        super().__init__(state, session)
        self._release = release

    def release(self) -> bool:
        """Gives every name of the group up on the coordinator at once,
        retrying transient errors for up to the Client's close timeout. True
        when the coordinator released them; False (no error) when none was
        held any more (lost, or released before)."""
        return self._release()

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        exit_block(self.release, self._state.describe(), exc_type)
