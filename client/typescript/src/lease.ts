// Leases: a lock held through a Client, renewed in the background over the
// Client's operation (or KeepAlive) stream until it is released, lost or
// expires; or attached to a session, which keeps it alive instead.

import { setMaxListeners } from "node:events";
import { LeaseEndedError } from "./errors.js";
import type { LeaseEndKind } from "./errors.js";
import type { Backoff } from "./util.js";
import type { Session } from "./session.js";
import { RENEWAL_JITTER, RENEWALS_PER_TTL } from "./rules.js";
import { callBackoff, driftMargin, jitter, now, sleep } from "./util.js";
import { isTransient } from "./errors.js";

/** What a grant is, for messages. */
export type LeaseKind = "lock" | "semaphore" | "read lock" | "write lock" | "leadership";

/**
 * LeaseCore is what a Lease and a Leadership share: a grant on a name that
 * its keeper keeps alive: the Client's Renewals, or the session it is
 * attached to. Times are performance.now() milliseconds.
 */
export class LeaseCore {
  /** Local validity: the send time of the last successful grant or renewal + ttl − drift margin. */
  deadline = 0;
  /** When the last successful grant or renewal was sent. */
  confirmedAt = 0;
  /** When the next renewal is due. */
  nextRenew = 0;
  ttl = 0;
  /** Set when the lease ended; the AbortSignal's reason. */
  ended: LeaseEndedError | undefined;
  readonly controller = new AbortController();

  // The Renewals' bookkeeping.
  inflight: bigint | undefined;
  sentAt = 0;
  retry: Backoff | undefined;
  lastErr = "";
  renewTimer: ReturnType<typeof setTimeout> | undefined;
  deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  /** Tells the deadline check of the current schedule from older ones. */
  deadlineGen = 0;

  /** How much of the name's capacity the grant holds: 1 for a lock or leadership. */
  weight = 1;
  /** The session it is attached to; undefined for a lease of its own TTL. */
  session: Session | undefined;

  constructor(
    readonly kind: LeaseKind,
    readonly name: string,
    readonly holder: string,
    readonly token: bigint,
    ttl: number,
    sent: number,
  ) {
    setMaxListeners(0, this.controller.signal);
    this.granted(sent, ttl);
  }

  /** granted records a successful grant or renewal sent at sent. */
  granted(sent: number, ttl: number): void {
    this.ttl = ttl;
    this.confirmedAt = sent;
    this.deadline = sent + ttl - driftMargin(ttl);
    this.nextRenew = sent + jitter(ttl / RENEWALS_PER_TTL, RENEWAL_JITTER);
    this.retry = undefined;
    this.lastErr = "";
  }

  describe(): string {
    return `${this.kind} ${JSON.stringify(this.name)} (token ${this.token})`;
  }

  endError(kind: LeaseEndKind, detail: string, cause?: unknown): LeaseEndedError {
    return new LeaseEndedError(kind, this.name, this.token, detail, cause);
  }

  /** finish marks the lease ended with err and aborts its signal; its keeper's bookkeeping is the keeper's. */
  finish(err: LeaseEndedError): void {
    this.ended = err;
    this.controller.abort(err);
  }
}

/**
 * What a lease needs of what keeps it alive: its Client's Renewals (a
 * lease of its own TTL) or its Session.
 */
export interface LeaseKeeper {
  /** Ends l with err unless it ended already; returns how it had ended before, if it had. */
  end(l: LeaseCore, err: LeaseEndedError): LeaseEndedError | undefined;
  /**
   * renewed records that a request sent at sent (a proclamation) renewed l
   * for ttl, and reports whether l is still held.
   */
  renewed(l: LeaseCore, sent: number, ttl: number): boolean;
  /** Aborts when the Client closes. */
  readonly closeSignal: AbortSignal;
}

/**
 * releaseCore ends l as released, then gives it up on the coordinator with
 * call, retrying transient errors for up to timeoutMs. It resolves true when
 * the coordinator released it now, false when it had already ended (lost,
 * expired, closed, released) or the coordinator no longer held it.
 */
export async function releaseCore(
  keeper: LeaseKeeper,
  l: LeaseCore,
  call: (signal: AbortSignal) => Promise<boolean>,
  timeoutMs: number,
): Promise<boolean> {
  const prior = keeper.end(l, l.endError("released", ""));
  const signal = AbortSignal.timeout(timeoutMs);
  if (prior) {
    if (prior.kind === "expired") {
      // The coordinator may hold it yet: give it up there too.
      await call(signal).catch(() => false);
    }
    return false;
  }
  const b = callBackoff();
  for (;;) {
    try {
      return await call(signal);
    } catch (e) {
      if (isTransient(e) && !signal.aborted && (await sleep(b.delay(), signal))) continue;
      throw e;
    }
  }
}

/**
 * Lease is a lock held through a Client: an exclusive, time-bounded grant of
 * a name, renewed in the background about every ttl/3 until it is released
 * or lost.
 *
 * Check signal (or pass it on) before and while acting on what the lock
 * protects, and hand token to the protected resource so that it can refuse
 * the writes of an older holder.
 */
export class Lease {
  /** @internal */
  constructor(
    private readonly core: LeaseCore,
    private readonly keeper: LeaseKeeper,
    private readonly releaseCall: (signal: AbortSignal) => Promise<boolean>,
    private readonly releaseTimeoutMs: number,
  ) {}

  /** The lock's name. */
  get name(): string {
    return this.core.name;
  }
  /** Who holds it: the Client's identity and a suffix unique to this acquisition. */
  get holder(): string {
    return this.core.holder;
  }
  /** The fencing token: larger than every earlier grant's of the name; the same across renewals. */
  get token(): bigint {
    return this.core.token;
  }
  /** How much of the name's capacity the lease holds: 1 for a lock or a reader, all of it for a writer. */
  get weight(): number {
    return this.core.weight;
  }
  /** The time to live last granted, in milliseconds. */
  get ttl(): number {
    return this.core.ttl;
  }
  /**
   * When the lease stops being valid unless renewed before, on the
   * performance.now() clock: the send time of the last successful grant or
   * renewal, plus the ttl, minus a drift margin. The coordinator's expiry is
   * later.
   */
  get expires(): number {
    return this.core.deadline;
  }
  /** When the last successful grant or renewal was sent (performance.now() ms). */
  get renewedAt(): number {
    return this.core.confirmedAt;
  }
  /** Milliseconds of validity left; 0 once the lease ended. */
  remaining(): number {
    return this.core.ended ? 0 : Math.max(0, this.core.deadline - now());
  }
  /** Aborted the moment the lease ends; its reason is a LeaseEndedError. */
  get signal(): AbortSignal {
    return this.core.controller.signal;
  }
  /** Why the lease ended, or undefined while it is held. */
  get ended(): LeaseEndedError | undefined {
    return this.core.ended;
  }
  /**
   * The session the lease is attached to, which renews it and ends it when
   * it ends; undefined for a lease of its own TTL, renewed on its own.
   */
  get session(): Session | undefined {
    return this.core.session;
  }
  /**
   * release stops renewing the lease (its signal aborts with kind
   * "released") and gives it up on the coordinator, retrying transient
   * errors. It resolves true when the coordinator released it, false when it
   * had already ended or expired there. Calling it again resolves false.
   */
  release(opts: { timeoutMs?: number } = {}): Promise<boolean> {
    return releaseCore(this.keeper, this.core, this.releaseCall, opts.timeoutMs ?? this.releaseTimeoutMs);
  }

  toString(): string {
    if (this.core.kind !== "lock") {
      return `${this.core.kind} ${JSON.stringify(this.name)} held by ${this.holder} with weight ${this.weight} and token ${this.token}`;
    }
    return `lock ${JSON.stringify(this.name)} held by ${this.holder} with token ${this.token}`;
  }
}
