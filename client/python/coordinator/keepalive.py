"""Renewal of every lease and leadership of a Client: as renew operations on
the Client's operation stream (stream.py), or over one KeepAlive stream of
its own with use_stream=False or a coordinator without Stream.

One scheduler thread keeps the grants in a heap ordered by when each next
needs attention: its renewal (about ttl/3 after the last successful one was
sent, or a backoff after a failure) or its local deadline. A due renewal is
queued: on the operation stream, which stamps each renewal with the time its
message was handed to the stream, or on the KeepAlive stream, whose request
iterator sends the queue, stamping each grant with the time it handed the
request to gRPC and a request id of its own, and whose thread matches each
response to its grant by that id. A grant has at most one renewal in flight.

A renewed grant's deadline becomes the time its renewal was sent + the
granted TTL - a drift margin; one still unrenewed at its deadline ends with
LeaseExpired there, whatever is in flight, before the coordinator's own
expiry. A ``lost`` result (on the operation stream, an error whose reason the proto
marks ``ends_lease``: LEASE_NOT_HELD, INVALID_FIELD, PERMISSION_DENIED) ends
it at once; a ``failed`` result
(any other error), or the stream breaking with the renewal in flight, is
retried (after ``retry_after`` when
the coordinator gives one) while the deadline allows.

The scheduler thread runs while the Client holds grants (and lingers a
little after the last one ends); the stream is opened when a first renewal is
due and closed with the scheduler.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import grpc

from ._gen import pb
from ._rules import LEASE_ENDING_REASONS
from ._util import call_backoff, from_duration, to_duration
from .errors import CoordinatorError, LeaseExpired, RPCError, from_reason, from_rpc_error, from_status
from .stream import OpStream, StreamBroken, UseUnary

if TYPE_CHECKING:  # pragma: no cover
    from .lease import _Held

log = logging.getLogger("coordinator")

#: How long the scheduler thread outlives the last grant, so that a client
#: that locks and releases in a loop does not start a thread per lock.
_LINGER = 2.0


class _Stream:
    """One KeepAlive stream: its request queue and its call."""

    def __init__(self) -> None:
        self.pokes: "queue.SimpleQueue[Optional[bool]]" = queue.SimpleQueue()
        self.call: Any = None
        self.answered = False


class Renewals:
    """Renews a Client's grants (see the module doc)."""

    def __init__(self, stub: Any, metadata: Optional[Tuple[Tuple[str, str], ...]],
                 transport: Optional[OpStream] = None) -> None:
        self._stub = stub
        self._transport = transport
        self._metadata = metadata
        self.lock = threading.Condition(threading.Lock())
        self._held: Set["_Held"] = set()
        self._heap: List[Tuple[float, int, int, "_Held"]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self._pending: List["_Held"] = []
        self._inflight: Dict[int, "_Held"] = {}
        self._closed = False
        self._scheduler: Optional[threading.Thread] = None
        self._stream_thread: Optional[threading.Thread] = None
        self._stream: Optional[_Stream] = None
        self._stop_stream = threading.Event()

    # -- grants ---------------------------------------------------------------

    def add(self, h: "_Held") -> bool:
        """Starts renewing h; False when closed."""
        with self.lock:
            if self._closed:
                return False
            self._held.add(h)
            self._push(h)
            if self._scheduler is None:
                t = threading.Thread(target=self._schedule, name="coordinator-keepalive", daemon=True)
                self._scheduler = t
                t.start()
            self.lock.notify_all()
            return True

    def end(self, h: "_Held", err: Optional[BaseException], lost: bool) -> Tuple[bool, Optional[BaseException]]:
        """Ends h unless it ended already. Returns (ended_now, prior_error)."""
        with self.lock:
            if h._done:
                return False, h._error
            self._end_locked(h, err, lost)
            return True, None

    def watch_lost(self, h: "_Held", callback: Callable[["_Held"], None]) -> bool:
        """Has ``callback(h)`` called on a background thread when h is lost;
        False, without it, when h is lost already."""
        with self.lock:
            if h.lost.is_set():
                return False
            h._callbacks.append(callback)
            return True

    def renewed(self, h: "_Held", sent: float, ttl: float) -> bool:
        """Records a renewal of h sent at ``sent`` (a proclamation); ends h
        with LeaseExpired instead when its deadline had passed already.
        Reports whether h is still held."""
        with self.lock:
            return self._renewed_locked(h, sent, ttl)

    def held(self) -> List["_Held"]:
        with self.lock:
            return list(self._held)

    def close(self) -> List["_Held"]:
        """Ends every grant with ClientClosed (``lost`` set), stops the
        threads, and returns the grants that were held."""
        from .errors import ClientClosed

        with self.lock:
            self._closed = True
            held = list(self._held)
            for h in held:
                self._end_locked(h, ClientClosed("the client was closed"), lost=True)
            self._stop_stream_locked()
            self.lock.notify_all()
            threads = [t for t in (self._scheduler, self._stream_thread) if t is not None]
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=10)
        return held

    # -- internals (the caller holds self.lock) -------------------------------

    def _push(self, h: "_Held") -> None:
        h._version += 1
        heapq.heappush(self._heap, (h._due(), next(self._seq), h._version, h))

    def _end_locked(self, h: "_Held", err: Optional[BaseException], lost: bool) -> None:
        if not h._end(err, lost):
            return
        self._held.discard(h)
        if h._inflight_id is not None:
            self._inflight.pop(h._inflight_id, None)
            h._inflight_id = None
        if lost and h._callbacks:
            threading.Thread(target=h._run_callbacks, name="coordinator-on-lost", daemon=True).start()
        self.lock.notify_all()

    def _expired(self, h: "_Held") -> LeaseExpired:
        return h._expired()

    def _renewed_locked(self, h: "_Held", sent: float, ttl: float) -> bool:
        if h._done:
            return False
        if time.monotonic() >= h._deadline:
            self._end_locked(h, self._expired(h), lost=True)
            return False
        h._granted(sent, ttl)
        self._push(h)
        self.lock.notify_all()
        return True

    def _failed_locked(self, h: "_Held", err: CoordinatorError) -> None:
        h._renewal_failed(err)
        self._push(h)
        self.lock.notify_all()

    def _stop_stream_locked(self) -> None:
        self._stop_stream.set()
        st = self._stream
        if st is not None:
            st.pokes.put(None)
            if st.call is not None:
                st.call.cancel()
        self._stream = None
        self._pending = []

    # -- the scheduler thread -------------------------------------------------

    def _schedule(self) -> None:
        idle_since: Optional[float] = None
        with self.lock:
            while True:
                if self._closed:
                    break
                now = time.monotonic()
                self._tick_locked(now)
                if not self._held:
                    if self._stream is not None or self._stream_thread is not None:
                        self._stop_stream_locked()
                    if idle_since is None:
                        idle_since = now
                    if now - idle_since >= _LINGER:
                        break
                    self.lock.wait(_LINGER - (now - idle_since))
                    continue
                idle_since = None
                timeout = max(self._heap[0][0] - time.monotonic(), 0) if self._heap else None
                self.lock.wait(timeout)
            self._scheduler = None

    def _tick_locked(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            _, _, version, h = heapq.heappop(self._heap)
            if h._done or version != h._version:
                continue
            if now >= h._deadline:
                self._end_locked(h, self._expired(h), lost=True)
                continue
            if h._inflight_id is None and not h._want_send and h._next_renew <= now:
                h._want_send = True
                self._pending.append(h)
            self._push(h)
        if self._pending and self._held and self._transport is not None and self._transport.usable():
            self._send_on_stream_locked()
        if self._pending and self._held:
            if self._stream is not None:
                self._stream.pokes.put(True)
            elif self._stream_thread is None:
                self._stop_stream.clear()
                t = threading.Thread(target=self._run_stream, name="coordinator-keepalive-stream", daemon=True)
                self._stream_thread = t
                t.start()

    # -- the stream thread ----------------------------------------------------

    def _run_stream(self) -> None:
        b = call_backoff()
        try:
            while True:
                with self.lock:
                    if self._closed or self._stop_stream.is_set() or not self._held:
                        return
                    st = _Stream()
                    self._stream = st
                    if self._pending:
                        st.pokes.put(True)
                err: Optional[BaseException] = None
                try:
                    st.call = self._stub.KeepAlive(self._requests(st), metadata=self._metadata, wait_for_ready=True)
                    with self.lock:
                        stopping = self._stop_stream.is_set() or self._stream is not st
                    if stopping:
                        st.call.cancel()
                    for resp in st.call:
                        st.answered = True
                        self._handle(st, resp)
                    err = RPCError("the KeepAlive stream ended")
                except grpc.RpcError as e:
                    err = from_rpc_error(e)
                except Exception as e:  # keep renewing whatever went wrong
                    log.exception("coordinator: KeepAlive stream failed")
                    err = e
                finally:
                    st.pokes.put(None)
                with self.lock:
                    if self._stream is st:
                        self._stream = None
                    self._drop_inflight_locked(st, err)
                    if self._closed or self._stop_stream.is_set() or not self._held:
                        return
                if st.answered:
                    b.reset()
                log.warning("coordinator: KeepAlive stream broke; reconnecting: %s", err)
                delay = b.next()
                if isinstance(err, CoordinatorError) and err.retry_after:
                    delay = max(delay, err.retry_after)
                if self._stop_stream.wait(delay):
                    return
        finally:
            with self.lock:
                self._stream_thread = None
                self.lock.notify_all()

    def _requests(self, st: _Stream) -> Iterator[Any]:
        while True:
            if st.pokes.get() is None:
                return
            for req in self._take(st):
                yield req

    def _take(self, st: _Stream) -> List[Any]:
        """Marks the queued renewals as sent on st now, and returns them."""
        with self.lock:
            if self._stream is not st:
                return []
            now = time.monotonic()
            reqs = []
            for h in self._pending:
                if h._done or not h._want_send:
                    continue
                h._want_send = False
                rid = next(self._ids)
                h._inflight_id, h._inflight_stream, h._sent_at = rid, st, now
                self._inflight[rid] = h
                reqs.append(
                    pb.KeepAliveRequest(id=rid, name=h._name, holder=h._holder, token=h._token, ttl=to_duration(h._ttl))
                )
                self._push(h)
            self._pending = []
            return reqs

    def _handle(self, st: _Stream, resp: Any) -> None:
        which = resp.WhichOneof("result")
        with self.lock:
            h = self._inflight.get(resp.id) if resp.id else None
            if h is None:
                h = self._match_locked(resp, which)
            if h is None or h._inflight_stream is not st or h._done:
                return  # ended meanwhile, or an answer to an older stream
            self._inflight.pop(h._inflight_id, None)  # type: ignore[arg-type]
            h._inflight_id, h._inflight_stream = None, None
            if which == "lease":
                ttl = h._ttl
                got = resp.lease.ttl
                if got.seconds or got.nanos:
                    ttl = got.seconds + got.nanos / 1e9
                self._renewed_locked(h, h._sent_at, ttl)
            elif which == "lost":
                r = resp.lost
                err = from_reason(r.reason, r.code, r.message or "lease lost")
                self._end_locked(h, err, lost=True)
            elif which == "failed":
                r = resp.failed
                retry_after = None
                if r.HasField("retry_after"):
                    retry_after = r.retry_after.seconds + r.retry_after.nanos / 1e9
                self._failed_locked(h, from_reason(r.reason, r.code, r.message or "renewal failed", retry_after))
            else:  # an answer this client does not know: try again
                self._failed_locked(h, RPCError("unknown KeepAlive result"))

    def _match_locked(self, resp: Any, which: Optional[str]) -> Optional["_Held"]:
        """The in-flight grant a response without a known id answers, by
        name, holder and token."""
        if which == "lease":
            holder, token = resp.lease.holder, resp.lease.token
        elif which == "lost":
            holder, token = resp.lost.holder, resp.lost.token
        elif which == "failed":
            holder, token = resp.failed.holder, resp.failed.token
        else:
            return None
        for h in self._inflight.values():
            if h._name == resp.name and h._holder == holder and h._token == token:
                return h
        return None

    def _drop_inflight_locked(self, st: _Stream, err: Optional[BaseException]) -> None:
        """The renewals in flight on a stream that ended: retry them."""
        why = err if isinstance(err, CoordinatorError) else RPCError(f"the KeepAlive stream broke: {err}")
        for rid, h in list(self._inflight.items()):
            if h._inflight_stream is st:
                del self._inflight[rid]
                h._inflight_id, h._inflight_stream = None, None
                if not h._done:
                    self._failed_locked(h, why)
        for h in self._pending:
            h._want_send = False
            if not h._done:
                h._next_renew = time.monotonic()
                self._push(h)
        self._pending = []
        self.lock.notify_all()

    # -- renewals over the operation stream -----------------------------------

    def _send_on_stream_locked(self) -> None:
        """Queues the pending renewals as renew operations on the operation
        stream. A renewal the stream refuses (closed, or the coordinator lacks it)
        stays pending, for the KeepAlive stream."""
        assert self._transport is not None
        kept = []
        for h in self._pending:
            if h._done or not h._want_send:
                continue
            msg = pb.StreamOperation(
                renew=pb.RenewRequest(name=h._name, holder=h._holder, token=h._token, ttl=to_duration(h._ttl))
            )
            try:
                o = self._transport.submit(msg, lambda o, res, err, h=h: self._stream_answered(h, o, res, err))
            except Exception:  # ClientClosed, UseUnary
                kept.append(h)
                continue
            h._want_send = False
            # A negative id: never one of the KeepAlive stream's.
            h._inflight_id, h._inflight_stream = -o.id, o
            self._push(h)
        self._pending = kept

    def _stream_answered(self, h: "_Held", o: Any, res: Any, err: Optional[BaseException]) -> None:
        """Applies the outcome of the renew operation o of h."""
        with self.lock:
            if h._done or h._inflight_stream is not o:
                return
            h._inflight_id, h._inflight_stream = None, None
            if err is None and res is not None and res.WhichOneof("result") == "error":
                err = from_status(res.error)
            if isinstance(err, (StreamBroken, UseUnary)):
                # Retried at once: on the next stream, or over KeepAlive.
                if isinstance(err, StreamBroken):
                    h._last_error = err
                h._next_renew = time.monotonic()
                self._push(h)
                self.lock.notify_all()
            elif err is not None:
                reason = getattr(err, "reason", None)
                if reason in LEASE_ENDING_REASONS:
                    self._end_locked(h, err, lost=True)
                elif isinstance(err, CoordinatorError):
                    # STORE_UNAVAILABLE, DATA_LOSS_QUARANTINE, a stream that
                    # could not be opened…: the lease holds until its
                    # deadline. Try again.
                    self._failed_locked(h, err)
                else:
                    self._failed_locked(h, RPCError(f"renewal failed: {err!r}"))
            elif res is None or res.WhichOneof("result") != "renew" or not res.renew.HasField("lease"):
                self._failed_locked(h, RPCError("a renew operation got an unexpected answer"))
            else:
                ttl = from_duration(res.renew.lease.ttl, h._ttl) or h._ttl
                self._renewed_locked(h, o.sent if o.sent is not None else h._confirmed, ttl)
