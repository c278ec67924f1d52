// Acquisitions: asking for a name (a lock, a share, a leadership) or a
// group of names over the operation stream, attached to a session, waiting
// and retrying as the LockOptions say; and giving up what an acquisition
// nobody waits for any more was granted, so that the next waiter need not
// wait for the session. Every kind runs the same acquire loop; a Target
// says how to ask for it and how to give it up.

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
import type { Lease as PbLease, StreamResult } from "./gen/coordinator/v1/coordinator_pb.js";
import { Group, GroupCore, type GroupLease } from "./group.js";
import { Lease, LeaseCore, type HeldCore, type LeaseKind } from "./lease.js";
import type { LockOptions } from "./options.js";
import { MAX_WAIT } from "./rules.js";
import type { Session, SessionContext, Sessions } from "./session.js";
import type { Late } from "./stream.js";
import { callBackoff, linkSignals, now, sleep } from "./util.js";

/** The coordinator's answer to one request of an acquisition: what it granted, or what is in the way. */
type Answer<G> =
  | { acquired: true; granted: G }
  | {
      acquired: false;
      /** The name not granted (a group's member in the way). */
      blocked: string;
      /** Who holds it; empty when the coordinator did not say. */
      holder: string;
      retryAfter: number | undefined;
    };

/**
 * Target is what an acquisition asks for (a name, an election, a group of
 * names) and how to give up what it is granted: all that acquire needs to
 * know of it. G is a grant, as giving it up needs it.
 */
interface Target<G> {
  /** For messages: lock "x", group "a", "b". */
  readonly what: string;
  /** The name a NotAcquiredError names when the coordinator named none. */
  readonly name: string;
  /** ask sends one request as holder, in session, waiting up to wait ms on the coordinator. */
  ask(holder: string, session: Session, wait: number, signal: AbortSignal, timeoutMs: number, late: Late): Promise<Answer<G>>;
  /** grantIn is the grant that a result of ask's operation carries, if it carries one. */
  grantIn(res: StreamResult): G | undefined;
  /** giveUp gives holder's grant g up on the coordinator. */
  giveUp(holder: string, g: G, signal: AbortSignal): Promise<unknown>;
  /** heldBy is what holder holds of the target now, as Describe reports it; undefined when nothing. */
  heldBy(holder: string, signal: AbortSignal): Promise<G | undefined>;
}

/** A grant of one name. */
interface NameGrant {
  token: bigint;
  /** The granted weight (1 for a lock or a leadership). */
  weight: number;
}

/** Make makes a grant G of holder in session into what the caller holds. */
type Make<G, C extends HeldCore> = (holder: string, session: Session, g: G) => C;

const waitOf = (wait: number) => (wait > 0 ? durationFromMs(wait) : undefined);

const leasesOf = (ls: readonly PbLease[]): GroupLease[] => ls.map((l) => Object.freeze({ name: l.name, token: l.token, weight: Math.max(l.weight, 1) }));

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
    const { transport } = this.ctx;
    const target: Target<NameGrant> = {
      what: `${kind} ${JSON.stringify(name)}`,
      name,
      ask: async (holder, session, wait, signal, timeoutMs, late) => {
        const req = { name, holder, ttl: durationFromMs(session.ttl), wait: waitOf(wait), capacity, weight, sessionId: session.id };
        const { value: r } = await transport.run("acquire", req, signal, timeoutMs, late);
        if (!r.acquired) return { acquired: false, blocked: name, holder: r.holder, retryAfter: msOf(r.retryAfter) };
        return { acquired: true, granted: { token: r.lease?.token ?? 0n, weight: Math.max(r.lease?.weight ?? 1, 1) } };
      },
      grantIn: (res) => {
        const r = res.result;
        return r.case === "acquire" && r.value.acquired && r.value.lease ? { token: r.value.lease.token, weight: Math.max(r.value.lease.weight, 1) } : undefined;
      },
      giveUp: (holder, g, signal) => transport.run("release", { name, holder, token: g.token }, signal, RELEASE_LATE_TIMEOUT),
      heldBy: (holder, signal) => this.heldOf(name, holder, signal),
    };
    const core = await this.acquire(target, opts, (holder, session, g) => new LeaseCore(kind, name, holder, g.token, g.weight, session));
    return new Lease(core, transport, this.ctx.callTimeoutMs);
  }

  /** campaign runs for leadership of election with value. */
  async campaign(election: string, value: Uint8Array, opts: LockOptions): Promise<Leadership> {
    const { transport } = this.ctx;
    const target: Target<NameGrant> = {
      what: `leadership ${JSON.stringify(election)}`,
      name: election,
      ask: async (candidate, session, wait, signal, timeoutMs, late) => {
        const req = { election, candidate, value, ttl: durationFromMs(session.ttl), wait: waitOf(wait), sessionId: session.id };
        const { value: r } = await transport.run("campaign", req, signal, timeoutMs, late);
        if (!r.elected) return { acquired: false, blocked: election, holder: r.leader?.candidate ?? "", retryAfter: msOf(r.retryAfter) };
        return { acquired: true, granted: { token: r.leader?.term ?? 0n, weight: 1 } };
      },
      grantIn: (res) => {
        const r = res.result;
        return r.case === "campaign" && r.value.elected && r.value.leader ? { token: r.value.leader.term, weight: 1 } : undefined;
      },
      giveUp: (candidate, g, signal) => transport.run("resign", { election, candidate, term: g.token }, signal, RELEASE_LATE_TIMEOUT),
      // A leadership is a lease of the election's name.
      heldBy: (candidate, signal) => this.heldOf(election, candidate, signal),
    };
    const core = await this.acquire(target, opts, (candidate, session, g) => new LeaseCore("leadership", election, candidate, g.token, 1, session));
    return new Leadership(core, transport, value, this.ctx.callTimeoutMs);
  }

  /**
   * group acquires members (checked by groupMembers) all at once: one
   * acquire_group operation per request, which the coordinator grants
   * whole or not at all, and whose waiting place is in the queue of every
   * member.
   */
  async group(members: { name: string; capacity: number; weight: number }[], opts: LockOptions): Promise<Group> {
    const { transport } = this.ctx;
    const names = members.map((m) => m.name);
    const target: Target<GroupLease[]> = {
      what: `group ${names.map((n) => JSON.stringify(n)).join(", ")}`,
      name: names[0] ?? "",
      ask: async (holder, session, wait, signal, timeoutMs, late) => {
        const req = { members, holder, ttl: durationFromMs(session.ttl), wait: waitOf(wait), sessionId: session.id };
        const { value: r } = await transport.run("acquireGroup", req, signal, timeoutMs, late);
        if (!r.acquired) return { acquired: false, blocked: r.blockedName || (names[0] ?? ""), holder: r.holder, retryAfter: msOf(r.retryAfter) };
        return { acquired: true, granted: leasesOf(r.leases) };
      },
      grantIn: (res) => {
        const r = res.result;
        return r.case === "acquireGroup" && r.value.acquired ? leasesOf(r.value.leases) : undefined;
      },
      giveUp: (holder, leases, signal) =>
        transport.run("releaseGroup", { holder, leases: leases.map(({ name, token }) => ({ name, token })) }, signal, RELEASE_LATE_TIMEOUT),
      // What a group waiting on several Redis Cluster slots holds of them, too.
      // A name Describe failed for is left to the session.
      heldBy: async (holder, signal) => {
        const held = await Promise.allSettled(names.map(async (name) => ({ name, grant: await this.heldOf(name, holder, signal) })));
        const leases = held.flatMap((h) => (h.status === "fulfilled" && h.value.grant ? [{ name: h.value.name, ...h.value.grant }] : []));
        return leases.length > 0 ? leases : undefined;
      },
    };
    const core = await this.acquire(target, opts, (holder, session, leases) => new GroupCore(holder, leases, session));
    return new Group(core, transport, this.ctx.callTimeoutMs);
  }

  /**
   * acquire runs an acquisition of target in its session (opts.session,
   * else the Client's default one): once (wait 0) or until granted or the
   * wait ends, and makes the grant into what the caller holds with make.
   * One attached to the default session that finds it gone (ended here,
   * or the coordinator says so) starts over once with a new default
   * session.
   */
  private async acquire<G, C extends HeldCore>(target: Target<G>, opts: LockOptions, make: Make<G, C>): Promise<C> {
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
          if (linked.signal.aborted) throw new NotAcquiredError(target.name, "", undefined, linked.signal.reason);
          // The wait ran out while the coordinator or its store failed.
          if (wait > 0 && isTransient(e)) throw new NotAcquiredError(target.name, "", (e as CoordinatorError).retryAfter, e);
          throw e;
        }
        const { session, implicit } = resolved;
        try {
          return await this.acquireIn(target, session, wait, waitEnd, linked.signal, make);
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

  private async acquireIn<G, C extends HeldCore>(
    target: Target<G>,
    session: Session,
    wait: number,
    waitEnd: number,
    signal: AbortSignal,
    make: Make<G, C>,
  ): Promise<C> {
    const holder = `${this.identity}#${++this.seq}`;
    const b = callBackoff();
    let lastErr: unknown;
    for (;;) {
      const waitFor = Math.max(0, Math.min(MAX_WAIT, Math.floor(waitEnd - now())));
      const sent = now();
      let a: Answer<G>;
      try {
        if (signal.aborted) throw signal.reason;
        a = await target.ask(holder, session, waitFor, signal, waitFor + this.ctx.callTimeoutMs, this.lateOutcome(target, holder));
      } catch (e) {
        const err: unknown = signal.aborted ? (signal.reason as unknown) : decodeError(e);
        const retry = !signal.aborted && wait > 0 && isTransient(err);
        if (retry && now() < waitEnd) {
          lastErr = err;
          this.ctx.warn(`coordinator: acquiring ${target.what} failed; retrying`, err);
          const delay = Math.min(Math.max(b.delay(), (err as CoordinatorError).retryAfter ?? 0), Math.max(0, waitEnd - now()));
          if (await sleep(delay, signal)) continue; // as the same holder: a lost grant is found again
        }
        if (signal.aborted || outcomeUnknown(err)) this.abandon(target, holder);
        if (this.ctx.closing.aborted) throw new ClientClosedError();
        if (signal.aborted) throw new NotAcquiredError(target.name, "", undefined, signal.reason ?? lastErr);
        // The wait ran out while the coordinator or its store failed.
        if (retry) throw new NotAcquiredError(target.name, "", (err as CoordinatorError).retryAfter, err);
        throw err;
      }
      if (!a.acquired) {
        if (wait === 0 || now() >= waitEnd) throw new NotAcquiredError(a.blocked, a.holder, a.retryAfter);
        // Answered long before the wait was over (a coordinator shutting down?): do not spin.
        if (now() - sent < waitFor / 2) await sleep(b.delay(), signal);
        continue;
      }
      const core = make(holder, session, a.granted);
      try {
        session.attach(core);
      } catch (e) {
        // The session ended meanwhile, and the grant with it, or it does
        // with the session's close: give it up anyway, for the waiters.
        this.giveUp(target, holder, a.granted);
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
  private lateOutcome<G>(target: Target<G>, holder: string): Late {
    return (res, err) => {
      const g = res === undefined ? undefined : target.grantIn(res);
      if (g !== undefined) {
        this.giveUp(target, holder, g);
      } else if (err !== undefined && outcomeUnknown(decodeError(err))) {
        this.abandon(target, holder);
      }
    };
  }

  /** giveUp releases (or resigns) a grant nobody holds, in the background. */
  private giveUp<G>(target: Target<G>, holder: string, g: G): void {
    if (this.ctx.closing.aborted) return; // close() closes the sessions, which releases it
    target
      .giveUp(holder, g, AbortSignal.timeout(RELEASE_LATE_TIMEOUT))
      .catch((e: unknown) =>
        this.ctx.warn(`coordinator: could not give up ${target.what}, granted after its acquisition was abandoned; it ends with its session`, e),
      );
  }

  /**
   * abandon gives up what an acquisition may have been granted without
   * hearing of it (the call failed after it was sent), so that others need
   * not wait for its session. Best-effort, in the background.
   */
  private abandon<G>(target: Target<G>, holder: string): void {
    if (this.ctx.closing.aborted) return;
    void (async () => {
      const g = await target.heldBy(holder, AbortSignal.timeout(RELEASE_LATE_TIMEOUT));
      if (g !== undefined) this.giveUp(target, holder, g);
    })().catch(() => undefined);
  }

  /** heldOf is holder's grant of name, as Describe reports it; undefined when holder holds none. */
  private async heldOf(name: string, holder: string, signal: AbortSignal): Promise<NameGrant | undefined> {
    const d = await this.ctx.api.describe({ name }, { signal });
    // A semaphore's holder may be any of its grants.
    const mine = [...d.holders, ...(d.lease ? [d.lease] : [])].find((l) => l.holder === holder);
    return mine === undefined ? undefined : { token: mine.token, weight: Math.max(mine.weight, 1) };
  }
}

/** How long giving up a late or abandoned grant may take. */
const RELEASE_LATE_TIMEOUT = 5000;
