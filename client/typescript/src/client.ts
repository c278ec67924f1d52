// The Client: one connection to a coordinator, its one operation stream,
// its sessions, and what is held in them.

import { setMaxListeners } from "node:events";
import { Acquirer } from "./acquire.js";
import { connect, type Connection, type CoordinatorApi } from "./api.js";
import type { Leadership } from "./election.js";
import { ClientClosedError } from "./errors.js";
import { groupMembers, type Group, type Member } from "./group.js";
import { runAsLeader, type LeaderFn } from "./leader.js";
import type { Lease } from "./lease.js";
import { describe, list, type LeaseInfo, type NameState, type ReadOptions } from "./names.js";
import { leaderInfo, observe, type LeaderEvent, type LeaderInfo } from "./observe.js";
import {
  checkIdentity,
  checkTtl,
  defaultIdentity,
  endpoint,
  type ClientOptions,
  type LockOptions,
  type RunAsLeaderOptions,
  type SessionOptions,
  type TryLockOptions,
} from "./options.js";
import { CLOSE_TIMEOUT, DEFAULT_TTL } from "./rules.js";
import { RWLock, Semaphore, orUndefined } from "./semaphore.js";
import { Sessions, type Session, type SessionContext } from "./session.js";
import { StreamTransport } from "./stream.js";
import { linkSignals, toBytes } from "./util.js";

/** The TTL of a Client's default session when the Client sets none: 15 s (ClientRules.default_ttl_millis). */
export { DEFAULT_TTL };

/**
 * Client talks to one coordinator. Make one per process and share it; close
 * it when done: close() ends every session it made, and every lease and
 * leadership in them, and closes them on the coordinator.
 *
 * Everything the Client holds is attached to a session: the one given as
 * the session option, or the Client's default session, made on first need
 * with the Client's ttl (a Client that only reads makes none) and replaced
 * once it ended. The sessions are renewed over the Client's one operation
 * stream, which also carries every acquisition, release, campaign and
 * resignation.
 */
export class Client {
  /** The prefix of every holder and candidate of this Client. */
  readonly identity: string;
  /**
   * The raw API (the generated Connect client) on this Client's connection,
   * with its token, throwing decoded CoordinatorErrors: for what the Client
   * does not wrap. Leases acquired through it are not renewed.
   */
  readonly api: CoordinatorApi;

  private readonly conn: Connection;
  private readonly closing = new AbortController();
  private readonly ctx: SessionContext;
  private readonly sessions: Sessions;
  private readonly acquirer: Acquirer;
  private readonly closeTimeoutMs: number;
  private closePromise: Promise<void> | undefined;

  constructor(opts: ClientOptions) {
    const { baseUrl, tls } = endpoint(opts);
    this.identity = opts.holder ?? defaultIdentity();
    checkIdentity(this.identity);
    const ttl = Math.round(opts.ttl ?? DEFAULT_TTL);
    checkTtl(ttl);
    this.closeTimeoutMs = opts.closeTimeoutMs ?? CLOSE_TIMEOUT;
    this.conn = connect(baseUrl, tls, opts.token);
    this.api = this.conn.api;
    // Every call in flight listens to it.
    setMaxListeners(0, this.closing.signal);
    const warn = opts.onWarn ?? (() => undefined);
    this.ctx = {
      api: this.api,
      transport: new StreamTransport(this.api, this.closing.signal, warn),
      closing: this.closing.signal,
      callTimeoutMs: opts.callTimeoutMs ?? 10_000,
      warn,
    };
    this.sessions = new Sessions(this.ctx, ttl);
    this.acquirer = new Acquirer(this.ctx, this.sessions, this.identity);
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.closing.signal.aborted;
  }

  /** The TTL of the Client's default session, in milliseconds. */
  get ttl(): number {
    return this.sessions.ttl;
  }

  /**
   * tryLock acquires the lock name if it is free (and nobody is queued for
   * it), without waiting; undefined when someone else holds it. Other
   * errors are the coordinator's (CoordinatorError) or ClientClosedError.
   * The lease lives as long as its session, until released.
   */
  tryLock(name: string, opts: TryLockOptions = {}): Promise<Lease | undefined> {
    return orUndefined(this.lock(name, { ...opts, wait: 0 }));
  }

  /**
   * lock acquires the lock name, waiting up to opts.wait (default: without
   * end) in arrival order with the other waiters, and retrying transient
   * errors meanwhile. Not granted in time: NotAcquiredError naming the
   * holder and when to retry.
   */
  lock(name: string, opts: LockOptions = {}): Promise<Lease> {
    return this.acquirer.share("lock", name, 0, 0, opts);
  }

  /**
   * lockAll acquires the locks names all at once, as one Group: every one
   * of them or none, each with its own fencing token. It waits up to
   * opts.wait (default: without end), in arrival order in the queue of
   * every name at once: a later request of one of the names waits behind
   * it, and groups never deadlock, whatever order their names are listed
   * in. Transient errors are retried meanwhile. Not granted in time:
   * NotAcquiredError naming a name in the way and its holder. Names listed
   * twice, none or more than MAX_GROUP_MEMBERS: TypeError.
   */
  async lockAll(names: readonly string[], opts: LockOptions = {}): Promise<Group> {
    return this.acquireAll(names.map((name) => ({ name })), opts);
  }

  /** tryLockAll acquires the locks names all at once if every one is free now (and nobody waits); undefined otherwise. */
  tryLockAll(names: readonly string[], opts: TryLockOptions = {}): Promise<Group | undefined> {
    return orUndefined(this.lockAll(names, { ...opts, wait: 0 }));
  }

  /**
   * acquireAll acquires members all at once, as lockAll does names: each a
   * name with the share of it to hold (weight of capacity, 0 or absent
   * meaning 1), so that a lock, semaphore shares and read or write sides
   * of read-write locks (capacity RW_CAPACITY) can be held together.
   */
  async acquireAll(members: readonly Member[], opts: LockOptions = {}): Promise<Group> {
    return this.acquirer.group(groupMembers(members), opts);
  }

  /** tryAcquireAll acquires members all at once if every one fits now; undefined otherwise. */
  tryAcquireAll(members: readonly Member[], opts: TryLockOptions = {}): Promise<Group | undefined> {
    return orUndefined(this.acquireAll(members, { ...opts, wait: 0 }));
  }

  /**
   * semaphore returns the semaphore name of capacity (1 to MAX_CAPACITY):
   * shares whose weights sum to at most the capacity, each a Lease of its
   * own (see Semaphore). Every user of the name must agree on capacity.
   */
  semaphore(name: string, capacity: number): Semaphore {
    return new Semaphore(this.acquirer, name, capacity);
  }

  /** rwlock returns the read-write lock name: many readers at once, or one writer (see RWLock). */
  rwlock(name: string): RWLock {
    return new RWLock(this.acquirer, name);
  }

  /**
   * withLock acquires the lock name (as lock does), calls fn with the lease
   * and an AbortSignal that aborts when the lease ends (its session lost,
   * or about to expire unrenewed: before the coordinator could grant it to
   * anyone else), and releases the lease once fn settles. It returns what
   * fn returns. Release errors go to onWarn: the lease then ends with its
   * session.
   */
  async withLock<T>(name: string, fn: (lease: Lease, signal: AbortSignal) => T | Promise<T>, opts: LockOptions = {}): Promise<T> {
    const lease = await this.lock(name, opts);
    try {
      return await fn(lease, lease.signal);
    } finally {
      await lease.release().catch((e: unknown) => this.ctx.warn(`coordinator: could not release ${lease.toString()}`, e));
    }
  }

  /**
   * campaign runs for leadership of election with value, waiting up to
   * opts.wait (default: without end) in arrival order with the other
   * candidates. Not elected in time: NotAcquiredError naming the leader.
   * The leadership lives as long as its session, until resigned.
   */
  campaign(election: string, value: string | Uint8Array, opts: LockOptions = {}): Promise<Leadership> {
    return this.acquirer.campaign(election, toBytes(value), opts);
  }

  /**
   * runAsLeader campaigns for election and, each time it is elected, runs fn
   * with the leadership and a signal that aborts the moment the leadership
   * ends (or opts.signal aborts). When fn returns it resigns, so that the
   * next candidate takes over at once, and campaigns again, until
   * opts.signal aborts or the Client closes; then it resolves. When fn
   * returns soon (under a minute) while still leader, the next campaign
   * waits a backoff (100 ms, doubling, at most 30 s).
   *
   * What fn throws goes to opts.onError; without one, runAsLeader resigns
   * and rejects with it.
   */
  async runAsLeader(election: string, fn: LeaderFn, opts: RunAsLeaderOptions = {}): Promise<void> {
    const linked = linkSignals(opts.signal, this.closing.signal);
    const { session, wait } = opts;
    try {
      await runAsLeader((signal) => this.campaign(election, opts.value ?? "", { session, wait, signal }), fn, opts.onError, linked.signal);
    } finally {
      linked.dispose();
    }
  }

  /**
   * session creates a session of opts.ttl (default: the Client's ttl) on
   * the coordinator and renews it in the background until its close(), its
   * loss or the Client's close(). Attach leases to it with the session
   * option.
   */
  async session(opts: SessionOptions = {}): Promise<Session> {
    if (this.closed) throw new ClientClosedError();
    const ttl = Math.round(opts.ttl ?? this.ttl);
    checkTtl(ttl);
    return this.sessions.create(ttl, opts.signal);
  }

  /**
   * defaultSession returns the session that acquisitions and campaigns
   * without a session option attach to, creating it (with the Client's ttl)
   * when there is none yet or the last one ended.
   */
  async defaultSession(): Promise<Session> {
    if (this.closed) throw new ClientClosedError();
    return this.sessions.default();
  }

  /** leader returns the sitting leader of election, or undefined when it has none. */
  async leader(election: string, opts: { signal?: AbortSignal } = {}): Promise<LeaderInfo | undefined> {
    const resp = await this.read(opts.signal, (o) => this.api.leader({ election }, o));
    return resp.hasLeader && resp.leader ? leaderInfo(resp.leader) : undefined;
  }

  /**
   * observe yields the state of election's leadership (initial: true), then
   * every change in order, reconnecting when the stream breaks. On a
   * semaphore or read-write lock every event is "holders": its whole set
   * of grants and its capacity. It ends when opts.signal aborts, the loop
   * breaks, or the Client closes.
   */
  observe(election: string, opts: { signal?: AbortSignal } = {}): AsyncIterable<LeaderEvent> {
    return observe(this.api, election, [opts.signal, this.closing.signal], this.ctx.warn);
  }

  /** describe reports name's current grants, the last token issued and the waiters. */
  describe(name: string, opts: { signal?: AbortSignal } = {}): Promise<NameState> {
    return this.read(opts.signal, (o) => describe(this.api, name, o));
  }

  /**
   * list yields every grant held under prefix (every one the credential may
   * see when empty), in name order, a semaphore's in token order: one List
   * call per page of opts.pageSize names (default 100), each within the call
   * timeout.
   */
  async *list(prefix: string, opts: { pageSize?: number; signal?: AbortSignal } = {}): AsyncGenerator<LeaseInfo, void, undefined> {
    if (this.closed) throw new ClientClosedError();
    const linked = linkSignals(opts.signal, this.closing.signal);
    try {
      yield* list(this.api, prefix, opts.pageSize ?? 0, () => ({ signal: linked.signal, timeoutMs: this.ctx.callTimeoutMs }));
    } finally {
      linked.dispose();
    }
  }

  /**
   * close ends every session the Client made, and every lease and
   * leadership in them (their signals abort with kind "closed"), closes
   * them on the coordinator (one CloseSession each, which releases their
   * leases) for up to closeTimeoutMs, ends the observers and calls in
   * progress, and closes the connection.
   */
  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  private async doClose(): Promise<void> {
    this.closing.abort(new ClientClosedError());
    // Ends the stream, which gives up the coordinator's waits.
    this.ctx.transport.close();
    await this.sessions.closeAll(this.closeTimeoutMs > 0 ? AbortSignal.timeout(this.closeTimeoutMs) : undefined);
    this.conn.close();
  }

  /** read makes a call that ends with signal or close(), within the call timeout. */
  private async read<T>(signal: AbortSignal | undefined, call: (o: ReadOptions) => Promise<T>): Promise<T> {
    if (this.closed) throw new ClientClosedError();
    const linked = linkSignals(signal, this.closing.signal);
    try {
      return await call({ signal: linked.signal, timeoutMs: this.ctx.callTimeoutMs });
    } finally {
      linked.dispose();
    }
  }
}
