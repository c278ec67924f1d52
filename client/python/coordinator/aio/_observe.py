"""Observe on asyncio: an async iterator of ObserveEvent."""

from __future__ import annotations

import asyncio
from typing import Any, Optional, Protocol

import grpc

from ..election import END, ObserveEvent, event_of, queued_event
from ..errors import from_rpc_error

__all__ = ["Observation"]



class _ObservationHost(Protocol):
    @property
    def closed(self) -> bool: ...

    def forget_observation(self, obs: "Observation") -> None: ...


class Observation:
    """An open Observe stream: ``async for event in obs``, or
    ``await obs.get(timeout)``. The first event is marked ``initial`` (the
    state when it opened). ``await obs.close()`` ends it (iteration then
    stops); it is also an async context manager. A stream the coordinator
    ends with an error raises it from the iteration; ResourceExhausted means
    this reader was too slow: observe again.

    A task reads the stream into a queue as events come, so that a
    ``get(timeout)`` that times out loses nothing of the stream.
    """

    def __init__(self, host: _ObservationHost, election: str, call: Any) -> None:
        self._host = host
        self.election = election
        self._call = call
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self._closed = False
        self._finished = False
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for resp in self._call:
                self._queue.put_nowait(event_of(resp))
            self._queue.put_nowait(END)
        except asyncio.CancelledError:
            # grpc.aio ends the iteration of a call cancelled by close() so.
            self._queue.put_nowait(END)
            if not self._closed:
                raise
        except grpc.RpcError as e:
            self._queue.put_nowait(END if self._closed else from_rpc_error(e))
        except Exception as e:  # pragma: no cover - defensive
            self._queue.put_nowait(e)

    async def get(self, timeout: Optional[float] = None) -> ObserveEvent:
        """The next event. Raises TimeoutError when none came within
        ``timeout`` seconds, StopAsyncIteration once the stream is closed,
        and the stream's error when the coordinator ended it."""
        if self._finished:
            raise StopAsyncIteration
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no Observe event for {self.election!r} within {timeout}s") from None
        self._finished = item is END or isinstance(item, BaseException)
        return queued_event(item, self._host.closed, StopAsyncIteration)

    def __aiter__(self) -> "Observation":
        return self

    async def __anext__(self) -> ObserveEvent:
        return await self.get()

    async def close(self) -> None:
        """Ends the stream, and the iteration (events not read yet are
        dropped). Idempotent."""
        self._finished = True
        if not self._closed:
            self._closed = True
            self._call.cancel()
            self._host.forget_observation(self)
        if not self._reader.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 5)
            except asyncio.TimeoutError:
                self._reader.cancel()

    async def __aenter__(self) -> "Observation":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close()
