// Renewals: renews every lease and leadership of a Client that has a TTL of
// its own, as renew operations on the Client's operation stream (stream.ts)
// while it is usable, else over one KeepAlive stream (unary mode, or a
// coordinator without Stream). The timers and the outcome handling are the same.
//
// Each lease has two timers: its next renewal (about ttl/3 after the last
// successful one was sent, or a backoff after a failure) and its local
// deadline (the send time of the last successful grant or renewal + ttl − a
// drift margin). A due renewal is sent on the stream with a fresh id; the
// response echoing that id renews the lease (from the time the request was
// sent), ends it as lost (gone for good), or reports a transient failure,
// retried with backoff (honouring retry_after) while the lease is valid. A
// lease still unrenewed at its deadline ends as expired there, whatever is
// in flight: before the coordinator's own expiry, so nobody else can have
// been granted the name yet.
//
// The stream is opened when a first renewal is due, reopened with backoff
// when it breaks (the renewals in flight on it are sent again at once), and
// closed when the Client holds nothing.

import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  KeepAliveRequestSchema,
  type KeepAliveRequest,
  type KeepAliveResponse,
} from "./gen/coordinator/v1/coordinator_pb.js";
import { ClientClosedError, CoordinatorError, decodeError, msOf, renewalError } from "./errors.js";
import type { LeaseEndedError } from "./errors.js";
import type { LeaseCore, LeaseKeeper } from "./lease.js";
import { endsLease } from "./rules.js";
import { AsyncQueue, callBackoff, driftMargin, now, renewalBackoff, sleep } from "./util.js";
import type { CoordinatorApi } from "./api.js";
import { StreamBrokeError, UseUnaryError, statusError, type StreamTransport } from "./stream.js";
import type { StreamResult } from "./gen/coordinator/v1/coordinator_pb.js";

interface Conn {
  queue: AsyncQueue<KeepAliveRequest>;
  abort: AbortController;
}

export class Renewals implements LeaseKeeper {
  private readonly leases = new Set<LeaseCore>();
  private readonly inflight = new Map<bigint, { l: LeaseCore; conn: Conn }>();
  private pending: LeaseCore[] = [];
  private conn: Conn | undefined;
  private running = false;
  private nextId = 1n;
  private closed = false;

  constructor(
    private readonly api: CoordinatorApi,
    readonly closeSignal: AbortSignal,
    private readonly onWarn: (msg: string, err?: unknown) => void,
    /** Where renewals go as renew operations while it is usable; KeepAlive otherwise. */
    private readonly transport?: StreamTransport,
  ) {}

  /** How many leases are being renewed. */
  get size(): number {
    return this.leases.size;
  }

  /** add starts renewing l. */
  add(l: LeaseCore): void {
    if (this.closed) throw new ClientClosedError();
    this.leases.add(l);
    this.schedule(l);
  }

  /** end ends l with err unless it ended already; it returns how l had ended before, if it had. */
  end(l: LeaseCore, err: LeaseEndedError): LeaseEndedError | undefined {
    if (l.ended) return l.ended;
    clearTimeout(l.renewTimer);
    clearTimeout(l.deadlineTimer);
    l.renewTimer = l.deadlineTimer = undefined;
    this.leases.delete(l);
    if (l.inflight !== undefined) {
      this.inflight.delete(l.inflight);
      l.inflight = undefined;
    }
    l.finish(err);
    if (this.leases.size === 0) this.stopStream();
    return undefined;
  }

  /**
   * renewed records a successful renewal of l sent at sent (by KeepAlive or
   * a proclamation), and reports whether l is still held. The coordinator
   * renews only a lease it still holds under the same token, so a renewal
   * answered after l's local deadline (the event loop was blocked, and its
   * deadline timer has not run yet) still proves l was held throughout: l
   * stays held when the new deadline, counted from sent, is still ahead, and
   * ends as expired otherwise.
   */
  renewed(l: LeaseCore, sent: number, ttl: number): boolean {
    if (l.ended) return false;
    if (now() >= sent + ttl - driftMargin(ttl)) {
      this.end(l, this.expired(l));
      return false;
    }
    // An older renewal answered after a newer one (a proclamation) must not
    // move the deadline back.
    if (sent >= l.confirmedAt) l.granted(sent, ttl);
    this.schedule(l);
    return true;
  }

  /** close ends every lease as closed, stops the stream and returns the leases that were held. */
  close(): LeaseCore[] {
    this.closed = true;
    const held = [...this.leases];
    for (const l of held) this.end(l, l.endError("closed", "the client was closed"));
    this.stopStream();
    return held;
  }

  private expired(l: LeaseCore): LeaseEndedError {
    const why = l.lastErr ? `the last renewal failed: ${l.lastErr}` : "no renewal was answered in time";
    return l.endError("expired", why);
  }

  /** schedule sets l's timers: its deadline, and its renewal unless one is in flight. */
  private schedule(l: LeaseCore): void {
    clearTimeout(l.renewTimer);
    clearTimeout(l.deadlineTimer);
    const t = now();
    const gen = ++l.deadlineGen;
    l.deadlineTimer = setTimeout(() => {
      // Checked in the check phase, after the poll phase has handled the
      // answers that arrived meanwhile: when the event loop was blocked past
      // the deadline, a renewal answered in time is not taken for silence.
      setImmediate(() => {
        if (l.ended || gen !== l.deadlineGen) return; // renewed meanwhile
        if (now() >= l.deadline) this.end(l, this.expired(l));
        else this.schedule(l); // the timer fired early
      });
    }, Math.max(0, Math.ceil(l.deadline - t)));
    l.renewTimer = undefined;
    if (l.inflight === undefined && l.nextRenew < l.deadline) {
      l.renewTimer = setTimeout(() => {
        l.renewTimer = undefined;
        if (!l.ended && l.inflight === undefined) this.send(l);
      }, Math.max(0, l.nextRenew - t));
    }
  }

  private send(l: LeaseCore): void {
    if (this.transport?.usable && this.sendOnStream(l)) return;
    if (this.conn) {
      this.stamp(l, this.conn);
    } else {
      if (!this.pending.includes(l)) this.pending.push(l);
      this.ensureStream();
    }
  }

  /**
   * sendOnStream queues l's renewal as a renew operation on the Client's
   * operation stream; false when the stream refuses it (closed, or the
   * coordinator lacks it), for KeepAlive.
   */
  private sendOnStream(l: LeaseCore): boolean {
    const tag = this.nextId++; // l.inflight's value while the operation is in flight
    try {
      this.transport!.submit(
        { case: "renew", value: { name: l.name, holder: l.holder, token: l.token, ttl: durationFromMs(Math.round(l.ttl)) } },
        (res, err, sent) => this.streamAnswered(l, tag, res, err, sent),
      );
    } catch {
      return false;
    }
    l.inflight = tag;
    return true;
  }

  /** streamAnswered applies the outcome of l's renew operation tagged tag. */
  private streamAnswered(l: LeaseCore, tag: bigint, res: StreamResult | undefined, err: unknown, sent: number): void {
    if (l.ended || l.inflight !== tag) return;
    l.inflight = undefined;
    if (err instanceof StreamBrokeError || err instanceof UseUnaryError) {
      // Sent again at once: on the next stream, or over KeepAlive.
      l.lastErr = err.message;
      l.nextRenew = now();
      this.schedule(l);
      return;
    }
    if (err instanceof ClientClosedError) return; // close() ends the lease
    if (err === undefined && res?.result.case === "error") err = statusError(res.result.value);
    if (err !== undefined) {
      const e = decodeError(err);
      if (e instanceof CoordinatorError && endsLease(e.reason)) {
        // A reason the proto marks ends_lease: LEASE_NOT_HELD, INVALID_FIELD, PERMISSION_DENIED.
        this.end(l, l.endError("lost", `the coordinator refused its renewal: ${e.message}`, e));
        return;
      }
      // STORE_UNAVAILABLE, DATA_LOSS_QUARANTINE, the stream refused…: this
      // renewal failed; the lease holds until its deadline. Try again.
      this.failed(l, e.message, e instanceof CoordinatorError ? e.retryAfter : undefined);
      return;
    }
    if (res?.result.case !== "renew" || !res.result.value.lease) {
      this.failed(l, `a renew operation was answered with ${res?.result.case ?? "nothing"}`, undefined);
      return;
    }
    const granted = msOf(res.result.value.lease.ttl);
    this.renewed(l, sent, granted !== undefined && granted > 0 ? granted : l.ttl);
  }

  /** stamp sends l's renewal on conn now, with a fresh id. */
  private stamp(l: LeaseCore, conn: Conn): void {
    const id = this.nextId++;
    l.inflight = id;
    l.sentAt = now();
    this.inflight.set(id, { l, conn });
    conn.queue.push(
      create(KeepAliveRequestSchema, {
        id,
        name: l.name,
        holder: l.holder,
        token: l.token,
        ttl: durationFromMs(Math.round(l.ttl)),
      }),
    );
  }

  private handle(conn: Conn, resp: KeepAliveResponse): void {
    const entry = this.inflight.get(resp.id);
    if (!entry || entry.conn !== conn) return;
    this.inflight.delete(resp.id);
    const l = entry.l;
    if (l.ended || l.inflight !== resp.id) return;
    l.inflight = undefined;
    const r = resp.result;
    switch (r.case) {
      case "lease": {
        const granted = msOf(r.value.ttl);
        this.renewed(l, l.sentAt, granted !== undefined && granted > 0 ? granted : l.ttl);
        return;
      }
      case "lost": {
        const cause = renewalError(r.value.reason, r.value.code, r.value.message);
        this.end(l, l.endError("lost", `the coordinator refused its renewal: ${cause.message}`, cause));
        return;
      }
      case "failed": {
        const retryAfter = msOf(r.value.retryAfter);
        const cause = renewalError(r.value.reason, r.value.code, r.value.message, retryAfter);
        this.failed(l, cause.message, retryAfter);
        return;
      }
      default:
        // An answer this client does not understand: retry as after a failure.
        this.failed(l, "an empty KeepAlive response", undefined);
    }
  }

  /** failed schedules another try of a renewal that failed transiently. */
  private failed(l: LeaseCore, why: string, retryAfter: number | undefined): void {
    l.retry ??= renewalBackoff(l.ttl);
    l.lastErr = why;
    l.nextRenew = now() + Math.max(l.retry.delay(), retryAfter ?? 0);
    this.schedule(l);
  }

  private ensureStream(): void {
    if (this.running || this.closed) return;
    this.running = true;
    void this.runStream().finally(() => {
      this.running = false;
      if (!this.closed && this.pending.length > 0 && this.leases.size > 0) this.ensureStream();
    });
  }

  private stopStream(): void {
    const conn = this.conn;
    this.conn = undefined;
    this.pending = [];
    if (conn) {
      conn.queue.end();
      conn.abort.abort();
    }
  }

  /** runStream keeps a KeepAlive stream open, reconnecting with backoff, while leases are held. */
  private async runStream(): Promise<void> {
    const b = callBackoff();
    while (!this.closed && this.leases.size > 0) {
      const conn: Conn = { queue: new AsyncQueue(), abort: new AbortController() };
      this.conn = conn;
      const pending = this.pending;
      this.pending = [];
      for (const l of pending) {
        if (!l.ended && l.inflight === undefined) this.stamp(l, conn);
      }
      let answered = false;
      let err: unknown;
      try {
        const responses = this.api.keepAlive(conn.queue, {
          // close() stops the stream too (stopStream).
          signal: conn.abort.signal,
          timeoutMs: 0,
        });
        for await (const resp of responses) {
          answered = true;
          this.handle(conn, resp);
        }
      } catch (e) {
        err = decodeError(e);
      }
      if (this.conn === conn) this.conn = undefined;
      conn.queue.end();
      this.dropInflight(conn, err);
      if (this.closed || this.leases.size === 0) break;
      if (!conn.abort.signal.aborted) {
        // Broken, not stopped by stopStream (which a new lease may have followed).
        this.onWarn("coordinator: KeepAlive stream broke; reconnecting", err);
        if (answered) b.reset();
        await sleep(b.delay(), this.closeSignal);
      }
      // Reconnect when a renewal waits; otherwise the next due renewal does.
      if (this.pending.length === 0) break;
    }
  }

  /** dropInflight sends the renewals that were in flight on a broken stream again, on the next one. */
  private dropInflight(conn: Conn, err: unknown): void {
    let why = "the KeepAlive stream broke";
    if (err instanceof CoordinatorError) why += `: ${err.message}`;
    for (const [id, entry] of this.inflight) {
      if (entry.conn !== conn) continue;
      this.inflight.delete(id);
      const l = entry.l;
      if (l.inflight !== id || l.ended) continue;
      l.inflight = undefined;
      l.lastErr = why;
      l.nextRenew = now();
      clearTimeout(l.renewTimer);
      l.renewTimer = undefined;
      if (!this.pending.includes(l)) this.pending.push(l);
    }
  }
}
