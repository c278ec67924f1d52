// Sessions: a liveness on the coordinator that leases attach to, as etcd's
// concurrency.Session. One renewal of the session, about every ttl/3, keeps
// every lease attached to it, and they all end with it.
//
// A session is renewed as a lease of its own is (keepalive.ts): its next
// renewal about ttl/3 after the last successful one was sent, a backoff
// after a failure; its local deadline the send time of the last successful
// renewal + ttl − a drift margin, checked by a timer of its own, whatever is
// in flight. A renewal refused for good (a reason marked ends_lease: the
// session expired, was closed or is not found; or PermissionDenied) loses
// it; a deadline passed unanswered expires it. Either way every attached
// lease ends at once, its LeaseEndedError of the same kind, caused by the
// session's SessionEndedError. The renewals go as renew_session operations
// on the Client's operation stream, or as unary RenewSession calls (the
// calls the Client gives a session decide).

import { setMaxListeners } from "node:events";
import { Code, CoordinatorError, SessionEndedError, decodeError, isTransient } from "./errors.js";
import type { LeaseEndKind, LeaseEndedError } from "./errors.js";
import type { LeaseCore, LeaseKeeper } from "./lease.js";
import { RENEWAL_JITTER, RENEWALS_PER_TTL, endsLease } from "./rules.js";
import { callBackoff, driftMargin, jitter, now, renewalBackoff, sleep, type Backoff } from "./util.js";

/** The calls a Session makes, through its Client. */
export interface SessionCalls {
  /** RenewSession (over the operation stream or unary): the ttl granted, and when the request was sent. */
  renew(sessionId: string, signal: AbortSignal, timeoutMs: number): Promise<{ ttl: number | undefined; sent: number }>;
  /** CloseSession: ends the session and releases its leases on the coordinator. */
  close(sessionId: string, signal: AbortSignal): Promise<void>;
}

/**
 * Session is a liveness on the coordinator that locks, semaphore and
 * read-write lock shares and leaderships attach to (the session option):
 * one renewal, about every ttl/3, keeps every attached lease, instead of
 * one each, and they all end together. When the session ends (close(),
 * lost: a renewal refused; expired: none answered before its deadline; or
 * its Client closed) its signal aborts and every attached lease's signal
 * aborts with it. close() releases them all on the coordinator in one
 * call. Its id is a capability of the credential its Client uses.
 *
 * Make one with client.session({ ttl }); client.defaultSession() is the
 * one the Client attaches to by default.
 */
export class Session implements LeaseKeeper {
  private ttlMs: number;
  private deadlineAt = 0;
  private confirmedAt = 0;
  private endedWith: SessionEndedError | undefined;
  private readonly controller = new AbortController();
  /** Ends the renewals: aborted when the session ends. */
  private readonly stop = new AbortController();
  private readonly leases = new Set<LeaseCore>();
  private deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  private deadlineGen = 0;
  /** Why the last renewal failed; empty after a success. */
  private lastErr = "";

  /** @internal */
  constructor(
    /** @internal The Client that made it: only its acquisitions may attach. */
    readonly owner: object,
    /** The session's id on the coordinator. */
    readonly id: string,
    ttl: number,
    sent: number,
    private readonly calls: SessionCalls,
    readonly closeSignal: AbortSignal,
    private readonly callTimeoutMs: number,
    private readonly onWarn: (message: string, err?: unknown) => void,
  ) {
    this.ttlMs = ttl;
    setMaxListeners(0, this.controller.signal);
    this.confirm(sent, ttl);
    void this.keepAlive();
  }

  /** How long each renewal keeps the session (and its leases), in milliseconds. */
  get ttl(): number {
    return this.ttlMs;
  }
  /**
   * When the session, and every lease attached to it, stops being valid
   * unless a renewal is answered before, on the performance.now() clock:
   * the send time of the last successful renewal, plus the ttl, minus a
   * drift margin. The coordinator's expiry is later.
   */
  get deadline(): number {
    return this.deadlineAt;
  }
  /** When the last successful renewal (or the creation) was sent (performance.now() ms). */
  get renewedAt(): number {
    return this.confirmedAt;
  }
  /** Milliseconds of validity left; 0 once the session ended. */
  remaining(): number {
    return this.endedWith ? 0 : Math.max(0, this.deadlineAt - now());
  }
  /** Aborted the moment the session ends; its reason is a SessionEndedError. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }
  /** Why the session ended, or undefined while it lives. */
  get ended(): SessionEndedError | undefined {
    return this.endedWith;
  }
  /** How many leases are attached now. */
  get size(): number {
    return this.leases.size;
  }

  /**
   * close ends the session and every lease attached to it (their signals
   * abort with kind "released") and closes it on the coordinator, which
   * releases them all at once (waiters are granted at once), retrying
   * transient errors for up to opts.timeoutMs (default 5 s). It resolves
   * true when the coordinator closed it now, false when it had already
   * ended (lost, expired, closed, or its Client closed). Calling it again
   * resolves false.
   */
  async close(opts: { timeoutMs?: number } = {}): Promise<boolean> {
    const prior = this.endedWith;
    this.finish("released", "closed", undefined);
    const signal = AbortSignal.timeout(opts.timeoutMs ?? 5000);
    if (prior) {
      // Expired here only: the coordinator may keep it (and its leases) yet.
      if (prior.kind === "expired") await this.calls.close(this.id, signal).catch(() => undefined);
      return false;
    }
    const b = callBackoff();
    for (;;) {
      try {
        await this.calls.close(this.id, signal);
        return true;
      } catch (e) {
        const err = decodeError(e);
        if (isTransient(err) && !signal.aborted && (await sleep(b.delay(), signal))) continue;
        throw err;
      }
    }
  }

  toString(): string {
    return `session ${this.id} (ttl ${this.ttlMs}ms, ${this.leases.size} leases)`;
  }

  /** @internal attach makes l a lease of the session: it ends with it, its deadline is the session's. */
  attach(l: LeaseCore): void {
    if (this.endedWith) throw this.endedWith;
    if (now() >= this.deadlineAt) {
      this.expire();
      throw this.endedWith!;
    }
    l.session = this;
    l.ttl = this.ttlMs;
    l.confirmedAt = this.confirmedAt;
    l.deadline = this.deadlineAt;
    this.leases.add(l);
  }

  /** @internal end ends l (released through this Client) without ending the session. */
  end(l: LeaseCore, err: LeaseEndedError): LeaseEndedError | undefined {
    if (l.ended) return l.ended;
    this.leases.delete(l);
    l.finish(err);
    return undefined;
  }

  /**
   * @internal A proclamation of an attached leadership renews the session
   * no more than any other call on it: l holds while the session does.
   */
  renewed(l: LeaseCore, _sent: number, _ttl: number): boolean {
    return !l.ended && now() < l.deadline;
  }

  /** @internal lose ends the session as lost with the coordinator's err (a call found it gone). */
  lose(err: unknown): void {
    const why = err instanceof Error ? err.message : String(err);
    this.finish("lost", `the coordinator refused it: ${why}`, err);
  }

  /** @internal closedWithClient ends the session as closed; it reports whether the coordinator may still hold it. */
  closedWithClient(): boolean {
    const prior = this.endedWith;
    this.finish("closed", "the client was closed", undefined);
    return prior === undefined || prior.kind === "expired";
  }

  /** finish ends the session and every attached lease with kind, unless it ended already. */
  private finish(kind: LeaseEndKind, detail: string, cause: unknown): void {
    if (this.endedWith) return;
    const err = new SessionEndedError(kind, this.id, detail, cause);
    this.endedWith = err;
    clearTimeout(this.deadlineTimer);
    this.stop.abort(err);
    const leases = [...this.leases];
    this.leases.clear();
    for (const l of leases) {
      if (!l.ended) l.finish(l.endError(kind, `its session ${this.id} ended: ${detail}`, err));
    }
    this.controller.abort(err);
  }

  private expire(lastErr?: string): void {
    this.finish("expired", lastErr ? `the last renewal failed: ${lastErr}` : "no renewal was answered in time", undefined);
  }

  /** confirm records a successful renewal sent at sent, and moves every attached lease's deadline with it. */
  private confirm(sent: number, ttl: number): void {
    this.ttlMs = ttl;
    this.confirmedAt = sent;
    this.deadlineAt = sent + ttl - driftMargin(ttl);
    for (const l of this.leases) {
      l.ttl = ttl;
      l.confirmedAt = sent;
      l.deadline = this.deadlineAt;
    }
    this.armDeadline();
  }

  /**
   * armDeadline (re)sets the deadline check. It runs in the check phase,
   * after the poll phase has handled the answers that arrived meanwhile:
   * when the event loop was blocked past the deadline, a renewal answered
   * in time is not taken for silence.
   */
  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    const gen = ++this.deadlineGen;
    this.deadlineTimer = setTimeout(
      () =>
        setImmediate(() => {
          if (this.endedWith || gen !== this.deadlineGen) return;
          if (now() >= this.deadlineAt) this.expire(this.lastErr);
          else this.armDeadline();
        }),
      Math.max(0, Math.ceil(this.deadlineAt - now())),
    );
  }

  /** keepAlive renews the session about every ttl/3 until it ends. */
  private async keepAlive(): Promise<void> {
    let retry: Backoff | undefined;
    let next = this.confirmedAt + jitter(this.ttlMs / RENEWALS_PER_TTL, RENEWAL_JITTER);
    while (!this.endedWith) {
      if (!(await sleep(next - now(), this.stop.signal)) || this.endedWith) return;
      try {
        const r = await this.calls.renew(this.id, this.stop.signal, this.callTimeoutMs);
        if (this.endedWith) return;
        const ttl = r.ttl !== undefined && r.ttl > 0 ? r.ttl : this.ttlMs;
        if (now() >= r.sent + ttl - driftMargin(ttl)) {
          // Answered after the validity it gave had run out (the event loop was blocked).
          this.expire(this.lastErr);
          return;
        }
        if (r.sent >= this.confirmedAt) this.confirm(r.sent, ttl);
        retry = undefined;
        this.lastErr = "";
        next = r.sent + jitter(ttl / RENEWALS_PER_TTL, RENEWAL_JITTER);
      } catch (e) {
        if (this.endedWith) return;
        const err = decodeError(e);
        if (err instanceof CoordinatorError && (endsLease(err.reason) || err.code === Code.PermissionDenied)) {
          this.lose(err);
          return;
        }
        // Unavailable, the stream broke, a quarantine…: this renewal failed;
        // the session holds until its deadline. Try again.
        retry ??= renewalBackoff(this.ttlMs);
        this.lastErr = err.message;
        const retryAfter = err instanceof CoordinatorError ? (err.retryAfter ?? 0) : 0;
        next = now() + Math.max(retry.delay(), retryAfter);
        this.onWarn(`coordinator: renewing session ${this.id} failed; retrying`, err);
      }
    }
  }
}
