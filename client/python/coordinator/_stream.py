"""A Client's lease operations over one operation stream (the Stream RPC).

Acquire, renew, release, campaign, resign and a group's acquire and
release go as operations of one bidirectional Stream call per Client,
shared by every thread (the Go SDK's client/stream.go does the same).
Operations are queued; the stream's request iterator hands whatever is
queued when gRPC is ready to send to the stream as one StreamRequest (up to
1,000 operations and about 64 KiB), so that an operation alone goes out at
once and those of many threads share messages under load. Each operation is
stamped (time.monotonic()) when the message carrying it is handed to the
stream: a grant's or renewal's validity counts from there. Results are
matched to operations by id. When a caller gives up on an acquire (of a
name or a group) or campaign that may wait on the coordinator while it is
in flight, a cancel operation for its id follows, so that the
coordinator's wait ends at once (a grant that came first still reaches the
caller's ``late`` handler, which gives it up).

The stream is opened (by a thread of its own) when an operation is queued,
and closed after ``idle`` seconds with nothing queued or in flight. When it
breaks, the operations in flight fail with :class:`StreamBroken` (a
retryable Unavailable: their outcome is unknown; an acquisition asks again
as the same holder, which finds a lost grant), and the queued ones go on the
next stream, opened after a backoff; when no result at all came on the
stream (it could not be opened), or its error is not transient, the queued
ones fail with its error too.

Both Clients use it: the sync one waits for an operation's result on its
thread, the asyncio one has it delivered to the event loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import grpc

from ._gen import pb
from ._rules import OUTCOME_UNKNOWN_CODES, TRANSIENT_CODES
from ._util import call_backoff
from .errors import ClientClosed, CoordinatorError, InvalidField, RPCError, Unavailable, from_rpc_error

log = logging.getLogger("coordinator")

#: The coordinator refuses more operations than this in one message.
MAX_OPS = 1000
#: About this many bytes of operations per message (the coordinator's
#: message limit is 96 KiB by default).
MAX_BATCH_BYTES = 64 << 10
#: A larger operation (only an invalid Campaign value can be) is refused
#: here: the coordinator would end the whole stream for it.
MAX_OP_BYTES = 70 << 10
#: How long the stream stays open with nothing queued or in flight.
DEFAULT_IDLE = 30.0

_QUEUED, _SENT, _FINISHED = 0, 1, 2

#: Codes after which the queued operations may go on the next stream: the
#: transient ones, and those of a stream that broke mid-way.
_RETRY_STREAM = TRANSIENT_CODES | OUTCOME_UNKNOWN_CODES


class Stopped(Exception):
    """The caller's stop Event was set while it waited for an operation."""


class StreamBroken(Unavailable):
    """The operation stream broke with the operation in flight: its outcome is
    unknown. Transient (Unavailable): try again."""


Done = Callable[["Op", Any, Optional[BaseException]], None]
#: What gets the outcome of an operation its caller stopped waiting for.
Late = Callable[[Any, Optional[BaseException]], None]


def run_late(late: Late, res: Any, err: Optional[BaseException]) -> None:
    """Hands an abandoned operation's outcome to its ``late`` handler."""
    try:
        late(res, err)
    except Exception:
        log.exception("coordinator: handling the late result of an abandoned operation failed")


class Op:
    """One operation and its fate (``state`` is guarded by the stream's lock)."""

    __slots__ = ("id", "msg", "size", "sent", "done", "state", "abandoned", "no_result")

    def __init__(self, msg: Any, size: int, done: Done, no_result: bool = False) -> None:
        self.id = 0
        self.msg = msg
        self.size = size
        #: When the message carrying it was handed to the stream
        #: (time.monotonic()), once sent.
        self.sent: Optional[float] = None
        self.done = done
        self.state = _QUEUED
        self.abandoned = False
        #: The coordinator does not answer it (a cancel): it is finished
        #: once written, never in flight.
        self.no_result = no_result


def _positive(d: Any) -> bool:
    """Whether the google.protobuf.Duration d is above zero."""
    return d.seconds > 0 or (d.seconds == 0 and d.nanos > 0)


def may_wait(msg: Any) -> bool:
    """Whether the StreamOperation msg is an acquire, acquire_group or
    campaign that may wait on the coordinator: one a cancel operation can
    give up."""
    kind = msg.WhichOneof("operation")
    if kind == "acquire":
        return _positive(msg.acquire.wait)
    if kind == "acquire_group":
        return _positive(msg.acquire_group.wait)
    if kind == "campaign":
        return msg.campaign.term == 0 and _positive(msg.campaign.wait)
    return False


class _Conn:
    """One Stream call."""

    def __init__(self) -> None:
        self.pokes: "queue.SimpleQueue[Optional[bool]]" = queue.SimpleQueue()
        self.call: Any = None


class OpStream:
    """The operation stream of one Client (see the module doc)."""

    def __init__(self, stub: Any, metadata: Optional[Tuple[Tuple[str, str], ...]], idle: float = DEFAULT_IDLE) -> None:
        self._stub = stub
        self._metadata = metadata
        self._idle = idle
        self.lock = threading.Lock()
        self._closed = False
        self._queue: Deque[Op] = deque()
        self._inflight: Dict[int, Op] = {}
        self._next_id = 0
        self._running = False
        self._thread: Optional[threading.Thread] = None
        self._cur: Optional[_Conn] = None
        self._stop = threading.Event()

    # -- operations -------------------------------------------------------------

    def submit(self, msg: Any, done: Done) -> Op:
        """Queues the StreamOperation msg; ``done(op, result, error)`` gets
        its outcome once, with no lock held, unless :meth:`abandon` drops it
        unsent. Raises ClientClosed, or InvalidField for an operation too
        large for a message (and then done is never called)."""
        size = msg.ByteSize()
        if size > MAX_OP_BYTES:
            raise InvalidField(f"a {msg.WhichOneof('operation')} operation of {size} bytes is larger than a "
                               f"message may be", code=grpc.StatusCode.INVALID_ARGUMENT)
        o = Op(msg, size, done)
        with self.lock:
            if self._closed:
                raise ClientClosed("the client was closed")
            self._next_id += 1
            o.id = self._next_id
            msg.id = o.id
            self._queue.append(o)
            if self._cur is not None:
                self._cur.pokes.put(True)
            if not self._running:
                self._running = True
                t = threading.Thread(target=self._serve, name="coordinator-stream", daemon=True)
                self._thread = t
                t.start()
        return o

    def abandon(self, o: Op) -> bool:
        """Its caller stops waiting for o: an operation not sent yet is
        dropped (done is never called), one in flight is marked abandoned
        and, when it is an acquire or campaign that may wait on the
        coordinator, cancelled there (it then ends with a Canceled error, or
        with its grant when that came first). False when o had finished
        already: its outcome is (being) delivered to done as usual."""
        with self.lock:
            if o.state == _FINISHED:
                return False
            if o.state == _QUEUED:
                o.state = _FINISHED
                try:
                    self._queue.remove(o)
                except ValueError:
                    pass
                return True
            o.abandoned = True
            if may_wait(o.msg):
                self._queue_cancel_locked(o.id)
            return True

    def call(self, msg: Any, timeout: float, late: Optional[Late] = None,
             stop: Optional[threading.Event] = None) -> Tuple[Any, float]:
        """Runs the operation msg and waits up to ``timeout`` seconds for its
        result. Returns (StreamResult, sent). Raises the error that ended it
        (StreamBroken, the stream's error, ClientClosed), RPCError
        DEADLINE_EXCEEDED when the time ran out, or Stopped when ``stop`` was
        set meanwhile: the operation is abandoned then, and ``late(result,
        error)`` gets its outcome if it was sent (e.g. to give up a lease
        granted to nobody)."""
        ev = threading.Event()
        box: List[Tuple[Any, Optional[BaseException]]] = []

        def done(o: Op, res: Any, err: Optional[BaseException]) -> None:
            box.append((res, err))
            ev.set()
            if o.abandoned and late is not None:
                run_late(late, res, err)

        o = self.submit(msg, done)
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            left = end - time.monotonic()
            # With a stop Event to heed, look at it every 50ms.
            if ev.wait(max(left if stop is None else min(left, 0.05), 0.0)):
                break
            stopped = stop is not None and stop.is_set()
            if not stopped and time.monotonic() < end:
                continue
            if not self.abandon(o):
                ev.wait()  # answered meanwhile
                break
            if stopped:
                raise Stopped()
            raise RPCError("Deadline Exceeded", code=grpc.StatusCode.DEADLINE_EXCEEDED)
        res, err = box[0]
        if err is not None:
            raise err
        return res, o.sent if o.sent is not None else time.monotonic()

    def close(self) -> None:
        """Fails whatever is queued or in flight with ClientClosed and ends
        the stream (which gives up the coordinator's waits)."""
        with self.lock:
            self._closed = True
            conn = self._cur
            self._cur = None
            t = self._thread
        self._stop.set()
        self._fail(ClientClosed("the client was closed"), ClientClosed("the client was closed"))
        if conn is not None:
            conn.pokes.put(None)
            if conn.call is not None:
                conn.call.cancel()
        if t is not None and t is not threading.current_thread():
            t.join(timeout=10)

    # -- internals -------------------------------------------------------------

    def _queue_cancel_locked(self, op_id: int) -> None:
        """Queues a cancel of the waiting operation op_id. It has no result:
        it is finished once written. Callers hold the lock."""
        if self._closed:
            return
        self._next_id += 1
        msg = pb.StreamOperation(id=self._next_id, cancel=op_id)
        o = Op(msg, msg.ByteSize(), lambda _o, _res, _err: None, no_result=True)
        o.id = self._next_id
        self._queue.append(o)
        if self._cur is not None:
            self._cur.pokes.put(True)

    def _finish_locked(self, o: Op, res: Any, err: Optional[BaseException]) -> Optional[Callable[[], None]]:
        if o.state == _FINISHED:
            return None
        o.state = _FINISHED
        return lambda: o.done(o, res, err)

    def _fail(self, inflight_err: Optional[BaseException], queued_err: Optional[BaseException]) -> None:
        finish: List[Callable[[], None]] = []
        with self.lock:
            if inflight_err is not None:
                for o in self._inflight.values():
                    f = self._finish_locked(o, None, inflight_err)
                    if f:
                        finish.append(f)
                self._inflight.clear()
            if queued_err is not None:
                for o in self._queue:
                    f = self._finish_locked(o, None, queued_err)
                    if f:
                        finish.append(f)
                self._queue.clear()
        for f in finish:
            f()

    def _serve(self) -> None:
        """The stream thread: opens a stream while operations are queued,
        and exits when nothing is left to do."""
        b = call_backoff()
        while True:
            with self.lock:
                if self._closed or not self._queue:
                    self._running = False
                    self._thread = None
                    return
                conn = _Conn()
                self._cur = conn
                conn.pokes.put(True)
            answered, err = self._stream(conn)
            if answered:
                b.reset()
            if err is None or self._closed:
                continue  # closed as idle (or by close): look at the queue again
            log.warning("coordinator: the operation stream ended; reconnecting if operations are queued: %s", err)
            delay = b.next()
            if isinstance(err, CoordinatorError) and err.retry_after:
                delay = max(delay, err.retry_after)
            self._stop.wait(delay)

    def _stream(self, conn: _Conn) -> Tuple[bool, Optional[BaseException]]:
        """Serves one stream until it ends; reports whether any result came,
        and its error (None when it was closed as idle)."""
        answered = False
        err: Optional[BaseException] = None
        try:
            call = self._stub.Stream(self._requests(conn), metadata=self._metadata)
            conn.call = call
            with self.lock:
                stopping = self._closed or self._cur is not conn
            if stopping and self._closed:
                call.cancel()
            for resp in call:
                answered = True
                self._deliver(resp)
        except grpc.RpcError as e:
            err = from_rpc_error(e)
        except Exception as e:  # keep serving whatever went wrong
            log.exception("coordinator: the operation stream failed")
            err = RPCError(f"the operation stream failed: {e!r}", code=grpc.StatusCode.INTERNAL)
        finally:
            conn.pokes.put(None)
        with self.lock:
            if self._cur is conn:
                self._cur = None
            leftover = bool(self._inflight)
        if self._closed:
            return answered, ClientClosed("the client was closed")
        if err is None:
            if not leftover:
                return answered, None
            err = Unavailable("the operation stream ended with operations in flight", code=grpc.StatusCode.UNAVAILABLE)
        if err.code not in _RETRY_STREAM:
            self._fail(err, err)  # Unauthenticated, PermissionDenied…: as the unary calls would
        else:
            broke = StreamBroken(f"the operation stream broke with the operation in flight: {err}",
                                 code=grpc.StatusCode.UNAVAILABLE)
            broke.__cause__ = err
            # Nothing came on the stream: it could not be opened. The queued
            # operations fail as their unary calls would (callers retry).
            self._fail(broke, None if answered else err)
        return answered, err

    def _requests(self, conn: _Conn) -> Iterator[Any]:
        """The stream's request iterator, run by a gRPC thread: one
        StreamRequest of whatever is queued each time gRPC can send."""
        while True:
            req = self._take(conn)
            if req is not None:
                yield req
                continue
            try:
                item = conn.pokes.get(timeout=self._idle)
            except queue.Empty:
                with self.lock:
                    quiet = not self._queue and not self._inflight
                    if quiet and self._cur is conn:
                        self._cur = None  # what is queued from now on waits for the next stream
                if quiet:
                    return  # half-closes the stream; the coordinator ends it
                continue
            if item is None:
                return

    def _take(self, conn: _Conn) -> Any:
        """Moves the next batch of queued operations in flight, stamped as
        sent now; None when nothing is queued."""
        with self.lock:
            if self._cur is not conn or not self._queue:
                return None
            now = time.monotonic()
            ops: List[Any] = []
            size = 0
            while self._queue and len(ops) < MAX_OPS:
                o = self._queue[0]
                if ops and size + o.size > MAX_BATCH_BYTES:
                    break
                self._queue.popleft()
                size += o.size
                ops.append(o.msg)
                if o.no_result:
                    o.state = _FINISHED
                    continue
                o.state, o.sent = _SENT, now
                self._inflight[o.id] = o
            return pb.StreamRequest(operations=ops)

    def _deliver(self, resp: Any) -> None:
        finish: List[Callable[[], None]] = []
        with self.lock:
            for r in resp.results:
                o = self._inflight.pop(r.id, None)
                if o is not None:
                    f = self._finish_locked(o, r, None)
                    if f:
                        finish.append(f)
        for f in finish:
            f()
