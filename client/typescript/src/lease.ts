// Leases: a lock, a semaphore or read-write lock share, held through a
// Client in one of its sessions, valid while the session is, until it is
// released or the session ends; and what they share with leaderships and
// groups.

import { setMaxListeners } from "node:events";
import { LeaseEndedError, isTransient } from "./errors.js";
import type { LeaseEndKind } from "./errors.js";
import type { Session } from "./session.js";
import type { StreamTransport } from "./stream.js";
import { callBackoff, now, sleep } from "./util.js";

/** What a grant is, for messages. */
export type LeaseKind = "lock" | "semaphore" | "read lock" | "write lock" | "leadership";

/**
 * HeldCore is what every grant held through a Client has, whether of one
 * name (a Lease, a Leadership) or of a group of names (a Group): its holder,
 * the session that keeps it and ends it, its end, and its release.
 */
export abstract class HeldCore {
  /** Set when it ended; the AbortSignal's reason. */
  ended: LeaseEndedError | undefined;
  readonly controller = new AbortController();

  constructor(
    readonly holder: string,
    readonly session: Session,
  ) {
    setMaxListeners(0, this.controller.signal);
  }

  /** How many leases it is on the coordinator: 1, or a group's members. */
  abstract get leaseCount(): number;

  /** describe names it, for messages. */
  abstract describe(): string;

  /** endError is the reason it ended with kind. */
  abstract endError(kind: LeaseEndKind, detail: string, cause?: unknown): LeaseEndedError;

  /** Milliseconds of validity left: the session's; 0 once it ended. */
  remaining(): number {
    return this.ended ? 0 : Math.max(0, this.session.deadline - now());
  }

  /** finish marks it ended with err and aborts its signal. */
  finish(err: LeaseEndedError): void {
    this.ended = err;
    this.controller.abort(err);
  }

  /**
   * release ends it as released, then gives it up on the coordinator with
   * call, retrying transient errors for up to timeoutMs. It resolves true
   * when the coordinator released it now, false when it had already ended
   * (lost, expired, closed, released) or the coordinator no longer held it:
   * a no-op, not an error.
   */
  async release(call: (signal: AbortSignal) => Promise<boolean>, timeoutMs: number): Promise<boolean> {
    const prior = this.session.detach(this, this.endError("released", ""));
    const signal = AbortSignal.timeout(timeoutMs);
    if (prior) {
      // Expired here only: the coordinator may hold it yet, for the waiters' sake give it up there too.
      if (prior.kind === "expired") await call(signal).catch(() => false);
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
}

/** LeaseCore is what a Lease and a Leadership share: a grant on one name. */
export class LeaseCore extends HeldCore {
  constructor(
    readonly kind: LeaseKind,
    readonly name: string,
    holder: string,
    readonly token: bigint,
    /** How much of the name's capacity the grant holds: 1 for a lock or leadership. */
    readonly weight: number,
    session: Session,
  ) {
    super(holder, session);
  }

  get leaseCount(): number {
    return 1;
  }

  describe(): string {
    return `${this.kind} ${JSON.stringify(this.name)} (token ${this.token})`;
  }

  endError(kind: LeaseEndKind, detail: string, cause?: unknown): LeaseEndedError {
    return new LeaseEndedError(kind, this.name, this.token, detail, cause);
  }
}

/** How long release() retries by default. */
export const RELEASE_TIMEOUT = 5000;

/**
 * Held is what a Lease, a Leadership and a Group have alike: the session
 * that keeps them, and so their validity, and their end.
 */
export abstract class Held<C extends HeldCore = HeldCore> {
  /** @internal */
  constructor(
    protected readonly core: C,
    protected readonly transport: StreamTransport,
    protected readonly callTimeoutMs: number,
  ) {}

  /** The TTL of its session, in milliseconds. */
  get ttl(): number {
    return this.core.session.ttl;
  }
  /**
   * When it stops being valid unless its session is renewed before, on the
   * performance.now() clock: its session's deadline. The coordinator's
   * expiry is later.
   */
  get expires(): number {
    return this.core.session.deadline;
  }
  /** When its session's last successful renewal was sent (performance.now() ms). */
  get renewedAt(): number {
    return this.core.session.renewedAt;
  }
  /** Milliseconds of validity left; 0 once it ended. */
  remaining(): number {
    return this.core.remaining();
  }
  /** Aborted the moment it ends; its reason is a LeaseEndedError. */
  get signal(): AbortSignal {
    return this.core.controller.signal;
  }
  /** Why it ended, or undefined while it is held. */
  get ended(): LeaseEndedError | undefined {
    return this.core.ended;
  }
  /** The session it is attached to, which keeps it and ends it when it ends. */
  get session(): Session {
    return this.core.session;
  }
}

/**
 * Lease is a lock (or a semaphore or read-write lock share) held through a
 * Client: an exclusive, time-bounded grant of a name, attached to a session
 * that keeps it alive until it is released or the session ends.
 *
 * Check signal (or pass it on) before and while acting on what the lock
 * protects, and hand token to the protected resource so that it can refuse
 * the writes of an older holder.
 */
export class Lease extends Held<LeaseCore> {
  /** The lock's name. */
  get name(): string {
    return this.core.name;
  }
  /** Who holds it: the Client's identity and a suffix unique to this acquisition. */
  get holder(): string {
    return this.core.holder;
  }
  /** The fencing token: larger than every earlier grant's of the name; the same while held. */
  get token(): bigint {
    return this.core.token;
  }
  /** How much of the name's capacity the lease holds: 1 for a lock or a reader, all of it for a writer. */
  get weight(): number {
    return this.core.weight;
  }
  /**
   * release gives the lease up on the coordinator (its signal aborts with
   * kind "released"), retrying transient errors, and leaves its session as
   * it is. It resolves true when the coordinator released it, false when it
   * was no longer held (lost, expired or released already): a no-op.
   */
  release(opts: { timeoutMs?: number } = {}): Promise<boolean> {
    const { name, holder, token } = this.core;
    return this.core.release(
      async (signal) => (await this.transport.run("release", { name, holder, token }, signal, this.callTimeoutMs)).value.released,
      opts.timeoutMs ?? RELEASE_TIMEOUT,
    );
  }

  override toString(): string {
    if (this.core.kind !== "lock") {
      return `${this.core.kind} ${JSON.stringify(this.name)} held by ${this.holder} with weight ${this.weight} and token ${this.token}`;
    }
    return `lock ${JSON.stringify(this.name)} held by ${this.holder} with token ${this.token}`;
  }
}
