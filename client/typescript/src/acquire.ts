// Acquisitions: asking for a name (a lock, a share, a leadership) over the
// operation stream, attached to a session, waiting and retrying as the
// LockOptions say; and giving up what an acquisition nobody waits for any
// more was granted, so that the next waiter need not wait for the session.

import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Leadership } from "./election.js";
import {
  ClientClosedError,
  CoordinatorError,
  NotAcquiredError,
  SessionEndedError,
  decodeError,
  isTransient,
  msOf,
  outcomeUnknown,
  sessionGone,
} from "./errors.js";
import { Lease, LeaseCore, type LeaseKind } from "./lease.js";
import type { LockOptions } from "./options.js";
import { MAX_WAIT } from "./rules.js";
import type { Session, SessionContext, Sessions } from "./session.js";
import type { Late } from "./stream.js";
import { callBackoff, linkSignals, now, sleep } from "./util.js";

/** The coordinator's answer to one request of an acquisition. */
interface Grant {
  acquired: boolean;
  token: bigint;
  /** Who holds the name, when not acquired. */
  holder: string;
  retryAfter: number | undefined;
  /** The granted weight (1 for a lock). */
  weight: number;
}

/** Ask sends one request of an acquisition as holder, in session, waiting up to wait ms on the coordinator. */
type Ask = (holder: string, session: Session, wait: number, signal: AbortSignal, timeoutMs: number, late: Late) => Promise<Grant>;

const waitOf = (wait: number) => (wait > 0 ? durationFromMs(wait) : undefined);

/** Acquirer runs a Client's acquisitions, each as a new holder: identity + "#" + a sequence number. */
export class Acquirer {
  private seq = 0;

  constructor(
    private readonly ctx: SessionContext,
    private readonly sessions: Sessions,
    private readonly identity: string,
  ) {}

  /** share acquires weight of name of capacity (0 and 0 for a lock). */
  async share(kind: LeaseKind, name: string, capacity: number, weight: number, opts: LockOptions): Promise<Lease> {
    const core = await this.acquire(kind, name, opts, async (holder, session, wait, signal, timeoutMs, late) => {
      const req = { name, holder, ttl: durationFromMs(session.ttl), wait: waitOf(wait), capacity, weight, sessionId: session.id };
      const { value: r } = await this.ctx.transport.run("acquire", req, signal, timeoutMs, late);
      return {
        acquired: r.acquired,
        token: r.lease?.token ?? 0n,
        holder: r.holder,
        retryAfter: msOf(r.retryAfter),
        weight: Math.max(r.lease?.weight ?? 1, 1),
      };
    });
    return new Lease(core, this.ctx.transport, this.ctx.callTimeoutMs);
  }

  /** campaign runs for leadership of election with value. */
  async campaign(election: string, value: Uint8Array, opts: LockOptions): Promise<Leadership> {
    const core = await this.acquire("leadership", election, opts, async (candidate, session, wait, signal, timeoutMs, late) => {
      const req = { election, candidate, value, ttl: durationFromMs(session.ttl), wait: waitOf(wait), sessionId: session.id };
      const { value: r } = await this.ctx.transport.run("campaign", req, signal, timeoutMs, late);
      return {
        acquired: r.elected,
        token: r.leader?.term ?? 0n,
        holder: r.elected ? "" : (r.leader?.candidate ?? ""),
        retryAfter: msOf(r.retryAfter),
        weight: 1,
      };
    });
    return new Leadership(core, this.ctx.transport, value, this.ctx.callTimeoutMs);
  }

  /**
   * acquire runs an acquisition in its session (opts.session, else the
   * Client's default one): once (wait 0) or until granted or the wait ends.
   * One attached to the default session that finds it gone (ended here,
   * or the coordinator says so) starts over once with a new default
   * session.
   */
  private async acquire(kind: LeaseKind, name: string, opts: LockOptions, ask: Ask): Promise<LeaseCore> {
    if (this.ctx.closing.aborted) throw new ClientClosedError();
    const wait = opts.wait ?? Infinity;
    if (!(wait >= 0)) throw new TypeError(`coordinator: wait ${wait} is negative`);
    const waitEnd = now() + wait;
    const linked = linkSignals(opts.signal, this.ctx.closing);
    try {
      for (let attempt = 1; ; attempt++) {
        let resolved: { session: Session; implicit: boolean };
        try {
          resolved = await this.sessions.resolve(opts.session, linked.signal, waitEnd);
        } catch (e) {
          if (this.ctx.closing.aborted) throw new ClientClosedError();
          if (linked.signal.aborted) throw new NotAcquiredError(name, "", undefined, linked.signal.reason);
          // The wait ran out while the coordinator or its store failed.
          if (wait > 0 && isTransient(e)) throw new NotAcquiredError(name, "", (e as CoordinatorError).retryAfter, e);
          throw e;
        }
        const { session, implicit } = resolved;
        try {
          return await this.acquireIn(kind, name, session, wait, waitEnd, linked.signal, ask);
        } catch (e) {
          if (sessionGone(e)) session.lose(e);
          if (implicit && attempt === 1 && (sessionGone(e) || e instanceof SessionEndedError)) continue;
          throw e;
        }
      }
    } finally {
      linked.dispose();
    }
  }

  private async acquireIn(
    kind: LeaseKind,
    name: string,
    session: Session,
    wait: number,
    waitEnd: number,
    signal: AbortSignal,
    ask: Ask,
  ): Promise<LeaseCore> {
    const holder = `${this.identity}#${++this.seq}`;
    const b = callBackoff();
    let lastErr: unknown;
    for (;;) {
      const waitFor = Math.max(0, Math.min(MAX_WAIT, Math.floor(waitEnd - now())));
      const sent = now();
      let g: Grant;
      try {
        if (signal.aborted) throw signal.reason;
        g = await ask(holder, session, waitFor, signal, waitFor + this.ctx.callTimeoutMs, this.lateOutcome(name, holder));
      } catch (e) {
        const err: unknown = signal.aborted ? (signal.reason as unknown) : decodeError(e);
        const retry = !signal.aborted && wait > 0 && isTransient(err);
        if (retry && now() < waitEnd) {
          lastErr = err;
          this.ctx.warn(`coordinator: acquiring ${kind} ${JSON.stringify(name)} failed; retrying`, err);
          const delay = Math.min(Math.max(b.delay(), (err as CoordinatorError).retryAfter ?? 0), Math.max(0, waitEnd - now()));
          if (await sleep(delay, signal)) continue; // as the same holder: a lost grant is found again
        }
        if (signal.aborted || outcomeUnknown(err)) this.abandon(name, holder);
        if (this.ctx.closing.aborted) throw new ClientClosedError();
        if (signal.aborted) throw new NotAcquiredError(name, "", undefined, signal.reason ?? lastErr);
        // The wait ran out while the coordinator or its store failed.
        if (retry) throw new NotAcquiredError(name, "", (err as CoordinatorError).retryAfter, err);
        throw err;
      }
      if (!g.acquired) {
        if (wait === 0 || now() >= waitEnd) throw new NotAcquiredError(name, g.holder, g.retryAfter);
        // Answered long before the wait was over (a coordinator shutting down?): do not spin.
        if (now() - sent < waitFor / 2) await sleep(b.delay(), signal);
        continue;
      }
      const core = new LeaseCore(kind, name, holder, g.token, g.weight, session);
      try {
        session.attach(core);
      } catch (e) {
        // The session ended meanwhile, and the grant with it, or it does
        // with the session's close: give it up anyway, for the waiters.
        this.giveUp(kind, name, holder, g.token);
        throw e;
      }
      return core;
    }
  }

  /**
   * lateOutcome handles the outcome of an acquisition whose caller left
   * while it was in flight on the operation stream: a grant is given up at
   * once; an unknown outcome is abandoned.
   */
  private lateOutcome(name: string, holder: string): Late {
    return (res, err) => {
      const r = res?.result;
      if (r?.case === "acquire" && r.value.acquired && r.value.lease) {
        this.giveUp("lock", name, holder, r.value.lease.token);
      } else if (r?.case === "campaign" && r.value.elected && r.value.leader) {
        this.giveUp("leadership", name, holder, r.value.leader.term);
      } else if (err !== undefined && outcomeUnknown(decodeError(err))) {
        this.abandon(name, holder);
      }
    };
  }

  /** giveUp releases (or resigns) a grant nobody holds, in the background. */
  private giveUp(kind: LeaseKind, name: string, holder: string, token: bigint): void {
    if (this.ctx.closing.aborted) return; // close() closes the sessions, which releases it
    const signal = AbortSignal.timeout(RELEASE_LATE_TIMEOUT);
    const done =
      kind === "leadership"
        ? this.ctx.transport.run("resign", { election: name, candidate: holder, term: token }, signal, RELEASE_LATE_TIMEOUT)
        : this.ctx.transport.run("release", { name, holder, token }, signal, RELEASE_LATE_TIMEOUT);
    done.catch((e: unknown) =>
      this.ctx.warn(`coordinator: could not give up ${JSON.stringify(name)}, granted after its acquisition was abandoned; it ends with its session`, e),
    );
  }

  /**
   * abandon gives up a lease that an acquisition may have been granted
   * without hearing of it (the call failed after it was sent), so that
   * others need not wait for its session. Best-effort, in the background.
   */
  private abandon(name: string, holder: string): void {
    if (this.ctx.closing.aborted) return;
    void (async () => {
      const signal = AbortSignal.timeout(RELEASE_LATE_TIMEOUT);
      const d = await this.ctx.api.describe({ name }, { signal });
      // A semaphore's holder may be any of its grants.
      const mine = [...d.holders, ...(d.lease ? [d.lease] : [])].find((l) => l.holder === holder);
      if (mine === undefined) return;
      // A leadership is a lease of the election's name: Release gives it up too.
      this.giveUp("lock", name, holder, mine.token);
    })().catch(() => undefined);
  }
}

/** How long giving up a late or abandoned grant may take. */
const RELEASE_LATE_TIMEOUT = 5000;
