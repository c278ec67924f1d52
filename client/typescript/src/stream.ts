// The operation stream: every lease operation of a Client (acquire,
// release, campaign, resign, and its sessions' renewals) over one
// bidirectional Stream call, as the Go SDK does (client/stream.go).
//
// Operations are queued; the stream's request side takes whatever is queued
// whenever Connect asks for the next message, as one StreamRequest (up to
// MAX_OPS operations and about MAX_BATCH_BYTES), so that an operation alone
// goes out at once and those queued in the same tick share a message. Each
// operation is stamped with performance.now() when its message is handed to
// the stream: a grant's or renewal's validity counts from there. Results are
// matched to operations by id, in any order.
//
// The stream is opened when an operation is queued and closed after
// IDLE_MS with nothing queued or in flight. When it breaks, the operations
// in flight fail with a retryable Unavailable error (StreamBrokeError:
// their outcome is unknown; an acquire asked again as the same holder finds
// a grant it did not hear of), and those still queued go out on the next
// stream, opened after a backoff. When the coordinator refuses the stream
// itself (Unauthenticated…), the queued operations fail with its error, as
// their unary calls would.

import { inspect } from "node:util";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  StreamOperationSchema,
  StreamRequestSchema,
  type StreamOperation,
  type StreamRequest,
  type StreamResult,
} from "./gen/coordinator/v1/coordinator_pb.js";
import type { Status } from "./gen/google/rpc/status_pb.js";
import type { CoordinatorApi } from "./api.js";
import { ClientClosedError, CoordinatorError, decodeError, isTransient, outcomeUnknown } from "./errors.js";
import { callBackoff, sleep } from "./util.js";
import { now } from "./util.js";

/** The most operations in one StreamRequest (the coordinator refuses more). */
const MAX_OPS = 1000;
/** About the most bytes of operations in one StreamRequest (the coordinator's limit is 96 KiB by default). */
const MAX_BATCH_BYTES = 64 << 10;
/** How long the stream stays open with nothing queued or in flight. */
const IDLE_MS = 30_000;

/** The operation part of a StreamOperation (its oneof). */
export type Operation = NonNullable<MessageInitShape<typeof StreamOperationSchema>["operation"]>;

/**
 * The error of an operation in flight when its operation stream broke:
 * Unavailable (retryable), its outcome unknown.
 */
export class StreamBrokeError extends CoordinatorError {
  constructor(cause: unknown) {
    const why = cause instanceof Error ? cause.message : cause === undefined ? "the stream ended" : inspect(cause);
    super(`coordinator: Unavailable: the operation stream broke with the operation in flight: ${why}`, {
      code: Code.Unavailable,
      cause,
    });
  }
}

/** The outcome of an operation: its result (a response or a google.rpc.Status) or an error, and when it was sent. */
export type OpDone = (res: StreamResult | undefined, err: unknown, sent: number) => void;

interface Op {
  id: bigint;
  op: StreamOperation;
  size: number;
  sent: number;
  state: "queued" | "sent" | "finished";
  done: OpDone;
  /** The coordinator does not answer it (a cancel): it is finished once written. */
  noResult?: boolean;
}

/** statusError turns a result's google.rpc.Status into the error the unary call throws. */
export function statusError(st: Status): CoordinatorError {
  const code = (st.code in Code ? st.code : Code.Unknown) as Code;
  const err = new ConnectError(st.message, code);
  for (const any of st.details) {
    const slash = any.typeUrl.lastIndexOf("/");
    err.details.push({ type: any.typeUrl.slice(slash + 1), value: any.value });
  }
  return decodeError(err) as CoordinatorError;
}

type ResultCase = Exclude<NonNullable<StreamResult["result"]["case"]>, "error">;
type ResultValue<K extends ResultCase> = Extract<StreamResult["result"], { case: K }> extends { value: infer V } ? V : never;
type OperationValue<K extends ResultCase> = Extract<Operation, { case: K }> extends { value: infer V } ? V : never;

/** What becomes of an operation whose caller left while it was in flight. */
export type Late = (res: StreamResult | undefined, err: unknown) => void;

/** resultOf returns the value of res's expected case, throwing the error it carries instead. */
export function resultOf<K extends ResultCase>(res: StreamResult, kind: K): ResultValue<K> {
  const r = res.result;
  if (r.case === "error") throw statusError(r.value);
  if (r.case !== kind) {
    throw new CoordinatorError(`coordinator: Internal: a ${kind} operation was answered with ${r.case ?? "nothing"}`, {
      code: Code.Internal,
    });
  }
  return r.value as ResultValue<K>;
}

/** One open stream: its request side. */
class Conn implements AsyncIterable<StreamRequest> {
  readonly abort = new AbortController();
  private waiting: ((r: IteratorResult<StreamRequest>) => void) | undefined;
  private ended = false;
  private flushing = false;

  constructor(private readonly s: StreamTransport) {}

  /** poke tells a waiting request side that operations are queued: it takes them after the current tick. */
  poke(): void {
    if (!this.waiting || this.flushing) return;
    this.flushing = true;
    setImmediate(() => {
      this.flushing = false;
      const w = this.waiting;
      if (!w) return;
      const req = this.s.take(this);
      if (req) {
        this.waiting = undefined;
        w({ value: req, done: false });
      }
    });
  }

  end(): void {
    this.ended = true;
    const w = this.waiting;
    this.waiting = undefined;
    w?.({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamRequest> {
    return {
      next: (): Promise<IteratorResult<StreamRequest>> => {
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        const req = this.s.take(this);
        if (req) return Promise.resolve({ value: req, done: false });
        return new Promise((resolve) => {
          this.waiting = resolve;
        });
      },
      return: (): Promise<IteratorResult<StreamRequest>> => {
        this.end();
        return Promise.resolve({ value: undefined, done: true });
      },
      // Connect requires it (makeIterableAbortable): it aborts the request side with throw.
      throw: (e?: unknown): Promise<IteratorResult<StreamRequest>> => {
        this.end();
        return Promise.reject(e instanceof Error ? e : new Error(String(e)));
      },
    };
  }
}

export class StreamTransport {
  private closed = false;
  private queue: Op[] = [];
  private readonly inflight = new Map<bigint, Op>();
  private nextId = 0n;
  private running = false;
  private cur: Conn | undefined;
  private idleTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly api: CoordinatorApi,
    private readonly closeSignal: AbortSignal,
    private readonly onWarn: (msg: string, err?: unknown) => void,
  ) {}

  /** Whether the stream is open now. */
  get open(): boolean {
    return this.cur !== undefined;
  }

  /**
   * submit queues operation; done gets its outcome once (a cancel has
   * none). It throws ClientClosedError (then done is never called).
   */
  submit(operation: Operation, done: OpDone): Op {
    if (this.closed) throw new ClientClosedError();
    const id = ++this.nextId;
    const op = create(StreamOperationSchema, { id, operation });
    const size = toBinary(StreamOperationSchema, op).length;
    const o: Op = { id, op, size, sent: 0, state: "queued", done, noResult: operation.case === "cancel" };
    this.queue.push(o);
    if (this.cur) this.cur.poke();
    this.ensureStream();
    return o;
  }

  /**
   * call runs operation and resolves with its result and send time, until
   * signal aborts (rejecting with its reason) or timeoutMs passes (rejecting
   * with DeadlineExceeded). An operation that was sent by then is left to
   * finish: late gets its outcome, e.g. to give up a lease granted to an
   * acquisition nobody waits for. An operation given late (an acquire or
   * campaign) is also cancelled then (a cancel operation, which the
   * coordinator ignores unless it waits), so that it leaves the
   * coordinator's queue at once and the waiters behind it need not wait for
   * its grant and release; late still gets its outcome (a Canceled error,
   * or the grant when that came first).
   */
  call(operation: Operation, signal: AbortSignal, timeoutMs: number, late?: Late): Promise<{ res: StreamResult; sent: number }> {
    return new Promise((resolve, reject) => {
      let settled = false;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const cleanup = (): void => {
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
      };
      const o = this.submit(operation, (res, err, sent) => {
        if (settled) {
          late?.(res, err);
          return;
        }
        cleanup();
        if (err !== undefined || !res) reject(err !== undefined ? decodeError(err) : new StreamBrokeError(undefined));
        else resolve({ res, sent });
      });
      const giveUp = (err: unknown): void => {
        if (settled) return;
        cleanup();
        if (o.state === "queued") {
          o.state = "finished"; // never sent: forget it
          const i = this.queue.indexOf(o);
          if (i >= 0) this.queue.splice(i, 1);
        } else if (o.state === "sent" && late !== undefined && !this.closed) {
          this.submit({ case: "cancel", value: o.id }, () => undefined);
        }
        reject(decodeError(err));
      };
      const onAbort = (): void => giveUp(signal.reason);
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs > 0 && Number.isFinite(timeoutMs)) {
        timer = setTimeout(
          () =>
            giveUp(
              new CoordinatorError(`coordinator: DeadlineExceeded: no answer on the operation stream within ${timeoutMs}ms`, {
                code: Code.DeadlineExceeded,
              }),
            ),
          timeoutMs,
        );
      }
    });
  }

  /** run is call for an operation of kind, resolving with its result's value (throwing the error it carries instead). */
  async run<K extends ResultCase>(
    kind: K,
    value: OperationValue<K>,
    signal: AbortSignal,
    timeoutMs: number,
    late?: Late,
  ): Promise<{ value: ResultValue<K>; sent: number }> {
    const { res, sent } = await this.call({ case: kind, value } as Operation, signal, timeoutMs, late);
    return { value: resultOf(res, kind), sent };
  }

  /** take moves the next batch of queued operations in flight on conn, stamped as sent now; undefined when none. */
  take(conn: Conn): StreamRequest | undefined {
    if (this.cur !== conn || this.queue.length === 0) return undefined;
    const t = now();
    let n = 0;
    let bytes = 0;
    while (n < this.queue.length && n < MAX_OPS && (n === 0 || bytes + this.queue[n]!.size <= MAX_BATCH_BYTES)) {
      bytes += this.queue[n]!.size;
      n++;
    }
    const batch = this.queue.splice(0, n);
    for (const o of batch) {
      if (o.noResult) {
        o.state = "finished";
        continue;
      }
      o.state = "sent";
      o.sent = t;
      this.inflight.set(o.id, o);
    }
    this.armIdle(conn);
    return create(StreamRequestSchema, { operations: batch.map((o) => o.op) });
  }

  /** close fails what is queued or in flight with ClientClosedError and ends the stream (giving up the coordinator's waits). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.idleTimer);
    const conn = this.cur;
    this.cur = undefined;
    if (conn) {
      conn.end();
      conn.abort.abort();
    }
    this.fail(new ClientClosedError());
  }

  private finish(o: Op, res: StreamResult | undefined, err: unknown): void {
    if (o.state === "finished") return;
    o.state = "finished";
    try {
      o.done(res, err, o.sent);
    } catch (e) {
      this.onWarn("coordinator: an operation stream result handler failed", e);
    }
  }

  /** armIdle (re)starts the idle timer of conn: it closes the stream when nothing is queued or in flight. */
  private armIdle(conn: Conn): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (this.cur !== conn) return;
      if (this.queue.length === 0 && this.inflight.size === 0) {
        this.cur = undefined; // what is queued from now on waits for the next stream
        conn.end();
        conn.abort.abort();
      } else {
        this.armIdle(conn);
      }
    }, IDLE_MS);
    this.idleTimer.unref?.();
  }

  private ensureStream(): void {
    if (this.running || this.closed) return;
    this.running = true;
    // Opened after this tick: what else is queued in it goes in the first message.
    void new Promise<void>((r) => setImmediate(r))
      .then(() => this.serve())
      .finally(() => {
        this.running = false;
        if (!this.closed && this.queue.length > 0) this.ensureStream();
      });
  }

  /** serve opens a stream while operations are queued, reconnecting with backoff. */
  private async serve(): Promise<void> {
    const b = callBackoff();
    while (!this.closed && this.queue.length > 0) {
      const conn = new Conn(this);
      this.cur = conn;
      this.armIdle(conn);
      let answered = false;
      let err: unknown;
      try {
        const responses = this.api.stream(conn, { signal: conn.abort.signal, timeoutMs: 0 });
        for await (const resp of responses) {
          answered = true;
          for (const r of resp.results) {
            const o = this.inflight.get(r.id);
            if (!o) continue;
            this.inflight.delete(r.id);
            this.finish(o, r, undefined);
          }
        }
      } catch (e) {
        err = decodeError(e);
      }
      if (this.cur === conn) this.cur = undefined;
      const stopped = conn.abort.signal.aborted; // by close() or as idle
      conn.end();
      if (this.closed) return;
      if (answered) b.reset();
      if (this.inflight.size === 0 && (err === undefined || stopped)) {
        // Closed as idle, or cleanly by the coordinator: look at the queue
        // again (after a backoff when the coordinator ended a stream that
        // answered nothing, so as not to spin).
        if (!stopped && !answered && this.queue.length > 0) await sleep(b.delay(), this.closeSignal);
        continue;
      }
      this.fail(err);
      if (this.closed) return;
      if (this.queue.length > 0) {
        this.onWarn("coordinator: operation stream ended; reconnecting", err);
        const retryAfter = err instanceof CoordinatorError ? (err.retryAfter ?? 0) : 0;
        await sleep(Math.max(b.delay(), retryAfter), this.closeSignal);
      }
    }
  }

  /**
   * fail ends the operations in flight after the stream failed with err,
   * and the queued ones too when they cannot go on the next stream: the
   * client closed, or the coordinator refuses the stream itself
   * (Unauthenticated, PermissionDenied, Unimplemented…).
   */
  private fail(err: unknown): void {
    let inflightErr: unknown;
    let queuedErr: unknown;
    if (err instanceof ClientClosedError) {
      inflightErr = queuedErr = err;
    } else if (err !== undefined && !isTransient(err) && !outcomeUnknown(err)) {
      inflightErr = queuedErr = err;
    } else {
      inflightErr = new StreamBrokeError(err);
    }
    const ops = [...this.inflight.values()];
    this.inflight.clear();
    if (queuedErr !== undefined) {
      ops.push(...this.queue);
      this.queue = [];
    }
    for (const o of ops) this.finish(o, undefined, queuedErr !== undefined && o.state === "queued" ? queuedErr : inflightErr);
  }
}
