"""Observe on asyncio: an async iterator of ObserveEvent."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any, Callable, Optional, Tuple, Type

import grpc

from ..election import END, ObserveEvent, event_of, queued_event
from ..errors import from_rpc_error

__all__ = ["Observation"]


class Observation:
    """An open Observe stream: ``async for event in obs``, or
    ``await obs.get(timeout)``. The first event is marked ``initial`` (the
    state when it opened). ``await obs.close()`` ends it (iteration then
    stops); it is also an async context manager. A stream the coordinator
    ends with an error raises it from the iteration; ResourceExhausted means
    this reader was too slow: observe again.

    A thread reads the stream into the loop's queue as events come, so that
    a ``get(timeout)`` that times out loses nothing of the stream.
    """

    def __init__(self, election: str, open_call: Callable[[Callable[[], None]], Tuple[Any, Callable[[], None]]],
                 closed: Callable[[], bool]) -> None:
        self.election = election
        self._loop = asyncio.get_running_loop()
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self._closed = False
        self._finished = False
        self._client_closed = closed
        self._call, self._forget = open_call(self._cancel)
        self._reader = threading.Thread(target=self._read, name="coordinator-observe", daemon=True)
        self._reader.start()

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody reads
            pass

    def _read(self) -> None:
        try:
            for resp in self._call:
                self._put(event_of(resp))
            self._put(END)
        except grpc.RpcError as e:
            self._put(END if self._closed else from_rpc_error(e))

    def _cancel(self) -> None:
        self._closed = True
        self._call.cancel()

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
        return queued_event(item, self._client_closed(), StopAsyncIteration)

    def __aiter__(self) -> "Observation":
        return self

    async def __anext__(self) -> ObserveEvent:
        return await self.get()

    async def close(self) -> None:
        """Ends the stream, and the iteration (events not read yet are
        dropped). Idempotent."""
        self._finished = True
        if not self._closed:
            self._cancel()
            self._forget()
        await asyncio.to_thread(self._reader.join, 5)

    async def __aenter__(self) -> "Observation":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()
