// Sessions: a liveness on the coordinator that every lease, share and
// leadership of a Client is attached to, as etcd's concurrency.Session.
//
// This is the client's one renewal path: Session.keepAlive sends a
// renew_session operation on the Client's operation stream about every
// ttl/3 (ClientRules.renewals_per_ttl, with its jitter) after the last
// successful renewal was sent, and retries a failed one after a backoff in
// proportion to the TTL (ClientRules.renewal_retry_*). Nothing renews a
// lease on its own. A session's local deadline is the send time of its last
// successful renewal + ttl − the validity margin, checked by a timer of its
// own, whatever is in flight. A renewal refused for good (a reason marked
// ends_lease: the session expired, was closed or is not found; or
// PermissionDenied) loses it; a deadline passed unrenewed expires it.
// Either way every attached lease ends at once, its LeaseEndedError of the
// same kind, caused by the session's SessionEndedError: before the
// coordinator could grant the names to anyone else.

import { setMaxListeners } from "node:events";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { CoordinatorApi } from "./api.js";
import { ClientClosedError, Code, CoordinatorError, SessionEndedError, decodeError, isTransient, msOf } from "./errors.js";
import type { LeaseEndKind, LeaseEndedError } from "./errors.js";
import type { HeldCore } from "./lease.js";
import { endsLease } from "./rules.js";
import type { StreamTransport } from "./stream.js";
import { callBackoff, driftMargin, linkSignals, now, renewalBackoff, renewalDelay, sleep, type Backoff } from "./util.js";

/** What a Session needs of its Client. */
export interface SessionContext {
  api: CoordinatorApi;
  transport: StreamTransport;
  /** Aborts when the Client closes. */
  closing: AbortSignal;
  callTimeoutMs: number;
  warn: (message: string, err?: unknown) => void;
}

/**
 * Session is a liveness on the coordinator that locks, semaphore and
 * read-write lock shares, groups and leaderships attach to: one renewal,
 * about every ttl/3, keeps every attached lease, and they all end
 * together. When the session ends (close(), lost: a renewal refused;
 * expired: none answered before its deadline; or its Client closed) its
 * signal aborts and every attached lease's signal aborts with it. close()
 * releases them all on the coordinator in one call. Its id is a capability
 * of the credential its Client uses.
 *
 * Make one with client.session({ ttl }) and pass it as the session option;
 * client.defaultSession() is the one the Client attaches to otherwise.
 */
export class Session {
  private ttlMs: number;
  private deadlineAt = 0;
  private confirmedAt = 0;
  private endedWith: SessionEndedError | undefined;
  private readonly controller = new AbortController();
  private readonly leases = new Set<HeldCore>();
  private deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  /** Why the last renewal failed; empty after a success. */
  private lastErr = "";

  /** @internal */
  constructor(
    /** @internal The Sessions of the Client that made it: only its acquisitions may attach. */
    readonly owner: object,
    /** The session's id on the coordinator. */
    readonly id: string,
    ttl: number,
    sent: number,
    private readonly ctx: SessionContext,
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
  /** How many leases are attached now (each of a group's leases counts). */
  get size(): number {
    let n = 0;
    for (const l of this.leases) n += l.leaseCount;
    return n;
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
      if (prior.kind === "expired") await this.closeOnCoordinator(signal).catch(() => undefined);
      return false;
    }
    const b = callBackoff();
    for (;;) {
      try {
        await this.closeOnCoordinator(signal);
        return true;
      } catch (e) {
        const err = decodeError(e);
        if (isTransient(err) && !signal.aborted && (await sleep(b.delay(), signal))) continue;
        throw err;
      }
    }
  }

  toString(): string {
    return `session ${this.id} (ttl ${this.ttlMs}ms, ${this.size} leases)`;
  }

  /** @internal attach makes l a lease (or group) of the session: it ends with it. */
  attach(l: HeldCore): void {
    if (!this.endedWith && now() >= this.deadlineAt) this.expire(this.lastErr);
    if (this.endedWith) throw this.endedWith;
    this.leases.add(l);
  }

  /**
   * @internal detach ends l with err (released through this Client) without
   * ending the session; it returns how l had ended before, if it had.
   */
  detach(l: HeldCore, err: LeaseEndedError): LeaseEndedError | undefined {
    if (l.ended) return l.ended;
    this.leases.delete(l);
    l.finish(err);
    return undefined;
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

  /** @internal closeOnCoordinator is the CloseSession call. */
  async closeOnCoordinator(signal: AbortSignal): Promise<void> {
    await this.ctx.api.closeSession({ sessionId: this.id }, { signal, timeoutMs: this.ctx.callTimeoutMs });
  }

  /** finish ends the session and every attached lease with kind, unless it ended already. */
  private finish(kind: LeaseEndKind, detail: string, cause: unknown): void {
    if (this.endedWith) return;
    const err = new SessionEndedError(kind, this.id, detail, cause);
    this.endedWith = err;
    clearTimeout(this.deadlineTimer);
    const leases = [...this.leases];
    this.leases.clear();
    for (const l of leases) {
      if (!l.ended) l.finish(l.endError(kind, `its session ${this.id} ended: ${detail}`, err));
    }
    this.controller.abort(err);
  }

  private expire(lastErr: string): void {
    this.finish("expired", lastErr ? `the last renewal failed: ${lastErr}` : "no renewal was answered in time", undefined);
  }

  /** confirm records a successful renewal sent at sent. */
  private confirm(sent: number, ttl: number): void {
    this.ttlMs = ttl;
    this.confirmedAt = sent;
    this.deadlineAt = sent + ttl - driftMargin(ttl);
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
    this.deadlineTimer = setTimeout(
      () =>
        setImmediate(() => {
          if (this.endedWith) return;
          if (now() >= this.deadlineAt) this.expire(this.lastErr);
          else this.armDeadline();
        }),
      Math.max(0, Math.ceil(this.deadlineAt - now())),
    );
  }

  /** keepAlive renews the session over the operation stream about every ttl/3 until it ends. */
  private async keepAlive(): Promise<void> {
    let retry: Backoff | undefined;
    let next = this.confirmedAt + renewalDelay(this.ttlMs);
    const stop = linkSignals(this.signal, this.ctx.closing);
    try {
      while (!this.endedWith) {
        if (!(await sleep(next - now(), stop.signal)) || this.endedWith) return;
        try {
          const { value, sent } = await this.ctx.transport.run("renewSession", { sessionId: this.id }, stop.signal, this.ctx.callTimeoutMs);
          if (this.endedWith) return;
          const granted = msOf(value.session?.ttl);
          const ttl = granted !== undefined && granted > 0 ? granted : this.ttlMs;
          if (now() >= sent + ttl - driftMargin(ttl)) {
            // Answered after the validity it gave had run out (the event loop was blocked).
            this.expire(this.lastErr);
            return;
          }
          if (sent >= this.confirmedAt) this.confirm(sent, ttl);
          retry = undefined;
          this.lastErr = "";
          next = sent + renewalDelay(ttl);
        } catch (e) {
          if (this.endedWith || e instanceof ClientClosedError) return;
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
          this.ctx.warn(`coordinator: renewing session ${this.id} failed; retrying`, err);
        }
      }
    } finally {
      stop.dispose();
    }
  }
}

/**
 * Sessions are a Client's sessions: the default one, made on first need
 * and replaced once it ended, and the explicit ones; close() closes them
 * all.
 */
export class Sessions {
  private defaultSession: Session | undefined;
  private creatingDefault: Promise<Session> | undefined;
  private readonly live = new Set<Session>();

  constructor(
    private readonly ctx: SessionContext,
    /** The TTL of the default session. */
    readonly ttl: number,
  ) {}

  /** create creates a session of ttl and tracks it until it ends. */
  async create(ttl: number, signal: AbortSignal | undefined): Promise<Session> {
    if (this.ctx.closing.aborted) throw new ClientClosedError();
    const sent = now();
    const linked = linkSignals(signal, this.ctx.closing);
    let id: string;
    let granted: number | undefined;
    try {
      const resp = await this.ctx.api.createSession({ ttl: durationFromMs(ttl) }, { signal: linked.signal, timeoutMs: this.ctx.callTimeoutMs });
      id = resp.session?.id ?? "";
      granted = msOf(resp.session?.ttl);
    } finally {
      linked.dispose();
    }
    if (!id) throw new CoordinatorError("coordinator: Internal: CreateSession answered no session id", { code: Code.Internal });
    const s = new Session(this, id, granted !== undefined && granted > 0 ? granted : ttl, sent, this.ctx);
    if (this.ctx.closing.aborted) {
      s.closedWithClient();
      await s.closeOnCoordinator(AbortSignal.timeout(1000)).catch(() => undefined);
      throw new ClientClosedError();
    }
    this.live.add(s);
    s.signal.addEventListener("abort", () => this.live.delete(s), { once: true });
    return s;
  }

  /** default returns the live default session, creating one (one creation for concurrent callers). */
  async default(): Promise<Session> {
    if (this.defaultSession && !this.defaultSession.ended) return this.defaultSession;
    this.creatingDefault ??= this.create(this.ttl, undefined)
      .then((s) => (this.defaultSession = s))
      .finally(() => (this.creatingDefault = undefined));
    return this.creatingDefault;
  }

  /**
   * resolve returns the session an acquisition attaches to: given (it must
   * be one of these and live), or the default one, whose creation is
   * retried on transient errors until waitEnd. implicit: the default one.
   */
  async resolve(given: Session | undefined, signal: AbortSignal, waitEnd: number): Promise<{ session: Session; implicit: boolean }> {
    if (given !== undefined) {
      if (!(given instanceof Session) || given.owner !== this) throw new TypeError(`coordinator: ${String(given)} is not a session of this Client`);
      if (given.ended) throw given.ended;
      return { session: given, implicit: false };
    }
    const b = callBackoff();
    for (;;) {
      try {
        return { session: await this.default(), implicit: true };
      } catch (e) {
        const err = decodeError(e);
        if (this.ctx.closing.aborted) throw new ClientClosedError();
        if (!isTransient(err) || now() >= waitEnd) throw err;
        this.ctx.warn("coordinator: creating the default session failed; retrying", err);
        const retryAfter = err instanceof CoordinatorError ? (err.retryAfter ?? 0) : 0;
        if (!(await sleep(Math.min(Math.max(b.delay(), retryAfter), Math.max(0, waitEnd - now())), signal))) throw signal.reason;
      }
    }
  }

  /**
   * closeAll ends every session as closed with the Client and closes those
   * the coordinator may still hold, one CloseSession each, within signal.
   */
  async closeAll(signal: AbortSignal | undefined): Promise<void> {
    const open = [...this.live].filter((s) => s.closedWithClient());
    this.live.clear();
    if (signal === undefined) return;
    await Promise.allSettled(open.map((s) => s.closeOnCoordinator(signal)));
  }
}
